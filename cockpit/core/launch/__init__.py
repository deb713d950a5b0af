"""Where a job's process starts, is signalled and reaped, and where its events are read.

- `protocol`: the `Launcher` the supervisor talks to, `LaunchRequest`, `WorkerHandle`,
  `EventSource`, and `RemoteJobs` (a launcher whose workers the local sampler cannot see);
- `local`: `LocalLauncher`, one subprocess per job in its own session, and the helpers every
  local launch shares (the worker's environment, pinning, the stderr tail, a killed run's
  orphans);
- `pooled`: `PooledLauncher`, served workers that run job after job (what `cockpit fleet` uses);
- `ray_launcher`, `ray_actors`: `RayLauncher` (`--ray`), one Ray actor per job attempt and a
  sampler actor per node; `ray` is imported only when one is made.
- `player`: a player (`python -m cockpit_training.play`: a trained model played, and recorded, in a
  process of its own, niced) started and its result read, and a job's model found for it;
- `preflight`: the pre-flight that asks `cockpit_training.trainable`, in a process of its own,
  whether stable-baselines3's PPO can train the run's gymnasium envs.

Imports `cockpit.core.telemetry` and `cockpit.core.machine` below it.
"""
