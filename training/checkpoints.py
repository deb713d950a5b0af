"""Crash-safe checkpoints in `<job dir>/checkpoints/`, keeping the newest two.

A checkpoint is a directory `step-<step>-<time_ns>/` holding `model.zip` (SB3's own format),
`vecnormalize.pkl` when observation/reward normalization is on, and `meta.json` with the step
count, the whole episodes finished by then (`episodes`, so an episode target survives a resume;
absent in checkpoints written before it was recorded) and a SHA-256 of each file. It is built
under a `.tmp-*` name, fsynced, and renamed into place, so a kill or a full disk leaves either the
whole checkpoint or none. Loading verifies the hashes; a checkpoint that fails is moved to
`checkpoints/corrupt/` and the one before it is used.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecNormalize

from cockpit.contract.checkpoint_files import (
    META_FILE,
    MODEL_FILE,
    VECNORMALIZE_FILE,
    checkpoints_in,
    mismatch,
    read_meta,
    recorded_sums,
)
from cockpit.contract.files import fsync_path, sha256_of


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint on disk: its directory, the step count it was taken at, and the whole
    episodes finished by then (None when its metadata does not say)."""

    path: Path
    step: int
    episodes: int | None = None

    @property
    def model_path(self) -> Path:
        """The SB3 model archive, loadable with `PPO.load`."""
        return self.path / MODEL_FILE

    @property
    def vecnormalize_path(self) -> Path | None:
        """The VecNormalize statistics, or None when the run does not normalize."""
        p = self.path / VECNORMALIZE_FILE
        return p if p.exists() else None


@dataclass(frozen=True)
class CorruptCheckpoint:
    """A checkpoint that failed verification, where it was moved, and why."""

    path: Path
    reason: str


class CheckpointStore:
    """The checkpoints of one job; `save` is atomic and prunes to the newest `keep`."""

    def __init__(self, directory: Path, keep: int = 2) -> None:
        self.directory = directory
        self.keep = keep

    def list(self) -> list[Path]:
        """Complete checkpoint directories, oldest first (by step, then by write time)."""
        return checkpoints_in(self.directory)

    def save(
        self, model: BaseAlgorithm, step: int, vecnormalize: VecNormalize | None = None, *, episodes: int | None = None
    ) -> Checkpoint:
        """Write `model` (and `vecnormalize`) as the checkpoint for `step`, atomically.

        On any error (a full disk included) the partial files are removed and the previous
        checkpoints are untouched; the error propagates. Only the last level of the checkpoint
        directory is made: a job dir deleted under a running worker stays deleted (FileNotFoundError)
        rather than coming back empty, somewhere nobody looks.
        """
        self.directory.mkdir(exist_ok=True)
        name = f"step-{step:012d}-{time.time_ns()}"
        tmp = self.directory / f".tmp-{name}"
        try:
            tmp.mkdir()
            model.save(tmp / MODEL_FILE)
            if vecnormalize is not None:
                vecnormalize.save(tmp / VECNORMALIZE_FILE)
            files = {p.name: sha256_of(p) for p in sorted(tmp.iterdir())}
            meta: dict[str, object] = {"step": step, "files": files}
            if episodes is not None:
                meta["episodes"] = episodes
            (tmp / META_FILE).write_text(json.dumps(meta, indent=1))
            for p in tmp.iterdir():
                fsync_path(p)
            fsync_path(tmp)
            final = self.directory / name
            os.rename(tmp, final)
            fsync_path(self.directory)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, OSError) and exc.filename is None:
                exc.filename = str(self.directory)  # torch writes through a stream: say where it was going
            raise
        self._prune()
        return Checkpoint(final, step, episodes)

    def _prune(self) -> None:
        for old in self.list()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        for stale in self.directory.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)

    def verify(self, path: Path) -> Checkpoint:
        """The checkpoint at `path` if its metadata parses and every file matches its hash.

        Raises ValueError saying what is wrong otherwise.
        """
        meta = read_meta(path)
        try:
            step = int(meta["step"])
            episodes = None if meta.get("episodes") is None else int(meta["episodes"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"unreadable {META_FILE} ({exc!r})") from exc
        problem = mismatch(path, recorded_sums(path, meta))
        if problem is not None:
            raise ValueError(problem)
        return Checkpoint(path, step, episodes)

    def quarantine(self, path: Path, reason: str) -> CorruptCheckpoint:
        """Move a bad checkpoint out of rotation into `corrupt/`, keeping it for inspection."""
        target = self.directory / "corrupt" / path.name
        target.parent.mkdir(exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        os.rename(path, target)
        return CorruptCheckpoint(target, reason)

    def newest_valid(self) -> tuple[Checkpoint | None, list[CorruptCheckpoint]]:
        """The newest checkpoint that verifies, and the newer ones that did not (quarantined)."""
        corrupt: list[CorruptCheckpoint] = []
        for path in reversed(self.list()):
            try:
                return self.verify(path), corrupt
            except ValueError as exc:
                corrupt.append(self.quarantine(path, str(exc)))
        return None, corrupt
