"""A job's SM % (`JobView.gpu_sm_percent`: the jobs table, the headless line, run.toml's samples)
where the GPU answers the newer per-process call, `nvmlDeviceGetProcessesUtilizationInfo`, with
NOT_SUPPORTED (the call is in the driver, the GPU does not support it): the reader falls back to
`nvmlDeviceGetProcessUtilization`, and the job's figure is what the driver says of its worker's
process, not blank. The scripted pynvml (`tests/fake_pynvml.py`) says where each behaviour is
documented."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cockpit.cli import build_parser
from cockpit.commands import run as run_command
from cockpit.core.machine.host import HostInfo
from cockpit.core.machine.nvml import ERROR_FUNCTION_NOT_FOUND, ERROR_NOT_SUPPORTED, open_gpus
from cockpit.core.session.startup import start_session
from cockpit.core.telemetry.sampler import Sampler
from tests.fake_pynvml import GIB, FakeGpu, FakeNvml, NVMLError
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher
from tests.test_telemetry_gpu_attribution import T0, _readings

SM = 42.0


@pytest.mark.parametrize("code", [ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND])
def test_a_jobs_sm_percent_comes_from_the_older_call_where_the_newer_one_is_refused(tmp_path: Path, code: int) -> None:
    clock = FakeClock(T0)
    me = os.getpid()  # job 000's "worker": a process here, which NVML lists
    # The driver samples the worker's SM use every 1/6 s for the next minute.
    samples = tuple((T0 + i / 6, me, SM) for i in range(6 * 60))
    gpu = FakeGpu(util_at=lambda t: 50.0, clock=clock.time, processes=((me, GIB),), mem_used=2 * GIB,
                  process_samples=samples, new_process_util=False, new_process_util_code=code)  # fmt: skip
    nvml = FakeNvml(gpu)
    readers, status = open_gpus(nvml, clock=clock.time)
    assert status == ""
    with pytest.raises(NVMLError) as refused:  # what this GPU answers the newer call, as the driver would
        nvml.nvmlDeviceGetProcessesUtilizationInfo(readers[0].handle, 0)
    assert refused.value.value == code
    args = build_parser().parse_args(["run", "--jobs", "1", "--run-dir", str(tmp_path / "run")])
    spec = run_command._spec(args, readers, ("cockpit",))
    host = HostInfo("h", "cpu", 64, 128, 2**38, "Linux")
    session = start_session(spec, Sampler(gpus=readers, clock=clock), launcher=FakeLauncher(), serve=False,
                            clock=clock, host=host)  # fmt: skip
    try:
        session.supervisor.tick()  # launches the job
        session.supervisor.jobs["000"].handle.pid = me
        _readings(session, clock, 3)
        (job,) = session.snapshot().jobs
        assert job.gpu_sm_percent == SM
        assert readers[0]._calls["process-util"] == "nvmlDeviceGetProcessUtilization"
    finally:
        session.sampler.stop()
