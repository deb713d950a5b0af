"""The queue of jobs and the slots they run in.

- `supervisor`: launches jobs into free slots, follows their events, reaps and restarts them by
  the restart policy, watches for stalls, and builds the `RunState` snapshot;
- `jobs`: one job's record and the transition table of its states;
- `rundirwatch`: a run directory deleted, replaced or unwritable for 5 s stops the run.

Imports `feed`, `launch`, `telemetry` and `machine` below it.
"""
