"""What a front end reads and where it sends commands: `Frame`s from a `RunSource`.

A frame is the run's latest `RunState` plus the recent past the cockpit draws on a time axis: the
last `WINDOW_S` seconds of telemetry samples and each job's phase transitions. Three sources
produce frames: a socket to a live run (`cockpit attach`, and `cockpit run` on a terminal, which
attaches to the run it starts), a replay of a finished run read from its files, and, in tests, a
scripted fake. Sources are the only thing a view holds; it never keeps run state of its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from cockpit.contract.controls import Control
from cockpit.contract.events import Event
from cockpit.core.feed.snapshot import RunState
from cockpit.core.telemetry.sampler import Sample
from cockpit.core.telemetry.trend import NO_TREND, merge

WINDOW_S = 60.0

Transition = tuple[float, "str | None"]


class SourceError(RuntimeError):
    """A source cannot do what was asked: the run is gone, or the source is read-only."""


@dataclass(frozen=True)
class Frame:
    """The run now, and its last `WINDOW_S` seconds.

    `phases[job]` holds the job's transitions `(t, phase)` inside the window, preceded by the last
    one before it (so the phase at the window's left edge is known); `None` means "no phase" (the
    job was not running). `link_error` says why the frame is stale (the run's control socket
    went away), or is None.
    """

    state: RunState
    samples: tuple[Sample, ...] = ()
    phases: Mapping[str, tuple[Transition, ...]] = field(default_factory=dict)
    link_error: str | None = None


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint on disk."""

    step: int
    path: str
    t: float | None


@dataclass(frozen=True)
class JobDetail:
    """Everything the job detail screen shows, read from the job's directory.

    `config` is the resolved job config of the newest `started` event (empty before the worker
    started); `events` are the newest notable events (not every phase and progress line);
    `curve` is `(steps, ep_rew_mean)` and `sps` is `(t, sps)`, both from progress events, oldest
    first.
    """

    job_id: str
    job_dir: str
    config: Mapping[str, Any]
    events: tuple[Event, ...]
    stderr_tail: tuple[str, ...]
    curve: tuple[tuple[int, float], ...]
    sps: tuple[tuple[float, float], ...]
    checkpoints: tuple[Checkpoint, ...]


@runtime_checkable
class RunSource(Protocol):
    """Where a view gets frames and sends commands."""

    read_only: bool  # a replay: submit() raises SourceError

    def frame(self) -> Frame | None:
        """The newest frame, or None before the first state arrived. Cheap: views call it at 5 Hz."""
        ...

    def submit(self, command: Control) -> None:
        """Send a command to the run's supervisor; raises SourceError if it cannot reach it."""
        ...

    def detail(self, job_id: str) -> JobDetail:
        """The job's config, events, stderr tail, curves and checkpoints."""
        ...

    def close(self) -> None:
        """Release the connection or files; the run itself goes on."""
        ...


@runtime_checkable
class Replay(RunSource, Protocol):
    """A finished run, viewed at any moment between its first and last sample."""

    @property
    def span(self) -> tuple[float, float]:
        """First and last recorded moment (Unix time)."""
        ...

    def seek(self, t: float) -> None:
        """Make `frame()` show the run as it was at `t` (clamped to `span`)."""
        ...


class FrameWindow:
    """Builds frames from increments: each new state with the samples and phase transitions that
    arrived since the previous one, and its trend's new points (`trend.increment`), merged into the
    trend held (`trend.merge`), so each frame's state has the whole trend. Keeps only what the
    window shows: a job's transitions in it and the last one before it, and none of a job the
    state no longer lists once they are all older than the window."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: deque[Sample] = deque()
        self._phases: dict[str, deque[Transition]] = {}
        self._trend = NO_TREND
        self._frame: Frame | None = None

    @property
    def last_sample_t(self) -> float:
        """Time of the newest sample held (0 when none): what to ask the source for next."""
        return self._samples[-1].t if self._samples else 0.0

    @property
    def last_trend_t(self) -> float | None:
        """Time of the newest trend point held (None when none): what the trend's next increment follows."""
        return self._trend.t[-1] if len(self._trend) else None

    def last_phase_t(self, job_id: str) -> float:
        """Time of the newest transition held for a job (0 when none)."""
        held = self._phases.get(job_id)
        return held[-1][0] if held else 0.0

    def add(
        self,
        state: RunState,
        samples: Iterable[Sample] = (),
        phases: Mapping[str, Iterable[Transition]] | None = None,
        *,
        link_error: str | None = None,
    ) -> Frame:
        """Merge an increment (only samples and transitions newer than those held are kept) and
        return the new frame."""
        self._trend = merge(self._trend, state.trend, state.now)
        state = replace(state, trend=self._trend)
        newest = self.last_sample_t
        self._samples.extend(s for s in samples if s.t > newest)
        for job_id, transitions in (phases or {}).items():
            held = self._phases.setdefault(job_id, deque())
            last = held[-1][0] if held else float("-inf")
            held.extend(tr for tr in transitions if tr[0] > last)
        left = state.now - self.window_s
        while self._samples and self._samples[0].t < left:
            self._samples.popleft()
        for held in self._phases.values():
            while len(held) > 1 and held[1][0] <= left:
                held.popleft()
        # A fleet's agents come and go by the hundred: forget one the state no longer shows once
        # its last transition has left the window (nothing draws it any more).
        shown = {job.id for job in state.jobs}
        for job_id in [j for j, held in self._phases.items() if j not in shown and (not held or held[-1][0] <= left)]:
            del self._phases[job_id]
        self._frame = Frame(
            state=state,
            samples=tuple(self._samples),
            phases={job: tuple(held) for job, held in self._phases.items()},
            link_error=link_error,
        )
        return self._frame

    def stale(self, link_error: str) -> Frame | None:
        """The last frame, marked as no longer live."""
        if self._frame is not None and self._frame.link_error != link_error:
            self._frame = Frame(self._frame.state, self._frame.samples, self._frame.phases, link_error)
        return self._frame

    @property
    def frame(self) -> Frame | None:
        """The newest frame built."""
        return self._frame
