"""The training side: the PPO worker process, its envpool VecEnv, checkpoints and job events.

Kept free of heavy imports so `python -m cockpit_training.worker` can set thread limits before numpy and
torch start their thread pools.
"""
