"""A kill -9 of `cockpit run` leaves no worker behind: not while they import torch, not with one of
them stopped by SIGSTOP while it trains."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from tests.cockpitproc import small_preset, start_cockpit
from tests.orphanproc import BLOCKED_IMPORT_ENV, assert_gone, blocked_pids, blocking_site, wait_until


@pytest.mark.slow
def test_kill_9_of_cockpit_run_while_its_workers_import_leaves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers' import of torch never ends here (the cockpit never imports torch itself)."""
    for name, value in blocking_site(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(BLOCKED_IMPORT_ENV, "torch")
    cockpit = start_cockpit(tmp_path / "run", "--preset", str(small_preset(tmp_path)), "--jobs", "2")
    cockpit.wait_for(
        lambda: len(cockpit.workers()) == 2 and blocked_pids(tmp_path) >= {w.pid for w in cockpit.workers()}
    )
    workers = [w.pid for w in cockpit.workers()]
    cockpit.proc.kill()
    cockpit.finish()
    assert_gone(workers)


@pytest.mark.slow
def test_kill_9_of_cockpit_run_with_a_stopped_worker_leaves_none(tmp_path: Path) -> None:
    cockpit = start_cockpit(
        tmp_path / "run", "--preset", str(small_preset(tmp_path, timesteps=10_000_000)), "--jobs", "2"
    )
    cockpit.wait_for(lambda: all(any(e.kind == "progress" for e in cockpit.events(j)) for j in ("000", "001")))
    workers = cockpit.workers()
    everyone = [p.pid for p in psutil.Process(cockpit.proc.pid).children(recursive=True)]
    os.kill(workers[0].pid, signal.SIGSTOP)
    wait_until(lambda: workers[0].status() == psutil.STATUS_STOPPED, "the worker to stop")
    cockpit.proc.kill()
    cockpit.finish()
    assert_gone(everyone)
