"""Search against a grid for the same steps: `python -m benchmarks.fleet_search`.

The plans are in `benchmarks/fleet_search/`: a 3 x 3 x 3 grid over `learning_rate`, `n_epochs`
and `ent_coef` on CartPole-v1 (27 agents to 4,096 steps, the best third on to 16,384: 221,184
steps), a random and a TPE search drawing 27 points over the same box with the same tiers (the
same steps), and a population-based fleet of 9 agents through six tiers of 4,096 steps (9 x
24,576 = 221,184 steps again). Each runs with the real `cockpit fleet --headless`, one after the
other in one run of this benchmark, on the same machine.

From each fleet's `fleet.db` (its results in the order they were recorded):
- **best**: the best score any agent reached (mean return over the 10 deterministic evaluation
  episodes of its tier's end);
- **steps to 95 %**: the steps the fleet had trained when a result first reached 95 % of its own
  best (`cockpit.core.fleet.report.search_progress`, what the report's "best so far" plots: a
  result adds what its agent trained in that tier, its steps less its score's steps in the tier
  before, so a PBT agent that copied another's checkpoint counts from there; agents still training
  then are not counted);
- **steps to the grid's best**: the same count when a result first reached the grid's best score,
  and that count over the grid's own steps to it. The goal: a TPE or PBT fleet that reaches the
  grid's best with at most half the grid's steps (a ratio <= 0.5).

One run of each fleet: a search's luck shows. `--repeat K` runs the whole set K times and prints
every run's row.

Run from the repo root (about 15 minutes on 2 cores):
    .venv/bin/python -m benchmarks.fleet_search
    .venv/bin/python -m benchmarks.fleet_search --fleets grid,tpe
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import REPO_ROOT, fmt_ratio, load_caption, log, print_table, warn_if_busy
from cockpit.core.fleet.report import search_progress
from cockpit.core.fleet.store import FleetStore

PLANS = Path(__file__).parent / "fleet_search"
FLEETS = ("grid", "random", "tpe", "pbt")
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


def run_fleet(name: str, workdir: Path) -> Outcome:
    """Run `PLANS/<name>.toml` with the real cockpit, headless, and read its results."""
    plan = PLANS / f"{name}.toml"
    run_dir = workdir / name
    log_path = workdir / f"{name}.log"
    log(f"{name}: cockpit fleet {plan.relative_to(REPO_ROOT)} (log: {log_path})")
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


def rows(outcomes: list[Outcome]) -> list[list[str]]:
    grid = next((o for o in outcomes if o.name == "grid"), None)
    grid_to_best = grid.steps_to(grid.best) if grid else None
    out = []
    for o in outcomes:
        to_goal = o.steps_to(GOAL * o.best)
        to_grid = o.steps_to(grid.best) if grid else None
        ratio = fmt_ratio(to_grid / grid_to_best) if to_grid is not None and grid_to_best else "-"
        out.append([o.name, str(o.agents), f"{o.steps:,}", f"{o.best:.1f}", f"{to_goal:,}" if to_goal else "-",
                    f"{to_grid:,}" if to_grid is not None else "not reached", ratio, f"{o.wall_s:.0f}"])  # fmt: skip
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleets", default=",".join(FLEETS), help=f"which, in order (default: {','.join(FLEETS)})")
    parser.add_argument("--repeat", type=int, default=1, metavar="K", help="run the whole set K times (default: 1)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.fleets.split(",") if n.strip()]
    unknown = [n for n in names if n not in FLEETS]
    if unknown:
        parser.error(f"--fleets: unknown {', '.join(unknown)} (valid: {', '.join(FLEETS)})")
    before = warn_if_busy()
    table: list[list[str]] = []
    for k in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="cockpit-bench-search-") as tmp:
            outcomes = [run_fleet(name, Path(tmp)) for name in names]
        table += [[f"{k + 1}", *row] for row in rows(outcomes)]
    headers = ["run", "fleet", "agents", "steps trained", "best score", "steps to 95 % of best",
               "steps to grid's best", "/ grid's", "wall s"]  # fmt: skip
    print_table("Search against a grid on CartPole-v1, the same steps (221,184 planned)", headers, table,
                text_columns=2, caption=load_caption(before))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
