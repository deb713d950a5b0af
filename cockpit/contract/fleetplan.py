"""A fleet plan: hundreds of agents in tiers, as a validated TOML file (`docs/fleets.md`).

```toml
name = "screen"
jobs = 4                          # parallel slots
rate_usd_per_h = 1.99             # optional: what this machine costs per hour
promotion = "async"               # or "sync", or "pbt" (population-based training: needs [agents.search])
mps = true                        # optional: the jobs on each GPU as MPS clients, as --mps (docs/gpu.md)

[agents]                          # a matrix: every combination of the lists
env = ["CartPole-v1", "Acrobot-v1"]
preset = ["cartpole"]
seeds = 50                        # a count from 0, or a list
[agents.overrides]                # optional; any preset key, each a list
learning_rate = [1e-3, 3e-4]
[agents.search]                   # optional: distributions sampled (cockpit.contract.searchspace)
samples = 8
ent_coef = { loguniform = [1e-4, 1e-1] }

[[tiers]]
timesteps = 500_000               # or every tier in whole episodes: episodes = 3_000
promote = 0.25                    # a fraction in (0, 1], or a count >= 1, promoted to the next tier
[[tiers]]
timesteps = 2_000_000

[score]
episodes = 10                     # deterministic evaluation episodes when an agent ends a tier

[video]                           # optional: when the fleet ends, a clip of each of the top K agents
top = 3                           # of the last tier, beside its model in models/ (model_manifest)

[pbt]                             # optional, with promotion = "pbt" (cockpit.core.fleet.pbt)
quantile = 0.25                   # the bottom share copies an agent of the top share, in (0, 0.5]
resample_probability = 0.25       # each searched key resampled instead of x0.8 / x1.2
seed = 0                          # the exploit and explore draws' seed
synch = true                      # false: an agent exploits as it reaches a boundary (Ray's synch=False)
burn_in_period = 0                # steps before which no agent exploits (Ray's burn_in_period)
exploit = true                    # false: the no-exploit control (everyone trains and is scored, none copies)
```

With `promotion = "pbt"` nobody is culled: every agent trains through every tier, so no tier may
say `promote`, and `[agents.search]` (what PBT perturbs) is required.

`load_plan` checks everything before anything starts and reports every problem in one
`PlanError` line that names the file and each key, as preset files do. Every agent's preset (the
named preset, on its env, with its overrides) is resolved here, so a bad override value or a batch
size that no longer divides the rollout is caught up front too.

With `[agents.search]`, the matrix is `samples` draws, each crossed with every env, preset, seed
and grid combination, draw-major (draw 0's agents first, so a sampler that learns from scores has
results before the later draws). The values of a draw are not known until it is drawn: an agent's
`preset` here holds the searched keys at their midpoints (`Distribution.midpoint`), what a
projection measures; `with_values` applies the drawn ones. Each distribution is checked up front at
its extremes on every base preset.

A plan makes at most `MAX_AGENTS` agents, counted from its lists' lengths before any is built.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from cockpit.contract.envids import EnvError, UnknownEnvError, backend_for, check_env
from cockpit.contract.presets import PRESET_KEYS, Preset, PresetError, largest_divisor_at_most, load, resolve
from cockpit.contract.rundir import RUN_NAME_PATTERN, RUN_NAME_RULE
from cockpit.contract.searchspace import ARCHITECTURE_KEYS, SearchSpace, parse_search
from cockpit.contract.toml import tomllib

Promotion = Literal["sync", "async", "pbt"]
PROMOTIONS: tuple[Promotion, ...] = ("sync", "async", "pbt")
Unit = Literal["timesteps", "episodes"]  # what a plan's tiers count: every tier the same
MAX_SEED = 2**31 - 1
# The most agents a plan may make: twice the largest fleet measured (docs/fleets.md, Scale). The
# matrix is counted from the lists' lengths before any of it is built, so a plan of 30 million
# seeds is refused in one line instead of filling memory.
MAX_AGENTS = 10_000
NAME_PATTERN = RUN_NAME_PATTERN  # the plan's name is the fleet's run name: one rule for both
TOP_KEYS = ("name", "jobs", "rate_usd_per_h", "promotion", "mps", "agents", "tiers", "score", "pbt", "video")
PBT_KEYS = ("quantile", "resample_probability", "seed", "synch", "burn_in_period", "schedule", "exploit")
AGENT_KEYS = ("env", "preset", "seeds", "overrides", "search")
TIER_KEYS = ("timesteps", "episodes", "promote")
SCORE_KEYS = ("episodes",)


class PlanError(ValueError):
    """A plan that cannot run; the message is one line naming the file and every bad key."""


@dataclass(frozen=True)
class Tier:
    """Agents train to `target` in total, counted in `unit` (steps, or whole episodes as
    `cockpit run --episodes` counts them); then `promote` of them (a fraction of those that reached
    this tier, or a count) go on to the next tier. The last tier promotes no one."""

    target: int
    promote: float | int | None
    unit: Unit = "timesteps"

    @property
    def timesteps(self) -> int | None:
        """The step target, None for a tier in episodes."""
        return self.target if self.unit == "timesteps" else None

    @property
    def episodes(self) -> int | None:
        """The episode target, None for a tier in steps."""
        return self.target if self.unit == "episodes" else None

    def promoted(self, agents: int) -> int:
        """How many of `agents` that finish this tier go on (0 for the last tier)."""
        if self.promote is None:
            return 0
        if isinstance(self.promote, float):
            # The small epsilon keeps 0.3 x 10 at 3, not 2.9999.
            return min(agents, math.floor(agents * self.promote + 1e-9))
        return min(agents, self.promote)


@dataclass(frozen=True)
class PbtSettings:
    """`[pbt]`: at each tier boundary the bottom `share` of each group's ranked agents each copy a
    better agent of the top `share` and perturb its searched values, each key resampled with
    `resample_probability` (else x0.8 or x1.2, a choice to a neighbour); `seed` seeds those draws, so
    a fleet is reproducible (`cockpit.core.fleet.pbt`). `synch` and `burn_in_period`: when an agent
    exploits; `schedule`, for a replay: each tier's values instead of any exploit. `exploit = false` is PBT's
    control: the same agents, tiers and scoring, and nobody copies or perturbs (`share` is 0)."""

    quantile: float = 0.25
    resample_probability: float = 0.25
    seed: int = 0
    # False: an agent exploits as soon as it reaches a boundary, against its group's agents already
    # scored there (Ray Tune's `synch=False`); True: once the whole tier is scored.
    synch: bool = True
    burn_in_period: int = 0  # steps: an agent whose score is from fewer steps never exploits
    # A replay (`cockpit fleet --replay`): each tier's values, set at its start; no exploit at all.
    schedule: tuple[tuple[tuple[str, Any], ...], ...] = ()
    exploit: bool = True  # false: the no-exploit control (`share` is 0)

    def share(self, agents: int) -> int:
        """How many of a group of `agents` are the bottom share, and the top: `ceil(agents ×
        quantile)` capped at half the group (Ray Tune's PopulationBasedTraining `_quantiles`), so a
        group of two or three exploits once a boundary at the default quantile, and one of one never;
        0 for every group with `exploit` off."""
        if not self.exploit:
            return 0
        # The epsilon keeps 0.3 x 10 at 3, not 4 (its float is 3.0000000000000004).
        return min(math.ceil(agents * self.quantile - 1e-9), agents // 2)


@dataclass(frozen=True)
class Agent:
    """One agent of the matrix: its env, its resolved preset (overrides applied) and its seed.
    `draw`: which of `[agents.search]`'s samples it trains (None without a search); its `preset`
    then holds the searched keys at their midpoints until the draw is made (module docstring), and
    `unsearched` the preset the drawn values are applied to (`with_values`), so a rounded batch
    size is rounded from the plan's, not from the midpoint's."""

    index: int
    env: str
    preset_name: str
    overrides: tuple[tuple[str, Any], ...]
    seed: int
    preset: Preset
    draw: int | None = None
    unsearched: Preset | None = None  # with a search or a schedule: the preset before any of its keys is set

    @property
    def id(self) -> str:
        """A short stable id, the agent's position in the matrix."""
        return f"a{self.index:04d}"


@dataclass(frozen=True)
class FleetPlan:
    """A validated plan (see the module docstring). `agents` is the whole matrix, in order."""

    source: str
    name: str
    jobs: int
    rate_usd_per_h: float | None
    promotion: Promotion
    agents: tuple[Agent, ...]
    tiers: tuple[Tier, ...]
    score_episodes: int
    mps: bool = False  # `mps = true`: the jobs on each GPU are MPS clients, as `--mps` makes them
    search: SearchSpace | None = None  # `[agents.search]`, None for a grid alone
    pbt: PbtSettings | None = None  # `[pbt]` settings, for `promotion = "pbt"` only
    video_top: int = 0  # `[video] top = K`: clips of the last tier's top K agents when the fleet ends

    @property
    def unit(self) -> Unit:
        """What every tier's target counts: steps or whole episodes."""
        return self.tiers[0].unit

    def funnel(self) -> list[int]:
        """How many agents train in each tier: all of them in the first, then each tier's promoted
        (every agent in every tier for pbt, which culls no one)."""
        if self.promotion == "pbt":
            return [len(self.agents)] * len(self.tiers)
        counts = [len(self.agents)]
        for tier in self.tiers[:-1]:
            counts.append(tier.promoted(counts[-1]))
        return counts


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _promotes(value: Any) -> bool:
    """True for a fraction in (0, 1] or a count >= 1."""
    return 0.0 < value <= 1.0 if isinstance(value, float) else _positive_int(value)


def _unknown(table: Mapping[str, Any], valid: tuple[str, ...], where: str) -> list[str]:
    return [f"unknown key '{where}{key}' (valid: {', '.join(valid)})" for key in table if key not in valid]


def _string_list(value: Any, key: str) -> tuple[list[str], list[str]]:
    """(the strings, problems) for a key that takes a string or a non-empty list of strings."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(v, str) and v for v in items):
        return [], [f"'{key}' must be a string or a non-empty list of strings, got {value!r}"]
    return items, []


def _seed_count(value: Any) -> int:
    """How many seeds `agents.seeds` names (1 for a value `_seeds` refuses)."""
    return value if _positive_int(value) else len(value) if isinstance(value, list) and value else 1


def _override_count(value: Any) -> int:
    """How many combinations `agents.overrides` makes (1 for a value `_overrides` refuses)."""
    lists = value.values() if isinstance(value, dict) else ()
    return math.prod(len(v) for v in lists if isinstance(v, list) and v)


def _too_many(agents_raw: Mapping[str, Any], search: SearchSpace | None) -> str | None:
    """The problem of a matrix over MAX_AGENTS, counted from its lists' lengths; None within it."""
    counts = {
        "agents.env": len(v) if isinstance(v := agents_raw.get("env"), list) and v else 1,
        "agents.preset": len(v) if isinstance(v := agents_raw.get("preset"), list) and v else 1,
        "agents.overrides": _override_count(agents_raw.get("overrides")),
        "agents.seeds": _seed_count(agents_raw.get("seeds")),
        "agents.search.samples": search.samples if search is not None else 1,
    }
    total = math.prod(counts.values())
    if total <= MAX_AGENTS:
        return None
    factors = " x ".join(f"'{key}' {count:,}" for key, count in counts.items() if count > 1)
    return f"the plan makes {total:,} agents ({factors}); a plan may make at most {MAX_AGENTS:,}: split it into fleets"


def _seeds(value: Any) -> tuple[list[int], list[str]]:
    if _positive_int(value):
        return list(range(value)), []
    ok = isinstance(value, list) and value and all(isinstance(s, int) and not isinstance(s, bool) for s in value)
    if not ok or not all(0 <= s <= MAX_SEED for s in value):
        return [], [f"'agents.seeds' must be a count >= 1 or a non-empty list of seeds in [0, 2^31), got {value!r}"]
    if len(set(value)) != len(value):
        return [], [f"'agents.seeds' lists a seed twice: {value!r}"]
    return list(value), []


def _tiers(value: Any, *, pbt: bool = False) -> tuple[list[Tier], list[str]]:
    if not isinstance(value, list) or not value or not all(isinstance(t, dict) for t in value):
        return [], ["'tiers' must be one or more [[tiers]] tables, each with 'timesteps' or 'episodes'"]
    tiers: list[Tier] = []
    problems: list[str] = []
    units = [unit for unit in ("timesteps", "episodes") if any(unit in table for table in value)]
    if len(units) == 2:
        # Promotion resumes an agent to the next tier's total: a total in another unit than the
        # last one's has no order with it, and the projection one unit to add up.
        problems.append("'tiers': give every tier 'timesteps' or every tier 'episodes', not some of each")
    unit: Unit = "episodes" if units == ["episodes"] else "timesteps"
    for i, table in enumerate(value):
        where = f"tiers[{i}]"
        problems += _unknown(table, TIER_KEYS, f"{where}.")
        target = table.get(unit)
        if len(units) == 2 and target is None:  # said above: no second line for this tier
            target = 0
        elif not _positive_int(target):
            problems.append(f"'{where}.{unit}' must be a positive integer, got {target!r}")
            target = 0
        promote = table.get("promote")
        last = i == len(value) - 1
        if pbt and promote is not None:
            problems.append(
                f"'{where}.promote': promotion = \"pbt\" trains every agent through every tier (the "
                "bottom share copies the top share instead of being culled); remove it"
            )
            promote = None
        elif pbt:
            pass
        elif last and promote is not None:
            problems.append(f"'{where}.promote': the last tier promotes to nothing; remove it")
            promote = None
        elif not last and promote is None:
            problems.append(f"'{where}.promote' is missing: say how many go on to tier {i + 1}")
        elif not last and not _promotes(promote):
            problems.append(f"'{where}.promote' must be a fraction in (0, 1] or a count >= 1, got {promote!r}")
        if i and tiers and target and target <= tiers[-1].target:
            problems.append(f"'{where}.{unit}' {target:,} must be more than the tier before it ({tiers[-1].target:,})")
        tiers.append(Tier(target, promote, unit))
    return tiers, problems


def _pbt(value: Any, wanted: bool) -> tuple[PbtSettings | None, list[str]]:
    """(`[pbt]` validated, problems); None for a plan that does not promote by pbt."""
    if value is not None and not wanted:
        return None, ["'pbt' is only for promotion = \"pbt\": remove the table or set the promotion"]
    if not wanted:
        return None, []
    if value is None:
        return PbtSettings(), []
    if not isinstance(value, dict):
        return PbtSettings(), [f"'pbt' must be a table, got {value!r}"]
    problems = _unknown(value, PBT_KEYS, "pbt.")
    default = PbtSettings()
    quantile = value.get("quantile", default.quantile)
    if not (_positive_number(quantile) and quantile <= 0.5):
        problems.append(
            f"'pbt.quantile' must be a fraction in (0, 0.5] (the bottom and the top share), got {quantile!r}"
        )
        quantile = default.quantile
    resample = value.get("resample_probability", default.resample_probability)
    number = isinstance(resample, (int, float)) and not isinstance(resample, bool)
    if not (number and 0 <= resample <= 1):
        problems.append(f"'pbt.resample_probability' must be a probability in [0, 1], got {resample!r}")
        resample = default.resample_probability
    seed = value.get("seed", default.seed)
    if not (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**32):
        problems.append(f"'pbt.seed' must be an integer in [0, 2^32), got {seed!r}")
        seed = default.seed
    synch = value.get("synch", default.synch)
    if not isinstance(synch, bool):
        problems.append(
            f"'pbt.synch' must be true (exploit once a tier is scored) or false (as each agent ends it), got {synch!r}"
        )
        synch = default.synch
    burn_in = value.get("burn_in_period", default.burn_in_period)
    if not (isinstance(burn_in, int) and not isinstance(burn_in, bool) and burn_in >= 0):
        problems.append(f"'pbt.burn_in_period' must be a whole number of steps >= 0, got {burn_in!r}")
        burn_in = default.burn_in_period
    exploit = value.get("exploit", default.exploit)
    if not isinstance(exploit, bool):
        problems.append(f"'pbt.exploit' must be true or false (false: nobody copies or perturbs), got {exploit!r}")
        exploit = default.exploit
    schedule, more = _schedule(value.get("schedule"))
    settings = PbtSettings(float(quantile), float(resample), seed, synch, burn_in, schedule, exploit)
    return settings, problems + more


def _schedule(value: Any) -> tuple[tuple[tuple[tuple[str, Any], ...], ...], list[str]]:
    """`[pbt] schedule` as each tier's (key, value) pairs in key order, and its problems: a list of
    tables of preset keys (but env and env_kwargs), every table the same keys."""
    if value is None:
        return (), []
    rule = "a list of tables, one per tier, each the same preset keys"
    if not isinstance(value, list) or not value or not all(isinstance(t, dict) and t for t in value):
        return (), [f"'pbt.schedule' must be {rule}, got {value!r}"]
    keys = sorted(value[0])
    bad = sorted({k for t in value for k in t if k not in PRESET_KEYS or k in ("env", "env_kwargs")})
    if bad:
        return (), [f"unknown key 'pbt.schedule.{bad[0]}' (valid: any preset key but env and env_kwargs)"]
    if any(sorted(t) != keys for t in value):
        return (), [f"'pbt.schedule' must be {rule}: its tables set {', '.join(sorted({k for t in value for k in t}))}"]
    return tuple(tuple((k, t[k]) for k in keys) for t in value), []


def _schedule_problems(
    schedule: tuple[tuple[tuple[str, Any], ...], ...],
    tiers: list[Tier],
    search: SearchSpace | None,
    grid_keys: tuple[str, ...],
    bases: Mapping[tuple[str, str, tuple[tuple[str, Any], ...]], Preset],
) -> list[str]:
    """A replay's schedule against the plan: one table per tier, no search beside it, no key of the
    grid, an architecture key the same in every tier (a checkpoint resumes only under its network),
    and each tier's values taken by every base preset."""
    if len(schedule) != len(tiers):
        return [f"'pbt.schedule' has {len(schedule)} table(s) for {len(tiers)} tier(s): give one per tier"]
    if search is not None:
        return ["'pbt.schedule' replays fixed values: drop [agents.search] (or the schedule)"]
    problems = [
        f"'pbt.schedule.{k}' is also in [agents.overrides]: set it in one" for k, _ in schedule[0] if k in grid_keys
    ]
    for key in (k for k, _ in schedule[0] if k in ARCHITECTURE_KEYS):
        if len({repr(dict(t)[key]) for t in schedule}) > 1:
            problems.append(
                f"'pbt.schedule.{key}' changes between tiers: a checkpoint resumes only under its own {key}"
            )
    for i, values in enumerate(schedule):
        for (env, spec, _combo), base in bases.items():
            try:
                with_values(base, dict(values))
            except PresetError as exc:
                problems.append(f"'pbt.schedule' tier {i} on {spec}/{env}: {exc}")
                break
    return problems


def _overrides(value: Any) -> tuple[list[tuple[tuple[str, Any], ...]], list[str]]:
    """Every combination of the override lists, as (key, value) pairs in key order."""
    if value is None:
        return [()], []
    if not isinstance(value, dict):
        return [], [f"'agents.overrides' must be a table of lists, got {value!r}"]
    problems = []
    for key, values in value.items():
        if key not in PRESET_KEYS or key in ("env", "env_kwargs"):
            problems.append(f"unknown key 'agents.overrides.{key}' (valid: any preset key but env and env_kwargs)")
        elif not isinstance(values, list) or not values:
            problems.append(f"'agents.overrides.{key}' must be a non-empty list, got {values!r}")
    if problems:
        return [], problems
    keys = sorted(value)
    return [tuple(zip(keys, combo, strict=True)) for combo in itertools.product(*(value[k] for k in keys))], []


def with_values(preset: Preset, values: Mapping[str, Any]) -> Preset:
    """`preset` with `values` (preset keys) set, resolved again; PresetError for a value the preset
    refuses. The rule for a batch size that no longer divides the rollout (docs/fleets.md): it is
    rounded down to the largest divisor of n_envs x n_steps at or below it, as `batch_size =
    "auto"` caps it, never a refusal. An `"auto"` batch size stays auto unless `values` sets it."""
    data = {**preset.as_dict(), **values}
    if preset.batch_size_auto and "batch_size" not in values:
        data["batch_size"] = "auto"
    batch = data.get("batch_size")
    if isinstance(batch, int) and not isinstance(batch, bool) and batch >= 1:
        n_envs, n_steps = data.get("n_envs"), data.get("n_steps")
        if isinstance(n_envs, int) and isinstance(n_steps, int) and n_envs > 0 and n_steps > 0:
            data["batch_size"] = largest_divisor_at_most(n_envs * n_steps, batch)
    return resolve({key: data[key] for key in PRESET_KEYS if key in data}, name=preset.name, source=preset.source)


def _search_problems(
    search: SearchSpace, bases: Mapping[tuple[str, str, tuple[tuple[str, Any], ...]], Preset]
) -> list[str]:
    """Each distribution at each of its extremes (the other keys as the base preset has them) on
    every base preset: a phrase naming the key and the value for each one a preset refuses."""
    problems: list[str] = []
    for distribution in search.params:
        for value in distribution.extremes():
            for (env, spec, _combo), base in bases.items():
                try:
                    with_values(base, {distribution.key: value})
                except PresetError as exc:
                    problems.append(
                        f"'agents.search.{distribution.key}' {distribution.describe()} draws {value!r}, "
                        f"which {spec}/{env} refuses: {exc}"
                    )
                    break
    return problems


def _beside(spec: str, source: str) -> str:
    """A preset file named relative to the plan file, as an absolute path (so a resumed fleet finds
    it from anywhere); a built-in name or an absolute path as given."""
    path = Path(spec)
    if path.is_absolute() or not (spec.endswith(".toml") or "/" in spec):
        return spec
    beside = Path(source).parent / path
    return str(beside.resolve()) if beside.is_file() else str(path.resolve()) if path.is_file() else spec


def parse_plan(raw: Mapping[str, Any], source: str) -> FleetPlan:
    """Validate a plan's TOML data; PlanError (one line, prefixed by `source`) listing every problem."""
    problems = _unknown(raw, TOP_KEYS, "")
    name = raw.get("name", Path(source).stem)
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        problems.append(f"'name' must be {RUN_NAME_RULE} (a path component), got {name!r}")
    jobs = raw.get("jobs", 2)
    if not _positive_int(jobs):
        problems.append(f"'jobs' must be a positive integer, got {jobs!r}")
    rate = raw.get("rate_usd_per_h")
    if rate is not None and not _positive_number(rate):
        problems.append(f"'rate_usd_per_h' must be a positive number of dollars per hour, got {rate!r}")
    promotion = raw.get("promotion", "sync")
    if promotion not in PROMOTIONS:
        problems.append(f"'promotion' must be 'sync', 'async' or 'pbt', got {promotion!r}")
    pbt, more = _pbt(raw.get("pbt"), promotion == "pbt")
    problems += more
    mps = raw.get("mps", False)
    if not isinstance(mps, bool):
        problems.append(f"'mps' must be true or false, got {mps!r}")
    score = raw.get("score", {})
    episodes = 10
    if not isinstance(score, dict):
        problems.append(f"'score' must be a table, got {score!r}")
    else:
        problems += _unknown(score, SCORE_KEYS, "score.")
        episodes = score.get("episodes", 10)
        if not _positive_int(episodes):
            problems.append(f"'score.episodes' must be a positive integer, got {episodes!r}")
    video = raw.get("video", {})
    video_top = video.get("top", 0) if isinstance(video, dict) and set(video) <= {"top"} else None
    if video_top is None or isinstance(video_top, bool) or not isinstance(video_top, int) or video_top < 0:
        problems.append(
            f"'[video]' takes top = K, the top agents of the last tier to record a clip of (K >= 0), got {video!r}"
        )
    tiers, tier_problems = _tiers(raw.get("tiers"), pbt=promotion == "pbt")
    problems += tier_problems

    agents_raw = raw.get("agents")
    envs: list[str] = []
    presets: list[str] = []
    seeds: list[int] = []
    combos: list[tuple[tuple[str, Any], ...]] = []
    search: SearchSpace | None = None
    search_problems: list[str] = []
    if not isinstance(agents_raw, dict):
        problems.append("'agents' is missing: an [agents] table with env, preset and seeds")
    else:
        problems += _unknown(agents_raw, AGENT_KEYS, "agents.")
        for key in ("env", "preset", "seeds"):
            if key not in agents_raw:
                problems.append(f"'agents.{key}' is missing")
        grid = agents_raw.get("overrides")
        # Said after the presets resolve, so the extremes of the distributions that parsed are checked too.
        search, search_problems = parse_search(
            agents_raw.get("search"), preset_keys=PRESET_KEYS, grid_keys=tuple(grid) if isinstance(grid, dict) else ()
        )
        too_many = _too_many(agents_raw, search)
        if too_many is not None:  # before the seeds or the grid are listed: nothing else is worth building
            raise PlanError(f"{source}: " + "; ".join(dict.fromkeys([*problems, too_many])))
        envs, more = _string_list(agents_raw.get("env", []), "agents.env") if "env" in agents_raw else ([], [])
        problems += more
        presets, more = _string_list(agents_raw["preset"], "agents.preset") if "preset" in agents_raw else ([], [])
        problems += more
        seeds, more = _seeds(agents_raw["seeds"]) if "seeds" in agents_raw else ([], [])
        problems += more
        combos, more = _overrides(agents_raw.get("overrides"))
        problems += more

    for env in envs:
        try:
            backend_for(env, source="'agents.env'")
        except UnknownEnvError as exc:
            problems.append(str(exc))
    presets = [_beside(spec, source) for spec in presets]
    loaded: dict[str, Preset] = {}
    for spec in presets:
        try:
            loaded[spec] = load(spec)
        except PresetError as exc:
            problems.append(f"'agents.preset': {exc}")
    resolved: dict[tuple[str, str, tuple[tuple[str, Any], ...]], Preset] = {}
    if not problems:
        for env, spec, combo in itertools.product(envs, presets, combos):
            base = loaded[spec]
            data = {**base.as_dict(), "env": env, **dict(combo)}
            if base.batch_size_auto and "batch_size" not in dict(combo):
                data["batch_size"] = "auto"
            raw_preset = {key: data[key] for key in PRESET_KEYS}
            try:
                resolved[env, spec, combo] = resolve(raw_preset, name=base.name, source=base.source)
            except PresetError as exc:
                where = ", ".join(f"{k}={v!r}" for k, v in combo) or "no overrides"
                problems.append(f"'agents.overrides' ({where}) on {spec}/{env}: {exc}")
    if not problems and search is not None:
        problems += _search_problems(search, resolved)
    schedule = pbt.schedule if pbt is not None else ()
    if schedule and not problems:
        grid = agents_raw.get("overrides") if isinstance(agents_raw, dict) else None
        problems += _schedule_problems(schedule, tiers, search, tuple(grid) if isinstance(grid, dict) else (), resolved)
    boundary = tiers[-2].timesteps if len(tiers) > 1 else None  # in steps: a plan in episodes is not checked
    if pbt is not None and pbt.burn_in_period and boundary is not None and pbt.burn_in_period >= boundary:
        problems.append(
            f"'pbt.burn_in_period' {pbt.burn_in_period:,} is at or past the last tier boundary "
            f"({boundary:,} steps): no agent would ever exploit; lower it below that"
        )
    if promotion == "pbt" and search is None and not schedule and not search_problems and isinstance(agents_raw, dict):
        problems.append(
            "'promotion' = \"pbt\" perturbs the searched keys: add an [agents.search] table, such as "
            "learning_rate = { loguniform = [1e-5, 1e-3] } with samples = the population size"
        )
    problems = search_problems + problems
    if not problems:  # a custom env, or env_kwargs, is built once per distinct pair (envids.check_env)
        checked: set[tuple[str, str]] = set()
        for (env, _spec, _combo), preset in resolved.items():
            pair = (env, repr(sorted(preset.env_kwargs.items())))
            if pair not in checked:
                checked.add(pair)
                try:
                    check_env(
                        env,
                        preset.env_kwargs,
                        source="'agents.env'",
                        kwargs_source=f"'agents.preset' {preset.source}: env_kwargs",
                    )
                except EnvError as exc:
                    problems.append(str(exc))
    if problems:
        raise PlanError(f"{source}: " + "; ".join(dict.fromkeys(problems)))
    if search is None and schedule:  # a replay: tier 0's values are each agent's overrides, as a draw's are
        first = dict(schedule[0])
        agents = tuple(
            Agent(
                i,
                env,
                spec,
                tuple(sorted({**dict(combo), **first}.items())),
                seed,
                with_values(resolved[env, spec, combo], first),
                None,
                resolved[env, spec, combo],
            )
            for i, (env, spec, combo, seed) in enumerate(itertools.product(envs, presets, combos, seeds))
        )
    elif search is None:
        agents = tuple(
            Agent(i, env, spec, combo, seed, resolved[env, spec, combo])
            for i, (env, spec, combo, seed) in enumerate(itertools.product(envs, presets, combos, seeds))
        )
    else:
        try:
            middle = {key: with_values(p, search.midpoints()) for key, p in resolved.items()}
        except PresetError as exc:  # each extreme suits the presets alone, the midpoints together do not
            points = ", ".join(f"{k}={v!r}" for k, v in search.midpoints().items())
            raise PlanError(
                f"{source}: 'agents.search' at each key's midpoint ({points}), what the projection "
                f"measures, is refused: {exc}"
            ) from None
        agents = tuple(
            Agent(i, env, spec, combo, seed, middle[env, spec, combo], draw, resolved[env, spec, combo])
            for i, (draw, env, spec, combo, seed) in enumerate(
                itertools.product(range(search.samples), envs, presets, combos, seeds)
            )
        )
    plan = FleetPlan(
        source,
        name,
        jobs,
        float(rate) if rate is not None else None,
        promotion,
        agents,
        tuple(tiers),
        episodes,
        mps=mps,
        search=search,
        pbt=pbt,
        video_top=int(video_top or 0),
    )
    zero = [i for i, count in enumerate(plan.funnel()) if count == 0]
    if zero:
        tier = zero[0] - 1
        raise PlanError(
            f"{source}: 'tiers[{tier}].promote' promotes no one of the {plan.funnel()[tier]} agents that "
            f"reach tier {tier}: raise it or drop the tiers after it"
        )
    return plan


def load_plan(path: Path) -> FleetPlan:
    """Read and validate the plan file at `path`; PlanError (one line naming the file) otherwise."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanError(f"{source}: no such plan file") from None
    except OSError as exc:
        raise PlanError(f"{source}: cannot read the plan ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise PlanError(f"{source}: not a UTF-8 text file ({exc.reason})") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{source}: invalid TOML: {exc}") from None
    return parse_plan(raw, source)


def pbt_notes(plan: FleetPlan) -> list[str]:
    """What a pbt plan's groups mean for its exploits, said once before it runs (the dry run prints
    these lines, a fleet's first notices are these): each group of agents (env, preset and grid
    overrides: a checkpoint resumes only under its own env and network) too small for anyone to
    exploit, and the searched architecture keys, whose agents pair only with agents that drew the
    same values; with `exploit = false`, only that nobody exploits. Empty for any other plan, or a
    pbt plan whose every group exploits."""
    if plan.pbt is None or plan.search is None:  # a replay's schedule exploits nothing: nothing to say
        return []
    if not plan.pbt.exploit:
        return ["pbt: exploit = false: every agent trains through every tier and is scored; nobody copies or perturbs"]
    groups: dict[tuple[str, str, tuple[tuple[str, Any], ...]], int] = {}
    for agent in plan.agents:
        key = (agent.env, agent.preset_name, agent.overrides)
        groups[key] = groups.get(key, 0) + 1
    notes = []
    for (env, preset, overrides), count in groups.items():
        if plan.pbt.share(count) == 0:
            grid = "".join(f" {key}={value}" for key, value in overrides)
            notes.append(
                f"pbt: the group {env} {preset}{grid} has {count} agent(s): it never exploits "
                "(a group needs 2 agents; add samples or seeds)"
            )
    fixed = [key for key in plan.search.keys if key in ARCHITECTURE_KEYS]
    if fixed:
        verb = "shapes" if len(fixed) == 1 else "shape"
        notes.append(
            f"pbt: {', '.join(fixed)} {verb} the saved network: an agent exploits only agents that drew the same "
            f"{' and '.join(fixed)}, and keeps them (never perturbed); an agent alone with its value never exploits"
        )
    return notes
