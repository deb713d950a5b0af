"""`cockpit run --auto`: find the number of parallel jobs by measuring, one job at a time.

The loop the seeds ran by hand: measure the aggregate steps per second over a window (~30 s);
add a job while that gains at least `MIN_GAIN` and the cores and GPU memory allow; when an added
job makes the aggregate worse, take it back out. Then, with the job count settled, the same for
each job's n_envs: double it (the jobs checkpoint and resume with it, the batch following) while
that gains and the cores allow, and go back to the last good value when it hurts. Each window starts only
after the jobs have settled (`settle_s` after a change, with every slot's job running), so a
worker's start-up does not count against it. Every change is logged with the numbers before and
after; the session writes the log into run.toml's advice and shows it live.

Where an MPS daemon stands ready (`mps`: `run --auto` started one, its jobs not yet its clients),
MPS is the last setting: a window with the jobs as they are, then one with every job restarted
from its checkpoint as a client of the daemon; MPS stays on for a gain of at least `min_gain`, and
is turned off again (the jobs restarted once more) otherwise. `mps_measured` keeps the two
figures for the advisor, whichever way it went. One job shares the GPU with nobody: not tried.

It only reads `RunState`s and the clock, and answers with supervisor commands: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cockpit.contract.advice import AdviceSetting
from cockpit.contract.controls import AddJob, ApplyAdvice, Control, SetSlots
from cockpit.contract.runrecord import AdviceRecord, iso
from cockpit.contract.states import JobState
from cockpit.core.feed.snapshot import RunState
from cockpit.core.machine.clock import Clock
from cockpit.core.sizing.advisor import max_jobs_for_gpu_memory

WINDOW_S = 30.0
SETTLE_S = 10.0
MIN_GAIN = 0.05


@dataclass(frozen=True)
class Change:
    """One decision and the measurements behind it."""

    t: float  # Unix time
    action: str  # "add", "keep", "remove", "stop"
    slots_before: int
    slots_after: int
    sps_before: float | None
    sps_after: float | None
    reason: str

    def line(self) -> str:
        """One line for a panel or a log."""
        return f"auto: {self.action} ({self.slots_before} -> {self.slots_after} jobs): {self.reason}"

    def record(self) -> AdviceRecord:
        """The decision as an entry of run.toml's advice log."""
        before, after = self.sps_before, self.sps_after
        return AdviceRecord(
            at=iso(self.t) or "",
            action=self.action,
            jobs_before=self.slots_before,
            jobs_after=self.slots_after,
            sps_before=round(before, 1) if before is not None else None,
            sps_after=round(after, 1) if after is not None else None,
            reason=self.reason,
        )


@dataclass
class AutoTuner:
    """Call `tick(state)` at every supervisor tick; submit the command it returns, if any.

    `max_slots` is the core budget's cap (the advisor's `max_jobs_for_cores`); the GPUs' compute
    modes cap it (`gpu_job_cap`: the jobs they take at once, `placement.job_capacity`; None: no cap;
    `gpu_job_cap_why` the line that says why), GPU memory caps it further once per-job peaks are
    measured, and a queue with nobody waiting cannot grow.
    """

    clock: Clock
    max_slots: int
    gpu_memory_bytes: int | None = None
    window_s: float = WINDOW_S
    settle_s: float = SETTLE_S
    min_gain: float = MIN_GAIN
    n_envs: int | None = None  # the jobs' envs now; None: only the job count is tuned
    env_capacity: int = 0  # envs the cores can step in all (the advisor's envs per core x cores)
    mps: bool = False  # an MPS daemon stands ready: try the jobs as its clients last
    gpu_job_cap: int | None = None
    gpu_job_cap_why: str = ""
    log: list[Change] = field(default_factory=list)
    done: bool = False
    mps_measured: tuple[int, float, float] | None = None  # (jobs, SPS without MPS, SPS with it)
    # "jobs", then "envs-base" (a window to measure from) and "envs", then "mps-base" and "mps"
    _stage: str = "jobs"
    _settle_until: float | None = None
    _window_start: float | None = None
    _steps_start: int = 0
    _steps_total: int = 0
    _last_steps: dict[str, int] = field(default_factory=dict)
    _previous_sps: float | None = None
    _added_last: bool = False

    def _count_steps(self, state: RunState) -> None:
        # Per job and never negative: a job resumed from a checkpoint goes back a few steps.
        for job in state.jobs:
            before = self._last_steps.get(job.id, job.steps)
            self._steps_total += max(0, job.steps - before)
            self._last_steps[job.id] = job.steps

    def _gpu_cap(self, state: RunState) -> int | None:
        peaks = [j.peak_gpu_mem_bytes for j in state.jobs if j.peak_gpu_mem_bytes]
        if not peaks or not self.gpu_memory_bytes:
            return None
        return max_jobs_for_gpu_memory(max(peaks), self.gpu_memory_bytes)

    def _why_not_add(self, state: RunState) -> str | None:
        if state.slots + 1 > self.max_slots:
            return f"the core budget allows {self.max_slots} job(s)"
        if self.gpu_job_cap is not None and state.slots + 1 > self.gpu_job_cap:
            return self.gpu_job_cap_why or f"the GPUs' compute modes allow {self.gpu_job_cap} job(s)"
        gpu_cap = self._gpu_cap(state)
        if gpu_cap is not None and state.slots + 1 > gpu_cap:
            return f"GPU memory allows {gpu_cap} job(s) at the measured peak"
        return None

    def _settled(self, state: RunState, now: float) -> bool:
        if self._settle_until is None:
            self._settle_until = now + self.settle_s
        running = state.count(JobState.RUNNING)
        return now >= self._settle_until and running >= min(state.slots, running + state.count(JobState.QUEUED))

    def tick(self, state: RunState) -> list[Control]:
        """Advance the loop with the run's newest state; the commands to submit, if it decided.

        Adding a job raises the slots by one; when no agent is waiting in the queue it also adds
        one (next seed), so a plain `--jobs 1 --auto` grows to the knee."""
        self._count_steps(state)
        if self.done:
            return []
        now = self.clock.monotonic()
        if self._window_start is None:
            if self._settled(state, now):
                self._window_start, self._steps_start = now, self._steps_total
            return []
        if now - self._window_start < self.window_s:
            return []
        sps = (self._steps_total - self._steps_start) / (now - self._window_start)
        self._window_start, self._settle_until = None, None
        command: SetSlots | ApplyAdvice | None
        if self._stage == "jobs":
            command = self._decide(state, sps, self.clock.time())
        elif self._stage.startswith("mps"):
            command = self._decide_mps(state, sps, self.clock.time())
        else:
            command = self._decide_envs(state, sps, self.clock.time())
        if isinstance(command, SetSlots) and command.slots > state.slots and state.count(JobState.QUEUED) == 0:
            return [AddJob(), command]
        return [command] if command is not None else []

    def _decide_envs(self, state: RunState, sps: float, now: float) -> ApplyAdvice | None:
        n = self.n_envs
        assert n is not None
        cap = self.env_capacity // max(1, state.slots)
        if self._stage == "envs":
            before = self._previous_sps or 0.0
            gain = sps / before - 1 if before > 0 else math.inf
            if gain < 0:
                back = n // 2
                self.n_envs = back
                worse = f"n_envs {n}: {sps:,.0f} SPS vs {before:,.0f} with {back} ({gain:+.0%}); back to {back}"
                self._finish(Change(now, "envs back", state.slots, state.slots, before, sps, worse))
                return ApplyAdvice(AdviceSetting.N_ENVS, str(back))
            if gain < self.min_gain:
                self._finish(
                    Change(
                        now,
                        "envs keep",
                        state.slots,
                        state.slots,
                        before,
                        sps,
                        f"n_envs {n}: {gain:+.1%}, under {self.min_gain:.0%}: the knee",
                    )
                )
                return None
            self.log.append(
                Change(now, "envs keep", state.slots, state.slots, before, sps, f"n_envs {n} gained {gain:+.0%}")
            )
        if 2 * n > cap:
            full = f"n_envs {n}: the cores step at most {cap} envs per job with {state.slots} job(s)"
            self._finish(Change(now, "stop", state.slots, state.slots, None, sps, full))
            return None
        self._stage, self._previous_sps, self.n_envs = "envs", sps, 2 * n
        self.log.append(
            Change(now, "envs try", state.slots, state.slots, sps, None, f"n_envs {n} -> {2 * n} at {sps:,.0f} SPS")
        )
        return ApplyAdvice(AdviceSetting.N_ENVS, str(2 * n))

    def _decide(self, state: RunState, sps: float, now: float) -> SetSlots | None:
        slots, before = state.slots, self._previous_sps
        if self._added_last and before is not None:
            gain = sps / before - 1 if before > 0 else math.inf
            if gain < 0:
                worse = f"{sps:,.0f} SPS with {slots} jobs vs {before:,.0f} with {slots - 1} ({gain:+.0%})"
                self._finish(Change(now, "remove", slots, slots - 1, before, sps, worse))
                return SetSlots(slots - 1)
            if gain < self.min_gain:
                self._finish(
                    Change(
                        now,
                        "keep",
                        slots,
                        slots,
                        before,
                        sps,
                        f"the knee: {gain:+.1%} from the last job, under {self.min_gain:.0%}",
                    )
                )
                return None
            self.log.append(Change(now, "keep", slots, slots, before, sps, f"the last job gained {gain:+.0%}"))
        blocked = self._why_not_add(state)
        if blocked is not None:
            self._finish(Change(now, "stop", slots, slots, before, sps, f"{sps:,.0f} SPS with {slots} jobs; {blocked}"))
            return None
        self.log.append(Change(now, "add", slots, slots + 1, sps, None, f"{sps:,.0f} SPS with {slots} job(s)"))
        self._previous_sps, self._added_last = sps, True
        return SetSlots(slots + 1)

    def _decide_mps(self, state: RunState, sps: float, now: float) -> ApplyAdvice | None:
        """The base window turns MPS on; the next one keeps it for a gain, or turns it off."""
        slots = state.slots
        if self._stage == "mps-base":
            self._stage, self._previous_sps = "mps", sps
            self.log.append(
                Change(now, "mps try", slots, slots, sps, None, f"MPS on for {slots} jobs at {sps:,.0f} SPS without it")
            )
            return ApplyAdvice(AdviceSetting.MPS, "on")
        before = self._previous_sps or 0.0
        self.mps_measured = (slots, before, sps)
        gain = sps / before - 1 if before > 0 else math.inf
        self.done = True
        if gain < self.min_gain:
            self.log.append(
                Change(
                    now,
                    "mps off",
                    slots,
                    slots,
                    before,
                    sps,
                    f"MPS: {sps:,.0f} SPS vs {before:,.0f} without ({gain:+.1%}, under {self.min_gain:.0%}); off again",
                )
            )
            return ApplyAdvice(AdviceSetting.MPS, "off")
        self.log.append(
            Change(
                now, "mps keep", slots, slots, before, sps, f"MPS gained {gain:+.0%} ({before:,.0f} -> {sps:,.0f} SPS)"
            )
        )
        return None

    def _finish(self, change: Change) -> None:
        self.log.append(change)
        if self._stage == "jobs" and self.n_envs is not None:
            self._stage = "envs-base"  # the next window measures the settled job count
        elif self.mps and not self._stage.startswith("mps") and change.slots_after >= 2:
            self._stage = "mps-base"  # the next window measures the settled jobs without MPS
        else:
            if self.mps and not self._stage.startswith("mps"):
                self.log.append(
                    Change(
                        change.t,
                        "mps skip",
                        change.slots_after,
                        change.slots_after,
                        None,
                        None,
                        "one job shares the GPU with nobody: MPS not tried",
                    )
                )
            self.done = True
