"""A fleet's Optuna study: the draws of `[agents.search]`, asked and told.

One Optuna trial per draw (a draw's agents, its envs, presets, seeds and grid combinations, share
its values), in `optuna.db` beside fleet.db (`STUDY_DB`), the study named after the fleet, so a
resumed fleet loads the same study and its trial numbers go on. Optuna is asked through its
ask-and-tell interface only: the fleet, not Optuna, decides what trains and who is promoted; the
study observes.

- **asked lazily**: a running fleet (`cockpit.core.fleet.draws`) asks a draw when it starts the
  draw's first agent (agents start in matrix order, draw-major), so a learning sampler (TPE) has
  every score told so far;
- **recorded twice, in order**: right after `ask`, the trial carries the user attr `draw`; then
  fleet.db records the draw with its agents' values (`FleetStore.record_draw`, one transaction).
  On opening the study (`FleetSearch.__init__`), a RUNNING trial without the attr (a kill between
  ask and attr) is told FAIL; a RUNNING trial whose draw fleet.db does not hold (a kill between
  attr and record) is adopted by that draw when it is asked (`draw`): no draw is sampled twice;
- **told per tier**: as soon as none of a draw's agents is waiting or training in a tier or a
  lower one (each scored or failed in it, or went on to a higher tier), the study gets what they
  scored there (`tell`): the mean score of the draw's agents at each tier up to it, as
  intermediate values (step = tier), and a state: COMPLETE with that tier's mean when it is the
  plan's last, PRUNED below it (Optuna takes the last intermediate value), FAIL when every agent
  failed in tier 0. Tier 0 tells the draw's own trial; each later tier it scored in adds a trial of
  its own with the draw's values (`add_trial`, user attrs `observes` = the draw and `tier`), so one
  draw is told once per tier it reached. TPE learns from COMPLETE and PRUNED trials (complete
  ones rank first, then pruned ones by the tier they reached, then the score), and counts a
  RUNNING trial as a bad guess (the constant liar): a draw told only when it stopped would count
  as bad for as long as it trained in the higher tiers, which are the draws that did best. A PBT
  agent that copied another's checkpoint has other values than its draw's: a tier after such an
  exploit is not told. Each step checks what the study holds first (`observed`), so a resumed
  fleet repeats none;

Samplers: `random` is `RandomSampler`, `tpe` `TPESampler` (univariate unless the plan says
`multivariate`, constant liar: the draws in flight count as bad guesses so parallel slots do not
all draw the same point), `qmc` `QMCSampler` (a Sobol sequence scrambled with the plan's seed; its
index lives in the study, so a resume continues it). A draw a preset refuses is told PRUNED
(`refuse`). Random and TPE
are seeded per draw from the plan's seed and the draw's number: a sampler seeded once would
replay its first draws after a resume, and one seeded by the trial count would draw what the
timing of the tiers told before it (each later tier adds a trial).

Optuna is imported here, only for a plan that searches (`missing`, before anything), and in
`cockpit.core.fleet.analysis`, only to report a search fleet's importance.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.contract.searchspace import Distribution, SearchSpace

if TYPE_CHECKING:
    import optuna

STUDY_DB = "optuna.db"
DRAW_ATTR = "draw"
OBSERVES_ATTR = "observes"  # a later tier's trial: the draw it tells of, with TIER_ATTR
TIER_ATTR = "tier"
INSTALL = "pip install 'cockpit[search]'"
_PRIMITIVE = (type(None), bool, int, float, str)


def missing(source: str, sampler: str = "random") -> str | None:
    """The one line to print when a plan at `source` searches and Optuna (or, for `sampler = "qmc"`,
    SciPy, whose Sobol sequence Optuna's QMCSampler draws from) is not installed, else None."""
    if importlib.util.find_spec("optuna") is None:
        return f"{source}: [agents.search] samples with Optuna, which is not installed: {INSTALL}"
    if sampler == "qmc" and importlib.util.find_spec("scipy") is None:
        return f"{source}: 'agents.search.sampler' qmc draws with SciPy, which is not installed: {INSTALL}"
    return None


def startup_trials(samples: int) -> int:
    """TPE's random draws before it models the scores: a quarter of the draws, 2 to 10. Optuna's
    default of 10 would leave a 16-draw search mostly random; fewer than 2 gives its model nothing
    to split into good and bad."""
    return min(10, max(2, samples // 4))


def _choices(distribution: Distribution) -> tuple[Any, ...]:
    """A choice's values as Optuna stores them: None, bool, int, float and str as they are, any
    other (a list such as net_arch) as its JSON text."""
    return tuple(c if isinstance(c, _PRIMITIVE) else json.dumps(c) for c in distribution.choices)


def to_optuna(space: SearchSpace) -> dict[str, optuna.distributions.BaseDistribution]:
    """Each searched key as Optuna's distribution (loguniform: a log float range; uniform: a float
    range; int: an int range; choice: a categorical, `_choices`)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, optuna.distributions.BaseDistribution] = {}
    for d in space.params:
        if d.kind == "choice":
            out[d.key] = CategoricalDistribution(_choices(d))
        elif d.kind == "int":
            out[d.key] = IntDistribution(int(d.low), int(d.high))
        else:
            out[d.key] = FloatDistribution(d.low, d.high, log=d.kind == "loguniform")
    return out


def from_optuna(space: SearchSpace, params: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's params as preset values: a choice mapped back to the plan's value."""
    out: dict[str, Any] = {}
    for d in space.params:
        value = params[d.key]
        out[d.key] = d.choices[_choices(d).index(value)] if d.kind == "choice" else value
    return out


@dataclass(frozen=True)
class Verdict:
    """What a draw tells the study of `tier`: its agents' mean score at each tier up to it (a tier
    where they all failed has none) and whether `tier` is the plan's last."""

    tier: int
    means: dict[int, float]
    last: bool


def verdict(tier: int, scores: Mapping[int, Sequence[float]], last_tier: int) -> Verdict:
    """The verdict on `tier` of a draw whose agents scored `scores` per tier (the caller tells it
    once none of them is waiting or training at `tier` or below)."""
    means = {t: math.fsum(values) / len(values) for t, values in sorted(scores.items()) if values and t <= tier}
    return Verdict(tier, means, tier == last_tier)


class FleetSearch:
    """The study of the fleet named `name` in `run_dir`, sampling `space` (module docstring)."""

    def __init__(self, space: SearchSpace, run_dir: Path, name: str) -> None:
        import optuna

        # Optuna logs every trial at INFO: it would flood the headless log and the TUI's terminal.
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.WARNING)
        self.space = space
        self.path = run_dir / STUDY_DB
        self.storage = optuna.storages.RDBStorage(f"sqlite:///{self.path}")
        self.study = optuna.create_study(
            study_name=name, storage=self.storage, direction="maximize", load_if_exists=True, sampler=self._sampler(0)
        )
        self._study_id = self.storage.get_study_id_from_name(name)
        for trial in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if DRAW_ATTR not in trial.user_attrs:  # killed between ask and its attr: it has no draw
                self.study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        self._observed: set[tuple[int, int]] = set()  # (draw, tier) told
        for trial in self.study.get_trials(deepcopy=False):
            attrs = trial.user_attrs
            if OBSERVES_ATTR in attrs:
                self._observed.add((attrs[OBSERVES_ATTR], attrs[TIER_ATTR]))
            elif DRAW_ATTR in attrs and trial.state.is_finished():
                self._observed.add((attrs[DRAW_ATTR], 0))

    def _sampler(self, draw: int) -> optuna.samplers.BaseSampler:
        import optuna

        seed = (self.space.seed * 1_000_003 + draw) % 2**32  # per draw (module docstring)
        # Optuna calls QMCSampler, and before 5.0 TPE's constant liar, experimental: the plan chose
        # them, and the warning would be a line in the log or over the TUI.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if self.space.sampler == "tpe":
                return optuna.samplers.TPESampler(
                    seed=seed,
                    n_startup_trials=startup_trials(self.space.samples),
                    constant_liar=True,
                    multivariate=self.space.multivariate,
                )
            if self.space.sampler == "qmc":
                # The scrambled sequence is the plan's seed's, the same for every draw; only the
                # point drawn before the study has one (Optuna's independent start) is per draw, or
                # a draw asked after every earlier one failed would repeat the first.
                return optuna.samplers.QMCSampler(
                    scramble=True, seed=self.space.seed, independent_sampler=optuna.samplers.RandomSampler(seed=seed)
                )
        return optuna.samplers.RandomSampler(seed=seed)

    def draw(self, draw: int) -> tuple[int, dict[str, Any]]:
        """(trial number, preset values) for `draw`, which fleet.db does not hold yet: the RUNNING
        trial an earlier session asked for it, else a new one. The caller records it in fleet.db."""
        import optuna

        for trial in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if trial.user_attrs.get(DRAW_ATTR) == draw:
                return trial.number, from_optuna(self.space, trial.params)
        self.study.sampler = self._sampler(draw)
        asked = self.study.ask(to_optuna(self.space))
        asked.set_user_attr(DRAW_ATTR, draw)
        return asked.number, from_optuna(self.space, asked.params)

    def observed(self, draw: int, tier: int) -> bool:
        """True when the study was told `draw`'s `tier` (by this session or an earlier one)."""
        return (draw, tier) in self._observed

    def _id(self, trial: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self._study_id, trial)

    def refuse(self, draw: int, trial: int) -> None:
        """Tell the study that a preset refused `draw`'s values (its trial `trial`): PRUNED with no
        value, as rl-zoo3 tells a trial whose hyperparameters its model refuses. TPE ranks a pruned
        trial with no intermediate value below every scored one, so it learns to avoid that region;
        FAIL would leave the region as unknown as before. Once, like `tell`."""
        import optuna

        if self.observed(draw, 0):
            return
        if not self.storage.get_trial(self._id(trial)).state.is_finished():
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        self._observed.add((draw, 0))

    def tell(self, draw: int, trial: int, result: Verdict) -> None:
        """Tell the study `result`, of `draw` whose trial is `trial` (module docstring), unless it was
        told already. A later tier where every agent failed tells nothing."""
        import optuna

        if self.observed(draw, result.tier):
            return
        state = optuna.trial.TrialState
        scored = result.tier in result.means
        if result.tier == 0:
            frozen = self.storage.get_trial(self._id(trial))
            if not frozen.state.is_finished():
                for tier, mean in result.means.items():
                    if tier not in frozen.intermediate_values:
                        self.storage.set_trial_intermediate_value(self._id(trial), tier, mean)
                if scored and result.last:
                    self.study.tell(trial, result.means[0])
                else:
                    self.study.tell(trial, state=state.PRUNED if scored else state.FAIL)
        elif not scored:
            return
        else:
            asked = self.storage.get_trial(self._id(trial))
            # A pruned trial's value is its last intermediate value, as `study.tell` sets it.
            observation = optuna.trial.create_trial(
                params=asked.params,
                distributions=asked.distributions,
                value=result.means[result.tier],
                state=state.COMPLETE if result.last else state.PRUNED,
                intermediate_values=result.means,
                user_attrs={OBSERVES_ATTR: draw, TIER_ATTR: result.tier},
            )
            self.study.add_trial(observation)
        self._observed.add((draw, result.tier))
