"""Writing the files other processes read: replaced whole and atomically, never torn.

A reader (a viewer, `cockpit report`, the next `--resume`, a later `recommend`) may open the file at
any moment, and the writer may be killed or run out of disk at any moment: either way the reader
must find the previous complete file or the new one. After the rename the directory is fsynced
too: the rename is an entry in the directory, and until the directory reaches the disk a power
loss can bring back the old file (or none) although the new one's data was synced.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

# Owner only: what `private_files` sets, so a run's directories come out 0700 and its files 0600.
PRIVATE_UMASK = 0o077
_user_umasks: list[int] = []  # the umask each `private_files` found, innermost last


def write_atomic(path: Path, text: str | bytes) -> None:
    """Replace `path` with `text` (UTF-8), or with bytes as they are, atomically (temp file in the
    same directory, fsync, rename, fsync of the directory); raises OSError on failure, leaving the
    old file as it was and no temp file behind (or, when only the directory's fsync fails, the new
    file in place)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by its path: a directory's, so that a rename into it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    """fsync `directory` after a rename into it, so the rename survives a power loss; a filesystem
    that cannot fsync a directory (EINVAL: some network and FUSE ones) is left as it is, since the
    rename is done and nothing better can be had there. Other errors are raised."""
    try:
        fsync_path(directory)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise


def free_bytes(path: Path) -> int | None:
    """The bytes left to an unprivileged writer on the filesystem holding `path` (or its nearest
    existing parent); None if even that cannot be read."""
    for candidate in (path, *path.parents):
        try:
            st = os.statvfs(candidate)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return None


def free_space(path: Path) -> str:
    """`free_bytes` as messages write it, e.g. "3.0 MiB"; "unknown space" if it cannot be read."""
    free = free_bytes(path)
    return "unknown space" if free is None else f"{free / 2**20:.1f} MiB"


def sha256_of(path: Path) -> str:
    """The file's SHA-256, hex, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_dir() -> Path:
    """cockpit's cache folder: `$XDG_CACHE_HOME/cockpit`, or `~/.cache/cockpit` when
    XDG_CACHE_HOME is unset or relative (as the XDG spec says)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "cockpit"


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Within it, this process makes directories 0700 and files 0600 (umask 077), as `cockpit run`
    and `cockpit fleet` run: a run directory holds command lines, `--on-done` text, checkpoints and
    logs, which no other user of the machine should read. The umask rather than a mode at each of
    the many places that make a run's files (run.toml, the telemetry CSVs, fleet.db, the job dirs,
    the worker's checkpoints, TensorBoard's event files, SB3's own): one setting covers them all,
    files written by libraries included, and cockpit's own worker inherits it, writing nothing but
    its job dir. What runs on the user's behalf and may write anywhere (a script's command,
    `--on-done`, and the background run, which sets its own) is started with the user's umask
    again (`user_umask`), so the user's other files keep the modes they always had. The umask
    found is restored on leaving."""
    found = os.umask(PRIVATE_UMASK)
    _user_umasks.append(found)
    try:
        yield
    finally:
        _user_umasks.pop()
        os.umask(found)


def user_umask() -> int:
    """The umask the user gave this process, for `subprocess.Popen(umask=...)` of a command run on
    the user's behalf: the one the outermost `private_files` found, else -1 (Popen's default:
    the child inherits the current umask, which is then the user's own)."""
    return _user_umasks[0] if _user_umasks else -1
