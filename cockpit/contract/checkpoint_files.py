"""A worker's checkpoint directory as the cockpit reads it: its files and the SHA-256 sums the
worker recorded beside them, which every copy the cockpit makes of a checkpoint is held to.

The worker (`cockpit_training.checkpoints.CheckpointStore`) writes `step-<step>-<ns>/` with
`model.zip`, `vecnormalize.pkl` when it normalizes, and `meta.json`: `{"step": N, "files": {name:
sha256}}`, a sum of each file taken as it was written. The cockpit copies checkpoints three ways (a
fleet collects its models into `models/`, a PBT exploiter takes its source's newest checkpoint,
`cockpit export mlflow` logs a job's final model); each first checks the files against those sums
(`unverified`), and checks its copy against them again, so a corrupt source fails that copy in one
line and is never given a fresh sum of its own that would then "verify". The sums catch
corruption, not tampering: whoever can write a checkpoint can write its meta.json too
(docs/security.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cockpit.contract.files import sha256_of

MODEL_FILE = "model.zip"
VECNORMALIZE_FILE = "vecnormalize.pkl"
META_FILE = "meta.json"


def checkpoints_in(directory: Path) -> list[Path]:
    """The checkpoints (`step-<step>-<ns>/` directories) in a job's `directory`, oldest first, by
    step, then time, as the worker orders them; [] when it has none or does not exist. A copy
    being written (`.tmp-step-...`) and the quarantined ones (`corrupt/`) are not among them."""
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    found = [(order, p) for p in entries if (order := checkpoint_order(p.name)) is not None and p.is_dir()]
    return [p for _, p in sorted(found)]


def newest_checkpoint(directory: Path) -> Path | None:
    """The newest of `checkpoints_in(directory)`; None when there is none."""
    found = checkpoints_in(directory)
    return found[-1] if found else None


def checkpoint_order(name: str) -> tuple[int, int] | None:
    """A checkpoint directory's name `step-<step>-<ns>` as (step, ns); None for any other name."""
    parts = name.split("-")
    if len(parts) != 3 or parts[0] != "step":
        return None
    try:
        return int(parts[1]), int(parts[2])
    except ValueError:
        return None


def read_meta(checkpoint: Path) -> dict[str, Any]:
    """`checkpoint`'s meta.json as written; ValueError (one line) when it is missing or not a JSON
    object."""
    try:
        meta = json.loads((checkpoint / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"unreadable {META_FILE} ({exc})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"unreadable {META_FILE} (not a JSON object)")
    return meta


def recorded_sums(checkpoint: Path, meta: dict[str, Any] | None = None) -> dict[str, str]:
    """The SHA-256 of each file the worker wrote in `checkpoint`, by file name, as its meta.json
    records them (`meta`, when already read); ValueError (one line) when meta.json is missing, not
    JSON, or lists no model."""
    meta = read_meta(checkpoint) if meta is None else meta
    try:
        sums = {str(name): str(digest) for name, digest in dict(meta["files"]).items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable {META_FILE} ({exc!r})") from None
    if MODEL_FILE not in sums:
        raise ValueError(f"{META_FILE} lists no {MODEL_FILE}")
    return sums


def mismatch(checkpoint: Path, sums: dict[str, str]) -> str | None:
    """The first file of `sums` that is missing from `checkpoint` or does not match its sum, said
    in a few words (`model.zip is missing`); None when every one matches."""
    for name, digest in sums.items():
        path = checkpoint / name
        if not path.is_file():
            return f"{name} is missing"
        if sha256_of(path) != digest:
            return f"{name} does not match the SHA-256 its worker recorded"
    return None


def unverified(checkpoint: Path, shown: str | None = None) -> str | None:
    """Why `checkpoint`'s files do not match the sums its worker recorded (`recorded_sums`), in one
    line naming the checkpoint (as `shown`, when given: a copy named after its source) and the
    file; None when every file listed is there and matches."""
    shown = shown or f"checkpoint {checkpoint}"
    try:
        sums = recorded_sums(checkpoint)
    except ValueError as exc:
        return f"{shown}: {exc}"
    unlisted = [name for name in (MODEL_FILE, VECNORMALIZE_FILE) if name not in sums and (checkpoint / name).exists()]
    if unlisted:
        return f"{shown}: {unlisted[0]} has no SHA-256 in {META_FILE}"
    problem = mismatch(checkpoint, sums)
    return None if problem is None else f"{shown}: {problem}"
