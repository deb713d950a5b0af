"""A stand-in cockpit that launches real workers and is then killed -9, and an import that never
ends, for the tests of what outlives a cockpit (nothing should)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent

# The module whose import never ends, in a process whose environment names it. A worker is then
# deterministically "in the middle of an import", with nothing to save, for as long as a test needs.
BLOCKED_IMPORT_ENV = "COCKPIT_TEST_BLOCKED_IMPORT"
# Where such a process says it has reached that import: a file `<dir>/<pid>`.
BLOCKED_MARKS_ENV = "COCKPIT_TEST_BLOCKED_MARKS"

SITECUSTOMIZE = f"""
import os, sys, time

class _NeverEnding:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get({BLOCKED_IMPORT_ENV!r}):
            open(os.path.join(os.environ[{BLOCKED_MARKS_ENV!r}], str(os.getpid())), "w").close()
            while True:
                time.sleep(1)
        return None

sys.meta_path.insert(0, _NeverEnding())
"""


def blocking_site(directory: Path) -> dict[str, str]:
    """The environment under which a Python process (and the workers it starts) runs `SITECUSTOMIZE`
    from `directory`/site, marking in `directory`/marks: the import of the module named in
    `BLOCKED_IMPORT_ENV` then never ends."""
    site, marks = directory / "site", directory / "marks"
    site.mkdir(parents=True, exist_ok=True)
    marks.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return {"PYTHONPATH": str(site), BLOCKED_MARKS_ENV: str(marks)}


def blocked_pids(directory: Path) -> set[int]:
    """The processes that have reached the blocked import (see `blocking_site`)."""
    marks = directory / "marks"
    return {int(name) for name in os.listdir(marks)} if marks.is_dir() else set()


# argv: launcher kind (local or pooled), job dir, preset, timesteps, module whose import blocks ("": none),
# and `BLOCKED_IMPORT_ENV`.
# Prints the pids of every worker process it started, then waits to be killed.
COCKPIT = """
import os, sys, time
from pathlib import Path
from cockpit.contract.workerargs import WorkerArgs
from cockpit.core.launch.local import LocalLauncher
from cockpit.core.launch.pooled import PooledLauncher
from cockpit.core.launch.protocol import LaunchRequest
kind, job_dir, preset, timesteps, blocked, blocked_env = sys.argv[1:7]
if blocked:
    os.environ[blocked_env] = blocked  # for the workers only: this process has imported what it needs
launcher = LocalLauncher(nice=0) if kind == "local" else PooledLauncher(nice=0, max_jobs=1)
args = WorkerArgs(Path(job_dir), preset=preset, timesteps=int(timesteps), threads=1)
handle = launcher.launch(LaunchRequest("0", args))
pids = [handle.pid] if kind == "local" else [served.proc.pid for served in launcher._processes]
print(" ".join(map(str, pids)), flush=True)
time.sleep(600)
"""


@dataclass
class StandIn:
    """A stand-in cockpit process and the worker processes it started (the first runs the job;
    a pooled one's second is the spare started beside it)."""

    proc: subprocess.Popen[str]
    workers: list[int]

    def kill(self) -> None:
        """kill -9 of the cockpit, reaped."""
        self.proc.kill()
        self.proc.wait()


def start_stand_in(
    kind: str, job_dir: Path, preset: Path, *, timesteps: int = 1_000_000, blocked: str = "", env: dict[str, str]
) -> StandIn:
    """Start a stand-in cockpit that launches one job with a `kind` launcher (local or pooled)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", COCKPIT, kind, str(job_dir), str(preset), str(timesteps), blocked, BLOCKED_IMPORT_ENV],
        cwd=REPO,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return StandIn(proc, [int(pid) for pid in proc.stdout.readline().split()])


def alive(pids: list[int]) -> list[int]:
    """Those of `pids` not ended: a zombie has ended, a process stopped by SIGSTOP has not."""
    left = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(pid)
        except psutil.NoSuchProcess:
            pass
    return left


def wait_gone(pids: list[int], timeout: float = 60.0) -> list[int]:
    """Poll until none of `pids` runs or `timeout` passes; those still running then."""
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)


def assert_gone(pids: list[int], timeout: float = 60.0) -> None:
    """Assert that every one of `pids` ends within `timeout` (polled, a generous bound: how fast is
    not the point). Those that did not are killed, so that a failure leaves nothing behind."""
    left = wait_gone(pids, timeout)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"still running {timeout:.0f} s after the cockpit's death: {left}"


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Poll `condition()` until true; AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
