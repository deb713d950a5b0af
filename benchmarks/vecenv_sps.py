"""The envpool adapter's SPS against SB3's DummyVecEnv and SubprocVecEnv on the same envs.

What it measures: env steps per second through the SB3 VecEnv API (`venv.step(actions)` with
random valid actions, no policy) for three vectorized envs with the same n_envs:
- adapter: `cockpit_training.envpool_vec.EnvpoolVecEnv.make(env_id, n_envs, seed=, num_threads=)`;
- DummyVecEnv: the gymnasium envs stepped one after another in this process;
- SubprocVecEnv: one process per env (forkserver start, as the worker's gymnasium fallback).
The ratios adapter/Dummy and adapter/Subproc are the adapter's speed-up.

Envs (each pair does the same work):
- CartPole-v1: envpool's CartPole-v1 vs `Monitor(gym.make("CartPole-v1"))`.
- Pong: envpool's Pong-v5 (84x84 gray, frame skip 4, 4 stacked frames, noop starts, fire reset;
  the adapter adds episodic life and clipped rewards) vs
  `AtariWrapper(Monitor(gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)),
  terminal_on_life_loss=True, clip_reward=True)` under `VecFrameStack(n_stack=4)`.
  This needs the `ale-py` package (the ALE envs for gymnasium) and OpenCV (`opencv-python-headless`,
  used by AtariWrapper); without them Pong is skipped with a note and only CartPole runs.

How: every measurement runs in a fresh process (the envs are built, reset and given a few
untimed warm-up steps first); SPS = n_envs × steps / time. The order of the three backends
rotates between repeats; the table shows medians and (min–max).

Run from the repo root (defaults take about 1.5 minutes on 2 cores):
    .venv/bin/python -m benchmarks.vecenv_sps
    .venv/bin/python -m benchmarks.vecenv_sps --n-envs 16 --repeats 5
    .venv/bin/python -m benchmarks.vecenv_sps --no-pong
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from dataclasses import dataclass
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
    run_isolated,
    stepping_throughput,
    warn_if_busy,
)

BACKENDS = ("adapter", "dummy", "subproc")
ENVPOOL_IDS = {"CartPole-v1": "CartPole-v1", "Pong": "Pong-v5"}
PONG_NEEDS = ("ale_py", "cv2")


def _gym_cartpole() -> Any:
    """One monitored gymnasium CartPole-v1 (runs in the SubprocVecEnv child for subproc)."""
    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor

    return Monitor(gym.make("CartPole-v1"))


def _gym_pong() -> Any:
    """One gymnasium ALE Pong preprocessed like envpool's Pong-v5, before frame stacking."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.atari_wrappers import AtariWrapper
    from stable_baselines3.common.monitor import Monitor

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
    return AtariWrapper(Monitor(env), terminal_on_life_loss=True, clip_reward=True)


def make_venv(backend: str, env: str, n_envs: int, *, seed: int, threads: int) -> Any:
    """The SB3 VecEnv of `backend` ("adapter", "dummy" or "subproc") for `env` ("CartPole-v1" or "Pong")."""
    if backend == "adapter":
        from cockpit_training.envpool_vec import EnvpoolVecEnv

        return EnvpoolVecEnv.make(ENVPOOL_IDS[env], n_envs, seed=seed, num_threads=threads)

    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack

    maker = {"CartPole-v1": _gym_cartpole, "Pong": _gym_pong}[env]
    makers = [maker] * n_envs
    venv = DummyVecEnv(makers) if backend == "dummy" else SubprocVecEnv(makers, start_method="forkserver")
    venv.seed(seed)  # env i is reset with seed + i
    return VecFrameStack(venv, n_stack=4) if env == "Pong" else venv


def vecenv_steps(
    backend: str, env: str, n_envs: int, threads: int, seed: int, steps: int, warmup: int
) -> dict[str, Any]:
    """Child process: build and reset the VecEnv, then time `steps` random-action vector steps."""
    from cockpit_training.device import limit_native_threads

    limit_native_threads()
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered by casting.*")
        venv = make_venv(backend, env, n_envs, seed=seed, threads=threads)
    result = stepping_throughput(
        venv.step, venv.reset, venv.action_space, n_envs, seed=seed, steps=steps, warmup=warmup
    )
    venv.close()
    return result


@dataclass(frozen=True)
class Result:
    """The repeated measurements of one env, per backend."""

    env: str
    n_envs: int
    threads: int
    sps: dict[str, Summary]

    def ratio(self, other: str) -> float:
        """Median adapter SPS over the median SPS of `other`."""
        return self.sps["adapter"].median / self.sps[other].median


def measure(env: str, steps: int, args: argparse.Namespace) -> Result:
    """Measure every backend `args.repeats` times on `env`, rotating their order between repeats."""
    threads = args.threads or default_threads(args.n_envs)
    values: dict[str, list[float]] = {b: [] for b in BACKENDS}
    for i in range(args.repeats):
        for backend in BACKENDS[i % 3 :] + BACKENDS[: i % 3]:
            kwargs = {
                "backend": backend,
                "env": env,
                "n_envs": args.n_envs,
                "threads": threads,
                "seed": args.seed,
                "steps": steps,
                "warmup": args.warmup,
            }
            result = run_isolated("benchmarks.vecenv_sps:vecenv_steps", kwargs)
            sps = result["steps"] / result["seconds"]
            values[backend].append(sps)
            log(f"{env} repeat {i + 1}/{args.repeats}: {backend:<7} {fmt_sps(sps)} SPS")
    return Result(env, args.n_envs, threads, {b: Summary(tuple(v)) for b, v in values.items()})


def missing_pong_packages() -> list[str]:
    """The Python packages the gymnasium Pong side needs but cannot import (empty when all are there)."""
    return [name for name in PONG_NEEDS if importlib.util.find_spec(name) is None]


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.vecenv_sps",
        description="EnvpoolVecEnv SPS against SB3 DummyVecEnv and SubprocVecEnv (CartPole-v1 and Pong).",
    )
    add_common_args(parser, repeats=3)
    parser.add_argument("--n-envs", type=int, default=8, metavar="N", help="envs per VecEnv (default: 8)")
    parser.add_argument(
        "--cartpole-steps",
        type=int,
        default=5_000,
        metavar="N",
        help="timed vector steps on CartPole-v1 (default: 5000)",
    )
    parser.add_argument(
        "--pong-steps", type=int, default=500, metavar="N", help="timed vector steps on Pong (default: 500)"
    )
    parser.add_argument("--warmup", type=int, default=50, metavar="N", help="untimed vector steps first (default: 50)")
    parser.add_argument("--no-pong", action="store_true", help="measure CartPole-v1 only")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    args = build_parser().parse_args(argv)
    load_before = warn_if_busy()
    cases = [("CartPole-v1", args.cartpole_steps)]
    notes = []
    missing = missing_pong_packages()
    if args.no_pong:
        pass
    elif missing:
        notes.append(f"Pong skipped: cannot import {', '.join(missing)} (pip install ale-py opencv-python-headless).")
        log(notes[-1])
    else:
        cases.append(("Pong", args.pong_steps))
    results = [measure(env, steps, args) for env, steps in cases]
    rows = [
        [
            r.env,
            str(r.n_envs),
            str(r.threads),
            r.sps["adapter"].cell,
            r.sps["dummy"].cell,
            r.sps["subproc"].cell,
            fmt_ratio(r.ratio("dummy")),
            fmt_ratio(r.ratio("subproc")),
        ]
        for r in results
    ]
    print_table(
        f"EnvpoolVecEnv vs SB3 DummyVecEnv / SubprocVecEnv, random actions "
        f"(median of {args.repeats}, seed {args.seed})",
        [
            "env",
            "n_envs",
            "threads",
            "adapter SPS",
            "DummyVecEnv SPS",
            "SubprocVecEnv SPS",
            "adapter/Dummy",
            "adapter/Subproc",
        ],
        rows,
        caption=" ".join([*notes, load_caption(load_before)]),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
