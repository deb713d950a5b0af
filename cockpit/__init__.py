"""cockpit: keep one GPU workstation busy with parallel PPO training jobs."""

__version__ = "0.1.0"
