"""Nothing outlives the cockpit: a kill -9 of the cockpit ends its real workers, whether they are in
the middle of an import (nothing to save: killed at once), waiting as a pool's spare, or training
and stopped by SIGSTOP (continued, checkpointed, ended)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from cockpit.contract.events import read_events
from cockpit.contract.scriptargs import GUARD_MODULE
from cockpit.contract.workerargs import PARENT_PID_ENV
from tests.orphanproc import assert_gone, blocked_pids, blocking_site, start_stand_in, wait_until
from tests.workerproc import kinds, write_preset


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["local", "pooled"])
def test_workers_in_the_middle_of_an_import_die_with_a_killed_cockpit(tmp_path: Path, kind: str) -> None:
    """The import of torch never ends here: only the kernel's SIGKILL can end such a worker (a
    Python signal handler would run, but the stop it asks for is read after the imports). Pooled:
    the job's process and the spare started beside it, both importing."""
    env = blocking_site(tmp_path)
    cockpit = start_stand_in(kind, tmp_path / "job", write_preset(tmp_path), blocked="torch", env=env)
    try:
        wait_until(lambda: blocked_pids(tmp_path) >= set(cockpit.workers), "the workers to reach the import")
    finally:
        cockpit.kill()
    assert_gone(cockpit.workers)


def _training(job_dir: Path) -> bool:
    events = job_dir / "events.jsonl"
    return events.exists() and bool(kinds(read_events(events), "progress"))


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED, f"{pid} to stop")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["local", "pooled"])
def test_a_stopped_worker_in_training_dies_with_a_killed_cockpit_after_a_checkpoint(tmp_path: Path, kind: str) -> None:
    """The kernel's signal at the cockpit's death would stay pending forever on a stopped worker
    but for SIGCONT and SIGKILL. Pooled: the idle spare beside the job is stopped too."""
    job_dir = tmp_path / "job"
    cockpit = start_stand_in(kind, job_dir, write_preset(tmp_path), env={})
    try:
        wait_until(lambda: _training(job_dir), "the job to train")
        if kind == "pooled":
            spare = cockpit.workers[1]
            wait_until(lambda: psutil.Process(spare).cpu_percent(0.5) == 0.0, "the spare to finish importing")
        for pid in cockpit.workers:
            _stop(pid)
    finally:
        cockpit.kill()
    assert_gone(cockpit.workers)
    events = read_events(job_dir / "events.jsonl")
    (finished,) = kinds(events, "finished")
    assert finished.status == "stopped" and kinds(events, "checkpoint")[-1].step == finished.steps


# A stand-in cockpit for a script run: starts the guard on a command that writes its pid and
# waits, says the guard's pid, and waits to be killed.
GUARD_COCKPIT = """
import os, subprocess, sys, time
workdir, parent_env, guard_module = sys.argv[1:4]
env = {**os.environ, parent_env: str(os.getpid())}
guard = subprocess.Popen([sys.executable, "-m", guard_module, "--", "sh", "-c", "echo $$ > command; exec sleep 600"],
                         cwd=workdir, env=env, start_new_session=True)
print(guard.pid, flush=True)
time.sleep(600)
"""


def test_a_stopped_guard_ends_its_command_when_its_cockpit_is_killed(tmp_path: Path) -> None:
    """A script job's guard stopped by SIGSTOP would keep the kernel's SIGTERM pending forever,
    and the user's command would run on; SIGCONT wakes it to end the command's group."""
    cockpit = subprocess.Popen(
        [sys.executable, "-c", GUARD_COCKPIT, str(tmp_path), PARENT_PID_ENV, GUARD_MODULE],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert cockpit.stdout is not None
        guard = int(cockpit.stdout.readline())
        wait_until(lambda: (tmp_path / "command").exists() and bool((tmp_path / "command").read_text()), "the command")
        command = int((tmp_path / "command").read_text())
        _stop(guard)
    finally:
        cockpit.kill()
        cockpit.wait()
    assert_gone([guard, command])
