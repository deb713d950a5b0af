"""What crosses a process or outlives one, typed, each in one home: job events, run.toml, the run
directory's paths, the worker's and a user script's command lines, a validated run, presets, fleet
plans, the controls a viewer sends, advice, the probe's costs. Imports nothing else of cockpit's,
so the worker (`cockpit_training`) can import it without the cockpit."""
