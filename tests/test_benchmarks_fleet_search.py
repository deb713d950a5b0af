"""The search benchmark's figures (benchmarks/fleet_search.py) without a fleet: the evaluations
read from the jobs' events, the population's mean at a budget, the quartiles (with "never"), and
each fleet's ratios against the grid and pbt's against its control, run by run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.fleet_search import Outcome, evaluations_of, quartiles, ratio_rows, spread, whole
from cockpit.contract.events import EventWriter
from cockpit.contract.rundir import RunDir
from cockpit.core.fleet.report import SearchPoint


def test_the_evaluations_are_every_evaluated_event_of_every_job(tmp_path: Path) -> None:
    for job, scored in (("a0000", [2048, 4096]), ("a0001", [2048])):
        events = EventWriter(RunDir(tmp_path).job(job).events)
        events.started(pid=1, device="cpu", target_steps=2048)
        for step in scored:
            events.evaluated(step=step, mean_reward=9.0, std_reward=1.0, episodes=10, seed=0, seconds=0.5)
            events.finished(status="done", steps=step, duration=1.0)
    assert evaluations_of(tmp_path) == (3, 30, 1.5)


def outcome(name: str, points: list[tuple[str, int, float]], wall_s: float = 10.0) -> Outcome:
    curve = tuple(SearchPoint(agent, 0, steps, s, s) for agent, steps, s in points)
    return Outcome(name, curve, len({a for a, _, _ in points}), len(points), 10 * len(points), 1.0, wall_s)


def test_the_population_mean_at_a_budget_takes_each_agents_latest_score_by_then() -> None:
    o = outcome("pbt", [("a", 100, 10.0), ("b", 200, 30.0), ("a", 300, 50.0), ("b", 400, 500.0)])
    assert o.population_mean(250) == 20.0  # a 10, b 30
    assert o.population_mean(300) == 40.0  # a's latest is 50 now
    assert o.population_mean(400) == 275.0
    assert math.isnan(o.population_mean(50))  # nobody scored yet
    assert o.steps_to(50.0) == 300 and o.steps_to(501.0) == math.inf and o.best == 500.0


def test_quartiles_interpolate_and_never_counts_as_the_largest() -> None:
    assert quartiles([1, 2, 3, 4, 5]) == (2, 3, 4)
    assert quartiles([4, 1, 3, 2]) == (1.75, 2.5, 3.25)
    assert quartiles([1, 2, math.inf, math.inf, math.inf]) == (2, math.inf, math.inf)
    assert quartiles([1, 2, 3, math.inf, math.nan]) == (1.75, 2.5, math.inf)
    assert quartiles([1, math.inf, math.inf, math.inf]) == (math.inf, math.inf, math.inf)  # never inf - inf
    assert spread([1000, 2000, 3000, math.inf, math.inf], whole) == "3,000 [2,000-never]"


def test_each_ratio_is_taken_run_by_run_against_the_reference_of_the_same_run() -> None:
    runs = []
    for k, (pbt_mean, control_mean) in enumerate([(400.0, 200.0), (100.0, 400.0), (300.0, 300.0)]):
        grid = outcome("grid", [("g", 1000 * (k + 1), 300.0 - 100.0 * k)], wall_s=100.0)
        pbt = outcome("pbt", [("p", 500, 300.0), ("q", 1000, 2 * pbt_mean - 300.0)])
        control = outcome("pbt-control", [("p", 500, 300.0), ("q", 1000, 2 * control_mean - 300.0)])
        runs.append({"grid": grid, "pbt": pbt, "pbt-control": control})
    headers, table = ratio_rows(runs)
    assert headers == ["", "pbt / grid", "pbt-control / grid", "pbt / pbt-control"]
    rows = {header: [row[j] for row in table] for j, header in enumerate(headers) if header}
    # steps, episodes, wall, steps to the grid's best, the means at 110,592 and 221,184
    steps, episodes, wall, to_best, _half, mean, half_runs = rows["pbt / pbt-control"]
    assert (steps, episodes, wall, to_best) == ("1.000 [1.000-1.000]",) * 4
    assert mean == "1.000 [0.625-1.500]"  # the per-run ratios 2, 0.25 and 1: not the ratio of the medians
    # Each grid's best is its own run's (300, 200, 100, reached at 1,000, 2,000 and 3,000 steps);
    # pbt reaches each at 500.
    assert rows["pbt / grid"][3] == "0.250 [0.208-0.375]" and rows["pbt / grid"][-1] == "3 of 3"
    assert rows["pbt / grid"][2] == "0.100 [0.100-0.100]"  # wall: 10 s against 100
    assert half_runs == "0 of 3"  # pbt got there no sooner than its control


def test_a_ratio_is_undefined_when_the_reference_never_got_there() -> None:
    from benchmarks.fleet_search import ratio

    assert ratio(math.inf, 1000.0) == math.inf and math.isnan(ratio(500.0, math.inf))
    assert math.isnan(ratio(math.inf, math.inf)) and ratio(500.0, 1000.0) == pytest.approx(0.5)
