"""`--on-done CMD`: run once when a run ends done, failed or stopped, never after a SIGKILL; what it
gets in its environment, where its output goes, and a failing command changing nothing else."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from cockpit.cli import main
from cockpit.contract.files import private_files
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import read
from cockpit.contract.runspec import ConfigError, build_spec
from cockpit.contract.settings import RunSettings, resumed
from cockpit.contract.states import RunStatus
from cockpit.core.session.background import headless_argv
from cockpit.core.session.on_done import run_on_done
from cockpit.core.session.run_session import resume_settings
from tests.background_child import child_spec

# Each call of the command appends one line: the four variables it was given.
RECORD = 'echo "$COCKPIT_RUN_STATUS $COCKPIT_EXIT_CODE $COCKPIT_RUN_NAME $COCKPIT_RUN_DIR" >> "$0.calls"'


def hook(tmp_path: Path) -> tuple[str, Path]:
    """A command recording each call in tmp_path/hook.calls, and that file."""
    script = tmp_path / "hook"
    script.write_text(RECORD + "\necho the hook says hello\n")
    return f"sh {script}", tmp_path / "hook.calls"


def calls(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


# ----- the command itself -----


def test_the_command_gets_the_run_and_writes_to_cockpit_log(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    command, recorded = hook(tmp_path)
    assert run_on_done(command, RunStatus.INTERRUPTED, run_dir, None, 130) is None
    assert calls(recorded) == [["stopped", "130", "run", str(run_dir.resolve())]]
    log = RunDir(run_dir).log.read_text()
    assert f"the run stopped: {command}" in log and "the hook says hello" in log and "exited with 0" in log
    assert run_on_done(command, RunStatus.DONE, run_dir, "night-batch", 0) is None
    assert calls(recorded)[-1][:3] == ["done", "0", "night-batch"]


def test_the_command_writes_with_the_users_umask_inside_a_run_that_keeps_its_files_private(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    user = os.umask(0o022)
    try:
        with private_files():  # as `cockpit run` runs
            assert run_on_done(f"touch {tmp_path / 'upload.txt'}", RunStatus.DONE, run_dir, None, 0) is None
    finally:
        os.umask(user)
    assert stat.S_IMODE(os.stat(tmp_path / "upload.txt").st_mode) == 0o644  # the user's file, as the user makes them
    assert stat.S_IMODE(os.stat(RunDir(run_dir).log).st_mode) == 0o600  # the run's own log: private


def test_a_failing_command_is_one_line_and_a_hanging_one_is_killed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    line = run_on_done("echo no such pod >&2; exit 3", RunStatus.FAILED, run_dir, None, 1)
    assert line == f"--on-done: 'echo no such pod >&2; exit 3' exited with 3; its output is in {RunDir(run_dir).log}"
    assert "no such pod" in RunDir(run_dir).log.read_text()
    started = time.monotonic()
    line = run_on_done(f"sleep 30 & echo $! > {tmp_path}/child; wait", RunStatus.DONE, run_dir, None, 0, timeout_s=1.0)
    assert line is not None and "still running after 1 s and was killed" in line
    assert time.monotonic() - started < 10
    child = int((tmp_path / "child").read_text())

    def gone() -> bool:
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    deadline = time.monotonic() + 5  # SIGKILL is delivered, not awaited: the child may take a moment to go
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()  # the command's own children went with it


def test_a_blank_command_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--on-done: give a shell command"):
        build_spec(
            RunSettings(
                jobs=1,
                preset="cartpole",
                timesteps=1000,
                run_dir=tmp_path / "r",
                max_restarts=0,
                on_done="  ",
            ),
            command_line=("run",),
        )
    assert not (tmp_path / "r").exists()


# ----- a whole run -----

QUICK = [sys.executable, "-c", "pass"]
FAILING = [sys.executable, "-c", "raise SystemExit(4)"]


def _run(*argv: str) -> int:
    return main(["run", "--headless", "--no-tensorboard", "--max-restarts", "0", *argv])


def test_a_run_that_ends_runs_it_once_with_its_status_and_keeps_it_for_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command, recorded = hook(tmp_path)
    done = tmp_path / "done"
    assert _run("--jobs", "2", "--run-dir", str(done), "--on-done", command, "--", *QUICK) == 0
    assert calls(recorded) == [["done", "0", "done", str(done.resolve())]]
    assert read(done).config.on_done == command
    assert resume_settings(done, read(done)).on_done == command
    assert resumed(read(done).config, None, done, "fleet").on_done == command  # `fleet --resume` keeps it too
    failed = tmp_path / "failed"
    assert _run("--run-dir", str(failed), "--name", "nightly", "--on-done", command, "--", *FAILING) == 1
    assert calls(recorded)[-1] == ["failed", "1", "nightly", str(failed.resolve())]
    assert len(calls(recorded)) == 2  # once per run
    capsys.readouterr()
    # A failing command: one line, and the run's own exit code and files as they were.
    assert _run("--run-dir", str(tmp_path / "bad"), "--on-done", "exit 7", "--", *QUICK) == 0
    err = capsys.readouterr().err.strip().splitlines()
    log = tmp_path / "bad" / "cockpit.log"
    assert err == [f"cockpit run: --on-done: 'exit 7' exited with 7; its output is in {log}"]
    assert read(tmp_path / "bad").status is RunStatus.DONE


def test_a_run_in_the_background_passes_it_on() -> None:
    spec = build_spec(
        RunSettings(
            jobs=1,
            preset="cartpole",
            timesteps=1000,
            run_dir=Path("/r"),
            max_restarts=0,
            on_done="shutdown -h now",
        ),
        command_line=("run",),
    )
    assert child_spec(headless_argv(spec)) == spec
    assert child_spec(headless_argv(spec, resume=True)).on_done == "shutdown -h now"


@pytest.mark.slow
def test_sigterm_runs_it_as_stopped_and_sigkill_runs_nothing(tmp_path: Path) -> None:
    command, recorded = hook(tmp_path)
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]

    def start(run_dir: Path) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-m", "cockpit", "run", "--headless", "--no-tensorboard",
                                 "--run-dir", str(run_dir), "--on-done", command, "--", *sleeper],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 60
        while not (run_dir / "run.toml").exists():  # the run has begun
            assert time.monotonic() < deadline and proc.poll() is None, "the run did not start"
            time.sleep(0.1)
        return proc

    killed = start(tmp_path / "killed")
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    stopped = start(tmp_path / "stopped")
    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait(timeout=60) == 128 + signal.SIGTERM
    assert calls(recorded) == [["stopped", str(128 + signal.SIGTERM), "stopped", str((tmp_path / "stopped").resolve())]]
    time.sleep(1.0)  # the killed run's cockpit is gone: nothing runs it later either
    assert len(calls(recorded)) == 1
    for child in psutil.process_iter(["cmdline"]):  # the killed cockpit's script follows it (parent-death signal)
        if "time.sleep(120)" in " ".join(child.info["cmdline"] or []):
            os.kill(child.pid, signal.SIGKILL)
