"""Which library runs an env id: envpool when it has the id, gymnasium otherwise.

Light on purpose (envpool and gymnasium, never torch), so `cockpit run`, `recommend` and `tune`
refuse an unknown id before anything starts, with the same message the worker gives.
"""

from __future__ import annotations

import difflib
import functools
from typing import Literal

Backend = Literal["envpool", "gymnasium"]


class UnknownEnvError(ValueError):
    """Neither envpool nor gymnasium knows the env id; the message suggests close ids."""


@functools.cache
def _envpool_ids() -> frozenset[str]:
    import envpool

    return frozenset(envpool.list_all_envs())


def backend_for(env_id: str, *, source: str = "--env") -> Backend:
    """Which library will run `env_id`; raises `UnknownEnvError` with suggestions if neither.
    `source` names where the id came from in the message (a flag, or a preset file's key)."""
    if env_id in _envpool_ids():
        return "envpool"
    import gymnasium as gym

    if env_id in gym.registry:
        return "gymnasium"
    known = sorted(_envpool_ids() | set(gym.registry))
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
    hint = (
        f"; did you mean {', '.join(close)}?" if close else "; e.g. CartPole-v1, LunarLander-v3, Pong-v5, Breakout-v5"
    )
    raise UnknownEnvError(f"{source} {env_id!r}: neither envpool nor gymnasium has this environment{hint}")
