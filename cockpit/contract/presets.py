"""Training presets: PPO hyperparameters as data, loaded from TOML and validated in one pass.

A preset is named (`fast`, `heavy`, `beast`, `cartpole`: files in the `presets` package) or given
as a path to a `.toml` file. Every problem in a file is reported in one `PresetError` whose
message names the file and each offending key, so a user fixes everything in one edit.

`env` may be gymnasium's `module:EnvId-v0` (a module of the user's registers the env), and an
`[env_kwargs]` table holds keyword arguments for building the env: `gymnasium.make(env,
**env_kwargs)`, or envpool config keys for an envpool id. This module checks only their shape;
whether the env imports and builds with them is `cockpit.contract.envids.check_env`'s question,
asked before a run starts. `vec_env` picks how the gymnasium fallback steps the envs: `auto`
(by the measured cost of a step, `envids.pick_vec_env`), `dummy` or `subproc`.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import tomli_w

from cockpit.contract.toml import tomllib

Schedule = Literal["constant", "linear"]
Activation = Literal["tanh", "relu"]
VecEnvChoice = Literal["auto", "dummy", "subproc"]

DEFAULT_BATCH_SIZE_CAP = 4096


class PresetError(ValueError):
    """A preset that cannot be used; the message is one line naming the file and the keys."""


@dataclass(frozen=True)
class Preset:
    """A fully resolved, validated PPO preset.

    `batch_size` is always a concrete divisor of `n_envs * n_steps`, even when the file said
    `"auto"` (then `batch_size_auto` is true and the cap that chose it is `batch_size_cap`).
    `env_kwargs` is plain TOML data (no dates) for building the env; treat it as read-only. It is
    left out of the hash, so a preset stays hashable.
    """

    name: str
    source: str
    description: str
    env: str
    n_envs: int
    n_steps: int
    batch_size: int
    n_epochs: int
    net_arch: tuple[int, ...]
    learning_rate: float
    schedule: Schedule
    gamma: float
    gae_lambda: float
    clip_range: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    activation: Activation
    normalize: bool
    checkpoint_every: int
    timesteps: int = 1_000_000
    batch_size_auto: bool = False
    batch_size_cap: int = DEFAULT_BATCH_SIZE_CAP
    # Left out of run.toml while at their defaults (`runrecord`'s `omit_if_default`), so a run that
    # does not use them records the preset as before.
    env_kwargs: dict[str, Any] = field(default_factory=dict, hash=False, metadata={"omit_if_default": True})
    vec_env: VecEnvChoice = field(default="auto", metadata={"omit_if_default": True})

    @property
    def total_batch(self) -> int:
        """Samples collected per rollout: n_envs × n_steps."""
        return self.n_envs * self.n_steps

    @property
    def minibatches(self) -> int:
        """Minibatches per epoch."""
        return self.total_batch // self.batch_size

    @property
    def gradient_steps_per_update(self) -> int:
        """Optimizer steps per rollout: n_epochs × minibatches."""
        return self.n_epochs * self.minibatches

    def as_dict(self) -> dict[str, Any]:
        """The resolved values as plain TOML/JSON-friendly data (net_arch as a list)."""
        data = dataclasses.asdict(self)
        data["net_arch"] = list(self.net_arch)
        return data


@dataclass(frozen=True)
class _Key:
    """One preset key: how to check it and what it defaults to (`required` when no default)."""

    check: Callable[[Any], str | None]
    default: Any = None
    required: bool = False


def _positive_int(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be a positive integer, got {value!r}"
    return None if value > 0 else f"must be a positive integer, got {value}"


def _number(low: float, high: float | None = None, *, low_inclusive: bool) -> Callable[[Any], str | None]:
    if high is not None:
        bound = f"in {'[' if low_inclusive else '('}{low:g}, {high:g}]"
    else:
        bound = "a number >= 0" if low_inclusive else "a positive number"

    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be {bound}, got {value!r}"
        if not math.isfinite(value):
            return f"must be {bound}, got {value}"
        too_low = value < low if low_inclusive else value <= low
        if too_low or (high is not None and value > high):
            return f"must be {bound}, got {value}"
        return None

    return check


def _string(value: Any) -> str | None:
    return None if isinstance(value, str) and value else f"must be a non-empty string, got {value!r}"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(map(repr, choices))}, got {value!r}"

    return check


def _boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, got {value!r}"


def _batch_size(value: Any) -> str | None:
    if value == "auto":
        return None
    problem = _positive_int(value)
    return problem and f'must be a positive integer or "auto", got {value!r}'


def _plain_toml(value: Any) -> bool:
    """True for TOML data without dates and times, which JSON (the started event) cannot carry."""
    if isinstance(value, dict):
        return all(_plain_toml(v) for v in value.values())
    if isinstance(value, list):
        return all(_plain_toml(v) for v in value)
    return not isinstance(value, (datetime.date, datetime.time))


def _env_kwargs(value: Any) -> str | None:
    if not isinstance(value, dict):
        return f"must be a table of keyword arguments for the env (an [env_kwargs] section), got {value!r}"
    if not _plain_toml(value):
        return f"must hold strings, numbers, booleans, arrays and tables (no dates or times), got {value!r}"
    return None


def _net_arch(value: Any) -> str | None:
    if not isinstance(value, list) or not value or any(_positive_int(v) for v in value):
        return f"must be a non-empty list of positive integers, got {value!r}"
    return None


_positive = _number(0.0, low_inclusive=False)

_KEYS: dict[str, _Key] = {
    "description": _Key(lambda v: None if isinstance(v, str) else f"must be a string, got {v!r}", ""),
    "env": _Key(_string, required=True),
    "n_envs": _Key(_positive_int, required=True),
    "n_steps": _Key(_positive_int, required=True),
    "batch_size": _Key(_batch_size, required=True),
    "batch_size_cap": _Key(_positive_int, DEFAULT_BATCH_SIZE_CAP),
    "n_epochs": _Key(_positive_int, required=True),
    "net_arch": _Key(_net_arch, [64, 64]),
    "learning_rate": _Key(_positive, 3e-4),
    "schedule": _Key(_one_of("constant", "linear"), "constant"),
    "gamma": _Key(_number(0.0, 1.0, low_inclusive=False), 0.99),
    "gae_lambda": _Key(_number(0.0, 1.0, low_inclusive=False), 0.95),
    "clip_range": _Key(_positive, 0.2),
    "ent_coef": _Key(_number(0.0, low_inclusive=True), 0.01),
    "vf_coef": _Key(_positive, 0.5),
    "max_grad_norm": _Key(_positive, 0.5),
    "activation": _Key(_one_of("tanh", "relu"), "tanh"),
    "normalize": _Key(_boolean, False),
    "checkpoint_every": _Key(_positive_int, 100_000),
    "timesteps": _Key(_positive_int, 1_000_000),
    "env_kwargs": _Key(_env_kwargs, {}),
    "vec_env": _Key(_one_of("auto", "dummy", "subproc"), "auto"),
}

PRESET_KEYS: tuple[str, ...] = tuple(_KEYS)


def largest_divisor_at_most(total: int, cap: int) -> int:
    """The largest divisor of `total` that is <= `cap` (1 at worst); both must be positive."""
    best = 1
    for d in range(1, int(total**0.5) + 1):
        if total % d == 0:
            for candidate in (d, total // d):
                if best < candidate <= cap:
                    best = candidate
    return best


def _nearby_divisors(total: int, wanted: int) -> list[int]:
    below = largest_divisor_at_most(total, wanted)
    above = next((d for d in range(wanted + 1, total + 1) if total % d == 0), None)
    return [d for d in (below, above) if d is not None]


def resolve(raw: Mapping[str, Any], *, name: str, source: str) -> Preset:
    """Validate `raw` preset data and resolve defaults and `batch_size = "auto"`.

    Raises `PresetError` listing every unknown key, missing key, wrong type, out-of-range value
    and a batch_size that does not divide n_envs × n_steps, prefixed with `source`.
    """
    problems: list[str] = []
    for key in raw:
        if key not in _KEYS:
            problems.append(f"unknown key '{key}' (valid keys: {', '.join(_KEYS)})")
    values: dict[str, Any] = {}
    for key, spec in _KEYS.items():
        if key not in raw:
            if spec.required:
                problems.append(f"missing key '{key}'")
            else:
                values[key] = dict(spec.default) if isinstance(spec.default, dict) else spec.default
            continue
        problem = spec.check(raw[key])
        if problem:
            problems.append(f"'{key}' {problem}")
        else:
            values[key] = raw[key]

    if not problems:
        total = values["n_envs"] * values["n_steps"]
        auto = values["batch_size"] == "auto"
        if auto:
            values["batch_size"] = largest_divisor_at_most(total, values["batch_size_cap"])
        if values["batch_size"] < 2:
            # PPO normalizes advantages over each minibatch, which needs at least two samples.
            problems.append(
                f"'batch_size' resolves to {values['batch_size']} for n_envs x n_steps = {total}; PPO needs "
                "minibatches of at least 2 (raise batch_size_cap or choose n_envs x n_steps with a divisor >= 2)"
            )
        elif total % values["batch_size"]:
            near = " or ".join(str(d) for d in _nearby_divisors(total, values["batch_size"]))
            problems.append(
                f"'batch_size' {values['batch_size']} must divide n_envs x n_steps = {total}; "
                f'try {near}, or batch_size = "auto"'
            )
        values["batch_size_auto"] = auto

    if problems:
        raise PresetError(f"{source}: " + "; ".join(problems))
    values["net_arch"] = tuple(values["net_arch"])
    values["learning_rate"] = float(values["learning_rate"])
    for key in ("gamma", "gae_lambda", "clip_range", "ent_coef", "vf_coef", "max_grad_norm"):
        values[key] = float(values[key])
    return Preset(name=name, source=source, **values)


def builtin_names() -> list[str]:
    """Names of the presets shipped with cockpit, in the order a user should meet them."""
    found = {p.name[: -len(".toml")] for p in resources.files("cockpit_presets").iterdir() if p.name.endswith(".toml")}
    order = ["cartpole", "fast", "heavy", "beast"]
    return [n for n in order if n in found] + sorted(found - set(order))


def load(spec: str) -> Preset:
    """Load a preset by built-in name or by path to a `.toml` file.

    Raises `PresetError` (one line) for an unknown name, an unreadable or malformed file, or
    invalid contents.
    """
    path = Path(spec)
    if spec.endswith(".toml") or path.is_file():
        if not path.is_file():
            raise PresetError(f"{spec}: no such preset file")
        name, source = path.stem, str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise PresetError(f"{spec}: cannot read preset file ({exc.strerror})") from exc
        except UnicodeDecodeError as exc:
            raise PresetError(f"{spec}: not a UTF-8 text file ({exc.reason} at byte {exc.start})") from exc
    else:
        if spec not in builtin_names():
            raise PresetError(
                f"preset {spec!r}: no such preset; choose one of {', '.join(builtin_names())} "
                "or give a path to a .toml file"
            )
        resource = resources.files("cockpit_presets") / f"{spec}.toml"
        name, source = spec, f"presets/{spec}.toml"
        text = resource.read_text(encoding="utf-8")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PresetError(f"{source}: invalid TOML: {exc}") from exc
    return resolve(raw, name=name, source=source)


def to_toml(preset: Preset) -> str:
    """A preset file's text for `preset` (its concrete batch size, no `auto`): `load` of it gives
    `preset` back, env_kwargs included (an empty table is left out, as a file without one)."""
    values = preset.as_dict()
    return tomli_w.dumps(
        {key: values[key] for key in PRESET_KEYS if key != "batch_size_cap" and (key != "env_kwargs" or values[key])}
    )
