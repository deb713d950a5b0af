"""A run handed to the tracking tools.

- `run_export`: a run read for a tracking system: per job its params, metrics at its steps, tags
  and final model;
- `mlflow`: those as MLflow runs through MLflow's own client (`mlflow` imported lazily);
- `tensorboard`: each job's cockpit scalars (SPS, CPU and GPU by phase) for TensorBoard
  (`tensorboard` imported lazily);
- `tb_video`: a clip into a job's TensorBoard as an animated GIF image summary, as torch's
  `add_video` writes it.

Imports `record` and everything below it.
"""
