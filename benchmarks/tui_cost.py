"""What the TUI costs and how fast it answers: CPU of the viewer at 5 Hz, and key-to-screen time.

What it measures, on real runs (cartpole preset, CPU only):
1. CPU: a headless `cockpit run --jobs 4` in the background and `cockpit attach` to it in a real
   terminal (a private tmux server, 80x24). The viewer's own CPU time over `--seconds` seconds,
   as % of one core (goal: at most 5 %), next to the supervising cockpit's.
2. Latency: a run of 16 agents (`--agents 16 --jobs 4`: 16 rows, 4 running), attached the same
   way. For each repeat, a key is sent with `tmux send-keys`, and the pane's output, streamed to
   a file by `tmux pipe-pane`, is watched (every 1 ms, no process spawned) until the viewer has
   written the change: `?` opens help and `?` closes it, `enter` opens the job detail and `q`
   goes back, and `escape` does the same. The time starts before `send-keys` runs, so it includes
   tmux delivering the key: an upper bound on the TUI's own time (goal: at most 100 ms). Polling
   capture-pane instead would fork a tmux client every few ms and steal the very CPU measured.
   A lone escape also waits out the terminal's ESCDELAY (Textual: 100 ms by default), which tells
   it from the start of an escape sequence; that row shows it.
3. A capture-pane screenshot of the main screen during the first run.

Run from the repo root (about 2 minutes on 2 cores):
    .venv/bin/python -m benchmarks.tui_cost
    .venv/bin/python -m benchmarks.tui_cost --seconds 60 --repeats 30
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from benchmarks.common import fmt_ratio, load_caption, log, print_table, warn_if_busy
from cockpit.contract.rundir import RunDir

CPU_GOAL_PERCENT = 5.0
LATENCY_GOAL_MS = 100.0


class Terminal:
    """A private tmux server with one 80x24 pane running `command`."""

    def __init__(self, name: str, command: str, size: tuple[int, int] = (80, 24)) -> None:
        self.tmux = ["tmux", "-L", name, "-f", "/dev/null"]
        subprocess.run([*self.tmux, "new-session", "-d", "-s", name, "-x", str(size[0]), "-y", str(size[1]),
                        f"exec {command}"], check=True)  # fmt: skip
        self.name = name

    def screen(self) -> str:
        capture = [*self.tmux, "capture-pane", "-p", "-t", self.name]
        return subprocess.run(capture, capture_output=True, text=True).stdout

    def send(self, key: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, key], check=True)

    def stream_to(self, path: Path) -> None:
        """Append everything the pane's program writes to `path`, from now on."""
        subprocess.run([*self.tmux, "pipe-pane", "-t", self.name, "-o", f"cat >> {path}"], check=True)

    def pane_pid(self) -> int:
        out = subprocess.run([*self.tmux, "display", "-p", "-t", self.name, "#{pane_pid}"], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        return int(out.strip())

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], check=False, capture_output=True)


def wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def start_run(run_dir: Path, *args: str) -> subprocess.Popen[bytes]:
    """A headless cockpit run in the background."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    out = (run_dir.parent / f"{run_dir.name}.out").open("wb")
    return subprocess.Popen([sys.executable, "-m", "cockpit", "run", "--headless", "--preset", "cartpole",
                             "--timesteps", "50000000", "--run-dir", str(run_dir), *args],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip


def attach(name: str, run_dir: Path) -> Terminal:
    """`cockpit attach` in a fresh terminal, once the run answers and its jobs run."""
    wait(lambda: RunDir(run_dir).socket.exists(), 60, "the run's control socket")
    term = Terminal(name, f"{sys.executable} -m cockpit attach {run_dir}")
    wait(lambda: term.screen().count(" running ") >= 4, 120, "4 running jobs on screen")
    return term


def stop(run: subprocess.Popen[bytes]) -> None:
    run.terminate()
    try:
        run.wait(timeout=60)
    except subprocess.TimeoutExpired:
        run.kill()


def measure_cpu(tmp: Path, seconds: float) -> tuple[float, float, str]:
    """Viewer CPU % and supervisor CPU % (of one core) over `seconds`, and a screenshot."""
    run = start_run(tmp / "cpu", "--jobs", "4")
    term = None
    try:
        term = attach(f"bench-tui-{os.getpid()}", tmp / "cpu")
        time.sleep(3)  # past start-up: imports, first layout
        viewer, supervisor = psutil.Process(term.pane_pid()), psutil.Process(run.pid)
        v0, s0, t0 = sum(viewer.cpu_times()[:2]), sum(supervisor.cpu_times()[:2]), time.monotonic()
        time.sleep(seconds / 2)
        shot = term.screen()
        time.sleep(seconds / 2)
        v1, s1, t1 = sum(viewer.cpu_times()[:2]), sum(supervisor.cpu_times()[:2]), time.monotonic()
        return 100 * (v1 - v0) / (t1 - t0), 100 * (s1 - s0) / (t1 - t0), shot
    finally:
        if term is not None:
            term.close()
        stop(run)


def key_latency(term: Terminal, stream: Path, key: str, marker: bytes) -> float:
    """Milliseconds from sending `key` until the viewer has written `marker` to the terminal."""
    offset = stream.stat().st_size
    start = time.perf_counter()
    term.send(key)
    deadline = start + 5.0
    seen = b""
    with stream.open("rb") as fh:
        fh.seek(offset)
        while time.perf_counter() < deadline:
            seen = seen[-len(marker) :] + fh.read()
            if marker in seen:
                return 1000 * (time.perf_counter() - start)
            time.sleep(0.001)
    raise RuntimeError(f"the viewer never wrote {marker!r} after {key!r}")


def measure_latency(tmp: Path, repeats: int) -> dict[str, list[float]]:
    """Key-to-screen times with 16 jobs in the table."""
    run = start_run(tmp / "keys", "--agents", "16", "--jobs", "4")
    term = None
    main, detail, help_page = b"job  status", b"over steps", b"GPU panel: utilization"
    keys = {
        "? (open help)": ("?", help_page),
        "? (close help)": ("?", main),
        "enter (job detail)": ("Enter", detail),
        "q (back)": ("q", main),
        "enter (job detail again)": ("Enter", detail),
        "escape (back, + ESCDELAY)": ("Escape", main),
    }
    times: dict[str, list[float]] = {name: [] for name in keys}
    try:
        term = attach(f"bench-keys-{os.getpid()}", tmp / "keys")
        wait(lambda: "4 running  12 queued" in term.screen(), 30, "16 jobs, 4 running")
        stream = tmp / "pane.raw"
        stream.touch()
        term.stream_to(stream)
        time.sleep(2)
        for _ in range(repeats):
            for name, (key, marker) in keys.items():
                times[name].append(key_latency(term, stream, key, marker))
                time.sleep(0.3)
        return times
    finally:
        if term is not None:
            term.close()
        stop(run)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0, help="CPU measurement window (default 30)")
    parser.add_argument("--repeats", type=int, default=20, help="key presses of each kind (default 20)")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("tui_cost: error: tmux is needed (apt-get install tmux)", file=sys.stderr)
        return 2
    load = warn_if_busy()
    with tempfile.TemporaryDirectory(prefix="bench-tui-") as tmp:
        log(f"CPU: 4 cartpole jobs, viewer attached, {args.seconds:.0f} s window")
        viewer, supervisor, shot = measure_cpu(Path(tmp), args.seconds)
        log(f"latency: 16 agents (4 running), {args.repeats} presses of each key")
        times = measure_latency(Path(tmp), args.repeats)
    print("Main screen during the CPU run (tmux capture-pane, 80x24):")
    print(shot)
    print_table(
        "TUI CPU at 5 Hz, 4 running jobs (% of one core)",
        ["process", "CPU %", "/ goal 5 %"],
        [["viewer (cockpit attach)", f"{viewer:.2f}", fmt_ratio(viewer / CPU_GOAL_PERCENT)],
         ["supervisor (cockpit run --headless)", f"{supervisor:.2f}", "-"]],
        caption=load_caption(load),
    )  # fmt: skip
    rows = []
    for key, values in times.items():
        p95 = sorted(values)[max(0, round(0.95 * len(values)) - 1)]
        med = statistics.median(values)
        rows.append([key, f"{med:.1f}", f"{p95:.1f}", f"{max(values):.1f}", fmt_ratio(p95 / LATENCY_GOAL_MS)])
    print_table("Key press to screen change, 16 jobs (ms)", ["key", "median", "p95", "max", "p95 / goal 100 ms"],
                rows, caption=load_caption(load))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
