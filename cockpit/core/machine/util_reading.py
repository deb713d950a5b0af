"""What a GPU's utilization figure is, and how it was read, in the words every view and report
uses.

NVML's utilization (`nvmlUtilization_t.gpu`, and each sample of `nvmlDeviceGetSamples`) is the
"percent of time over the past sample period during which one or more kernels was executing on
the GPU" (NVML API reference): the share of time the GPU was busy with any kernel, not how much
of it the kernels occupied (a single small kernel at a time reads 100%). Every view and report
therefore labels it "busy", and says the long form (`BUSY_LEGEND`) where there is room.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cockpit.contract.runrecord import GpuUseRecord
from cockpit.core.machine.gpu_types import UTIL_BUFFER, UTIL_POLL

BUSY = "busy"
BUSY_LONG = "busy (any kernel)"
BUSY_LEGEND = "busy: the share of time in which any kernel ran on the GPU (NVML), not SM occupancy"


def util_read(mode: str | None, period_s: float | None) -> str:
    """How a GPU's utilization is read, for a reader: "buffer, 167 ms samples" (NVML's sample
    buffer, with the driver's measured sample spacing; "buffer, sample spacing -" until measured),
    "1 Hz poll", "not per MIG slice", or "" when the reader has not said (`GpuSample.util_mode`,
    run.toml's `util_read`)."""
    if mode == UTIL_BUFFER:
        return f"buffer, {period_s * 1000:.0f} ms samples" if period_s is not None else "buffer, sample spacing -"
    if mode == UTIL_POLL:
        return "1 Hz poll"
    return mode or ""  # UTIL_NONE_MIG reads as it is


def read_shares(shares: Mapping[str, float]) -> str:
    """Each way of reading's share of the time, "buffer 93%, poll 7%" ("" for none), largest first:
    for a GPU whose way of reading changed during a run."""
    return ", ".join(f"{mode} {share:.0%}" for mode, share in sorted(shares.items(), key=lambda kv: -kv[1]))


def gpu_read_lines(gpus: Sequence[GpuUseRecord]) -> list[str]:
    """A line per GPU of a run.toml whose way of reading utilization is recorded: "GPU 0 busy read
    by buffer, 167 ms samples: bursts shorter than that can be missed", and each way's share of
    the time when it changed during the run; none for files from before it was recorded."""
    lines = []
    for gpu in gpus:
        if gpu.util_read is None:
            continue
        period = gpu.util_sample_period_ms / 1000 if gpu.util_sample_period_ms is not None else None
        line = f"GPU {gpu.index} {BUSY} read by {util_read(gpu.util_read, period)}"
        if gpu.util_read == UTIL_BUFFER:
            line += ": bursts shorter than the sample spacing can be missed"
        if gpu.util_read_shares:
            line += f" (the way of reading changed during the run: {read_shares(gpu.util_read_shares)} of the time)"
        lines.append(line)
    return lines
