"""How many jobs, envs and batch: measured, modelled and advised.

- `advisor`: pure: hardware, preset and measurements in, `Advice` out;
- `overlap`: the overlap model: N jobs' speed from one job's measured costs;
- `devices`: the overlap model for a mix of CUDA and CPU jobs (`run --devices`);
- `cost_probe`: running `cockpit_training.probe` and caching its `Costs` per machine and preset;
- `contention`: two jobs side by side, to measure what sharing cores costs;
- `starting_point`: this machine, the preset asked for and recommend's static pick;
- `autotune`: `run --auto`, adjusting a live run from its snapshots;
- `tune_search`: `cockpit tune`'s time-boxed search, the command's one entry (`search`);
- `hill_climb`, `trials`: the climb it makes and the short trial runs it scores;
- `mps_gains`: what MPS gained on this machine, measured by tune and `--auto`, remembered;
- `progress`: long work's steps and the time each is expected to take.

Imports `feed`, `launch`, `telemetry` and `machine` below it (never `supervise`).
"""
