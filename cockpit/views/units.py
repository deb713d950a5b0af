"""How both front ends write numbers: counts, MiB, and "-" for a figure not measured yet."""

from __future__ import annotations

MIB = 1024 * 1024
GIB = 1024 * MIB


def num(value: float | None, fmt: str = "{:,.0f}") -> str:
    """`value` formatted, or "-" when it is unknown."""
    return "-" if value is None else fmt.format(value)


def mib(value: int | None) -> str:
    """Bytes as whole MiB ("-" when unknown)."""
    return "-" if value is None else f"{value / MIB:,.0f} MiB"


def si(n: float) -> str:
    """A count in at most 4 characters: 950, 4.1k, 525k, 1.0M."""
    if n < 1000:
        return f"{n:.0f}"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            value = n / scale
            return f"{value:.1f}{suffix}" if value < 10 else f"{value:.0f}{suffix}"
    return f"{n:.0f}"
