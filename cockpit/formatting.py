"""How cockpit writes numbers, for the front ends and the commands alike: counts, MiB, money,
durations, and "-" for a figure not measured yet.

The layer under every other (plain text, no imports of cockpit's): the commands render too (the
fleet's dry-run table), and they sit below the views.
"""

from __future__ import annotations

import math
from typing import Any

MIB = 1024 * 1024
GIB = 1024 * MIB


def num(value: float | None, fmt: str = "{:,.0f}") -> str:
    """`value` formatted, or "-" when it is unknown."""
    return "-" if value is None else fmt.format(value)


def mib(value: int | None) -> str:
    """Bytes as whole MiB ("-" when unknown)."""
    return "-" if value is None else f"{value / MIB:,.0f} MiB"


def used_of(used: int | None, total: int | None, unit: int = MIB, digits: int | None = None) -> str:
    """GPU memory as "used/total MiB" (or GiB, to 1 decimal or `digits`, for `unit` GIB), each "-"
    when unknown: a unified-memory GPU (GB10, Jetson Thor) has no memory figures in NVML."""
    places, name = (1, "GiB") if unit == GIB else (0, "MiB")
    digits = places if digits is None else digits
    shown = ["-" if v is None else f"{v / unit:,.{digits}f}" for v in (used, total)]
    return f"{shown[0]}/{shown[1]} {name}"


# nvidia-smi's words for the modes in its "Compute M." column, where there is no room for ours.
SHORT_COMPUTE_MODES = {"exclusive_process": "E. Process", "exclusive_thread": "E. Thread", "prohibited": "Prohibited"}


def compute_mode(mode: str | None, *, short: bool = False) -> str:
    """A GPU's compute mode (`GpuInfo.compute_mode`) as the GPU views show it: "exclusive-process",
    "prohibited" or "exclusive-thread" (`short`: as nvidia-smi abbreviates them, "E. Process");
    "" for the default mode and an unknown one, which bound no job and are not shown."""
    if mode in (None, "default"):
        return ""
    return SHORT_COMPUTE_MODES.get(str(mode), str(mode)) if short else str(mode).replace("_", "-")


def si(n: float) -> str:
    """A count in at most 4 characters: 950, 4.1k, 525k, 1.0M."""
    if n < 1000:
        return f"{n:.0f}"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            value = n / scale
            return f"{value:.1f}{suffix}" if value < 10 else f"{value:.0f}{suffix}"
    return f"{n:.0f}"


def tier_target(timesteps: int | None, episodes: int | None) -> str:
    """A fleet tier's target in 4 characters and its unit: "500k" steps, or "3.0k ep" episodes."""
    return f"{si(episodes)} ep" if episodes is not None else si(timesteps or 0)


def steps_of(steps: int, target: int, *, wide: bool = True) -> str:
    """Steps towards a target: "4,096/8,192" (wide) or "4.1k/8.2k"; the steps alone, "4,096" or
    "4.1k", while the target is unknown (0: a script that has not reported its total)."""
    done = f"{steps:,}" if wide else si(steps)
    if not target:
        return done
    return f"{done}/{target:,}" if wide else f"{done}/{si(target)}"


def episodes_of(episodes: int | None, target: int, *, wide: bool = True) -> str:
    """Whole episodes towards an episode target: "412/3,000 ep" (wide) or "412/3.0k ep"."""
    done = f"{episodes or 0:,}" if wide else si(episodes or 0)
    return f"{done}/{target:,} ep" if wide else f"{done}/{si(target)} ep"


def target_of(steps: int, target: int, target_episodes: int | None, episodes: int | None, *, wide: bool = True) -> str:
    """A job's progress in the unit of its target: episodes (`episodes_of`) or steps (`steps_of`)."""
    if target_episodes is not None:
        return episodes_of(episodes, target_episodes, wide=wide)
    return steps_of(steps, target, wide=wide)


def money(usd: float | None) -> str:
    """Dollars with cents, or "-" when unknown."""
    return "-" if usd is None else f"${usd:,.2f}"


def eta(seconds: float | None) -> str:
    """A time to go (an ETA) in at most 6 characters: 45s, 3m20s, 2h05m, 3d04h; "-" when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def scoring_of(scored: int, to_score: int, *, since: float | None = None, now: float | None = None) -> str:
    """A score phase's progress: "score 3/10 ep", and given the phase's start and the time now,
    the time spent against the time expected at the pace so far: "score 3/10 ep, 4s of about 13s"."""
    text = f"score {scored}/{to_score} ep"
    if since is None or now is None:
        return text
    spent = max(0.0, now - since)
    expected = f" of about {eta(spent / scored * to_score)}" if 0 < scored < to_score else ""
    return f"{text}, {eta(spent)}{expected}"


def short(value: Any) -> str:
    """A searched value as the notices, the fleet screen and the report print it: a float to 3
    significant figures, anything else as it is."""
    return f"{value:.3g}" if isinstance(value, float) else str(value)
