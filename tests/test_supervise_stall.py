"""The stall watch: a running worker that writes no event for its stall timeout, or is stopped by a
signal, is `stalled`, then killed and restarted from its checkpoint as a counted crash.

The supervisor runs on a fake clock and a fake launcher (tests/test_supervise_supervisor.py's); the scripted
worker's events go into its job dir with the fake clock's times.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cockpit.contract.controls import StopJob
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import read
from cockpit.contract.runspec import STALL_MIN_S, RestartPolicy
from cockpit.contract.settings import RunSettings
from cockpit.contract.states import JobState
from cockpit.core.supervise.exit_policy import STALL_GRACE_S
from cockpit.core.supervise.jobs import Job
from cockpit.core.supervise.supervisor import Supervisor
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import events, make, run_log

GOLDEN = Path(__file__).parent / "data" / "run-v1"


def running(sup: Supervisor, clock: FakeClock, job_id: str = "000") -> Job:
    """Launch job `job_id` and let its worker start a rollout now; returns the running job."""
    sup.tick()
    w = events(sup, job_id)
    w.started(config={}, pid=1, device="cpu", versions={}, t=clock.t)
    w.phase("rollout", iteration=0, num_timesteps=0, t=clock.t)
    sup.tick()
    job = sup.jobs[job_id]
    assert job.state is JobState.RUNNING
    return job


def wait(sup: Supervisor, clock: FakeClock, seconds: float, step: float = 1.0) -> None:
    """Let `seconds` pass, a tick every `step` seconds (the session ticks 5 times a second)."""
    end = clock.t + seconds
    while clock.t < end:
        clock.t = min(end, clock.t + step)
        sup.tick()


def test_a_silent_worker_is_stalled_then_killed_and_restarted_as_a_counted_crash(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=1, stall_timeout_s=240))
    job = running(sup, clock)
    proc = launcher.live("000")
    wait(sup, clock, 239)
    assert job.state is JobState.RUNNING  # silent, but not for the timeout yet
    wait(sup, clock, 1)
    assert job.state is JobState.STALLED and proc.signals == []  # shown first, not killed yet
    assert job.exit_reason == "stalled: no events for 240 s; killed after 240 s without events"
    assert job.state.live and job.state.holds_slot and sup._busy_slots() == 1
    assert sup.snapshot().jobs[0].state is JobState.STALLED  # what views and attach see
    wait(sup, clock, STALL_GRACE_S - 1)
    assert proc.signals == []
    wait(sup, clock, 1)
    assert proc.signals == ["KILL"]  # the process group, at once
    sup.tick()  # its exit is reaped like a crash's
    assert job.state is JobState.BACKOFF and job.restarts == job.restarts_in_a_row == 1
    assert job.error == job.exit_reason == "stalled: no events for 250 s"
    wait(sup, clock, 1)
    assert job.state is JobState.STARTING and len(launcher.processes) == 2  # from its checkpoint, same job dir
    assert launcher.processes[1].request.job_dir == job.job_dir
    # The restart counted against the policy: a second stall in a row fails the job, with its reason.
    w = events(sup, "000")
    w.started(config={}, pid=2, device="cpu", versions={}, resumed_from_step=512, t=clock.t)
    sup.tick()
    assert job.state is JobState.RUNNING and job.exit_reason == "stalled: no events for 250 s"
    wait(sup, clock, 240 + STALL_GRACE_S + 1)
    assert job.state is JobState.FAILED and job.error == "stalled: no events for 250 s"
    assert job.exit_reason == "failed after 1 restarts" and sup.finished


def test_events_resuming_before_the_kill_make_a_stalled_job_running_again(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(stall_timeout_s=30))
    job = running(sup, clock)
    wait(sup, clock, 30)
    assert job.state is JobState.STALLED
    wait(sup, clock, STALL_GRACE_S - 1)
    events(sup, "000").progress(num_timesteps=64, t=clock.t)  # it was slow, not hung
    sup.tick()
    assert job.state is JobState.RUNNING and job.exit_reason is None and job.error is None
    assert launcher.live("000").signals == [] and job.restarts == 0
    wait(sup, clock, 29)
    assert job.state is JobState.RUNNING  # the timeout counts from its latest event
    wait(sup, clock, 1)
    assert job.state is JobState.STALLED


def test_a_worker_stopped_by_a_signal_is_stalled_at_once_and_killed_on_the_timeout(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=2, slots=2)
    job = running(sup, clock)
    other = running(sup, clock, "001")
    proc = launcher.live("000")
    proc.stopped = True  # SIGSTOP: process state T
    sup.tick()
    assert job.state is JobState.STALLED and other.state is JobState.RUNNING
    assert job.exit_reason == "stalled: process stopped by a signal; killed after 60 s without events"
    events(sup, "001").progress(num_timesteps=64, t=clock.t)
    wait(sup, clock, STALL_MIN_S - 1, step=0.2)
    assert proc.signals == []  # the default timeout (60 s: no history yet) has not passed
    events(sup, "001").progress(num_timesteps=128, t=clock.t)
    wait(sup, clock, 1, step=0.2)
    assert proc.signals == ["KILL"]
    sup.tick()
    assert job.state is JobState.BACKOFF and job.restarts == 1
    assert job.error == "stalled: no events for 60 s (process stopped by a signal)"
    assert other.state is JobState.RUNNING and other.restarts == 0 and launcher.live("001").signals == []


def test_a_stopped_worker_that_is_continued_and_reports_runs_on(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1)
    job = running(sup, clock)
    proc = launcher.live("000")
    proc.stopped = True
    wait(sup, clock, 20)
    assert job.state is JobState.STALLED
    proc.stopped = False  # SIGCONT
    events(sup, "000").progress(num_timesteps=64, t=clock.t)
    sup.tick()
    assert job.state is JobState.RUNNING and proc.signals == []


def test_the_default_timeout_grows_with_the_jobs_longest_silence_and_is_at_least_60_s(tmp_path: Path) -> None:
    assert RestartPolicy().stall_timeout(0.0) == STALL_MIN_S == 60.0
    assert RestartPolicy().stall_timeout(45.0) == 135.0  # 3x the longest silence
    assert RestartPolicy(stall_timeout_s=20).stall_timeout(45.0) == 20.0  # --stall-timeout wins
    sup, launcher, clock = make(tmp_path, agents=1, slots=1)
    job = running(sup, clock)
    assert sup.stall_timeout(job) == 60.0
    w = events(sup, "000")
    t0 = clock.t
    w.phase("train", iteration=1, num_timesteps=64, t=t0 + 10)
    w.progress(num_timesteps=64, t=t0 + 55)  # a 45-s silence: a worker without heartbeats, say
    clock.t = t0 + 55
    sup.tick()
    assert job.longest_silence_s == 45.0 and sup.stall_timeout(job) == 135.0
    # A new attempt does not count the time between attempts, and keeps what the job has shown.
    w.started(config={}, pid=1, device="cpu", versions={}, t=t0 + 1000)
    clock.t = t0 + 1000
    sup.tick()
    assert sup.stall_timeout(job) == 135.0
    wait(sup, clock, 134)
    assert job.state is JobState.RUNNING  # silent longer than the 60-s floor: still its own normal
    wait(sup, clock, 1)
    assert job.state is JobState.STALLED and launcher.live("000").signals == []


def test_a_90_s_train_phase_with_heartbeats_every_5_s_is_not_a_stall(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1)  # the default timeout: 60 s at first
    job = running(sup, clock)
    w = events(sup, "000")
    w.phase("train", iteration=1, num_timesteps=2048, t=clock.t)
    for _ in range(18):  # a 90-s first train phase, as Pong's 15 epochs on a CPU
        wait(sup, clock, 5, step=0.2)
        w.heartbeat("train", num_timesteps=2048, t=clock.t)
        assert job.state is JobState.RUNNING
    w.progress(num_timesteps=2048, t=clock.t)
    w.phase("rollout", iteration=1, num_timesteps=2048, t=clock.t)
    sup.tick()
    assert job.state is JobState.RUNNING and job.restarts == 0 and launcher.live("000").signals == []
    assert job.phase == "rollout" and job.steps == 2048  # heartbeats change nothing else
    assert sup.stall_timeout(job) == 60.0  # its silences were 5 s


def test_the_same_train_phase_without_heartbeats_would_be_a_stall(tmp_path: Path) -> None:
    sup, _, clock = make(tmp_path, agents=1, slots=1)
    job = running(sup, clock)
    events(sup, "000").phase("train", iteration=1, num_timesteps=2048, t=clock.t)
    wait(sup, clock, 59, step=0.2)
    assert job.state is JobState.RUNNING
    wait(sup, clock, 1.2, step=0.2)  # 60 s from the tick that read its phase event
    assert job.state is JobState.STALLED  # why the callback sends heartbeats


def test_a_stalled_job_can_be_stopped_or_killed_by_hand(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(stall_timeout_s=30))
    job = running(sup, clock)
    wait(sup, clock, 30)
    assert job.state is JobState.STALLED
    sup.submit(StopJob("000"))
    sup.tick()
    assert job.state is JobState.STOPPING and launcher.live("000").signals == ["TERM"]
    wait(sup, clock, 12)  # a stopped (T) worker cannot act on SIGTERM: killed after the stop grace
    assert launcher.processes[0].signals == ["TERM", "KILL"]
    sup.tick()
    assert job.state is JobState.STOPPED and job.restarts == 0


def test_an_interrupted_run_stops_its_stalled_jobs(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(stall_timeout_s=30))
    job = running(sup, clock)
    wait(sup, clock, 30)
    assert job.state is JobState.STALLED
    sup.interrupt()
    sup.tick()
    assert job.state is JobState.STOPPING and launcher.live("000").signals == ["TERM"]


def test_a_starting_worker_is_not_watched_before_its_started_event(tmp_path: Path) -> None:
    # Imports and model setup write nothing; a cold start of a big env may take minutes.
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(stall_timeout_s=30))
    sup.tick()
    wait(sup, clock, 120)
    assert sup.jobs["000"].state is JobState.STARTING and launcher.live("000").signals == []


def test_the_local_launcher_sees_a_process_stopped_by_a_signal(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import time

    from cockpit.core.launch.local import LocalLauncher
    from cockpit.core.launch.protocol import WorkerHandle

    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    handle = WorkerHandle("000", proc.pid, tmp_path, proc)
    launcher = LocalLauncher()
    try:
        assert not launcher.stopped(handle)  # sleeping (S) is not stopped
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not launcher.stopped(handle) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert launcher.stopped(handle)
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.1)
        assert not launcher.stopped(handle)
    finally:
        launcher.kill(handle)
        proc.wait()
    assert not launcher.stopped(handle)  # gone


# ----- the setting: flag, spec, run.toml, resume -----


def test_stall_timeout_reaches_the_spec_the_background_run_the_record_and_a_resume(tmp_path: Path) -> None:
    from cockpit.cli import build_parser
    from cockpit.commands.run import _spec
    from cockpit.contract.runrecord import render
    from cockpit.core.session.background import headless_argv
    from cockpit.core.session.run_session import resume_settings

    def spec_of(argv: list[str]) -> RestartPolicy:
        return _spec(build_parser().parse_args(["run", *argv]), None, ("cockpit", "run")).restart

    run_dir = ["--run-dir", str(tmp_path / "run")]
    assert spec_of(run_dir).stall_timeout_s is None  # derived per job
    spec = _spec(build_parser().parse_args(["run", *run_dir, "--stall-timeout", "240"]), None, ("cockpit",))
    assert spec.restart == RestartPolicy(stall_timeout_s=240.0)
    assert spec_of(headless_argv(spec)) == spec.restart  # a background run gets the same policy
    assert (
        spec_of(headless_argv(_spec(build_parser().parse_args(["run", *run_dir]), None, ("c",)))).stall_timeout_s
        is None
    )

    golden = read(GOLDEN)
    assert golden.config.stall_timeout_s is None  # the v1 file has none and still reads
    assert resume_settings(GOLDEN, golden).stall_timeout_s is None
    sup, _, _ = make(tmp_path, agents=1, slots=1, restart=spec.restart)
    recorded = run_log(sup, spec)  # the run writes it in run.toml's [config]
    assert "\nstall_timeout_s = 240.0\n" in RunDir(tmp_path).run_toml.read_text()
    assert render(recorded) == RunDir(tmp_path).run_toml.read_text()
    assert resume_settings(tmp_path, recorded).stall_timeout_s == 240.0


@pytest.mark.parametrize("value", ["0", "-5", "nan", "soon"])
def test_a_bad_stall_timeout_is_one_line_naming_the_flag_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    from cockpit.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--headless", "--run-dir", str(tmp_path / "run"), "--stall-timeout", value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--stall-timeout" in err
    assert not (tmp_path / "run").exists()


def test_a_stalled_job_is_recorded_as_such_in_run_toml(tmp_path: Path) -> None:
    from cockpit.contract.runspec import build_spec

    spec = build_spec(
        RunSettings(
            jobs=1,
            agents=1,
            preset="cartpole",
            timesteps=None,
            run_dir=tmp_path,
            max_restarts=1,
            stall_timeout_s=60,
        ),
        command_line=("cockpit",),
    )
    sup, _, clock = make(tmp_path, agents=1, slots=1, restart=spec.restart)
    running(sup, clock)
    wait(sup, clock, 60)
    assert sup.jobs["000"].state is JobState.STALLED
    (job,) = run_log(sup, spec).jobs
    assert 'status = "stalled"' in RunDir(tmp_path).run_toml.read_text()
    assert job.status is JobState.STALLED and job.exit_reason == sup.jobs["000"].exit_reason
    assert job.exit_reason is not None and job.exit_reason.startswith("stalled: no events for 60 s")


# ----- a real run -----


@pytest.mark.slow
def test_a_sigstopped_worker_is_reported_stalled_then_restarted_from_its_checkpoint(tmp_path: Path) -> None:
    import contextlib
    import os
    import signal
    import time

    from tests.cockpitproc import small_preset, start_cockpit

    preset = small_preset(tmp_path, checkpoint_every=2048, timesteps=12_000)
    timeout = 10  # seconds: each one of them the test waits out
    cockpit = start_cockpit(tmp_path / "run", "--headless", "--preset", str(preset), "--jobs", "2",
                            "--stall-timeout", str(timeout))  # fmt: skip
    frozen: int | None = None
    try:
        # Stopped once it has checkpointed and the cockpit has said it runs: on a loaded machine the
        # cockpit can read a worker's first events late, and a job stopped before it was seen
        # running goes from starting to stalled, which is right but not what this test watches.
        cockpit.wait_for(lambda: any(e.kind == "checkpoint" for e in cockpit.events("000"))
                         and re.search(r"\[job 000\] \w+ -> running", cockpit.text()) is not None)  # fmt: skip
        (started,) = [e for e in cockpit.events("000") if e.kind == "started"]
        frozen = started.pid
        os.kill(frozen, signal.SIGSTOP)  # a hung CUDA call or a deadlocked env looks the same
        stopped_at = time.monotonic()
        cockpit.wait_for(lambda: "[job 000] running -> stalled" in cockpit.text(), timeout=30)
        reported_s = time.monotonic() - stopped_at
        assert reported_s < 5  # stopped by a signal: stalled at once
        cockpit.wait_for(lambda: "[job 000] stalled -> backoff" in cockpit.text(), timeout=40)
        killed_s = time.monotonic() - stopped_at
        assert timeout - 5 < killed_s < timeout + 15  # the timeout counts from its last event
        assert cockpit.finish(timeout=120) == 0, cockpit.text()
    finally:
        if cockpit.proc.poll() is None:
            cockpit.proc.kill()
        if frozen is not None:  # a stopped worker cannot act on the parent-death SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGKILL)
    log = cockpit.run_log()
    stalled, other = log.jobs
    assert stalled.status == "done" and stalled.steps == 12_000 and stalled.restarts == 1
    assert stalled.error is not None and stalled.error.startswith("stalled: no events for 1")  # 10 to 19 s
    assert stalled.error.endswith(" s (process stopped by a signal)")
    assert other.status == "done" and other.restarts == 0 and other.error is None
    starts = [e for e in cockpit.events("000") if e.kind == "started"]
    assert len(starts) == 2 and starts[1].resumed_from_step is not None and starts[1].resumed_from_step >= 2048
    out = cockpit.text()
    assert "stalled: process stopped by a signal" in out  # the state-change line says why
    assert "error: stalled: no events for" in out  # and the back-off line what it was killed for
