"""Noticing that a run's directory is gone: deleted, moved, replaced, or no longer writable.

Every worker writes its events and checkpoints under the run directory. Once the directory is
gone (a cleanup script, a wrong `rm -rf`) they train for nothing: no checkpoint can be kept, and
the next one may even recreate an empty tree somewhere nobody looks. The session loop asks
`RunDirWatch.check()` at every tick; the watch looks at most once a second, with one `stat`: the
path must still be the directory the run started in (same `st_dev` and `st_ino`). Less often
(every `WRITABLE_EVERY_S`), and at once when a write there failed (`check(force=True)`), it asks
whether the directory is still writable (`os.access`, which also sees a read-only remount); only
a directory that stays unwritable for `UNWRITABLE_GRACE_S` counts as lost, so a brief blip stays a
warning about the write that failed. A full disk is not a lost directory: the jobs pause for it
(see the supervisor).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from cockpit.core.machine.clock import Clock

CHECK_EVERY_S = 1.0
WRITABLE_EVERY_S = 5.0
UNWRITABLE_GRACE_S = 5.0


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK)


class RunDirWatch:
    """Watches one run directory from the moment it is built (the directory must exist then)."""

    def __init__(
        self,
        path: Path,
        clock: Clock,
        *,
        stat: Callable[[Path], os.stat_result] = os.stat,
        writable: Callable[[Path], bool] = _writable,
    ) -> None:
        self.path = path
        self.clock = clock
        self._stat = stat
        self._writable = writable
        st = stat(path)
        self._identity = (st.st_dev, st.st_ino)
        now = clock.monotonic()
        self._next_look = now + CHECK_EVERY_S
        self._next_write_look = now + WRITABLE_EVERY_S
        self._unwritable_since: float | None = None

    def check(self, *, force: bool = False) -> str | None:
        """None while the directory is usable; else what became of it, as words that follow its
        name ("was deleted or moved away"). Cheap unless a look is due (or `force`)."""
        now = self.clock.monotonic()
        if not force and now < self._next_look:
            return None
        self._next_look = now + CHECK_EVERY_S
        try:
            st = self._stat(self.path)
        except FileNotFoundError:
            return "was deleted or moved away"
        except OSError as exc:
            return f"cannot be reached ({exc.strerror or exc})"
        if (st.st_dev, st.st_ino) != self._identity:
            return "was deleted and replaced by another directory"
        if not force and now < self._next_write_look:
            return None
        self._next_write_look = now + WRITABLE_EVERY_S
        if self._writable(self.path):
            self._unwritable_since = None
            return None
        if self._unwritable_since is None:
            self._unwritable_since = now
            self._next_write_look = now + UNWRITABLE_GRACE_S  # look again once the grace is over
            return None
        if now - self._unwritable_since >= UNWRITABLE_GRACE_S:
            return f"is no longer writable (for {now - self._unwritable_since:.0f} s)"
        return None
