"""Search against a grid for the same steps: `python -m benchmarks.fleet_search`.

The plans are in `benchmarks/fleet_search/`, all on CartPole-v1 over one box: `learning_rate`
1e-4 to 1e-1 (log), `n_epochs` 2 to 10, `ent_coef` 1e-5 to 1e-2 (log).
- **grid**: its 3 x 3 x 3 points (each key's ends and middle), 27 agents to 4,096 steps, the best
  third on to 16,384 once all 27 scored (sync): 221,184 steps;
- **grid-async**: the same grid, promoted by ASHA: an agent in the top third of its tier so far
  goes on at once. The control: what the promotion rule alone gives;
- **random** and **tpe**: 27 points drawn over the box (TPE's first 6 at random, the rest where
  the scores told so far point), the same tiers, promoted by ASHA as grid-async is, so a good draw
  reaches the last tier early and TPE's later draws learn from it;
- **pbt**: 9 agents drawn at random, every one through six tiers of 4,096 steps (9 x 24,576 =
  221,184), the bottom quarter copying a top-quarter agent's checkpoint at each boundary.

ASHA promotes a few more agents than sync (an early agent is promoted on few results), so the
async fleets train somewhat more than 221,184 steps in all; the table shows what each trained.
Each runs with the real `cockpit fleet --headless`, one after the other in one run of this
benchmark, on the same machine.

From each fleet's `fleet.db` (its results in the order they were recorded):
- **best**: the best score any agent reached (mean return over the 10 deterministic evaluation
  episodes of its tier's end);
- **steps to 95 %**: the steps the fleet had trained when a result first reached 95 % of its own
  best (`cockpit.core.fleet.report.search_progress`, what the report's "best so far" plots: a
  result adds what its agent trained in that tier, its steps less its score's steps in the tier
  before, so a PBT agent that copied another's checkpoint counts from there; agents still training
  then are not counted);
- **steps to the grid's best**: the same count when a result first reached the (sync) grid's best
  score, and that count over the grid's own steps to it. The goal: a TPE or PBT fleet that reaches
  the grid's best with at most half the grid's steps (a ratio <= 0.5).

One run of each fleet: a search's luck shows, and on CartPole in 16,384 steps luck is large (an
agent's score moves by hundreds with its seed). `--repeat K` runs the whole set K times, run k
with every seed (the agents', the sampler's, PBT's) set to k - 1 (run 1 is the plan files as they
are), prints every run's row, and then per fleet the median over the runs and in how many runs it
met the goal.

Run from the repo root (about 20 minutes on 2 cores):
    .venv/bin/python -m benchmarks.fleet_search
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
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from benchmarks.common import REPO_ROOT, fmt_ratio, load_caption, log, print_table, warn_if_busy
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.report import search_progress
from cockpit.core.fleet.store import FleetStore

PLANS = Path(__file__).parent / "fleet_search"
FLEETS = ("grid", "grid-async", "random", "tpe", "pbt")
GOAL = 0.95  # "steps to reach 95 % of its best"


@dataclass(frozen=True)
class Outcome:
    """One fleet's run: its best score, the steps each result had brought it to (in record order),
    and its wall time."""

    name: str
    best: float
    curve: tuple[tuple[int, float], ...]  # (steps trained so far, this result's score), in record order
    wall_s: float
    agents: int

    @property
    def steps(self) -> int:
        """Every step its scored tiers trained."""
        return self.curve[-1][0] if self.curve else 0

    def steps_to(self, score: float) -> int | None:
        """The steps trained when a result first reached `score`; None if none did."""
        return next((steps for steps, s in self.curve if s >= score), None)


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
    its results."""
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
    store = FleetStore.in_run_dir(run_dir, read_only=True)
    try:
        results, agents = store.results(), len(store.agents())
    finally:
        store.close()
    if not results:
        raise SystemExit(f"{name}: no results in {run_dir}")
    log(f"{name}: {len(results)} results in {wall:.0f} s, best {max(r.score for r in results):.1f}")
    points = tuple((p.steps_so_far, p.score) for p in search_progress(results))
    return Outcome(name, max(r.score for r in results), points, wall, agents)


def to_grid(outcome: Outcome, outcomes: list[Outcome]) -> tuple[int | None, float | None]:
    """In one run: the steps `outcome` took to reach the grid's best (None if never), and that over
    the grid's own steps to it (inf if never); (None, None) without a grid in the run."""
    grid = next((o for o in outcomes if o.name == "grid"), None)
    grid_to_best = grid.steps_to(grid.best) if grid else None
    if grid is None or not grid_to_best:
        return None, None
    steps = outcome.steps_to(grid.best)
    return steps, steps / grid_to_best if steps is not None else math.inf


def rows(outcomes: list[Outcome]) -> list[list[str]]:
    out = []
    for o in outcomes:
        to_goal = o.steps_to(GOAL * o.best)
        steps, value = to_grid(o, outcomes)
        ratio = fmt_ratio(value) if value is not None and value != math.inf else "-"
        reached = f"{steps:,}" if steps is not None else "not reached"
        out.append([o.name, str(o.agents), f"{o.steps:,}", f"{o.best:.1f}", f"{to_goal:,}" if to_goal else "-",
                    reached, ratio, f"{o.wall_s:.0f}"])  # fmt: skip
    return out


def summary(runs: list[list[Outcome]]) -> list[list[str]]:
    """Per fleet over the runs: the median best score, the median ratio to the grid's steps, and
    in how many runs it reached the grid's best with at most half the grid's steps."""
    out = []
    for name in [o.name for o in runs[0]]:
        mine = [(o, to_grid(o, run)[1]) for run in runs for o in run if o.name == name]
        ratios = [r for _, r in mine if r is not None]
        median = statistics.median(ratios) if ratios else None
        shown = "-" if median is None else ("not reached" if median == math.inf else fmt_ratio(median))
        half = f"{sum(r <= 0.5 for r in ratios)} of {len(ratios)}" if ratios else "-"
        out.append([name, f"{statistics.median(o.best for o, _ in mine):.1f}", shown, half])
    return out


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
    before = warn_if_busy()
    table: list[list[str]] = []
    runs: list[list[Outcome]] = []
    for k in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="cockpit-bench-search-") as tmp:
            workdir = args.keep / str(k + 1) if args.keep else Path(tmp)
            workdir.mkdir(parents=True, exist_ok=True)
            runs.append([run_fleet(name, workdir, seed=k) for name in names])
        table += [[f"{k + 1}", *row] for row in rows(runs[-1])]
    headers = ["run", "fleet", "agents", "steps trained", "best score", "steps to 95 % of best",
               "steps to grid's best", "/ grid's", "wall s"]  # fmt: skip
    print_table("Search against a grid on CartPole-v1, the same steps (221,184 planned)", headers, table,
                text_columns=2, caption=load_caption(before))  # fmt: skip
    if args.repeat > 1:
        print_table(f"Over the {args.repeat} runs (run k seeds its agents, draws and perturbations with k - 1)",
                    ["fleet", "median best", "median / grid's steps to its best", "runs at <= 0.5"],
                    summary(runs))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
