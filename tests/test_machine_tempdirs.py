"""cockpit's temporary directories: a dead owner's are removed at the next start, never a live one's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from cockpit.core.machine.tempdirs import LEGACY_AGE_S, owned_tempdir, owner_prefix, sweep


def _made(where: Path, name: str) -> Path:
    (where / name).mkdir()
    (where / name / "partners.err").write_text("left behind\n")
    return where / name


def _unused_pid() -> int:
    pid = 4_000_000  # above Linux's default pid_max (4194304 at most): free unless a machine has that many
    while psutil.pid_exists(pid):
        pid += 1
    return pid


def test_a_dead_owners_directory_goes_a_live_ones_stays(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        mine = _made(tmp_path, owner_prefix("tune") + "a")
        childs = _made(tmp_path, owner_prefix("tune", child.pid) + "b")
        dead = _made(tmp_path, f"cockpit-tune-{_unused_pid()}-{round(time.time() * 100)}-c")
        other_kind = _made(tmp_path, f"cockpit-probe-{_unused_pid()}-{round(time.time() * 100)}-d")
        assert sweep("tune", tmp_path) == [dead]
        assert mine.is_dir() and childs.is_dir() and other_kind.is_dir()
        child.kill()
        child.wait()
        assert sweep("tune", tmp_path) == [childs]  # its owner is gone now
        assert mine.is_dir() and other_kind.is_dir()
    finally:
        child.kill()
        child.wait()


def test_a_reused_pids_directory_goes_its_new_owners_stays(tmp_path: Path) -> None:
    # This process's pid with another start time: a directory of a process that had the pid before.
    start = round(psutil.Process().create_time() * 100)
    earlier = _made(tmp_path, f"cockpit-probe-{os.getpid()}-{start - 360_000}-a")
    current = _made(tmp_path, f"cockpit-probe-{os.getpid()}-{start}-b")
    assert sweep("probe", tmp_path) == [earlier]
    assert current.is_dir()


def test_a_directory_from_before_owners_were_named_goes_only_after_a_day(tmp_path: Path) -> None:
    old, young = _made(tmp_path, "cockpit-tune-k3j2x9"), _made(tmp_path, "cockpit-tune-p0q8z1")
    day_ago = time.time() - LEGACY_AGE_S - 60
    os.utime(old, (day_ago, day_ago))
    (tmp_path / "cockpit-tune-file").write_text("not a directory")
    assert sweep("tune", tmp_path) == [old]
    assert young.is_dir() and (tmp_path / "cockpit-tune-file").exists()


def test_an_owned_tempdir_sweeps_first_and_is_named_by_its_owner(tmp_path: Path) -> None:
    dead = _made(tmp_path, f"cockpit-probe-{_unused_pid()}-{round(time.time() * 100)}-x")
    with owned_tempdir("probe", tmp_path) as tmp:
        assert not dead.exists() and tmp.name.startswith(owner_prefix("probe")) and tmp.is_dir()
    assert not tmp.exists()
