"""Population-based training (`promotion = "pbt"`): who exploits whom, the explore rule, the copy.

At each tier boundary of a pbt fleet (Jaderberg et al., 2017, "truncation selection"):

- **exploit** (`pairs`): of the n agents of a group ranked by their tier score
  (`promotion.rank_key`), each of the bottom `PbtSettings.share(n)` (`ceil(n × quantile)` capped at
  n/2, Ray Tune's rule) copies an agent of the top as many that scored strictly more than it, drawn
  uniformly with the fleet's seeded RNG (several may copy the same one); one with no such agent
  (a tie: CartPole agents all at 500) keeps its own. The copy (`copy_checkpoint`) is the source's
  newest checkpoint directory (its weights, VecNormalize statistics, step and episode counts: what
  its score came from), made the exploiter's newest; the exploiter's own checkpoints go to
  `checkpoints/replaced/`, so its worker resumes the copy.
- **explore** (`explore`): the exploiter takes the source's searched values, each multiplied by 0.8
  or 1.2 (a fair coin) and clipped to its distribution's range (an int rounded), or, with
  `resample_probability`, resampled from its distribution (loguniform in log space). A choice key
  moves to a neighbouring choice (one left or right, a fair coin, staying put at either end), or is
  resampled with `resample_probability`, as Ray Tune's `_explore` treats a list. An architecture key
  (`searchspace.ARCHITECTURE_KEYS`: net_arch, activation, normalize) is never perturbed: the copied
  checkpoint resumes only under the network and normaliser it was saved with, so agents pair only
  within one architecture (`cockpit.core.fleet.pbt_boundary`) and keep it.

Everything is drawn from one `random.Random` per tier boundary (`rng_for`), seeded by `[pbt] seed`
and the tier, in a fixed order (the pairs, then each exploiter's keys in key order), so a plan makes
the same decisions every time. The decisions are recorded in fleet.db before any file is touched;
the file work is idempotent and redone on resume (`cockpit.core.fleet.pbt_boundary`).
"""

from __future__ import annotations

import math
import os
import random
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cockpit.contract.checkpoint_files import checkpoints_in, unverified
from cockpit.contract.files import fsync_path
from cockpit.contract.fleetplan import PbtSettings
from cockpit.contract.presets import Preset
from cockpit.contract.searchspace import ARCHITECTURE_KEYS, Distribution, SearchSpace
from cockpit.formatting import short

FACTORS = (0.8, 1.2)
REPLACED_DIR = "replaced"  # in a job's checkpoints/: the checkpoints an exploit set aside


def rng_for(seed: int, tier: int) -> random.Random:
    """The RNG of the boundary at the end of `tier`: the same draws for the same plan, whenever and
    however often the fleet is resumed."""
    return random.Random(seed * 1_000_003 + tier)


def pairs(
    ranked: Sequence[str], scores: Mapping[str, float], settings: PbtSettings, rng: random.Random
) -> list[tuple[str, str]]:
    """(exploiter, source) for each of the bottom `settings.share(n)` of `ranked` (best first) that
    an agent of the top as many outscores, worst last in the list's order, each source drawn
    uniformly from the top agents whose `scores` are strictly higher than its exploiter's (a tie is
    no reason to throw an agent's own training away)."""
    count = settings.share(len(ranked))
    if count == 0:
        return []
    top, bottom = list(ranked[:count]), list(ranked[-count:])
    out = []
    for agent in bottom:
        better = [source for source in top if scores[source] > scores[agent]]
        if better:
            out.append((agent, rng.choice(better)))
    return out


def source_for(
    agent: str, ranked: Sequence[str], scores: Mapping[str, float], settings: PbtSettings, rng: random.Random
) -> str | None:
    """The asynchronous rule (`synch = false`, Ray Tune's `synch=False`): the agent `agent` just
    scored exploits, among `ranked` (its group's agents scored at its boundary so far, itself among
    them, best first), when it is in the bottom `settings.share(n)`: a top agent that scored
    strictly more, drawn uniformly; None otherwise (the first to arrive, alone, never exploits)."""
    count = settings.share(len(ranked))
    if count == 0 or agent not in ranked[-count:]:
        return None
    better = [source for source in ranked[:count] if scores[source] > scores[agent]]
    return rng.choice(better) if better else None


def pinned_dir(checkpoints: Path, tier: int) -> Path:
    """Where a job's checkpoint from the end of `tier` is kept for asynchronous exploits (a
    subdirectory of its checkpoints/, which the worker neither lists nor prunes)."""
    return checkpoints / f"boundary-{tier}"


def pin(checkpoint: Path, tier: int) -> Path:
    """Keep `checkpoint` (a job's, at the end of `tier`) as `pinned_dir`'s copy, hard-linked (the
    worker writes a checkpoint's files once, so a link shares them safely and costs no space until
    the worker prunes its own), a copy where links are refused. Idempotent; built under a `.tmp-`
    name and renamed, so a half pin is never one. Asynchronous exploiters copy it after its agent
    has trained on and the worker has pruned the original."""
    final = pinned_dir(checkpoint.parent, tier) / checkpoint.name
    if final.is_dir():
        return final
    tmp = final.parent / f".tmp-{checkpoint.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for item in sorted(checkpoint.iterdir()):
        if item.is_file():
            try:
                os.link(item, tmp / item.name)
            except OSError:
                shutil.copyfile(item, tmp / item.name)
    fsync_path(tmp)
    os.rename(tmp, final)
    fsync_path(final.parent)
    return final


def current_values(search: SearchSpace, overrides: Mapping[str, Any], preset: Preset) -> dict[str, Any]:
    """An agent's searched values now: each from its stored `overrides` when there (a drawn or
    perturbed value), else as its plan `preset` has it (the midpoint before anything is drawn).
    The one place that knows where an agent's searched values live."""
    base = preset.as_dict()
    return {key: overrides[key] if key in overrides else base[key] for key in search.keys}


def _resample(distribution: Distribution, rng: random.Random) -> Any:
    if distribution.kind == "choice":
        return rng.choice(distribution.choices)
    if distribution.kind == "int":
        return rng.randint(int(distribution.low), int(distribution.high))
    if distribution.kind == "loguniform":
        return math.exp(rng.uniform(math.log(distribution.low), math.log(distribution.high)))
    return rng.uniform(distribution.low, distribution.high)


def _neighbour(distribution: Distribution, value: Any, rng: random.Random) -> Any:
    """A choice one to the left or right of `value` (a fair coin), the same one at either end."""
    index = distribution.choices.index(value) + rng.choice((-1, 1))
    return distribution.choices[min(max(index, 0), len(distribution.choices) - 1)]


def explore(
    values: Mapping[str, Any], search: SearchSpace, rng: random.Random, resample_probability: float
) -> dict[str, Any]:
    """`values` (the source's searched values) perturbed: each key, in key order, resampled from its
    distribution with `resample_probability`, else a number ×0.8 or ×1.2 clipped into its range (an
    int rounded), a choice moved to a neighbouring choice; a value that is neither a number nor one
    of its choices is resampled. An architecture key (`ARCHITECTURE_KEYS`) keeps its value, and
    draws nothing."""
    out: dict[str, Any] = {}
    for distribution in search.params:
        value = values[distribution.key]
        if distribution.key in ARCHITECTURE_KEYS:
            out[distribution.key] = value
            continue
        # One draw per key whatever its kind, so adding a key never shifts the draws of the others'.
        resample = rng.random() < resample_probability
        if distribution.numeric:
            known = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            known = any(_same(value, choice) for choice in distribution.choices)
        if resample or not known:
            out[distribution.key] = _resample(distribution, rng)
        elif distribution.numeric:
            out[distribution.key] = distribution.clip(value * rng.choice(FACTORS))
        else:
            out[distribution.key] = _neighbour(distribution, _as_choice(distribution, value), rng)
    return out


def _same(value: Any, choice: Any) -> bool:
    """True when `value` is `choice` as a plan writes it: a tuple is its list, True is not 1."""

    def canon(v: Any) -> str:
        return repr(list(v) if isinstance(v, tuple) else v)

    return canon(value) == canon(choice)


def _as_choice(distribution: Distribution, value: Any) -> Any:
    """The choice `value` is (`_same`)."""
    return next(choice for choice in distribution.choices if _same(value, choice))


def copy_checkpoint(source: Path, checkpoints: Path) -> Path:
    """Make a copy of the checkpoint directory `source` the only checkpoint in `checkpoints` (a
    job's), under the same name; return it. Idempotent, and safe to kill at any point: the copy is
    built under `.tmp-<name>`, fsynced and renamed into place (a half copy is never a checkpoint),
    and only then is every other checkpoint moved to `replaced/` (a rerun finds the copy in place
    and moves what is left). OSError when `source` is gone or the disk is full; ValueError (one line)
    when the copy does not match the SHA-256 sums the source's worker recorded (`checkpoint_files`)."""
    checkpoints.mkdir(parents=True, exist_ok=True)
    final = checkpoints / source.name
    if not final.is_dir():
        tmp = checkpoints / f".tmp-{source.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir()
            for item in sorted(source.iterdir()):
                if item.is_file():
                    shutil.copyfile(item, tmp / item.name)
                    fsync_path(tmp / item.name)
            fsync_path(tmp)
            problem = unverified(tmp, f"the copy of checkpoint {source}")
            if problem is not None:  # the worker would set a corrupt copy aside and start from step 0
                raise ValueError(problem)
            os.rename(tmp, final)
            fsync_path(checkpoints)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    replaced = checkpoints / REPLACED_DIR
    for other in checkpoints_in(checkpoints):
        if other != final:
            replaced.mkdir(exist_ok=True)
            shutil.rmtree(replaced / other.name, ignore_errors=True)
            os.rename(other, replaced / other.name)
    fsync_path(checkpoints)
    return final


def changes_text(changes: Mapping[str, tuple[Any, Any]]) -> str:
    """`key old -> new, ...` in key order, numbers to 3 significant figures."""
    return ", ".join(f"{key} {short(old)} -> {short(new)}" for key, (old, new) in sorted(changes.items()))
