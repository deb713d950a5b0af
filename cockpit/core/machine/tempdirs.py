"""cockpit's temporary directories, named by their owner so a killed owner's can be removed later.

A `cockpit tune` or a probe ended by SIGKILL cannot remove its directory, so each one is made by
`owned_tempdir(kind)`, named `cockpit-<kind>-<pid>-<start>-<random>`: the owner's pid and its
process's start time (psutil's `create_time`, in centiseconds, as the kernel counts a process's
start). Each `owned_tempdir` first removes the directories of its kind whose owner is gone
(`sweep`): no process has that pid, or the process that has it started at another time, which is
a pid reused by a process that owns nothing. Comparing the start time rather than a directory's
mtime keeps a live owner's directory whatever it wrote lately, and it is in the name, written
with the directory in one `mkdir`, so no sweep ever sees a directory whose owner is not yet known
(an owner file would be written after the directory, leaving a moment with none).

Never removed: a live owner's directory (this process's included), one whose owner's start time
cannot be read (another user's process: its directory is that user's), another user's directory,
and anything not a directory. Directories from before owners were named (`cockpit-<kind>-<random>`)
are removed once their mtime is over `LEGACY_AGE_S` old: they cannot say whose they are, but no
probe lasts a day (it gives up after minutes), and a tune's directory gets a new trial directory
every minute or so, so one untouched for a day has no live owner; younger ones are left alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

LEGACY_AGE_S = 24 * 3600.0
_START_TOLERANCE_CS = 100  # a second: the same process's start time, read twice, never differs by that


def _start_cs(pid: int) -> int | None:
    """Process `pid`'s start time in centiseconds since the epoch; None when no such process
    runs, or when its start cannot be read (another user's, on a locked-down /proc)."""
    try:
        return round(psutil.Process(pid).create_time() * 100)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.Error:
        return -1  # it runs, but whose it is cannot be told: never theirs to remove


def _prefix(kind: str) -> str:
    return f"cockpit-{kind}-"


def owner_prefix(kind: str, pid: int | None = None) -> str:
    """The name a directory of `kind` owned by process `pid` (default: this one) begins with."""
    pid = os.getpid() if pid is None else pid
    start = _start_cs(pid)
    if start is None or start < 0:
        raise ProcessLookupError(f"no process {pid} to own a directory")
    return f"{_prefix(kind)}{pid}-{start}-"


def owner_alive(pid: int, start_cs: int) -> bool:
    """Whether the process that started at `start_cs` (centiseconds) as `pid` still runs: False
    when `pid` is gone or now names a process that started at another time (a reused pid)."""
    now = _start_cs(pid)
    if now is None:
        return False
    return now < 0 or abs(now - start_cs) <= _START_TOLERANCE_CS


def stale(kind: str, where: Path | None = None, *, now: float | None = None) -> list[Path]:
    """The directories of `kind` in `where` (default: the temp dir) that `sweep` would remove
    (module docstring); `now` is the wall clock (for the legacy ones' age)."""
    where = Path(tempfile.gettempdir()) if where is None else where
    now = time.time() if now is None else now
    owned = re.compile(rf"{re.escape(_prefix(kind))}(\d+)-(\d+)-[^/]+")
    found: list[Path] = []
    try:
        entries = list(where.iterdir())
    except OSError:
        return []
    for path in entries:
        if not path.name.startswith(_prefix(kind)):
            continue
        try:
            info = path.lstat()
        except OSError:
            continue  # removed meanwhile
        if not path.is_dir() or path.is_symlink() or info.st_uid != os.getuid():
            continue
        match = owned.fullmatch(path.name)
        if match is not None:
            if not owner_alive(int(match.group(1)), int(match.group(2))):
                found.append(path)
        elif now - info.st_mtime > LEGACY_AGE_S:
            found.append(path)
    return found


def sweep(kind: str, where: Path | None = None) -> list[Path]:
    """Remove the stale directories of `kind` in `where` (default: the temp dir), as `stale`
    finds them; returns those removed. A directory that cannot be removed stays, silently: the
    next sweep tries again."""
    removed = []
    for path in stale(kind, where):
        with contextlib.suppress(OSError):
            shutil.rmtree(path)
            removed.append(path)
    return removed


@contextlib.contextmanager
def owned_tempdir(kind: str, where: Path | None = None) -> Iterator[Path]:
    """A new directory `cockpit-<kind>-<pid>-<start>-<random>` in `where` (default: the temp dir),
    after the stale ones of its kind are swept; removed on leaving, as `TemporaryDirectory` does."""
    sweep(kind, where)
    with tempfile.TemporaryDirectory(prefix=owner_prefix(kind), dir=where) as tmp:
        yield Path(tmp)


def private_dir(path: Path) -> Path:
    """`path`, a directory only this user may use: created 0700 where missing, and refused
    (PermissionError, one line) where it is not a directory of ours with mode 0700: at a name
    anyone can predict under /tmp, another user could otherwise have made it first and planted
    files (a socket, a pipe) where our processes would meet theirs."""
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # mkdir's mode went through the umask
    except FileExistsError:
        pass
    info = os.lstat(path)
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or mode != 0o700:
        raise PermissionError(
            f"{path}: not a private directory of uid {os.getuid()} (owner {info.st_uid}, mode {mode:o}); remove it"
        )
    return path
