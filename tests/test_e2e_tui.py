"""The cockpit on real runs: `cockpit run` in a real terminal (tmux), and attaching to a headless
run from a viewer that stops one job and leaves."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from cockpit.contract.runrecord import read
from cockpit.core.feed.control import AttachSource
from cockpit.core.feed.source import Frame, SourceError
from cockpit.views.tui.app import make_app
from cockpit.views.tui.opener import open_run
from tests.cockpitproc import Tmux, run_cockpit, small_preset, start_cockpit


def _wait(condition: Callable[[], object], timeout: float, what: str, detail: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}:\n{detail()}")


def _processes_of(run_dir: Path) -> list[psutil.Process]:
    """Every live cockpit or worker process whose command line names the run dir (not the tmux
    server or the shell, which name it too)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        argv = proc.info["cmdline"] or []
        cmdline = " ".join(argv)
        ours = "-m" in argv and any(module in argv for module in ("cockpit", "cockpit_training.worker"))
        if ours and str(run_dir) in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def _job_rows(screen: str) -> dict[str, str]:
    """The jobs table's rows on a captured screen, by job id."""
    rows = {}
    for line in screen.splitlines():
        match = re.match(r"^ (\d{3})  \w+", line)
        if match:
            rows[match.group(1)] = line
    return rows


@pytest.mark.slow
def test_cockpit_run_in_tmux_shows_phases_stops_a_job_and_quits_with_stop_all(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = (f"{sys.executable} -m cockpit run --jobs 2 --preset cartpole --timesteps 2000000 --run-dir {run_dir}; "
               "echo EXIT=$?; sleep 60")  # fmt: skip
    term = Tmux("cockpit-tui", command, (80, 24))
    screen = term.screen

    try:
        seen: dict[str, set[str]] = {"000": set(), "001": set()}

        def both_phases_seen() -> bool:
            for job, row in _job_rows(screen()).items():
                match = re.search(r" running\s+(rollout|train) ", row)
                if job in seen and match:
                    seen[job].add(match.group(1))
            return all(len(phases) == 2 for phases in seen.values())

        _wait(both_phases_seen, 120, "both jobs running, each seen in rollout and in train", screen)
        shot = screen()
        assert "cockpit  cartpole on CartPole-v1" in shot and "lanes:" in shot and "No GPU" in shot, shot
        assert "Stop all" in shot, shot  # the footer shows the controls
        (tmp_path / "screen.txt").write_text(shot)

        term.send("s")  # the cursor starts on job 000
        _wait(lambda: "stopped" in _job_rows(screen()).get("000", ""), 60, "job 000 stopped", screen)
        assert " running" in _job_rows(screen())["001"]

        term.send("q")
        _wait(lambda: "Stop all jobs" in screen(), 10, "the quit dialog", screen)
        term.send("s")
        _wait(lambda: "EXIT=" in screen(), 90, "cockpit to exit after stop all", screen)
        assert "EXIT=130" in screen(), screen()
        _wait(lambda: not _processes_of(run_dir), 20, "every worker to exit", lambda: str(_processes_of(run_dir)))
        log = read(run_dir)
        assert log.status == "interrupted" and log.ended_at
        # what the user typed, not the background `cockpit run --headless ...` that ran it
        assert log.command == f"cockpit run --jobs 2 --preset cartpole --timesteps 2000000 --run-dir {run_dir}"
        assert [job.status for job in log.jobs] == ["stopped", "stopped"]
        assert all(job.checkpoints >= 1 for job in log.jobs), log.jobs
    finally:
        term.close()
        for proc in _processes_of(run_dir):
            proc.kill()


@pytest.mark.slow
async def test_attach_stops_a_job_and_leaves_the_run_to_finish(tmp_path: Path) -> None:
    preset = small_preset(tmp_path, timesteps=60_000, checkpoint_every=1024)
    cockpit = start_cockpit(tmp_path / "run", "--jobs", "2", "--preset", str(preset))
    try:
        source: AttachSource | None = None

        def attached() -> bool:
            nonlocal source
            try:
                source = AttachSource.connect(cockpit.run_dir)
            except SourceError:
                return False
            return True

        cockpit.wait_for(attached, timeout=60)
        assert source is not None
        app = make_app(source)

        def running(frame: Frame | None) -> bool:
            return frame is not None and all(j.state == "running" and j.steps > 0 for j in frame.state.jobs)

        async with app.run_test(size=(100, 30)) as pilot:
            deadline = time.monotonic() + 90
            while not running(source.frame()) and time.monotonic() < deadline:
                await pilot.pause(0.2)
            assert running(source.frame()), cockpit.text()
            await pilot.press("s")  # job 000, under the cursor
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                frame = source.frame()
                if frame and frame.state.jobs[0].state == "stopped":
                    break
                await pilot.pause(0.2)
            assert source.frame().state.jobs[0].state == "stopped", cockpit.text()
            await pilot.press("q", "l")
            await pilot.pause()
        assert not app.is_running
        assert cockpit.proc.poll() is None, "quitting the viewer must leave the run going"
        assert cockpit.finish(timeout=240) == 1  # one job stopped by hand, so not every job is done
        log = read(cockpit.run_dir)
        assert [job.status for job in log.jobs] == ["stopped", "done"]
        stopped = [e for e in cockpit.events("000") if e.kind == "finished"]
        assert stopped and stopped[-1].status == "stopped"
    finally:
        if cockpit.proc.poll() is None:
            cockpit.proc.kill()


def test_attach_to_a_dir_without_a_run_is_one_line_exit_2(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=str(tmp_path)):
        open_run(tmp_path)
    result = run_cockpit("attach", str(tmp_path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cockpit attach: error:"), result.stderr


@pytest.mark.slow
def test_a_finished_run_reopens_as_a_replay(tmp_path: Path) -> None:
    preset = small_preset(tmp_path, timesteps=2_000)
    result = run_cockpit("run", "--headless", "--jobs", "1", "--preset", str(preset), "--run-dir",
                         str(tmp_path / "run"), timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    source = open_run(tmp_path / "run")
    assert source.read_only
    frame = source.frame()
    assert frame is not None and frame.state.jobs[0].state == "done"
