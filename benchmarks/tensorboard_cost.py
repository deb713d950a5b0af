"""What TensorBoard logging costs a worker: one CartPole worker's SPS with and without it.

What it measures: the real `python -m cockpit_training.worker` on the cartpole preset, run to the
same steps with the same seed, two ways:
- with TensorBoard: as `cockpit run` starts it by default, SB3 logging its scalars (every
  rollout: `rollout/`, `train/`, `time/`) to `<job dir>/tb/PPO_0` through TensorBoard's writer;
- without: the same worker with `--no-tensorboard` (SB3's in-memory logger only).
SPS = finished.steps / (finished.t - started.t) from the worker's own events, so start-up and
imports count on neither side, and every write of the event file inside `learn()` counts. The
sides take turns going first (`side_by_side`), each in a fresh job dir; the ratio is the median
SPS with over the median without (goal >= 0.98). A "with" run that left no event file is an error,
not a figure. The cockpit's own scalars are written by the cockpit process, every 5 s, not by
the worker; they are not measured here.

Run from the repo root (the defaults take about 2 minutes on 2 cores):
    .venv/bin/python -m benchmarks.tensorboard_cost
    .venv/bin/python -m benchmarks.tensorboard_cost --repeats 5 --timesteps 200000 --threads 1
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from benchmarks.common import (
    OUTPUT_TAIL_CHARS,
    REPO_ROOT,
    BenchmarkError,
    Summary,
    add_common_args,
    fmt_ratio,
    load_caption,
    print_table,
    side_by_side,
    warn_if_busy,
    whole_rollouts,
    worker_throughput,
)

GOAL = 0.98
PRESET = "cartpole"


def worker_sps(
    job_dir: Path, *, tensorboard: bool, timesteps: int, seed: int, threads: int | None, device: str
) -> float:
    """One real worker run to `timesteps` in `job_dir`; its SPS from its own events."""
    from cockpit.contract.events import FinishedEvent, of_kind, read_events
    from cockpit.contract.rundir import JobDir
    from cockpit.contract.workerargs import WorkerArgs

    job = JobDir(job_dir / "job")
    args = WorkerArgs(job.path, preset=PRESET, timesteps=timesteps, seed=seed, threads=threads,
                      device=device, tensorboard=tensorboard)  # type: ignore[arg-type]  # fmt: skip
    proc = subprocess.run(args.command(sys.executable), cwd=REPO_ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False)  # fmt: skip
    events = read_events(job.events)
    finished = of_kind(events, FinishedEvent)
    if proc.returncode != 0 or not finished or finished[-1].status != "done":
        raise BenchmarkError(f"the worker did not finish its run:\n{proc.stdout[-OUTPUT_TAIL_CHARS:]}")
    logged = list(job.tensorboard_run.glob("events.out.tfevents.*"))
    if tensorboard and not any(f.stat().st_size > 0 for f in logged):
        raise BenchmarkError(f"no TensorBoard event file in {job.tensorboard_run}: is tensorboard installed?")
    if not tensorboard and job.tensorboard.exists():
        raise BenchmarkError(f"--no-tensorboard, yet {job.tensorboard} was written")
    return worker_throughput(events).sps


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tensorboard_cost",
        description="One CartPole worker's SPS with and without TensorBoard logging (goal: ratio >= 0.98).",
    )
    add_common_args(parser, repeats=5)
    parser.add_argument("--timesteps", type=int, default=100_000, metavar="T", help="steps per run (default: 100000)")
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="torch device (default: auto)"
    )
    args = parser.parse_args(argv)
    load_before = warn_if_busy()
    total = whole_rollouts(PRESET, args.timesteps)
    settings = {"timesteps": total, "seed": args.seed, "threads": args.threads, "device": args.device}
    measured = side_by_side(args.repeats, {
        "tensorboard": lambda tmp: worker_sps(tmp, tensorboard=True, **settings),
        "no tensorboard": lambda tmp: worker_sps(tmp, tensorboard=False, **settings),
    }, "bench-tensorboard-")  # fmt: skip
    with_tb, without = Summary(tuple(measured["tensorboard"])), Summary(tuple(measured["no tensorboard"]))
    ratio = with_tb.median / without.median
    threads = "worker default" if args.threads is None else str(args.threads)
    print_table(
        f"Worker SPS with and without TensorBoard logging (median of {args.repeats}, seed {args.seed}, "
        f"envpool threads {threads}, device {args.device})",
        ["preset", "steps", "tensorboard SPS (min–max)", "no tensorboard SPS (min–max)", "ratio", f"≥ {GOAL}"],
        [[PRESET, f"{total:,}", with_tb.cell, without.cell, fmt_ratio(ratio), "ok" if ratio >= GOAL else "BELOW"]],
        caption=load_caption(load_before),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
