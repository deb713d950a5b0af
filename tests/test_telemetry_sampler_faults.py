"""Issue 29 row 16: a failure in one tick does not cost a healthy GPU for the rest of the run. One
failed NVML read skips that GPU at that tick; only NVML's own word (GPU_IS_LOST, RESET_REQUIRED) or
`GPU_FAILS_TO_DROP` failures in a row drop it; a failure outside NVML is counted and shown; and an
NVML call that hangs makes the GPU figures stale while the CPU figures go on."""

from __future__ import annotations

import threading
import time
from typing import Any

import psutil
import pytest

from cockpit.core.machine.nvml import ERROR_TIMEOUT, GpuReader, open_gpus
from cockpit.core.telemetry.gpu_thread import GPU_FAILS_TO_DROP
from cockpit.core.telemetry.sampler import Sample, Sampler
from tests.fake_pynvml import FakeNvml, NVMLError, four_gpus
from tests.fakeclock import FakeClock

T0 = 1_790_000_000.0


def _nvml_error(code: int) -> NVMLError:
    """An NVMLError as pynvml raises it: NVML's return code in `value` (pynvml's NVMLError.__new__)."""
    exc = NVMLError(f"scripted NVML error {code}")
    exc.value = code  # type: ignore[attr-defined]
    return exc


def _sampler(clock: FakeClock, **kwargs: Any) -> tuple[Sampler, FakeNvml]:
    nvml = FakeNvml(four_gpus(clock.time))
    readers, status = open_gpus(nvml, clock=clock.time)
    assert status == ""
    return Sampler(gpus=readers, clock=clock, **kwargs), nvml


def _fail_gpu1(nvml: FakeNvml, failures: list[bool]) -> None:
    """GPU 1's memory read raises a timeout (NVML_ERROR_TIMEOUT) while `failures` says so, one entry per read."""
    real = nvml.nvmlDeviceGetMemoryInfo

    def memory(handle: str) -> Any:
        if handle == "gpu1" and failures and failures.pop(0):
            raise _nvml_error(ERROR_TIMEOUT)
        return real(handle)

    nvml.nvmlDeviceGetMemoryInfo = memory  # type: ignore[method-assign]


def _tick(sampler: Sampler, clock: FakeClock) -> Sample:
    clock.t += 0.2
    return sampler.tick()


def test_one_failed_read_skips_that_gpu_at_that_tick_and_keeps_it() -> None:
    clock = FakeClock(T0)
    sampler, nvml = _sampler(clock)
    _fail_gpu1(nvml, [True])
    assert [g.index for g in _tick(sampler, clock).gpus] == [0, 2, 3]
    assert sampler.gpu_status == ""  # nothing permanent said
    assert [g.index for g in _tick(sampler, clock).gpus] == [0, 1, 2, 3]
    assert [r.info.index for r in sampler.gpus] == [0, 1, 2, 3]


def test_failures_drop_a_gpu_only_when_they_come_in_a_row() -> None:
    clock = FakeClock(T0)
    sampler, nvml = _sampler(clock)
    # One short of the limit, a good read, one short again: never enough in a row.
    script = [True] * (GPU_FAILS_TO_DROP - 1) + [False] + [True] * (GPU_FAILS_TO_DROP - 1) + [False]
    _fail_gpu1(nvml, script)
    for _ in range(2 * GPU_FAILS_TO_DROP):
        _tick(sampler, clock)
    assert [r.info.index for r in sampler.gpus] == [0, 1, 2, 3] and sampler.gpu_status == ""
    _fail_gpu1(nvml, [True] * GPU_FAILS_TO_DROP)
    for _ in range(GPU_FAILS_TO_DROP):
        sample = _tick(sampler, clock)
    assert [g.index for g in sample.gpus] == [0, 2, 3] and [r.info.index for r in sampler.gpus] == [0, 2, 3]
    assert sampler.gpu_status.startswith("GPU 1 lost (NVMLError: Timeout)")  # the code's text, as pynvml's str()
    assert f"after {GPU_FAILS_TO_DROP} failed reads in a row" in sampler.gpu_status


def test_a_failing_recorder_is_counted_and_shown_and_costs_no_gpu() -> None:
    clock = FakeClock(T0)
    calls: list[Sample] = []

    def recorder(sample: Sample) -> None:
        calls.append(sample)
        raise OSError("No space left on device")

    sampler, _ = _sampler(clock, on_sample=recorder)
    samples = [_tick(sampler, clock) for _ in range(3)]
    assert len(calls) == 3 and all(len(s.gpus) == 4 for s in samples)
    assert [r.info.index for r in sampler.gpus] == [0, 1, 2, 3]
    assert sampler.status_lines() == [
        "recording a sample failed 3 times, sampling goes on (latest: OSError: No space left on device)"
    ]


def test_a_failing_cpu_reading_costs_no_gpu_in_the_sampler_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(T0)
    sampler, _ = _sampler(clock, hz=50.0)

    def broken() -> Any:
        raise psutil.AccessDenied(1)

    monkeypatch.setattr(psutil, "virtual_memory", broken)  # the first reading fails: no sample at all
    sampler.start()
    deadline = time.monotonic() + 10
    while "a sampler tick failed" not in sampler.gpu_status and time.monotonic() < deadline:
        time.sleep(0.01)
    monkeypatch.undo()
    while sampler.latest() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert "a sampler tick failed" in sampler.gpu_status and "AccessDenied" in sampler.gpu_status
    assert [r.info.index for r in sampler.gpus] == [0, 1, 2, 3]
    assert sampler.latest() is not None and len(sampler.latest().gpus) == 4


def test_a_later_failing_cpu_reading_carries_the_last_one(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(T0)
    sampler, _ = _sampler(clock)
    first = _tick(sampler, clock)

    def broken() -> Any:
        raise psutil.AccessDenied(1)

    monkeypatch.setattr(psutil, "virtual_memory", broken)
    clock.t += 1.0
    sample = _tick(sampler, clock)
    assert sample.usage_t == first.t and sample.ram_used_bytes == first.ram_used_bytes and len(sample.gpus) == 4
    assert sampler.status_lines()[0].startswith("reading CPU and memory failed once")


class _Hang:
    """Makes every GPU's memory read block on `release` once `hang` is set, as a driver call that
    does not return would; a blocked read gives up after `give_up_s` so a broken sampler fails the
    test instead of hanging it."""

    def __init__(self, nvml: FakeNvml, give_up_s: float = 20.0) -> None:
        self.hang, self.release = threading.Event(), threading.Event()
        real = nvml.nvmlDeviceGetMemoryInfo

        def memory(handle: str) -> Any:
            if self.hang.is_set():
                self.release.wait(give_up_s)
            return real(handle)

        nvml.nvmlDeviceGetMemoryInfo = memory  # type: ignore[method-assign]


def test_an_nvml_call_that_hangs_makes_the_gpu_figures_stale_not_the_cpu_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(T0)
    sampler, nvml = _sampler(clock, gpu_deadline_s=0.05)
    hang = _Hang(nvml)
    assert len(_tick(sampler, clock).gpus) == 4
    hang.hang.set()
    clock.t += 1.0  # a CPU reading falls due too
    stuck = _tick(sampler, clock)
    assert stuck.gpus == () and stuck.gpu is None and stuck.usage_fresh and stuck.cpu_percent
    assert sampler.gpu_status == "GPU figures stale: NVML has not answered for 0 s"
    clock.t += 2.8
    later = _tick(sampler, clock)
    assert later.gpus == () and sampler.gpu_status == "GPU figures stale: NVML has not answered for 3 s"
    assert [r.info.index for r in sampler.gpus] == [0, 1, 2, 3]  # stale, not lost
    hang.hang.clear()
    hang.release.set()
    deadline = time.monotonic() + 10
    back = _tick(sampler, clock)
    while not back.gpus and time.monotonic() < deadline:  # until the hung call has returned
        time.sleep(0.01)
        back = _tick(sampler, clock)
    assert len(back.gpus) == 4 and sampler.gpu_status == ""
    sampler.stop()
    assert nvml.shutdown


def test_readers_notes_are_shown_each_once() -> None:
    clock = FakeClock(T0)
    sampler, _ = _sampler(clock)
    reader: GpuReader = sampler.gpus[2]
    said = ["GPU 2: a per-process record dropped as implausible"]
    reader.take_notes = lambda: list(said)  # type: ignore[method-assign]  # the reader says it at every read
    _tick(sampler, clock)
    _tick(sampler, clock)
    assert sampler.status_lines() == ["GPU 2: a per-process record dropped as implausible"]
