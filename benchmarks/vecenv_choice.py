"""Where SubprocVecEnv starts to beat DummyVecEnv: the step cost behind `envids.SUBPROC_MIN_STEP_US`.

The gymnasium fallback (custom `module:EnvId` envs among them) steps its envs in DummyVecEnv, one
after another in the worker, or SubprocVecEnv, one process per env stepped in parallel at the
price of a pipe round trip per env and step. Which is faster depends on what one env step costs;
this measures both across step costs and prints SubprocVecEnv's SPS over DummyVecEnv's.

What it measures: env steps per second through the SB3 VecEnv API (`venv.step(actions)` with
random valid actions, no policy), for `--n-envs` envs (default 8, the cartpole preset's), each
VecEnv built by the worker's own `cockpit_training.envs.make_vec_env` with `vec_env` forced:
- `GridWorld-v0` (`examples.gridworld`, a real cheap custom env: a few microseconds a step);
- `Spin-v0` (this module): an env whose step busy-waits `cost_us` microseconds, holding the CPU
  (and the GIL) as a Python env's own computation would, for each cost in `--costs`.
The "step us" column is `cockpit_training.envs.step_cost_us`, the figure the worker's `auto` choice
compares with the threshold. Each backend is measured in a fresh process (`run_isolated`), every
case for `--seconds` after untimed warm-up steps; the backends' order alternates between repeats,
and the table shows medians and (min–max).

Read the ratio column: under 1, DummyVecEnv is faster; the threshold belongs where it crosses 1.
On more cores SubprocVecEnv gains more from a costly step (up to n_envs in parallel), while the
pipe's cost per step stays, so the crossing moves lower; a threshold measured on 2 cores is the
cautious one.

Run from the repo root (defaults take about 3 minutes on an idle 2-core machine, 15 on a busy one):
    .venv/bin/python -m benchmarks.vecenv_choice
    .venv/bin/python -m benchmarks.vecenv_choice --costs 100,200,300,400 --repeats 5
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from benchmarks.common import (
    Summary,
    add_common_args,
    fmt_ratio,
    load_caption,
    log,
    print_table,
    run_isolated,
    usable_cpus,
    warn_if_busy,
)

GRIDWORLD = "examples.gridworld:GridWorld-v0"
SPIN = "benchmarks.vecenv_choice:Spin-v0"
BACKENDS = ("dummy", "subproc")
EPISODE_STEPS = 200


class SpinEnv(gym.Env[np.ndarray, np.int64]):
    """A step that busy-waits `cost_us` microseconds; episodes of `EPISODE_STEPS` steps."""

    def __init__(self, cost_us: float = 0.0) -> None:
        self.cost_s = cost_us / 1e6
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._steps = 0
        return np.zeros(4, dtype=np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
        end = time.perf_counter() + self.cost_s
        while time.perf_counter() < end:  # busy, as computing the next state would be
            pass
        self._steps += 1
        return np.zeros(4, dtype=np.float32), 0.0, False, self._steps >= EPISODE_STEPS, {}


def make_spin(**kwargs: Any) -> SpinEnv:
    """gymnasium's entry point for Spin-v0 (an env creator takes its keyword arguments only)."""
    return SpinEnv(**kwargs)


if "Spin-v0" not in gym.registry:
    gym.register(id="Spin-v0", entry_point=make_spin)


def _case(cost: float | None) -> tuple[str, dict[str, Any]]:
    return (GRIDWORLD, {}) if cost is None else (SPIN, {"cost_us": cost})


def vecenv_rates(backend: str, costs: list[float | None], n_envs: int, seconds: float, seed: int) -> dict[str, Any]:
    """Child process: for each case, build `n_envs` envs in `backend` and time random-action vector
    steps for `seconds`; with `dummy`, also `step_cost_us` of one env. Returns SPS (and step us)
    per case, in order."""
    from cockpit_training.device import limit_native_threads

    limit_native_threads()
    from benchmarks.common import action_sampler
    from cockpit_training.envs import make_vec_env, step_cost_us

    sps, step_us = [], []
    for cost in costs:
        env_id, kwargs = _case(cost)
        venv = make_vec_env(env_id, n_envs, seed=seed, threads=usable_cpus(), env_kwargs=kwargs, vec_env=backend)
        try:
            venv.reset()
            sample = action_sampler(venv.action_space, n_envs, seed)
            for _ in range(20):
                venv.step(sample())
            steps, began = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - began) < seconds:
                venv.step(sample())
                steps += 1
        finally:
            venv.close()
        sps.append(n_envs * steps / elapsed)
        step_us.append(step_cost_us(env_id, kwargs) if backend == "dummy" else None)
    return {"sps": sps, "step_us": step_us}


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.vecenv_choice",
        description="SubprocVecEnv against DummyVecEnv by env step cost (GridWorld-v0 and a busy-wait env).",
    )
    add_common_args(parser, repeats=3)
    parser.add_argument("--n-envs", type=int, default=8, metavar="N", help="envs per VecEnv (default: 8)")
    parser.add_argument(
        "--costs",
        default="25,50,100,200,400,800,1600",
        metavar="US,...",
        help="Spin-v0 step costs in microseconds (default: 25,50,100,200,400,800,1600)",
    )
    parser.add_argument("--seconds", type=float, default=1.5, metavar="S", help="timed seconds per case (default: 1.5)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    args = build_parser().parse_args(argv)
    load_before = warn_if_busy()
    costs: list[float | None] = [None, *(float(c) for c in args.costs.split(","))]
    values: dict[str, list[list[float]]] = {b: [[] for _ in costs] for b in BACKENDS}
    step_us: list[list[float]] = [[] for _ in costs]
    for i in range(args.repeats):
        for backend in BACKENDS if i % 2 == 0 else BACKENDS[::-1]:
            kwargs = {"backend": backend, "costs": costs, "n_envs": args.n_envs, "seconds": args.seconds,
                      "seed": args.seed}  # fmt: skip
            result = run_isolated("benchmarks.vecenv_choice:vecenv_rates", kwargs)
            for k, sps in enumerate(result["sps"]):
                values[backend][k].append(sps)
                if result["step_us"][k] is not None:
                    step_us[k].append(result["step_us"][k])
            log(f"repeat {i + 1}/{args.repeats}: {backend} done")
    rows = []
    for k, cost in enumerate(costs):
        dummy, subproc = Summary(tuple(values["dummy"][k])), Summary(tuple(values["subproc"][k]))
        name = "GridWorld-v0" if cost is None else f"Spin-v0 {cost:g} us"
        measured = Summary(tuple(step_us[k])).median
        rows.append([name, f"{measured:,.0f}", dummy.cell, subproc.cell, fmt_ratio(subproc.median / dummy.median)])
    print_table(
        f"DummyVecEnv vs SubprocVecEnv by step cost, {args.n_envs} envs, random actions "
        f"(median of {args.repeats}, seed {args.seed})",
        ["env", "step us", "DummyVecEnv SPS", "SubprocVecEnv SPS", "Subproc/Dummy"],
        rows,
        caption=load_caption(load_before),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
