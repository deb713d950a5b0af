"""The pre-flight's last question: can stable-baselines3's PPO train each env the run will use?

`unfit_envs` asks `cockpit_training.trainable` in one process (torch and SB3 are imported there,
never here) about every preset whose env gymnasium runs: a user's `module:EnvId`, or a gymnasium
id envpool lacks. envpool's envs all observe Boxes and act in Discrete or Box spaces, so they are
not asked about, and a run of them pays nothing. `check_trainable` turns a refusal into the one
line `cockpit run`, `recommend` and `tune` print; `cockpit fleet` names its plan's key instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence

from cockpit.contract.envids import EnvError, backend_for
from cockpit.contract.presets import Preset, to_toml
from cockpit.contract.runspec import ConfigError
from cockpit.contract.trainability import TRAINABLE_MODULE, Unfit, load_verdicts
from cockpit.contract.workerargs import PARENT_PID_ENV

# Importing torch and SB3 takes a few seconds, building and stepping an env a moment; an env whose
# constructor takes longer than this would stall every job's start the same way.
CHECK_TIMEOUT_S = 120.0


def asked_about(preset: Preset) -> bool:
    """Whether `preset`'s env is checked: gymnasium runs it (an id neither library has is refused
    earlier, by `envids.check_env`, and is not asked about either)."""
    try:
        return backend_for(preset.env) == "gymnasium"
    except EnvError:
        return False


def unfit_envs(presets: Sequence[Preset], *, timeout_s: float = CHECK_TIMEOUT_S) -> list[Unfit | None]:
    """Per preset, None where PPO can train its env (or it is envpool's), else SB3's `Unfit`.
    ConfigError (one line) when the check itself could not run or said nothing usable."""
    flags = [asked_about(p) for p in presets]  # a `module:EnvId` is imported to answer: once each
    asked = [p for p, flag in zip(presets, flags, strict=True) if flag]
    if not asked:
        return [None] * len(presets)
    argv = [sys.executable, "-m", TRAINABLE_MODULE]
    envs = ", ".join(dict.fromkeys(p.env for p in asked))
    try:
        done = subprocess.run(
            argv,
            input=json.dumps([to_toml(p) for p in asked]),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, PARENT_PID_ENV: str(os.getpid())},
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(f"checking {envs} with stable-baselines3 took over {timeout_s:.0f} s") from None
    last = (done.stdout.strip().splitlines() or [""])[-1]
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ConfigError(f"checking {envs} with stable-baselines3 failed: {said}")
    try:
        verdicts = iter(load_verdicts(last, len(asked)))
    except ValueError as exc:
        raise ConfigError(f"checking {envs} with stable-baselines3 printed no verdict ({exc})") from None
    return [next(verdicts) if flag else None for flag in flags]


def check_trainable(preset: Preset, source: str) -> None:
    """ConfigError naming `preset.env` as `source` gave it (`--env`, `preset NAME: env`) when
    stable-baselines3's PPO cannot train it; nothing otherwise."""
    unfit = unfit_envs([preset])[0]
    if unfit is not None:
        raise ConfigError(unfit.message(preset.env, source))
