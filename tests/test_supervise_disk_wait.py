"""A full disk waited out (`cockpit.core.supervise.disk_wait`, `--disk-wait`): jobs paused for disk
space go on by themselves once there is room for their checkpoints, and the run says so meanwhile.

The free space is the one seam faked (`DiskWait.free`); the supervisor, its jobs and their events
are real, on a fake clock and launcher (tests/test_supervise_supervisor.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.cli import build_parser
from cockpit.contract.runspec import RestartPolicy
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.supervise.disk_wait import CHECK_S, MARGIN, checkpoint_bytes
from cockpit.core.supervise.supervisor import Supervisor
from tests.test_supervise_supervisor import FakeLauncher, events, finish, make

MIB = 2**20
CHECKPOINT = 4 * MIB


def fill_disk(sup: Supervisor, launcher: FakeLauncher, job_id: str) -> None:
    """`job_id`'s worker wrote a checkpoint of `CHECKPOINT` bytes, then ran out of disk space."""
    job = sup.jobs[job_id]
    step = job.job_dir / "checkpoints" / "step-2048-1"
    step.mkdir(parents=True)
    (step / "model.zip").write_bytes(b"\0" * CHECKPOINT)
    writer = events(sup, job_id)
    writer.started(config={}, pid=launcher.live(job_id).pid, device="cpu", versions={})
    writer.error(type="disk_full", message=f"0.1 MiB free on {step}: No space left on device")
    launcher.live(job_id).exit_code = 3


def test_paused_jobs_wait_for_room_for_their_checkpoints_then_go_on_by_themselves(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=2, slots=2)  # the default: no bound on the wait
    free = [1 * MIB]
    sup.disk.free = lambda path: free[0]
    sup.tick()
    fill_disk(sup, launcher, "000")
    sup.tick()
    job = sup.jobs["000"]
    assert job.state is JobState.PAUSED and job.restarts == 0
    needs = (MARGIN + CHECKPOINT) // MIB
    assert sup.snapshot().disk_wait == f"waiting for disk: 1 MiB free, needs {needs} MiB"
    finish(sup, launcher, "001")
    sup.tick()
    # Every other job ended: the run is not over while one waits for space.
    assert not sup.finished and sup.status is RunStatus.RUNNING
    free[0] = (needs - 1) * MIB  # still short of a checkpoint and the margin
    clock.t += CHECK_S
    sup.tick()
    assert job.state is JobState.PAUSED and len(launcher.processes) == 2
    assert sup.snapshot().disk_wait == f"waiting for disk: {needs - 1} MiB free, needs {needs} MiB"
    free[0] = needs * MIB
    clock.t += CHECK_S / 2  # read at most every CHECK_S: the room is not seen yet
    sup.tick()
    assert job.state is JobState.PAUSED
    clock.t += CHECK_S / 2
    sup.tick()
    assert job.state is JobState.STARTING and len(launcher.processes) == 3 and job.error is None
    assert sup.snapshot().disk_wait is None
    assert "000: disk space is back; going on from its checkpoint" in sup.warnings
    finish(sup, launcher, "000")
    sup.tick()
    assert sup.finished and sup.status is RunStatus.DONE


def test_past_disk_wait_the_run_ends_failed_with_its_jobs_paused(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(disk_wait_s=30.0))
    sup.disk.free = lambda path: 1 * MIB
    sup.tick()
    fill_disk(sup, launcher, "000")
    sup.tick()
    assert sup.jobs["000"].state is JobState.PAUSED and not sup.finished
    clock.t += 29.0
    sup.tick()
    assert not sup.finished and sup.snapshot().disk_wait is not None
    clock.t += 1.0
    sup.tick()
    assert sup.finished and sup.status is RunStatus.FAILED and sup.snapshot().disk_wait is None
    assert sup.jobs["000"].state is JobState.PAUSED and len(launcher.processes) == 1


def test_disk_wait_0_ends_the_run_at_once_and_a_stop_ends_the_wait(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(disk_wait_s=0.0))
    sup.disk.free = lambda path: 1000 * MIB  # room enough: with no wait it is never looked at
    sup.tick()
    fill_disk(sup, launcher, "000")
    sup.tick()
    assert sup.finished and sup.status is RunStatus.FAILED and len(launcher.processes) == 1
    waiting, its_launcher, _ = make(tmp_path / "other", agents=1, slots=1)
    waiting.disk.free = lambda path: 1 * MIB
    waiting.tick()
    fill_disk(waiting, its_launcher, "000")
    waiting.tick()
    assert not waiting.finished
    waiting.interrupt()
    waiting.tick()
    assert waiting.finished and waiting.status is RunStatus.INTERRUPTED and waiting.snapshot().disk_wait is None


def test_a_checkpoint_is_measured_by_its_newest_step(tmp_path: Path) -> None:
    assert checkpoint_bytes(tmp_path) == 0  # none yet: the margin alone
    for name, size in (("step-512-9", 300), ("step-2048-1", 1000), ("step-1024-5", 700)):
        (tmp_path / "checkpoints" / name).mkdir(parents=True)
        (tmp_path / "checkpoints" / name / "model.zip").write_bytes(b"\0" * size)
    (tmp_path / "checkpoints" / "step-2048-1" / "vecnormalize.pkl").write_bytes(b"\0" * 24)
    assert checkpoint_bytes(tmp_path) == 1024


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "soon"])
def test_a_disk_wait_that_is_no_number_of_seconds_is_one_line_and_exit_2(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["run", "--disk-wait", text])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    expected = f"argument --disk-wait: expected a number of seconds, 0 or more, got {text!r}"
    assert line == f"cockpit run: error: {expected} (see cockpit run --help)"
    assert build_parser().parse_args(["fleet", "plan.toml", "--disk-wait", "1_800"]).disk_wait == 1800.0
