"""A search fleet's analysis (`cockpit.core.fleet.analysis`) as the text and HTML reports both show
it: its headings, and the score-against-cost table's columns and cells, as plain text (each report
escapes them for its own format)."""

from __future__ import annotations

from cockpit.core.fleet.analysis import DrawPoint, SearchAnalysis

__all__ = ["BAR", "COLUMNS", "LEFT", "SearchAnalysis", "cells", "front_title", "importance_title", "listed", "usd"]

BAR = 20  # characters of a whole importance bar in the text report
COLUMNS = ("draw", "front", "tier", "score", "steps", "$", "values")
LEFT = frozenset({"front", "values"})


def usd(value: float | None) -> str:
    """Dollars, 3 significant figures below $100 (a short draw costs fractions of a cent); '-' unknown."""
    return "-" if value is None else f"${value:,.2f}" if value >= 100 else f"${value:.3g}"


def summary(analysis: SearchAnalysis) -> str:
    """The analysis's first line: its draws, and what a draw's score is."""
    envs = f", over {analysis.envs} envs' raw returns" if analysis.envs > 1 else ""
    return (
        f"search: {len(analysis.draws):,} draws, {len(analysis.scored):,} scored (a draw's score: its agents' "
        f"mean in the last tier they scored in{envs})"
    )


def importance_title(analysis: SearchAnalysis) -> str:
    """The importance table's heading: the evaluator, and what it compares."""
    return (
        f"importance (Optuna's {analysis.evaluator}: how the values of the best {analysis.top} of "
        f"{len(analysis.scored)} draws differ from all of theirs; shares of 1)"
    )


def front_title(analysis: SearchAnalysis) -> str:
    """The score-against-cost table's heading: the front's rule and the price of a step."""
    if analysis.usd_per_step is None:
        price = "no rate, so cost in steps"
    else:
        price = f"$ at ${analysis.rate_usd_per_h:g}/h: {usd(analysis.usd_per_step * 1e6)} per million steps trained"
    return (
        f"score against cost (* the Pareto front: no other draw scored as much or more for as little or less; {price})"
    )


def listed(analysis: SearchAnalysis, limit: int) -> list[DrawPoint]:
    """The scored draws a report lists: the front, cheapest first, then the best of the rest, at most
    `limit` (the whole front when it is longer)."""
    rest = sorted((p for p in analysis.scored if not p.pareto), key=lambda p: (-(p.score or 0.0), p.steps, p.draw))
    front = list(analysis.front)
    return (front + rest)[: max(limit, len(front))]


def cells(point: DrawPoint) -> tuple[str, ...]:
    """`point`'s row under `COLUMNS`."""
    return (
        str(point.draw),
        "*" if point.pareto else "",
        "-" if point.tier is None else str(point.tier),
        "-" if point.score is None else f"{point.score:,.1f}",
        f"{point.steps:,}",
        usd(point.cost_usd),
        point.values_text,
    )
