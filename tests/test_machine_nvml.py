"""The NVML reader (`cockpit.core.machine.nvml`) against the stand-in (`tests.fake_pynvml`) scripted
as the drivers of issue 29 behave: each test names the row it pins."""

from __future__ import annotations

import pytest

from cockpit.core.machine.gpu_types import UTIL_BUFFER, UTIL_NONE_MIG, UTIL_POLL
from cockpit.core.machine.nvml import (
    ERROR_INVALID_ARGUMENT,
    ERROR_UNKNOWN,
    GpuReader,
    close_gpus,
    gpu_lost,
    open_gpu,
    open_gpus,
)
from tests.fake_pynvml import (
    GIB,
    FakeGpu,
    FakeNvml,
    FakeSlice,
    NVMLError,
    NVMLError_GpuIsLost,
    NVMLError_LibraryNotFound,
    NVMLError_NotFound,
    four_gpus,
)
from tests.fakeclock import FakeClock

BOOT = 1_799_000_000.0  # the Unix time a boot-stamping driver counts from


def _one(clock: FakeClock, **switches: object) -> tuple[GpuReader, FakeNvml]:
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 42.0, clock=clock.time, **switches))  # type: ignore[arg-type]
    gpu, status = open_gpu(nvml, clock=clock.time)
    assert gpu is not None, status
    return gpu, nvml


def _ticks(gpu: GpuReader, clock: FakeClock, seconds: float) -> list[tuple[float, float]]:
    seen = []
    for _ in range(round(seconds / 0.2)):
        clock.t += 0.2
        seen += gpu.read()[1]
    return seen


def test_the_stand_in_raises_as_pynvml_does() -> None:
    exc = NVMLError(6)
    assert type(exc) is NVMLError_NotFound and exc.value == 6 and str(exc) == "Not Found"
    assert NVMLError_GpuIsLost().value == 15 and gpu_lost(NVMLError_GpuIsLost())


# ----- row 2: a driver without _v3 process records -----


def test_row2_a_driver_without_v3_process_records_is_read_through_v2() -> None:
    gpu, _ = _one(FakeClock(), processes=((4242, GIB),), processes_v3=False)
    assert gpu.processes()[4242][0] == GIB
    assert gpu._calls["processes"] == "nvmlDeviceGetComputeRunningProcesses_v2"  # found once, remembered


def test_row2_the_unversioned_call_mismatch_does_not_escape() -> None:
    # Bindings with only the unversioned call (nvidia-ml-py 13 raises NVMLLibraryMismatchError from it).
    clock = FakeClock()
    only_unversioned = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")
    fake = FakeGpu(util_at=lambda t: 42.0, clock=clock.time, processes=((4242, GIB),), processes_v3=False)
    nvml = FakeNvml(fake, missing=only_unversioned)
    gpu, _ = open_gpu(nvml, clock=clock.time)
    assert gpu is not None and gpu.processes() == {}
    assert any("none of" in note for note in gpu.take_notes())


# ----- row 3: process records of another struct version -----


def test_row3_garbage_process_records_are_dropped_and_said_once() -> None:
    gpu, _ = _one(FakeClock(), processes=((4242, GIB), (4343, GIB), (4444, GIB)), mem_used=4 * GIB,
                  garbage_processes=True)  # fmt: skip
    procs = gpu.processes()
    assert 4242 in procs and all(0 < pid <= 4_194_304 for pid in procs)
    assert len(procs) < 3
    notes = gpu.take_notes()
    assert len([n for n in notes if "cannot be right" in n]) == 1
    gpu.processes()
    assert not [n for n in gpu.take_notes() if "cannot be right" in n]  # said once


def test_row3_records_holding_more_than_the_gpu_uses_lose_their_memory() -> None:
    gpu, _ = _one(FakeClock(), processes=((4242, 6 * GIB), (4343, 6 * GIB)), mem_used=2 * GIB)
    gpu.read()
    assert {pid: mem for pid, (mem, _) in gpu.processes().items()} == {4242: None, 4343: None}


# ----- rows 4 and 5: the sample buffer -----


def test_row4_not_found_is_nothing_new_and_function_not_found_is_no_buffer() -> None:
    clock = FakeClock()
    gpu, nvml = _one(clock, buffered=False, no_buffer_code=13)  # a driver without nvmlDeviceGetSamples
    sample, util = gpu.read()
    assert sample.util_mode == UTIL_POLL and [u for _, u in util] == [42.0]
    calls = nvml.sample_calls
    _ticks(gpu, clock, 5)
    assert nvml.sample_calls == calls  # not asked again before the retry interval
    nvml.gpu.buffered = True  # the buffer answers again
    _ticks(gpu, clock, 6)
    assert gpu.read()[0].util_mode == UTIL_BUFFER


def test_row4_a_one_off_error_polls_that_tick_and_keeps_the_buffer() -> None:
    clock = FakeClock()
    gpu, _ = _one(clock, sample_errors=[ERROR_INVALID_ARGUMENT, ERROR_UNKNOWN])
    clock.t += 0.2
    assert gpu.read()[0].util_mode == UTIL_POLL
    clock.t += 0.2
    assert gpu.read()[0].util_mode == UTIL_POLL
    clock.t += 0.2
    sample, util = gpu.read()
    assert sample.util_mode == UTIL_BUFFER and util


def test_row5_an_idle_gpus_dry_buffer_reads_0_percent_after_one_period() -> None:
    clock = FakeClock()
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 0.0, clock=clock.time, period=1.0))
    gpu, _ = open_gpu(nvml, clock=clock.time)
    assert gpu is not None
    while not _ticks(gpu, clock, 0.2):  # up to a tick that brought a new sample
        pass
    nvml.gpu.idle_since = clock.t  # the driver records nothing more
    clock.t += 0.2
    assert gpu.read()[1] == []  # within one period: nothing new, nothing made up
    seen = _ticks(gpu, clock, 3)
    assert seen and all(u == 0.0 for _, u in seen) and len(seen) <= 4  # about one a period, stamped now
    assert all(t <= clock.t for t, _ in seen)


# ----- rows 6 and 7: timestamps and the sampling period -----


def test_row6_boot_based_timestamps_become_unix_times() -> None:
    clock = FakeClock()
    gpu, _ = _one(clock, timestamp_base=BOOT)
    seen = _ticks(gpu, clock, 2)
    # Unshifted they would be ~1e6 s; the offset is known to within one sampling period.
    assert seen and all(clock.t - 3.5 <= t <= clock.t + 0.2 for t, _ in seen)
    assert any("off this clock" in note for note in gpu.take_notes())


def test_row7_the_measured_period_of_a_1_s_gpu_is_1_s() -> None:
    clock = FakeClock()
    gpu, _ = _one(clock, period=1.0)
    assert gpu.sample_period_s is None  # before any sample
    _ticks(gpu, clock, 5)
    assert gpu.read()[0].sample_period_s == pytest.approx(1.0, abs=0.01)


# ----- row 9: per-process SM % -----


def test_row9_per_process_sm_newest_per_pid_clamped_and_0_for_a_silent_process() -> None:
    clock = FakeClock()
    now = clock.t + 1.0
    samples = ((now - 0.5, 10, 150.0), (now - 0.6, 11, 30.0), (now - 0.2, 11, 70.0), (now - 5.0, 12, 90.0))
    gpu, _ = _one(clock, processes=((10, GIB), (11, GIB), (12, GIB)), process_samples=samples, timestamp_base=BOOT)
    _ticks(gpu, clock, 1)  # the sample buffer gives the driver's clock offset
    assert {pid: sm for pid, (_, sm) in gpu.processes().items()} == {10: 100.0, 11: 70.0, 12: 0.0}


def test_row9_the_older_per_process_call_serves_older_drivers() -> None:
    clock = FakeClock()
    samples = ((clock.t + 0.5, 10, 55.0),)
    gpu, _ = _one(clock, processes=((10, GIB),), process_samples=samples, new_process_util=False)
    _ticks(gpu, clock, 1)
    assert gpu.processes()[10][1] == 55.0
    assert gpu._calls["process-util"] == "nvmlDeviceGetProcessUtilization"


# ----- row 10: MIG -----


def test_row10_mig_slices_are_readers_numbered_after_every_gpu() -> None:
    clock = FakeClock()
    gpus = four_gpus(clock.time)
    gpus[0].mig_slices = (FakeSlice(slot=0, uuid="MIG-a", mem_total=40 * GIB, processes=((77, GIB),)),
                          FakeSlice(slot=2, uuid="MIG-b", mem_total=20 * GIB))  # fmt: skip
    nvml = FakeNvml(gpus)
    readers, status = open_gpus(nvml, clock=clock.time)
    assert [(r.info.index, r.info.parent_index, r.info.uuid) for r in readers] == [
        (1, None, "GPU-fake-1"), (2, None, "GPU-fake-2"), (3, None, "GPU-fake-3"), (4, 0, "MIG-a"), (5, 0, "MIG-b")
    ]  # fmt: skip
    assert readers[3].info.memory_total_bytes == 40 * GIB and readers[3].info.is_mig
    assert status == "GPU 0 is in MIG mode (2 slices): utilization is not available per slice"
    clock.t += 0.2
    sample, util = readers[3].read()
    assert sample.util_mode == UTIL_NONE_MIG and sample.util_percent is None and util == []
    assert sample.mem_total_bytes == 40 * GIB
    assert readers[3].processes()[77][0] == GIB
    assert not any("/mig" in handle for handle in nvml.sample_calls_by_handle)
    close_gpus(readers)
    assert nvml.inits == 0


def test_row10_a_driver_without_mig_calls_has_no_mig() -> None:
    clock = FakeClock()
    gpu, _ = _one(clock, mig_calls=False)
    assert not gpu.info.is_mig
    nvml2 = FakeNvml(FakeGpu(util_at=lambda t: 1.0, clock=clock.time), missing=("nvmlDeviceGetMigMode",))
    readers, status = open_gpus(nvml2, clock=clock.time)
    assert len(readers) == 1 and status == ""


# ----- row 11: unified memory -----


def test_row11_a_unified_memory_gpu_is_read_with_memory_unknown() -> None:
    gpu, _ = _one(FakeClock(), memory_info=False, processes=((10, GIB),))
    assert gpu.info.memory_total_bytes is None
    sample, _ = gpu.read()
    assert sample.mem_used_bytes is None and sample.mem_total_bytes is None and sample.power_w == 215.0
    assert gpu.processes()[10][0] == GIB


# ----- row 12: one GPU that cannot be opened -----


def test_row12_a_failing_handle_costs_only_that_gpu_and_leaks_no_reference() -> None:
    clock = FakeClock()
    gpus = four_gpus(clock.time)
    gpus[2].handle_error = ERROR_UNKNOWN
    nvml = FakeNvml(gpus)
    readers, status = open_gpus(nvml, clock=clock.time)
    assert [r.info.index for r in readers] == [0, 1, 3]
    assert status == "GPU 2 could not be opened (NVMLError_Unknown: Unknown Error)"
    assert nvml.inits == 3
    close_gpus(readers)
    assert nvml.inits == 0 and nvml.shutdown


# ----- row 15: drivers before R535 -----


@pytest.mark.parametrize("how", ["library", "bindings"])
def test_row15_old_drivers_give_throttle_reasons(how: str) -> None:
    clock = FakeClock()
    missing = ("nvmlDeviceGetCurrentClocksEventReasons",) if how == "bindings" else ()
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 1.0, clock=clock.time, clocks_event=how != "library"), missing=missing)
    gpu, _ = open_gpu(nvml, clock=clock.time)
    assert gpu is not None and gpu.read()[0].throttle_reasons == ("sw_power_cap",)
    assert gpu._calls["clock-events"] == "nvmlDeviceGetCurrentClocksThrottleReasons"


# ----- row 17: a container without NVML -----


def test_row17_a_container_given_a_gpu_without_nvml_names_the_utility_capability() -> None:
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 1.0, clock=FakeClock().time, fail_init=NVMLError_LibraryNotFound))
    _, status = open_gpus(nvml, device_signs=lambda: ["/dev/nvidiactl"])
    assert "NVML is missing in this container" in status and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in status
    _, status = open_gpus(nvml, device_signs=lambda: [])
    assert status == "no GPU telemetry: NVML library not found (no NVIDIA driver installed)"


# ----- row 16: a lost GPU raises; one failed read does not -----


def test_row16_a_lost_gpu_raises_and_a_failed_read_degrades() -> None:
    clock = FakeClock()
    gpu, nvml = _one(clock)

    def lost(handle: str) -> int:
        raise NVMLError_GpuIsLost()

    def unknown(handle: str) -> int:
        raise NVMLError(ERROR_UNKNOWN)

    nvml.nvmlDeviceGetPowerUsage = unknown  # type: ignore[method-assign]
    assert gpu.read()[0].power_w is None
    nvml.nvmlDeviceGetPowerUsage = lost  # type: ignore[method-assign]
    with pytest.raises(NVMLError_GpuIsLost):
        gpu.read()


def test_row12_a_gpu_whose_first_read_fails_gives_its_reference_back() -> None:
    clock = FakeClock()
    nvml = FakeNvml(four_gpus(clock.time))
    real = nvml.nvmlDeviceGetName

    def name(handle: str) -> bytes:
        if handle == "gpu1":
            raise NVMLError(ERROR_UNKNOWN)
        return real(handle)

    nvml.nvmlDeviceGetName = name  # type: ignore[method-assign]
    readers, status = open_gpus(nvml, clock=clock.time)
    assert [r.info.index for r in readers] == [0, 2, 3] and status.startswith("GPU 1 could not be opened")
    close_gpus(readers)
    assert nvml.inits == 0
