"""What the cockpit measures while a run goes on, from the machine's readings and the jobs' events.

- `sampler`: the one sampler thread: NVML at 5 Hz per GPU, psutil per core and per job tree;
  `Sample` and `JobUsage`, what it hands on;
- `gpu_thread`: the sampler's NVML reads, each round on a thread of its own under a deadline,
  and when a GPU counts as lost;
- `phases`: each job's rollout and train phases set against its GPU's samples;
- `throughput`: steps per second, episodes per hour and ETAs, one definition for all;
- `job_events`: the one reading of a job's event stream, the supervisor's live and replay's after;
- `trend`: the run's aggregate SPS and best return over the last minutes;
- `memwatch`: the verdict on a job's memory series (steady, or growing: a leak);
- `bounded_series`: `Thinned`, a bounded series that keeps its shape as it thins.

Imports only `cockpit.core.machine` below it.
"""
