"""A scripted PPO worker: rollout + train cycles as its events say them, with the true figures
known (when each cycle starts and ends, and when the job reaches its target)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.contract.events import Event, FinishedEvent, PhaseEvent, ProgressEvent, StartedEvent


@dataclass(frozen=True)
class Script:
    """The events of one worker attempt, in time order, and what is true about them."""

    events: tuple[Event, ...]
    cycle_starts: tuple[float, ...]  # every rollout start, then the end of the last train phase
    steps_per_cycle: int
    start_steps: int
    end: float  # the last train phase ends and the job is done

    @property
    def target(self) -> int:
        return self.start_steps + self.steps_per_cycle * (len(self.cycle_starts) - 1)

    @property
    def whole_cycle_rate(self) -> float:
        """Steps per wall-clock second over all the whole cycles: the true throughput."""
        return self.steps_per_cycle * (len(self.cycle_starts) - 1) / (self.end - self.cycle_starts[0])

    @property
    def rollout_rate(self) -> float:
        """What the worker's progress events report while it steps."""
        rates = {e.sps for e in self.events if isinstance(e, ProgressEvent) and e.sps}
        (rate,) = rates
        return rate

    def until(self, t: float) -> list[Event]:
        """The events written by `t`."""
        return [e for e in self.events if e.t <= t]


def script(t0: float, *, cycles: int, rollout_s: float, train_s: Sequence[float] | float, steps_per_cycle: int,
           start_steps: int = 0, startup_s: float = 20.0, finish: bool = True) -> Script:  # fmt: skip
    """A worker that starts at `t0 - startup_s` (imports, env creation), then runs `cycles` cycles
    from `t0`: a rollout of `rollout_s` with a progress event every second (its `sps` the rollout
    rate), then a train phase of `train_s` (one value, or one per cycle, used in turn)."""
    trains = [float(train_s)] if isinstance(train_s, (int, float)) else [float(x) for x in train_s]
    rate = steps_per_cycle / rollout_s
    events: list[Event] = [StartedEvent(t0 - startup_s, pid=1, device="cpu", resumed_from_step=start_steps or None)]
    t, steps, starts = t0, start_steps, []
    for k in range(cycles):
        starts.append(t)
        events.append(PhaseEvent(t, "rollout", k, steps))
        for second in range(1, int(rollout_s)):
            events.append(ProgressEvent(t + second, steps + int(rate * second), k, sps=rate))
        steps += steps_per_cycle
        events.append(PhaseEvent(t + rollout_s, "train", k + 1, steps))
        t += rollout_s + trains[k % len(trains)]
    starts.append(t)
    if finish:
        events.append(FinishedEvent(t, "done", steps, duration=t - t0))
    return Script(tuple(events), tuple(starts), steps_per_cycle, start_steps, t)
