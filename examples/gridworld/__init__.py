"""A custom gymnasium env package for cockpit: importing it registers `GridWorld-v0`.

cockpit (like `gymnasium.make`) takes the env as `module:EnvId`, and imports the module first:

    cockpit run --env examples.gridworld:GridWorld-v0        # from the repository root
    pip install ./examples/gridworld                           # or installed, from anywhere:
    cockpit run --env gridworld:GridWorld-v0

A preset's `[env_kwargs]` table reaches `GridWorldEnv(...)`, e.g. `size = 7`.
"""

from __future__ import annotations

import gymnasium as gym

from .env import GridWorldEnv

__all__ = ["GridWorldEnv"]

# The class itself as entry point, not a "module:Class" string: the package works under either name
# (`examples.gridworld` from the repository, `gridworld` installed).
if "GridWorld-v0" not in gym.registry:
    gym.register(id="GridWorld-v0", entry_point=GridWorldEnv, max_episode_steps=50)
