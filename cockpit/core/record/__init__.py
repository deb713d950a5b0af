"""What a run leaves behind, and reading it back.

- `runlog`: the recorder (telemetry CSVs, each job's memory to the leak watch) and run.toml,
  written atomically;
- `replay`: a finished or killed run played back as the same `RunSource` a live one is;
- `series`: a recorded run as the series `report --html` plots;
- `find_runs`: the runs under a directory, newest first, and a run by its name;
- `run_report`: a run read back for `cockpit report`, and the object `report --json` prints;
- `playable`: the model `cockpit play` plays (a job's, a fleet's best, a collected model), checked
  against its SHA-256;
- `clips`: the clips a run holds (each job's `videos/`, a fleet's model clips), for the report.

Imports `fleet` and everything below it.
"""
