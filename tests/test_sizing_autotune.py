"""The --auto loop against a fake clock and a scripted machine: aggregate SPS as a function of
the number of parallel jobs, as the seeds saw it (more jobs help until the cores are full)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pytest import approx

from cockpit.contract.controls import AddJob, ApplyAdvice, Control, SetSlots
from cockpit.contract.states import RunStatus
from cockpit.core.feed.snapshot import RunState
from cockpit.core.sizing.autotune import AutoTuner
from tests.fakeclock import FakeClock
from tests.tui_fakes import job_view

TICK_S = 0.2
START_S = 3.0  # a new job's worker takes this long before it steps


class ScriptedRun:
    """`agents` jobs, `slots` of them running; together they step at `sps_for(slots)`."""

    def __init__(self, clock: FakeClock, sps_for: Callable[[int], float], agents: int = 8, slots: int = 1,
                 peak_gpu_mem: int | None = None, envs_factor: Callable[[int], float] = lambda n: 1.0,
                 n_envs: int = 8, mps_factor: float = 1.0) -> None:  # fmt: skip
        self.clock, self.agents, self.slots = clock, agents, slots
        self.mps = False
        self.sps_for = lambda slots: sps_for(slots) * envs_factor(self.n_envs) * (mps_factor if self.mps else 1.0)
        self.n_envs = n_envs
        self.applied: list[str] = []
        self.peak = peak_gpu_mem
        self.steps = [0.0] * agents
        self.started_at: dict[int, float] = {}
        self.added = 0

    def apply(self, commands: list[Control]) -> None:
        for command in commands:
            if isinstance(command, SetSlots):
                self.slots = command.slots
            elif isinstance(command, ApplyAdvice):
                if command.setting == "mps":
                    self.mps = command.suggested == "on"
                else:
                    assert command.setting == "n_envs"
                    self.n_envs = int(command.suggested)
                self.applied.append(f"{command.setting}={command.suggested}")
                self.started_at = {i: self.clock.monotonic() for i in self.started_at}  # checkpoint + restart
            elif isinstance(command, AddJob):
                self.agents += 1
                self.steps.append(0.0)
                self.added += 1

    def state(self) -> RunState:
        now = self.clock.monotonic()
        for i in range(self.slots):
            self.started_at.setdefault(i, now)
        for i in list(self.started_at):
            if i >= self.slots:
                del self.started_at[i]
        running = [i for i, t in self.started_at.items() if now - t >= START_S]
        for i in running:
            self.steps[i] += self.sps_for(self.slots) / len(running) * TICK_S
        jobs = []
        for i in range(self.agents):
            state = "running" if i in running else "starting" if i in self.started_at else "queued"
            jobs.append(replace(job_view(i, gpu=False, state=state), steps=int(self.steps[i]),
                                peak_gpu_mem_bytes=self.peak if i in running else None))  # fmt: skip
        return RunState("run", "heavy", "LunarLander-v3", RunStatus.RUNNING, 0.0, now, self.slots, tuple(jobs), None,
                        None, "", ())  # fmt: skip


def drive(tuner: AutoTuner, run: ScriptedRun, seconds: float) -> list[int]:
    """Tick the loop for `seconds`; the slot counts it went through."""
    seen = [run.slots]
    for _ in range(int(seconds / TICK_S)):
        run.apply(tuner.tick(run.state()))
        if run.slots != seen[-1]:
            seen.append(run.slots)
        run.clock.t += TICK_S
    return seen


def knee_at_3(slots: int) -> float:
    return {1: 1000.0, 2: 1800.0, 3: 2400.0, 4: 2450.0}.get(slots, 2450.0)


def test_it_scales_up_while_each_job_gains_and_stops_at_the_knee() -> None:
    clock = FakeClock()
    tuner = AutoTuner(clock=clock, max_slots=16)
    assert drive(tuner, ScriptedRun(clock, knee_at_3), 400) == [1, 2, 3, 4]
    assert tuner.done
    assert [c.action for c in tuner.log] == ["add", "keep", "add", "keep", "add", "keep"]
    last = tuner.log[-1]
    assert "the knee" in last.reason
    assert last.sps_before == approx(2400, rel=1e-3) and last.sps_after == approx(2450, rel=1e-3)  # +2 %


def test_it_takes_back_a_job_that_made_things_worse() -> None:
    clock = FakeClock()
    tuner = AutoTuner(clock=clock, max_slots=16)
    worse_at_3 = {1: 1000.0, 2: 1600.0, 3: 1400.0}.get
    assert drive(tuner, ScriptedRun(clock, lambda n: worse_at_3(n, 1400.0)), 400) == [1, 2, 3, 2]
    removal = tuner.log[-1]
    assert removal.action == "remove" and (removal.slots_before, removal.slots_after) == (3, 2)
    assert removal.sps_before == approx(1600, rel=1e-3) and removal.sps_after == approx(1400, rel=1e-3)


def test_it_never_goes_over_the_core_budget() -> None:
    clock = FakeClock()
    tuner = AutoTuner(clock=clock, max_slots=2)
    linear = lambda n: 1000.0 * n  # noqa: E731 - every job would still gain
    assert drive(tuner, ScriptedRun(clock, linear), 400) == [1, 2]
    assert tuner.log[-1].action == "stop" and "core budget allows 2" in tuner.log[-1].reason


def test_gpu_memory_caps_it_and_an_empty_queue_gets_a_new_agent() -> None:
    clock = FakeClock()
    gib = 1024**3
    tuner = AutoTuner(clock=clock, max_slots=16, gpu_memory_bytes=8 * gib)
    run = ScriptedRun(clock, lambda n: 1000.0 * n, peak_gpu_mem=3 * gib)  # 0.9 x 8 / 3: 2 fit
    assert drive(tuner, run, 400) == [1, 2]
    assert "GPU memory allows 2" in tuner.log[-1].reason
    clock2 = FakeClock()
    tuner2 = AutoTuner(clock=clock2, max_slots=3)
    lone = ScriptedRun(clock2, lambda n: 1000.0 * n, agents=1)
    assert drive(tuner2, lone, 400) == [1, 2, 3]
    assert lone.added == 2 and lone.agents == 3  # nobody was queued: each added job is a new agent


def test_windows_wait_for_new_workers_to_start() -> None:
    clock = FakeClock()
    tuner = AutoTuner(clock=clock, max_slots=16, window_s=30, settle_s=10)
    run = ScriptedRun(clock, knee_at_3)
    drive(tuner, run, 10 + 3 + 30 + 1)  # settle, start-up, one window
    (first,) = tuner.log
    assert first.action == "add" and abs(first.sps_before - 1000.0) < 10  # start-up time not counted


def test_then_it_doubles_n_envs_while_that_gains_and_goes_back_when_it_hurts() -> None:
    clock = FakeClock()
    tuner = AutoTuner(clock=clock, max_slots=16, n_envs=8, env_capacity=256)  # 4 jobs: up to 64 envs each
    factor = {8: 1.0, 16: 1.10, 32: 0.95}.get
    run = ScriptedRun(clock, knee_at_3, envs_factor=lambda n: factor(n, 0.9))
    drive(tuner, run, 800)
    assert tuner.done and run.slots == 4  # the job count settled first, at the knee
    assert run.applied == ["n_envs=16", "n_envs=32", "n_envs=16"]  # 16 gained 10 %, 32 lost: back to 16
    assert [c.action for c in tuner.log if c.action.startswith("envs")] == ["envs try", "envs keep", "envs try",
                                                                            "envs back"]  # fmt: skip


def test_n_envs_never_outgrow_the_cores() -> None:
    clock = FakeClock()
    tuner = AutoTuner(clock=clock, max_slots=2, n_envs=8, env_capacity=32)  # 2 jobs: 16 envs each at most
    run = ScriptedRun(clock, lambda n: 1000.0 * n, envs_factor=lambda n: n / 8)  # more envs always help
    drive(tuner, run, 800)
    assert run.applied == ["n_envs=16"] and "at most 16 envs per job" in tuner.log[-1].reason


def test_with_a_daemon_ready_it_measures_mps_last_and_keeps_it_for_a_gain() -> None:
    clock = FakeClock()
    tuner = AutoTuner(clock=clock, max_slots=16, n_envs=8, env_capacity=256, mps=True)
    run = ScriptedRun(clock, knee_at_3, envs_factor=lambda n: 1.0 if n == 8 else 0.9, mps_factor=1.2)
    drive(tuner, run, 800)
    assert tuner.done and run.slots == 4 and run.mps
    assert run.applied == ["n_envs=16", "n_envs=8", "mps=on"]  # the envs first, then MPS
    assert [c.action for c in tuner.log if c.action.startswith("mps")] == ["mps try", "mps keep"]
    jobs, off, on = tuner.mps_measured or (0, 0.0, 0.0)
    assert jobs == 4 and on / off == approx(1.2, rel=0.02) and off == approx(2450, rel=0.02)


def test_mps_that_does_not_gain_is_turned_off_again() -> None:
    clock = FakeClock()
    tuner = AutoTuner(clock=clock, max_slots=16, mps=True)
    run = ScriptedRun(clock, knee_at_3, mps_factor=1.02)  # under the 5 % a change must gain
    drive(tuner, run, 800)
    assert tuner.done and not run.mps and run.applied == ["mps=on", "mps=off"]
    assert tuner.log[-1].action == "mps off" and "off again" in tuner.log[-1].reason
    assert tuner.mps_measured is not None and tuner.mps_measured[2] / tuner.mps_measured[1] == approx(1.02, rel=0.02)


def test_mps_is_not_tried_for_one_job_nor_without_a_daemon() -> None:
    clock = FakeClock()
    tuner = AutoTuner(clock=clock, max_slots=1, mps=True)
    run = ScriptedRun(clock, knee_at_3, mps_factor=1.5)
    drive(tuner, run, 400)
    assert tuner.done and run.applied == [] and tuner.log[-1].action == "mps skip"
    clock2 = FakeClock()
    plain = AutoTuner(clock=clock2, max_slots=16)
    run2 = ScriptedRun(clock2, knee_at_3, mps_factor=1.5)
    drive(plain, run2, 800)
    assert plain.done and run2.applied == [] and plain.mps_measured is None
