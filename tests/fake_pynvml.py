"""A scripted stand-in for the `pynvml` module (nvidia-ml-py): one GPU or several, each a `FakeGpu`
whose switches make it behave as a real driver does in the cases below. Only tests use it.

Where each behaviour is documented (NVML API reference, https://docs.nvidia.com/deploy/nvml-api/,
by function page; nvml.h; the bindings' source, nvidia-ml-py 13's `pynvml.py`):

- Errors: every failing call raises `NVMLError(code)`, which pynvml's `NVMLError.__new__` turns into
  the subclass for that code (`NVMLError_NotFound` for 6, ...), `.value` being the code; a subclass
  built directly (`NVMLError_NotFound()`) carries its own code (pynvml `_extractNVMLErrorsAsClasses`).
  The codes are nvml.h's `nvmlReturn_t`.
- `NVMLLibraryMismatchError`, a plain Exception: pynvml's `throwOnVersionMismatch` raises it from
  the unversioned `nvmlDeviceGetComputeRunningProcesses` (which calls `_v3`) when the library lacks
  `_v3` (FUNCTION_NOT_FOUND). `FakeGpu.processes_v3=False` is such a driver (older than R510; see
  the "Device Queries" page, nvmlDeviceGetComputeRunningProcesses_v3, and nvitop's libnvml, which
  probes _v3, _v2, then the unversioned call for the same reason).
- Process records of another struct version (`garbage_processes`): the driver writes
  `nvmlProcessInfo_v2_t` records (24 bytes: pid, usedGpuMemory, gpuInstanceId, computeInstanceId)
  and the bindings read them as `nvmlProcessInfo_t` v3 (32 bytes, + usedGpuCcProtectedMemory):
  every record after the first is read across two of the driver's (nvml.h's struct definitions;
  the mismatch is what nvitop's libnvml comments warn of).
- `nvmlDeviceGetSamples` ("Device Queries"): the samples newer than the timestamp given, stamped in
  microseconds of the CPU's clock; NOT_FOUND when there are none (`idle_since`: an idle GPU, whose
  buffer records nothing new), NOT_SUPPORTED on a GPU without the buffer (`buffered=False`;
  `no_buffer_code` makes it FUNCTION_NOT_FOUND, a driver without the call), and once-only errors
  from `sample_errors` (INVALID_ARGUMENT, as nvitop's libnvml has seen). `period` is the driver's
  sampling period (1/6 s on most GPUs, 1 s on some). `timestamp_base` makes the timestamps count
  from that Unix time (a boot time: drivers and VMs whose stamps count from boot, not 1970).
- `nvmlDeviceGetUtilizationRates` ("Device Queries"): the percent of the last sample period;
  NOT_SUPPORTED on a MIG slice and on a GPU in MIG mode (MIG user guide, "Device Monitoring").
- `nvmlDeviceGetMemoryInfo`: NOT_SUPPORTED on unified-memory GPUs (`memory_info=False`: GB10,
  Jetson Thor; NVML's release notes for those platforms).
- `nvmlDeviceGetHandleByIndex`: `handle_error` makes it fail for that GPU (the reference lists
  INSUFFICIENT_POWER, NO_PERMISSION, IRQ_ISSUE, GPU_IS_LOST and UNKNOWN), leaving the others.
- MIG ("Multi-Instance GPU Management" page: nvmlDeviceGetMigMode returns (current, pending),
  nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex with NOT_FOUND for an empty
  slot; MIG user guide): `mig_slices` puts the GPU in MIG mode with those slices; a slice handle
  answers name, UUID ("MIG-..."), memory and processes, and NOT_SUPPORTED for utilization, samples,
  power, temperature and clocks. `mig_calls=False` is a driver without the MIG calls.
- Per-process utilization: `nvmlDeviceGetProcessesUtilizationInfo` (R550 and later;
  `new_process_util=False`: FUNCTION_NOT_FOUND) and `nvmlDeviceGetProcessUtilization`, each giving
  the `process_samples` newer than the timestamp (driver clock), NOT_FOUND when there are none.
- `nvmlDeviceGetCurrentClocksEventReasons` exists from R535 on; `clocks_event=False` is an older
  driver (FUNCTION_NOT_FOUND), where `nvmlDeviceGetCurrentClocksThrottleReasons` answers.
  `FakeNvml(missing=...)` names calls the bindings themselves lack (AttributeError, as old
  nvidia-ml-py releases do).
- `nvmlDeviceGetCudaComputeCapability` ("Device Queries"; the bindings return the pair (major,
  minor), as CUDA's cuDeviceGetAttribute gives them): `compute_capability` (8.9 for the default
  RTX 4090; 7.0 is Volta, 6.0 Pascal). A MIG slice answers its parent's.
- `nvmlDeviceGetComputeMode` ("Device Queries"; nvml.h's `nvmlComputeMode_t`: NVML_COMPUTEMODE_DEFAULT
  0, _EXCLUSIVE_THREAD 1, "Support Removed", _PROHIBITED 2, _EXCLUSIVE_PROCESS 3; the reference lists
  NOT_SUPPORTED "if the device does not support this feature"): `compute_mode` (default 0), or
  `compute_mode=None` for a GPU that answers NOT_SUPPORTED. A MIG slice answers its parent's.
- `nvmlInit` / `nvmlShutdown` are counted, as NVML counts them ("Initialization and Cleanup").
- `processes` are (pid, bytes) as the driver lists them: host PIDs, which need not exist in the
  caller's PID namespace (a container).

`four_gpus` scripts a machine with four GPUs of different sizes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar

NVML_GPU_UTILIZATION_SAMPLES = 1
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_DEVICE_MIG_ENABLE = 1
NVML_COMPUTEMODE_DEFAULT = 0
NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1
NVML_COMPUTEMODE_PROHIBITED = 2
NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
GIB = 1024**3

_NAMES = {2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions", 6: "Not Found",
          9: "Driver Not Loaded", 10: "Timeout", 12: "NVML Shared Library Not Found", 13: "Function Not Found",
          15: "GPU is lost", 16: "GPU requires restart", 999: "Unknown Error"}  # fmt: skip


class NVMLError(Exception):
    """pynvml's NVMLError: `NVMLError(code)` is the subclass for `code`, with `.value` the code."""

    _by_code: ClassVar[dict[int, type[NVMLError]]] = {}
    value: Any

    def __new__(cls, value: Any = None, *args: Any) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _NAMES.get(self.value, f"NVML Error with code {self.value}")


def _error(name: str, code: int) -> type[NVMLError]:
    def new(cls: type[NVMLError], *args: Any) -> NVMLError:
        return NVMLError.__new__(cls, code)

    cls = type(name, (NVMLError,), {"__new__": new})
    NVMLError._by_code[code] = cls
    return cls


NVMLError_InvalidArgument = _error("NVMLError_InvalidArgument", 2)
NVMLError_NotSupported = _error("NVMLError_NotSupported", 3)
NVMLError_NoPermission = _error("NVMLError_NoPermission", 4)
NVMLError_NotFound = _error("NVMLError_NotFound", 6)
NVMLError_DriverNotLoaded = _error("NVMLError_DriverNotLoaded", 9)
NVMLError_Timeout = _error("NVMLError_Timeout", 10)
NVMLError_LibraryNotFound = _error("NVMLError_LibraryNotFound", 12)
NVMLError_FunctionNotFound = _error("NVMLError_FunctionNotFound", 13)
NVMLError_GpuIsLost = _error("NVMLError_GpuIsLost", 15)
NVMLError_ResetRequired = _error("NVMLError_ResetRequired", 16)
NVMLError_Unknown = _error("NVMLError_Unknown", 999)


class NVMLLibraryMismatchError(Exception):
    """pynvml's: an unversioned call whose versioned function the library lacks."""


@dataclass
class FakeSlice:
    """One MIG slice of a `FakeGpu`, in slot `slot` of its parent."""

    slot: int
    name: str = "NVIDIA A100-SXM4-80GB MIG 3g.40gb (fake)"
    uuid: str = "MIG-fake-0"
    mem_total: int = 40 * GIB
    mem_used: int = 1 * GIB
    processes: tuple[tuple[int, int], ...] = ()


@dataclass
class FakeGpu:
    """The scripted device: `util_at(t)` gives utilization at Unix time t; samples every `period`.
    The other fields are the switches the module docstring lists (defaults: a healthy recent GPU)."""

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
    timestamp_base: float = 0.0
    idle_since: float | None = None
    no_buffer_code: int = 3
    sample_errors: list[int] = field(default_factory=list)
    memory_info: bool = True
    handle_error: int | None = None
    mig_slices: tuple[FakeSlice, ...] = ()
    mig_calls: bool = True
    max_mig_devices: int = 7
    processes_v3: bool = True
    garbage_processes: bool = False
    process_samples: tuple[tuple[float, int, float], ...] = ()  # (Unix time, pid, SM %)
    new_process_util: bool = True
    clocks_event: bool = True
    compute_capability: tuple[int, int] = (8, 9)
    compute_mode: int | None = NVML_COMPUTEMODE_DEFAULT  # None: the driver answers NOT_SUPPORTED


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


def _fail(code: int) -> NVMLError:
    return NVMLError(code)


class FakeNvml:
    """Module-like object: pass it as `nvml` to `cockpit.core.machine.nvml.open_gpus`. `missing`
    names calls these bindings lack (AttributeError). `sample_calls_by_handle` counts
    `nvmlDeviceGetSamples` per handle ("gpu0", "gpu0/mig1")."""

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVML_GPU_UTILIZATION_SAMPLES = NVML_GPU_UTILIZATION_SAMPLES
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_COMPUTEMODE_DEFAULT = NVML_COMPUTEMODE_DEFAULT
    NVML_COMPUTEMODE_EXCLUSIVE_THREAD = NVML_COMPUTEMODE_EXCLUSIVE_THREAD
    NVML_COMPUTEMODE_PROHIBITED = NVML_COMPUTEMODE_PROHIBITED
    NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = NVML_COMPUTEMODE_EXCLUSIVE_PROCESS

    def __init__(self, gpu: FakeGpu | Sequence[FakeGpu], missing: Sequence[str] = ()) -> None:
        self.missing = frozenset(missing)
        self.gpus = [gpu] if isinstance(gpu, FakeGpu) else list(gpu)
        self.gpu = self.gpus[0]
        self.shutdown = False
        self.inits = 0  # nvmlInit calls not yet matched by an nvmlShutdown
        self.sample_calls = 0
        self.sample_calls_by_handle: dict[str, int] = {}

    def __getattribute__(self, name: str) -> Any:
        if name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    # ----- handles: "gpu<i>" for a whole GPU, "gpu<i>/mig<slot>" for a slice -----

    def _device(self, handle: str) -> FakeGpu:
        index = int(handle.split("/")[0].removeprefix("gpu"))
        if index >= len(self.gpus):
            raise _fail(6)
        return self.gpus[index]

    def _slice(self, handle: str) -> FakeSlice | None:
        if "/mig" not in handle:
            return None
        slot = int(handle.split("/mig")[1])
        return next(s for s in self._device(handle).mig_slices if s.slot == slot)

    def _whole(self, handle: str) -> FakeGpu:
        """The GPU of a handle that must not be a slice (reads a slice does not answer)."""
        if self._slice(handle) is not None:
            raise _fail(3)
        return self._device(handle)

    def _driver_us(self, gpu: FakeGpu, t: float) -> int:
        return int((t - gpu.timestamp_base) * 1e6)

    # ----- initialisation and the device list -----

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
            raise _fail(6)
        if self.gpus[index].handle_error is not None:
            raise _fail(self.gpus[index].handle_error)
        return f"gpu{index}"

    def nvmlDeviceGetName(self, handle: str) -> bytes:
        part = self._slice(handle)
        return (part.name if part is not None else self._device(handle).name).encode()

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        part = self._slice(handle)
        return part.uuid if part is not None else self._device(handle).uuid

    def nvmlDeviceGetCudaComputeCapability(self, handle: str) -> tuple[int, int]:
        return self._device(handle).compute_capability

    def nvmlDeviceGetComputeMode(self, handle: str) -> int:
        mode = self._device(handle).compute_mode
        if mode is None:
            raise _fail(3)
        return mode

    def nvmlSystemGetDriverVersion(self) -> str:
        return "555.42"

    # ----- MIG -----

    def nvmlDeviceGetMigMode(self, handle: str) -> list[int]:
        gpu = self._device(handle)
        if not gpu.mig_calls:
            raise _fail(13)
        mode = NVML_DEVICE_MIG_ENABLE if gpu.mig_slices else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: str) -> int:
        gpu = self._device(handle)
        if not gpu.mig_calls:
            raise _fail(13)
        return gpu.max_mig_devices if gpu.mig_slices else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: str, index: int) -> str:
        gpu = self._device(handle)
        if not any(s.slot == index for s in gpu.mig_slices):
            raise _fail(6)  # an empty slot
        return f"{handle}/mig{index}"

    # ----- memory and utilization -----

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> SimpleNamespace:
        part = self._slice(handle)
        if part is not None:
            return SimpleNamespace(used=part.mem_used, total=part.mem_total, free=part.mem_total - part.mem_used)
        gpu = self._device(handle)
        if not gpu.memory_info:
            raise _fail(3)
        return SimpleNamespace(used=gpu.mem_used, total=gpu.mem_total, free=gpu.mem_total - gpu.mem_used)

    def nvmlDeviceGetSamples(self, handle: str, kind: int, last_us: int) -> tuple[int, list[SimpleNamespace]]:
        self.sample_calls += 1
        self.sample_calls_by_handle[handle] = self.sample_calls_by_handle.get(handle, 0) + 1
        gpu = self._whole(handle)
        if gpu.mig_slices:
            raise _fail(3)
        if not gpu.buffered:
            raise _fail(gpu.no_buffer_code)
        if gpu.sample_errors:
            raise _fail(gpu.sample_errors.pop(0))
        now = gpu.clock()
        start = gpu.start if gpu.start is not None else now - 1.0
        gpu.start = start
        samples = []
        t = start
        while t <= now:
            stamp = self._driver_us(gpu, t)
            if stamp > last_us and (gpu.idle_since is None or t < gpu.idle_since):
                samples.append(SimpleNamespace(timeStamp=stamp, sampleValue=SimpleNamespace(uiVal=int(gpu.util_at(t)))))
            t += gpu.period
        if not samples:
            raise _fail(6)
        return NVML_VALUE_TYPE_UNSIGNED_INT, samples[-120:]

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> SimpleNamespace:
        gpu = self._whole(handle)
        if gpu.mig_slices:
            raise _fail(3)
        return SimpleNamespace(gpu=int(gpu.util_at(gpu.clock())), memory=10)

    # ----- power, temperature, clocks -----

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        self._whole(handle)
        return 215_000

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        self._whole(handle)
        return 61

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        self._whole(handle)
        return 2520

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        if not self._whole(handle).clocks_event:
            raise _fail(13)
        return 0x4  # sw power cap

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: str) -> int:
        self._whole(handle)
        return 0x4

    # ----- processes -----

    def _process_list(self, handle: str) -> list[tuple[int, int]]:
        part = self._slice(handle)
        return list(part.processes if part is not None else self._device(handle).processes)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: str) -> list[SimpleNamespace]:
        return self._processes_v3(handle)

    def _processes_v3(self, handle: str) -> list[SimpleNamespace]:
        """The library's _v3 call, which the unversioned binding calls whatever the bindings name."""
        gpu = self._device(handle)
        if not gpu.processes_v3:
            raise _fail(13)
        procs = self._process_list(handle)
        if not gpu.garbage_processes:
            return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in procs]
        # v2 records (24 bytes each) read back through the v3 layout (32 bytes each).
        raw = b"".join(struct.pack("<I4xQII", pid, mem, 0xFFFFFFFF, 0xFFFFFFFF) for pid, mem in procs)
        raw += bytes(32 * len(procs) - len(raw))
        return [SimpleNamespace(pid=pid, usedGpuMemory=used)
                for pid, used, _, _, _ in struct.iter_unpack("<I4xQIIQ", raw)]  # fmt: skip

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: str) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in self._process_list(handle)]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[SimpleNamespace]:
        try:
            return self._processes_v3(handle)
        except NVMLError_FunctionNotFound:
            raise NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match"
            ) from None

    def _process_util(self, handle: str, last_us: int) -> list[SimpleNamespace]:
        gpu = self._device(handle)
        samples = [SimpleNamespace(pid=pid, timeStamp=self._driver_us(gpu, t), smUtil=sm, memUtil=0)
                   for t, pid, sm in gpu.process_samples if t <= gpu.clock()]  # fmt: skip
        samples = [s for s in samples if s.timeStamp > last_us]
        if not samples:
            raise _fail(6)
        return samples

    def nvmlDeviceGetProcessesUtilizationInfo(self, handle: str, last_us: int) -> list[SimpleNamespace]:
        if not self._device(handle).new_process_util:
            raise _fail(13)
        return self._process_util(handle, last_us)

    def nvmlDeviceGetProcessUtilization(self, handle: str, last_us: int) -> list[SimpleNamespace]:
        return self._process_util(handle, last_us)
