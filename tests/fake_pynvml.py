"""A scripted stand-in for the `pynvml` module: replays a GPU utilization pattern on one GPU or several.

Only tests use it. It implements the calls `cockpit.core.machine.nvml` makes, with NVML's semantics:
`nvmlDeviceGetSamples` returns the buffered samples newer than the timestamp it is given (and
raises NVMLError_NotFound when there are none), timestamps are microseconds since the epoch, a
handle names one device, and `nvmlInit` / `nvmlShutdown` are counted (NVML's own reference count).
`four_gpus` scripts a machine with four GPUs of different sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    name: str = "NVIDIA GeForce RTX 4090 (fake)"
    uuid: str = "GPU-fake-0"


def four_gpus(clock: Callable[[], float], util_at: Callable[[int, float], float] | None = None) -> list[FakeGpu]:
    """Four GPUs of different sizes (8, 24, 24 and 80 GiB), each with its own UUID and 1 GiB in use;
    `util_at(index, t)` scripts each one's utilization (default: 10 % times its index plus 10)."""
    sizes = ((8, "RTX 3070"), (24, "RTX 4090"), (24, "RTX 4090"), (80, "A100-SXM4-80GB"))
    shape = util_at or (lambda index, t: 10.0 + 10.0 * index)
    return [
        FakeGpu(util_at=lambda t, i=i: shape(i, t), clock=clock, mem_used=1 * GIB, mem_total=size * GIB,
                name=f"NVIDIA {model} (fake)", uuid=f"GPU-fake-{i}")
        for i, (size, model) in enumerate(sizes)
    ]  # fmt: skip


class FakeNvml:
    """Module-like object: pass it as `nvml` to `cockpit.core.machine.nvml.open_gpu`."""

    NVMLError = NVMLError
    NVML_GPU_UTILIZATION_SAMPLES = NVML_GPU_UTILIZATION_SAMPLES
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM

    def __init__(self, gpu: FakeGpu | Sequence[FakeGpu]) -> None:
        self.gpus = [gpu] if isinstance(gpu, FakeGpu) else list(gpu)
        self.gpu = self.gpus[0]
        self.shutdown = False
        self.inits = 0  # nvmlInit calls not yet matched by an nvmlShutdown
        self.sample_calls = 0

    def _device(self, handle: str) -> FakeGpu:
        index = int(handle.removeprefix("gpu"))
        if index >= len(self.gpus):
            raise NVMLError_NotFound(f"no GPU {index}")
        return self.gpus[index]

    def nvmlInit(self) -> None:
        if self.gpu.fail_init is not None:
            raise self.gpu.fail_init("scripted failure")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1
        self.shutdown = self.inits <= 0

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        if index >= len(self.gpus):
            raise NVMLError_NotFound(f"no GPU {index}")
        return f"gpu{index}"

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        return self._device(handle).name.encode()

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return self._device(handle).uuid

    def nvmlSystemGetDriverVersion(self) -> str:
        return "555.42"

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        gpu = self._device(handle)
        return SimpleNamespace(used=gpu.mem_used, total=gpu.mem_total, free=gpu.mem_total - gpu.mem_used)

    def nvmlDeviceGetSamples(self, handle: str, kind: int, last_us: int) -> tuple[int, list[SimpleNamespace]]:
        self.sample_calls += 1
        gpu = self._device(handle)
        if not gpu.buffered:
            raise NVMLError_NotSupported("scripted: no sample buffer")
        now = gpu.clock()
        start = gpu.start if gpu.start is not None else now - 1.0
        gpu.start = start
        samples = []
        t = start
        while t <= now:
            stamp = int(t * 1e6)
            if stamp > last_us:
                samples.append(SimpleNamespace(timeStamp=stamp, sampleValue=SimpleNamespace(uiVal=int(gpu.util_at(t)))))
            t += gpu.period
        if not samples:
            raise NVMLError_NotFound("no new samples")
        return NVML_VALUE_TYPE_UNSIGNED_INT, samples[-120:]

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> SimpleNamespace:
        gpu = self._device(handle)
        return SimpleNamespace(gpu=int(gpu.util_at(gpu.clock())), memory=10)

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 215_000

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return 61

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        return 2520

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return 0x4  # sw power cap

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self._device(handle).processes]

    def nvmlDeviceGetProcessUtilization(self, handle: str, last_us: int) -> list[SimpleNamespace]:
        raise NVMLError_NotSupported("scripted: no per-process utilization")
