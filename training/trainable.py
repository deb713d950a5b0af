"""Can SB3's PPO train these envs? `python -m cockpit_training.trainable`, presets on stdin.

Reads a JSON list of preset files' texts (`presets.to_toml`, each with its env) on stdin and
prints one JSON line (`trainability.dump_verdicts`): per preset, null where PPO trains its env, else
the `Unfit` that says why. Exits 0 whatever it found; non-zero only when it could not ask.

Each env is built as the worker builds it, and judged by SB3's own code (see
`cockpit.contract.trainability`): SB3's preprocessing on each observation space, and on each key of a
Dict, before any VecEnv is made (SB3's DummyVecEnv fails on a space it cannot size with a bare
`TypeError`); then the model the worker would make, on one env in DummyVecEnv, on the CPU, and one
reset and one step of its own action. Warnings, SB3's advice among them, are not verdicts.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings
from typing import Any

import gymnasium as gym
from gymnasium import spaces
from stable_baselines3.common.preprocessing import check_for_nested_spaces, get_obs_shape

from cockpit.contract.envids import ensure_importable, is_custom
from cockpit.contract.presets import Preset, resolve
from cockpit.contract.toml import tomllib
from cockpit.contract.trainability import Unfit, dump_verdicts
from cockpit_training.envs import make_vec_env, policy_for
from cockpit_training.stopping import die_with_parent


def _said(exc: BaseException, space: spaces.Space | None = None) -> str:
    """`Type: message` on one line: how SB3 (or the env) put it, with `space`'s repr (which may
    hold a function's address, as MiniGrid's does) shortened to its class name."""
    text = str(exc) if space is None else str(exc).replace(str(space), type(space).__name__)
    return f"{type(exc).__name__}: {' '.join(text.split())}"[:400]


def _qualified(space: spaces.Space) -> str:
    kind = type(space)
    return f"{kind.__module__}.{kind.__qualname__}"


def _sb3_refuses(space: spaces.Space) -> Exception | None:
    """SB3's own refusal of `space` as an observation (nested, or of a kind it cannot size), or None."""
    try:
        check_for_nested_spaces(space)
        get_obs_shape(space)
    except NotImplementedError as exc:
        return exc
    return None


def observation_unfit(space: spaces.Space) -> Unfit | None:
    """What of the observation `space` SB3 refuses (the first Dict key, in order), or None."""
    if isinstance(space, spaces.Dict):
        refused = {key: _sb3_refuses(spaces.Dict({key: sub})) for key, sub in space.spaces.items()}
        keep = tuple(str(key) for key, exc in refused.items() if exc is None)
        for key, exc in refused.items():
            if exc is not None:
                sub = space.spaces[key]
                return Unfit("observation", _said(exc, sub), _qualified(sub), str(key), keep)
        return None
    exc = _sb3_refuses(space)
    return None if exc is None else Unfit("observation", _said(exc, space), _qualified(space))


def verdict(preset: Preset) -> Unfit | None:
    """Whether PPO trains `preset.env` as the worker would build it (None), else why not."""
    from cockpit_training.model import new_model

    if is_custom(preset.env):
        ensure_importable()
    try:
        env = gym.make(preset.env, **preset.env_kwargs)
    except Exception as exc:  # the env's own failure, whatever it is, is the user's to see
        return Unfit("env", _said(exc))
    try:
        unfit = observation_unfit(env.observation_space)
        policy = policy_for(env.observation_space)
    finally:
        env.close()
    if unfit is not None:
        return unfit
    # One env, a short rollout: the network and its spaces are what is checked, not the preset's sizes.
    small = dataclasses.replace(preset, n_envs=1, n_steps=2, batch_size=2, n_epochs=1)
    venv = make_vec_env(preset.env, 1, seed=0, threads=1, env_kwargs=preset.env_kwargs, vec_env="dummy")
    try:
        try:
            model = new_model(small, venv, seed=0, device="cpu")
        except Exception as exc:
            return Unfit("model", _said(exc), policy=policy)
        try:
            actions, _ = model.predict(venv.reset(), deterministic=True)
            venv.step(actions)
        except Exception as exc:
            return Unfit("step", _said(exc), policy=policy)
    finally:
        venv.close()
    return None


def main() -> int:
    """Read the presets on stdin, print the verdicts; 2 for input that is not a list of presets."""
    die_with_parent()  # the pre-flight of a killed `cockpit run` checks for no one
    try:
        texts: Any = json.loads(sys.stdin.read())
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValueError("expected a JSON list of preset files' texts")
        presets = [resolve(tomllib.loads(text), name="checked", source="stdin") for text in texts]
    except Exception as exc:
        print(f"cockpit_training.trainable: {_said(exc)}", file=sys.stderr)
        return 2
    with warnings.catch_warnings():  # SB3's and gymnasium's advice is not a verdict
        warnings.simplefilter("ignore")
        verdicts = [verdict(preset) for preset in presets]
    print(dump_verdicts(verdicts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
