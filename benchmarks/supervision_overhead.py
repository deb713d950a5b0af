"""Supervision overhead: 2 jobs under `cockpit run --headless` against the same 2 workers bare.

What it measures: the aggregate steps per second of two training jobs run by the cockpit
(supervisor, 5 Hz sampler, run log, headless display) as a fraction of the same two workers
started directly, side by side, with the same arguments. The goal is >= 0.98.

How: each repeat runs both sides one after the other (alternating which goes first), in fresh
processes. Aggregate SPS = the two jobs' steps together / (last `finished` - first `started`),
from the jobs' own events, so process start-up and imports count on neither side. The bare
workers get the envpool thread budget the cockpit would give them (physical cores // 2).

Run from the repo root (defaults take about 3 minutes on 2 cores):
    .venv/bin/python -m benchmarks.supervision_overhead
    .venv/bin/python -m benchmarks.supervision_overhead --repeats 5 --timesteps 200000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import psutil

from benchmarks.common import Summary, fmt_ratio, load_caption, print_table, side_by_side, warn_if_busy
from cockpit.contract.events import EVENTS_FILE, FinishedEvent, StartedEvent, of_kind, read_events
from cockpit.contract.rundir import RunDir
from cockpit.contract.workerargs import WorkerArgs

JOBS = 2


def aggregate_sps(job_dirs: list[Path]) -> float:
    """Both jobs' steps over the span from the first `started` to the last `finished`."""
    starts, ends, steps = [], [], 0
    for job_dir in job_dirs:
        events = read_events(job_dir / EVENTS_FILE)
        starts.append(of_kind(events, StartedEvent)[0].t)
        finished = of_kind(events, FinishedEvent)[-1]
        ends.append(finished.t)
        steps += finished.steps
    return steps / (max(ends) - min(starts))


def cockpit_side(preset: str, timesteps: int, seed: int, root: Path) -> float:
    """Aggregate SPS of `cockpit run --headless --jobs 2`."""
    run_dir = root / "cockpit-run"
    cmd = [sys.executable, "-m", "cockpit", "run", "--headless", "--jobs", str(JOBS), "--preset", preset,
           "--timesteps", str(timesteps), "--seed", str(seed), "--run-dir", str(run_dir)]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return aggregate_sps([RunDir(run_dir).job(f"{i:03d}").path for i in range(JOBS)])


def bare_side(preset: str, timesteps: int, seed: int, root: Path, threads: int) -> float:
    """Aggregate SPS of the same two workers started directly, side by side."""
    job_dirs = [root / f"bare-{i}" for i in range(JOBS)]
    procs = [
        subprocess.Popen(
            WorkerArgs(job_dir, preset=preset, timesteps=timesteps, seed=seed + i, threads=threads).command(
                sys.executable
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i, job_dir in enumerate(job_dirs)
    ]
    if any(p.wait() != 0 for p in procs):
        raise RuntimeError("a bare worker failed")
    return aggregate_sps(job_dirs)


def main() -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="cartpole")
    parser.add_argument("--timesteps", type=int, default=100_000, help="steps per job (default: 100000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    before = warn_if_busy()
    threads = max(1, (psutil.cpu_count(logical=False) or 1) // JOBS)
    measured = side_by_side(args.repeats, {
        "cockpit": lambda tmp: cockpit_side(args.preset, args.timesteps, args.seed, tmp),
        "bare": lambda tmp: bare_side(args.preset, args.timesteps, args.seed, tmp, threads),
    }, "bench-supervision-")  # fmt: skip
    cockpit, bare = measured["cockpit"], measured["bare"]
    c, b = Summary(tuple(cockpit)), Summary(tuple(bare))
    ratio = c.median / b.median
    print_table(
        f"Supervision overhead: {JOBS} jobs under cockpit run --headless vs bare (median of {args.repeats})",
        ["preset", "steps/job", "cockpit SPS (min–max)", "bare SPS (min–max)", "cockpit/bare", ">= 0.98"],
        [[args.preset, f"{args.timesteps:,}", c.cell, b.cell, fmt_ratio(ratio), "ok" if ratio >= 0.98 else "BELOW"]],
        caption=load_caption(before),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
