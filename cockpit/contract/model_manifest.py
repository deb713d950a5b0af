"""A fleet's collected models: `RUN_DIR/models/` and its `models.toml` manifest.

Each agent that finishes a fleet's last tier has its final model copied to `models/<agent>.zip`
(SB3's own format, loadable with `PPO.load`), with `models/<agent>.vecnormalize.pkl` beside it when
the agent normalized observations. `models.toml` lists them, best first:

```toml
fleet = "screen"
[[models]]
agent = "a0003"
file = "a0003.zip"
sha256 = "9f2c..."
env = "CartPole-v1"
preset = "cartpole"
overrides = { learning_rate = 0.001 }
seed = 3
score = 500.0
steps = 8192
vecnormalize = "a0003.vecnormalize.pkl"      # only when the agent normalized
vecnormalize_sha256 = "..."
video = "a0003.mp4"                          # only when the plan's [video] top K included it
video_sha256 = "..."
```

A fleet whose plan says `[video] top = K` records a clip of each of its top K agents playing
(their final model) into `models/<agent>.mp4` (`.gif` where ffmpeg is absent) when the fleet ends,
and lists it as the entry's `video` with its SHA-256 (`with_video`).

Every file is copied under a temporary name, fsynced and renamed, and the manifest is rewritten
atomically, so a kill leaves whole files. Each file's SHA-256 is the one its checkpoint's worker
recorded (`checkpoint_files`), checked against the copy: a corrupt checkpoint is not collected.
`verify` recomputes each checksum (`cockpit report` runs it). A manifest's `file` and
`vecnormalize` are plain file names in `models/`: `read_manifest` refuses any other.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomli_w

from cockpit.contract.files import fsync_directory, sha256_of, write_atomic
from cockpit.contract.toml import tomllib

MODELS_DIR = "models"
MANIFEST = "models.toml"


@dataclass(frozen=True)
class ModelEntry:
    """One collected model: whose it is, how it was trained and scored, and its checksums."""

    agent: str
    file: str
    sha256: str
    env: str
    preset: str
    seed: int
    score: float
    steps: int
    overrides: dict[str, Any] = field(default_factory=dict)
    vecnormalize: str | None = None
    vecnormalize_sha256: str | None = None
    video: str | None = None
    video_sha256: str | None = None


def with_video(run_dir: Path, fleet: str, agent: str, video: Path) -> ModelEntry:
    """Record `video` (a clip in `models/`, already whole) as `agent`'s in models.toml, with its
    SHA-256, rewriting the manifest atomically; returns the updated entry. ValueError (one line) when
    the manifest lists no such agent or `video` is not a file directly in `models/`."""
    directory = run_dir / MODELS_DIR
    if video.parent != directory or not plain_name(video.name):
        raise ValueError(f"{video}: a model's clip is a file directly in {directory}")
    entries = read_manifest(run_dir)
    found = [i for i, entry in enumerate(entries) if entry.agent == agent]
    if not found:
        raise ValueError(f"{directory / MANIFEST}: no model of agent {agent!r} to give a clip")
    entry = replace(entries[found[0]], video=video.name, video_sha256=sha256_of(video))
    entries[found[0]] = entry
    write_manifest(run_dir, fleet, entries)
    return entry


def copy_atomic(source: Path, target: Path, expected: str | None = None) -> str:
    """Copy `source` to `target` whole or not at all; returns the copy's SHA-256. With `expected`
    (the sum its checkpoint recorded: `checkpoint_files.recorded_sums`), a copy that does not match
    it is removed and ValueError (one line) raised: a corrupt source never gets a fresh sum."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(source, tmp)
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        digest = sha256_of(tmp)
        if expected is not None and digest != expected:
            raise ValueError(f"{source} does not match the SHA-256 its checkpoint recorded")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)  # the copy's name is durable too, as models.toml names it
    return digest


def write_manifest(run_dir: Path, fleet: str, entries: list[ModelEntry]) -> None:
    """Rewrite `models.toml` with `entries` (in the order given), atomically."""
    models = []
    for entry in entries:
        data = {key: value for key, value in entry.__dict__.items() if value is not None and value != {}}
        models.append(data)
    write_atomic(run_dir / MODELS_DIR / MANIFEST, tomli_w.dumps({"fleet": fleet, "models": models}))


def read_manifest(run_dir: Path) -> list[ModelEntry]:
    """The entries of `models.toml` ([] when there is none); ValueError (one line) when it is not one."""
    path = run_dir / MODELS_DIR / MANIFEST
    if not path.is_file():
        return []
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        entries = [ModelEntry(**entry) for entry in raw.get("models", [])]
    except (tomllib.TOMLDecodeError, TypeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a models manifest ({exc})") from None
    for entry in entries:
        for key, name in (("file", entry.file), ("vecnormalize", entry.vecnormalize), ("video", entry.video)):
            if name is not None and not plain_name(name):
                raise ValueError(
                    f"{path}: model {entry.agent!r}: {key} = {name!r} is not a plain file name in {MODELS_DIR}/ "
                    "(no '/', no '..'; e.g. 'a0003.zip')"
                )
    return entries


def plain_name(name: object) -> bool:
    """Whether `name` names a file directly inside a directory: no path separator, not '', '.' or
    '..', so `models/` joined with it stays in `models/` (a manifest edited to `../x` or `/x`
    would otherwise have `verify` and the MLflow export read any file)."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
    )


def verify(run_dir: Path, entries: list[ModelEntry]) -> list[str]:
    """One problem line per file that is missing or does not match its recorded SHA-256 ([] when all do)."""
    problems = []
    directory = run_dir / MODELS_DIR
    for entry in entries:
        pairs = [(entry.file, entry.sha256)]
        if entry.vecnormalize is not None:
            pairs.append((entry.vecnormalize, entry.vecnormalize_sha256 or ""))
        if entry.video is not None:
            pairs.append((entry.video, entry.video_sha256 or ""))
        for name, digest in pairs:
            path = directory / name
            if not path.is_file():
                problems.append(f"{path}: missing")
            elif sha256_of(path) != digest:
                problems.append(f"{path}: does not match its SHA-256 in {MANIFEST}")
    return problems
