"""A fleet plan's search space: `[agents.search]`, the hyperparameter distributions it samples.

```toml
[agents.search]
samples = 16                      # points drawn; each is crossed with every env, preset, seed and grid combination
sampler = "tpe"                   # "random" (default), "tpe" or "qmc"
seed = 0                          # optional: the sampler's seed (default 0), so a plan draws the same points
multivariate = true               # optional, tpe only: model the keys jointly (default false)
learning_rate = { loguniform = [1e-5, 1e-3] }
gamma = { uniform = [0.9, 0.999] }
n_epochs = { int = [4, 30] }
activation = { choice = ["tanh", "relu"] }
```

This module is the data and its validation only: no sampler is imported here, so a plan is
checked (and every bad distribution reported) without Optuna installed. Every problem is one
phrase naming its key, for the plan's one-line `PlanError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Sampler = Literal["random", "tpe", "qmc"]
SAMPLERS: tuple[Sampler, ...] = ("random", "tpe", "qmc")
DistributionKind = Literal["loguniform", "uniform", "int", "choice"]
KINDS: tuple[DistributionKind, ...] = ("loguniform", "uniform", "int", "choice")
SETTINGS = ("samples", "sampler", "seed", "multivariate")  # the keys of [agents.search] that are not preset keys
WHERE = "agents.search"
# The preset keys that shape what a checkpoint holds: its network (net_arch, activation) and whether
# a VecNormalize is saved beside it (normalize). A checkpoint resumes only under the same values
# (training/model.py `_mismatches`), so PBT pairs agents only within one set of them and never
# perturbs them (cockpit.core.fleet.pbt).
ARCHITECTURE_KEYS = ("net_arch", "activation", "normalize")


@dataclass(frozen=True)
class Distribution:
    """One searched preset key: `kind` over `[low, high]` (both included; floats for loguniform and
    uniform, ints for int), or over `choices` for choice (low and high unused)."""

    key: str
    kind: DistributionKind
    low: float = 0.0
    high: float = 0.0
    choices: tuple[Any, ...] = ()

    @property
    def numeric(self) -> bool:
        """True for a range (loguniform, uniform, int), False for a choice."""
        return self.kind != "choice"

    def clip(self, value: float) -> float | int:
        """`value` brought into the range (rounded to the nearest int for an int range)."""
        inside = min(max(value, self.low), self.high)
        return round(inside) if self.kind == "int" else float(inside)

    def midpoint(self) -> Any:
        """A representative value: the geometric mean of a loguniform range, the middle of a uniform
        or int one (rounded), the first choice. What a projection measures before anything is drawn."""
        if self.kind == "loguniform":
            return math.sqrt(self.low * self.high)
        if self.kind == "uniform":
            return (self.low + self.high) / 2
        if self.kind == "int":
            return round((self.low + self.high) / 2)
        return self.choices[0]

    def extremes(self) -> tuple[Any, ...]:
        """The values a plan is checked with up front: both ends of a range, every choice."""
        if self.kind == "choice":
            return self.choices
        return (int(self.low), int(self.high)) if self.kind == "int" else (self.low, self.high)

    def describe(self) -> str:
        """`{ loguniform = [1e-05, 0.001] }`, as the plan writes it."""
        if self.kind == "choice":
            return f"{{ choice = {list(self.choices)!r} }}"
        low, high = (int(self.low), int(self.high)) if self.kind == "int" else (self.low, self.high)
        return f"{{ {self.kind} = [{low!r}, {high!r}] }}"


@dataclass(frozen=True)
class SearchSpace:
    """`[agents.search]`, validated: `samples` points drawn by `sampler` (seeded `seed`) over
    `params`, in key order; `multivariate`: TPE models the keys' joint density, not each alone."""

    samples: int
    sampler: Sampler
    seed: int
    params: tuple[Distribution, ...]
    multivariate: bool = False

    @property
    def keys(self) -> tuple[str, ...]:
        """The searched preset keys, in order."""
        return tuple(d.key for d in self.params)

    def get(self, key: str) -> Distribution | None:
        """The distribution of `key`, None when it is not searched."""
        return next((d for d in self.params if d.key == key), None)

    def midpoints(self) -> dict[str, Any]:
        """Each searched key at its `Distribution.midpoint`."""
        return {d.key: d.midpoint() for d in self.params}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _distribution(key: str, spec: Any) -> tuple[Distribution | None, list[str]]:
    where = f"'{WHERE}.{key}'"
    shapes = "{ loguniform = [low, high] }, { uniform = [low, high] }, { int = [low, high] } or { choice = [...] }"
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in KINDS:
        return None, [f"{where} must be one of {shapes}, got {spec!r}"]
    kind, value = next(iter(spec.items()))
    if kind == "choice":
        if not isinstance(value, list) or not value:
            return None, [f"{where}: choice takes a non-empty list of values, got {value!r}"]
        if len({repr(v) for v in value}) != len(value):
            return None, [f"{where}: choice lists a value twice: {value!r}"]
        return Distribution(key, "choice", choices=tuple(value)), []
    if not isinstance(value, list) or len(value) != 2:
        return None, [f"{where}: {kind} takes [low, high], got {value!r}"]
    low, high = value
    if kind == "int" and not (_is_int(low) and _is_int(high)):
        return None, [f"{where}: int takes two integers [low, high], got {value!r}"]
    if not (_is_number(low) and _is_number(high)):
        return None, [f"{where}: {kind} takes two numbers [low, high], got {value!r}"]
    if not low < high:
        return None, [f"{where}: {kind} needs low < high, got {value!r}"]
    if kind == "loguniform" and low <= 0:
        return None, [f"{where}: loguniform needs 0 < low < high, got {value!r}"]
    return Distribution(key, kind, float(low), float(high)), []


def parse_search(
    value: Any, *, preset_keys: tuple[str, ...], grid_keys: tuple[str, ...] = ()
) -> tuple[SearchSpace | None, list[str]]:
    """(`[agents.search]` validated, problems): None and no problems when the plan has no search;
    with problems, the distributions that parsed (None if none did), so the plan checks them too.
    `preset_keys`: the keys a distribution may name; `grid_keys`: those `[agents.overrides]` lists
    already (a key is searched or listed, not both). Whether each drawn value suits its preset is the
    plan's check (`Distribution.extremes`), not this one's."""
    if value is None:
        return None, []
    if not isinstance(value, Mapping):
        return None, [f"'{WHERE}' must be a table of distributions, got {value!r}"]
    problems: list[str] = []
    samples = value.get("samples")
    if samples is None:
        problems.append(f"'{WHERE}.samples' is missing: say how many points to draw")
    elif not _is_int(samples) or samples < 1:
        problems.append(f"'{WHERE}.samples' must be a positive integer, got {samples!r}")
    sampler = value.get("sampler", "random")
    if sampler not in SAMPLERS:
        problems.append(f"'{WHERE}.sampler' must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    seed = value.get("seed", 0)
    if not _is_int(seed) or not 0 <= seed < 2**32:
        problems.append(f"'{WHERE}.seed' must be an integer in [0, 2^32), got {seed!r}")
    multivariate = value.get("multivariate", False)
    if not isinstance(multivariate, bool):
        problems.append(f"'{WHERE}.multivariate' must be true or false, got {multivariate!r}")
    elif multivariate and sampler != "tpe":
        problems.append(f"'{WHERE}.multivariate' applies to sampler = \"tpe\" only, got sampler = {sampler!r}")
    params: list[Distribution] = []
    for key in sorted(k for k in value if k not in SETTINGS):
        if key not in preset_keys or key in ("env", "env_kwargs"):
            problems.append(
                f"unknown key '{WHERE}.{key}' (valid: {', '.join(SETTINGS)}, or any preset key but env and env_kwargs)"
            )
            continue
        if key in grid_keys:
            problems.append(f"'{WHERE}.{key}' is also listed in 'agents.overrides': search it or list it, not both")
            continue
        distribution, more = _distribution(key, value[key])
        problems += more
        if distribution is not None:
            params.append(distribution)
    if not params and not problems:
        problems.append(
            f"'{WHERE}' names no preset key to search: add one, such as learning_rate = {{ loguniform = [1e-5, 1e-3] }}"
        )
    if not params:
        return None, problems
    # Beside problems too: the plan checks the extremes of every distribution that parsed.
    count = samples if isinstance(samples, int) and _is_int(samples) and samples >= 1 else 1
    return SearchSpace(
        count,
        sampler if sampler in SAMPLERS else "random",
        seed if _is_int(seed) and 0 <= seed < 2**32 else 0,
        tuple(params),
        multivariate is True and sampler == "tpe",
    ), problems
