"""What crosses a process or outlives one, typed, each in one home: job events, run.toml, the run
directory's paths, the worker's and a user script's command lines, a validated run, presets, fleet
plans, the controls a viewer sends, advice, the probe's costs. Imports nothing else of cockpit's,
so the worker (`cockpit_training`) can import it without the cockpit.

- `events`: the job event stream (`events.jsonl`), one frozen dataclass per event;
- `states`: the states a job and a run can be in;
- `rundir`: every path a run directory holds; `runrecord`: run.toml, typed;
- `runspec`: a validated run (`RunSpec`), checked before anything starts;
- `workerargs`, `scriptargs`: the worker's and a user script's command lines and environments;
- `arguments`: the command-line parsing `cockpit` and the worker share (one line, exit 2);
- `presets`: PPO hyperparameters as validated TOML; `envids`: which library runs an env id;
- `fleetplan`, `searchspace`: a fleet's plan and its `[agents.search]`;
- `model_manifest`: a fleet's collected models and their manifest;
- `ray_reports`: what a Ray node's job keeper and sampler report to the cockpit;
- `controls`: what a viewer sends a run; `advice`: what the advisor suggests;
- `costs`: what one job of a preset costs here, as the probe measured it;
- `progress`: long work's steps, told to a `ProgressFn`;
- `trainability`: whether PPO can train an env, the verdict `cockpit_training.trainable` prints;
- `files`: files written atomically; `toml`: `tomllib` on every supported Python.
"""
