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

With `--fleet N` it measures a fleet instead (goal: p95 at most 150 ms): a real `cockpit fleet`
of N CartPole agents (tiers of 40960 and 81920 steps, 4 slots: an agent runs about a minute on 2
busy cores), attached the same way once 4 agents have scores. Its state carries the N-agent
FleetView, and its jobs list the running and latest ended agents (the supervisor's view_limit).
Timed as above: `f` opens the fleet screen (the run's first open, which composes it, on a row of
its own) and `f` closes it, `escape` closes it too (+ ESCDELAY), `down` and `up` move the jobs
table's cursor, and `?` opens and closes help, for comparison. A move writes no new text, only
two rows again in other colours, so it is seen as a row of the same agent rewritten in another
style (new data keeps a row's style, a reorder puts another agent there); `home` (untimed) first
puts the cursor on the first row, so neither move scrolls. A move that never shows (an agent
that ended took the cursor elsewhere) is counted, not timed. Screenshots of both screens follow.

With `--scripted` (and `--fleet N`) no worker trains: a child process serves a made-up fleet of N
agents on a real control socket, the state changing at 5 Hz as a real fleet's does (4 running
agents, one ending and the next starting every 5 s, their phases, steps and CPU, a sample per
tick, the tier funnel and leaderboard), and the same `cockpit attach` is timed on it. It starts in
seconds and loads the machine with no training of its own; `--busy K` adds K busy loops at the
workers' nice level to stand in for it. Whatever else runs here still shows in the figures: to
compare two versions of the TUI on a shared machine, alternate their runs and note the load.

Run from the repo root (about 2 minutes on 2 cores; --fleet 500 about 3):
    .venv/bin/python -m benchmarks.tui_cost
    .venv/bin/python -m benchmarks.tui_cost --seconds 60 --repeats 30
    .venv/bin/python -m benchmarks.tui_cost --fleet 500
    .venv/bin/python -m benchmarks.tui_cost --fleet 500 --scripted --busy 2
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

from benchmarks.common import fmt_ratio, load_caption, log, print_table, warn_if_busy
from cockpit.contract.controls import Control
from cockpit.contract.rundir import RunDir
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.feed.control import ControlServer
from cockpit.core.feed.snapshot import FleetView, JobView, LeaderView, RunState, TierView, stepping_sps
from cockpit.core.feed.source import WINDOW_S, Transition
from cockpit.core.launch.local import WORKER_NICE
from cockpit.core.telemetry.phases import phases_since
from cockpit.core.telemetry.sampler import JobUsage, Sample
from cockpit.core.telemetry.trend import TREND_SPAN_S, TrendRecorder, best_return

CPU_GOAL_PERCENT = 5.0
LATENCY_GOAL_MS = 100.0
FLEET_LATENCY_GOAL_MS = 150.0

FLEET_PRESET = """
env = "CartPole-v1"
n_envs = 8
n_steps = 32
batch_size = 256
n_epochs = 4
checkpoint_every = 8192
timesteps = 81920
"""
FLEET_PLAN = """
name = "bench"
jobs = 4
promotion = "sync"
rate_usd_per_h = 1.99
[agents]
env = "CartPole-v1"
preset = "{preset}"
seeds = {agents}
[[tiers]]
timesteps = 40960
promote = 0.25
[[tiers]]
timesteps = 81920
[score]
episodes = 5
"""


def _old_trend_point(seconds_ago: float) -> tuple[float | None, float | None]:
    """The pre-filled trend's SPS and best return `seconds_ago` before the start."""
    return 8000.0 - 4 * seconds_ago, 20.0 - seconds_ago / 30


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


def key_latency(term: Terminal, stream: Path, key: str, marker: bytes, *, timeout: float = 5.0) -> float:
    """Milliseconds from sending `key` until the viewer has written `marker` to the terminal."""
    offset = stream.stat().st_size
    start = time.perf_counter()
    term.send(key)
    deadline = start + timeout
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


def start_fleet(tmp: Path, agents: int) -> tuple[subprocess.Popen[bytes], Path]:
    """A headless `cockpit fleet` of `agents` CartPole agents in the background."""
    preset, plan, run_dir = tmp / "quick.toml", tmp / "plan.toml", tmp / "fleet"
    preset.write_text(FLEET_PRESET)
    plan.write_text(FLEET_PLAN.format(preset=preset, agents=agents))
    out = (tmp / "fleet.out").open("wb")
    run = subprocess.Popen([sys.executable, "-m", "cockpit", "fleet", str(plan), "--headless", "--run-dir",
                            str(run_dir)], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    return run, run_dir


# ----- a scripted fleet (--scripted): a real control socket, a made-up state -----

SCRIPTED_SLOTS = 4
SCRIPTED_AGENT_S = 20.0  # each agent runs this long; with 4 slots one ends every 5 s
SCRIPTED_HZ = 5.0
SCRIPTED_TIERS = (40960, 81920)


class ScriptedFleet:
    """A `ControlProvider` for a fleet of `agents` that no worker trains: agent k starts at
    k * AGENT_S / SLOTS seconds and runs AGENT_S, cycling rollout (1.5 s) and train (0.5 s);
    the state holds the running agents and the 2 * SLOTS latest ended ones, as a fleet's does."""

    def __init__(self, run_dir: Path, agents: int) -> None:
        self.run_dir = run_dir
        self.agents = agents
        self.t0 = time.time()
        self._lock = threading.Lock()
        self._samples: deque[Sample] = deque()
        self._state: RunState | None = None
        # A trend already 10 minutes long, so every frame carries (and the cockpit draws) a full one.
        self._trend = TrendRecorder()
        for second in range(int(TREND_SPAN_S), 0, -1):
            self._trend.observe(-float(second), self.t0 - second, functools.partial(_old_trend_point, float(second)))
        self.tick()

    def _start(self, k: int) -> float:
        return self.t0 + k * SCRIPTED_AGENT_S / SCRIPTED_SLOTS

    @staticmethod
    def _id(k: int) -> str:
        return f"a{k:04d}"

    @staticmethod
    def _score(k: int) -> float:
        return float((k * 7919) % 500)

    def _job(self, k: int, now: float) -> JobView:
        start, target = self._start(k), SCRIPTED_TIERS[0]
        end = start + SCRIPTED_AGENT_S
        running = now < end
        fraction = min(1.0, (now - start) / SCRIPTED_AGENT_S)
        sps = 2000.0 + 50 * math.sin(now + k) if running else None
        cpu = 48.0 + 4 * math.sin(now * 3 + k) if running else None
        rss = 400 * 1024**2 if running else None
        return JobView(
            id=self._id(k), seed=k, state=JobState.RUNNING if running else JobState.DONE,
            phase=self._phase(k, now) if running else None, phase_since=start, steps=int(fraction * target),
            target=target, sps=sps, mean_sps=2000.0, ep_rew_mean=20.0 + 100 * fraction, restarts=0,
            checkpoints=int(fraction * 5), last_checkpoint_step=None, error=None, exit_reason=None,
            pid=10_000 + k if running else None, device="cpu", cpu_percent=cpu, rss_bytes=rss,
            gpu_mem_bytes=None, peak_gpu_mem_bytes=None, started_at=start, ended_at=None if running else end,
            eta_s=(1 - fraction) * SCRIPTED_AGENT_S if running else 0.0, rollout_sps=6000.0 if running else None,
            env="CartPole-v1", preset="quick.toml",
        )  # fmt: skip

    def _phase(self, k: int, t: float) -> str:
        return "train" if (t - self._start(k)) % 2.0 >= 1.5 else "rollout"

    def _transitions(self, k: int) -> list[Transition]:
        start = self._start(k)
        out: list[Transition] = []
        t = start
        while t < start + SCRIPTED_AGENT_S:
            out += [(t, "rollout"), (t + 1.5, "train")]
            t += 2.0
        return [*out, (start + SCRIPTED_AGENT_S, None)]

    def _fleet(self, now: float, started: int, ended: int) -> FleetView:
        n = self.agents
        promoted = ended // 4
        tiers = (
            TierView(0, SCRIPTED_TIERS[0], n, started, started - ended, ended, 0, 0, 0, (n - ended) * 5.0),
            TierView(1, SCRIPTED_TIERS[1], n // 4, 0, 0, 0, 0, 0, 0, (n - ended) * 5.0 + n // 4 * 10.0),
        )  # fmt: skip
        best = sorted(range(ended), key=self._score, reverse=True)[:10]
        leaders = tuple(LeaderView(self._id(k), "CartPole-v1", "quick.toml", "", k, 0, SCRIPTED_TIERS[0],
                                   self._score(k)) for k in best)  # fmt: skip
        notices = tuple(f"{self._id(k)} finished tier 0: score {self._score(k):.1f}" for k in range(ended))[-8:]
        spent = (now - self.t0) / 3600 * 1.99
        return FleetView("bench", "sync", n, tiers, leaders, tiers[-1].eta_s, 1.99, spent,
                         spent + (tiers[-1].eta_s or 0) / 3600 * 1.99, notices, ended + promoted)  # fmt: skip

    def tick(self) -> None:
        """The state at the wall clock's now, and a telemetry sample."""
        now = time.time()
        started = min(self.agents, int((now - self.t0) / (SCRIPTED_AGENT_S / SCRIPTED_SLOTS)) + 1)
        ended = max(0, started - SCRIPTED_SLOTS)
        shown = range(max(0, ended - 2 * SCRIPTED_SLOTS), started)
        jobs = tuple(self._job(k, now) for k in shown)
        usage = {job.id: JobUsage(job.cpu_percent or 0.0, job.rss_bytes or 0, None) for job in jobs
                 if job.state.live}  # fmt: skip
        cores = tuple(min(100.0, 90.0 + 10 * math.sin(now * (c + 1))) for c in range(2))
        sample = Sample(now, cores, 6 * 1024**3, 16 * 1024**3, None, usage, 0.001)
        figures = lambda: (stepping_sps(jobs), best_return(job.ep_rew_mean for job in jobs))  # noqa: E731
        trend = self._trend.observe(now - self.t0, now, figures)
        state = RunState(
            run_dir=str(self.run_dir), preset="quick.toml", env="CartPole-v1", status=RunStatus.RUNNING,
            started_at=self.t0, now=now, slots=SCRIPTED_SLOTS, jobs=jobs, sample=sample, gpu=None,
            gpu_status="no NVIDIA driver (NVML library not found)", warnings=(), threads_per_job=1,
            physical_cores=2, eta_s=(self.agents - ended) * 5.0, fleet=self._fleet(now, started, ended),
            trend=trend,
        )  # fmt: skip
        with self._lock:
            self._state = state
            self._samples.append(sample)
            while self._samples and self._samples[0].t < now - 2 * WINDOW_S:
                self._samples.popleft()

    # ----- ControlProvider -----

    def latest_state(self) -> RunState | None:
        with self._lock:
            return self._state

    def samples_since(self, t: float) -> list[Sample]:
        with self._lock:
            return [s for s in self._samples if s.t > t]

    def phases_since(self, since: Mapping[str, float]) -> dict[str, list[Transition]]:
        now = time.time()
        out = {}
        for job_id, t in since.items():
            k = int(job_id[1:])
            out[job_id] = [tr for tr in phases_since(self._transitions(k), t) if tr[0] <= now]
        return out

    def submit(self, command: Control) -> None:
        pass


def serve_scripted_fleet(run_dir: Path, agents: int) -> int:
    """The child process of `--scripted`: serve a made-up fleet until SIGTERM."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fleet = ScriptedFleet(run_dir, agents)
    server = ControlServer(run_dir, fleet)
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    while not stop.wait(1 / SCRIPTED_HZ):
        fleet.tick()
    server.stop()
    return 0


def start_scripted_fleet(tmp: Path, agents: int) -> tuple[subprocess.Popen[bytes], Path]:
    """The `--scripted` fleet's server in a child process, as `start_fleet` starts a real one."""
    run_dir = tmp / "fleet"
    out = (tmp / "fleet.out").open("wb")
    run = subprocess.Popen([sys.executable, "-m", "benchmarks.tui_cost", "--serve-scripted", str(agents),
                            "--run-dir", str(run_dir)], stdout=out, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL)  # fmt: skip
    return run, run_dir


def start_busy(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` busy loops, as nice as a fleet's workers, standing in for their load."""
    loop = "while True: pass"
    return [subprocess.Popen(["nice", "-n", str(WORKER_NICE), sys.executable, "-c", loop]) for _ in range(count)]


def finished_in_tier0(screen: str) -> int:
    """Agents scored in the first tier, read off the cockpit's fleet line (-1 before it shows)."""
    found = re.search(r"tiers (\d+)/\d+", screen)
    return int(found.group(1)) if found else -1


# A line the viewer writes: the cursor put at its start (row y, column 1), then styles and text up
# to the next cursor positioning.
LINE = re.compile(rb"\x1b\[(\d+);1H(.*?)(?=\x1b\[\d+;\d+H|\Z)", re.S)
ESCAPE = re.compile(rb"\x1b\[[0-9;?$]*[A-Za-z]")
STYLE = re.compile(rb"\x1b\[[0-9;]*m")
AGENT_ROW = re.compile(rb" (a\d{4,}) ")  # a jobs table row of a fleet starts with its agent's id


def agent_rows(raw: bytes) -> dict[int, tuple[bytes, bytes]]:
    """The jobs table rows in what the viewer wrote, by screen row: the latest (style, agent) of each."""
    rows = {}
    for found in LINE.finditer(raw):
        body = found.group(2)
        agent = AGENT_ROW.match(ESCAPE.sub(b"", body))
        if agent:
            style = STYLE.match(body)
            rows[int(found.group(1))] = (style.group(0) if style else b"", agent.group(1))
    return rows


def move_latency(term: Terminal, stream: Path, key: str, since: int, timeout: float = 2.0) -> float:
    """Milliseconds from sending `key` until the viewer has moved the jobs table's cursor: it
    rewrote a row of the same agent in another style (the cursor's, or no longer the cursor's).
    New data rewrites a row in its style, a reorder puts another agent there: neither is the move.
    `since` is an offset in the stream after which every row was written (a full repaint)."""
    before = stream.read_bytes()
    rows, offset = agent_rows(before[since:]), len(before)
    start = time.perf_counter()
    term.send(key)
    deadline = start + timeout
    seen = b""
    with stream.open("rb") as fh:
        fh.seek(offset)
        while time.perf_counter() < deadline:
            new = fh.read()
            if new:
                seen += new
                for y, (style, agent) in agent_rows(seen).items():
                    if y in rows and rows[y][1] == agent and rows[y][0] != style:
                        return 1000 * (time.perf_counter() - start)
            time.sleep(0.001)
    raise RuntimeError(f"the viewer moved no cursor after {key!r}")


def measure_fleet_latency(tmp: Path, agents: int, repeats: int, *, scripted: bool = False,
                          ) -> tuple[dict[str, list[float]], int, list[str]]:  # fmt: skip
    """Key-to-screen times on a real fleet of `agents` (or a scripted one); the cursor moves not
    timed (a reorder took their row away); screenshots of the fleet and the main screen."""
    run, run_dir = start_scripted_fleet(tmp, agents) if scripted else start_fleet(tmp, agents)
    term = None
    fleet_page, main = b"planned entered", b"  lanes: "
    help_page = b"GPU panel: utilization"
    names = ("f (open fleet screen, first time)", "f (open fleet screen)", "f (close it)", "down (jobs table cursor)",
             "up (jobs table cursor)", "escape (close it, + ESCDELAY)", "? (open help, for comparison)",
             "? (close help, for comparison)")  # fmt: skip
    times: dict[str, list[float]] = {name: [] for name in names}
    misses = 0
    shots: list[str] = []
    try:
        term = attach(f"bench-fleet-{os.getpid()}", run_dir)
        wait(lambda: finished_in_tier0(term.screen()) >= 4, 300, "4 agents scored in tier 0")
        stream = tmp / "pane.raw"
        stream.touch()
        term.stream_to(stream)
        time.sleep(2)
        # The run's first open composes the screen; every later one shows it again.
        times[names[0]].append(key_latency(term, stream, "f", fleet_page))
        shots.append(term.screen())
        time.sleep(0.3)
        key_latency(term, stream, "f", main)
        shots.append(term.screen())
        time.sleep(0.3)
        for _ in range(repeats):
            term.send("Home")  # the cursor to the first row (untimed)
            time.sleep(0.3)
            offset = stream.stat().st_size
            times["f (open fleet screen)"].append(key_latency(term, stream, "f", fleet_page))
            time.sleep(0.3)
            times["f (close it)"].append(key_latency(term, stream, "f", main))
            time.sleep(0.3)
            # That close repainted the whole screen, so every row's look since `offset` is known.
            for key in ("Down", "Up"):
                try:
                    times[f"{key.lower()} (jobs table cursor)"].append(move_latency(term, stream, key, offset))
                except RuntimeError:
                    misses += 1
                time.sleep(0.3)
            times["f (open fleet screen)"].append(key_latency(term, stream, "f", fleet_page))
            time.sleep(0.3)
            times["escape (close it, + ESCDELAY)"].append(key_latency(term, stream, "Escape", main))
            time.sleep(0.3)
            times["? (open help, for comparison)"].append(key_latency(term, stream, "?", help_page))
            time.sleep(0.3)
            times["? (close help, for comparison)"].append(key_latency(term, stream, "?", main))
            time.sleep(0.3)
        return times, misses, shots
    finally:
        if term is not None:
            term.close()
        stop(run)


def latency_rows(times: dict[str, list[float]], goal_ms: float) -> list[list[str]]:
    """median, p95 and max of each key, and p95 against the goal."""
    rows = []
    for key, values in times.items():
        if not values:
            continue
        p95 = sorted(values)[max(0, round(0.95 * len(values)) - 1)]
        med = statistics.median(values)
        rows.append([key, str(len(values)), f"{med:.1f}", f"{p95:.1f}", f"{max(values):.1f}", fmt_ratio(p95 / goal_ms)])
    return rows


def fleet_main(agents: int, repeats: int, load: float, *, scripted: bool = False, busy: int = 0) -> int:
    """`--fleet N`: key-to-screen times on a real fleet of N agents (or a scripted one)."""
    loops = start_busy(busy)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-tui-fleet-") as tmp:
            what = "a scripted fleet" if scripted else "a fleet"
            log(f"latency: {what} of {agents} agents (4 slots), {busy} busy loop(s), {repeats} rounds of each key")
            times, misses, shots = measure_fleet_latency(Path(tmp), agents, repeats, scripted=scripted)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    for title, shot in zip(("Fleet screen", "Main screen"), shots, strict=False):
        print(f"{title} during the run (tmux capture-pane, 80x24):")
        print(shot)
    caption = load_caption(load)
    if busy:
        caption += f" {busy} busy loop(s) at nice {WORKER_NICE} meanwhile."
    if misses:
        caption += f" {misses} cursor move(s) not seen, not timed: an agent that ended took the cursor."
    print_table(
        f"Key press to screen change, a {'scripted ' if scripted else ''}fleet of {agents} agents (ms)",
        ["key", "n", "median", "p95", "max", f"p95 / goal {FLEET_LATENCY_GOAL_MS:.0f} ms"],
        latency_rows(times, FLEET_LATENCY_GOAL_MS), caption=caption,
    )  # fmt: skip
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0, help="CPU measurement window (default 30)")
    parser.add_argument("--repeats", type=int, default=20, help="key presses of each kind (default 20)")
    parser.add_argument("--fleet", type=int, metavar="N", help="key latency on a real fleet of N agents instead")
    parser.add_argument("--scripted", action="store_true", help="with --fleet: a scripted fleet, no workers")
    parser.add_argument("--busy", type=int, default=0, metavar="K", help="with --fleet: K niced busy loops meanwhile")
    parser.add_argument("--serve-scripted", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_scripted is not None:
        return serve_scripted_fleet(args.run_dir, args.serve_scripted)
    if shutil.which("tmux") is None:
        print("tui_cost: error: tmux is needed (apt-get install tmux)", file=sys.stderr)
        return 2
    if args.fleet is not None and args.fleet < 8:
        print("tui_cost: error: --fleet needs at least 8 agents", file=sys.stderr)
        return 2
    load = warn_if_busy()
    if args.fleet is not None:
        return fleet_main(args.fleet, args.repeats, load, scripted=args.scripted, busy=args.busy)
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
    rows = [[key, *rest] for key, _, *rest in latency_rows(times, LATENCY_GOAL_MS)]
    print_table("Key press to screen change, 16 jobs (ms)", ["key", "median", "p95", "max", "p95 / goal 100 ms"],
                rows, caption=load_caption(load))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
