"""A fleet's leaderboard as the text and HTML reports both show it: its columns and each row's cells,
as plain text (each report escapes them for its own format)."""

from __future__ import annotations

from cockpit.core.fleet.report import Leader

# The columns of text, left-aligned; the figures are right-aligned.
LEFT = frozenset({"agent", "copied", "env", "preset", "overrides"})


def columns(pbt: bool) -> tuple[str, ...]:
    """The leaderboard's columns; a pbt fleet's show whose checkpoints each agent copied."""
    copied = ("copied",) if pbt else ()
    return (
        "#",
        "agent",
        *copied,
        "tier",
        "steps",
        "score",
        "± std",
        "train return",
        "env",
        "preset",
        "overrides",
        "seed",
    )


def cells(leader: Leader, pbt: bool, *, every_copy: bool) -> tuple[str, ...]:
    """`leader`'s row, under `columns(pbt)`. A pbt agent's copies are "a0006@t0" (whose checkpoint,
    at the end of which tier): every one, oldest first, with `every_copy`, else the last one."""
    copies = leader.lineage if every_copy else leader.lineage[-1:]
    copied = (", ".join(f"{e.source}@t{e.tier}" for e in copies) or "-",) if pbt else ()
    return (
        str(leader.rank),
        leader.agent,
        *copied,
        str(leader.tier),
        f"{leader.steps:,}",
        f"{leader.score:,.1f}",
        _figure(leader.score_std),
        _figure(leader.train_return),
        leader.env,
        leader.preset,
        ", ".join(f"{key}={value!r}" for key, value in sorted(leader.overrides.items())),
        str(leader.seed),
    )


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"
