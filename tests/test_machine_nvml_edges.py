"""Issue 42 item 10: the NVML stand-in's edges. Each row of the stand-in (`tests.fake_pynvml`) that
nvidia-ml-py 13's `pynvml` decides is pinned to the installed pynvml itself (its Python code runs
here without a driver: only the C calls are scripted), and each row has one test that cockpit's NVML
reader and sampler survive it. The tests name the row they pin."""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
from collections.abc import Callable, Iterator
from typing import Any

import pynvml
import pytest

from cockpit.core.machine.nvml import (
    ERROR_FUNCTION_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    GpuReader,
    close_gpus,
    open_gpu,
    open_gpus,
)
from cockpit.core.telemetry.gpu_thread import GPU_FAILS_TO_DROP
from cockpit.core.telemetry.sampler import Sampler
from tests import fake_pynvml
from tests.fake_pynvml import (
    GIB,
    NO_INSTANCE,
    NVML_VALUE_NOT_AVAILABLE,
    RECORD_LAYOUTS,
    FakeGpu,
    FakeNvml,
    FakeSlice,
    NVMLError,
    four_gpus,
)
from tests.fakeclock import FakeClock

PYNVML_MAJOR = int(importlib.metadata.version("nvidia-ml-py").split(".")[0])


def _one(clock: FakeClock, **switches: Any) -> tuple[GpuReader, FakeNvml]:
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 42.0, clock=clock.time, **switches))
    gpu, status = open_gpu(nvml, clock=clock.time)
    assert gpu is not None, status
    return gpu, nvml


@pytest.fixture
def c_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Callable[..., int]]]:
    """The C functions the real pynvml finds, by name (`_nvmlGetFunctionPointer`), scripted by the
    test; a name not scripted is a library without it (FUNCTION_NOT_FOUND), as pynvml raises."""
    scripted: dict[str, Callable[..., int]] = {}

    def lookup(name: str) -> Callable[..., int]:
        if name not in scripted:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return scripted[name]

    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lookup)
    yield scripted


def _driver_writes(raw: bytes, count: int) -> Callable[..., int]:
    """A C `nvmlDeviceGetComputeRunningProcesses_v3` whose driver writes `raw` (`count` records)."""

    def fn(handle: Any, c_count: Any, c_procs: Any) -> int:
        c_count._obj.value = count  # byref(c_uint): the count pynvml passed
        if c_procs is None:
            return int(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        ctypes.memmove(c_procs, raw, len(raw))
        return int(pynvml.NVML_SUCCESS)

    return fn


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId")}


# ----- rows 1 and 2: NVMLError is unhashable, and every code has its subclass -----


def test_pin_every_code_has_pynvmls_subclass_and_text() -> None:
    real = {code: cls.__name__ for code, cls in pynvml.NVMLError._valClassMapping.items()}
    fake = {code: cls.__name__ for code, cls in NVMLError._valClassMapping.items()}
    assert fake == real
    assert fake[18] == "NVMLError_LibRmVersionMismatch" and fake[21] == "NVMLError_NoData"
    for code, name in real.items():
        # The stand-in module and FakeNvml name each class and code, as pynvml's module does.
        assert getattr(fake_pynvml, name) is getattr(FakeNvml, name) is NVMLError._valClassMapping[code]
        assert type(NVMLError(code)).__name__ == name and getattr(fake_pynvml, name)().value == code
        constant = next(c for c in dir(pynvml) if c.startswith("NVML_ERROR_") and getattr(pynvml, c) == code)
        assert getattr(FakeNvml, constant) == code
    for code, (_, text) in fake_pynvml._ERRORS.items():
        if text is not None:  # pynvml names it; the others are nvmlErrorString's, which needs a driver
            assert pynvml.NVMLError._errcode_to_string[code] == text == str(NVMLError(code))


def test_pin_nvml_errors_are_unhashable_and_compare_by_code() -> None:
    for module in (pynvml, fake_pynvml):
        exc = module.NVMLError(3)
        assert module.NVMLError.__hash__ is None
        with pytest.raises(TypeError, match="unhashable"):
            hash(exc)
        with pytest.raises(TypeError, match="unhashable"):
            {exc}  # noqa: B018 (the set is the point)
        assert exc == module.NVMLError_NotSupported() and exc != module.NVMLError(6)
        with pytest.raises(AttributeError):
            exc == None  # noqa: B015, E711 (pynvml's __eq__ reads other.value)


def test_row1_unhashable_errors_from_every_read_cost_only_figures() -> None:
    # Every read the reader makes fails with an unhashable NVMLError; the reader, the sampler's
    # count of failures and its status must never put one in a set, a dict key or a cache.
    clock = FakeClock()
    sampler_nvml = FakeNvml(four_gpus(clock.time))
    readers, status = open_gpus(sampler_nvml, clock=clock.time)
    assert status == ""

    def timeout(*args: Any) -> Any:
        raise NVMLError(10)

    for name in ("nvmlDeviceGetSamples", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage",
                 "nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo", "nvmlDeviceGetCurrentClocksEventReasons",
                 "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetProcessesUtilizationInfo"):  # fmt: skip
        setattr(sampler_nvml, name, timeout)
    sample, util = readers[1].read()
    assert sample.util_percent is None and sample.power_w is None and util == []
    assert readers[1].processes() == {}
    sampler = Sampler(gpus=readers, clock=clock)
    sampler_nvml.nvmlDeviceGetMemoryInfo = timeout  # type: ignore[method-assign]
    for _ in range(GPU_FAILS_TO_DROP):
        clock.t += 0.2
        sampler.tick()
    assert sampler.gpus == [] and sampler.gpu_status.startswith("no GPU telemetry: lost (NVMLError_Timeout")
    assert sampler_nvml.inits == 0


@pytest.mark.parametrize("code", sorted(pynvml.NVMLError._valClassMapping))
def test_row2_nvml_failing_to_start_with_any_code_is_one_status_line(code: int) -> None:
    failure = NVMLError._valClassMapping[code]
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 1.0, clock=FakeClock().time, fail_init=failure))
    readers, status = open_gpus(nvml, device_signs=lambda: [])
    assert readers == [] and status.startswith("no GPU telemetry: ") and "\n" not in status
    if code == 18:  # a driver upgraded under a loaded kernel module: what to do, not only the code
        assert "reboot" in status


# ----- row 3: nvmlDeviceGetMigMode on a GPU without MIG -----


def test_row3_a_geforce_says_mig_is_not_supported_and_is_read_whole() -> None:
    clock = FakeClock()
    gpus = four_gpus(clock.time)  # two GeForce, one RTX 4090, an A100 with MIG off
    nvml = FakeNvml(gpus)
    readers, status = open_gpus(nvml, clock=clock.time)
    with pytest.raises(fake_pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetMigMode("gpu0")
    assert nvml.nvmlDeviceGetMigMode("gpu3") == [0, 0]  # the A100 has MIG, not enabled
    assert [(r.info.index, r.info.is_mig) for r in readers] == [(0, False), (1, False), (2, False), (3, False)]
    assert status == ""
    close_gpus(readers)
    assert nvml.inits == 0


# ----- row 4: records with usedGpuMemory None, and their instance ids -----


def test_pin_a_record_without_memory_is_none_and_carries_its_instance_ids(c_calls: dict[str, Any]) -> None:
    procs = ((4242, None), (4343, 3 * GIB))
    raw = b"".join(RECORD_LAYOUTS[24].pack(pid, NVML_VALUE_NOT_AVAILABLE if m is None else m, 1, 0)
                   for pid, m in procs)  # fmt: skip
    c_calls["nvmlDeviceGetComputeRunningProcesses_v3"] = _driver_writes(raw, len(procs))
    real = [_fields(r) for r in pynvml.nvmlDeviceGetComputeRunningProcesses_v3(None)]
    assert real[0]["usedGpuMemory"] is None and real[1]["usedGpuMemory"] == 3 * GIB
    clock = FakeClock()
    gpu = FakeGpu(util_at=lambda t: 1.0, clock=clock.time, mig_slices=(FakeSlice(slot=1, processes=procs),))
    nvml = FakeNvml(gpu)
    nvml.nvmlInit()
    assert [_fields(r) for r in nvml.nvmlDeviceGetComputeRunningProcesses_v3("gpu0/mig1")] == real
    gpu.mig_slices, gpu.processes = (), procs
    assert [(r.gpuInstanceId, r.computeInstanceId) for r in nvml.nvmlDeviceGetComputeRunningProcesses_v3("gpu0")] == [
        (NO_INSTANCE, NO_INSTANCE)
    ] * 2


def test_row4_a_process_without_memory_keeps_its_pid_and_sm() -> None:
    clock = FakeClock()
    me = os.getpid()  # the job's worker, whose record has no memory
    gpus = [FakeGpu(util_at=lambda t: 1.0, clock=clock.time, processes=((me, None),),
                    process_samples=((clock.t + 0.5, me, 37.0),)),
            FakeGpu(util_at=lambda t: 1.0, clock=clock.time, name="NVIDIA A100 (fake)", uuid="GPU-fake-1",
                    mig_slices=(FakeSlice(slot=0, uuid="MIG-a", processes=((4242, None), (4343, GIB))),))]  # fmt: skip
    readers, _ = open_gpus(FakeNvml(gpus), clock=clock.time)
    whole, mig = readers
    assert mig.info.is_mig and {pid: mem for pid, (mem, _) in mig.processes().items()} == {4242: None, 4343: GIB}
    clock.t += 1.0
    assert whole.processes() == {me: (None, 37.0)}
    sampler = Sampler(gpus=readers, clock=clock)
    sampler.set_jobs({"000": me})
    job = sampler.tick().jobs["000"]
    assert job.gpu_mem_bytes is None and job.gpu_sm_percent == 37.0
    sampler.stop()


# ----- row 5: in nvidia-ml-py 13 the v3 process record is the v2 layout -----


@pytest.mark.skipif(PYNVML_MAJOR < 13, reason="the stand-in's default bindings are nvidia-ml-py 13's")
def test_pin_the_v3_record_is_the_24_byte_v2_layout() -> None:
    assert pynvml.c_nvmlProcessInfo_v3_t is pynvml.c_nvmlProcessInfo_v2_t
    assert ctypes.sizeof(pynvml.c_nvmlProcessInfo_v3_t) == RECORD_LAYOUTS[24].size == 24
    assert FakeNvml(FakeGpu(util_at=lambda t: 1.0, clock=FakeClock().time)).record_bytes == 24
    names = [name for name, _ in pynvml.c_nvmlProcessInfo_v3_t._fields_]
    offsets = [getattr(pynvml.c_nvmlProcessInfo_v3_t, name).offset for name in names]
    assert names == ["pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId"] and offsets == [0, 8, 16, 20]


@pytest.mark.skipif(PYNVML_MAJOR < 13, reason="the stand-in's default bindings are nvidia-ml-py 13's")
def test_pin_an_r535_drivers_32_byte_records_read_as_pynvml_13_reads_them(c_calls: dict[str, Any]) -> None:
    procs = ((4242, GIB), (4343, 2 * GIB), (4444, GIB))
    raw = b"".join(RECORD_LAYOUTS[32].pack(pid, mem, NO_INSTANCE, NO_INSTANCE, 0) for pid, mem in procs)
    c_calls["nvmlDeviceGetComputeRunningProcesses_v3"] = _driver_writes(raw, len(procs))
    real = [_fields(r) for r in pynvml.nvmlDeviceGetComputeRunningProcesses_v3(None)]
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 1.0, clock=FakeClock().time, processes=procs, garbage_processes=True))
    nvml.nvmlInit()
    assert [_fields(r) for r in nvml.nvmlDeviceGetComputeRunningProcesses_v3("gpu0")] == real
    assert real[0]["pid"] == 4242 and [r["pid"] for r in real[1:]] != [4343, 4444]  # garbage after the first


@pytest.mark.parametrize("record_bytes", [24, 32], ids=["pynvml13-on-r535", "pynvml12.535.77-on-others"])
def test_row5_records_of_the_other_size_keep_the_first_and_drop_the_rest_once(record_bytes: int) -> None:
    clock = FakeClock()
    procs = ((4242, GIB), (4343, 2 * GIB), (4444, GIB))
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 1.0, clock=clock.time, processes=procs, mem_used=5 * GIB,
                            garbage_processes=True), record_bytes=record_bytes)  # fmt: skip
    gpu, _ = open_gpu(nvml, clock=clock.time)
    assert gpu is not None
    memory = {pid: mem for pid, (mem, _) in gpu.processes().items()}
    assert memory == {4242: GIB}
    assert [n for n in gpu.take_notes() if "cannot be right" in n] != []
    gpu.processes()
    assert [n for n in gpu.take_notes() if "cannot be right" in n] == []  # said once
    nvml.gpu.garbage_processes = False  # matching sizes: every record as the driver wrote it
    assert {pid: mem for pid, (mem, _) in gpu.processes().items()} == dict(procs)


# ----- row 6: nvmlDeviceGetName returns str -----


def test_pin_names_come_back_as_str(c_calls: dict[str, Any]) -> None:
    def name(handle: Any, buffer: Any, size: Any) -> int:
        buffer.value = b"NVIDIA GeForce RTX 4090"
        return int(pynvml.NVML_SUCCESS)

    c_calls["nvmlDeviceGetName"] = name
    c_calls["nvmlDeviceGetUUID"] = name
    assert pynvml.nvmlDeviceGetName(None) == "NVIDIA GeForce RTX 4090"
    nvml = FakeNvml(four_gpus(FakeClock().time))
    nvml.nvmlInit()
    for call in ("nvmlDeviceGetName", "nvmlDeviceGetUUID"):
        assert type(getattr(nvml, call)("gpu0")) is type(getattr(pynvml, call)(None)) is str


def test_row6_a_str_name_is_the_gpus_name() -> None:
    clock = FakeClock()
    gpus = four_gpus(clock.time)
    gpus[3].mig_slices = (FakeSlice(slot=0, name="NVIDIA A100-SXM4-80GB MIG 3g.40gb", uuid="MIG-a"),)
    readers, _ = open_gpus(FakeNvml(gpus), clock=clock.time)
    names = [
        "NVIDIA RTX 3070 (fake)",
        "NVIDIA RTX 4090 (fake)",
        "NVIDIA RTX 4090 (fake)",
        "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
    ]
    assert [r.info.name for r in readers] == names
    assert readers[-1].info.uuid == "MIG-a" and readers[-1].info.parent_uuid == "GPU-fake-3"
    assert readers[0].info.driver == "555.42"
    close_gpus(readers)


# ----- row 7: the new per-process utilization call may say NOT_SUPPORTED -----


def test_pin_a_library_without_the_new_per_process_call_says_function_not_found(c_calls: dict[str, Any]) -> None:
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetProcessesUtilizationInfo(None, 0)
    c_calls["nvmlDeviceGetProcessesUtilizationInfo"] = lambda handle, info: int(pynvml.NVML_ERROR_NOT_SUPPORTED)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetProcessesUtilizationInfo(None, 0)


@pytest.mark.parametrize("code", [ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND])
def test_row7_either_refusal_of_the_new_call_falls_back_to_the_older_one(code: int) -> None:
    clock = FakeClock()
    samples = ((clock.t + 0.5, 10, 55.0),)
    gpu, nvml = _one(clock, processes=((10, GIB),), process_samples=samples, new_process_util=False,
                     new_process_util_code=code)  # fmt: skip
    with pytest.raises(NVMLError) as refused:
        nvml.nvmlDeviceGetProcessesUtilizationInfo("gpu0", 0)
    assert refused.value.value == code
    clock.t += 1.0
    assert gpu.processes() == {10: (GIB, 55.0)}
    assert gpu._calls["process-util"] == "nvmlDeviceGetProcessUtilization"  # found once, remembered


# ----- row 8: an index out of range is INVALID_ARGUMENT -----


def test_row8_no_index_past_the_count_is_asked_for() -> None:
    clock = FakeClock()
    nvml = FakeNvml(four_gpus(clock.time))
    nvml.nvmlInit()
    with pytest.raises(fake_pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(4)
    nvml.nvmlShutdown()
    readers, status = open_gpus(nvml, clock=clock.time)
    assert [r.info.index for r in readers] == [0, 1, 2, 3] and status == ""
    close_gpus(readers)
    gpu, status = open_gpu(nvml, index=4, clock=clock.time)  # a GPU this machine does not have
    assert gpu is None and status == "no GPU telemetry: no NVIDIA GPU found"
    assert nvml.inits == 0


# ----- row 9: a surplus nvmlShutdown raises UNINITIALIZED -----


def test_pin_a_shutdown_before_nvml_was_loaded_raises_uninitialized(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pynvml, "nvmlLib", None)  # this process never loaded the library
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlShutdown()
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 1.0, clock=FakeClock().time))
    with pytest.raises(fake_pynvml.NVMLError_Uninitialized):
        nvml.nvmlShutdown()
    nvml.nvmlInit()
    nvml.nvmlShutdown()
    with pytest.raises(fake_pynvml.NVMLError_Uninitialized):
        nvml.nvmlShutdown()
    with pytest.raises(fake_pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()  # every call, once the count is back to zero


def test_row9_a_reader_closed_twice_gives_back_only_its_own_reference() -> None:
    clock = FakeClock()
    nvml = FakeNvml(four_gpus(clock.time))
    readers, _ = open_gpus(nvml, clock=clock.time)
    first, others = readers[0], readers[1:]
    first.close()
    first.close()  # must not take another reader's reference: NVML would shut down under them
    assert nvml.inits == len(others)
    for reader in others:
        clock.t += 0.2
        assert reader.read()[0].mem_used_bytes == GIB
    sampler = Sampler(gpus=others, clock=clock)
    sampler.stop()
    sampler.stop()  # a second stop closes nothing twice and raises nothing
    close_gpus(readers)
    assert nvml.inits == 0 and nvml.shutdown
