"""The job event stream: JSON lines in `<job dir>/events.jsonl`, the worker-to-cockpit contract.

Every event is one JSON object on one line with `t` (Unix time, seconds) and `kind`. Each line is
written with a single `write(2)` on an `O_APPEND` descriptor, so it reaches the file as soon as it
is emitted and concurrent writers never interleave inside a line. A process killed mid-write can
leave a torn last line; `read_events` skips it. The schema is documented in `docs/events.md`.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

EVENTS_FILE = "events.jsonl"

EventKind = Literal["started", "phase", "progress", "checkpoint", "finished", "error"]
Phase = Literal["rollout", "train"]
FinishStatus = Literal["done", "stopped"]


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity; they become null so every line stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class EventWriter:
    """Appends events to one job's `events.jsonl`; each method is one event kind of the schema."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        # A writer killed mid-line left a torn line; end it, or our first event would join it.
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            os.write(self._fd, b"\n")

    def emit(self, kind: EventKind, **fields: Any) -> dict[str, Any]:
        """Write one event now and return it; `t` is added unless given."""
        event = {"t": fields.pop("t", time.time()), "kind": kind, **fields}
        line = json.dumps(_clean(event), allow_nan=False, separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode("utf-8"))
        return event

    def started(
        self, *, config: Mapping[str, Any], pid: int, device: str, versions: Mapping[str, str], **extra: Any
    ) -> None:
        """The job began (or resumed): its resolved config, pid, torch device and package versions."""
        self.emit("started", config=config, pid=pid, device=device, versions=versions, **extra)

    def phase(self, phase: Phase, *, iteration: int, num_timesteps: int) -> None:
        """A rollout or train phase starts now; it lasts until the next phase or `finished`."""
        self.emit("phase", phase=phase, iteration=iteration, num_timesteps=num_timesteps)

    def progress(self, **stats: Any) -> None:
        """Training progress: num_timesteps, sps, ep_rew_mean, ep_len_mean, episodes, losses."""
        self.emit("progress", **stats)

    def checkpoint(self, *, path: str, step: int) -> None:
        """A checkpoint was written completely (it is already renamed into place)."""
        self.emit("checkpoint", path=path, step=step)

    def finished(self, *, status: FinishStatus, steps: int, duration: float) -> None:
        """The job ended cleanly: `done` at its target, or `stopped` on request."""
        self.emit("finished", status=status, steps=steps, duration=duration)

    def error(self, *, type: str, message: str) -> None:
        """The job failed; `type` is `cuda_oom`, `invalid_config` or the exception's class name."""
        self.emit("error", type=type, message=message)

    def close(self) -> None:
        """Release the file descriptor; further emits fail."""
        os.close(self._fd)


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the events in `path` in order, skipping lines that are not complete JSON objects.

    A torn last line (the writer was killed mid-write) is the expected case of a bad line.
    """
    try:
        with path.open("rb") as fh:
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break
                event = _parse(raw)
                if event is not None:
                    yield event
    except FileNotFoundError:
        return


def _parse(raw: bytes) -> dict[str, Any] | None:
    """One line as an event, or None if it is not a JSON object with `t` and `kind`."""
    try:
        event = json.loads(raw)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "kind" in event and "t" in event else None


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete events in `path` (empty when the file does not exist yet)."""
    return list(iter_events(path))


class EventTail:
    """Reads the events appended to a file since the last call (for following a live job)."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset

    def read_new(self) -> list[dict[str, Any]]:
        """Complete events written since the previous call; a torn last line waits for its end."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        return [event for event in map(_parse, data[:end].splitlines()) if event is not None]
