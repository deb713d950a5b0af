"""A GPU's compute mode, as NVML reports it (`nvmlDeviceGetComputeMode`), bounds the jobs on it: in
EXCLUSIVE_PROCESS a second CUDA process fails at start, so placement, the advisor, `run` and
`--auto` put one job on such a GPU unless the jobs are MPS clients; a PROHIBITED GPU takes none.
Against the scripted pynvml stand-in (`tests.fake_pynvml`, `compute_mode`), a scripted user
command as the job, and plain `GpuInfo`s."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import pytest

from cockpit.cli import main
from cockpit.contract.advice import AdviceSetting
from cockpit.contract.presets import load
from cockpit.contract.runrecord import read
from cockpit.contract.workerargs import MpsDaemonDirs, MpsServers
from cockpit.core.feed.source import Frame
from cockpit.core.machine import nvml as nvml_module
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.host import thread_budget
from cockpit.core.machine.nvml import close_gpus, open_gpus
from cockpit.core.machine.placement import GpuRoom, capacity_refusal, fit_jobs, place
from cockpit.core.sizing.advisor import GIB, Machine, advise
from cockpit.core.sizing.autotune import AutoTuner
from cockpit.core.supervise.supervisor import JobTemplate, Placement, Supervisor
from cockpit.views.headless import system_line
from cockpit.views.tui.app import make_app
from cockpit.views.tui.gpu_panel import GpuPanel
from tests.fake_pynvml import (
    NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
    NVML_COMPUTEMODE_EXCLUSIVE_THREAD,
    NVML_COMPUTEMODE_PROHIBITED,
    FakeGpu,
    FakeNvml,
    FakeSlice,
    four_gpus,
)
from tests.fakeclock import FakeClock
from tests.test_sizing_autotune import ScriptedRun, drive
from tests.test_supervise_supervisor import FakeLauncher
from tests.tui_fakes import ScriptedSource, frame

T0 = 1_790_000_000.0
EXCLUSIVE_LINE = "GPU 0 is in EXCLUSIVE_PROCESS compute mode: one job on it (without --mps)"


# ----- reading it -----


def test_each_gpus_compute_mode_is_read_once_at_open_and_unknown_where_the_driver_does_not_say() -> None:
    gpus = four_gpus(FakeClock(T0).time)
    gpus[1].compute_mode = NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    gpus[2].compute_mode = NVML_COMPUTEMODE_PROHIBITED
    gpus[3].compute_mode = NVML_COMPUTEMODE_EXCLUSIVE_THREAD
    readers, status = open_gpus(FakeNvml(gpus))
    assert status == ""
    assert [r.info.compute_mode for r in readers] == ["default", "exclusive_process", "prohibited", "exclusive_thread"]
    close_gpus(readers)
    # NOT_SUPPORTED from the driver, and bindings without the call: unknown, and the GPU still opens.
    unsupported = FakeGpu(util_at=lambda t: 0.0, clock=time.time, compute_mode=None)
    older = FakeGpu(util_at=lambda t: 0.0, clock=time.time)
    for nvml in (FakeNvml(unsupported), FakeNvml(older, missing=("nvmlDeviceGetComputeMode",))):
        readers, status = open_gpus(nvml)
        assert [r.info.compute_mode for r in readers] == [None] and status == ""
        close_gpus(readers)
    # A MIG slice answers its GPU's.
    cut = FakeGpu(util_at=lambda t: 0.0, clock=time.time, compute_mode=NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
                  mig_slices=(FakeSlice(0, uuid="MIG-a"), FakeSlice(1, uuid="MIG-b")))  # fmt: skip
    readers, _ = open_gpus(FakeNvml(cut))
    assert [(r.info.uuid, r.info.compute_mode) for r in readers] == [("MIG-a", "exclusive_process"),
                                                                      ("MIG-b", "exclusive_process")]  # fmt: skip
    close_gpus(readers)


# ----- placement -----


def _room(index: int, mode: str | None, gib: int = 24) -> GpuRoom:
    return GpuRoom(index, f"GPU-{index}", gib * GIB, gib * GIB, mode)


def test_an_exclusive_gpu_takes_one_job_unless_they_are_mps_clients_and_a_prohibited_one_none() -> None:
    exclusive, default = _room(0, "exclusive_process", 80), _room(1, "default")
    assert place([exclusive, default], {}).index == 0  # the most free memory
    assert place([exclusive, default], {0: 1}).index == 1
    assert place([exclusive], {0: 1}) is None
    assert place([exclusive], {0: 1}, mps=True).index == 0  # the MPS server is the one process
    assert place([_room(0, "prohibited", 80), default], {}).index == 1
    assert place([_room(0, "prohibited")], {}) is None
    assert fit_jobs([exclusive, default], 1 * GIB, 0.9) == 22  # 1 on GPU 0, 21 on GPU 1 (90 % of 24 GiB)
    assert fit_jobs([exclusive, default], 1 * GIB, 0.9, mps=True) == 43  # evenly: 22 + 21


def test_the_supervisor_puts_one_job_on_an_exclusive_gpu_and_several_under_mps(tmp_path: Path) -> None:
    rooms = [_room(0, "exclusive_process", 80), _room(1, "default")]

    def launched(run_dir: Path, mps: bool) -> list[int]:
        launcher = FakeLauncher()
        servers = MpsServers(shared=MpsDaemonDirs(str(tmp_path / "pipe"), str(tmp_path / "log")))
        sup = Supervisor(run_dir=run_dir, template=JobTemplate("cartpole", "CartPole-v1", 1000), seeds=range(3),
                         slots=3, launcher=launcher, budget=thread_budget(3, 2), clock=FakeClock(),
                         placement=Placement(gpus=lambda: rooms, mps=servers if mps else None))  # fmt: skip
        sup.tick()
        return sorted(p.request.gpu.index for p in launcher.processes if p.request.gpu is not None)

    # Without MPS the 80 GB GPU, the roomier one, would take two of the three.
    assert launched(tmp_path / "a", mps=False) == [0, 1, 1]
    assert launched(tmp_path / "b", mps=True) == [0, 0, 1]


def _gpu_nvml(mode: int) -> FakeNvml:
    return FakeNvml(FakeGpu(util_at=lambda t: 0.0, clock=time.time, compute_mode=mode))


_JOB = "import sys; sys.exit(0)"


def test_run_refuses_more_jobs_than_an_exclusive_gpu_takes_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: _gpu_nvml(NVML_COMPUTEMODE_EXCLUSIVE_PROCESS))
    code = main(["run", "--headless", "--jobs", "2", "--run-dir", str(tmp_path / "run"), "--no-tensorboard",
                 "--", sys.executable, "-c", _JOB])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0] == (f"cockpit run: error: --jobs 2: {EXCLUSIVE_LINE}: the GPUs here take 1 job(s); give --jobs 1, "
                      "add --mps, or train the others on the CPU (--devices 1:cuda,1:cpu)")  # fmt: skip
    assert not (tmp_path / "run").exists()  # nothing started
    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: _gpu_nvml(NVML_COMPUTEMODE_PROHIBITED))
    assert main(["run", "--headless", "--jobs", "2", "--run-dir", str(tmp_path / "run"), "--no-tensorboard",
                 "--", sys.executable, "-c", _JOB]) == 2  # fmt: skip
    assert capsys.readouterr().err.strip() == (
        "cockpit run: error: --jobs 2: GPU 0 is in PROHIBITED compute mode: no job on it: no GPU here takes a job; "
        "train on the CPU (--devices 2:cpu)"
    )
    # The refusal's own arithmetic: two exclusive GPUs take two; under MPS, no bound.
    two = [GpuInfo(i, "GPU", 24 * GIB, "", f"GPU-{i}", compute_mode="exclusive_process") for i in range(2)]
    assert capacity_refusal(two, 2, 2, False, "--jobs 2") is None
    assert capacity_refusal(two, 4, 4, True, "--jobs 4") is None


def test_a_fleet_asking_for_more_slots_than_an_exclusive_gpu_takes_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_contract_fleetplan import plan_file

    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: _gpu_nvml(NVML_COMPUTEMODE_EXCLUSIVE_PROCESS))
    plan, run_dir = plan_file(tmp_path), tmp_path / "run"  # its plan says jobs = 2
    assert main(["fleet", str(plan), "--headless", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"cockpit fleet: error: jobs = 2 ({plan}): {EXCLUSIVE_LINE}"), err
    assert not run_dir.exists()


def test_a_run_on_an_exclusive_gpu_runs_one_job_says_why_and_records_the_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: _gpu_nvml(NVML_COMPUTEMODE_EXCLUSIVE_PROCESS))
    run_dir = tmp_path / "run"
    code = main(["run", "--headless", "--agents", "1", "--run-dir", str(run_dir), "--no-tensorboard",
                 "--", sys.executable, "-c", _JOB])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    record = read(run_dir)
    assert record.config.jobs == 1  # no --jobs: one, not the usual two
    assert EXCLUSIVE_LINE in record.warnings
    assert [(g.index, g.compute_mode) for g in record.gpus] == [(0, "exclusive_process")]


# ----- the advisor, tune and --auto -----

RTX_4090 = "NVIDIA GeForce RTX 4090"


def _machine(mode: str | None) -> Machine:
    info = GpuInfo(0, RTX_4090, 24 * GIB, "560.35", "GPU-a", compute_mode=mode)
    return Machine(64, 128, 256 * GIB, info.name, info.memory_total_bytes, (info,))


def _jobs_item(machine: Machine, jobs: int, *, mps: bool = False) -> tuple[str, str] | None:
    items = advise(machine, load("heavy"), jobs, mps=mps)
    return next(((a.suggested, a.reason) for a in items if a.setting is AdviceSetting.JOBS), None)


def test_the_advisor_caps_the_jobs_at_what_the_gpus_compute_modes_take_and_says_why() -> None:
    # The GPU table's 4 jobs for an RTX 4090, as a default GPU would get them.
    assert _jobs_item(_machine("default"), 2) == ("4", "NVIDIA GeForce RTX 4090, 24 GB detected; 24 GB: four heavy "
                                                      "jobs overlap their train bursts")  # fmt: skip
    assert _jobs_item(_machine("exclusive_process"), 4) == ("1", EXCLUSIVE_LINE)
    suggested, reason = _jobs_item(_machine("exclusive_process"), 2) or ("", "")
    assert suggested == "1" and reason.endswith(EXCLUSIVE_LINE)
    assert _jobs_item(_machine("exclusive_process"), 1) is None  # one is what fits: nothing to change
    assert _jobs_item(_machine("exclusive_process"), 2, mps=True)[0] == "4"  # type: ignore[index]
    (devices,) = [a for a in advise(_machine("prohibited"), load("heavy"), 2) if a.setting is AdviceSetting.DEVICES]
    assert (devices.suggested, devices.reason) == ("2:cpu", "GPU 0 is in PROHIBITED compute mode: no job on it")


def test_tune_and_auto_grow_no_further_than_an_exclusive_gpu_takes() -> None:
    from cockpit.core.sizing.tune_search import search_space, start_config

    machine = _machine("exclusive_process")
    assert search_space(load("heavy"), 16, machine.gpu_job_cap()).max_jobs == 1
    assert start_config(load("heavy"), machine).jobs == 1
    clock = FakeClock()
    tuner = AutoTuner(clock=clock, max_slots=16, gpu_job_cap=1, gpu_job_cap_why=EXCLUSIVE_LINE)
    assert drive(tuner, ScriptedRun(clock, lambda n: 1000.0 * n), 400) == [1]  # every job would still gain
    assert tuner.log[-1].action == "stop" and tuner.log[-1].reason.endswith(EXCLUSIVE_LINE)


# ----- where it is shown -----


def _with_mode(base: Frame, mode: str) -> Frame:
    assert base.state.gpu is not None
    gpu = dataclasses.replace(base.state.gpu, compute_mode=mode)
    return Frame(dataclasses.replace(base.state, gpu=gpu, gpus=(gpu,)), base.samples, base.phases)


async def test_the_gpu_panel_and_the_headless_line_show_a_mode_that_bounds_the_jobs() -> None:
    # A narrower panel drops power and temperature, then writes the mode as nvidia-smi does, then
    # gives it a line of its own.
    for size, shown in (((160, 40), "exclusive-process"), ((120, 30), "E. Process"), ((100, 30), None)):
        app = make_app(ScriptedSource(_with_mode(frame(jobs=1), "exclusive_process")))
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            lines = [line.plain for line in app.screen.query_one(GpuPanel).lines()]
            assert "RTX 4070" in lines[0], lines
            assert (shown in lines[0]) if shown else "compute mode: exclusive-process" in lines, lines
    app = make_app(ScriptedSource(frame(jobs=1)))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert "exclusive" not in app.screen.query_one(GpuPanel).lines()[0].plain  # the default is not shown
    assert system_line(_with_mode(frame(jobs=1), "prohibited").state).split("  |  ")[0].endswith("  prohibited")
