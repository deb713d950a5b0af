"""Rollout-phase SPS of the worker against raw envpool stepping of the same env (the ceiling).

What it measures: how close the worker's rollout phases (policy forward pass, EnvpoolVecEnv
adapter, SB3 rollout buffer, CockpitCallback per step) come to envpool stepping the same env
with the same n_envs and threads and nothing else, for CartPole-v1 and Pong-v5. The ratio
rollout/raw is the share of the env's own speed that collection keeps.

How: every measurement is a fresh process; worker and raw runs alternate.
- Rollout side: the real `python -m cockpit_training.worker` (built-in cartpole preset; for Pong a
  temporary preset: Pong-v5, n_envs 8, n_steps 128, batch_size 256, n_epochs 1). Its
  events.jsonl gives rollout SPS = sum of steps collected / sum of durations over rollout phases,
  a rollout phase running from its `phase: rollout` event to the next `phase: train` event. The
  first --skip-rollouts rollouts (torch's warm-up) are left out.
- Raw side: `envpool.make(env_id, env_type="gymnasium", num_envs=n, batch_size=n,
  num_threads=same)` stepped with random valid actions; SPS = n × steps / time, after a few
  untimed warm-up steps. Pong gets the worker's Atari training kwargs (episodic_life=True,
  reward_clip=True), imported from cockpit_training.envpool_vec.
Both sides use the same envpool thread count (--threads, default min(n_envs, usable CPUs)) and
seed. With several --repeats the table shows medians and (min–max).

Run from the repo root (defaults take about 1.5 minutes on 2 cores):
    .venv/bin/python -m benchmarks.rollout_sps
    .venv/bin/python -m benchmarks.rollout_sps --repeats 3 --pong-timesteps 32768
    .venv/bin/python -m benchmarks.rollout_sps --no-pong
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Summary,
    add_common_args,
    default_threads,
    fmt_ratio,
    fmt_sps,
    load_caption,
    log,
    print_table,
    rollout_throughput,
    run_isolated,
    run_worker,
    stepping_throughput,
    warn_if_busy,
    whole_rollouts,
)
from cockpit.contract.events import PhaseEvent, of_kind

PONG_PRESET = """\
description = "benchmark only: a short Pong-v5 run for rollout-phase SPS"
env = "Pong-v5"
n_envs = {n_envs}
n_steps = 128
batch_size = 256
n_epochs = 1
learning_rate = 2.5e-4
"""


def raw_envpool(env_id: str, n_envs: int, threads: int, seed: int, steps: int, warmup: int) -> dict[str, Any]:
    """Child process: step a bare envpool pool with random actions; returns env steps and seconds."""
    from cockpit_training.device import limit_native_threads

    limit_native_threads()
    from cockpit_training.envpool_vec import EnvpoolVecEnv

    # The worker's own pool (Atari: episodic life and clipped rewards), stepped raw, past the adapter.
    pool = EnvpoolVecEnv.make(env_id, n_envs, seed=seed, num_threads=threads).pool
    return stepping_throughput(pool.step, pool.reset, pool.action_space, n_envs, seed=seed, steps=steps, warmup=warmup)


@dataclass(frozen=True)
class Case:
    """One env to measure: the worker preset to run it with and the raw-stepping budget."""

    env: str
    preset: str
    n_envs: int
    timesteps: int
    raw_steps: int


@dataclass(frozen=True)
class Result:
    """The repeated measurements of one env."""

    case: Case
    threads: int
    rollouts: int
    rollout: Summary
    raw: Summary

    @property
    def ratio(self) -> float:
        """Median rollout-phase SPS over median raw envpool SPS."""
        return self.rollout.median / self.raw.median


def measure(case: Case, args: argparse.Namespace) -> Result:
    """Alternate worker runs and raw envpool runs `args.repeats` times each for one env."""
    threads = args.threads or default_threads(case.n_envs)
    rollout_sps: list[float] = []
    raw_sps: list[float] = []
    rollouts = 0
    for i in range(args.repeats):
        for side in ("rollout", "raw") if i % 2 == 0 else ("raw", "rollout"):
            if side == "rollout":
                events = run_worker(case.preset, case.timesteps, seed=args.seed, threads=threads)
                trains = sum(1 for e in of_kind(events, PhaseEvent) if e.phase == "train")
                rollouts = trains - args.skip_rollouts
                sps = rollout_throughput(events, skip=args.skip_rollouts).sps
                rollout_sps.append(sps)
            else:
                kwargs = {
                    "env_id": case.env,
                    "n_envs": case.n_envs,
                    "threads": threads,
                    "seed": args.seed,
                    "steps": case.raw_steps,
                    "warmup": args.raw_warmup,
                }
                result = run_isolated("benchmarks.rollout_sps:raw_envpool", kwargs)
                sps = result["steps"] / result["seconds"]
                raw_sps.append(sps)
            log(f"{case.env} repeat {i + 1}/{args.repeats}: {side:<7} {fmt_sps(sps)} SPS")
    return Result(case, threads, rollouts, Summary(tuple(rollout_sps)), Summary(tuple(raw_sps)))


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.rollout_sps",
        description="Worker rollout-phase SPS against raw envpool stepping (CartPole-v1 and Pong-v5).",
    )
    add_common_args(parser, repeats=2)
    parser.add_argument(
        "--cartpole-timesteps",
        type=int,
        default=51_200,
        metavar="T",
        help="worker steps for CartPole-v1, rounded up to whole rollouts (default: 51200 = 200 rollouts)",
    )
    parser.add_argument(
        "--cartpole-raw-steps",
        type=int,
        default=20_000,
        metavar="N",
        help="raw envpool vector steps for CartPole-v1 (default: 20000)",
    )
    parser.add_argument(
        "--pong-timesteps",
        type=int,
        default=16_384,
        metavar="T",
        help="worker steps for Pong-v5, rounded up to whole rollouts (default: 16384 = 16 rollouts)",
    )
    parser.add_argument(
        "--pong-raw-steps",
        type=int,
        default=1_500,
        metavar="N",
        help="raw envpool vector steps for Pong-v5 (default: 1500)",
    )
    parser.add_argument("--pong-n-envs", type=int, default=8, metavar="N", help="Pong-v5 envs (default: 8)")
    parser.add_argument("--no-pong", action="store_true", help="measure CartPole-v1 only")
    parser.add_argument(
        "--skip-rollouts",
        type=int,
        default=1,
        metavar="N",
        help="first rollouts of each worker run left out as warm-up (default: 1)",
    )
    parser.add_argument(
        "--raw-warmup", type=int, default=50, metavar="N", help="untimed raw vector steps first (default: 50)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    from cockpit.contract.presets import load

    args = build_parser().parse_args(argv)
    load_before = warn_if_busy()
    with tempfile.TemporaryDirectory(prefix="bench-presets-") as tmp:
        cartpole = load("cartpole")
        cases = [
            Case(
                cartpole.env,
                "cartpole",
                cartpole.n_envs,
                whole_rollouts("cartpole", args.cartpole_timesteps),
                args.cartpole_raw_steps,
            )
        ]
        if not args.no_pong:
            pong_preset = Path(tmp) / "bench-pong.toml"
            pong_preset.write_text(PONG_PRESET.format(n_envs=args.pong_n_envs), encoding="utf-8")
            spec = str(pong_preset)
            cases.append(
                Case("Pong-v5", spec, args.pong_n_envs, whole_rollouts(spec, args.pong_timesteps), args.pong_raw_steps)
            )
        results = [measure(case, args) for case in cases]
    rows = [
        [
            r.case.env,
            str(r.case.n_envs),
            str(r.threads),
            f"{r.case.timesteps:,}",
            str(r.rollouts),
            r.rollout.cell,
            r.raw.cell,
            fmt_ratio(r.ratio),
        ]
        for r in results
    ]
    print_table(
        f"Worker rollout-phase SPS vs raw envpool stepping (median of {args.repeats}, seed {args.seed})",
        ["env", "n_envs", "threads", "worker steps", "rollouts", "rollout SPS", "raw envpool SPS", "rollout/raw"],
        rows,
        caption=load_caption(load_before),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
