"""Steps per second that tell the truth: throughput over whole rollout + train cycles, and ETAs.

A PPO worker alternates a rollout (stepping the envs, fast) and a train phase (no steps at all,
sometimes for minutes). The `sps` of its progress events is the rollout rate, which on a CPU can
be 30x the real throughput; a window cut at an arbitrary moment counts a rollout's steps without
its train phase. So the live figure here is measured between rollout starts, over whole cycles:

- The window ends at the newest rollout start and opens at the newest rollout start at least
  `window_s` (30 s) before it, but always at least one whole cycle back and at most `max_cycles`
  cycles back (the attempt's first rollout start if none is that old). Its rate is
  `(steps at its end - steps at its start) / (end - start)`: the whole-cycle rate.
- The cycle under way counts as soon as it runs long: the figure is the lower of the whole-cycle
  rate and `(steps so far - steps at the window's start) / (now - window start)`. For cycles of
  the same steps, the second term is above the whole-cycle rate while the ongoing cycle is no
  longer than the window's mean cycle (its rollout runs ahead of the mean rate and its train
  phase brings it back down) and falls below it once the cycle has lasted longer: a long train
  phase lowers the figure from then on, and never shows the rollout rate.
- Before the attempt's first whole cycle (two rollout starts) there is no figure (None): what
  could be said then is the rollout rate or a figure drifting down from it.

Each worker attempt is measured on its own: a `started` event starts the measure again, so a
restarted job's start-up time (imports, env creation, checkpoint load) is not counted as
throughput. `Throughput` observes events in order (the supervisor, tune's trials);
`window_start` and `live_rate` are the definition, and replay applies them to its indexed lists
of rollout starts (each taken from a `Throughput` as it observed them: `rollouts`,
`newest_rollout`), so every view shows the same figure for the same events.

`run_sps` is the run's throughput: its training jobs' live rates together. `job_eta` is a job's
steps left over its live rate; `run_eta` simulates the run's slots to say
when every agent, queued ones included, reaches its target.

Episodes: each rollout start also keeps the job's whole-episode count as of it (the `episodes` of
the newest `progress` event, which the worker emits just before each rollout's `phase`; a
`started` event's `resumed_episodes` before the first). `Throughput.episodes_per_h` is the
episode rate over the very window of the live SPS, by the same rule (`live_rate`). An ETA to an
episode target does not divide by that rate: episodes grow longer as an agent learns, so a
window's count of episodes lags behind. It converts the episodes left into steps at the newest
mean episode length (`ep_len_mean`, over the last 100 whole episodes) and divides by the live
SPS (`steps_left`, `job_eta`): the ETA shortens or lengthens as soon as episodes change.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cockpit.contract.events import Event, PhaseEvent, ProgressEvent, StartedEvent
from cockpit.contract.states import JobState

WINDOW_S = 30.0  # the live window spans at least this long when cycles are shorter
MAX_CYCLES = 512  # and at most this many cycles: a tiny-cycle job keeps a bounded list

Mark = tuple[float, int]  # (t, num_timesteps): where a job was at a moment
S_PER_H = 3600.0


def steps_per_s(a: Mark, b: Mark) -> float | None:
    """Steps per second from `a` to `b`; None unless `b` is later than `a`."""
    if b[0] <= a[0]:
        return None
    return (b[1] - a[1]) / (b[0] - a[0])


def window_start(
    times: Sequence[float], lo: int, hi: int, *, window_s: float = WINDOW_S, max_cycles: int = MAX_CYCLES
) -> int | None:
    """The index in `times[lo:hi]` (one attempt's rollout starts so far, in time order) where the
    live window opens; the window ends at `hi - 1`. None with fewer than two rollout starts.

    It is the newest rollout start at least `window_s` before the newest one, but at least one
    whole cycle and at most `max_cycles` cycles back (the oldest one when none is that old)."""
    if hi - lo < 2:
        return None
    old_enough = bisect.bisect_right(times, times[hi - 1] - window_s, lo, hi) - 1
    return max(lo, hi - 1 - max_cycles, min(old_enough, hi - 2))


def live_rate(start: Mark, end: Mark, latest: Mark, now: float) -> float | None:
    """The live SPS of a window from rollout start `start` to rollout start `end`, with `latest`
    the newest (t, steps) reported and `now` the time it is asked at: the lower of the whole-cycle
    rate and the rate from the window's start until now (see the module docstring). None when the
    window spans no time."""
    whole = steps_per_s(start, end)
    if whole is None:
        return None
    so_far = steps_per_s(start, (max(now, latest[0]), latest[1]))
    return whole if so_far is None else min(whole, so_far)


@dataclass
class Throughput:
    """One job's live throughput, observing its events in order (see the module docstring).

    Keeps the rollout starts of the current attempt that the window can still need: at most about
    `2 * max_cycles + 64` marks whatever the run's length. With `window_s` infinite every rollout
    start is kept up to that bound (tune's trials pick their own span: `cycles_since`)."""

    window_s: float = WINDOW_S
    max_cycles: int = MAX_CYCLES
    latest: Mark | None = None  # the newest (t, num_timesteps) of a phase or progress event
    # The newest whole-episode count (a progress event's, or the started event's resumed count);
    # None while the worker reports none (a script's own events may not).
    latest_episodes: int | None = None
    rollouts: int = 0  # rollout starts seen, over every attempt (those kept are pruned)
    _times: list[float] = field(default_factory=list)  # rollout starts of this attempt, oldest first
    _steps: list[int] = field(default_factory=list)
    _episodes: list[int | None] = field(default_factory=list)  # the episode count at each rollout start

    def observe(self, event: Event) -> None:
        """Take in the job's next event."""
        if isinstance(event, StartedEvent):
            self.restart()
            self.latest_episodes = event.resumed_episodes or 0
        elif isinstance(event, (PhaseEvent, ProgressEvent)):
            self.latest = (event.t, event.num_timesteps)
            if isinstance(event, ProgressEvent):
                self.latest_episodes = event.episodes
            elif event.phase == "rollout":
                self._times.append(event.t)
                self._steps.append(event.num_timesteps)
                self._episodes.append(self.latest_episodes)
                self.rollouts += 1
                self._prune()

    def observe_all(self, events: Iterable[Event]) -> None:
        """Take in the job's next events, in order."""
        for event in events:
            self.observe(event)

    def restart(self) -> None:
        """A new attempt began: what the previous worker did is not this one's throughput."""
        self.latest = None
        self.latest_episodes = None
        self._times.clear()
        self._steps.clear()
        self._episodes.clear()

    @property
    def rollout_starts(self) -> list[Mark]:
        """The rollout starts kept, oldest first, as (t, num_timesteps)."""
        return list(zip(self._times, self._steps, strict=True))

    @property
    def newest_rollout(self) -> tuple[float, int, int | None] | None:
        """The newest rollout start of this attempt: (t, num_timesteps, episode count then)."""
        if not self._times:
            return None
        return self._times[-1], self._steps[-1], self._episodes[-1]

    def cycles_since(self, t0: float) -> list[Mark]:
        """The rollout starts kept at or after `t0`."""
        first = bisect.bisect_left(self._times, t0)
        return list(zip(self._times[first:], self._steps[first:], strict=True))

    def window(self) -> tuple[Mark, Mark] | None:
        """The live window's first and last rollout start; None before the first whole cycle."""
        start = window_start(self._times, 0, len(self._times), window_s=self.window_s, max_cycles=self.max_cycles)
        if start is None:
            return None
        return (self._times[start], self._steps[start]), (self._times[-1], self._steps[-1])

    def rate(self, now: float) -> float | None:
        """Steps per wall-clock second at `now` (Unix time, as the events' `t`), over recent whole
        cycles and lowered by a cycle under way that runs long; None before the first whole cycle."""
        window = self.window()
        if window is None or self.latest is None:
            return None
        return live_rate(window[0], window[1], self.latest, now)

    def episodes_per_h(self, now: float) -> float | None:
        """Whole episodes per hour at `now`, over the live SPS's window and by its rule (`rate`);
        None before the first whole cycle or when the worker reports no episode counts."""
        start = window_start(self._times, 0, len(self._times), window_s=self.window_s, max_cycles=self.max_cycles)
        if start is None or self.latest is None or self.latest_episodes is None:
            return None
        first, last = self._episodes[start], self._episodes[-1]
        if first is None or last is None:
            return None
        rate = live_rate(
            (self._times[start], first), (self._times[-1], last), (self.latest[0], self.latest_episodes), now
        )
        return None if rate is None else rate * S_PER_H

    def _prune(self) -> None:
        # Drop the rollout starts the window can no longer reach, in batches (amortized O(1)).
        start = window_start(self._times, 0, len(self._times), window_s=self.window_s, max_cycles=self.max_cycles)
        if start is not None and start > 64 and start * 2 > len(self._times):
            del self._times[:start], self._steps[:start], self._episodes[:start]


def run_sps(rates: Iterable[float | None]) -> float | None:
    """The run's live throughput: the live rates (`Throughput.rate`) of its training jobs together;
    None when none has one yet. The header, the headless view and the trend all show this sum."""
    known = [rate for rate in rates if rate is not None]
    return sum(known) if known else None


def job_eta(
    state: JobState,
    steps: int,
    target: int,
    sps: float | None,
    *,
    target_episodes: int | None = None,
    episodes: int | None = None,
    ep_len_mean: float | None = None,
) -> float | None:
    """Seconds until a job reaches its target at its live rate: the steps it has left
    (`steps_left`: to a step `target`, or with `target_episodes` its episodes left at the newest
    mean episode length) over its live SPS. 0 when done, None when it is not training, has no rate
    yet, or has an episode target whose episode length is not known yet."""
    if state is JobState.DONE:
        return 0.0
    if state is not JobState.RUNNING or sps is None or sps <= 0:
        return None
    left = steps_left(steps, target, target_episodes=target_episodes, episodes=episodes, ep_len_mean=ep_len_mean)
    return None if left is None else left / sps


def steps_left(
    steps: int,
    target: int,
    *,
    target_episodes: int | None = None,
    episodes: int | None = None,
    ep_len_mean: float | None = None,
) -> float | None:
    """Steps a job still has to train: to a step `target`, or with `target_episodes` its episodes
    left at `ep_len_mean` steps each (the newest mean length; see the module docstring). None for
    an episode target whose episode length is not known yet."""
    if target_episodes is None:
        return float(max(0, target - steps))
    left = max(0, target_episodes - (episodes or 0))
    if left == 0:
        return 0.0
    return left * ep_len_mean if ep_len_mean is not None and ep_len_mean > 0 else None


class EtaJob(Protocol):
    """What `run_eta` needs of one job (a `JobView` has it)."""

    @property
    def state(self) -> JobState: ...

    @property
    def steps(self) -> int: ...

    @property
    def target(self) -> int: ...

    @property
    def sps(self) -> float | None:
        """Its live rate, when known."""
        ...

    @property
    def eta_s(self) -> float | None:
        """Its own ETA (`job_eta`), when known."""
        ...


def run_eta(jobs: Sequence[EtaJob], slots: int) -> float | None:
    """Seconds until every agent that will still train reaches its target, with `slots` jobs at a
    time; None when unknown (no job has a rate yet), 0 when none has work left and one is done.

    The slots are simulated: each job in a slot frees it at its own ETA (one without, a back-off
    or a start, needs its steps left at the mean live rate of the training jobs); queued jobs take
    the earliest free slot in queue order and need their steps left at that mean rate. Jobs that
    will not train again without a command (stopped, failed, stopping) are left out.

    A job with an episode target (`target_episodes`, as a `JobView` has it) needs its episodes
    left at its own newest mean episode length, or at the mean of the jobs that report one
    (a queued job has played none yet): unknown (no ETA) while no job reports an episode length."""
    rates = [j.sps for j in jobs if j.state.stepping and j.sps is not None and j.sps > 0]
    mean = sum(rates) / len(rates) if rates else None
    lengths = [length for j in jobs if (length := getattr(j, "ep_len_mean", None))]
    mean_length = sum(lengths) / len(lengths) if lengths else None

    def need(job: EtaJob) -> float:
        left = steps_left(
            job.steps,
            job.target,
            target_episodes=getattr(job, "target_episodes", None),
            episodes=getattr(job, "episodes", None),
            ep_len_mean=getattr(job, "ep_len_mean", None) or mean_length,
        )
        return left / mean if mean and left is not None else math.inf

    in_slot: list[float] = []
    queued: list[float] = []
    for job in jobs:
        if job.state is JobState.QUEUED:
            queued.append(need(job))
        elif job.state.holds_slot and job.state is not JobState.STOPPING:
            in_slot.append(job.eta_s if job.eta_s is not None else need(job))
    if not in_slot and not queued:
        return 0.0 if any(j.state is JobState.DONE for j in jobs) else None
    free = in_slot + [0.0] * max(0, max(1, slots) - len(in_slot))
    heapq.heapify(free)
    for seconds in queued:
        heapq.heappush(free, heapq.heappop(free) + seconds)
    end = max(free)
    return None if math.isinf(end) else end
