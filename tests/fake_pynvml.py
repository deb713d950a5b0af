"""A scripted stand-in for the `pynvml` module: replays a GPU utilization pattern.

Only tests use it. It implements the calls `cockpit.core.nvml` makes, with NVML's semantics:
`nvmlDeviceGetSamples` returns the buffered samples newer than the timestamp it is given (and
raises NVMLError_NotFound when there are none), timestamps are microseconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

NVML_GPU_UTILIZATION_SAMPLES = 1
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_VALUE_TYPE_UNSIGNED_INT = 1
GIB = 1024**3


class NVMLError(Exception):
    """Base of the fake NVML errors, like pynvml's."""


class NVMLError_NotFound(NVMLError):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


@dataclass
class FakeGpu:
    """The scripted device: `util_at(t)` gives utilization at Unix time t; samples every `period`."""

    util_at: Callable[[float], float]
    clock: Callable[[], float]
    period: float = 1 / 6
    mem_used: int = 3 * GIB
    mem_total: int = 24 * GIB
    processes: tuple[tuple[int, int], ...] = ()
    fail_init: type[NVMLError] | None = None
    start: float | None = None
    buffered: bool = True


class FakeNvml:
    """Module-like object: pass it as `nvml` to `cockpit.core.nvml.open_gpu`."""

    NVMLError = NVMLError
    NVML_GPU_UTILIZATION_SAMPLES = NVML_GPU_UTILIZATION_SAMPLES
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM

    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.shutdown = False
        self.sample_calls = 0

    def nvmlInit(self) -> None:
        if self.gpu.fail_init is not None:
            raise self.gpu.fail_init("scripted failure")

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        return b"NVIDIA GeForce RTX 4090 (fake)"

    def nvmlSystemGetDriverVersion(self) -> str:
        return "555.42"

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        return SimpleNamespace(
            used=self.gpu.mem_used, total=self.gpu.mem_total, free=self.gpu.mem_total - self.gpu.mem_used
        )

    def nvmlDeviceGetSamples(self, handle: str, kind: int, last_us: int) -> tuple[int, list[SimpleNamespace]]:
        self.sample_calls += 1
        if not self.gpu.buffered:
            raise NVMLError_NotSupported("scripted: no sample buffer")
        now = self.gpu.clock()
        start = self.gpu.start if self.gpu.start is not None else now - 1.0
        self.gpu.start = start
        samples = []
        t = start
        while t <= now:
            stamp = int(t * 1e6)
            if stamp > last_us:
                samples.append(
                    SimpleNamespace(timeStamp=stamp, sampleValue=SimpleNamespace(uiVal=int(self.gpu.util_at(t))))
                )
            t += self.gpu.period
        if not samples:
            raise NVMLError_NotFound("no new samples")
        return NVML_VALUE_TYPE_UNSIGNED_INT, samples[-120:]

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> SimpleNamespace:
        return SimpleNamespace(gpu=int(self.gpu.util_at(self.gpu.clock())), memory=10)

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 215_000

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return 61

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        return 2520

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return 0x4  # sw power cap

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self.gpu.processes]

    def nvmlDeviceGetProcessUtilization(self, handle: str, last_us: int) -> list[SimpleNamespace]:
        raise NVMLError_NotSupported("scripted: no per-process utilization")
