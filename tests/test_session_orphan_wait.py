"""A resumed run waits for the previous session's workers still running on its job dirs (a killed
cockpit's orphans, checkpointing on their parent-death signal), and kills those still there after
its timeout, with a warning either way.

The orphans are real child processes that look to `previous_workers` as a worker does: the
worker module and `--job-dir` on their command line, or a served worker (`--serve`) holding the
job dir's lock. Each takes the job dir's lock as a worker does, says so on stdout, then either
finishes its checkpoint (writes `checkpointed` into the job dir) and exits, or never exits.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cockpit.contract.workerargs import SERVE_FLAG, WORKER_MODULE
from cockpit.core.launch.local import LocalLauncher, wait_for_previous_workers
from cockpit.core.session import startup
from cockpit.core.session.run_session import RunSession
from cockpit.core.session.startup import start_session
from cockpit.core.telemetry.sampler import Sampler
from tests.specs import cartpole_spec
from tests.test_feed_control import scripted_session

ORPHAN = """
import fcntl, os, signal, sys, time

job_dir, stuck = sys.argv[-1], sys.argv[-2] == "stuck"
lock = os.open(os.path.join(job_dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(lock, fcntl.LOCK_EX)
if stuck:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("locked", flush=True)
if stuck:
    while True:
        time.sleep(60)
time.sleep(1.0)  # the checkpoint being written
open(os.path.join(job_dir, "checkpointed"), "w").close()
"""
WAITED = "waited for 1 worker(s) of the previous session to checkpoint and exit"


@pytest.fixture
def orphans() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The orphans a test starts; any left running at its end are killed."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def start_orphan(orphans: list[subprocess.Popen[bytes]], job_dir: Path, *, served: bool, stuck: bool = False) -> None:
    """An orphaned worker on `job_dir`, returned once it holds the job dir's lock. In a session of
    its own, as the launcher starts workers: the timeout kills its process group."""
    job_dir.mkdir(parents=True, exist_ok=True)
    how = [SERVE_FLAG] if served else ["--job-dir", str(job_dir)]
    proc = subprocess.Popen([sys.executable, "-c", ORPHAN, WORKER_MODULE, *how, "stuck" if stuck else "exits",
                             str(job_dir)], stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    orphans.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"locked\n"


@pytest.mark.parametrize("served", [False, True], ids=["worker", "served-worker"])
def test_a_resume_waits_for_a_previous_workers_checkpoint(
    tmp_path: Path, orphans: list[subprocess.Popen[bytes]], served: bool
) -> None:
    job_dir = tmp_path / "run" / "jobs" / "000"
    start_orphan(orphans, job_dir, served=served)
    assert wait_for_previous_workers(tmp_path / "run", timeout_s=120) == WAITED
    assert (job_dir / "checkpointed").exists()  # it was let finish
    assert wait_for_previous_workers(tmp_path / "run", timeout_s=120) is None  # gone: nothing to wait for


def test_a_worker_still_there_after_the_timeout_is_killed_and_another_runs_is_left_alone(
    tmp_path: Path, orphans: list[subprocess.Popen[bytes]]
) -> None:
    start_orphan(orphans, tmp_path / "run" / "jobs" / "000", served=False, stuck=True)
    start_orphan(orphans, tmp_path / "other" / "jobs" / "000", served=False, stuck=True)
    ours, theirs = orphans
    line = wait_for_previous_workers(tmp_path / "run", timeout_s=1.0)
    assert line == f"{WAITED}, killed 1 still running after 1 s"
    assert gone(ours) and theirs.poll() is None


def gone(proc: subprocess.Popen[bytes]) -> bool:
    """Whether `proc` has ended (reaped by the wait, or a zombie left for us)."""
    return not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE


def previous_run(run_dir: Path) -> None:
    """A run's first session, its run.toml written, its two jobs started (on fake workers)."""
    first = scripted_session(run_dir)
    first.supervisor.tick()
    first.write_run_log(first.snapshot())
    first.recorder.close()


def resume_locally(run_dir: Path) -> RunSession:
    """`cockpit run --resume run_dir` on local workers, up to where it would start them."""
    spec = cartpole_spec(run_dir, resuming=True)
    session = start_session(spec, Sampler(gpu=None, gpu_status="test"), launcher=LocalLauncher(), serve=False,
                         resume=True)  # fmt: skip
    session.recorder.close()
    return session


def test_a_resumed_session_waits_for_the_previous_workers_and_says_so(
    tmp_path: Path, orphans: list[subprocess.Popen[bytes]]
) -> None:
    run_dir = tmp_path / "run"
    previous_run(run_dir)
    start_orphan(orphans, run_dir / "jobs" / "000", served=False)
    start_orphan(orphans, run_dir / "jobs" / "001", served=True)
    session = resume_locally(run_dir)
    assert "waited for 2 worker(s) of the previous session to checkpoint and exit" in session.supervisor.warnings
    assert all((run_dir / "jobs" / job / "checkpointed").exists() for job in ("000", "001"))


def test_a_resumed_session_gives_up_on_a_stuck_worker_after_its_timeout(
    tmp_path: Path, orphans: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(startup, "ORPHAN_WAIT_S", 1.0)
    run_dir = tmp_path / "run"
    previous_run(run_dir)
    start_orphan(orphans, run_dir / "jobs" / "000", served=True, stuck=True)
    session = resume_locally(run_dir)
    assert f"{WAITED}, killed 1 still running after 1 s" in session.supervisor.warnings
    assert gone(orphans[0])
