"""`PooledLauncher` watches its idle processes: a spare stopped by a signal, or one whose imports
never end, is killed and replaced, and the next job runs in a process that works."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from cockpit.core.launch.pooled import PooledLauncher
from tests.orphanproc import BLOCKED_IMPORT_ENV, REPO, assert_gone, blocked_pids, blocking_site, wait_until
from tests.test_launch_worker_pool import job, wait_exit


@pytest.mark.slow
def test_a_stopped_spare_is_replaced_and_the_next_job_runs_in_its_replacement(tmp_path: Path) -> None:
    with PooledLauncher(cwd=REPO, nice=0, max_jobs=1) as launcher:
        first = launcher.launch(job(tmp_path, "a"))
        (spare,) = [s for s in launcher._processes if s.proc.pid != first.pid]
        assert wait_exit(launcher, first) == 0
        wait_until(lambda: launcher.poll(first) == 0 and spare.ready, "the spare to finish importing")
        os.kill(spare.proc.pid, signal.SIGSTOP)
        wait_until(lambda: psutil.Process(spare.proc.pid).status() == psutil.STATUS_STOPPED, "the spare to stop")
        second = launcher.launch(job(tmp_path, "b"))
        assert second.pid != spare.proc.pid
        assert wait_exit(launcher, second) == 0
        assert launcher.replaced == 1
        assert_gone([spare.proc.pid])


@pytest.mark.slow
def test_a_spare_whose_imports_never_end_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both processes of the first job block on importing torch (the job's and its spare); only the
    spare is idle, and it is replaced once `ready_timeout_s` has passed; its replacement imports
    normally and runs the next job."""
    for name, value in blocking_site(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(BLOCKED_IMPORT_ENV, "torch")
    with PooledLauncher(cwd=REPO, nice=0, max_jobs=1, ready_timeout_s=10) as launcher:
        hung = launcher.launch(job(tmp_path, "a"))
        try:
            (spare,) = [s.proc.pid for s in launcher._processes if s.proc.pid != hung.pid]
            wait_until(lambda: blocked_pids(tmp_path) >= {hung.pid, spare}, "both to reach the import")
            monkeypatch.delenv(BLOCKED_IMPORT_ENV)  # for the replacement
            wait_until(lambda: launcher.poll(hung) is None and launcher.replaced >= 1, "the spare's replacement")
            assert_gone([spare])
            second = launcher.launch(job(tmp_path, "b"))
            assert second.pid not in (hung.pid, spare)
            assert wait_exit(launcher, second) == 0
        finally:
            launcher.kill(hung)
