"""The only code that talks to NVML (NVIDIA's `nvidia-ml-py`, imported as `pynvml`).

Tests pass a scripted stand-in module as `nvml`; the product always uses the real one. Every read
that a GPU or driver may not support (power, clocks, per-process data, the UUID) degrades to None
(or "") instead of failing the tick.

A GPU is known by its NVML index, and by its UUID, which says whether the GPU at an index is still
the one a job was placed on. `open_gpus` gives a reader for every GPU NVML sees; each reader holds
one reference on NVML (NVML counts `nvmlInit` calls), so each reader's `close` is its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")

# NVML's return codes (nvml.h, `nvmlReturn_t`; pynvml's NVML_ERROR_* constants): an NVMLError's
# `value`. Errors are classified by these, never by the exception's class name.
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_TIMEOUT = 10
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_RESET_REQUIRED = 16
ERROR_LIB_RM_VERSION_MISMATCH = 18
ERROR_UNKNOWN = 999

# How a GPU's utilization is read (`GpuSample.util_mode`): NVML's sample buffer
# (`nvmlDeviceGetSamples`, every sample the driver took), a poll of `nvmlDeviceGetUtilizationRates`
# once a tick (the driver's mean over its last period), or not at all: a MIG slice, which NVML does
# not give a utilization of.
UTIL_BUFFER = "buffer"
UTIL_POLL = "poll"
UTIL_NONE_MIG = "not per MIG slice"


def error_code(exc: BaseException) -> int | None:
    """The NVML return code an NVMLError carries (`exc.value`), or None for any other exception."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def gpu_lost(exc: BaseException) -> bool:
    """True when `exc` says the GPU itself is gone (off the bus, or needing a reset), not that one
    read failed: only then is a GPU dropped at once."""
    return error_code(exc) in (ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED)


# Clock-event (throttle) reason bits, as NVML defines them.
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}


@dataclass(frozen=True)
class GpuInfo:
    """A sampled GPU, for the run log: its index, name, memory and driver, and its UUID ("" when
    the driver does not say).

    A whole GPU's `index` is its NVML index. A MIG slice (`parent_index` is the NVML index of the
    GPU it is cut from; its UUID starts "MIG-") is numbered after every whole GPU, in the order of
    its parent and then its place there, and its memory is the slice's."""

    index: int
    name: str
    memory_total_bytes: int
    driver: str
    uuid: str = ""
    parent_index: int | None = None

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
    mem_used_bytes: int
    mem_total_bytes: int
    power_w: float | None
    temperature_c: float | None
    sm_clock_mhz: int | None
    throttle_reasons: tuple[str, ...]
    index: int = 0
    util_samples: tuple[tuple[float, float], ...] = ()
    util_mode: str = ""
    sample_period_s: float | None = None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class GpuReader:
    """Reads one GPU through an initialised NVML module; `close` gives back one NVML reference."""

    def __init__(self, nvml: Any, index: int = 0) -> None:
        self.nvml = nvml
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        memory = nvml.nvmlDeviceGetMemoryInfo(self.handle)
        uuid = self._try(nvml.nvmlDeviceGetUUID, self.handle)
        self.info = GpuInfo(
            index=index,
            name=_text(nvml.nvmlDeviceGetName(self.handle)),
            memory_total_bytes=int(memory.total),
            driver=_text(nvml.nvmlSystemGetDriverVersion()),
            uuid=_text(uuid) if uuid is not None else "",
        )
        self._last_util_us = 0
        self._last_process_us = 0
        self._buffered = True
        self._notes: list[str] = []

    def take_notes(self) -> list[str]:
        """What this reader found wrong since the previous call, one line each, each said once
        (records dropped as implausible, a call the driver lacks): the sampler shows them."""
        notes, self._notes = self._notes, []
        return notes

    def _try(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except (self.nvml.NVMLError, AttributeError):  # AttributeError: bindings without the call
            return None

    def utilization_samples(self) -> list[tuple[float, float]]:
        """(Unix time, util %) samples NVML buffered since the previous call (often none).

        Only on a GPU or driver without the sample buffer does it poll
        `nvmlDeviceGetUtilizationRates` instead (one ~1 s average, stamped now); the two kinds
        of reading are never mixed in one series.
        """
        nvml = self.nvml
        if self._buffered:
            try:
                _, samples = nvml.nvmlDeviceGetSamples(
                    self.handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, self._last_util_us
                )
            except nvml.NVMLError as exc:
                if "NotFound" in type(exc).__name__:
                    return []  # nothing new since the last call: normal between NVML's own samples
                self._buffered = False  # this GPU or driver has no sample buffer: poll instead
            else:
                fresh = [(int(s.timeStamp) / 1e6, float(s.sampleValue.uiVal)) for s in samples]
                fresh = [(t, u) for t, u in fresh if t * 1e6 > self._last_util_us]
                if samples:
                    self._last_util_us = max(self._last_util_us, *(int(s.timeStamp) for s in samples))
                return sorted(fresh)
        rates = self._try(nvml.nvmlDeviceGetUtilizationRates, self.handle)
        return [(time.time(), float(rates.gpu))] if rates is not None else []

    def read(self) -> tuple[GpuSample, list[tuple[float, float]]]:
        """The device counters now, and the utilization samples since the last read."""
        nvml, h = self.nvml, self.handle
        util = self.utilization_samples()
        values = [u for _, u in util]
        memory = nvml.nvmlDeviceGetMemoryInfo(h)
        power_mw = self._try(nvml.nvmlDeviceGetPowerUsage, h)
        # NVML renamed "throttle reasons" to "clocks event reasons"; older bindings have only the first.
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        mask = self._try(reasons or nvml.nvmlDeviceGetCurrentClocksThrottleReasons, h) or 0
        sample = GpuSample(
            util_percent=sum(values) / len(values) if values else None,
            util_peak_percent=max(values) if values else None,
            mem_used_bytes=int(memory.used),
            mem_total_bytes=int(memory.total),
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            temperature_c=self._try(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
            sm_clock_mhz=self._try(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
            throttle_reasons=tuple(name for bit, name in THROTTLE_REASONS.items() if mask & bit and bit != 0x1),
            index=self.info.index,
            util_samples=tuple(util),
        )
        return sample, util

    def processes(self) -> dict[int, tuple[int | None, float | None]]:
        """pid -> (GPU memory bytes, SM %) for the compute processes on this GPU."""
        nvml, h = self.nvml, self.handle
        result: dict[int, tuple[int | None, float | None]] = {}
        for proc in self._try(nvml.nvmlDeviceGetComputeRunningProcesses, h) or []:
            used = getattr(proc, "usedGpuMemory", None)
            result[int(proc.pid)] = (int(used) if used is not None else None, None)
        samples = self._try(nvml.nvmlDeviceGetProcessUtilization, h, self._last_process_us) or []
        for sample in samples:
            self._last_process_us = max(self._last_process_us, int(sample.timeStamp))
            mem, _ = result.get(int(sample.pid), (None, None))
            result[int(sample.pid)] = (mem, float(sample.smUtil))
        return result

    def close(self) -> None:
        """Give back this reader's reference on NVML (the last one shuts it down)."""
        self._try(self.nvml.nvmlShutdown)


def _import_pynvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    module: ModuleType = pynvml  # nvidia-ml-py ships no type information: the import is Any
    return module


def open_gpus(nvml: Any = None) -> tuple[list[GpuReader], str]:
    """A reader for every GPU NVML sees, in index order, and ""; or no readers and the reason there
    is no GPU telemetry. Each reader holds its own NVML reference (see the module docstring)."""
    nvml = nvml if nvml is not None else _import_pynvml()
    if nvml is None:
        return [], "no GPU telemetry: nvidia-ml-py is not installed"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        kind = type(exc).__name__
        if "LibraryNotFound" in kind:
            return [], "no GPU telemetry: NVML library not found (no NVIDIA driver installed)"
        if "DriverNotLoaded" in kind:
            return [], "no GPU telemetry: the NVIDIA driver is not loaded"
        return [], f"no GPU telemetry: NVML failed to start ({exc})"
    readers: list[GpuReader] = []
    try:
        count = nvml.nvmlDeviceGetCount()
        for index in range(count):
            if index > 0:
                nvml.nvmlInit()  # one reference per reader: the first one is the call above
            readers.append(GpuReader(nvml, index))
    except nvml.NVMLError as exc:
        close_gpus(readers)
        if not readers:
            nvml.nvmlShutdown()
        return [], f"no GPU telemetry: {exc}"
    if not readers:
        nvml.nvmlShutdown()
        return [], "no GPU telemetry: no NVIDIA GPU found"
    return readers, ""


def keep_gpus(readers: Sequence[GpuReader], indices: Sequence[int] | None) -> list[GpuReader]:
    """The readers of the GPUs in `indices` (every one when None), in index order; the others are
    closed."""
    kept = [r for r in readers if indices is None or r.info.index in indices]
    close_gpus([r for r in readers if r not in kept])
    return kept


def close_gpus(readers: Sequence[GpuReader]) -> None:
    """Close every reader (each gives back its NVML reference)."""
    for reader in readers:
        reader.close()


def open_gpu(nvml: Any = None, index: int = 0) -> tuple[GpuReader | None, str]:
    """A reader for GPU `index` and "", or None and the reason there is no GPU telemetry."""
    readers, status = open_gpus(nvml)
    kept = keep_gpus(readers, [index])
    if readers and not kept:
        return None, "no GPU telemetry: no NVIDIA GPU found"
    return (kept[0] if kept else None), status
