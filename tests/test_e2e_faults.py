"""Faults a long run meets, with real workers: its run directory deleted, its disk full."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.cockpitproc import Cockpit, run_cockpit, small_preset, start_cockpit, unavailable

LOST_EXIT = 3


@pytest.fixture
def cockpits() -> Iterator[list[Cockpit]]:
    """Cockpits a test started; any still running at its end (a failed test) are killed, and
    their workers with them (the parent-death signal)."""
    started: list[Cockpit] = []
    yield started
    for cockpit in started:
        if cockpit.proc.poll() is None:
            cockpit.proc.kill()
            cockpit.proc.wait(timeout=30)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
def test_a_deleted_run_dir_ends_the_run_in_one_line_and_kills_the_workers(
    tmp_path: Path, cockpits: list[Cockpit]
) -> None:
    preset = small_preset(tmp_path, checkpoint_every=2048, timesteps=2_000_000)
    run_dir = tmp_path / "runs" / "X"
    run_dir.parent.mkdir()
    cockpit = start_cockpit(run_dir, "--preset", str(preset), "--jobs", "2")
    cockpits.append(cockpit)
    cockpit.wait_for(lambda: all(any(e.kind == "checkpoint" for e in cockpit.events(j)) for j in ("000", "001")))
    pids = [next(e.pid for e in cockpit.events(j) if e.kind == "started") for j in ("000", "001")]
    _rm_rf(run_dir)
    deleted = time.monotonic()
    code = cockpit.proc.wait(timeout=15)
    took = time.monotonic() - deleted
    out = cockpit.text()
    assert code == LOST_EXIT, out[-3000:]
    print(f"run dir deleted: the cockpit exited {code} after {took:.1f} s")
    assert "Traceback" not in out
    said = [line for line in out.splitlines() if "cockpit run: error" in line or "was deleted" in line]
    assert said == [
        f"cockpit run: error: run directory {run_dir} was deleted or moved away; "
        "the workers were stopped (nothing left to checkpoint into)"
    ], out[-3000:]
    assert all(_gone(pid) for pid in pids), [psutil.Process(p) for p in pids if not _gone(p)]
    assert not run_dir.exists()  # nothing wrote a new run dir (no final run.toml, no checkpoint)


def _rm_rf(path: Path) -> None:
    """`rm -rf path`, as a user deletes a run directory: a file that the workers rename or remove
    while the walk is under way (a checkpoint's temporary file) is gone already, not an error, and a
    directory a worker wrote into after the walk listed it (a new checkpoint: "Directory not
    empty") is deleted by walking again, as a user runs `rm -rf` again."""

    def gone_already(function: object, name: str, exc: tuple[type[BaseException], BaseException, object]) -> None:
        if not isinstance(exc[1], FileNotFoundError):
            raise exc[1]

    for _ in range(4):
        try:
            shutil.rmtree(path, onerror=gone_already)
            return
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise
    shutil.rmtree(path, onerror=gone_already)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs of our own, unmounted afterwards. Mounting it needs root (and a container
    that lets root mount): where it cannot be mounted the test fails under CI, whose `.ci/run`
    runs as root, and is skipped elsewhere with a warning (`unavailable`)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        unavailable("the full-disk test mounts a tmpfs, which needs root: run .ci/run as root",
                    "NOT ROOT: the full-disk test did not run; it mounts a small tmpfs, which needs root")  # fmt: skip
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        unavailable(f"the full-disk test cannot mount its tmpfs: {done.stderr.strip()}",
                    f"CANNOT MOUNT A TMPFS: the full-disk test did not run: {done.stderr.strip()}")  # fmt: skip
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(path: Path) -> None:
    """Write `path` until the disk is full."""
    block = b"\0" * 65536
    with path.open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(block)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    with path.open("ab", buffering=0) as fh:  # the last partial page, too
        try:
            while True:
                fh.write(b"\0" * 512)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


@pytest.mark.slow
def test_with_no_disk_wait_a_full_disk_ends_the_run_and_resume_continues_it_once_there_is_room(
    tmp_path: Path, small_disk: Path, cockpits: list[Cockpit]
) -> None:
    # A bigger network than the small preset's, so a checkpoint (~0.8 MB) is far bigger than an event.
    preset = small_preset(tmp_path, checkpoint_every=2048, timesteps=16_384)
    preset.write_text(preset.read_text() + "net_arch = [256, 256]\n")
    run_dir = small_disk / "run"
    output = tmp_path / "run.out"  # the cockpit's own output is off the full disk, to be read
    with output.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cockpit", "run", "--run-dir", str(run_dir), "--preset",
                                 str(preset), "--jobs", "2", "--disk-wait", "0"], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    cockpit = Cockpit(proc, run_dir, output)
    cockpits.append(cockpit)
    cockpit.wait_for(lambda: all(any(e.kind == "checkpoint" for e in cockpit.events(j)) for j in ("000", "001")))
    filler = small_disk / "filler"
    _fill(filler)
    filled = time.monotonic()
    code = cockpit.finish(timeout=120)
    took = time.monotonic() - filled
    out = cockpit.text()
    print(f"disk full: both jobs paused and the run ended (exit {code}) {took:.1f} s after the disk filled")
    assert code == 1, out[-3000:]  # ended with jobs not done; no crash, no traceback
    assert "Traceback" not in out
    for job in ("000", "001"):
        assert f"[job {job}] running -> paused" in out, out[-3000:]
        (line,) = [x for x in out.splitlines() if f"[job {job}] running -> paused" in x]
        assert "error: disk full: " in line and " MiB free on " in line, line
        assert f"job {job} (seed {int(job)}) paused at" in out  # the summary
        assert len([e for e in cockpit.events(job) if e.kind == "started"]) == 1  # no restart loop
    assert "backoff" not in out and "restarts" not in out
    assert "run failed: 2 paused" in out
    # The samples and run.toml stop growing with a warning; the run went on to its end regardless.
    assert "[cockpit] samples not written after" in out or "[cockpit] run.toml not updated" in out, out[-3000:]

    # Every job still has its last checkpoint, whole.
    from cockpit_training.checkpoints import CheckpointStore

    for job in ("000", "001"):
        best, corrupt = CheckpointStore(run_dir / "jobs" / job / "checkpoints").newest_valid()
        assert best is not None and best.step >= 2048 and corrupt == []
    filler.unlink()
    resumed = run_cockpit("run", "--resume", str(run_dir), timeout=240)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    log = cockpit.run_log()
    assert [(j.status, j.steps, j.restarts) for j in log.jobs] == [("done", 16_384, 0), ("done", 16_384, 0)]


@pytest.mark.slow
def test_a_full_disk_is_waited_out_and_the_jobs_go_on_by_themselves_once_there_is_room(
    tmp_path: Path, small_disk: Path, cockpits: list[Cockpit]
) -> None:
    # The default: no bound on the wait. Nobody runs --resume: the run itself goes on.
    preset = small_preset(tmp_path, checkpoint_every=2048, timesteps=16_384)
    preset.write_text(preset.read_text() + "net_arch = [256, 256]\n")  # checkpoints far bigger than events
    run_dir = small_disk / "run"
    output = tmp_path / "run.out"  # the cockpit's own output is off the full disk, to be read
    with output.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "cockpit", "run", "--run-dir", str(run_dir), "--preset",
                                 str(preset), "--jobs", "2"], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)  # fmt: skip
    cockpit = Cockpit(proc, run_dir, output)
    cockpits.append(cockpit)
    cockpit.wait_for(lambda: all(any(e.kind == "checkpoint" for e in cockpit.events(j)) for j in ("000", "001")))
    filler = small_disk / "filler"
    _fill(filler)
    cockpit.wait_for(lambda: "[run] waiting for disk: " in cockpit.text(), timeout=120)
    time.sleep(6)  # a check or two with the disk still full: the jobs stay paused
    assert proc.poll() is None, cockpit.text()[-3000:]
    paused_for = [job for job in ("000", "001") if f"[job {job}] running -> paused" in cockpit.text()]
    assert paused_for, cockpit.text()[-3000:]
    filler.unlink()
    code = cockpit.finish(timeout=240)
    out = cockpit.text()
    print("\n".join(line for line in out.splitlines() if "disk" in line or "paused" in line or "run done" in line))
    assert code == 0, out[-3000:]
    assert "Traceback" not in out
    waiting = [line for line in out.splitlines() if "[run] waiting for disk: " in line]
    assert waiting and all(" MiB free, needs " in line and line.endswith(" MiB") for line in waiting), waiting
    for job in paused_for:
        assert f"{job}: disk space is back; going on from its checkpoint" in out, out[-3000:]
        assert len([e for e in cockpit.events(job) if e.kind == "started"]) == 2  # once more, from the checkpoint
    log = cockpit.run_log()
    assert log.status == "done" and log.disk_wait is None
    assert [(j.status, j.steps) for j in log.jobs] == [("done", 16_384), ("done", 16_384)]

    from cockpit_training.checkpoints import CheckpointStore

    for job in ("000", "001"):  # nothing the full disk met was left half written
        best, corrupt = CheckpointStore(run_dir / "jobs" / job / "checkpoints").newest_valid()
        assert best is not None and corrupt == []
