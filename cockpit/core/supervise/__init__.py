"""The queue of jobs and the slots they run in.

- `supervisor`: takes commands, launches jobs into free slots, follows their events and reaps them;
- `exit_policy`: what a worker's exit means (done, stopped, paused, back-off, failed: the restart
  policy, the same error at each start, MPS faults) and the stall watch;
- `disk_wait`: jobs paused by a full disk wait for room for their checkpoints, then go on (`--disk-wait`);
- `workload`: what the jobs train (`JobTemplate`) and where each launch goes (`Placement`, `Placer`);
- `run_state`: the supervisor's `RunState` snapshot for the front ends;
- `jobs`: one job's record (its events' reading, `telemetry.job_events`) and its state table;
- `rundirwatch`: a run directory deleted, replaced or unwritable for 5 s stops the run.

Imports `feed`, `launch`, `telemetry` and `machine` below it.
"""
