"""Measure what one PPO job of a preset costs on this machine: `python -m training.probe --preset P`.

Prints one JSON object on stdout (times in microseconds, the device a worker would use, one
thread: envpool's too, so the per-env figures are one core's; workers may step envs on more):

- `step_overhead_us`: the fixed cost of one rollout step (SB3's Python loop, one policy forward
  call, one vectorized env call), whatever the number of envs;
- `env_policy_us`: what each env adds to a rollout step (its step and its share of the forward);
- `env_step_us`: what each env adds to a vectorized env step alone, without the policy;
- `train_sample_us`: one sample through one training epoch (forward, backward, optimizer step),
  at the preset's batch size or the largest the probe's rollout allows.

It trains real SB3 PPO on the real env twice, with 2 and 16 envs, for two short iterations each,
and times the second iteration's rollout and train phases through SB3's callback hooks (the
first carries one-off start-up costs). A rollout step then costs `step_overhead_us +
n_envs * env_policy_us`. About 5-15 s in all.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from typing import Any

from cockpit.contract.arguments import ArgumentParser
from cockpit.contract.presets import Preset, PresetError, largest_divisor_at_most, load
from training.device import DeviceError, apply_torch_threads, enable_tf32, limit_native_threads, resolve_device
from training.stopping import die_with_parent

SMALL, LARGE = 2, 16  # env counts: the step cost is a line through these two points
MIN_STEPS = 128  # rollout steps timed per env count: fewer leave the per-env difference in the noise
ENV_ONLY_S = 0.5


def _probe_preset(preset: Preset, n_envs: int) -> Preset:
    """A one-epoch copy of `preset` with `MIN_STEPS`-step rollouts, or longer ones where the
    preset's batch needs them (the rollout's length does not change a step's cost)."""
    n_steps = max(MIN_STEPS, math.ceil(preset.batch_size / LARGE))
    batch = largest_divisor_at_most(n_envs * n_steps, preset.batch_size)
    return dataclasses.replace(preset, n_envs=n_envs, n_steps=n_steps, batch_size=batch, n_epochs=1)


def _phase_times(preset: Preset, device: str) -> tuple[float, float, int]:
    """(rollout seconds, train seconds, samples) of a second PPO iteration of `preset`."""
    from stable_baselines3.common.callbacks import BaseCallback

    from training.envs import make_vec_env
    from training.model import new_model

    marks: list[tuple[str, float]] = []

    def synchronize() -> None:
        if device.startswith("cuda"):  # queued GPU work belongs to the phase that queued it
            import torch

            torch.cuda.synchronize()

    class Timer(BaseCallback):
        def _on_rollout_start(self) -> None:
            synchronize()
            marks.append(("rollout", time.perf_counter()))

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            synchronize()
            marks.append(("train", time.perf_counter()))

        def _on_training_end(self) -> None:
            synchronize()
            marks.append(("end", time.perf_counter()))

    venv = make_vec_env(preset.env, preset.n_envs, seed=0, threads=1)
    try:
        model = new_model(preset, venv, seed=0, device=device)
        model.learn(2 * preset.total_batch, callback=Timer())
    finally:
        venv.close()
    times = [t for _, t in marks]
    # marks: rollout, train, rollout, train, end; the second iteration is marks 2..4.
    return times[3] - times[2], times[4] - times[3], preset.total_batch


def _vector_step_s(env_id: str, n_envs: int) -> float:
    """Seconds per vectorized step of `n_envs` envs alone, on one thread."""
    import numpy as np

    from training.envs import make_vec_env

    venv = make_vec_env(env_id, n_envs, seed=0, threads=1)
    try:
        venv.reset()
        actions = np.array([venv.action_space.sample() for _ in range(n_envs)])
        steps, began = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - began) < ENV_ONLY_S or steps < 5:
            venv.step(actions)
            steps += 1
    finally:
        venv.close()
    return elapsed / steps


def _env_step_us(env_id: str) -> float:
    """What one more env adds to a vectorized env step, in microseconds (the call's own fixed
    cost left out, as for `env_policy_us`)."""
    small, large = _vector_step_s(env_id, SMALL), _vector_step_s(env_id, LARGE)
    return max(0.0, (large - small) / (LARGE - SMALL)) * 1e6


def probe(preset: Preset, device: str) -> dict[str, Any]:
    """The measurements described in the module docstring, as a dict."""
    large_preset = _probe_preset(preset, LARGE)
    small = _phase_times(_probe_preset(preset, SMALL), device)
    large = _phase_times(large_preset, device)
    step_small, step_large = small[0] / large_preset.n_steps, large[0] / large_preset.n_steps
    per_env = max(0.0, (step_large - step_small) / (LARGE - SMALL))
    return {
        "env": preset.env,
        "device": device,
        "step_overhead_us": round(max(0.0, step_small - SMALL * per_env) * 1e6, 1),
        "env_policy_us": round(per_env * 1e6, 2),
        "env_step_us": round(_env_step_us(preset.env), 2),
        "train_sample_us": round(large[1] / large[2] * 1e6, 2),
        "batch_size": large_preset.batch_size,
    }


def main(argv: list[str] | None = None) -> int:
    """Exit 0 with the JSON on stdout; 2 with one line on stderr for bad input."""
    parser = ArgumentParser(prog="python -m training.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True, metavar="NAME|FILE", help="a preset name or a .toml path")
    parser.add_argument("--env", metavar="ENV", help="environment id (default: the preset's)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="torch device")
    args = parser.parse_args(argv)
    die_with_parent()  # a probe of a killed `cockpit tune` or `recommend` measures for no one
    limit_native_threads()
    try:
        preset = load(args.preset)
        if args.env:
            preset = dataclasses.replace(preset, env=args.env)
        device = resolve_device(args.device)
    except (PresetError, DeviceError) as exc:
        print(f"python -m training.probe: error: {exc}", file=sys.stderr)
        return 2
    apply_torch_threads(1)
    if device == "cuda":  # as the workers do
        enable_tf32()
    print(json.dumps(probe(preset, device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
