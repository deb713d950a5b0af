"""`python -m cockpit_training.guard -- COMMAND...`: run a user's training command as a cockpit job.

The cockpit's own worker follows the cockpit's death itself (PR_SET_PDEATHSIG). A user's script
does not, and neither do the processes it starts, so the launcher starts the guard, which:
- asks the kernel for SIGCONT when the cockpit dies, even by SIGKILL (`stopping.follow_parent`):
  it continues a guard stopped by SIGSTOP (a SIGTERM would stay pending on it forever, and its
  command run on unwatched), and the handler, finding the cockpit gone, ends the group as below;
- becomes the subreaper of what the command starts, so double-forked children stay its own;
- runs COMMAND as its child, in its own process group (the session the launcher gave it);
- passes the cockpit's SIGTERM or SIGINT on to COMMAND alone, which gets the stop's grace period
  to save (the supervisor then kills the whole group if it is still there);
- when the cockpit has died: SIGTERM to the whole group, then SIGKILL after `ORPHAN_GRACE_S`;
- once COMMAND exits, ends whatever it left running in the group the same way, and exits as
  COMMAND did: its exit code, or killed by the same signal.

It imports nothing heavy: it costs a few milliseconds and a few MiB beside a training script.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from types import FrameType

from cockpit_training.stopping import follow_parent

PR_SET_CHILD_SUBREAPER = 36
ORPHAN_GRACE_S = 2.0  # SIGTERM, this long, then SIGKILL: the group of a cockpit that died
USAGE = "usage: python -m cockpit_training.guard -- COMMAND [ARG ...]"


def end_group(grace_s: float = ORPHAN_GRACE_S) -> None:
    """SIGTERM every other process in our process group, then SIGKILL those left after `grace_s`."""
    me = os.getpid()
    group = os.getpgid(0)
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM reaches us too
    try:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _others(group, me):
            _reap()
            time.sleep(0.05)
        if _others(group, me):
            for pid in _others(group, me):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        _reap()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _others(group: int, me: int) -> list[int]:
    """The live processes of process group `group` other than `me` (zombies are not live)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == group:  # state, ppid, pgrp
            pids.append(int(entry))
    return pids


def _reap() -> None:
    """Reap any exited child (as subreaper, the orphans of the command are ours to reap)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def main(argv: list[str] | None = None) -> int:
    """Run the command after `--`; returns (or dies of) what it exited with."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "--" or len(args) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    command = args[1:]
    cockpit = os.getppid()

    def on_continue(_signum: int, _frame: FrameType | None) -> None:
        if os.getppid() != cockpit:  # the cockpit died: take the whole group with it
            end_group()
            os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGCONT, on_continue)  # before the kernel may send it
    if follow_parent(signal.SIGCONT) is False:
        return 1  # the cockpit died before we could follow it: start nothing
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no subreaper
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []  # a stop that came before the command started

    def on_signal(signum: int, frame: FrameType | None) -> None:
        on_continue(signum, frame)  # a stop after the cockpit's death: the same end
        if child is None:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    # Before the command starts: a stop in between must reach it, not kill us and orphan it.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        print(f"cockpit: cannot start {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    for signum in pending:
        child.send_signal(signum)
    code = child.wait()
    end_group()
    if code < 0:  # killed by a signal: die of the same one, so the supervisor sees what happened
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep their default anyway
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main())
