"""The only code that talks to NVML (NVIDIA's `nvidia-ml-py`, imported as `pynvml`).

Tests pass a scripted stand-in module as `nvml`; the product always uses the real one. Every read
that a GPU or driver may not support (power, clocks, per-process data, the UUID) degrades to None
(or "") instead of failing the tick. What it reads is handed on as the types of
`cockpit.core.machine.gpu_types`, which the rest of the cockpit imports without this module.

A GPU is known by its NVML index, and by its UUID, which says whether the GPU at an index is still
the one a job was placed on. `open_gpus` gives a reader for every GPU NVML sees; each reader holds
one reference on NVML (NVML counts `nvmlInit` calls), so each reader's `close` is its own.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from cockpit.core.machine.gpu_types import (
    COMPUTE_DEFAULT,
    COMPUTE_EXCLUSIVE_PROCESS,
    COMPUTE_EXCLUSIVE_THREAD,
    COMPUTE_PROHIBITED,
    UTIL_BUFFER,
    UTIL_NONE_MIG,
    UTIL_POLL,
    GpuInfo,
    GpuSample,
)

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

# `nvmlDeviceGetComputeMode`'s answer (nvml.h, `nvmlComputeMode_t`) as `GpuInfo.compute_mode` names it.
COMPUTE_MODES = {0: COMPUTE_DEFAULT, 1: COMPUTE_EXCLUSIVE_THREAD, 2: COMPUTE_PROHIBITED, 3: COMPUTE_EXCLUSIVE_PROCESS}


def error_code(exc: BaseException) -> int | None:
    """The NVML return code an NVMLError carries (`exc.value`), or None for any other exception."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def gpu_lost(exc: BaseException) -> bool:
    """True when `exc` says the GPU itself is gone (off the bus, or needing a reset), not that one
    read failed: only then is a GPU dropped at once."""
    return error_code(exc) in (ERROR_GPU_IS_LOST, ERROR_RESET_REQUIRED)


# The alternatives for one thing, newest first: each driver answers some of them (found once per
# reader). _v3 process records need R510+; nvidia-ml-py 13's unversioned call is _v3 under a check
# that raises NVMLLibraryMismatchError (not an NVMLError) where the library lacks it.
PROCESS_CALLS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)
PROCESS_UTIL_CALLS = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")
CLOCK_EVENT_CALLS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")

PID_MAX_DEFAULT = 4_194_304  # Linux's ceiling for /proc/sys/kernel/pid_max on 64-bit systems
PROCESS_MEMORY_SLACK = 256 * 2**20  # processes allocate between the device read and the process read
BUFFER_RETRY_S = 10.0  # how often a GPU that said it has no sample buffer is asked again
CLOCK_SKEW_S = 60.0  # driver timestamps further than this from the wall clock do not count from 1970
MAX_PERIOD_S = 5.0  # a longer gap between samples is a pause (an idle GPU), not the sampling period
PERIOD_GAPS = 32  # recent sample gaps the period is the median of

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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def kernel_pid_max(path: Path = Path("/proc/sys/kernel/pid_max")) -> int:
    """The largest PID this kernel hands out (Linux's default ceiling where it cannot be read)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return PID_MAX_DEFAULT


def nvidia_device_signs(dev: Path = Path("/dev"), environ: Mapping[str, str] | None = None) -> list[str]:
    """What says this machine (or container) was given an NVIDIA GPU, even where NVML cannot be
    loaded: its device nodes, and the container toolkit's NVIDIA_VISIBLE_DEVICES."""
    env = os.environ if environ is None else environ
    signs = [str(dev / name) for name in ("nvidiactl", "nvidia0") if (dev / name).exists()]
    visible = env.get("NVIDIA_VISIBLE_DEVICES", "")
    if visible and visible not in ("void", "none"):
        signs.append(f"NVIDIA_VISIBLE_DEVICES={visible}")
    return signs


class GpuReader:
    """Reads one GPU, or one MIG slice, through an initialised NVML module; `close` gives back one
    NVML reference.

    Which of a driver's alternative calls answers (the running-process call, the per-process
    utilization call, the clock-event call) is found once and remembered. A read raises only when
    the GPU is lost (`gpu_lost`); anything a GPU or driver may lack degrades to None. `clock` is
    the machine's wall clock (Unix seconds): sample times are checked against it."""

    _closed = False  # `close` gave the reference back

    def __init__(
        self,
        nvml: Any,
        index: int = 0,
        *,
        handle: Any = None,
        parent_index: int | None = None,
        parent_uuid: str = "",
        clock: Callable[[], float] = time.time,
        pid_max: int | None = None,
    ) -> None:
        self.nvml = nvml
        self.handle = handle if handle is not None else nvml.nvmlDeviceGetHandleByIndex(index)
        self._clock = clock
        self._pid_max = pid_max if pid_max is not None else kernel_pid_max()
        self._notes: list[str] = []
        self._said: set[str] = set()
        self._calls: dict[str, str | None] = {}  # a role -> the call that answers it (None: none does)
        self._memory_read = True
        memory = self._memory()
        uuid = self._try(nvml.nvmlDeviceGetUUID, self.handle)
        # Looked up inside _try: bindings older than the call lack the attribute, which degrades to None.
        capability = self._try(lambda handle: nvml.nvmlDeviceGetCudaComputeCapability(handle), self.handle)
        mode = self._try(lambda handle: nvml.nvmlDeviceGetComputeMode(handle), self.handle)
        self.info = GpuInfo(
            index=index,
            name=_text(nvml.nvmlDeviceGetName(self.handle)),
            memory_total_bytes=memory[1],
            driver=_text(nvml.nvmlSystemGetDriverVersion()),
            uuid=_text(uuid) if uuid is not None else "",
            parent_index=parent_index,
            parent_uuid=parent_uuid,
            compute_capability=(int(capability[0]), int(capability[1])) if capability is not None else None,
            compute_mode=COMPUTE_MODES.get(int(mode)) if mode is not None else None,
        )
        self._mem_used: int | None = memory[0]
        self._last_util_us = 0
        self._buffer_missing = False  # the driver said this GPU has no sample buffer
        self._buffer_retry_at = 0.0
        self._offset_s: float | None = None  # driver timestamp (s) + offset = Unix time
        self._gaps: deque[float] = deque(maxlen=PERIOD_GAPS)
        self._last_stamp_s: float | None = None
        self._last_new_at = clock()
        self._last_out_t = float("-inf")
        self._mode = UTIL_NONE_MIG if self.info.is_mig else UTIL_BUFFER

    def take_notes(self) -> list[str]:
        """What this reader found wrong since the previous call, one line each, each said once
        (records dropped as implausible, a call the driver lacks): the sampler shows them."""
        notes, self._notes = self._notes, []
        return notes

    def _note(self, key: str, line: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self._notes.append(f"GPU {self.info.index}: {line}")

    def _degrades(self, exc: BaseException) -> bool:
        """True for an error a read may turn into None: an NVML error short of a lost GPU, a call
        the bindings lack, or the bindings' version mismatch."""
        mismatch = getattr(self.nvml, "NVMLLibraryMismatchError", None)
        if isinstance(exc, AttributeError) or (mismatch is not None and isinstance(exc, mismatch)):
            return True
        return isinstance(exc, self.nvml.NVMLError) and not gpu_lost(exc)

    def _missing(self, exc: BaseException) -> bool:
        """True when `exc` says the call itself is absent (from the bindings or the library)."""
        mismatch = getattr(self.nvml, "NVMLLibraryMismatchError", None)
        return (
            isinstance(exc, AttributeError)
            or (mismatch is not None and isinstance(exc, mismatch))
            or error_code(exc) == ERROR_FUNCTION_NOT_FOUND
        )

    def _try(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except Exception as exc:
            if self._degrades(exc):
                return None
            raise

    def _first(self, role: str, names: Sequence[str], *args: Any, skip: tuple[int, ...] = ()) -> Any:
        """The answer of the first call in `names` this driver has (found once, then remembered);
        `skip` are codes that also mean "try the next one". Raises the answering call's error, or
        AttributeError when none of them is there."""
        if role in self._calls:
            name = self._calls[role]
            if name is None:
                raise AttributeError(f"none of {', '.join(names)}")
            return getattr(self.nvml, name)(*args)
        for name in names:
            try:
                result = getattr(self.nvml, name)(*args)
            except Exception as exc:
                if gpu_lost(exc) or not (self._missing(exc) or error_code(exc) in skip):
                    self._calls[role] = name
                    raise
                continue
            self._calls[role] = name
            return result
        self._calls[role] = None
        self._note(role, f"the driver has none of {', '.join(names)}")
        raise AttributeError(f"none of {', '.join(names)}")

    def _memory(self) -> tuple[int | None, int | None]:
        """(used, total) bytes, or (None, None) where NVML does not report this GPU's memory
        (unified memory: NOT_SUPPORTED); other errors raise."""
        if not self._memory_read:
            return None, None
        try:
            memory = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
        except Exception as exc:
            if error_code(exc) in (ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND):
                self._memory_read = False  # unified memory: NVML never reports it on this GPU
                return None, None
            raise
        return int(memory.used), int(memory.total)

    # ----- utilization -----

    def _poll(self, now: float) -> list[tuple[float, float]]:
        rates = self._try(self.nvml.nvmlDeviceGetUtilizationRates, self.handle)
        if rates is None:
            return []
        self._last_new_at = now
        return self._out([(now, float(rates.gpu))])

    def _out(self, readings: list[tuple[float, float]]) -> list[tuple[float, float]]:
        """`readings` newer than any handed out before: one series, in time order."""
        kept = [(t, u) for t, u in sorted(readings) if t > self._last_out_t]
        if kept:
            self._last_out_t = kept[-1][0]
        return kept

    def _driver_offset(self, newest_s: float, now: float) -> float:
        """The offset from the driver's timestamps to Unix time, found from the first reading and
        found again if readings would land in the future (a driver stamping from boot, not 1970)."""
        if self._offset_s is None or newest_s + self._offset_s > now + CLOCK_SKEW_S:
            skew = now - newest_s
            self._offset_s = skew if abs(skew) > CLOCK_SKEW_S else 0.0
            if self._offset_s:
                self._note(
                    "offset",
                    f"the driver's timestamps are {skew:,.0f} s off this clock (counted from "
                    "boot?): shifted to Unix time",
                )
        return self._offset_s

    @property
    def sample_period_s(self) -> float | None:
        """The spacing of the driver's samples, measured (median of recent gaps); None until known."""
        return statistics.median(self._gaps) if self._gaps else None

    def utilization_samples(self) -> list[tuple[float, float]]:
        """(Unix time, util %) readings since the previous call (often none), in time order.

        From NVML's sample buffer where the GPU has one (`util_mode` UTIL_BUFFER): every sample
        the driver took. An idle GPU's buffer records nothing, so after one sampling period with no
        new sample one `nvmlDeviceGetUtilizationRates` reading (stamped now) stands in: idle reads
        0 %, not blank. Without a buffer (NOT_SUPPORTED, FUNCTION_NOT_FOUND) it polls
        `nvmlDeviceGetUtilizationRates` (UTIL_POLL) and asks the buffer again every
        BUFFER_RETRY_S; after any other error it polls for this call only. A MIG slice has no
        utilization: none (UTIL_NONE_MIG)."""
        if self.info.is_mig:
            self._mode = UTIL_NONE_MIG
            return []
        nvml, now = self.nvml, self._clock()
        if self._buffer_missing and now < self._buffer_retry_at:
            self._mode = UTIL_POLL
            return self._poll(now)
        try:
            _, samples = nvml.nvmlDeviceGetSamples(self.handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, self._last_util_us)
        except Exception as exc:
            if not self._degrades(exc):
                raise
            code = error_code(exc)
            if code == ERROR_NOT_FOUND:  # nothing new since the last call
                self._buffer_missing, self._mode = False, UTIL_BUFFER
                return self._fill_if_dry(now)
            if code in (ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND) or self._missing(exc):
                self._note("no-buffer", "no utilization sample buffer on this GPU or driver: polling instead")
                self._buffer_missing, self._buffer_retry_at = True, now + BUFFER_RETRY_S
            self._mode = UTIL_POLL
            return self._poll(now)
        self._buffer_missing, self._mode = False, UTIL_BUFFER
        stamps = sorted((int(s.timeStamp), float(s.sampleValue.uiVal)) for s in samples)
        fresh = [(us, u) for us, u in stamps if us > self._last_util_us]
        if not fresh:
            return self._fill_if_dry(now)
        self._last_util_us = fresh[-1][0]
        for us, _ in fresh:
            stamp = us / 1e6
            # A gap longer than MAX_PERIOD_S is a pause in sampling (an idle GPU), not its period.
            if self._last_stamp_s is not None and 0 < stamp - self._last_stamp_s <= MAX_PERIOD_S:
                self._gaps.append(stamp - self._last_stamp_s)
            self._last_stamp_s = stamp
        offset = self._driver_offset(fresh[-1][0] / 1e6, now)
        self._last_new_at = now
        return self._out([(us / 1e6 + offset, u) for us, u in fresh])

    def _fill_if_dry(self, now: float) -> list[tuple[float, float]]:
        if now - self._last_new_at < (self.sample_period_s or 1.0):
            return []
        return self._poll(now)

    def read(self) -> tuple[GpuSample, list[tuple[float, float]]]:
        """The device counters now, and the utilization readings since the last read. Raises when
        the GPU is lost (`gpu_lost`); reads it lacks are None."""
        nvml, h = self.nvml, self.handle
        util = self.utilization_samples()
        values = [u for _, u in util]
        used, total = self._memory()
        self._mem_used = used
        power_mw = self._try(nvml.nvmlDeviceGetPowerUsage, h)
        # NVML renamed "throttle reasons" to "clocks event reasons" (R535); older drivers have only the first.
        mask = self._try(self._first, "clock-events", CLOCK_EVENT_CALLS, h) or 0
        sample = GpuSample(
            util_percent=sum(values) / len(values) if values else None,
            util_peak_percent=max(values) if values else None,
            mem_used_bytes=used,
            mem_total_bytes=total,
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            temperature_c=self._try(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
            sm_clock_mhz=self._try(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
            throttle_reasons=tuple(name for bit, name in THROTTLE_REASONS.items() if mask & bit and bit != 0x1),
            index=self.info.index,
            util_samples=tuple(util),
            util_mode=self._mode,
            sample_period_s=self.sample_period_s,
        )
        return sample, util

    # ----- processes -----

    def _plausible(self, procs: list[Any]) -> dict[int, int | None]:
        """pid -> GPU memory of the records that can be right; the others are dropped, said once.
        Records of another struct version than the bindings' read as garbage (huge PIDs, memory
        beyond the GPU's), so each is checked against the kernel's PID ceiling and the GPU."""
        total = self.info.memory_total_bytes
        kept: dict[int, int | None] = {}
        dropped = 0
        for proc in procs:
            pid, used = int(proc.pid), getattr(proc, "usedGpuMemory", None)
            used = int(used) if used is not None else None
            if not 0 < pid <= self._pid_max or (used is not None and total is not None and not 0 <= used <= total):
                dropped += 1
                continue
            kept[pid] = used
        held = sum(m for m in kept.values() if m is not None)
        if self._mem_used is not None and held > self._mem_used + PROCESS_MEMORY_SLACK:
            # Each record fits the GPU but together they hold more than it has in use: the memory
            # figures cannot be trusted, the PIDs still can.
            kept = dict.fromkeys(kept)
            self._note(
                "process-sum",
                f"process records claim {held / 2**20:,.0f} MiB, more than the "
                f"{self._mem_used / 2**20:,.0f} MiB in use: their memory is dropped",
            )
        if dropped:
            self._note(
                "process-garbage",
                f"dropped {dropped} process record(s) that cannot be right (a driver "
                "and nvidia-ml-py of different versions?)",
            )
        return kept

    def _process_sm(self, pids: Sequence[int]) -> dict[int, float] | None:
        """pid -> SM % over the last second (newest sample per pid; 0 for a pid in `pids` with no
        sample), or None where per-process utilization cannot be read."""
        now = self._clock()
        since_s = now - 1.0 - self._offset_s if self._offset_s is not None else 0.0
        try:
            records = self._first(
                "process-util", PROCESS_UTIL_CALLS, self.handle, max(0, int(since_s * 1e6)), skip=(ERROR_NOT_SUPPORTED,)
            )
        except Exception as exc:
            if not self._degrades(exc):
                raise
            if error_code(exc) == ERROR_NOT_FOUND:  # no process used the GPU in that second
                return dict.fromkeys(pids, 0.0)
            return None
        stamped = sorted((int(r.timeStamp), int(r.pid), float(r.smUtil)) for r in records)
        if stamped:
            offset = self._driver_offset(stamped[-1][0] / 1e6, now)
            stamped = [s for s in stamped if s[0] / 1e6 + offset >= now - 1.0]
        sm = dict.fromkeys(pids, 0.0)
        for _, pid, value in stamped:  # in time order: the newest per pid wins
            sm[pid] = min(100.0, max(0.0, value))
        return sm

    def processes(self) -> dict[int, tuple[int | None, float | None]]:
        """pid -> (GPU memory bytes, SM %) for the compute processes on this GPU (or slice), as the
        driver names them: host PIDs, which a container may not see. Memory is None where the
        driver does not say; SM % is None where per-process utilization cannot be read, and 0 for
        a listed process no sample of the last second names."""
        procs = self._try(self._first, "processes", PROCESS_CALLS, self.handle)
        if self._mem_used is None and self._memory_read:
            self._mem_used = self._memory()[0]
        memory = self._plausible(list(procs or []))
        sm = self._process_sm(list(memory))
        pids = list(memory) + [pid for pid in sm or {} if pid not in memory]
        return {pid: (memory.get(pid), sm.get(pid) if sm is not None else None) for pid in pids}

    def close(self) -> None:
        """Give back this reader's reference on NVML (the last one shuts it down), once: NVML counts
        one reference for the whole process, so a second `nvmlShutdown` from this reader would take
        another reader's and shut NVML down under it. Closing again does nothing."""
        if self._closed:
            return
        self._closed = True
        self._try(self.nvml.nvmlShutdown)


def _import_pynvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    module: ModuleType = pynvml  # nvidia-ml-py ships no type information: the import is Any
    return module


def _mig_slices(nvml: Any, handle: Any) -> list[Any] | None:
    """The handles of a GPU's MIG slices, in slot order, or None when MIG is off or the driver has
    no MIG calls."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except Exception as exc:
        if gpu_lost(exc) or not isinstance(exc, AttributeError | nvml.NVMLError):
            raise
        return None
    if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return None
    slices = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            slices.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        except nvml.NVMLError as exc:
            if error_code(exc) != ERROR_NOT_FOUND:  # NOT_FOUND: an empty slot
                raise
    return slices


def _no_nvml(nvml: Any, exc: BaseException, device_signs: Callable[[], Sequence[str]]) -> str:
    code = error_code(exc)
    if code == ERROR_LIBRARY_NOT_FOUND:
        signs = device_signs()
        if signs:
            return (
                f"no GPU telemetry: NVML is missing in this container, though it was given a GPU "
                f"({', '.join(signs)}): start it with the 'utility' driver capability "
                "(NVIDIA_DRIVER_CAPABILITIES=compute,utility, or docker run --gpus "
                "'all,\"capabilities=compute,utility\"')"
            )
        return "no GPU telemetry: NVML library not found (no NVIDIA driver installed)"
    if code == ERROR_DRIVER_NOT_LOADED:
        return "no GPU telemetry: the NVIDIA driver is not loaded"
    if code == ERROR_LIB_RM_VERSION_MISMATCH:
        return (
            "no GPU telemetry: the NVIDIA driver's library and its loaded kernel module are of different "
            "versions (a driver upgraded without a reboot): reboot, or reload the nvidia modules"
        )
    return f"no GPU telemetry: NVML failed to start ({type(exc).__name__}: {exc})"


def open_gpus(
    nvml: Any = None,
    *,
    clock: Callable[[], float] = time.time,
    device_signs: Callable[[], Sequence[str]] = nvidia_device_signs,
) -> tuple[list[GpuReader], str]:
    """A reader for every GPU NVML sees, in index order, then one per MIG slice (a GPU in MIG mode
    is read through its slices, numbered after every whole GPU), and a status: "" when all is well,
    else what the user should know (a GPU that could not be opened, MIG mode), or, with no readers,
    why there is no GPU telemetry. Each GPU is opened on its own: one failing costs only itself.
    Each reader holds its own NVML reference (see the module docstring); `clock` is the wall clock
    the readers check sample times against; `device_signs` says whether this machine was given a
    GPU (`nvidia_device_signs`) where NVML cannot be loaded."""
    nvml = nvml if nvml is not None else _import_pynvml()
    if nvml is None:
        return [], "no GPU telemetry: nvidia-ml-py is not installed"
    try:
        nvml.nvmlInit()  # this call's own reference, given back below: each reader takes its own
    except nvml.NVMLError as exc:
        return [], _no_nvml(nvml, exc, device_signs)
    readers: list[GpuReader] = []
    problems: list[str] = []
    try:
        count = nvml.nvmlDeviceGetCount()
        slices: list[tuple[int, str, Any]] = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                parts = _mig_slices(nvml, handle)
                if parts is None:
                    readers += _open_one(nvml, index, handle, None, clock)
                    continue
                parent_uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except Exception as exc:
                if not isinstance(exc, nvml.NVMLError):
                    raise
                problems.append(f"GPU {index} could not be opened ({type(exc).__name__}: {exc})")
                continue
            problems.append(f"GPU {index} is in MIG mode ({len(parts)} slices): utilization is not available per slice")
            slices += [(index, parent_uuid, part) for part in parts]
        for k, (parent, parent_uuid, part) in enumerate(slices):
            try:
                readers += _open_one(nvml, count + k, part, parent, clock, parent_uuid)
            except nvml.NVMLError as exc:
                problems.append(
                    f"MIG slice {count + k} of GPU {parent} could not be opened ({type(exc).__name__}: {exc})"
                )
    except nvml.NVMLError as exc:
        close_gpus(readers)
        nvml.nvmlShutdown()
        return [], f"no GPU telemetry: {type(exc).__name__}: {exc}"
    nvml.nvmlShutdown()
    if not readers:
        return [], "no GPU telemetry: " + ("; ".join(problems) or "no NVIDIA GPU found")
    return readers, "; ".join(problems)


def _open_one(
    nvml: Any, index: int, handle: Any, parent: int | None, clock: Callable[[], float], parent_uuid: str = ""
) -> list[GpuReader]:
    """One reader, holding its own NVML reference (given back if it cannot be opened)."""
    nvml.nvmlInit()
    try:
        return [GpuReader(nvml, index, handle=handle, parent_index=parent, parent_uuid=parent_uuid, clock=clock)]
    except BaseException:
        nvml.nvmlShutdown()
        raise


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


def open_gpu(
    nvml: Any = None, index: int = 0, *, clock: Callable[[], float] = time.time
) -> tuple[GpuReader | None, str]:
    """A reader for GPU `index` and open_gpus' status, or None and the reason there is no GPU
    telemetry."""
    readers, status = open_gpus(nvml, clock=clock)
    kept = keep_gpus(readers, [index])
    if readers and not kept:
        return None, "no GPU telemetry: no NVIDIA GPU found"
    return (kept[0] if kept else None), status
