"""The local launcher's process settings, checked on a stand-in worker (a shell script)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from cockpit.contract.workerargs import WorkerArgs
from cockpit.core.launch.local import WORKER_NICE, LocalLauncher
from cockpit.core.launch.protocol import LaunchRequest


def test_workers_run_nicer_than_the_cockpit_in_their_own_session(tmp_path: Path) -> None:
    fake_python = tmp_path / "python"
    fake_python.write_text("#!/bin/sh\nexec sleep 30\n")
    fake_python.chmod(0o755)
    launcher = LocalLauncher(python=str(fake_python))
    handle = launcher.launch(LaunchRequest("000", WorkerArgs(tmp_path / "job")))
    try:
        worker = psutil.Process(handle.pid)
        assert worker.nice() == os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICE
        assert os.getsid(handle.pid) == handle.pid
    finally:
        launcher.kill(handle)
        assert handle.process.wait(timeout=5) < 0
