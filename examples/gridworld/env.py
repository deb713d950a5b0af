"""GridWorldEnv: walk from one corner of a square grid to the other.

The agent starts at (0, 0) and the goal is (size - 1, size - 1). Actions 0-3 move up, right, down
and left (a move into a wall stays put). Each step costs -0.01; reaching the goal gives +1 and ends
the episode, so the best return on the default 5x5 grid is 1 - 7 x 0.01 = 0.93 (8 moves), and a
random walk that runs into the time limit scores around -0.5. The observation is the agent's row
and column scaled to [0, 1].

It is deliberately cheap (a few microseconds a step, so cockpit steps it in DummyVecEnv) and small
enough that PPO solves it in a few thousand steps.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))  # up, right, down, left as (row, column) changes
STEP_REWARD = -0.01
GOAL_REWARD = 1.0


class GridWorldEnv(gym.Env[np.ndarray, int]):
    """A `size` x `size` grid; see the module docstring. `size` must be an integer >= 2."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}

    def __init__(self, size: int = 5, render_mode: str | None = None) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 2:
            raise ValueError(f"size must be an integer >= 2, got {size!r}")
        self.size = size
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(len(MOVES))
        self._pos = (0, 0)

    def _obs(self) -> np.ndarray:
        return np.array(self._pos, dtype=np.float32) / (self.size - 1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)  # seeds self.np_random; the start is fixed, so nothing else draws from it
        self._pos = (0, 0)
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        d_row, d_col = MOVES[int(action)]
        row = min(max(self._pos[0] + d_row, 0), self.size - 1)
        col = min(max(self._pos[1] + d_col, 0), self.size - 1)
        self._pos = (row, col)
        done = self._pos == (self.size - 1, self.size - 1)
        return self._obs(), GOAL_REWARD if done else STEP_REWARD, done, False, {}

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        goal = (self.size - 1, self.size - 1)
        cell = lambda r, c: "A" if (r, c) == self._pos else "G" if (r, c) == goal else "."  # noqa: E731
        return "\n".join("".join(cell(r, c) for c in range(self.size)) for r in range(self.size))
