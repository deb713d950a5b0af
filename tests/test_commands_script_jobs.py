"""`cockpit run -- COMMAND`: a user's own training command as the run's jobs (no real training here).

The command template and its checks, the job's command line and environment, and the supervisor's
rules for such jobs against a fake launcher and clock: running once launched, done on exit 0, a
crash otherwise, no stall for a script that reports nothing, a note saying why it shows no phases,
and its own target once its callback reports one. The guard, for real, on small shell commands.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from cockpit.cli import main
from cockpit.contract.runspec import RestartPolicy
from cockpit.contract.scriptargs import (
    GUARD_MODULE,
    JOB_DIR_ENV,
    JOB_ID_ENV,
    SEED_ENV,
    ScriptArgs,
    ScriptError,
    check_template,
)
from cockpit.contract.settings import RunSettings
from cockpit.contract.states import JobState
from cockpit.contract.workerargs import PARENT_PID_ENV, THREAD_ENV_VARS
from cockpit.core.feed.snapshot import NO_EVENTS_NOTE
from cockpit.core.launch.local import worker_env
from cockpit.core.machine.host import thread_budget
from cockpit.core.session.background import headless_argv
from cockpit.core.supervise.supervisor import JobTemplate, Supervisor
from tests.background_child import child_spec
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher, events

SCRIPT = ("python3", "train.py", "--seed", "{seed}", "--out", "{job_dir}")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with a `train.py`, as a user's project would have."""
    (tmp_path / "train.py").write_text("print('training')\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


# ----- the template -----


def test_placeholders_are_filled_and_other_braces_left_alone(tmp_path: Path) -> None:
    args = ScriptArgs(tmp_path / "jobs" / "002", "002", 7, (*SCRIPT, "--config", '{"lr": 3e-4}'), threads=3)
    assert args.argv == ("python3", "train.py", "--seed", "7", "--out", str(tmp_path / "jobs" / "002"),
                         "--config", '{"lr": 3e-4}')  # fmt: skip
    assert args.command("/usr/bin/python3") == ["/usr/bin/python3", "-m", GUARD_MODULE, "--", *args.argv]
    env = args.environment()
    assert env[JOB_DIR_ENV] == str(tmp_path / "jobs" / "002") and env[SEED_ENV] == "7" and env[JOB_ID_ENV] == "002"
    assert all(env[var] == "3" for var in THREAD_ENV_VARS)


def test_a_relative_job_dir_is_made_absolute(project: Path) -> None:
    args = ScriptArgs(Path("run/jobs/000"), "000", 0, SCRIPT)
    assert args.argv[-1] == str(project / "run" / "jobs" / "000") and args.environment()[JOB_DIR_ENV] == args.argv[-1]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "--: give the command to run after it"),
        (("python3", "train.py", "--seed", "{sed}"), "unknown placeholder {sed} in '{sed}'; use {seed}, {job_id}, "
                                                     "{job_dir}"),
        (("no-such-program-xyz", "--seed", "{seed}"), "-- no-such-program-xyz: no such command"),
        (("python3", "missing.py"), "-- python3 missing.py: no such file in"),
    ],
)  # fmt: skip
def test_a_bad_command_is_refused_with_one_line(project: Path, argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ScriptError) as caught:
        check_template(argv)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--", "python3", "train.py", "--seed", "{sed}"], "unknown placeholder {sed}"),
        (["--", "nope-xyz"], "-- nope-xyz: no such command (not on PATH, and not a file)"),
        (["--preset", "fast", "--timesteps", "10", "--", "python3", "train.py"],
         "--preset, --timesteps: cockpit's own worker's settings; a command after -- trains its own way"),
        (["--auto", "--", "python3", "train.py"], "--auto: cockpit's own worker's settings"),
        (["--resume", "runs/x", "--", "python3", "train.py"], "--resume runs/x: continues the run's own command"),
        (["--"], "--: give the command to run after it"),
    ],
)  # fmt: skip
def test_cockpit_run_refuses_bad_script_input_in_one_line_and_starts_nothing(
    project: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    code = main(["run", "--headless", "--run-dir", "run", *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("cockpit run: error: ") and message in err[0], err
    assert not (project / "run").exists() and not (project / "runs").exists()


def test_a_background_script_run_carries_its_command(project: Path) -> None:
    from cockpit.contract.runspec import build_spec

    spec = build_spec(
        RunSettings(
            jobs=2,
            agents=3,
            preset="",
            timesteps=None,
            seed=5,
            run_dir=None,
            max_restarts=1,
            script=SCRIPT,
        ),
        command_line=("cockpit", "run"),
    )
    assert spec.loaded_preset is None and spec.run_dir.name.endswith("-script-train")
    child = child_spec(headless_argv(spec))
    assert child == spec and (child.script, child.seed, child.agents, child.loaded_preset) == (SCRIPT, 5, 3, None)


# ----- the supervisor -----


def make(tmp_path: Path, agents: int = 1, restart: RestartPolicy | None = None):
    clock, launcher = FakeClock(), FakeLauncher()
    sup = Supervisor(run_dir=tmp_path, template=JobTemplate("", "python3 train.py", 0, script=SCRIPT),
                     seeds=range(agents), slots=1, launcher=launcher, budget=thread_budget(1, 2),
                     restart=restart or RestartPolicy(), clock=clock)  # fmt: skip
    return sup, launcher, clock


def test_a_script_job_runs_once_launched_and_is_done_on_exit_0(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path)
    sup.tick()
    (proc,) = launcher.processes
    assert isinstance(proc.request.args, ScriptArgs) and proc.request.args.seed == 0
    job = sup.jobs["000"]
    assert job.state is JobState.RUNNING and job.exit_reason == NO_EVENTS_NOTE
    proc.exit_code = 0
    sup.tick()
    assert job.state is JobState.DONE and sup.finished


def test_a_script_jobs_view_says_it_has_no_events_until_its_first_one(tmp_path: Path) -> None:
    sup, _, _ = make(tmp_path)
    sup.tick()
    (silent,) = sup.snapshot().jobs
    assert silent.no_events and silent.exit_reason == NO_EVENTS_NOTE
    events(sup, "000").started(pid=1, device="cpu", target_steps=4096)
    sup.tick()
    (reporting,) = sup.snapshot().jobs
    assert not reporting.no_events and reporting.exit_reason is None


def test_a_script_that_exits_non_zero_crashed_even_after_reporting_done(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, restart=RestartPolicy(max_restarts=1))
    sup.tick()
    writer = events(sup, "000")
    writer.started(pid=1, device="cpu", target_steps=4096)
    writer.finished(status="done", steps=4096)
    launcher.live("000").exit_code = 1
    sup.tick()
    job = sup.jobs["000"]
    assert job.state is JobState.BACKOFF and job.restarts == 1 and job.target == 4096
    clock.sleep(2)
    sup.tick()
    launcher.live("000").exit_code = 3
    sup.tick()
    assert job.state is JobState.FAILED


def test_a_silent_script_is_never_stalled_and_a_reporting_one_is(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path)
    sup.tick()
    clock.sleep(3600)
    sup.tick()
    job = sup.jobs["000"]
    assert job.state is JobState.RUNNING and launcher.live("000").signals == []
    events(sup, "000").started(pid=1, device="cpu", target_steps=10_000)
    sup.tick()
    assert job.exit_reason is None and job.target == 10_000  # it reports now: no note, its own total
    clock.sleep(120)
    sup.tick()
    assert job.state is JobState.STALLED  # silent for 2 minutes after it began reporting


def test_a_stopped_script_is_stopped_not_done_whatever_its_exit(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path)
    sup.tick()
    sup.interrupt()
    sup.tick()
    assert launcher.live("000").signals == ["TERM"]
    launcher.live("000").exit_code = 0
    sup.tick()
    assert sup.jobs["000"].state is JobState.STOPPED


# ----- the guard, for real -----


def guard(command: str, tmp_path: Path) -> subprocess.Popen[bytes]:
    """The guard running `sh -c command` in its own session, as the launcher starts it."""
    env = {**worker_env(), PARENT_PID_ENV: str(os.getpid())}
    return subprocess.Popen([sys.executable, "-m", GUARD_MODULE, "--", "sh", "-c", command], cwd=tmp_path, env=env,
                            start_new_session=True)  # fmt: skip


def wait_for(path: Path, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def test_the_guard_exits_as_its_command_did(tmp_path: Path) -> None:
    assert guard("exit 0", tmp_path).wait(10) == 0
    assert guard("exit 3", tmp_path).wait(10) == 3
    assert guard("kill -9 $$", tmp_path).wait(10) == -signal.SIGKILL


def test_the_guard_passes_sigterm_on_and_ends_what_the_command_left(tmp_path: Path) -> None:
    # The command starts a grandchild that ignores SIGTERM, then waits; SIGTERM ends the command.
    command = "(trap '' TERM; exec sleep 60) & echo $! > grandchild; trap 'exit 5' TERM; while :; do sleep 0.1; done"
    proc = guard(command, tmp_path)
    grandchild = int(wait_for(tmp_path / "grandchild"))
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 5
    # The grandchild ignored SIGTERM: the guard killed it before exiting.
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE


def test_without_a_living_cockpit_the_guard_starts_nothing(tmp_path: Path) -> None:
    env = {**worker_env(), PARENT_PID_ENV: "1"}  # not our parent: the cockpit that started us is gone
    result = subprocess.run([sys.executable, "-m", GUARD_MODULE, "--", "sh", "-c", "touch started"], cwd=tmp_path,
                            env=env, timeout=10)  # fmt: skip
    assert result.returncode == 1 and not (tmp_path / "started").exists()


def test_the_guard_without_a_command_says_how_to_call_it(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", GUARD_MODULE], capture_output=True, text=True, timeout=10)
    assert result.returncode == 2 and result.stderr.strip() == f"usage: python -m {GUARD_MODULE} -- COMMAND [ARG ...]"


# ----- how the views show a script job -----


def test_the_views_show_a_silent_script_and_a_target_not_known_yet() -> None:
    from cockpit.views.headless import job_line
    from cockpit.views.tui.jobs_table import cells
    from tests.tui_fakes import frame, job_view

    silent = job_view(
        0, gpu=False, phase=None, steps=0, target=0, sps=None, eta_s=None, exit_reason=NO_EVENTS_NOTE, no_events=True
    )
    state = frame(gpu=False).state
    row = cells(silent, state, wide=True)
    assert row["phase"] == "no events" and row["steps"] == "0"
    assert NO_EVENTS_NOTE in job_line(silent) and "0/0" not in job_line(silent)
    reporting = job_view(0, gpu=False, phase="rollout", steps=4096, target=0, exit_reason=None)
    assert (
        cells(reporting, state, wide=True)["phase"] == "rollout"
        and cells(reporting, state, wide=False)["steps"] == "4.1k"
    )
