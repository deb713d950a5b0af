"""A run directory that disappears or stays unwritable ends the run; a brief blip is a warning."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from cockpit.contract.controls import StopAll
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.feed.snapshot import RunState
from cockpit.core.session.run_session import RUN_DIR_LOST_EXIT
from cockpit.core.supervise.rundirwatch import CHECK_EVERY_S, UNWRITABLE_GRACE_S, WRITABLE_EVERY_S, RunDirWatch
from tests.fakeclock import FakeClock
from tests.test_feed_control import QuietView, scripted_session


def test_a_deleted_run_dir_is_seen_within_a_second(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    clock = FakeClock()
    watch = RunDirWatch(tmp_path / "run", clock)
    assert watch.check() is None
    shutil.rmtree(tmp_path / "run")
    assert watch.check() is None  # looked less than a second ago
    clock.t += CHECK_EVERY_S
    assert watch.check() == "was deleted or moved away"


def test_a_run_dir_deleted_and_made_again_is_not_the_same_directory(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    clock = FakeClock()
    watch = RunDirWatch(tmp_path / "run", clock)
    (tmp_path / "run").rename(tmp_path / "moved")
    (tmp_path / "run").mkdir()  # e.g. a worker's checkpoint dir made again with parents=True
    clock.t += CHECK_EVERY_S
    assert watch.check() == "was deleted and replaced by another directory"


def test_only_a_run_dir_that_stays_unwritable_is_lost(tmp_path: Path) -> None:
    clock = FakeClock()
    writable = [True]
    watch = RunDirWatch(tmp_path, clock, writable=lambda _path: writable[0])
    writable[0] = False
    assert watch.check(force=True) is None  # a failed write: the first look starts the grace
    clock.t += UNWRITABLE_GRACE_S / 2
    writable[0] = True
    assert watch.check(force=True) is None  # writable again: it was a blip
    writable[0] = False
    clock.t += WRITABLE_EVERY_S
    assert watch.check() is None
    for _ in range(int(UNWRITABLE_GRACE_S / CHECK_EVERY_S) - 1):
        clock.t += CHECK_EVERY_S
        assert watch.check() is None
    clock.t += CHECK_EVERY_S
    assert watch.check() == f"is no longer writable (for {UNWRITABLE_GRACE_S:.0f} s)"


def test_a_session_whose_run_dir_is_deleted_kills_its_workers_and_ends_lost(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    clock = FakeClock()
    session = scripted_session(run_dir, clock=clock)
    deleted_at: list[float] = []
    signals: list[tuple[str, int]] = []
    launcher = session.launcher
    kill, terminate = launcher.kill, launcher.terminate
    launcher.kill = lambda handle: (signals.append(("kill", handle.pid)), kill(handle))[-1]
    launcher.terminate = lambda handle: (signals.append(("terminate", handle.pid)), terminate(handle))[-1]

    def delete_once_running(state: RunState) -> None:
        if not deleted_at and state.count(JobState.RUNNING) == 2:
            shutil.rmtree(run_dir)
            deleted_at.append(clock.monotonic())

    state = session.run(QuietView(), on_tick=delete_once_running, handle_signals=False)
    assert deleted_at and clock.monotonic() - deleted_at[0] <= CHECK_EVERY_S + 1
    assert session.lost == (
        f"run directory {run_dir} was deleted or moved away; the workers were stopped (nothing left to checkpoint into)"
    )
    # Killed first, before anything asks them to checkpoint (there is nowhere to put one).
    assert [call for call, _pid in signals[:2]] == ["kill", "kill"]
    assert {pid for call, pid in signals if call == "kill"} == set(session.launcher.exit_codes)
    assert all(not job.state.live for job in state.jobs) and state.status is RunStatus.INTERRUPTED
    assert not run_dir.exists()  # the final run log was not written into a new directory
    final = session.latest_state()
    assert final is not None and session.lost in final.warnings  # attached viewers learn why
    assert RUN_DIR_LOST_EXIT == 3


def test_a_failed_run_toml_write_in_a_writable_dir_stays_a_warning(tmp_path: Path, monkeypatch) -> None:
    import cockpit.core.session.run_session as session_module

    run_dir = tmp_path / "run"
    clock = FakeClock()
    session = scripted_session(run_dir, clock=clock)
    failures = [0]

    def full_disk(*_args: object, **_kwargs: object) -> None:
        failures[0] += 1
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(session_module, "write_record", full_disk)
    ticks = [0]

    def stop_later(state: RunState) -> None:
        ticks[0] += 1
        if ticks[0] == 100:  # 20 s of fake time: two run.toml writes have failed by then
            session.submit(StopAll())

    session.run(QuietView(), on_tick=stop_later, handle_signals=False)
    assert failures[0] >= 2 and session.lost is None
    final = session.latest_state()
    assert final is not None and "run.toml not updated: No space left on device" in final.warnings
    assert os.path.isdir(run_dir)
