"""A scripted stand-in for the `pynvml` module (nvidia-ml-py): one GPU or several, each a `FakeGpu`
whose switches make it behave as a real driver does in the cases below. Only tests use it.

Where each behaviour is documented (NVML API reference, https://docs.nvidia.com/deploy/nvml-api/,
by function page; nvml.h; the bindings' source, nvidia-ml-py 13's `pynvml.py`, named by function;
nvitop's `nvitop/api/libnvml.py`). `tests/test_machine_nvml_edges.py` pins the rows marked [pinned] to the
installed pynvml itself.

- Errors: every failing call raises `NVMLError(code)`, which pynvml's `NVMLError.__new__` turns into
  the subclass for that code, `.value` being the code; a subclass built directly
  (`NVMLError_NotFound()`) carries its own code. Every code of nvml.h's `nvmlReturn_t` that pynvml
  lists (its NVML_ERROR_* constants, 1 to 30 and 999) has its subclass, named as pynvml's
  `_extractNVMLErrorsAsClasses` names them: 18 is NVMLError_LibRmVersionMismatch (a driver upgraded
  under a loaded kernel module), 21 NVMLError_NoData. `str()` is pynvml's `_errcode_to_string` text,
  or "NVML Error with code N" for a code it does not name (its `__str__` when `nvmlErrorString`
  cannot answer). [pinned]
- `NVMLError` defines `__eq__` (`self.value == other.value`, pynvml's `NVMLError.__eq__`), which
  leaves it without `__hash__`: an instance is unhashable (no set member, dict key or `lru_cache`
  argument), and comparing one with an object without `.value` raises AttributeError. [pinned]
- `NVMLLibraryMismatchError`, a plain Exception: pynvml's `throwOnVersionMismatch` raises it from
  the unversioned `nvmlDeviceGetComputeRunningProcesses` (which calls `_v3`) when the library lacks
  `_v3` (FUNCTION_NOT_FOUND). `FakeGpu.processes_v3=False` is such a driver (older than R510; see
  the "Device Queries" page, nvmlDeviceGetComputeRunningProcesses_v3, and nvitop's libnvml, which
  probes _v3, _v2, then the unversioned call for the same reason).
- Process records (`nvmlDeviceGetComputeRunningProcesses_v3`, `_v2`): each carries pid,
  usedGpuMemory, gpuInstanceId and computeInstanceId (0xFFFFFFFF outside MIG; a slice's records
  name its GPU instance, numbered by its slot here, and compute instance 0). A memory of None in
  `processes` is NVML_VALUE_NOT_AVAILABLE, which pynvml turns into `usedGpuMemory=None` (nvml.h
  documents it under WDDM; it is seen on MIG too). In nvidia-ml-py 13 `c_nvmlProcessInfo_v3_t` is
  `c_nvmlProcessInfo_v2_t`, 24 bytes (`FakeNvml(record_bytes=24)`, the default). [pinned]
- Process records of another struct size (`garbage_processes`): the driver writes records of the
  other layout than the bindings read, and pynvml reads as many records of its own size from its
  zeroed array, so every record after the first straddles two of the driver's. Two pairs do this.
  nvidia-ml-py 13 (24-byte reads, as 12.535.108, .133, .161 and 12.550.52 read too) on an R535
  driver, which writes R535's 32-byte `nvmlProcessInfo_t` with usedGpuCcProtectedMemory (535.43 to
  535.86, and 535.104 on; nvitop's libnvml takes a driver with nvmlDeviceGetConfComputeMemSizeInfo
  but without nvmlDeviceGetRunningProcessDetailList for one; nvitop issues #75 and #88). And
  nvidia-ml-py 12.535.77 (`record_bytes=32`: the only release whose `c_nvmlProcessInfo_t` is 32
  bytes) on any other driver, which writes 24 bytes (R510 to R530, 535.98, R550 on; nvitop PRs #89
  and #94). cockpit's dependency (nvidia-ml-py>=12.535) allows both. [pinned: the first pair]
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
- `nvmlDeviceGetHandleByIndex`: INVALID_ARGUMENT for an index not below the count (nvml.h: "if
  index is invalid"); `handle_error` makes it fail for that GPU (the reference lists
  INSUFFICIENT_POWER, NO_PERMISSION, IRQ_ISSUE, GPU_IS_LOST and UNKNOWN), leaving the others.
- `nvmlDeviceGetName`, `nvmlDeviceGetUUID`, `nvmlSystemGetDriverVersion` return `str`: pynvml's
  `convertStrBytes` decodes the C string on Python 3. [pinned]
- MIG ("Multi-Instance GPU Management" page: nvmlDeviceGetMigMode returns (current, pending), and
  NOT_SUPPORTED on a GPU that has no MIG, a GeForce among them; nvmlDeviceGetMaxMigDeviceCount,
  nvmlDeviceGetMigDeviceHandleByIndex with NOT_FOUND for an empty slot; MIG user guide): a GPU
  answers the MIG mode only with `mig_capable` (`four_gpus`' A100) or `mig_slices`, which puts it
  in MIG mode with those slices; a slice handle answers name, UUID ("MIG-..."), memory and
  processes, and NOT_SUPPORTED for utilization, samples, power, temperature and clocks.
  `mig_calls=False` is a driver without the MIG calls.
- Per-process utilization: `nvmlDeviceGetProcessesUtilizationInfo` and
  `nvmlDeviceGetProcessUtilization`, each giving the `process_samples` newer than the timestamp
  (driver clock), NOT_FOUND when there are none. `new_process_util=False` makes the first fail with
  `new_process_util_code`: FUNCTION_NOT_FOUND (13, a driver before R550: pynvml's
  `_nvmlGetFunctionPointer`) or NOT_SUPPORTED (3, a GPU or driver that has the call but does not
  support it: the "Device Queries" page lists NVML_ERROR_NOT_SUPPORTED, for a device without the
  feature, among nvmlDeviceGetProcessesUtilizationInfo's return codes, and pynvml's
  `_nvmlCheckReturn` raises it as NVMLError_NotSupported; nvitop's `nvmlQuery` treats the two alike).
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
- `nvmlInit` / `nvmlShutdown` are counted, as NVML counts them ("Initialization and Cleanup":
  shutdown happens when the count reaches zero). A surplus `nvmlShutdown` raises UNINITIALIZED, and
  so does every other call while no `nvmlInit` is outstanding (each function's "if the library has
  not been successfully initialized"; pynvml's `_nvmlGetFunctionPointer` raises it before the
  library was ever loaded). The reference also says no error is reported for a surplus shutdown
  "for backwards compatibility"; the stand-in takes the stricter reading, which cockpit must
  survive either way. [pinned: a shutdown before the library was loaded]
- `processes` are (pid, bytes or None) as the driver lists them: host PIDs, which need not exist in
  the caller's PID namespace (a container).

`four_gpus` scripts a machine with four GPUs of different sizes.
"""

from __future__ import annotations

import string
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
# pynvml's NVML_VALUE_NOT_AVAILABLE_ulonglong: a record's usedGpuMemory the driver does not know.
NVML_VALUE_NOT_AVAILABLE = 2**64 - 1
NO_INSTANCE = 0xFFFFFFFF  # a record's gpuInstanceId and computeInstanceId outside MIG (nvml.h)
# The process records a `_v3` call exchanges: nvml.h's nvmlProcessInfo_v2_t (pid, 4 bytes of padding,
# usedGpuMemory, gpuInstanceId, computeInstanceId: 24 bytes), which nvidia-ml-py 13 reads its
# c_nvmlProcessInfo_v3_t as, and R535's nvmlProcessInfo_t, which adds usedGpuCcProtectedMemory (32).
RECORD_LAYOUTS = {24: struct.Struct("<I4xQII"), 32: struct.Struct("<I4xQIIQ")}

# nvml.h's nvmlReturn_t as nvidia-ml-py 13's pynvml.py lists it (its NVML_ERROR_* constants), and the
# text pynvml's NVMLError._errcode_to_string gives the codes it names (None: it asks nvmlErrorString).
_ERRORS: dict[int, tuple[str, str | None]] = {
    1: ("UNINITIALIZED", "Uninitialized"), 2: ("INVALID_ARGUMENT", "Invalid Argument"),
    3: ("NOT_SUPPORTED", "Not Supported"), 4: ("NO_PERMISSION", "Insufficient Permissions"),
    5: ("ALREADY_INITIALIZED", "Already Initialized"), 6: ("NOT_FOUND", "Not Found"),
    7: ("INSUFFICIENT_SIZE", "Insufficient Size"), 8: ("INSUFFICIENT_POWER", "Insufficient External Power"),
    9: ("DRIVER_NOT_LOADED", "Driver Not Loaded"), 10: ("TIMEOUT", "Timeout"),
    11: ("IRQ_ISSUE", "Interrupt Request Issue"), 12: ("LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"),
    13: ("FUNCTION_NOT_FOUND", "Function Not Found"), 14: ("CORRUPTED_INFOROM", "Corrupted infoROM"),
    15: ("GPU_IS_LOST", "GPU is lost"), 16: ("RESET_REQUIRED", "GPU requires restart"),
    17: ("OPERATING_SYSTEM", "The operating system has blocked the request."),
    18: ("LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."), 19: ("IN_USE", None),
    20: ("MEMORY", "Insufficient Memory"), 21: ("NO_DATA", None), 22: ("VGPU_ECC_NOT_SUPPORTED", None),
    23: ("INSUFFICIENT_RESOURCES", None), 24: ("FREQ_NOT_SUPPORTED", None), 25: ("ARGUMENT_VERSION_MISMATCH", None),
    26: ("DEPRECATED", None), 27: ("NOT_READY", None), 28: ("GPU_NOT_FOUND", None), 29: ("INVALID_STATE", None),
    30: ("RESET_TYPE_NOT_SUPPORTED", None), 999: ("UNKNOWN", "Unknown Error"),
}  # fmt: skip


class NVMLError(Exception):
    """pynvml's NVMLError: `NVMLError(code)` is the subclass for `code`, with `.value` the code. It
    defines `__eq__` (equal codes), so an instance is unhashable and comparing it with anything that
    has no `.value` raises AttributeError, as pynvml's does."""

    _valClassMapping: ClassVar[dict[int, type[NVMLError]]] = {}
    value: Any

    def __new__(cls, value: Any) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        # pynvml asks nvmlErrorString for a code it does not name; "NVML Error with code N" is its
        # answer when that call fails, as it does with no driver.
        text = _ERRORS.get(self.value, ("", None))[1]
        return text if text is not None else f"NVML Error with code {self.value}"

    def __eq__(self, other: object) -> bool:
        return bool(self.value == other.value)  # type: ignore[attr-defined]


def _extract_errors_as_classes() -> None:
    """One subclass per code, named and made as pynvml's `_extractNVMLErrorsAsClasses` does
    (NVML_ERROR_LIB_RM_VERSION_MISMATCH: NVMLError_LibRmVersionMismatch), each a name of this module."""
    for code, (name, _) in _ERRORS.items():

        def new(cls: type[NVMLError], *args: Any, code: int = code) -> NVMLError:
            return NVMLError.__new__(cls, code)

        class_name = "NVMLError_" + string.capwords(name, "_").replace("_", "")
        cls = type(class_name, (NVMLError,), {"__new__": new})
        cls.__module__ = __name__
        globals()[class_name] = cls
        NVMLError._valClassMapping[code] = cls


_extract_errors_as_classes()


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
    processes: tuple[tuple[int, int | None], ...] = ()


@dataclass
class FakeGpu:
    """The scripted device: `util_at(t)` gives utilization at Unix time t; samples every `period`.
    The other fields are the switches the module docstring lists (defaults: a healthy recent GPU)."""

    util_at: Callable[[float], float]
    clock: Callable[[], float]
    period: float = 1 / 6
    mem_used: int = 3 * GIB
    mem_total: int = 24 * GIB
    processes: tuple[tuple[int, int | None], ...] = ()
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
    mig_capable: bool = False
    max_mig_devices: int = 7
    processes_v3: bool = True
    garbage_processes: bool = False
    process_samples: tuple[tuple[float, int, float], ...] = ()  # (Unix time, pid, SM %)
    new_process_util: bool = True
    new_process_util_code: int = 13
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
                name=f"NVIDIA {model} (fake)", uuid=f"GPU-fake-{i}", mig_capable=model.startswith("A100"))
        for i, (size, model) in enumerate(sizes)
    ]  # fmt: skip


def _fail(code: int) -> NVMLError:
    return NVMLError(code)


class FakeNvml:
    """Module-like object: pass it as `nvml` to `cockpit.core.machine.nvml.open_gpus`. `missing`
    names calls these bindings lack (AttributeError). `record_bytes` is the size of the process
    record these bindings read from `_v3` (24: nvidia-ml-py 13; 32: 12.535.77). `sample_calls_by_handle`
    counts `nvmlDeviceGetSamples` per handle ("gpu0", "gpu0/mig1"). While no `nvmlInit` is
    outstanding every other NVML call raises UNINITIALIZED."""

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

    def __init__(self, gpu: FakeGpu | Sequence[FakeGpu], missing: Sequence[str] = (), record_bytes: int = 24) -> None:
        self.missing = frozenset(missing)
        self.record_bytes = record_bytes
        self.gpus = [gpu] if isinstance(gpu, FakeGpu) else list(gpu)
        self.gpu = self.gpus[0]
        self.shutdown = False
        self.inits = 0  # nvmlInit calls not yet matched by an nvmlShutdown
        self.sample_calls = 0
        self.sample_calls_by_handle: dict[str, int] = {}

    def __getattribute__(self, name: str) -> Any:
        if name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        value = object.__getattribute__(self, name)
        if not (name.startswith("nvml") and name not in ("nvmlInit", "nvmlShutdown") and callable(value)):
            return value

        def call(*args: Any) -> Any:
            if object.__getattribute__(self, "inits") <= 0:
                raise NVMLError(1)  # judged when called, as the library does: a call looked up early works
            return value(*args)

        return call

    # ----- handles: "gpu<i>" for a whole GPU, "gpu<i>/mig<slot>" for a slice -----

    def _device(self, handle: str) -> FakeGpu:
        index = int(handle.split("/")[0].removeprefix("gpu"))
        if index >= len(self.gpus):
            raise _fail(2)
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
        if self.inits <= 0:
            raise _fail(1)
        self.inits -= 1
        self.shutdown = self.inits <= 0

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        if not 0 <= index < len(self.gpus):
            raise _fail(2)
        if self.gpus[index].handle_error is not None:
            raise _fail(self.gpus[index].handle_error)
        return f"gpu{index}"

    def nvmlDeviceGetName(self, handle: str) -> str:
        part = self._slice(handle)
        return part.name if part is not None else self._device(handle).name

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
        if not (gpu.mig_capable or gpu.mig_slices):
            raise _fail(3)
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

    def _records(self, handle: str, read: int, garbage: bool = False) -> list[SimpleNamespace]:
        """The process records of a GPU or slice as pynvml hands them over: the driver writes one
        record per process (in the other layout than the bindings read when `garbage`), pynvml reads
        as many records of `read` bytes from its zeroed array and turns NVML_VALUE_NOT_AVAILABLE
        into None (`nvmlDeviceGetComputeRunningProcesses_v3`)."""
        part = self._slice(handle)
        procs = part.processes if part is not None else self._device(handle).processes
        # A slice's records name its GPU instance (numbered by its slot here) and compute instance 0.
        gi, ci = (part.slot, 0) if part is not None else (NO_INSTANCE, NO_INSTANCE)
        wrote = (56 - read) if garbage else read
        raw = b"".join(RECORD_LAYOUTS[wrote].pack(pid, NVML_VALUE_NOT_AVAILABLE if mem is None else mem, gi, ci,
                                                  *((0,) if wrote == 32 else ()))
                       for pid, mem in procs)  # fmt: skip
        raw = (raw + bytes(read * len(procs)))[: read * len(procs)]
        records = []
        for fields in RECORD_LAYOUTS[read].iter_unpack(raw):
            names = ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId", "usedGpuCcProtectedMemory")
            record = SimpleNamespace(**dict(zip(names, fields, strict=False)))
            if record.usedGpuMemory == NVML_VALUE_NOT_AVAILABLE:
                record.usedGpuMemory = None
            records.append(record)
        return records

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: str) -> list[SimpleNamespace]:
        return self._processes_v3(handle)

    def _processes_v3(self, handle: str) -> list[SimpleNamespace]:
        """The library's _v3 call, which the unversioned binding calls whatever the bindings name."""
        gpu = self._device(handle)
        if not gpu.processes_v3:
            raise _fail(13)
        return self._records(handle, self.record_bytes, gpu.garbage_processes)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: str) -> list[SimpleNamespace]:
        return self._records(handle, 24)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[SimpleNamespace]:
        try:
            return self._processes_v3(handle)
        except NVMLError as exc:
            if exc.value != 13:
                raise
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
        gpu = self._device(handle)
        if not gpu.new_process_util:
            raise _fail(gpu.new_process_util_code)
        return self._process_util(handle, last_us)

    def nvmlDeviceGetProcessUtilization(self, handle: str, last_us: int) -> list[SimpleNamespace]:
        return self._process_util(handle, last_us)


# pynvml's module names every error class and code (NVMLError_NotSupported, NVML_ERROR_NOT_SUPPORTED),
# so a caller may catch by either: these bindings name them too.
for _code, (_name, _) in _ERRORS.items():
    setattr(FakeNvml, NVMLError._valClassMapping[_code].__name__, NVMLError._valClassMapping[_code])
    setattr(FakeNvml, f"NVML_ERROR_{_name}", _code)
