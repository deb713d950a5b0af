"""A user's working directory holding their env module, for tests of `module:EnvId` envs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
import pytest

from cockpit.contract.envids import WORKDIR_ENV


@contextmanager
def user_module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> Iterator[Path]:
    """`tmp_path` holding `<name>.py` (`source`), as the cwd, where a check process finds the
    module; its import and the ids it registered in this process are undone after."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(WORKDIR_ENV, raising=False)
    path, ids = list(sys.path), set(gym.registry)
    try:
        yield tmp_path
    finally:
        sys.path[:] = path
        sys.modules.pop(name, None)
        for env_id in set(gym.registry) - ids:
            del gym.registry[env_id]
