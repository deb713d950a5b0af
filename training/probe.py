"""Measure what one PPO job of a preset costs on this machine: `python -m cockpit_training.probe --preset P`.

Prints one JSON object on stdout (times in microseconds, the device a worker would use, one
thread: envpool's too, so the per-env figures are one core's; workers may step envs on more):

- `step_overhead_us`: the fixed cost of one rollout step (SB3's Python loop, one policy forward
  call, one vectorized env call), whatever the number of envs;
- `env_policy_us`: what each env adds to a rollout step (its step and its share of the forward),
  never less than `env_step_us`;
- `env_step_us`: what each env adds to a vectorized env step alone, without the policy;
- `train_sample_us`: one sample through one training epoch (forward, backward, optimizer step),
  at the preset's batch size or the largest the probe's rollout allows;
- `train_epoch_us`: an epoch's fixed cost, whatever its number of minibatches (shuffling the
  rollout and SB3's per-epoch bookkeeping), with the train phase's own fixed cost spread over its
  epochs. A preset of small rollouts and many epochs (CartPole's 256 samples, 20 epochs) pays it
  20 times an iteration: leaving it out made the CartPole estimate 40 % optimistic.

It trains real SB3 PPO on the real env three times and times its iterations' rollout and train
phases through SB3's callback hooks (the first iteration carries one-off start-up costs and is left
out; of the next few, at least three where they fit in `MEDIAN_LIMIT_S`, the median): with 2 and
16 envs for one epoch, taking turns, which give how a rollout step's cost grows with the envs and a
training epoch's with its samples, then at the preset's own rollout, batch and epochs (all of them
where an iteration takes under `OWN_ITERATION_S`, else `OWN_EPOCHS`). Both lines are drawn through
the own shape's point, so the model gives back exactly what the preset was timed at. About 10-20 s
in all for CartPole; a minute or more for a shape whose iterations take seconds.

What a fleet pays around the training, per agent and tier and per worker process:
- `setup_s`: building the preset's env and model (the third time, so imports are warm), what a
  served worker pays at each job;
- `import_s`: this process's start to having imported torch, SB3 and the env's library, what a
  fresh worker pays once;
- `episode_steps_max`: the env's own limit on an episode's steps (0 for none), which bounds what
  scoring an agent can cost.

Every figure above is one thread's. On the CPU a job's train phase runs on its whole core budget
(`device.torch_threads_for`), so the probe also times one train epoch of the own shape on every
core here (`train_threads`) against one thread, in turns: `train_speedup` is the ratio (1.0 on a
GPU, where the train phase does not run on the cores).

A gymnasium env (a custom `module:EnvId` one too) is built with the preset's `env_kwargs` and, on
the probe's one thread, stepped in DummyVecEnv, so `env_step_us` is one env step's own cost: the
figure `recommend` decides DummyVecEnv or SubprocVecEnv by (`envids.pick_vec_env`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
import time
from typing import Any

from cockpit.contract.arguments import ArgumentParser
from cockpit.contract.envids import EnvError, backend_for
from cockpit.contract.presets import Preset, PresetError, largest_divisor_at_most, load
from cockpit.contract.progress import probe_line
from cockpit_training.device import DeviceError, apply_torch_threads, enable_tf32, limit_native_threads, resolve_device
from cockpit_training.stopping import die_with_parent

SMALL, LARGE = 2, 16  # env counts: the step cost is a line through these two points
MIN_STEPS = 128  # rollout steps timed per env count: fewer leave the per-env difference in the noise
ENV_ONLY_S = 0.5  # seconds each env count is stepped alone, without the policy
ENV_CHUNK = 50  # steps of one env count in a turn
OWN_ITERATION_S = 0.5  # the own shape is timed with all its epochs where an iteration takes no longer
OWN_EPOCHS = 5  # else with this many: enough to see each epoch's fixed cost
TIMED_ITERATIONS, TIMED_S = 8, 1.5  # iterations timed per shape: this many, or fewer once they took this long
# But at least this many, while they take under `MEDIAN_LIMIT_S` in all: one iteration of a heavy
# shape (a Pong one: 10 s on a CPU) ranged from 159 to 192 SPS in one process, a median of one is
# one draw, and the probe's figure for one Pong job came out a fifth under what its workers did.
MEDIAN_OF, MEDIAN_LIMIT_S = 3, 45.0


def _probe_preset(preset: Preset, n_envs: int) -> Preset:
    """A one-epoch copy of `preset` with `MIN_STEPS`-step rollouts, or longer ones where the
    preset's batch needs them (the rollout's length does not change a step's cost)."""
    n_steps = max(MIN_STEPS, math.ceil(preset.batch_size / LARGE))
    batch = largest_divisor_at_most(n_envs * n_steps, preset.batch_size)
    return dataclasses.replace(preset, n_envs=n_envs, n_steps=n_steps, batch_size=batch, n_epochs=1)


def _own_shape(preset: Preset, large: tuple[float, float, int, float]) -> Preset:
    """`preset` as it trains (its n_envs, n_steps and batch size): with all its epochs where an
    iteration would take under `OWN_ITERATION_S` at the per-sample costs of the `large` timing
    (a train phase has a fixed cost too, which fewer epochs would overstate), else `OWN_EPOCHS`."""
    rollout_s = large[0] / large[2] * preset.total_batch
    train_s = large[1] / large[2] * preset.total_batch * preset.n_epochs
    if rollout_s + train_s <= OWN_ITERATION_S:
        return preset
    return dataclasses.replace(preset, n_epochs=min(preset.n_epochs, OWN_EPOCHS))


def _build(preset: Preset, device: str) -> tuple[Any, Any]:
    """The preset's env (its envs stepped on one thread) and a fresh PPO model on it, seed 0."""
    from cockpit_training.envs import make_vec_env
    from cockpit_training.model import new_model

    venv = make_vec_env(preset.env, preset.n_envs, seed=0, threads=1, env_kwargs=preset.env_kwargs)
    try:
        return venv, new_model(preset, venv, seed=0, device=device)
    except BaseException:
        venv.close()
        raise


def _iteration_marks(device: str) -> tuple[Any, list[tuple[str, float]]]:
    """A callback that marks each PPO iteration's rollout, train and end on the monotonic clock
    (queued GPU work synchronized first: it belongs to the phase that queued it), and its marks."""
    from stable_baselines3.common.callbacks import BaseCallback

    marks: list[tuple[str, float]] = []

    def mark(name: str) -> None:
        if device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
        marks.append((name, time.monotonic()))

    class Timer(BaseCallback):
        def _on_rollout_start(self) -> None:
            mark("rollout")

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            mark("train")

        def _on_training_end(self) -> None:
            mark("end")

    return Timer(), marks


def _phase_times(presets: list[Preset], device: str) -> list[tuple[float, float, int, float]]:
    """(rollout seconds, train seconds, samples) of one PPO iteration of each of `presets`, and
    the seconds building its env and model took. The first iteration of each carries one-off
    start-up costs and is left out. The presets then take turns, an iteration each, for as long
    as `_time_more` says, and the median rollout and the median
    train phase count: one iteration alone is at the mercy of whatever else the machine did in
    those milliseconds, and taking turns gives each preset the same share of the VM's drift, so
    the difference between two of them is not a difference between two moments."""
    built: list[tuple[Any, Any, Any, list[tuple[str, float]], float]] = []
    try:
        for preset in presets:
            timer, marks = _iteration_marks(device)
            began = time.perf_counter()
            venv, model = _build(preset, device)
            built.append((venv, model, timer, marks, time.perf_counter() - began))
            model.learn(preset.total_batch, callback=timer)  # the warm-up iteration
        rollouts: list[list[float]] = [[] for _ in presets]
        trains: list[list[float]] = [[] for _ in presets]
        while _time_more(len(rollouts[0]), sum(map(sum, rollouts + trains)) / len(presets)):
            for preset, (_, model, timer, marks, _), rollout, train in zip(
                presets, built, rollouts, trains, strict=True
            ):
                marks.clear()
                model.learn(preset.total_batch, callback=timer, reset_num_timesteps=False)
                times = dict(marks)
                rollout.append(times["train"] - times["rollout"])
                train.append(times["end"] - times["train"])
    finally:
        for venv, *_ in built:
            venv.close()
    return [
        (statistics.median(rollout), statistics.median(train), preset.total_batch, setup)
        for preset, (*_, setup), rollout, train in zip(presets, built, rollouts, trains, strict=True)
    ]


def _time_more(timed: int, spent_s: float) -> bool:
    """Whether to time another round of iterations, after `timed` rounds that took `spent_s` per
    shape: up to `TIMED_ITERATIONS` while under `TIMED_S`, and at least `MEDIAN_OF` (one at
    least) unless they took `MEDIAN_LIMIT_S`."""
    if timed < TIMED_ITERATIONS and spent_s < TIMED_S:
        return True
    return timed < MEDIAN_OF and (timed == 0 or spent_s < MEDIAN_LIMIT_S)


def partner(preset: Preset, device: str) -> None:
    """Train `preset` until killed, printing one JSON line `[start, end, samples]` (monotonic
    seconds, comparable across processes) per iteration: cockpit runs two such partners side by
    side, pinned as it chooses, to see what jobs running together cost each other
    (`cockpit.core.sizing.contention`)."""
    _, model = _build(preset, device)
    first = True
    while True:
        began = time.monotonic()
        model.learn(preset.total_batch, reset_num_timesteps=first)
        first = False
        print(json.dumps([began, time.monotonic(), preset.total_batch]), flush=True)


def cores_here() -> int:
    """The physical cores this process may use: what cockpit's thread budget splits among jobs."""
    import psutil

    return max(1, min(psutil.cpu_count(logical=False) or 1, len(os.sched_getaffinity(0))))


def _train_speedup(preset: Preset, device: str, threads: int) -> float:
    """How much faster one train epoch of `preset`'s own shape runs on `threads` torch threads than
    on one, on the CPU (1.0 on a GPU, or with one core): one rollout is collected, then
    `model.train()` is timed on it at 1 and `threads` threads in turns (each count first in every
    other round, after an untimed warm-up at each), for as long as `_time_more` says; the ratio of
    the medians. A CPU job trains on its whole core budget (`device.torch_threads_for`)."""
    if device != "cpu" or threads <= 1:
        return 1.0
    one_epoch = dataclasses.replace(preset, n_epochs=1)
    venv, model = _build(one_epoch, device)
    times: dict[int, list[float]] = {1: [], threads: []}
    try:
        model.learn(one_epoch.total_batch)  # fills the rollout buffer that each timed epoch trains on
        for count in (1, threads):
            apply_torch_threads(count)
            model.train()
        rounds, spent = 0, 0.0
        while _time_more(rounds, spent / 2):
            for count in (1, threads) if rounds % 2 == 0 else (threads, 1):
                apply_torch_threads(count)
                began = time.perf_counter()
                model.train()
                times[count].append(time.perf_counter() - began)
                spent += times[count][-1]
            rounds += 1
    finally:
        apply_torch_threads(1)
        venv.close()
    return statistics.median(times[1]) / statistics.median(times[threads])


def _env_step_us(env_id: str, env_kwargs: dict[str, Any]) -> float:
    """What one more env adds to a vectorized env step, in microseconds (the call's own fixed
    cost left out, as for `env_policy_us`): `SMALL` and `LARGE` envs on one thread each, stepped
    in turns of `ENV_CHUNK` steps for `ENV_ONLY_S` apiece, so both see the same moments; the median
    turn's difference counts."""
    import numpy as np

    from cockpit_training.envs import make_vec_env

    venvs: list[Any] = []
    try:
        for n_envs in (SMALL, LARGE):
            venvs.append(make_vec_env(env_id, n_envs, seed=0, threads=1, env_kwargs=env_kwargs))
            venvs[-1].reset()
        actions = [np.array([venv.action_space.sample() for _ in range(venv.num_envs)]) for venv in venvs]
        extra: list[float] = []  # each turn: what the LARGE chunk took over the SMALL one
        spent = 0.0
        while spent < 2 * ENV_ONLY_S:
            took = []
            for venv, action in zip(venvs, actions, strict=True):
                began = time.perf_counter()
                for _ in range(ENV_CHUNK):
                    venv.step(action)
                took.append(time.perf_counter() - began)
            extra.append(took[1] - took[0])
            spent += sum(took)
    finally:
        for venv in venvs:
            venv.close()
    # The median turn, not the sum: a burst of other load that lands on one chunk of a turn moves
    # that turn alone, where in a sum it could outweigh what the LARGE envs add (and read as 0).
    return max(0.0, statistics.median(extra) / ENV_CHUNK / (LARGE - SMALL)) * 1e6


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


def _step(index: int) -> None:
    """Tell cockpit, on stderr, that `PROBE_STEPS[index]` begins."""
    print(probe_line(index), file=sys.stderr, flush=True)


def probe(preset: Preset, device: str, import_s: float = 0.0) -> dict[str, Any]:
    """The measurements described in the module docstring, as a dict (`import_s` is passed
    through: the caller measured it). Each of `PROBE_STEPS` is announced on stderr as it begins
    (`probe_line`): cockpit shows them while it waits."""
    _step(0)
    large_preset = _probe_preset(preset, LARGE)
    small, large = _phase_times([_probe_preset(preset, SMALL), large_preset], device)
    own_preset = _own_shape(preset, large)
    _step(1)
    (own,) = _phase_times([own_preset], device)
    _step(2)
    env_step = _env_step_us(preset.env, preset.env_kwargs) / 1e6
    # Both lines go through the preset's own shape, so the model gives back what it was timed at;
    # the other points give their slopes, or where noise leaves none, a cost in proportion. An env
    # adds at least its own step to a rollout step: that floor, timed alone and steadier, holds
    # the per-env slope up where the rollouts' noise pulled it under.
    step_small, step_large = small[0] / large_preset.n_steps, large[0] / large_preset.n_steps
    own_step = own[0] / own_preset.n_steps
    per_env = min(max(env_step, (step_large - step_small) / (LARGE - SMALL)), own_step / preset.n_envs)
    own_epoch = own[1] / own_preset.n_epochs
    slope = (large[1] - own_epoch) / (large[2] - own[2]) if large[2] != own[2] else 0.0
    train_sample = slope if 0.0 < slope <= own_epoch / own[2] else own_epoch / own[2]
    epoch_fixed = own_epoch - own[2] * train_sample  # what an epoch costs beyond its samples
    train_threads = cores_here() if device == "cpu" else 1
    _step(3)  # announced on a GPU too, where it takes no time: the count of steps stays the same
    speedup = _train_speedup(own_preset, device, train_threads)
    return {
        "env": preset.env,
        "device": device,
        "step_overhead_us": round((own_step - preset.n_envs * per_env) * 1e6, 1),
        "env_policy_us": round(per_env * 1e6, 2),
        "env_step_us": round(env_step * 1e6, 2),
        "train_sample_us": round(train_sample * 1e6, 2),
        "train_epoch_us": round(epoch_fixed * 1e6, 1),
        "batch_size": large_preset.batch_size,
        "iteration_s": round(own[0] + own[1], 4),  # one iteration of the own shape as timed
        "own_epochs": own_preset.n_epochs,
        "setup_s": round(own[3], 3),  # the third build: the modules it needs are imported by now
        "import_s": round(import_s, 3),
        "episode_steps_max": _episode_steps_max(preset.env, preset.env_kwargs),
        "train_threads": train_threads,
        "train_speedup": round(speedup, 3),
    }


def main(argv: list[str] | None = None) -> int:
    """Exit 0 with the JSON on stdout; 2 with one line on stderr for bad input."""
    parser = ArgumentParser(prog="python -m cockpit_training.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", required=True, metavar="NAME|FILE", help="a preset name or a .toml path")
    parser.add_argument("--env", metavar="ENV", help="environment id (default: the preset's)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="torch device")
    parser.add_argument(
        "--partner", action="store_true", help="train the preset until killed, a JSON line per iteration (for cockpit)"
    )
    args = parser.parse_args(argv)
    die_with_parent()  # a probe of a killed `cockpit tune` or `recommend` measures for no one
    limit_native_threads()
    try:
        preset = load(args.preset)
        if args.env:
            preset = dataclasses.replace(preset, env=args.env)
        device = resolve_device(args.device)
    except (PresetError, DeviceError) as exc:
        print(f"python -m cockpit_training.probe: error: {exc}", file=sys.stderr)
        return 2
    # What a fresh worker process pays before its first job: Python, torch, SB3 and the env's library.
    import psutil
    import stable_baselines3  # noqa: F401

    import cockpit_training.envs  # noqa: F401

    try:  # imports envpool, or a `module:EnvId`'s module: part of what a worker pays
        backend = backend_for(preset.env)
    except EnvError as exc:
        print(f"python -m cockpit_training.probe: error: {exc}", file=sys.stderr)
        return 2
    if backend == "envpool":
        import envpool  # noqa: F401
    from cockpit_training.model import import_lazy_parts

    import_lazy_parts()
    import_s = time.time() - psutil.Process().create_time()
    apply_torch_threads(1)
    if device == "cuda":  # as the workers do
        enable_tf32()
    if args.partner:
        partner(preset, device)
    print(json.dumps(probe(preset, device, import_s)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
