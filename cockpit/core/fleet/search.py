"""A fleet's Optuna studies: the draws of `[agents.search]`, asked, reported and told.

One study per env of the plan, in `optuna.db` beside fleet.db (`STUDY_DB`), named after the fleet
(`study_names`: the fleet's name for a plan of one env, `NAME/ENV` for each of several), and in
each one trial per draw: a draw's agents on that env (its presets, seeds and grid combinations)
share its values, and their scores on one env are not averaged with another env's. A resumed
fleet loads the same studies and their trial numbers go on. Optuna is asked through its
ask-and-tell interface only: the fleet, not Optuna, decides what trains and who is promoted; the
studies observe.

- **asked lazily**: a running fleet (`cockpit.core.fleet.draws`) asks a draw when it starts the
  draw's first agent (agents start in matrix order, draw-major). The draw's trial is created in
  each env's study with its user attr `draw` in one write (`enqueue_trial`, then `ask` takes it),
  the first env's study (the lead) first: its sampler draws the values, which every other env's
  trial takes as fixed params. fleet.db then records the draw (`FleetStore.record_draw`). A kill
  at any point of that leaves a trial that the same draw takes up again when it is asked (a
  waiting one is asked, a running one gets its missing params): no draw is sampled twice;
- **reported per tier**: a tier's mean score over the draw's agents on the env is reported
  (`Trial.report`, at the tier's target: its steps, or its episodes in a plan counted in
  episodes) once no agent of theirs can still score in it: none waits or trains in it or below,
  and none at rest below it can still be promoted into it (`cockpit.core.fleet.draws` says when);
  each step once, so what a late promotion scored is in the value;
- **told once**, when the draw leaves the fleet (no agent of it can score in any tier again):
  COMPLETE with its last tier's mean when it scored in the plan's last tier, PRUNED (its value
  Optuna's last intermediate value) when it stopped before, FAIL when it never scored. A draw a
  preset refuses is told PRUNED with no value (`refuse`), as rl-zoo3 tells such a trial: TPE ranks
  it below every scored one. What the studies hold is read when they open, so a resumed fleet
  reports and tells nothing twice.

Samplers: `random` is `RandomSampler`, `qmc` `QMCSampler` (a Sobol sequence scrambled with the
plan's seed; its index lives in the lead study, so a resume continues it; until a trial is told it
takes its search space from the trials in flight, Optuna 5.0's rule), both asked in the lead
study. `tpe` is `TPESampler` (univariate unless the plan says `multivariate`, constant liar), asked
in a view of the lead study built for each draw (`_view`): each draw made as the fleet stands
(`Standing`), told as it would be if it stopped now. A draw's trial stays RUNNING until the draw
leaves, and no draw leaves before the first tier closes, after the last draw is asked; TPE reads
no running trial's intermediate values, so asked in the study itself it would draw every point
at random. In the view a draw that scored counts as pruned at its highest tier (as Optuna ranks a
pruned trial: by the tier reached, then the score), one that has not scored yet as a bad guess
(the constant liar: parallel slots do not draw the same point). Random and TPE are seeded per draw
from the plan's seed and the draw's number: a sampler seeded once would replay its first draws
after a resume.

Optuna is imported here, only for a plan that searches (`missing`, before anything), and in
`cockpit.core.fleet.analysis`, only to report a search fleet's importance.
"""

from __future__ import annotations

import importlib.util
import json
import logging
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


def study_names(name: str, envs: Sequence[str]) -> dict[str, str]:
    """Each env's study in optuna.db: the fleet's `name` for a plan of one env, `NAME/ENV` for each
    of several (one study per env: an env's scores are not averaged with another's)."""
    if len(envs) == 1:
        return {envs[0]: name}
    return {env: f"{name}/{env}" for env in envs}


@dataclass(frozen=True)
class Standing:
    """A draw made, as the fleet stands when the next draw is asked (what TPE learns from): its
    agents' mean score on the lead env at each tier they scored in so far (`means`), and whether
    they scored in the plan's last tier (`last`), a preset refused its values (`refused`) or every
    agent failed without a score (`failed`). No means and neither flag: it is in flight."""

    means: Mapping[int, float]
    last: bool = False
    refused: bool = False
    failed: bool = False


def _suggest(trial: optuna.trial.Trial, name: str, distribution: optuna.distributions.BaseDistribution) -> Any:
    """`trial`'s value of `name`: the one stored or fixed, else drawn by the study's sampler."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(
            name, distribution.low, distribution.high, step=distribution.step, log=distribution.log
        )
    assert isinstance(distribution, FloatDistribution)
    return trial.suggest_float(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)


class FleetSearch:
    """The studies of the fleet named `name` in `run_dir`, one per env of `envs` (the lead first),
    sampling `space` (module docstring)."""

    def __init__(self, space: SearchSpace, run_dir: Path, name: str, envs: Sequence[str]) -> None:
        import optuna

        # Optuna logs every trial at INFO: it would flood the headless log and the TUI's terminal.
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.WARNING)
        self.space = space
        self.envs = tuple(envs)
        self.lead = self.envs[0]
        self.path = run_dir / STUDY_DB
        self.storage = optuna.storages.RDBStorage(f"sqlite:///{self.path}")
        self.names = study_names(name, self.envs)
        self.studies = {
            env: optuna.create_study(
                study_name=study, storage=self.storage, direction="maximize", load_if_exists=True,
                sampler=optuna.samplers.RandomSampler(seed=space.seed),
            )
            for env, study in self.names.items()
        }  # fmt: skip
        self._study_ids = {env: self.storage.get_study_id_from_name(study) for env, study in self.names.items()}
        self._numbers: dict[tuple[str, int], int] = {}  # (env, draw) -> trial number
        self._values: dict[tuple[str, int], dict[int, float]] = {}  # (env, draw) -> intermediate values
        self._told: set[tuple[str, int]] = set()
        for env, study in self.studies.items():
            for trial in study.get_trials(deepcopy=False):
                draw = trial.user_attrs.get(DRAW_ATTR)
                if draw is None:
                    if trial.state is optuna.trial.TrialState.RUNNING:  # an older cockpit asked, then set the attr
                        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
                    continue
                self._numbers[env, draw] = trial.number
                self._values[env, draw] = dict(trial.intermediate_values)
                if trial.state.is_finished():
                    self._told.add((env, draw))

    def _sampler(self, draw: int) -> optuna.samplers.BaseSampler:
        import optuna

        seed = (self.space.seed * 1_000_003 + draw) % 2**32  # per draw (module docstring)
        # Optuna calls QMCSampler experimental: the plan chose it, and the warning would be a line
        # in the log or over the TUI.
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

    def draw(self, draw: int, standings: Mapping[int, Standing] | None = None) -> tuple[int, dict[str, Any]]:
        """(the lead study's trial number, preset values) for `draw`, which fleet.db does not hold
        yet: the trials an earlier session made for it, completed, else new ones. `standings`: the
        draws made so far (what TPE learns from; random and qmc read the lead study itself). The
        caller records the draw in fleet.db."""
        import optuna

        distributions = to_optuna(self.space)
        fixed: dict[str, Any] = {}
        if self.space.sampler == "tpe" and (self.lead, draw) not in self._numbers:
            asked = self._view(draw, standings or {}).ask(distributions)
            fixed = dict(asked.params)
        self.studies[self.lead].sampler = self._sampler(draw)
        params = self._trial(self.lead, draw, fixed, distributions)
        for env in self.envs[1:]:
            self.studies[env].sampler = optuna.samplers.RandomSampler(seed=self.space.seed)  # draws nothing: fixed
            self._trial(env, draw, params, distributions)
        return self._numbers[self.lead, draw], from_optuna(self.space, params)

    def _trial(
        self,
        env: str,
        draw: int,
        fixed: dict[str, Any],
        distributions: dict[str, optuna.distributions.BaseDistribution],
    ) -> dict[str, Any]:
        """`draw`'s trial in `env`'s study with every param set, `fixed` ones as given: created with
        its `draw` attr in one write, or the one a killed session left (waiting, or running with
        some params unset); its params."""
        import optuna

        study = self.studies[env]
        number = self._numbers.get((env, draw))
        if number is None:
            study.enqueue_trial(fixed, user_attrs={DRAW_ATTR: draw})
            trial = study.ask()  # takes the waiting trial just enqueued
        else:
            trial_id = self.storage.get_trial_id_from_study_id_trial_number(self._study_ids[env], number)
            if self.storage.get_trial(trial_id).state is optuna.trial.TrialState.WAITING:
                trial = study.ask()
            else:
                trial = optuna.trial.Trial(study, trial_id)
        self._numbers[env, draw] = trial.number
        self._values.setdefault((env, draw), {})
        return {name: _suggest(trial, name, distribution) for name, distribution in distributions.items()}

    def _view(self, draw: int, standings: Mapping[int, Standing]) -> optuna.Study:
        """An in-memory study for TPE to draw `draw` from: each draw made, with its lead trial's
        params, told as it stands (module docstring)."""
        import optuna
        from optuna.trial import TrialState, create_trial

        view = optuna.create_study(direction="maximize", sampler=self._sampler(draw))
        asked = {t.user_attrs.get(DRAW_ATTR): t for t in self.studies[self.lead].get_trials(deepcopy=False)}
        for made, standing in sorted(standings.items()):
            trial = asked.get(made)
            if trial is None or standing.failed or len(trial.params) < len(self.space.params):
                continue  # never scored, and never will: TPE ignores a failed trial
            means = dict(standing.means)
            if standing.refused or not means:
                state, value = (TrialState.PRUNED if standing.refused else TrialState.RUNNING), None
            else:
                state, value = (TrialState.COMPLETE if standing.last else TrialState.PRUNED), means[max(means)]
            view.add_trial(create_trial(params=trial.params, distributions=trial.distributions, value=value,
                                        state=state, intermediate_values=means))  # fmt: skip
        return view

    def reported(self, draw: int, env: str) -> dict[int, float]:
        """The intermediate values `draw`'s trial in `env`'s study holds, by step."""
        return dict(self._values.get((env, draw), {}))

    def report(self, draw: int, env: str, step: int, value: float) -> None:
        """Report `value` at `step` for `draw` in `env`'s study (`Trial.report`), unless that step was
        reported or the trial told (by this session or an earlier one)."""
        import optuna

        key = (env, draw)
        if key in self._told or step in self._values[key]:
            return
        study = self.studies[env]
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self._study_ids[env], self._numbers[key])
        optuna.trial.Trial(study, trial_id).report(value, step)
        self._values[key][step] = value

    def told(self, draw: int) -> bool:
        """True when `draw`'s trial in every env's study was told (by this session or an earlier one)."""
        return all((env, draw) in self._told for env in self.envs)

    def finish(self, draw: int, env: str, *, complete: bool) -> None:
        """Tell `draw`'s trial in `env`'s study, once: COMPLETE with its last reported value when it
        scored in the plan's last tier (`complete`), else PRUNED when it reported a value (Optuna
        takes the last one), FAIL when it reported none."""
        import optuna

        key = (env, draw)
        if key in self._told:
            return
        values, study, state = self._values[key], self.studies[env], optuna.trial.TrialState
        if complete and values:
            study.tell(self._numbers[key], values[max(values)])
        else:
            study.tell(self._numbers[key], state=state.PRUNED if values else state.FAIL)
        self._told.add(key)

    def refuse(self, draw: int) -> None:
        """Tell every env's study that a preset refused `draw`'s values: PRUNED with no value, as
        rl-zoo3 tells a trial whose hyperparameters its model refuses. TPE ranks a pruned trial with
        no intermediate value below every scored one, so it learns to avoid that region; FAIL would
        leave the region as unknown as before. Once, like `finish`."""
        import optuna

        for env in self.envs:
            if (env, draw) not in self._told:
                self.studies[env].tell(self._numbers[env, draw], state=optuna.trial.TrialState.PRUNED)
                self._told.add((env, draw))
