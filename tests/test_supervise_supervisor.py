"""The supervisor against a fake launcher and a fake clock: queue, back-off, stops, interrupts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cockpit.contract.controls import AddJob, KillJob, RestartJob, SetSlots, StopJob
from cockpit.contract.events import EVENTS_FILE, EventWriter
from cockpit.contract.runrecord import RunRecord, read, write
from cockpit.contract.runspec import RestartPolicy, RunSpec
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.launch.local import LocalJobFiles
from cockpit.core.launch.protocol import LaunchRequest, WorkerHandle
from cockpit.core.machine.host import HostInfo, thread_budget
from cockpit.core.record.runlog import Recorder, phase_accounting, record
from cockpit.core.supervise.jobs import InvalidTransition, Job
from cockpit.core.supervise.supervisor import STOP_GRACE_S, JobTemplate, Placement, Supervisor
from tests.cycles import script
from tests.fakeclock import FakeClock


@dataclass
class FakeProcess:
    request: LaunchRequest
    pid: int = 0
    exit_code: int | None = None
    signals: list[str] = field(default_factory=list)
    stopped: bool = False  # process state T (SIGSTOP)


class FakeLauncher(LocalJobFiles):
    """Records launches and signals; the test decides when each 'process' exits (its events are
    read from the job dir, where the tests write them)."""

    def __init__(self) -> None:
        self.processes: list[FakeProcess] = []

    def launch(self, request: LaunchRequest) -> WorkerHandle:
        proc = FakeProcess(request, pid=10_001 + len(self.processes))
        self.processes.append(proc)
        return WorkerHandle(request.job_id, proc.pid, request.job_dir, proc)

    def terminate(self, handle: WorkerHandle) -> None:
        handle.process.signals.append("TERM")

    def kill(self, handle: WorkerHandle) -> None:
        handle.process.signals.append("KILL")
        handle.process.exit_code = -9

    def poll(self, handle: WorkerHandle) -> int | None:
        return handle.process.exit_code

    def stderr_tail(self, handle: WorkerHandle, lines: int = 5) -> str:
        return "RuntimeError: segfault in env"

    def stopped(self, handle: WorkerHandle) -> bool:
        return handle.process.stopped and handle.process.exit_code is None

    def live(self, job_id: str) -> FakeProcess:
        (proc,) = [p for p in self.processes if p.request.job_id == job_id and p.exit_code is None]
        return proc


def make(tmp_path: Path, agents: int = 2, slots: int = 2, restart: RestartPolicy | None = None):
    clock, launcher = FakeClock(), FakeLauncher()
    sup = Supervisor(
        run_dir=tmp_path,
        template=JobTemplate("cartpole", "CartPole-v1", 1000),
        seeds=range(agents),
        slots=slots,
        launcher=launcher,
        budget=thread_budget(slots, 2),
        restart=restart or RestartPolicy(),
        clock=clock,
    )
    return sup, launcher, clock


def run_log(sup: Supervisor, spec: RunSpec) -> RunRecord:
    """Write run.toml in `sup`'s run dir as a run of `spec` does (`runlog.record` of the
    supervisor's snapshot now) and read it back."""
    recorder = Recorder(sup.run_dir)
    state = sup.snapshot()
    try:
        write(sup.run_dir, record(spec, state, HostInfo("h", "cpu", 2, 2, 2**30, "Linux"),
                                  phase_accounting({}, recorder, state.now), recorder))  # fmt: skip
    finally:
        recorder.close()
    return read(sup.run_dir)


def events(sup: Supervisor, job_id: str) -> EventWriter:
    return EventWriter(sup.jobs[job_id].job_dir / EVENTS_FILE)


def finish(sup: Supervisor, launcher: FakeLauncher, job_id: str, status: str = "done", code: int = 0) -> None:
    steps = 1000 if status == "done" else 480
    writer = events(sup, job_id)
    writer.started(config={}, pid=launcher.live(job_id).pid, device="cpu", versions={})
    writer.finished(status=status, steps=steps, duration=1.0)
    launcher.live(job_id).exit_code = code


def crash(
    sup: Supervisor, launcher: FakeLauncher, job_id: str, message: str | None = "boom", trained: int = 16
) -> None:
    """Crash `job_id`'s worker with `message` (None: no error event) after it trained `trained`
    steps in this attempt (a transient fault); `trained=0` crashes it before a single step."""
    job, writer = sup.jobs[job_id], events(sup, job_id)
    if trained:
        if not job.attempt_started_seen:
            writer.started(config={}, pid=launcher.live(job_id).pid, device="cpu", versions={},
                           resumed_from_step=job.steps or None)  # fmt: skip
        writer.progress(num_timesteps=job.steps + trained)
    if message:
        writer.error(type="RuntimeError", message=message)
    launcher.live(job_id).exit_code = 1


def live_count(sup: Supervisor) -> int:
    return sum(1 for j in sup.jobs.values() if j.state.live)


def running(launcher: FakeLauncher) -> int:
    """The worker processes launched and not yet exited, whatever the supervisor believes."""
    return sum(1 for p in launcher.processes if p.exit_code is None)


def test_agents_queue_through_the_slots(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path, agents=5, slots=2)
    sup.tick()
    assert [p.request.job_id for p in launcher.processes] == ["000", "001"]
    args = launcher.processes[0].request.args
    assert args.seed == 0 and args.threads == 1
    finished: list[str] = []
    while not sup.finished:
        assert live_count(sup) <= 2 and running(launcher) <= 2
        job_id = next(p.request.job_id for p in launcher.processes if p.exit_code is None)
        writer = events(sup, job_id)
        writer.started(config={}, pid=1, device="cpu", versions={})
        sup.tick()
        # Its `finished` event comes before the process exits: the slot stays taken until it does.
        writer.finished(status="done", steps=1000, duration=1.0)
        sup.tick()
        assert running(launcher) <= 2
        launcher.live(job_id).exit_code = 0
        finished.append(job_id)
        sup.tick()
    assert finished == ["000", "001", "002", "003", "004"]
    assert sup.status is RunStatus.DONE
    assert [j.seed for j in sup.jobs.values()] == [0, 1, 2, 3, 4]


def test_a_crashing_job_backs_off_1_2_4_s_then_fails_with_its_error(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=3))
    sup.tick()
    job = sup.jobs["000"]
    for delay in (1, 2, 4):
        crash(sup, launcher, "000")
        sup.tick()
        assert job.state is JobState.BACKOFF and job.error == "RuntimeError: boom"
        clock.t += delay - 0.1
        sup.tick()
        assert job.state is JobState.BACKOFF  # not yet
        clock.t += 0.1
        sup.tick()
        assert job.state is JobState.STARTING
    crash(sup, launcher, "000", message=None)  # no error event: the stderr tail explains
    sup.tick()
    assert job.state is JobState.FAILED and job.restarts == 3 and len(launcher.processes) == 4
    assert job.error == "exited with code 1: RuntimeError: segfault in env"
    assert job.exit_reason == "failed after 3 restarts"
    assert sup.finished and sup.status is RunStatus.FAILED


def test_a_backoff_keeps_its_slot(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path, agents=3, slots=2)
    sup.tick()
    crash(sup, launcher, "000")
    sup.tick()
    assert sup.jobs["000"].state is JobState.BACKOFF and sup.jobs["002"].state is JobState.QUEUED


def test_stop_then_restart_a_job(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path, agents=1, slots=1)
    sup.tick()
    sup.submit(StopJob("000"))
    sup.tick()
    job = sup.jobs["000"]
    assert job.state is JobState.STOPPING and launcher.processes[0].signals == ["TERM"]
    finish(sup, launcher, "000", status="stopped")
    sup.tick()
    assert job.state is JobState.STOPPED and job.exit_reason == "stopped" and job.restarts == 0
    sup.submit(RestartJob("000"))
    sup.tick()
    assert job.state is JobState.STARTING and len(launcher.processes) == 2


def test_add_job_takes_the_next_seed(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path, agents=2, slots=3)
    sup.submit(AddJob())
    sup.tick()
    assert [j.seed for j in sup.jobs.values()] == [0, 1, 2] and len(launcher.processes) == 3


def test_interrupt_stops_everything_and_kills_what_outlives_the_grace(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=3, slots=2)
    sup.tick()
    sup.interrupt()
    sup.tick()
    assert [p.signals for p in launcher.processes] == [["TERM"], ["TERM"]]
    assert sup.jobs["002"].state is JobState.STOPPED  # never started; resumable later
    finish(sup, launcher, "000", status="stopped")
    sup.tick()
    assert sup.status is RunStatus.STOPPING
    clock.t += STOP_GRACE_S
    sup.tick()
    assert launcher.processes[1].signals == ["TERM", "KILL"]
    sup.tick()
    assert sup.finished and sup.status is RunStatus.INTERRUPTED
    assert len(launcher.processes) == 2  # nothing new started


def test_a_second_interrupt_kills_at_once(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path, agents=1, slots=1)
    sup.tick()
    sup.interrupt()
    sup.tick()
    sup.interrupt()
    sup.tick()
    assert launcher.processes[0].signals == ["TERM", "KILL"]


def test_states_change_only_along_the_life_cycle(tmp_path: Path) -> None:
    job = Job("000", 0, tmp_path, 100)
    with pytest.raises(InvalidTransition, match="queued -> running is not allowed"):
        job.change_state(JobState.RUNNING, 0.0)
    job.change_state(JobState.STARTING, 1.0)
    assert job.state is JobState.STARTING and job.state_since == 1.0


def test_progress_events_reach_the_snapshot(tmp_path: Path) -> None:
    sup, _, _ = make(tmp_path, agents=1, slots=1)
    sup.tick()
    w = events(sup, "000")
    w.started(config={}, pid=1, device="cpu", versions={}, resumed_from_step=None)
    w.phase("rollout", iteration=0, num_timesteps=0)
    w.progress(num_timesteps=256, sps=5000.0, ep_rew_mean=21.5, ep_len_mean=21.5, episodes=9)
    w.checkpoint(path="x", step=256)
    sup.tick()
    (view,) = sup.snapshot().jobs
    # The worker's own sps is its rollout rate, kept as such; the live SPS needs a whole cycle.
    assert (view.state, view.phase, view.steps, view.rollout_sps, view.ep_rew_mean) == (
        "running", "rollout", 256, 5000.0, 21.5
    )  # fmt: skip
    assert view.sps is None and view.eta_s is None
    assert view.checkpoints == 1 and view.last_checkpoint_step == 256 and view.pid == 10_001


def test_pinned_slots_pass_their_cpus_to_the_launcher(tmp_path: Path) -> None:
    launcher = FakeLauncher()
    sup = Supervisor(
        run_dir=tmp_path, template=JobTemplate("cartpole", "CartPole-v1", 1000), seeds=range(3), slots=2,
        launcher=launcher, budget=thread_budget(2, 2), placement=Placement(pin=True), clock=FakeClock(),
    )  # fmt: skip
    sup.tick()
    cpus = [p.request.cpus for p in launcher.processes]
    assert len(cpus) == 2 and all(cpus) and not set(cpus[0]) & set(cpus[1] or ())
    finish(sup, launcher, "000")
    sup.tick()
    assert launcher.processes[2].request.cpus == cpus[0]  # the freed slot's cores go to the next job


def test_kill_job_stops_it_at_once_and_it_can_be_restarted(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path, agents=1, slots=1)
    sup.tick()
    sup.submit(KillJob("000"))
    sup.tick()
    sup.tick()
    job = sup.jobs["000"]
    assert launcher.processes[0].signals == ["KILL"]
    assert job.state is JobState.STOPPED and job.exit_reason == "killed by SIGKILL" and job.restarts == 0
    sup.submit(RestartJob("000"))
    sup.tick()
    assert job.state is JobState.STARTING and len(launcher.processes) == 2


def test_a_previous_workers_late_finished_event_is_not_this_attempts(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path, agents=1, slots=1)
    sup.tick()
    events(sup, "000").finished(status="stopped", steps=480, duration=1.0)  # an old worker, still exiting
    launcher.live("000").exit_code = 2  # this attempt found the job dir locked
    sup.tick()
    assert sup.jobs["000"].state is JobState.BACKOFF  # a crash to retry, not a clean stop


def test_a_requeued_job_starts_over_with_a_fresh_restart_budget(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=1))
    sup.tick()
    crash(sup, launcher, "000")
    sup.tick()
    clock.t += 1
    sup.tick()
    crash(sup, launcher, "000")
    sup.tick()
    job = sup.jobs["000"]
    assert job.state is JobState.FAILED and job.restarts == 1
    sup.submit(RestartJob("000"))
    sup.tick()
    assert job.state is JobState.STARTING and job.restarts == 0 and job.ended_at is None
    crash(sup, launcher, "000")
    sup.tick()
    assert job.state is JobState.BACKOFF  # not straight back to failed


def test_restoring_a_resumed_job_closes_its_last_phase(tmp_path: Path) -> None:
    sup, _, clock = make(tmp_path, agents=1, slots=1)
    writer = events(sup, "000")
    writer.started(t=clock.t - 100, config={}, pid=1, device="cpu", versions={})
    writer.phase(t=clock.t - 90, phase="rollout", iteration=0, num_timesteps=0)
    writer.phase(t=clock.t - 80, phase="train", iteration=1, num_timesteps=256)
    job = sup.jobs["000"]
    assert [e.kind for e in sup.restore(job)] == ["started", "phase", "phase"]
    assert job.phases[-1] == (clock.t - 80, None) and job.phase is None
    assert job.steps_at_first_start == 256


def test_more_slots_start_queued_agents_and_fewer_requeue_the_newest(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=4, slots=1)
    sup.tick()
    for step in range(1, 4):
        clock.t += 1  # the jobs start in order 000, 001, 002
        sup.submit(SetSlots(step + 1 if step < 3 else 3))
        sup.tick()
    assert [p.request.job_id for p in launcher.processes] == ["000", "001", "002"]
    assert sup.slots == 3 and sup.jobs["003"].state is JobState.QUEUED
    assert launcher.processes[-1].request.args.threads == 1  # 2 cores shared by 3 slots: 1 each at least
    sup.submit(SetSlots(2))
    sup.tick()
    newest = sup.jobs["002"]
    assert newest.state is JobState.STOPPING and launcher.live("002").signals == ["TERM"]
    assert sup.jobs["000"].state is sup.jobs["001"].state is JobState.STARTING
    finish(sup, launcher, "002", status="stopped")
    sup.tick()
    assert newest.state is JobState.QUEUED and list(sup.queue) == ["002", "003"]  # front of the queue
    assert live_count(sup) == 2 and running(launcher) == 2


HOUR = 3600.0


def crash_after(sup: Supervisor, launcher: FakeLauncher, clock: FakeClock, uptime: float) -> float | None:
    """Let job 000's attempt run `uptime` seconds, crash it, and see it through the back-off;
    returns the back-off it got (checked to the tick), or None when it was marked failed."""
    job = sup.jobs["000"]
    assert job.state in (JobState.STARTING, JobState.RUNNING)
    clock.t += uptime
    crash(sup, launcher, "000")
    sup.tick()
    if job.state is JobState.FAILED:
        return None
    assert job.state is JobState.BACKOFF
    delay = job.restart_at - clock.monotonic()
    clock.t += delay - 0.01
    sup.tick()
    assert job.state is JobState.BACKOFF  # not before its back-off is over
    clock.t += 0.01
    sup.tick()
    assert job.state is JobState.STARTING
    return delay


def test_a_job_that_crashes_every_3_hours_for_3_days_is_never_failed(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=3))
    sup.tick()
    job = sup.jobs["000"]
    for crash_no in range(24):
        # Each attempt resumes from the checkpoint the one before it wrote, and writes the next.
        step = crash_no * 10_000
        resumed = step or None
        events(sup, "000").started(config={}, pid=1, device="cpu", versions={}, resumed_from_step=resumed)
        sup.tick()
        assert job.state is JobState.RUNNING and job.steps == step
        events(sup, "000").checkpoint(path=f"ckpt_{step + 10_000}", step=step + 10_000)
        assert crash_after(sup, launcher, clock, 3 * HOUR) == 1.0  # always the first restart in a row
    assert job.restarts == 24 and job.restarts_in_a_row == 1 and job.last_checkpoint_step == 240_000
    assert len(launcher.processes) == 25 and {p.request.args.job_dir for p in launcher.processes} == {job.job_dir}
    assert not sup.finished and sup.status is RunStatus.RUNNING


def test_a_job_that_crashes_2_s_after_each_start_fails_after_max_restarts(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=3))
    sup.tick()
    delays = [crash_after(sup, launcher, clock, 2.0) for _ in range(4)]
    job = sup.jobs["000"]
    assert delays == [1.0, 2.0, 4.0, None]  # the back-off doubles, then the fourth crash fails it
    assert job.state is JobState.FAILED and job.exit_reason == "failed after 3 restarts" and job.restarts == 3
    assert len(launcher.processes) == 4 and sup.status is RunStatus.FAILED


def test_the_same_error_twice_before_a_single_step_is_input_and_is_not_retried(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=3))
    sup.tick()
    job = sup.jobs["000"]
    crash(sup, launcher, "000", message="'NoneType' object is not iterable", trained=0)
    sup.tick()
    assert job.state is JobState.BACKOFF  # the first time, it could be a passing fault
    clock.t += 1.0
    sup.tick()
    # The second start gets as far (its `started` event), and fails the same way before a step.
    events(sup, "000").started(config={}, pid=launcher.live("000").pid, device="cpu", versions={})
    crash(sup, launcher, "000", message="'NoneType' object is not iterable", trained=0)
    sup.tick()
    assert job.state is JobState.FAILED and len(launcher.processes) == 2 and job.restarts == 1
    assert job.exit_reason == "failed: the same error at each start"
    assert job.error is not None and job.error.startswith("RuntimeError: 'NoneType' object is not iterable (")
    assert "2 starts in a row, each before a single step" in job.error and "input" in job.error
    assert sup.finished and sup.status is RunStatus.FAILED


@pytest.mark.parametrize(
    "second",
    [
        pytest.param({"message": "boom", "trained": 16}, id="the same error after training steps"),
        pytest.param({"message": "another error", "trained": 0}, id="another error before a step"),
        pytest.param({"message": None, "trained": 0}, id="no error event: a different stderr tail"),
    ],
)
def test_a_crash_that_differs_or_trained_first_is_transient_and_restarts(tmp_path: Path, second: dict) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=3))
    sup.tick()
    job = sup.jobs["000"]
    crash(sup, launcher, "000", message="boom", trained=0)
    sup.tick()
    clock.t += 1.0
    sup.tick()
    crash(sup, launcher, "000", **second)
    sup.tick()
    assert job.state is JobState.BACKOFF and job.restarts == 2  # retried as a transient fault
    assert "before a single step" not in (job.error or "")


def test_a_kill_by_a_signal_before_a_step_is_not_taken_for_input(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=3))
    sup.tick()
    job = sup.jobs["000"]
    for _ in range(2):  # killed from outside (the OOM killer, say) twice: not the job's own error
        launcher.live("000").exit_code = -9
        sup.tick()
        assert job.state is JobState.BACKOFF
        clock.t += job.restart_at - clock.monotonic()
        sup.tick()
    assert job.restarts == 2 and job.state is JobState.STARTING


def test_the_back_off_doubles_up_to_its_cap(tmp_path: Path) -> None:
    policy = RestartPolicy(max_restarts=6, backoff_s=0.5, backoff_max_s=5.0)
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=policy)
    sup.tick()
    delays = [crash_after(sup, launcher, clock, 2.0) for _ in range(7)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, None]
    assert sup.jobs["000"].exit_reason == "failed after 6 restarts"


def test_a_healthy_run_between_crashes_starts_a_fresh_count(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=3))
    sup.tick()
    job = sup.jobs["000"]
    assert [crash_after(sup, launcher, clock, 2.0) for _ in range(2)] == [1.0, 2.0]
    assert crash_after(sup, launcher, clock, HOUR) == 1.0  # after an hour of training: restart 1 of 3 again
    assert job.restarts == 3 and job.restarts_in_a_row == 1
    assert [crash_after(sup, launcher, clock, 2.0) for _ in range(3)] == [2.0, 4.0, None]
    assert job.state is JobState.FAILED and job.exit_reason == "failed after 3 restarts"
    assert job.restarts == 5  # what the jobs table shows: every restart of the job in this run


def test_healthy_uptime_is_the_policys_and_counts_from_the_launch(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=2, healthy_uptime_s=60))
    sup.tick()
    for _ in range(3):
        assert crash_after(sup, launcher, clock, 60.0) == 1.0  # exactly the healthy uptime: a fresh count
    # The back-off is not uptime: 59 s from each launch is too soon, however long since the crash.
    assert [crash_after(sup, launcher, clock, 59.0) for _ in range(2)] == [2.0, None]
    assert sup.jobs["000"].exit_reason == "failed after 2 restarts"


def test_a_requeued_job_starts_a_fresh_streak(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=2))
    sup.tick()
    assert crash_after(sup, launcher, clock, 2.0) == 1.0
    sup.submit(StopJob("000"))
    sup.tick()
    finish(sup, launcher, "000", status="stopped")
    sup.tick()
    sup.submit(RestartJob("000"))
    sup.tick()
    job = sup.jobs["000"]
    assert job.state is JobState.STARTING and job.restarts == job.restarts_in_a_row == 0
    assert [crash_after(sup, launcher, clock, 2.0) for _ in range(3)] == [1.0, 2.0, None]


def test_a_full_disk_pauses_the_job_without_restarts_and_a_restart_continues_it(tmp_path: Path) -> None:
    # --disk-wait 0: no wait for space; the paused job waits for a restart command.
    sup, launcher, clock = make(tmp_path, agents=2, slots=2, restart=RestartPolicy(disk_wait_s=0))
    sup.tick()
    job = sup.jobs["000"]
    events(sup, "000").started(config={}, pid=1, device="cpu", versions={})
    sup.tick()
    path = job.job_dir / "checkpoints"
    events(sup, "000").error(type="disk_full", message=f"3.0 MiB free on {path}: No space left on device")
    launcher.live("000").exit_code = 3
    sup.tick()
    assert job.state is JobState.PAUSED and job.restarts == 0 and job.slot is None
    assert job.error == f"disk full: 3.0 MiB free on {path}: No space left on device"
    clock.t += 600  # no back-off, no relaunch: it waits for a restart command
    sup.tick()
    assert len(launcher.processes) == 2 and job.state is JobState.PAUSED
    assert not sup.finished  # job 001 still runs; a paused job counts as ended, like a stopped one
    finish(sup, launcher, "001")
    sup.tick()
    assert sup.finished and sup.status is RunStatus.FAILED
    view = {j.id: j for j in sup.snapshot().jobs}["000"]
    assert view.state is JobState.PAUSED and view.error.startswith("disk full: 3.0 MiB free on")
    sup.submit(RestartJob("000"))
    sup.tick()
    assert job.state is JobState.STARTING and len(launcher.processes) == 3 and job.error is None
    finish(sup, launcher, "000")
    sup.tick()
    assert job.state is JobState.DONE and sup.status is RunStatus.DONE


def test_exit_code_3_alone_pauses_the_job_with_the_free_space(tmp_path: Path) -> None:
    # The disk was too full for the worker's own error event: its exit code says it.
    sup, launcher, _ = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(disk_wait_s=0))
    sup.tick()
    launcher.live("000").exit_code = 3
    sup.tick()
    job = sup.jobs["000"]
    assert job.state is JobState.PAUSED and job.restarts == 0 and len(launcher.processes) == 1
    assert re.fullmatch(rf"disk full: \d+\.\d MiB free on {re.escape(str(job.job_dir))}", job.error or "")
    assert sup.finished and sup.status is RunStatus.FAILED


def _scripted(tmp_path: Path, *, target: int, agents: int) -> tuple[Supervisor, FakeLauncher, FakeClock]:
    clock, launcher = FakeClock(), FakeLauncher()
    sup = Supervisor(
        run_dir=tmp_path, template=JobTemplate("cartpole", "CartPole-v1", target), seeds=range(agents), slots=1,
        launcher=launcher, budget=thread_budget(1, 2), clock=clock,
    )  # fmt: skip
    return sup, launcher, clock


def test_the_live_sps_is_throughput_over_whole_cycles_and_the_etas_follow(tmp_path: Path) -> None:
    # 10 s rollouts at 204.8 SPS (what the worker reports), 50 s train phases: 34.1 SPS in truth.
    start = FakeClock().t
    run = script(start + 30, cycles=20, rollout_s=10, train_s=50, steps_per_cycle=2048)
    sup, _, clock = _scripted(tmp_path, target=run.target, agents=2)  # 1 slot: job 001 waits
    sup.tick()
    writer, pending, checked = events(sup, "000"), list(run.events[:-1]), 0
    for second in range(int(run.end - start)):
        clock.t = start + second
        while pending and pending[0].t <= clock.t:
            writer.emit(pending.pop(0))
        sup.tick()
        state = sup.snapshot()
        view = state.jobs[0]
        if clock.t < run.cycle_starts[1]:
            assert view.sps is None and view.eta_s is None and state.eta_s is None  # no whole cycle yet
            continue
        assert view.sps == pytest.approx(run.whole_cycle_rate, rel=0.05)
        assert view.rollout_sps in (None, pytest.approx(run.rollout_rate))
        assert view.eta_s == pytest.approx((run.target - view.steps) / view.sps)
        # The queued agent needs its whole target at the running job's rate, after it.
        assert state.eta_s == pytest.approx(view.eta_s + run.target / view.sps)
        if run.end - clock.t >= 600:
            assert view.eta_s == pytest.approx(run.end - clock.t, rel=0.10)
            checked += 1
    assert checked > 500


def test_a_restarted_job_measures_its_new_attempt_only(tmp_path: Path) -> None:
    start = FakeClock().t
    first = script(start + 30, cycles=3, rollout_s=10, train_s=50, steps_per_cycle=2048, finish=False)
    sup, launcher, clock = _scripted(tmp_path, target=100 * 2048, agents=1)
    sup.tick()
    writer = events(sup, "000")
    clock.t = start + 30 + 130
    for event in first.until(clock.t):
        writer.emit(event)
    sup.tick()
    assert sup.snapshot().jobs[0].sps == pytest.approx(2048 / 60)
    crash(sup, launcher, "000")
    sup.tick()
    clock.t += 1.0  # the back-off
    sup.tick()
    assert len(launcher.processes) == 2
    # The new worker takes 20 s to start, then steps twice as fast: only its own cycles count.
    again = script(clock.t + 20, cycles=3, rollout_s=5, train_s=25, steps_per_cycle=2048, start_steps=4096)
    for event in again.until(again.cycle_starts[1] - 1):
        writer.emit(event)
    clock.t = again.cycle_starts[1] - 1
    sup.tick()
    view = sup.snapshot().jobs[0]
    assert view.state is JobState.RUNNING and view.sps is None and view.eta_s is None
    for event in again.until(again.cycle_starts[1] + 1)[len(again.until(again.cycle_starts[1] - 1)) :]:
        writer.emit(event)
    clock.t = again.cycle_starts[1] + 1
    sup.tick()
    assert sup.snapshot().jobs[0].sps == pytest.approx(2048 / 30)


def test_the_process_state_is_asked_only_of_a_worker_that_wrote_nothing_since_the_last_tick(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1)
    asked: list[float] = []
    real = launcher.stopped

    def stopped(handle: WorkerHandle) -> bool:
        asked.append(clock.t)
        return real(handle)

    launcher.stopped = stopped  # type: ignore[method-assign]
    sup.tick()
    writer = events(sup, "000")
    writer.started(config={}, pid=1, device="cpu", versions={}, t=clock.t)
    sup.tick()
    job = sup.jobs["000"]
    for i in range(5):  # a busy worker reports at every tick: it is running, no /proc read needed
        clock.t += 0.2
        writer.progress(num_timesteps=64 * (i + 1), t=clock.t)
        sup.tick()
    assert job.state is JobState.RUNNING and asked == []
    clock.t += 0.2
    sup.tick()  # a quiet tick: asked
    assert asked == [clock.t]
    # Stopped right after it wrote: seen at the next tick, the first in which it wrote nothing.
    clock.t += 0.2
    writer.progress(num_timesteps=512, t=clock.t)
    launcher.live("000").stopped = True
    sup.tick()
    assert job.state is JobState.RUNNING and len(asked) == 1
    clock.t += 0.2
    sup.tick()
    assert job.state is JobState.STALLED and len(asked) == 2
    assert job.exit_reason is not None and job.exit_reason.startswith("stalled: process stopped by a signal")
