"""The job event stream: JSON lines in `<job dir>/events.jsonl`, the worker-to-cockpit contract.

Every event is one JSON object on one line with `t` (Unix time, seconds) and `kind`, and is one
frozen dataclass here (`StartedEvent` ... `ErrorEvent`, `HeartbeatEvent`, `EvaluatedEvent`).
`EventWriter` is the one writer and `parse` the one reader of a line: everything that follows a
job (the supervisor, replay, the job detail, tune's trials, report, a fleet) gets typed events from
it and never looks inside the JSON.

Each line is written with a single `write(2)` on an `O_APPEND` descriptor, so it reaches the file
as soon as it is emitted and concurrent writers never interleave inside a line. A process killed
mid-write can leave a torn last line; readers skip it. A line that is complete but not a valid
event (garbage, a field of the wrong type, a kind this version does not know) is skipped too and
counted by `EventReader`. The schema is documented in `docs/events.md`.

No event comes near 1 MiB, so a line longer than `MAX_LINE_BYTES` (a worker gone wrong, a file
that is not a worker's) is skipped with one notice, without waiting for its end, and a reader
following a live file reads at most `MAX_READ_BYTES` of it per call: neither a huge line nor a huge
backlog is ever read whole, or read again at the next tick.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, cast, get_args

EVENTS_FILE = "events.jsonl"
MAX_LINE_BYTES = 1 << 20  # a line longer than this, its newline not counted, is no event: skipped
MAX_READ_BYTES = 4 << 20  # the most `EventReader.read_new` reads of a file at one call

# `score`: a fleet's agent is being evaluated at the end of its tier (after its last train phase).
Phase = Literal["rollout", "train", "score"]
FinishStatus = Literal["done", "stopped"]
EventKind = Literal["started", "phase", "progress", "checkpoint", "finished", "error", "heartbeat", "evaluated"]


@dataclass(frozen=True)
class CorruptCheckpoint:
    """A checkpoint a resuming worker found corrupt and moved to `checkpoints/corrupt/`."""

    path: str
    reason: str


@dataclass(frozen=True)
class StartedEvent:
    """The job began (or resumed): its resolved config, pid, torch device and package versions.

    `config` is the worker's resolved job config (`preset`, `env`, `backend`, `timesteps`,
    `job_dir`, `seed`, `device`, `threads`, `torch_threads`); a user's own script may leave it empty.
    """

    kind: ClassVar[Literal["started"]] = "started"
    t: float
    pid: int | None = None
    device: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    versions: Mapping[str, str] = field(default_factory=dict)
    target_steps: int | None = None
    policy: str | None = None
    torch_threads: int | None = None
    resumed_from_step: int | None = None
    corrupt_checkpoints: tuple[CorruptCheckpoint, ...] = ()
    startup_s: float | None = None  # from the worker process's start to this event: imports, env, model
    # Whether float32 matmuls may use TF32 tensor cores, as torch's flag stood when training began
    # (on for a CUDA worker); what a GPU check reads instead of trusting that the worker set it.
    tf32: bool | None = None
    # An episode target (`--episodes N`): the job ends after the rollout in which its N-th whole
    # episode ended; `target_steps` is then None. `resumed_episodes` is the whole-episode count
    # restored from the checkpoint it resumed from.
    target_episodes: int | None = None
    resumed_episodes: int | None = None

    @property
    def threads(self) -> int | None:
        """The env threads of the worker's config (its share of the run's thread budget), if known."""
        value = self.config.get("threads")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class PhaseEvent:
    """A rollout, train or score phase starts now; it lasts until the next phase or the job's outcome."""

    kind: ClassVar[Literal["phase"]] = "phase"
    t: float
    phase: Phase
    iteration: int
    num_timesteps: int


@dataclass(frozen=True)
class ProgressEvent:
    """Training progress; `losses` only after a train phase. On CUDA, `cuda_reserved_bytes` is what
    the worker's caching allocator holds now (`torch.cuda.memory_reserved()`) and `cuda_peak_bytes`
    the most it has held (`torch.cuda.max_memory_reserved()`): the job's own GPU memory, which the
    cockpit uses where NVML cannot say which process is the job's (a container without
    `--pid=host`). Both are absent on the CPU."""

    kind: ClassVar[Literal["progress"]] = "progress"
    t: float
    num_timesteps: int
    iteration: int | None = None
    sps: float | None = None
    ep_rew_mean: float | None = None
    ep_len_mean: float | None = None
    episodes: int | None = None
    losses: Mapping[str, float | None] | None = None
    cuda_reserved_bytes: int | None = None
    cuda_peak_bytes: int | None = None


@dataclass(frozen=True)
class CheckpointEvent:
    """A checkpoint was written completely (it is already renamed into place)."""

    kind: ClassVar[Literal["checkpoint"]] = "checkpoint"
    t: float
    path: str
    step: int


@dataclass(frozen=True)
class FinishedEvent:
    """The job ended cleanly: `done` at its target, or `stopped` on request."""

    kind: ClassVar[Literal["finished"]] = "finished"
    t: float
    status: FinishStatus
    steps: int
    duration: float | None = None


@dataclass(frozen=True)
class ErrorEvent:
    """The job failed; `type` is `cuda_oom`, `invalid_config`, `disk_full` (a write failed for want of
    space: the message names the path and the free space) or the exception's class name."""

    kind: ClassVar[Literal["error"]] = "error"
    t: float
    type: str
    message: str

    @property
    def reason(self) -> str:
        """`type: message`, as the cockpit shows a failure."""
        return f"{self.type}: {self.message}"


@dataclass(frozen=True)
class HeartbeatEvent:
    """The worker is alive in a long phase that reports nothing else: during a train phase,
    `CockpitCallback` emits one from its optimizer-step hook at most every few seconds, so that a
    silent job means a hung one (see the supervisor's stall watch). In a score phase the worker
    emits one as each evaluation episode ends (and every few seconds of a long one), with
    `scored` episodes of `to_score`: the only progress a heartbeat carries."""

    kind: ClassVar[Literal["heartbeat"]] = "heartbeat"
    t: float
    phase: Phase
    num_timesteps: int
    scored: int | None = None
    to_score: int | None = None


@dataclass(frozen=True)
class EvaluatedEvent:
    """The trained model was scored: `episodes` deterministic episodes on a separate env seeded
    with `seed` (the same for every agent), at `step` training steps and `trained_episodes` whole
    training episodes (absent from workers before episode targets); `mean_reward` ranks a fleet's
    agents. Written just before the `finished` event of a worker asked to evaluate."""

    kind: ClassVar[Literal["evaluated"]] = "evaluated"
    t: float
    step: int
    mean_reward: float
    std_reward: float
    episodes: int
    seed: int
    seconds: float | None = None
    trained_episodes: int | None = None


Event = (
    StartedEvent
    | PhaseEvent
    | ProgressEvent
    | CheckpointEvent
    | FinishedEvent
    | ErrorEvent
    | HeartbeatEvent
    | EvaluatedEvent
)
OutcomeEvent = FinishedEvent | ErrorEvent
_KINDS: tuple[type[Event], ...] = (
    StartedEvent,
    PhaseEvent,
    ProgressEvent,
    CheckpointEvent,
    FinishedEvent,
    ErrorEvent,
    HeartbeatEvent,
    EvaluatedEvent,
)
EVENT_TYPES: dict[str, type[Event]] = {cls.kind: cls for cls in _KINDS}

E = TypeVar("E", bound=Event)


# ----- to and from JSON -----


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity; they become null so every line stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def to_json(event: Event) -> dict[str, Any]:
    """The event as the JSON object written to the file: `t`, `kind`, then its fields."""
    out: dict[str, Any] = {"t": event.t, "kind": event.kind}
    for f in fields(event):
        if f.name == "t":
            continue
        value = getattr(event, f.name)
        if f.name == "corrupt_checkpoints":
            value = [{"path": c.path, "reason": c.reason} for c in value]
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return cast(dict[str, Any], _clean(out))


class _Invalid(ValueError):
    """A complete line that is not a valid event of a known kind."""


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid(f"{name}: expected a number, got {value!r}")
    return float(value)


def _integer(value: Any, name: str) -> int:
    # Whole floats pass: a JSON writer may render 1e6 for a step count.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"{name}: expected an integer, got {value!r}")
    return value


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"{name}: expected a string, got {value!r}")
    return value


def _boolean(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"{name}: expected true or false, got {value!r}")
    return value


def _mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _Invalid(f"{name}: expected an object, got {value!r}")
    return value


def _optional(check: Callable[[Any, str], Any]) -> Callable[[Any, str], Any]:
    return lambda value, name: None if value is None else check(value, name)


def _choice(options: tuple[str, ...]) -> Callable[[Any, str], str]:
    def check(value: Any, name: str) -> str:
        if value not in options:
            raise _Invalid(f"{name}: expected one of {', '.join(options)}, got {value!r}")
        return cast(str, value)

    return check


def _corrupt(value: Any, name: str) -> tuple[CorruptCheckpoint, ...]:
    if not isinstance(value, list):
        raise _Invalid(f"{name}: expected a list, got {value!r}")
    return tuple(
        CorruptCheckpoint(_string(item.get("path"), f"{name}.path"), _string(item.get("reason"), f"{name}.reason"))
        for item in (_mapping(entry, name) for entry in value)
    )


def _losses(value: Any, name: str) -> Mapping[str, float | None]:
    return {str(k): None if v is None else _number(v, f"{name}.{k}") for k, v in _mapping(value, name).items()}


_CHECKS: dict[str, dict[str, Callable[[Any, str], Any]]] = {
    "started": {
        "pid": _optional(_integer),
        "device": _optional(_string),
        "config": _mapping,
        "versions": _mapping,
        "target_steps": _optional(_integer),
        "policy": _optional(_string),
        "torch_threads": _optional(_integer),
        "resumed_from_step": _optional(_integer),
        "corrupt_checkpoints": _corrupt,
        "startup_s": _optional(_number),
        "tf32": _optional(_boolean),
        "target_episodes": _optional(_integer),
        "resumed_episodes": _optional(_integer),
    },
    "phase": {"phase": _choice(get_args(Phase)), "iteration": _integer, "num_timesteps": _integer},
    "progress": {
        "num_timesteps": _integer,
        "iteration": _optional(_integer),
        "sps": _optional(_number),
        "ep_rew_mean": _optional(_number),
        "ep_len_mean": _optional(_number),
        "episodes": _optional(_integer),
        "losses": _optional(_losses),
        "cuda_reserved_bytes": _optional(_integer),
        "cuda_peak_bytes": _optional(_integer),
    },
    "checkpoint": {"path": _string, "step": _integer},
    "finished": {"status": _choice(get_args(FinishStatus)), "steps": _integer, "duration": _optional(_number)},
    "error": {"type": _string, "message": _string},
    "heartbeat": {
        "phase": _choice(get_args(Phase)),
        "num_timesteps": _integer,
        "scored": _optional(_integer),
        "to_score": _optional(_integer),
    },
    "evaluated": {
        "step": _integer,
        "mean_reward": _number,
        "std_reward": _number,
        "episodes": _integer,
        "seed": _integer,
        "seconds": _optional(_number),
        "trained_episodes": _optional(_integer),
    },
}


def from_json(data: Any) -> Event:
    """The event a decoded JSON object describes; ValueError names the kind and the bad field.
    Fields this version does not know are ignored (newer writers may add some)."""
    obj = _mapping(data, "event")
    kind = obj.get("kind")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise _Invalid(f"event: unknown kind {kind!r}")
    # The checks name only the field; the kind is put in front when one fails (every event of a
    # live job is parsed: no message is built for the fields that are fine).
    try:
        values: dict[str, Any] = {"t": _number(obj.get("t"), "t")}
        for name, check in _CHECKS[cls.kind].items():
            if name in obj:
                values[name] = check(obj[name], name)
    except _Invalid as exc:
        raise _Invalid(f"{kind}.{exc}") from None
    try:
        return cls(**values)
    except TypeError as exc:  # a required field is missing
        raise _Invalid(f"{kind}: {exc}") from None


def parse(line: bytes | str) -> Event | None:
    """One line of an events file as an event, or None when it is not one: a torn or garbled line,
    an invalid field, or a kind this version does not know."""
    try:
        return from_json(json.loads(line))
    except ValueError:  # JSONDecodeError and _Invalid are both ValueErrors
        return None


# ----- writing -----


class EventWriter:
    """Appends events to one job's `events.jsonl`; `emit` writes any event, and each other method
    builds one kind (with `t` now unless given) and emits it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        # A writer killed mid-line left a torn line; end it, or our first event would join it.
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            os.write(self._fd, b"\n")

    def emit(self, event: E) -> E:
        """Write `event` now, as one line in one `write(2)`, and return it."""
        line = json.dumps(to_json(event), allow_nan=False, separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode("utf-8"))
        return event

    def started(
        self,
        *,
        pid: int | None,
        device: str | None,
        config: Mapping[str, Any] | None = None,
        versions: Mapping[str, str] | None = None,
        target_steps: int | None = None,
        resumed_from_step: int | None = None,
        corrupt_checkpoints: tuple[CorruptCheckpoint, ...] = (),
        target_episodes: int | None = None,
        resumed_episodes: int | None = None,
        t: float | None = None,
    ) -> StartedEvent:
        """The job began (or resumed): its resolved config, pid, torch device and package versions,
        its target and what it resumed from: what a training script's callback knows. The worker,
        which also reports its torch runtime (policy, threads, start-up time, TF32), builds its
        `StartedEvent` whole and hands it to `emit`."""
        event = StartedEvent(
            _now(t),
            pid,
            device,
            dict(config or {}),
            dict(versions or {}),
            target_steps,
            resumed_from_step=resumed_from_step,
            corrupt_checkpoints=tuple(corrupt_checkpoints),
            target_episodes=target_episodes,
            resumed_episodes=resumed_episodes,
        )
        return self.emit(event)

    def phase(self, phase: Phase, *, iteration: int, num_timesteps: int, t: float | None = None) -> PhaseEvent:
        """A rollout or train phase starts now; it lasts until the next phase or `finished`."""
        return self.emit(PhaseEvent(_now(t), phase, iteration, num_timesteps))

    def progress(
        self,
        *,
        num_timesteps: int,
        iteration: int | None = None,
        sps: float | None = None,
        ep_rew_mean: float | None = None,
        ep_len_mean: float | None = None,
        episodes: int | None = None,
        losses: Mapping[str, float | None] | None = None,
        cuda_reserved_bytes: int | None = None,
        cuda_peak_bytes: int | None = None,
        t: float | None = None,
    ) -> ProgressEvent:
        """Training progress: num_timesteps, sps, ep_rew_mean, ep_len_mean, episodes, losses, and on
        CUDA the worker's own allocator memory (`ProgressEvent`)."""
        return self.emit(
            ProgressEvent(
                _now(t),
                num_timesteps,
                iteration,
                sps,
                ep_rew_mean,
                ep_len_mean,
                episodes,
                dict(losses) if losses is not None else None,
                cuda_reserved_bytes,
                cuda_peak_bytes,
            )
        )

    def checkpoint(self, *, path: str, step: int, t: float | None = None) -> CheckpointEvent:
        """A checkpoint was written completely (it is already renamed into place)."""
        return self.emit(CheckpointEvent(_now(t), path, step))

    def finished(
        self, *, status: FinishStatus, steps: int, duration: float | None = None, t: float | None = None
    ) -> FinishedEvent:
        """The job ended cleanly: `done` at its target, or `stopped` on request."""
        return self.emit(FinishedEvent(_now(t), status, steps, duration))

    def error(self, *, type: str, message: str, t: float | None = None) -> ErrorEvent:
        """The job failed; `type` is `cuda_oom`, `invalid_config` or the exception's class name."""
        return self.emit(ErrorEvent(_now(t), type, message))

    def heartbeat(
        self,
        phase: Phase,
        *,
        num_timesteps: int,
        scored: int | None = None,
        to_score: int | None = None,
        t: float | None = None,
    ) -> HeartbeatEvent:
        """The worker is alive in `phase` (a long train phase, or a score phase with `scored`
        evaluation episodes of `to_score` done); nothing else has changed."""
        return self.emit(HeartbeatEvent(_now(t), phase, num_timesteps, scored, to_score))

    def evaluated(
        self,
        *,
        step: int,
        mean_reward: float,
        std_reward: float,
        episodes: int,
        seed: int,
        seconds: float | None = None,
        trained_episodes: int | None = None,
        t: float | None = None,
    ) -> EvaluatedEvent:
        """The trained model's evaluation score (see `EvaluatedEvent`)."""
        return self.emit(
            EvaluatedEvent(_now(t), step, mean_reward, std_reward, episodes, seed, seconds, trained_episodes)
        )

    def close(self) -> None:
        """Release the file descriptor; further emits fail."""
        os.close(self._fd)


def _now(t: float | None) -> float:
    return time.time() if t is None else t


# ----- reading -----


class EventReader:
    """Reads the events appended to a file since the last call (to follow a live job, or to read a
    finished one in one go). A torn last line waits for its end; a complete line that is not a valid
    event is skipped and counted in `skipped`. A line longer than `MAX_LINE_BYTES` is skipped too,
    as soon as that much of it is read (its end is not waited for, and none of it is read twice),
    counted, and told once in `notices` (one line each, naming the file and the byte it began at),
    which the caller takes and clears."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self.skipped = 0
        self.notices: list[str] = []
        self.more = False  # the last `read_new` stopped at MAX_READ_BYTES with more of the file to read
        self._discarding = False  # inside a line over MAX_LINE_BYTES whose end is not read yet

    def read_new(self) -> list[Event]:
        """Complete events written since the previous call ([] while the file does not exist), from
        at most `MAX_READ_BYTES` of the file; `more` says whether there is more to read already."""
        self.more = False
        try:
            # A live job is followed at every tick and has usually written nothing new: a stat is
            # a fraction of an open, a read and a close.
            size = os.stat(self.path).st_size
            if size <= self.offset:
                return []
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read(MAX_READ_BYTES)
        except FileNotFoundError:
            return []
        self.more = self.offset + len(data) < size
        return self.consume(data)

    def read_all(self) -> list[Event]:
        """Every complete event written since the previous call, `read_new` after `read_new` until
        the file has no more (a resumed run's history, what an exited worker wrote last)."""
        events = self.read_new()
        while self.more:
            events += self.read_new()
        return events

    def consume(self, data: bytes) -> list[Event]:
        """The complete events in `data`, the file's bytes from `offset` on (read here, or brought
        from another machine); `offset` moves past them, a torn last line waits for its end (one
        over `MAX_LINE_BYTES` does not: it is skipped, and so is the rest of it when it comes)."""
        start = 0
        if self._discarding:
            start = data.find(b"\n") + 1
            if not start:  # still inside the long line
                self.offset += len(data)
                return []
            self._discarding = False
        end = data.rfind(b"\n") + 1
        if len(data) - max(start, end) > MAX_LINE_BYTES:  # a torn line already too long to be an event
            self._too_long(self.offset + max(start, end), None)
            self._discarding = True
            events = self._parse_lines(data[start:end].splitlines(keepends=True), self.offset + start)
            self.offset += len(data)
            return events
        events = self._parse_lines(data[start:end].splitlines(keepends=True), self.offset + start)
        self.offset += max(start, end)
        return events

    def __iter__(self) -> Iterator[Event]:
        """Every complete event from the current offset on, streamed (a file may hold millions), a
        line at most `MAX_LINE_BYTES` (and its newline) in memory at once."""
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            return
        with fh:
            fh.seek(self.offset)
            while raw := fh.readline(MAX_LINE_BYTES + 2):
                if raw.endswith(b"\n"):
                    self.offset += len(raw)
                    yield from self._parse_lines([raw], self.offset - len(raw))
                elif len(raw) <= MAX_LINE_BYTES:  # a torn last line
                    break
                else:
                    at = self.offset
                    while raw and not raw.endswith(b"\n"):  # the rest of the long line, a block at a time
                        self.offset += len(raw)
                        raw = fh.readline(MAX_LINE_BYTES)
                    self.offset += len(raw)
                    self._too_long(at, None if not raw else self.offset - at - 1)
                    if not raw:  # it has no end yet: what follows it is skipped as part of it
                        self._discarding = True
                        break

    def _too_long(self, at: int, size: int | None) -> None:
        """Count and tell the line at byte `at` skipped for its size (`size` bytes, or not known yet)."""
        self.skipped += 1
        length = f"of {size:,} bytes" if size is not None else f"over {MAX_LINE_BYTES:,} bytes"
        self.notices.append(
            f"{self.path}: an event line {length} at byte {at:,} skipped: no event is longer than "
            f"{MAX_LINE_BYTES:,} bytes"
        )

    def _parse_lines(self, lines: list[bytes], at: int) -> list[Event]:
        """The events of `lines` (each with its newline), the first of them at byte `at`."""
        events = []
        for raw in lines:
            if len(raw) - 1 > MAX_LINE_BYTES:
                self._too_long(at, len(raw) - 1)
            elif (event := parse(raw)) is not None:
                events.append(event)
            elif raw.strip():
                self.skipped += 1
            at += len(raw)
        return events


def iter_events(path: Path) -> Iterator[Event]:
    """The events in `path` in order, streamed; torn and invalid lines are skipped."""
    return iter(EventReader(path))


def read_events(path: Path) -> list[Event]:
    """All complete events in `path` (empty when the file does not exist yet)."""
    return list(iter_events(path))


def of_kind(events: Iterable[Event], cls: type[E]) -> list[E]:
    """The events of one kind, in order."""
    return [event for event in events if isinstance(event, cls)]
