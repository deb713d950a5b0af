"""A CPU job's train phase on 1 torch thread against its whole core budget, in turns:
`python -m benchmarks.train_threads`.

What it settles: a job that trains on the CPU gives its train phase the same `cores // jobs`
threads its envpool threads step on in its rollout (`cockpit_training.device.torch_threads_for`),
where it used to get one torch thread whatever its budget. Each turn runs the real worker for
`--iterations` PPO iterations on the CPU twice, once with `--torch-threads 1` and once with the
default, both with `--threads K` (the order swaps every turn, so the machine's drift falls on both
alike), and times each train phase from the worker's own phase events. It prints every phase, each
count's mean train phase, their ratio, and the speedup the probe's method measures on the same
preset (`cockpit_training.probe._train_speedup`, one epoch of its own shape: what the overlap
model's `Costs.train_factor` is fitted to).

Run from the repo root (Pong with `fast`: about 3 minutes a turn and count on 2 cores):
    .venv/bin/python -m benchmarks.train_threads --preset fast --env Pong-v5 --turns 1
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import REPO_ROOT, BenchmarkError, fmt_ratio, log, print_table, run_isolated, warn_if_busy
from cockpit.contract.events import EVENTS_FILE, Event, FinishedEvent, PhaseEvent, StartedEvent, of_kind, read_events
from cockpit.contract.presets import load
from cockpit.contract.workerargs import WorkerArgs


def train_phases(events: list[Event]) -> tuple[int, list[float]]:
    """The torch threads the worker reported, and each train phase's seconds: from its `train`
    phase event to the next phase event, or to the `finished` event after the last one."""
    (started,) = of_kind(events, StartedEvent)
    marks = [(e.t, e.phase) for e in of_kind(events, PhaseEvent)] + [
        (e.t, None) for e in of_kind(events, FinishedEvent)
    ]
    marks.sort(key=lambda mark: mark[0])
    phases = [after[0] - t for (t, phase), after in itertools.pairwise(marks) if phase == "train"]
    return int(started.torch_threads or 0), phases


def run_job(preset: str, env: str, iterations: int, threads: int, torch_threads: int | None, root: Path) -> list[Event]:
    """The real worker for `iterations` iterations on the CPU; its events."""
    steps = iterations * load(preset).total_batch
    job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=root))
    args = WorkerArgs(job_dir, preset=preset, env=env, timesteps=steps, seed=0, device="cpu", threads=threads,
                      torch_threads=torch_threads, tensorboard=False)  # fmt: skip
    done = subprocess.run(args.command(sys.executable), cwd=REPO_ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchmarkError(f"the worker exited {done.returncode}: {done.stderr[-2000:]}")
    return read_events(job_dir / EVENTS_FILE)


def probe_speedup(preset: str, env: str, threads: int) -> float:
    """The probe's own measurement of the same speedup, in a fresh process (as the probe runs)."""
    import dataclasses

    from cockpit_training.device import limit_native_threads

    limit_native_threads()
    from cockpit_training.probe import _train_speedup

    speedup: float = _train_speedup(dataclasses.replace(load(preset), env=env), "cpu", threads)
    return speedup


def main(argv: list[str] | None = None) -> int:
    """Measure, then print the table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.train_threads", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="fast", help="a preset name or file (default: fast)")
    parser.add_argument("--env", default="Pong-v5", help="the env (default: Pong-v5)")
    parser.add_argument("--threads", type=int, default=2, metavar="K", help="the job's core budget (default: 2)")
    parser.add_argument("--turns", type=int, default=1, metavar="T", help="runs of each count (default: 1)")
    parser.add_argument("--iterations", type=int, default=1, metavar="I", help="PPO iterations a run (default: 1)")
    parser.add_argument("--no-probe", action="store_true", help="skip the probe's own measurement")
    args = parser.parse_args(argv)
    warn_if_busy()
    counts: tuple[int | None, ...] = (1, None)  # --torch-threads 1, then the default: the budget
    phases: dict[int | None, list[float]] = {count: [] for count in counts}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-train-threads-") as tmp:
        for turn in range(args.turns):
            for count in counts if turn % 2 == 0 else counts[::-1]:
                label = "1 (--torch-threads 1)" if count == 1 else f"default (budget {args.threads})"
                log(f"turn {turn + 1}: {args.preset} on {args.env}, torch threads {label}")
                reported, got = train_phases(run_job(args.preset, args.env, args.iterations, args.threads, count,
                                                     Path(tmp)))  # fmt: skip
                phases[count] += got
                rows += [[str(turn + 1), label, str(reported), f"{s:.1f}"] for s in got]
    print_table(f"{args.preset} on {args.env}: train phases of one CPU job, --threads {args.threads}",
                ["turn", "torch threads asked", "torch threads reported", "train phase s"], rows)  # fmt: skip
    one, budget = statistics.fmean(phases[1]), statistics.fmean(phases[None])
    line = (f"mean train phase: 1 thread {one:.1f} s, {args.threads} threads {budget:.1f} s: "
            f"measured speedup {fmt_ratio(one / budget)}")  # fmt: skip
    if not args.no_probe:
        log("the probe's measurement of the same speedup")
        speedup = run_isolated("benchmarks.train_threads:probe_speedup",
                               {"preset": args.preset, "env": args.env, "threads": args.threads})  # fmt: skip
        line += f"; the probe's (one epoch, turns): {fmt_ratio(float(speedup))}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
