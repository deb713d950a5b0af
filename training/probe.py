"""Measure what one PPO job of a preset costs on this machine: `python -m training.probe --preset P`.

Prints one JSON object on stdout (times in microseconds, the device a worker would use, one
thread: envpool's too, so the per-env figures are one core's; workers may step envs on more):

- `step_overhead_us`: the fixed cost of one rollout step (SB3's Python loop, one policy forward
  call, one vectorized env call), whatever the number of envs;
- `env_policy_us`: what each env adds to a rollout step (its step and its share of the forward);
- `env_step_us`: what each env adds to a vectorized env step alone, without the policy;
- `train_sample_us`: one sample through one training epoch (forward, backward, optimizer step),
  at the preset's batch size or the largest the probe's rollout allows;
- `train_epoch_us`: an epoch's fixed cost, whatever its number of minibatches (shuffling the
  rollout and SB3's per-epoch bookkeeping), with the train phase's own fixed cost spread over its
  epochs. A preset of small rollouts and many epochs (CartPole's 256 samples, 20 epochs) pays it
  20 times an iteration: leaving it out made the CartPole estimate 40 % optimistic.

It trains real SB3 PPO on the real env three times, for two short iterations each, and times the
second iteration's rollout and train phases through SB3's callback hooks (the first carries
one-off start-up costs): with 2 and 16 envs for one epoch (a rollout step then costs
`step_overhead_us + n_envs * env_policy_us`, and a long rollout gives the per-sample training
cost), then at the preset's own rollout, batch and epochs (up to `OWN_EPOCHS`), whose training
time over what its samples cost is the epochs' fixed cost. About 5-20 s in all.

What a fleet pays around the training, per agent and tier and per worker process:
- `setup_s`: building the preset's env and model (the third time, so imports are warm), what a
  served worker pays at each job;
- `import_s`: this process's start to having imported torch, SB3 and the env's library, what a
  fresh worker pays once;
- `episode_steps_max`: the env's own limit on an episode's steps (0 for none), which bounds what
  scoring an agent can cost.

A gymnasium env (a custom `module:EnvId` one too) is built with the preset's `env_kwargs` and, on
the probe's one thread, stepped in DummyVecEnv, so `env_step_us` is one env step's own cost: the
figure `recommend` decides DummyVecEnv or SubprocVecEnv by (`envids.pick_vec_env`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from typing import Any

from cockpit.contract.arguments import ArgumentParser
from cockpit.contract.envids import EnvError, backend_for
from cockpit.contract.presets import Preset, PresetError, largest_divisor_at_most, load
from training.device import DeviceError, apply_torch_threads, enable_tf32, limit_native_threads, resolve_device
from training.stopping import die_with_parent

SMALL, LARGE = 2, 16  # env counts: the step cost is a line through these two points
MIN_STEPS = 128  # rollout steps timed per env count: fewer leave the per-env difference in the noise
ENV_ONLY_S = 0.5
OWN_EPOCHS = 5  # epochs of the preset's own shape timed: enough to see each epoch's fixed cost


def _probe_preset(preset: Preset, n_envs: int) -> Preset:
    """A one-epoch copy of `preset` with `MIN_STEPS`-step rollouts, or longer ones where the
    preset's batch needs them (the rollout's length does not change a step's cost)."""
    n_steps = max(MIN_STEPS, math.ceil(preset.batch_size / LARGE))
    batch = largest_divisor_at_most(n_envs * n_steps, preset.batch_size)
    return dataclasses.replace(preset, n_envs=n_envs, n_steps=n_steps, batch_size=batch, n_epochs=1)


def _own_shape(preset: Preset) -> Preset:
    """`preset` as it trains (its n_envs, n_steps and batch size), for at most `OWN_EPOCHS`."""
    return dataclasses.replace(preset, n_epochs=min(preset.n_epochs, OWN_EPOCHS))


def _phase_times(preset: Preset, device: str) -> tuple[float, float, int, float]:
    """(rollout seconds, train seconds, samples) of a second PPO iteration of `preset`, and the
    seconds building its env and model took."""
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

    began = time.perf_counter()
    venv = make_vec_env(preset.env, preset.n_envs, seed=0, threads=1, env_kwargs=preset.env_kwargs)
    try:
        model = new_model(preset, venv, seed=0, device=device)
        setup = time.perf_counter() - began
        model.learn(2 * preset.total_batch, callback=Timer())
    finally:
        venv.close()
    times = [t for _, t in marks]
    # marks: rollout, train, rollout, train, end; the second iteration is marks 2..4.
    return times[3] - times[2], times[4] - times[3], preset.total_batch, setup


def _vector_step_s(env_id: str, n_envs: int, env_kwargs: dict[str, Any]) -> float:
    """Seconds per vectorized step of `n_envs` envs alone, on one thread."""
    import numpy as np

    from training.envs import make_vec_env

    venv = make_vec_env(env_id, n_envs, seed=0, threads=1, env_kwargs=env_kwargs)
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


def _env_step_us(env_id: str, env_kwargs: dict[str, Any]) -> float:
    """What one more env adds to a vectorized env step, in microseconds (the call's own fixed
    cost left out, as for `env_policy_us`)."""
    small, large = _vector_step_s(env_id, SMALL, env_kwargs), _vector_step_s(env_id, LARGE, env_kwargs)
    return max(0.0, (large - small) / (LARGE - SMALL)) * 1e6


def _episode_steps_max(env_id: str, env_kwargs: dict[str, Any]) -> int:
    """The env's own limit on an episode's steps (its time limit, as env_kwargs may set it), or 0
    when it has none."""
    if backend_for(env_id) == "envpool":
        import envpool

        return int(envpool.make_spec(env_id, **env_kwargs).config.max_episode_steps or 0)
    import gymnasium as gym

    from cockpit.contract.envids import split_env_id

    # `max_episode_steps` is gymnasium.make's own argument: in env_kwargs it overrides the spec's.
    limit = env_kwargs.get("max_episode_steps", gym.spec(split_env_id(env_id)[1]).max_episode_steps)
    return limit if isinstance(limit, int) and limit > 0 else 0


def probe(preset: Preset, device: str, import_s: float = 0.0) -> dict[str, Any]:
    """The measurements described in the module docstring, as a dict (`import_s` is passed
    through: the caller measured it)."""
    large_preset = _probe_preset(preset, LARGE)
    small = _phase_times(_probe_preset(preset, SMALL), device)
    large = _phase_times(large_preset, device)
    own_preset = _own_shape(preset)
    own = _phase_times(own_preset, device)
    step_small, step_large = small[0] / large_preset.n_steps, large[0] / large_preset.n_steps
    per_env = max(0.0, (step_large - step_small) / (LARGE - SMALL))
    train_sample = large[1] / large[2]
    # What the preset's epochs cost beyond their samples, per epoch.
    epoch_fixed = max(0.0, own[1] / own_preset.n_epochs - own[2] * train_sample)
    return {
        "env": preset.env,
        "device": device,
        "step_overhead_us": round(max(0.0, step_small - SMALL * per_env) * 1e6, 1),
        "env_policy_us": round(per_env * 1e6, 2),
        "env_step_us": round(_env_step_us(preset.env, preset.env_kwargs), 2),
        "train_sample_us": round(train_sample * 1e6, 2),
        "train_epoch_us": round(epoch_fixed * 1e6, 1),
        "batch_size": large_preset.batch_size,
        "setup_s": round(own[3], 3),  # the third build: the modules it needs are imported by now
        "import_s": round(import_s, 3),
        "episode_steps_max": _episode_steps_max(preset.env, preset.env_kwargs),
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
    # What a fresh worker process pays before its first job: Python, torch, SB3 and the env's library.
    import psutil
    import stable_baselines3  # noqa: F401

    import training.envs  # noqa: F401

    try:  # imports envpool, or a `module:EnvId`'s module: part of what a worker pays
        backend = backend_for(preset.env)
    except EnvError as exc:
        print(f"python -m training.probe: error: {exc}", file=sys.stderr)
        return 2
    if backend == "envpool":
        import envpool  # noqa: F401
    import_s = time.time() - psutil.Process().create_time()
    apply_torch_threads(1)
    if device == "cuda":  # as the workers do
        enable_tf32()
    print(json.dumps(probe(preset, device, import_s)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
