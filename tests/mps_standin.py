"""A stand-in `nvidia-cuda-mps-control` for tests: an executable put first on PATH that behaves as
the real control program does in what cockpit asks of it, and records every call.

What it copies from the real one (NVIDIA's MPS documentation, "Appendix: Tools and Interface
Reference" and "Appendix: Environment Variables"; the nvidia-cuda-mps-control(1) man page):
- `nvidia-cuda-mps-control -d` starts the control daemon in the background and returns at once.
  The daemon's named pipes go in `CUDA_MPS_PIPE_DIRECTORY` (default /tmp/nvidia-mps): here the
  FIFO `control`, owned by the user who started it; it writes its pid to
  `nvidia-cuda-mps-control.pid` there. Its logs go to `CUDA_MPS_LOG_DIRECTORY` (default
  /var/log/nvidia-mps): here `control.log`. The daemon is the control program itself, sleeping in a
  session of its own, so it outlives whoever started it and its process is named
  `nvidia-cuda-mps-control` (/proc/PID/comm keeps the first 15 bytes: `nvidia-cuda-mps`), as the
  real one's is ("Appendix: Tools and Interface Reference": `ps -ef | grep mps` finds it; the pid
  file holds the control daemon's PID). It sees the GPUs of the `CUDA_VISIBLE_DEVICES` it was
  started with ("Appendix: Environment Variables").
- `echo quit | nvidia-cuda-mps-control` (no argument: commands on stdin) asks the daemon of the
  `CUDA_MPS_PIPE_DIRECTORY` in its environment to quit: here it kills that process and removes
  the pipe and pid file. With no daemon there it fails (the real one cannot connect).

Every call appends one JSON line to `$MPS_STANDIN_LOG`: argv, stdin, the two directories and
`CUDA_VISIBLE_DEVICES` in its environment. The tests never touch /tmp/nvidia-mps: they always set
CUDA_MPS_PIPE_DIRECTORY.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

STANDIN = """#!{python}
import json, os, signal, subprocess, sys, time
if sys.argv[1:] == ["--standin-daemon"]:  # the daemon's own process: not a call
    time.sleep(600)
    sys.exit(0)
pipe_dir = os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"
log_dir = os.environ.get("CUDA_MPS_LOG_DIRECTORY") or "/var/log/nvidia-mps"
stdin = "" if "-d" in sys.argv[1:] else sys.stdin.read()
with open(os.environ["MPS_STANDIN_LOG"], "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "stdin": stdin, "pipe_dir": pipe_dir,
                          "log_dir": os.environ.get("CUDA_MPS_LOG_DIRECTORY"),
                          "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}}) + "\\n")
pid_file = os.path.join(pipe_dir, "nvidia-cuda-mps-control.pid")
if sys.argv[1:] == ["-d"]:
    if os.environ.get("MPS_STANDIN_FAIL"):
        print("An instance of this daemon is already running", file=sys.stderr)
        sys.exit(1)
    os.makedirs(pipe_dir, exist_ok=True)
    os.makedirs(log_dir, exist_ok=True)
    daemon = subprocess.Popen([sys.argv[0], "--standin-daemon"], start_new_session=True, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(log_dir, "control.log"), "a") as out:
        out.write("[standin] Starting control daemon\\n")
    os.mkfifo(os.path.join(pipe_dir, "control"))
    with open(pid_file, "w") as out:
        out.write(f"{{daemon.pid}}\\n")
    sys.exit(0)
if "quit" in stdin.split():
    try:
        pid = int(open(pid_file).read())
    except OSError:
        print("Cannot find MPS control daemon process", file=sys.stderr)
        sys.exit(1)
    os.kill(pid, signal.SIGTERM)
    for name in ("control", "nvidia-cuda-mps-control.pid"):
        try:
            os.unlink(os.path.join(pipe_dir, name))
        except FileNotFoundError:
            pass
    sys.exit(0)
sys.exit(0)
"""


def install(bin_dir: Path, log: Path) -> Path:
    """Write the stand-in as `bin_dir/nvidia-cuda-mps-control` (calls recorded in `log`); the
    caller puts `bin_dir` first on PATH and sets MPS_STANDIN_LOG to `log`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    program = bin_dir / "nvidia-cuda-mps-control"
    program.write_text(STANDIN.format(python=sys.executable))
    program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return program


def calls(log: Path) -> list[dict[str, object]]:
    """Every call the stand-in recorded, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line]


def daemon_pid(pipe_dir: Path) -> int | None:
    """The pid the stand-in's daemon wrote in `pipe_dir`, None when there is none."""
    try:
        return int((pipe_dir / "nvidia-cuda-mps-control.pid").read_text())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def end(pid: int | None) -> None:
    """Kill a stand-in daemon a test left (a failed test must not leave sleepers behind)."""
    if pid is not None and alive(pid):
        os.kill(pid, signal.SIGKILL)


class StandIn:
    """The stand-in on PATH: its call log, and the pipe directory the environment names (where a
    daemon already running for this user would be; empty unless a test starts one there)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = root / "calls.jsonl"
        self.system_pipe = root / "system-mps"

    def calls(self) -> list[dict[str, object]]:
        return calls(self.log)

    def start_daemon_by_hand(self) -> int:
        """A daemon the user started themselves (`nvidia-cuda-mps-control -d`) in the environment's pipe dir."""
        subprocess.run(["nvidia-cuda-mps-control", "-d"], check=True, env=os.environ.copy())
        pid = daemon_pid(self.system_pipe)
        assert pid is not None
        return pid


def as_another_user(pipe_dir: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Make the daemon at `pipe_dir` another user's, as a root daemon's or a colleague's is: its
    pipe directory, control pipe and pid file chowned to uid 65534 where the tests run as root;
    elsewhere this process takes another uid for `os.getuid` (the files stay, the owner differs).
    Returns that other uid."""
    if os.geteuid() == 0:
        for path in (pipe_dir, pipe_dir / "control", pipe_dir / "nvidia-cuda-mps-control.pid"):
            os.chown(path, 65534, 65534)
        return 65534
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)
    return me
