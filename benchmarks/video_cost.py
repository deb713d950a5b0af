"""What recording clips costs training: a running job's SPS with and without `--video-every`.

What it measures: the real `cockpit run` on the cartpole preset, one job, run to the same steps with
the same seed, two ways:
- with `--video-every STEPS`: at each checkpoint past a multiple of STEPS the cockpit starts a
  player (`python -m cockpit_training.play`, at nice 19, its policy on the CPU) that loads the
  checkpoint, plays an episode and writes the clip (MP4) and its GIF into TensorBoard, while the job
  trains on;
- without: the same run with no clips.
SPS = finished.steps / (finished.t - started.t) from the job's own events, so the worker's start-up
counts on neither side and every player that ran while it trained counts against it. The sides take
turns going first (`side_by_side`), each in a fresh run directory; the ratio is the median SPS with
clips over the median without. A "with" run in which no clip was made while the job trained is an
error, not a figure: it would measure nothing. The table says how many clips each run made while
the job trained (by the clip's time against the job's `finished` event).

Run from the repo root (the defaults take about 2 minutes on 2 cores; the machine should be
otherwise idle, since the player's CPU is what is measured):
    .venv/bin/python -m benchmarks.video_cost
    .venv/bin/python -m benchmarks.video_cost --repeats 3 --timesteps 60000 --video-every 10000
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

PRESET = "cartpole"  # checkpoint_every = 10,000: a clip at each checkpoint with --video-every 10000
GOAL = 0.95


def job_sps(run_dir: Path, *, video_every: int | None, timesteps: int, seed: int, made: list[int]) -> float:
    """One real `cockpit run` of one job to `timesteps` in `run_dir`; the job's SPS from its events.
    With `video_every`, the clips made while it trained are appended to `made`."""
    from cockpit.contract.events import FinishedEvent, of_kind, read_events
    from cockpit.contract.rundir import RunDir

    run = run_dir / "run"
    cmd = [sys.executable, "-m", "cockpit", "run", "--preset", PRESET, "--agents", "1", "--jobs", "1",
           "--timesteps", str(timesteps), "--seed", str(seed), "--run-dir", str(run), "--headless"]  # fmt: skip
    if video_every is not None:
        cmd += ["--video-every", str(video_every)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)  # fmt: skip
    job = RunDir(run).job("000")
    events = read_events(job.events)
    finished = of_kind(events, FinishedEvent)
    if proc.returncode != 0 or not finished or finished[-1].status != "done":
        raise BenchmarkError(f"the run did not finish:\n{proc.stdout[-OUTPUT_TAIL_CHARS:]}")
    if video_every is not None:
        clips = list(job.videos.glob("*.mp4")) if job.videos.is_dir() else []
        during = sum(1 for clip in clips if clip.stat().st_mtime <= finished[-1].t)
        if during == 0:
            raise BenchmarkError(f"no clip was made while the job trained ({len(clips)} after):\n{proc.stdout[-2000:]}")
        made.append(during)
    elif job.videos.exists():
        raise BenchmarkError(f"no --video-every, yet {job.videos} was written")
    return worker_throughput(events).sps


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.video_cost",
        description="A running CartPole job's SPS with and without --video-every clips, side by side.",
    )
    add_common_args(parser, repeats=1, threads=False)
    parser.add_argument("--timesteps", type=int, default=40_000, metavar="T", help="steps per run (default: 40000)")
    parser.add_argument("--video-every", type=int, default=10_000, metavar="STEPS",
                        help="--video-every of the runs with clips (default: 10000, every checkpoint)")  # fmt: skip
    args = parser.parse_args(argv)
    load_before = warn_if_busy()
    total = whole_rollouts(PRESET, args.timesteps)
    made: list[int] = []
    measured = side_by_side(args.repeats, {
        "--video-every": lambda tmp: job_sps(tmp, video_every=args.video_every, timesteps=total, seed=args.seed,
                                             made=made),
        "no clips": lambda tmp: job_sps(tmp, video_every=None, timesteps=total, seed=args.seed, made=made),
    }, "bench-video-")  # fmt: skip
    with_clips, without = Summary(tuple(measured["--video-every"])), Summary(tuple(measured["no clips"]))
    ratio = with_clips.median / without.median
    print_table(
        f"A running job's SPS with and without --video-every {args.video_every:,} (median of {args.repeats}, "
        f"seed {args.seed}; clips made while it trained: {', '.join(map(str, made))})",
        ["preset", "steps", "--video-every SPS (min–max)", "no clips SPS (min–max)", "ratio", f"≥ {GOAL}"],
        [[PRESET, f"{total:,}", with_clips.cell, without.cell, fmt_ratio(ratio), "ok" if ratio >= GOAL else "BELOW"]],
        caption=load_caption(load_before),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
