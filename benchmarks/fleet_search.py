"""Search against a grid for the same steps: `python -m benchmarks.fleet_search`.

The plans are in `benchmarks/fleet_search/`, all on CartPole-v1 over one box: `learning_rate`
1e-4 to 1e-1 (log), `n_epochs` 2 to 10, `ent_coef` 1e-5 to 1e-2 (log). The box was chosen after a
probe (one seed: learning rates 1e-2 and 3e-2 reached 500 in 16,384 steps, 3e-3 165 to 220), so
the grid's learning rates (1e-4, 3.2e-3, 1e-1) straddle the best ones and none lies on them.
- **grid**: its 3 x 3 x 3 points (each key's ends and middle), 27 agents to 4,096 steps, the best
  third on to 16,384 once all 27 scored (sync): 221,184 steps. The reference of every ratio;
- **grid-async**: the same grid, promoted by ASHA: an agent in the top third of its tier so far
  goes on at once. The control: what the promotion rule alone gives;
- **random** and **tpe**: 27 points drawn over the box (TPE's first 6 at random, the rest where
  the scores told so far point), the same tiers, promoted by ASHA as grid-async is;
- **pbt**: 9 agents drawn at random, every one through six tiers of 4,096 steps (9 x 24,576 =
  221,184), the bottom 3 copying a better top-3 agent's checkpoint at each boundary;
- **pbt-control**: pbt with `[pbt] exploit = false`: the same draws, seeds, tiers and
  evaluations, and nobody copies or perturbs. What pbt gains over it is what exploiting bought.

ASHA promotes a few more agents than sync, so the async fleets train somewhat more than 221,184
steps. Each fleet runs with the real `cockpit fleet --headless`, one after the other in one run of
this benchmark, on the same machine. `--repeat K` runs the whole set K times, run k with every seed
(the agents', the sampler's, PBT's) set to k - 1 (run 1 is the plan files as they are), so each
fleet of run k is compared with the grid (and pbt with its control) of the same run k.

Per fleet and run, from its `fleet.db` (results in the order they were recorded) and its jobs'
`events.jsonl` (every `evaluated` event, with its episodes), and the benchmark's own clock:
- **steps**: every step its scored tiers trained (`search_progress`: a result adds what its agent
  trained in that tier, so a PBT agent that copied another's checkpoint counts from there);
- **evaluations** and their **episodes** (10 deterministic episodes each), and the seconds the
  workers spent in them;
- **wall s**: `cockpit fleet` from start to exit;
- **best**: the best score any agent reached;
- **steps to the grid's best**: the steps trained when a result first reached the (sync) grid's
  best score of the same run ("never" when none did);
- **population mean at N**: the mean over the fleet's agents of each one's latest score once the
  fleet had trained N steps (results counted as `search_progress` orders them; an agent not yet
  scored is left out). N = 110,592 (the grid's first tier, PBT's third) and 221,184 (the budget):
  what PBT is for, a population that is good, not one lucky agent.

The tables: every run's figures; then per fleet the median over the runs with the 25th-75th
percentile in brackets; then the same for the ratios of each fleet to the grid of the same run
(and of pbt to pbt-control), with in how many runs the fleet reached the grid's best in at most
half the grid's steps.

Run from the repo root (45 minutes for grid, pbt and pbt-control 10 times on a busy 2-core machine):
    .venv/bin/python -m benchmarks.fleet_search --fleets grid,pbt,pbt-control --repeat 10
    .venv/bin/python -m benchmarks.fleet_search --fleets grid,tpe
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from benchmarks.common import REPO_ROOT, fmt_ratio, load_caption, log, print_table, warn_if_busy
from cockpit.contract.events import EvaluatedEvent, of_kind, read_events
from cockpit.contract.rundir import RunDir
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.report import SearchPoint, search_progress
from cockpit.core.fleet.store import FleetStore

PLANS = Path(__file__).parent / "fleet_search"
FLEETS = ("grid", "grid-async", "random", "tpe", "pbt", "pbt-control")
REFERENCE = "grid"
CONTROLS = {"pbt": "pbt-control"}  # a fleet and the same plan without what it is measured for
BUDGETS = (110_592, 221_184)  # the population's mean at these steps: the grid's first tier, and everything


@dataclass(frozen=True)
class Outcome:
    """One fleet's run: its results as `search_progress` counts them, its evaluations and its wall time."""

    name: str
    points: tuple[SearchPoint, ...]  # every result in record order, with the steps trained by then
    agents: int
    evaluations: int
    eval_episodes: int
    eval_s: float
    wall_s: float

    @property
    def best(self) -> float:
        return max(p.score for p in self.points)

    @property
    def steps(self) -> int:
        """Every step its scored tiers trained."""
        return self.points[-1].steps_so_far if self.points else 0

    def steps_to(self, score: float) -> float:
        """The steps trained when a result first reached `score`; inf if none did."""
        return next((float(p.steps_so_far) for p in self.points if p.score >= score), math.inf)

    def population_mean(self, budget: int) -> float:
        """The mean over the agents scored by `budget` steps of each one's latest score then; nan
        when none was."""
        latest = {p.agent: p.score for p in self.points if p.steps_so_far <= budget}
        return statistics.fmean(latest.values()) if latest else math.nan


def evaluations_of(run_dir: Path) -> tuple[int, int, float]:
    """(evaluations, their episodes, their seconds) over every job of the fleet in `run_dir`: the
    `evaluated` events its workers wrote, each once in its own job's events.jsonl."""
    events = [e for job in sorted(RunDir(run_dir).jobs.glob("*")) for e in of_kind(read_events(job / "events.jsonl"),
              EvaluatedEvent)]  # fmt: skip
    return len(events), sum(e.episodes for e in events), sum(e.seconds or 0.0 for e in events)


def seeded_plan(name: str, seed: int, workdir: Path) -> Path:
    """`PLANS/<name>.toml` itself for seed 0, else a copy in `workdir` whose agents, search and pbt
    all use `seed`: another run of the same fleet, with other draws, perturbations and agent seeds."""
    plan = PLANS / f"{name}.toml"
    if seed == 0:
        return plan
    raw = tomllib.loads(plan.read_text())
    raw["agents"]["seeds"] = [seed]
    for table in (raw["agents"].get("search"), raw.get("pbt")):
        if table is not None:
            table["seed"] = seed
    copy = workdir / f"{name}.toml"
    copy.write_text(tomli_w.dumps(raw))
    return copy


def run_fleet(name: str, workdir: Path, seed: int = 0) -> Outcome:
    """Run the fleet `name` with `seed` (`seeded_plan`) with the real cockpit, headless, and read
    its results and evaluations."""
    plan = seeded_plan(name, seed, workdir)
    run_dir = workdir / name
    log_path = workdir / f"{name}.log"
    log(f"{name}: cockpit fleet {plan} (seed {seed}, log: {log_path})")
    started = time.monotonic()
    with log_path.open("w") as fh:
        command = [sys.executable, "-m", "cockpit", "fleet", str(plan), "--headless", "--no-tensorboard",
                   "--run-dir", str(run_dir)]  # fmt: skip
        code = subprocess.call(command, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    wall = time.monotonic() - started
    if code != 0:
        raise SystemExit(f"{name}: cockpit fleet exited {code}; see {log_path}")
    return outcome_of(name, run_dir, wall)


def outcome_of(name: str, run_dir: Path, wall: float) -> Outcome:
    """The fleet `name`'s outcome from its run directory, `wall` seconds from start to exit."""
    store = FleetStore.in_run_dir(run_dir, read_only=True)
    try:
        results, agents = store.results(), len(store.agents())
    finally:
        store.close()
    if not results:
        raise SystemExit(f"{name}: no results in {run_dir}")
    evaluations, episodes, eval_s = evaluations_of(run_dir)
    log(f"{name}: {len(results)} results, {evaluations} evaluations in {wall:.0f} s, best "
        f"{max(r.score for r in results):.1f}")  # fmt: skip
    return Outcome(name, search_progress(results), agents, evaluations, episodes, eval_s, wall)


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """The 25th, 50th and 75th percentiles of `values` (linear between the sorted values, as
    numpy's default); inf counts as the largest value ("never"), nan is left out."""
    ordered = sorted(v for v in values if not math.isnan(v))
    if not ordered:
        return math.nan, math.nan, math.nan

    def at(p: float) -> float:
        position = p * (len(ordered) - 1)
        low, high = ordered[math.floor(position)], ordered[math.ceil(position)]
        fraction = position - math.floor(position)
        return low if fraction == 0 or low == high else low + fraction * (high - low)

    return at(0.25), at(0.5), at(0.75)


def shown(value: float, fmt: Callable[[float], str]) -> str:
    return "-" if math.isnan(value) else "never" if value == math.inf else fmt(value)


def spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """`median [25th-75th]`; `-` when no run has the figure."""
    q1, median, q3 = quartiles(values)
    if math.isnan(median):
        return "-"
    return f"{shown(median, fmt)} [{shown(q1, fmt)}-{shown(q3, fmt)}]"


def whole(value: float) -> str:
    return f"{value:,.0f}"


def score(value: float) -> str:
    return f"{value:.1f}"


def ratio(mine: float, reference: float) -> float:
    """`mine / reference`: inf when only `mine` is "never", nan when the reference is never or 0."""
    if reference in (0.0, math.inf) or math.isnan(reference) or math.isnan(mine):
        return math.nan
    return mine / reference


def measures(o: Outcome, grid: Outcome | None) -> list[float]:
    """The figures of one fleet's run, in `MEASURED`'s order."""
    to_grid = o.steps_to(grid.best) if grid is not None else math.nan
    return [float(o.steps), float(o.evaluations), float(o.eval_episodes), o.eval_s, o.wall_s, o.best, to_grid,
            *(o.population_mean(n) for n in BUDGETS)]  # fmt: skip


MEASURED = ["steps", "evaluations", "eval episodes", "eval s", "wall s", "best", "steps to grid's best",
            *(f"pop. mean at {n:,}" for n in BUDGETS)]  # fmt: skip
FORMATS = [whole, whole, whole, score, whole, score, whole, *(score for _ in BUDGETS)]
RATIOS = [0, 2, 4, 6, 7, 8]  # the measures a ratio is shown for: steps, episodes, wall, steps to the best, means


def figures(runs: list[dict[str, Outcome]]) -> dict[str, list[list[float]]]:
    """Per fleet, per run, its `measures` against the grid of the same run."""
    out: dict[str, list[list[float]]] = {}
    for run in runs:
        for name, outcome in run.items():
            out.setdefault(name, []).append(measures(outcome, run.get(REFERENCE)))
    return out


def run_rows(runs: list[dict[str, Outcome]]) -> list[list[str]]:
    """One row per fleet per run: its figures."""
    rows = []
    for k, run in enumerate(runs, 1):
        for name, outcome in run.items():
            values = measures(outcome, run.get(REFERENCE))
            rows.append([str(k), name, *(shown(v, f) for v, f in zip(values, FORMATS, strict=True))])
    return rows


def summary_rows(runs: list[dict[str, Outcome]]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows): per measure, each fleet's median over the runs, [25th-75th percentile]."""
    per_fleet = figures(runs)
    rows = [[MEASURED[i], *(spread([run[i] for run in per_run], FORMATS[i]) for per_run in per_fleet.values())]
            for i in range(len(MEASURED))]  # fmt: skip
    return ["", *per_fleet], rows


def ratio_rows(runs: list[dict[str, Outcome]]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows): per measure in `RATIOS`, each fleet over the grid of the same run (and pbt
    over its control), the median of those per-run ratios, [25th-75th percentile]; last, the runs
    in which the fleet reached the grid's best in at most half the steps its reference took."""
    per_fleet = figures(runs)
    pairs = [(name, REFERENCE) for name in per_fleet if name != REFERENCE and REFERENCE in per_fleet]
    pairs += [(name, control) for name, control in CONTROLS.items() if name in per_fleet and control in per_fleet]
    columns = []
    for name, reference in pairs:
        mine, theirs = per_fleet[name], per_fleet[reference]
        ratios = [[ratio(m[i], t[i]) for m, t in zip(mine, theirs, strict=True)] for i in RATIOS]
        steps_to = ratios[RATIOS.index(6)]
        half = sum(1 for r in steps_to if r <= 0.5)
        counted = sum(1 for r in steps_to if not math.isnan(r))
        columns.append([*(spread(r, fmt_ratio) for r in ratios), f"{half} of {counted}"])
    labels = [*(f"{MEASURED[i]} /" for i in RATIOS), "runs at <= 0.5 of its steps to grid's best"]
    rows = [[label, *(column[j] for column in columns)] for j, label in enumerate(labels)]
    return ["", *(f"{name} / {reference}" for name, reference in pairs)], rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleets", default=",".join(FLEETS), help=f"which, in order (default: {','.join(FLEETS)})")
    parser.add_argument("--repeat", type=int, default=1, metavar="K", help="run the whole set K times (default: 1)")
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="keep each fleet's run directory in DIR/<run>/<fleet> (default: a temporary one)",
    )
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.fleets.split(",") if n.strip()]
    unknown = [n for n in names if n not in FLEETS]
    if unknown:
        parser.error(f"--fleets: unknown {', '.join(unknown)} (valid: {', '.join(FLEETS)})")
    if args.repeat < 1:
        parser.error(f"--repeat: a count >= 1, got {args.repeat}")
    before = warn_if_busy()
    started = time.monotonic()
    runs: list[dict[str, Outcome]] = []
    for k in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="cockpit-bench-search-") as tmp:
            workdir = args.keep / str(k + 1) if args.keep else Path(tmp)
            workdir.mkdir(parents=True, exist_ok=True)
            runs.append({name: run_fleet(name, workdir, seed=k) for name in names})
    title = "Search against a grid on CartPole-v1, the same steps (221,184 planned)"
    print_table(f"{title}: every run (run k seeds its agents, draws and perturbations with k - 1)",
                ["run", "fleet", *MEASURED], run_rows(runs), text_columns=2)  # fmt: skip
    print_table(f"Over the {args.repeat} run(s): median [25th-75th percentile]", *summary_rows(runs))
    caption = f"{load_caption(before)} {time.monotonic() - started:.0f} s in all."
    print_table("Ratios measured side by side, each run against its own reference: median [25th-75th percentile]",
                *ratio_rows(runs), caption=caption)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
