"""A run's life: its front door, its start-up, the 5 Hz loop that ties the rest together, and runs
in the background.

- `start`: the front door `run` and `fleet` call with what they parsed and a front end: the GPUs,
  the spec, the refusals before anything starts, then the background or the session here;
- `front_ends`: the `FrontEnds` a command hands a run to, and `watch_run`, the cockpit on a live or
  finished run (`attach`'s door, which loads no launcher, sampler or supervisor);
- `startup`: `start_session`, everything a `RunSession` runs with, built in one order;
- `run_session`: `RunSession` and `run_on_launcher`: opens the launcher and sampler, ticks the
  supervisor, the recorder, TensorBoard, `--auto` and the control socket, and ends the run cleanly;
- `background`: `cockpit run --headless` detached from the terminal, and the wait for its socket;
- `mps_session`: `--mps` around a run's or a fleet's session: the refusal, the daemon opened and stopped;
- `compute_modes`: how the GPUs' compute modes bound a run's jobs, before it starts;
- `on_done`: `--on-done CMD`, run once when the run ends;
- `clips`: clips recorded beside a run by niced players, one at a time from a thread:
  `--video-every`, a fleet's `[video] top = K`, and the cockpit's clip key.

The top of `cockpit.core`: it may import every package below it, and none imports it.
"""
