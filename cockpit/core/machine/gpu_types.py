"""What the cockpit knows of a GPU, as data: `GpuInfo` (a GPU or MIG slice, read once at open),
`GpuSample` (its counters at one tick), and the names of how its utilization was read and of its
compute mode.

The NVML wrapper (`cockpit.core.machine.nvml`) makes these; everything else (the sampler, the
placement, the run log, the wire, the views) only passes them around, so it imports them from
here and never the driver wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass

# How a GPU's utilization is read (`GpuSample.util_mode`): NVML's sample buffer
# (`nvmlDeviceGetSamples`, every sample the driver took), a poll of `nvmlDeviceGetUtilizationRates`
# once a tick (the driver's mean over its last period), or not at all: a MIG slice, which NVML does
# not give a utilization of.
UTIL_BUFFER = "buffer"
UTIL_POLL = "poll"
UTIL_NONE_MIG = "not per MIG slice"

# A GPU's compute mode (`GpuInfo.compute_mode`), by `nvmlDeviceGetComputeMode`'s answer (nvml.h,
# `nvmlComputeMode_t`): DEFAULT lets any number of CUDA processes share the GPU; EXCLUSIVE_PROCESS
# lets one process hold a context on it (a second one fails at start), EXCLUSIVE_THREAD is the
# older exclusive mode (support removed in current drivers), PROHIBITED lets none. None: unknown.
COMPUTE_DEFAULT = "default"
COMPUTE_EXCLUSIVE_THREAD = "exclusive_thread"
COMPUTE_PROHIBITED = "prohibited"
COMPUTE_EXCLUSIVE_PROCESS = "exclusive_process"


@dataclass(frozen=True)
class GpuInfo:
    """A sampled GPU, for the run log: its index, name, memory and driver, and its UUID ("" when
    the driver does not say).

    A whole GPU's `index` is its NVML index. A MIG slice (`parent_index` is the NVML index of the
    GPU it is cut from; its UUID starts "MIG-") is numbered after every whole GPU, in the order of
    its parent and then its place there, and its memory is the slice's; `parent_uuid` is that
    GPU's UUID ("" when unknown), which names the slice too where `CUDA_VISIBLE_DEVICES` names its
    GPU."""

    index: int
    name: str
    memory_total_bytes: int | None
    driver: str
    uuid: str = ""
    parent_index: int | None = None
    parent_uuid: str = ""
    # (major, minor), as CUDA numbers the architecture (7.0: Volta); None when the driver does not say.
    compute_capability: tuple[int, int] | None = None
    # COMPUTE_DEFAULT, COMPUTE_EXCLUSIVE_PROCESS, ... as read at open; None when the driver does not
    # say (NOT_SUPPORTED, a call it lacks), which placement treats as the default.
    compute_mode: str | None = None

    @property
    def is_mig(self) -> bool:
        """True for a MIG slice."""
        return self.parent_index is not None


@dataclass(frozen=True)
class GpuSample:
    """One GPU's device counters at one tick. `util_percent` is the mean of the NVML samples since
    the last tick (`util_samples`, as (Unix time, %)) and `util_peak_percent` their maximum (the
    burst a 1 s poll would miss). `index` is the GPU's index (`GpuInfo.index`). `util_mode` says
    how utilization was read (UTIL_BUFFER, UTIL_POLL, UTIL_NONE_MIG) and `sample_period_s` is the
    spacing of the driver's samples as measured (None until it is known)."""

    util_percent: float | None
    util_peak_percent: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None
    power_w: float | None
    temperature_c: float | None
    sm_clock_mhz: int | None
    throttle_reasons: tuple[str, ...]
    index: int = 0
    util_samples: tuple[tuple[float, float], ...] = ()
    util_mode: str = ""
    sample_period_s: float | None = None
