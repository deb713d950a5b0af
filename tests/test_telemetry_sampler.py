"""Telemetry through the scripted NVML stand-in, and the no-GPU path."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest

from cockpit.core.machine.gpu_types import UTIL_BUFFER, UTIL_NONE_MIG, UTIL_POLL
from cockpit.core.machine.nvml import close_gpus, open_gpu, open_gpus
from cockpit.core.telemetry.sampler import TREE_SCAN_MAX_S, TREE_SCAN_S, Sample, Sampler
from tests.fake_pynvml import GIB, FakeGpu, FakeNvml, NVMLError_GpuIsLost, NVMLError_LibraryNotFound
from tests.fakeclock import FakeClock


def bursts(t: float) -> float:
    """95% for the first 0.1 s of every second, 5% otherwise: bursts a 1 Hz poll would miss."""
    return 95.0 if (t % 1.0) < 0.1 else 5.0


def test_buffered_samples_catch_bursts_shorter_than_the_tick() -> None:
    clock = FakeClock()
    nvml = FakeNvml(FakeGpu(util_at=bursts, clock=clock.time, period=0.02))
    gpu, status = open_gpu(nvml, clock=clock.time)
    assert status == "" and gpu is not None
    assert gpu.info.name == "NVIDIA GeForce RTX 4090 (fake)" and gpu.info.driver == "555.42"
    seen = []
    for _ in range(25):
        clock.t += 0.2
        sample, util = gpu.read()
        seen.extend(util)
        assert sample.mem_used_bytes == 3 * GIB and sample.power_w == 215.0 and sample.sm_clock_mhz == 2520
        assert sample.throttle_reasons == ("sw_power_cap",)
    stamps = [t for t, _ in seen]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)  # nothing read twice
    assert max(u for _, u in seen) == 95.0  # the 100 ms bursts are there
    assert 0.05 < sum(1 for _, u in seen if u == 95.0) / len(seen) < 0.15


def test_an_empty_buffer_means_no_new_samples_not_a_poll() -> None:
    clock = FakeClock()
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 42.0, clock=clock.time, period=10.0))
    gpu, _ = open_gpu(nvml, clock=clock.time)
    gpu.read()  # drains the buffer
    _, util = gpu.read()
    assert util == []


def test_without_a_sample_buffer_it_polls_utilization_rates() -> None:
    clock = FakeClock()
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 42.0, clock=clock.time, buffered=False))
    gpu, _ = open_gpu(nvml, clock=clock.time)
    _, util = gpu.read()
    assert [u for _, u in util] == [42.0]


def test_a_gpu_read_failure_leaves_cpu_sampling_running() -> None:
    clock = FakeClock()
    nvml = FakeNvml(FakeGpu(util_at=bursts, clock=clock.time))
    gpu, _ = open_gpu(nvml, clock=clock.time)
    sampler = Sampler(gpu=gpu, clock=clock, hz=50.0)

    def fallen_off_the_bus(handle: str) -> None:
        raise NVMLError_GpuIsLost()

    nvml.nvmlDeviceGetMemoryInfo = fallen_off_the_bus  # type: ignore[method-assign]
    sampler.start()
    deadline = time.monotonic() + 5
    while (sampler.latest() is None or sampler.gpu is not None) and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert sampler.gpu is None and sampler.gpu_status.startswith("no GPU telemetry: lost (NVMLError_GpuIsLost")
    assert sampler.latest() is not None and sampler.latest().gpu is None


def test_no_driver_is_a_clear_status_and_cpu_sampling_goes_on() -> None:
    nvml = FakeNvml(FakeGpu(util_at=bursts, clock=FakeClock().time, fail_init=NVMLError_LibraryNotFound))
    gpu, status = open_gpu(nvml)
    assert gpu is None and status == "no GPU telemetry: NVML library not found (no NVIDIA driver installed)"
    sampler = Sampler(gpu=None, gpu_status=status)
    sampler.set_jobs({"000": os.getpid()})
    sample = sampler.tick()
    assert sample.gpu is None and len(sample.cpu_percent) == os.cpu_count()
    assert sample.jobs["000"].rss_bytes > 0 and sample.cost_s >= 0


def test_the_real_pynvml_reads_a_real_gpu_or_says_why_there_is_none() -> None:
    readers, status = open_gpus()
    try:
        if not readers:  # no driver (these machines): one line that says so, and nothing half-open
            assert status.startswith("no GPU telemetry: "), status
            return
        # A machine with a GPU: the real driver answers each read the product relies on.
        assert not status.startswith("no GPU telemetry"), status
        first = readers[0]
        assert first.info.name and first.info.driver and first.info.uuid.startswith(("GPU-", "MIG-")), first.info
        assert first.info.memory_total_bytes is None or first.info.memory_total_bytes > 0
        sample, _ = first.read()
        assert sample.util_mode in (UTIL_BUFFER, UTIL_POLL, UTIL_NONE_MIG), sample
        assert sample.mem_total_bytes == first.info.memory_total_bytes
        assert all(pid > 0 for pid in first.processes())
    finally:
        close_gpus(readers)


def test_sampler_maps_gpu_memory_to_jobs_by_process_tree() -> None:
    clock = FakeClock()
    me = os.getpid()
    child = subprocess.Popen(["sleep", "30"])  # a process of the job's tree that holds GPU memory too
    try:
        nvml = FakeNvml(FakeGpu(util_at=bursts, clock=clock.time, processes=((me, 2 * GIB), (child.pid, GIB))))
        gpu, _ = open_gpu(nvml, clock=clock.time)
        sampler = Sampler(gpu=gpu, clock=clock)
        sampler.set_jobs({"000": me})
        sample = sampler.tick()
    finally:
        child.kill()
        child.wait()
    assert sample.jobs["000"].gpu_mem_bytes == 3 * GIB
    assert sampler.peak_gpu_mem["000"] == 3 * GIB
    assert sample.gpu is not None and sample.util_samples
    sampler.stop()
    assert nvml.shutdown


# ----- what is read at every tick, and what less often -----


class _Counted:
    """Wraps a psutil function and records the fake clock's time of each call."""

    def __init__(self, real: Callable[..., Any], clock: FakeClock) -> None:
        self.real, self.clock, self.at = real, clock, []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.at.append(self.clock.t)
        return self.real(*args, **kwargs)


def test_cpu_and_memory_are_read_once_a_second_and_every_tick_carries_the_latest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    nvml = FakeNvml(FakeGpu(util_at=bursts, clock=clock.time, period=0.02))
    gpu, _ = open_gpu(nvml, clock=clock.time)
    sampler = Sampler(gpu=gpu, clock=clock)
    sampler.set_jobs({"000": os.getpid()})
    memory = _Counted(psutil.virtual_memory, clock)
    monkeypatch.setattr(psutil, "virtual_memory", memory)
    start = clock.t
    samples = []
    for _ in range(11):  # 2 s at 5 Hz
        samples.append(sampler.tick())
        clock.t += 0.2
    assert [round(t - start, 1) for t in memory.at] == [0.0, 1.0, 2.0]
    assert [s.usage_fresh for s in samples] == [True, False, False, False, False] * 2 + [True]
    for i, sample in enumerate(samples):
        read = samples[i - i % 5]  # the tick that read what this one carries
        assert sample.usage_t == read.t
        assert sample.cpu_percent is read.cpu_percent and sample.jobs is read.jobs
        assert sample.ram_used_bytes == read.ram_used_bytes
        assert sample.gpu is not None  # NVML: at every tick
    assert all(s.util_samples for s in samples)
    sampler.stop()


def test_a_change_in_the_jobs_is_read_at_the_next_tick() -> None:
    clock = FakeClock()
    sampler = Sampler(clock=clock)
    sampler.set_jobs({"000": os.getpid()})
    first = sampler.tick()
    child = subprocess.Popen(["sleep", "30"])
    try:
        clock.t += 0.2
        sampler.set_jobs({"000": os.getpid(), "001": child.pid})
        sample = sampler.tick()
    finally:
        child.kill()
        child.wait()
    assert first.usage_fresh and sample.usage_fresh and sample.usage_t == clock.t
    assert set(sample.jobs) == {"000", "001"} and sample.jobs["001"].rss_bytes > 0
    clock.t += 0.2
    sampler.set_jobs({"001": child.pid})
    assert set(sampler.tick().jobs) == {"001"}  # an ended job is gone at once too


def test_process_trees_are_walked_less_often_while_they_stay_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    fake = FakeGpu(util_at=bursts, clock=clock.time)
    gpu, _ = open_gpu(FakeNvml(fake), clock=clock.time)
    sampler = Sampler(gpu=gpu, clock=clock)
    walks = _Counted(psutil.process_iter, clock)
    monkeypatch.setattr(psutil, "process_iter", walks)

    def run(seconds: float) -> Sample:
        """Tick at 5 Hz for `seconds` after the tick just taken; the last sample."""
        for _ in range(round(seconds / 0.2)):
            clock.t += 0.2
            sample = sampler.tick()
        return sample

    sampler.tick()
    run(10)
    assert walks.at == []  # no jobs: nothing to walk
    clock.t += 0.2
    sampler.set_jobs({"000": os.getpid()})
    start = clock.t
    sampler.tick()
    run(100)
    # 2 s after the job appeared, then twice as long after each walk that found nothing new.
    gaps = [TREE_SCAN_S, 2 * TREE_SCAN_S, 4 * TREE_SCAN_S, 8 * TREE_SCAN_S, TREE_SCAN_MAX_S, TREE_SCAN_MAX_S]
    expected = [sum(gaps[:i]) for i in range(len(gaps) + 1)]  # 0, 2, 6, 14, 30, 60, 90
    assert [round(t - start, 1) for t in walks.at] == expected
    child = subprocess.Popen(["sleep", "30"])  # the job's tree grows (a process that holds GPU memory)...
    try:
        fake.processes = ((child.pid, GIB),)
        grown = clock.t
        sample = run(TREE_SCAN_MAX_S - (grown - start - expected[-1]) - 0.2)
        assert sample.jobs["000"].gpu_mem_bytes is None  # not walked yet: the child is not known
        sample = run(0.2 + 2 * TREE_SCAN_S)
    finally:
        child.kill()
        child.wait()
    assert sample.jobs["000"].gpu_mem_bytes == GIB  # found at the next walk...
    found = walks.at[len(expected)]
    assert round(found - start, 1) == expected[-1] + TREE_SCAN_MAX_S
    # ... and the walks come often again until the tree has settled.
    assert [round(t - found, 1) for t in walks.at[len(expected) :]] == [0.0, TREE_SCAN_S]
    sampler.stop()


def test_a_served_worker_that_takes_the_next_job_keeps_its_walked_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    sampler = Sampler(clock=clock)
    walks = _Counted(psutil.process_iter, clock)
    monkeypatch.setattr(psutil, "process_iter", walks)
    sampler.set_jobs({"000": os.getpid()})
    sampler.tick()
    assert len(walks.at) == 1
    clock.t += 0.2
    sampler.set_jobs({"001": os.getpid()})  # the pooled worker's next job, in the same supervisor tick
    sample = sampler.tick()
    assert sample.usage_fresh and set(sample.jobs) == {"001"} and sample.jobs["001"].rss_bytes > 0
    assert len(walks.at) == 1  # the same process: no walk of the process table for it
    child = subprocess.Popen(["sleep", "30"])
    try:
        clock.t += 0.2
        sampler.set_jobs({"001": os.getpid(), "002": child.pid})  # a new worker: walked at once
        sample = sampler.tick()
    finally:
        child.kill()
        child.wait()
    assert len(walks.at) == 2 and sample.jobs["002"].rss_bytes > 0
