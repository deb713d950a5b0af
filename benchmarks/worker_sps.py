"""Worker SPS against a bare stable-baselines3 PPO script with identical settings.

What it measures: the steps per second of a real `python -m cockpit_training.worker` run as a fraction
of the SPS of the same PPO training done bare (no callback, no events, no checkpoints). The
ratio worker/bare is what the cockpit's machinery costs; the goal is >= 0.97.

How: every measurement is a fresh process, and the two sides alternate (worker first on even
repeats, bare first on odd ones).
- Worker side: the real worker as a subprocess; SPS = finished.steps / (finished.t - started.t)
  from its events.jsonl. `started` comes after the env and model are built; `finished` after the
  final checkpoint, so the periodic and final checkpoints count against the worker.
- Bare side: a child process resolves the same arguments with the worker's own `WorkerArgs.parse`
  and `resolve_config`, calls `limit_native_threads` first as the worker does, builds the env
  with the worker's `make_vec_env` (EnvpoolVecEnv) and the model with `cockpit_training.model.new_model`
  (what the worker's `train` calls for a fresh job), and times `model.learn(T)` alone.
Both sides get the same preset, timesteps, seed, envpool threads, torch threads and device.
Timesteps are rounded up to whole rollouts (n_envs × n_steps), so both sides collect and train
on exactly the same number of rollouts. The table shows the median SPS of each side, the
min–max over repeats, and the ratio of the medians; as a diagnosis, also the share of the
worker's run spent writing checkpoints (each `checkpoint` event's distance from the `progress`
event emitted just before the save) and the ratio with that time taken out. The caption records
the load average: other processes running meanwhile distort every figure.

Run from the repo root (defaults take about 3.5 minutes on 2 cores; --fast adds about 2.5):
    .venv/bin/python -m benchmarks.worker_sps
    .venv/bin/python -m benchmarks.worker_sps --fast
    .venv/bin/python -m benchmarks.worker_sps --repeats 5 --timesteps 200000 --threads 2
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Summary,
    Throughput,
    add_common_args,
    checkpoint_seconds,
    fmt_ratio,
    fmt_sps,
    load_caption,
    log,
    print_table,
    run_isolated,
    run_worker,
    warn_if_busy,
    whole_rollouts,
    worker_argv,
    worker_throughput,
)

GOAL = 0.97


def bare_ppo(argv: list[str]) -> dict[str, Any]:
    """Child process: set up exactly as the worker does for `argv`, then time a bare `model.learn(T)`.

    Returns the steps trained and the seconds `learn` took.
    """
    from cockpit.contract.workerargs import WorkerArgs
    from cockpit_training import worker
    from cockpit_training.device import limit_native_threads

    limit_native_threads()  # before numpy and torch load, as in the worker's main()
    config = worker.resolve_config(WorkerArgs.parse(argv))

    from stable_baselines3.common.vec_env import VecNormalize

    from cockpit_training.device import apply_torch_threads, enable_tf32
    from cockpit_training.envs import make_vec_env
    from cockpit_training.model import new_model

    apply_torch_threads(config.torch_threads)
    if config.device == "cuda":
        enable_tf32()
    preset = config.preset
    venv = make_vec_env(config.env, preset.n_envs, seed=config.seed, threads=config.threads)
    vecnorm = VecNormalize(venv, gamma=preset.gamma) if preset.normalize else None
    model = new_model(preset, vecnorm or venv, seed=config.seed, device=config.device)
    t0 = time.perf_counter()
    model.learn(config.timesteps)
    seconds = time.perf_counter() - t0
    venv.close()
    return {"steps": model.num_timesteps, "seconds": seconds}


@dataclass(frozen=True)
class Result:
    """The repeated measurements of one preset."""

    preset: str
    env: str
    timesteps: int
    worker: Summary
    bare: Summary
    checkpoints: int
    checkpoint_share: Summary
    worker_without_checkpoints: Summary

    @property
    def ratio(self) -> float:
        """Median worker SPS over median bare SPS."""
        return self.worker.median / self.bare.median

    @property
    def ratio_without_checkpoints(self) -> float:
        """Median worker SPS with checkpoint time taken out, over median bare SPS."""
        return self.worker_without_checkpoints.median / self.bare.median


def measure(preset: str, timesteps: int, args: argparse.Namespace) -> Result:
    """Run worker and bare training `args.repeats` times each, alternating, for one preset."""
    from cockpit.contract.presets import load

    total = whole_rollouts(preset, timesteps)
    worker_sps: list[float] = []
    bare_sps: list[float] = []
    checkpoint_share: list[float] = []
    without_checkpoints: list[float] = []
    checkpoints = 0
    settings = {"seed": args.seed, "threads": args.threads, "torch_threads": args.torch_threads, "device": args.device}
    for i in range(args.repeats):
        for side in ("worker", "bare") if i % 2 == 0 else ("bare", "worker"):
            if side == "worker":
                events = run_worker(preset, total, job_root=args.job_root, **settings)
                run = worker_throughput(events)
                sps = run.sps
                worker_sps.append(sps)
                checkpoints = sum(1 for e in events if e.kind == "checkpoint")
                ckpt = checkpoint_seconds(events)
                checkpoint_share.append(ckpt / run.seconds)
                without_checkpoints.append(Throughput(run.steps, run.seconds - ckpt).sps)
            else:
                argv = worker_argv(preset, total, "unused-bare-job-dir", **settings)
                result = run_isolated("benchmarks.worker_sps:bare_ppo", {"argv": argv})
                sps = result["steps"] / result["seconds"]
                bare_sps.append(sps)
            log(f"{preset} repeat {i + 1}/{args.repeats}: {side:<6} {fmt_sps(sps)} SPS")
    return Result(
        preset,
        load(preset).env,
        total,
        Summary(tuple(worker_sps)),
        Summary(tuple(bare_sps)),
        checkpoints,
        Summary(tuple(checkpoint_share)),
        Summary(tuple(without_checkpoints)),
    )


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.worker_sps",
        description="Worker SPS against a bare SB3 PPO script with identical settings (goal: ratio >= 0.97).",
    )
    add_common_args(parser, repeats=5)
    parser.add_argument(
        "--timesteps", type=int, default=100_000, metavar="T", help="cartpole steps per run (default: 100000)"
    )
    parser.add_argument("--fast", action="store_true", help="also measure the fast preset (LunarLander-v3)")
    parser.add_argument(
        "--fast-timesteps", type=int, default=16_384, metavar="T", help="fast-preset steps per run (default: 16384)"
    )
    parser.add_argument(
        "--torch-threads", type=int, default=1, metavar="N", help="torch threads on both sides (default: 1)"
    )
    parser.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto", help="torch device (default: auto)"
    )
    parser.add_argument(
        "--job-root",
        type=Path,
        metavar="DIR",
        help="where the worker's job dirs (and checkpoints) go, deleted after each run (default: the temp dir)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    args = build_parser().parse_args(argv)
    load_before = warn_if_busy()
    runs = [("cartpole", args.timesteps)] + ([("fast", args.fast_timesteps)] if args.fast else [])
    results = [measure(preset, timesteps, args) for preset, timesteps in runs]
    rows = [
        [
            r.preset,
            r.env,
            f"{r.timesteps:,}",
            str(r.checkpoints),
            r.worker.cell,
            r.bare.cell,
            fmt_ratio(r.ratio),
            "ok" if r.ratio >= GOAL else "BELOW",
            f"{r.checkpoint_share.median:.1%}",
            fmt_ratio(r.ratio_without_checkpoints),
        ]
        for r in results
    ]
    threads = "worker default" if args.threads is None else str(args.threads)
    print_table(
        f"Worker SPS vs bare SB3 PPO (median of {args.repeats}, seed {args.seed}, envpool threads {threads}, "
        f"torch threads {args.torch_threads})",
        [
            "preset",
            "env",
            "steps",
            "ckpts",
            "worker SPS (min–max)",
            "bare SPS (min–max)",
            "worker/bare",
            f"≥ {GOAL}",
            "ckpt time",
            "w/o ckpts",
        ],
        rows,
        text_columns=2,
        caption="ckpt time: share of the worker's run spent writing checkpoints (from its events); "
        "w/o ckpts: worker/bare with that time taken out. " + load_caption(load_before),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
