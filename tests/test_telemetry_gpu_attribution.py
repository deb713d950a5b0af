"""Issue 29 row 1: in a container without --pid=host, NVML lists the GPU's processes by their host
pids, none of which is a process here. The sampler says so, and a job's GPU memory, its peak, the
advisor's GPU-memory caps and run.toml's peak come from the worker's own CUDA reports instead."""

from __future__ import annotations

import io
import itertools
import os
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from rich.console import Console

from cockpit.cli import build_parser
from cockpit.commands import run as run_command
from cockpit.contract.runrecord import read
from cockpit.core.machine.host import HostInfo
from cockpit.core.machine.nvml import kernel_pid_max, open_gpus
from cockpit.core.session.run_session import RunSession
from cockpit.core.session.startup import start_session
from cockpit.core.telemetry import sampler as sampler_module
from cockpit.core.telemetry.sampler import HIDDEN_PIDS_NOTE, Sampler
from cockpit.views.headless import HeadlessView
from cockpit_training.device import cuda_memory
from tests.fake_pynvml import GIB, FakeGpu, FakeNvml
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher, events

T0 = 1_790_000_000.0


def _absent_pids(count: int) -> tuple[int, ...]:
    """Pids no process of this namespace has, below the kernel's pid_max: as the host pids NVML
    reports inside a container's PID namespace (nvmlDeviceGetComputeRunningProcesses returns the
    pids of the driver's namespace, the host's; pid_max is one setting for every namespace, proc(5),
    so they are plausible pids, which the reader's sanity check keeps)."""
    top = kernel_pid_max() - 1
    return tuple(itertools.islice((pid for pid in range(top, 1, -1) if not psutil.pid_exists(pid)), count))


HOST_PIDS = _absent_pids(2)
RESERVED, PEAK = 9 * GIB, 14 * GIB  # each worker's own report; 2 x 14 GiB is over 90 % of the 24 GiB GPU


def _session(tmp_path: Path, clock: FakeClock, processes: tuple[tuple[int, int], ...]) -> RunSession:
    used = sum(mem for _, mem in processes) + GIB  # the device's memory in use holds its processes'
    nvml = FakeNvml(FakeGpu(util_at=lambda t: 50.0, clock=clock.time, processes=processes, mem_used=used))
    readers, status = open_gpus(nvml, clock=clock.time)
    assert status == ""
    args = build_parser().parse_args(["run", "--jobs", "2", "--run-dir", str(tmp_path / "run")])
    spec = run_command._spec(args, readers, ("cockpit",))
    host = HostInfo("h", "cpu", 64, 128, 2**38, "Linux")  # cores to spare: the GPU's memory is the limit
    return start_session(spec, Sampler(gpus=readers, clock=clock), launcher=FakeLauncher(), serve=False, clock=clock,
                      host=host)  # fmt: skip


def _report_cuda(session: RunSession) -> None:
    """Each worker starts on CUDA and reports its allocator's memory, as the CPU-run worker would on a GPU."""
    for job_id in session.supervisor.jobs:
        writer = events(session.supervisor, job_id)
        writer.started(config={}, pid=session.supervisor.jobs[job_id].handle.pid, device="cuda", versions={})
        writer.progress(num_timesteps=512, cuda_reserved_bytes=RESERVED, cuda_peak_bytes=PEAK)
    session.supervisor.tick()


def _readings(session: RunSession, clock: FakeClock, count: int) -> None:
    """`count` usage readings of the sampler, a second apart."""
    for _ in range(count):
        clock.t += 1.0
        session.sampler.set_jobs(session.supervisor.live_pids())
        session.sampler.tick()


def test_host_pids_nvml_lists_in_a_container_make_the_workers_reports_the_jobs_gpu_memory(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    session = _session(tmp_path, clock, tuple((pid, 10 * GIB) for pid in HOST_PIDS))
    session.supervisor.tick()  # launches both jobs
    _report_cuda(session)
    _readings(session, clock, 2)
    assert HIDDEN_PIDS_NOTE not in session.sampler.gpu_status  # two readings could be a worker starting up
    _readings(session, clock, 1)
    state = session.snapshot()
    session.write_run_log(state)  # the advisor's turn, and run.toml
    state = session.snapshot()
    out = io.StringIO()
    view = HeadlessView(Console(file=out, width=250, force_terminal=False), every_s=1e9)
    view.update(state)
    printed = out.getvalue()
    gpu_lines = [line for line in printed.splitlines() if "[gpu]" in line]
    assert [line.split(" ", 1)[1] for line in gpu_lines] == [f"[gpu] {HIDDEN_PIDS_NOTE}"], f"headless:\n{printed}"
    assert "--pid=host" in gpu_lines[0] and f"gpu {RESERVED // 2**20:,} MiB" in printed, f"headless:\n{printed}"
    assert [(j.gpu_mem_bytes, j.peak_gpu_mem_bytes) for j in state.jobs] == [(RESERVED, PEAK)] * 2
    assert session.sampler.peak_gpu_mem == {}  # NVML attributed nothing: the figures are the workers'
    caps = [a for a in state.suggestions if a.setting.value == "jobs"]
    assert [(a.current, a.suggested) for a in caps] == [("2", "1")], state.suggestions
    assert "14.0 GiB peak" in caps[0].reason
    assert [j.peak_gpu_mem_mib for j in read(tmp_path / "run").jobs] == [14 * 1024] * 2
    session.sampler.stop()


def test_where_nvml_attributes_a_jobs_process_its_figure_stays_and_nothing_is_said(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    me = os.getpid()  # the "worker" of job 000 is this process, which NVML lists: it can attribute
    session = _session(tmp_path, clock, ((me, 10 * GIB), (HOST_PIDS[0], GIB)))
    session.supervisor.tick()
    session.supervisor.jobs["000"].handle.pid = me
    _report_cuda(session)
    _readings(session, clock, 5)
    state = session.snapshot()
    assert HIDDEN_PIDS_NOTE not in session.sampler.gpu_status
    job = state.jobs[0]
    # NVML's figure includes the CUDA context the allocator's leaves out: where there is one, it stays.
    assert (job.gpu_mem_bytes, job.peak_gpu_mem_bytes) == (10 * GIB, 10 * GIB)
    session.sampler.stop()


def test_a_listed_pid_that_is_a_gpu_process_here_is_no_evidence_of_a_hiding_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Beside a host pid, NVML lists a process of this namespace that has NVIDIA's driver mapped
    # (another user's training on a shared machine): the pids are not all foreign, so nothing is said.
    clock = FakeClock(T0)
    other = os.getpid()  # not a job's worker here (the launcher's pids are made up), but a live process
    monkeypatch.setattr(sampler_module, "_maps_gpu", lambda pid: pid == other)
    session = _session(tmp_path, clock, ((HOST_PIDS[0], GIB), (other, GIB)))
    session.supervisor.tick()
    _report_cuda(session)
    _readings(session, clock, 5)
    assert HIDDEN_PIDS_NOTE not in session.sampler.gpu_status
    session.sampler.stop()


def test_the_worker_reports_its_allocators_memory_on_cuda_and_nothing_on_the_cpu() -> None:
    calls: list[object] = []

    def reserved(device: object) -> int:
        calls.append(device)
        return RESERVED

    # torch.cuda.memory_reserved / max_memory_reserved take the device and return bytes (torch docs,
    # "torch.cuda.memory_reserved").
    cuda = SimpleNamespace(memory_reserved=reserved, max_memory_reserved=lambda device: PEAK)
    device = SimpleNamespace(type="cuda", index=0)
    assert cuda_memory(device, cuda) == {"cuda_reserved_bytes": RESERVED, "cuda_peak_bytes": PEAK}
    assert calls == [device]
    assert cuda_memory("cuda:1", cuda) == {"cuda_reserved_bytes": RESERVED, "cuda_peak_bytes": PEAK}
    assert cuda_memory(SimpleNamespace(type="cpu"), cuda) == {} and cuda_memory("cpu") == {}
