"""The training side: the PPO worker process, its envpool VecEnv, checkpoints and job events.

- `worker`: one PPO training job (`python -m cockpit_training.worker`);
- `model`: a PPO model built from a preset, or resumed from the newest valid checkpoint;
- `envs`: the vectorized training env (envpool, gymnasium otherwise); `envpool_vec`: envpool as
  an SB3 `VecEnv`;
- `callback`: `CockpitCallback`, the SB3 callback that reports a run as job events;
- `checkpoints`: crash-safe checkpoints, the newest two kept;
- `device`: the torch device, TF32 and the worker's thread budget;
- `stopping`: the stop flag the signal handlers set;
- `guard`: a user's training command run as a cockpit job;
- `probe`: what one job of a preset costs here (`python -m cockpit_training.probe`);
- `trainable`: whether SB3's PPO can train an env (`python -m cockpit_training.trainable`).

Kept free of heavy imports so `python -m cockpit_training.worker` can set thread limits before numpy and
torch start their thread pools.
"""
