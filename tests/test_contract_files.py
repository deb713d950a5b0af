"""Atomic writes survive a power loss, not only a kill: after the rename, the directory that holds
the new name is fsynced (the rename is a change of the directory, which the file's own fsync does
not carry to the disk)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from cockpit.contract.files import write_atomic
from cockpit.contract.model_manifest import ModelEntry, copy_atomic, read_manifest, write_manifest


def record_fsyncs(monkeypatch: pytest.MonkeyPatch, watched: Path) -> list[tuple[str, int, bytes | None]]:
    """Each fsync as (kind, inode, `watched`'s content at that moment): "dir" or "file"."""
    calls: list[tuple[str, int, bytes | None]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        content = watched.read_bytes() if watched.is_file() else None
        calls.append(("dir" if stat.S_ISDIR(st.st_mode) else "file", st.st_ino, content))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_write_atomic_fsyncs_the_directory_after_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "run.toml"
    target.write_text("old")
    calls = record_fsyncs(monkeypatch, target)
    write_atomic(target, "new")
    assert target.read_text() == "new"
    dirs = [c for c in calls if c[0] == "dir"]
    assert dirs == [("dir", tmp_path.stat().st_ino, b"new")], calls  # the parent, once the new name is in it
    assert calls[0][0] == "file" and calls[0][2] == b"old"  # the data first, before the rename


def test_models_toml_and_each_model_copy_fsync_their_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models = tmp_path / "models"
    models.mkdir()
    source = tmp_path / "model.zip"
    source.write_bytes(b"weights")
    calls = record_fsyncs(monkeypatch, models / "a0000.zip")
    digest = copy_atomic(source, models / "a0000.zip")
    assert ("dir", models.stat().st_ino, b"weights") in calls
    calls.clear()
    entry = ModelEntry("a0000", "a0000.zip", digest, "CartPole-v1", "cartpole", 0, 1.0, 10)
    write_manifest(tmp_path, "screen", [entry])
    assert read_manifest(tmp_path) == [entry]
    assert [c[:2] for c in calls if c[0] == "dir"] == [("dir", models.stat().st_ino)]


def test_a_filesystem_that_cannot_fsync_a_directory_still_gets_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EINVAL is what Linux answers for a directory fsync on a filesystem without it (fsync(2)):
    the rename is done, so the write stands; any other error (EIO) is the caller's to know."""
    real = os.fsync

    def fsync(fd: int, *, code: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(code, os.strerror(code))
        real(fd)

    target = tmp_path / "run.toml"
    monkeypatch.setattr(os, "fsync", lambda fd: fsync(fd, code=errno.EINVAL))
    write_atomic(target, "new")
    assert target.read_text() == "new"
    monkeypatch.setattr(os, "fsync", lambda fd: fsync(fd, code=errno.EIO))
    with pytest.raises(OSError, match="Input/output error"):
        write_atomic(target, "newer")
