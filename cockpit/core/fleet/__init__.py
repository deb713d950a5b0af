"""Fleets: many agents through tiers of training, scored and promoted.

- `projection`: a plan's time and cost before it runs, from the overlap model;
- `run`: `FleetRun`, driving the supervisor's queue through the tiers;
- `roster`: what a running fleet knows in memory (its agents, results, promotions, exploits and
  notices), shared by `FleetRun` and its parts, and the preset files its agents train with;
- `pbt_boundary`: a pbt tier's end in a running fleet: the exploits decided, recorded and copied;
- `draws`: a running fleet's search draws, asked of the study as agents start and told as they rest;
- `fleet_view`: a running fleet as the views show it (`FleetView`: funnel, leaderboard, ETA, cost, search);
- `store`: fleet.db (SQLite in WAL mode): agents, scores, promotions, each change a transaction;
- `promotion`: ranking and the sync and ASHA promotion rules;
- `pbt`: population-based training's exploit and explore at each tier boundary;
- `report`: a fleet read back from fleet.db for `cockpit report` and exports;
- `search`: the Optuna study that samples a plan's `[agents.search]`, one trial per draw.

Imports `sizing`, `supervise` and everything below them.
"""
