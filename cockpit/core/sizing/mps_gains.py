"""What MPS gained here, remembered: `cockpit tune` and `cockpit run --auto` measure a preset's
jobs with and without MPS side by side, and keep the result for `recommend` and the advisor.

Kept in `$XDG_CACHE_HOME/cockpit/mps.toml`, under the probe's key (`cost_probe.cache_key`: the
CPU, the GPU, torch, the env, the network and the batch), written atomically; an unreadable file
is ignored and rewritten, as costs.toml is. The newest measurement of a key replaces the older.
"""

from __future__ import annotations

import math
from pathlib import Path

import tomli_w

from cockpit.contract.costs import MpsGain
from cockpit.contract.files import cache_dir, write_atomic
from cockpit.contract.presets import Preset
from cockpit.contract.toml import read_cache_table
from cockpit.core.sizing.cost_probe import cache_key

CACHE_FILE = "mps.toml"


def mps_cache_path() -> Path:
    """Where measured MPS gains are kept."""
    return cache_dir() / CACHE_FILE


def cached_mps_gain(preset: Preset, gpu_name: str | None) -> MpsGain | None:
    """The newest MPS measurement for `preset` on this machine's GPU `gpu_name`; None where there
    is none, no GPU, or the record is not a measurement."""
    if gpu_name is None:
        return None
    record = read_cache_table(mps_cache_path()).get(cache_key(preset, gpu_name))
    if not isinstance(record, dict):
        return None
    try:
        gain = MpsGain(
            int(record["jobs"]),
            float(record["sps_off"]),
            float(record["sps_on"]),
            str(record["by"]),
            str(record["measured_at"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    sane = gain.jobs >= 2 and all(math.isfinite(v) and v > 0 for v in (gain.sps_off, gain.sps_on))
    return gain if sane else None


def record_mps_gain(preset: Preset, gpu_name: str, gain: MpsGain) -> None:
    """Keep what MPS did for `preset` on `gpu_name`, replacing an older measurement. An unwritable
    cache loses the measurement, nothing more."""
    path = mps_cache_path()
    record = {
        "jobs": gain.jobs,
        "sps_off": round(gain.sps_off, 1),
        "sps_on": round(gain.sps_on, 1),
        "by": gain.by,
        "measured_at": gain.measured_at,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, tomli_w.dumps({**read_cache_table(path), cache_key(preset, gpu_name): record}))
    except OSError:
        pass
