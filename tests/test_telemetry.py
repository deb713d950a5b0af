"""Telemetry through the scripted NVML stand-in, and the no-GPU path."""

from __future__ import annotations

import os
import subprocess
import time

from cockpit.core.nvml import open_gpu
from cockpit.core.telemetry import Sampler
from tests.fake_pynvml import GIB, FakeGpu, FakeNvml, NVMLError_LibraryNotFound, NVMLError_NotSupported
from tests.fakeclock import FakeClock


def bursts(t: float) -> float:
    """95% for the first 0.1 s of every second, 5% otherwise: bursts a 1 Hz poll would miss."""
    return 95.0 if (t % 1.0) < 0.1 else 5.0


def test_buffered_samples_catch_bursts_shorter_than_the_tick() -> None:
    clock = FakeClock()
    nvml = FakeNvml(FakeGpu(util_at=bursts, clock=clock.time, period=0.02))
    gpu, status = open_gpu(nvml)
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
    gpu, _ = open_gpu(nvml)
    gpu.read()  # drains the buffer
    _, util = gpu.read()
    assert util == []


def test_without_a_sample_buffer_it_polls_utilization_rates() -> None:
    clock = FakeClock()
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 42.0, clock=clock.time, buffered=False))
    gpu, _ = open_gpu(nvml)
    _, util = gpu.read()
    assert [u for _, u in util] == [42.0]


def test_a_gpu_read_failure_leaves_cpu_sampling_running() -> None:
    clock = FakeClock()
    nvml = FakeNvml(FakeGpu(util_at=bursts, clock=clock.time))
    gpu, _ = open_gpu(nvml)
    sampler = Sampler(gpu=gpu, clock=clock, hz=50.0)

    def fallen_off_the_bus(handle: str) -> None:
        raise NVMLError_NotSupported("GPU is lost")

    nvml.nvmlDeviceGetMemoryInfo = fallen_off_the_bus  # type: ignore[method-assign]
    sampler.start()
    deadline = time.monotonic() + 5
    while (sampler.latest() is None or sampler.gpu is not None) and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert sampler.gpu is None and sampler.gpu_status.startswith("no GPU telemetry: lost (NVMLError_NotSupported")
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


def test_the_real_pynvml_without_a_driver_says_so() -> None:
    gpu, status = open_gpu()
    if gpu is not None:  # a machine with a GPU: the real path works
        gpu.close()
        return
    assert status.startswith("no GPU telemetry: ")


def test_sampler_maps_gpu_memory_to_jobs_by_process_tree() -> None:
    clock = FakeClock()
    me = os.getpid()
    child = subprocess.Popen(["sleep", "30"])  # a process of the job's tree that holds GPU memory too
    try:
        nvml = FakeNvml(FakeGpu(util_at=bursts, clock=clock.time, processes=((me, 2 * GIB), (child.pid, GIB))))
        gpu, _ = open_gpu(nvml)
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
