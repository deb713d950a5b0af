"""Fleets: many agents through tiers of training, scored and promoted.

- `projection`: a plan's time and cost before it runs, from the overlap model;
- `run`: `FleetRun`, driving the supervisor's queue through the tiers;
- `store`: fleet.db (SQLite in WAL mode): agents, scores, promotions, each change a transaction;
- `promotion`: ranking and the sync and ASHA promotion rules;
- `pbt`: population-based training's exploit and explore at each tier boundary;
- `report`: a fleet read back from fleet.db for `cockpit report` and exports;
- `search`: the Optuna study that samples a plan's `[agents.search]`, one trial per draw.

Imports `sizing`, `supervise` and everything below them.
"""
