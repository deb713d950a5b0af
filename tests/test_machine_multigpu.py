"""Several GPUs in one machine, against the scripted pynvml stand-in with four GPUs of 8, 24, 24 and
80 GiB: sampling every GPU, placing jobs on them, `--gpus`, per-GPU phase accounting in run.toml,
the TUI's GPU sections, the advisor's per-GPU counts, and CUDA_VISIBLE_DEVICES in a real worker."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cockpit.cli import build_parser
from cockpit.commands import run as run_command
from cockpit.contract.presets import load
from cockpit.contract.runrecord import read, write
from cockpit.contract.runspec import ConfigError, build_spec
from cockpit.contract.scriptargs import ScriptArgs
from cockpit.contract.settings import RunSettings
from cockpit.contract.workerargs import CUDA_VISIBLE_DEVICES_ENV
from cockpit.core.launch.local import LocalLauncher
from cockpit.core.launch.protocol import LaunchRequest
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.host import HostInfo, thread_budget
from cockpit.core.machine.nvml import ERROR_GPU_IS_LOST, GpuReader, keep_gpus, open_gpus
from cockpit.core.machine.placement import GpuRef, GpuRoom, fit_jobs, place
from cockpit.core.record.runlog import Recorder, record
from cockpit.core.session.startup import start_session
from cockpit.core.sizing.advisor import GIB, JobMeasure, Machine, Measurements, advise
from cockpit.core.supervise.supervisor import JobTemplate, Placement, Supervisor
from cockpit.core.telemetry.phases import PhaseAccountant
from cockpit.core.telemetry.sampler import Sampler
from cockpit.views.headless import system_line
from cockpit.views.tui.app import make_app
from cockpit.views.tui.gpu_panel import GpuPanel
from tests.fake_pynvml import FakeNvml, four_gpus
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher, crash, finish
from tests.tui_fakes import ScriptedSource, frame

T0 = 1_790_000_000.0
SIZES_GIB = (8, 24, 24, 80)


def _four(clock: FakeClock, nvml_out: list[FakeNvml] | None = None) -> list[GpuReader]:
    nvml = FakeNvml(four_gpus(clock.time))
    if nvml_out is not None:
        nvml_out.append(nvml)
    readers, status = open_gpus(nvml, clock=clock.time)
    assert status == ""
    return readers


# ----- sampling -----


def test_the_sampler_reads_every_gpu_nvml_sees() -> None:
    clock = FakeClock(T0)
    nvmls: list[FakeNvml] = []
    sampler = Sampler(gpus=_four(clock, nvmls), clock=clock)
    assert [info.memory_total_bytes // GIB for info in sampler.gpu_infos] == list(SIZES_GIB)
    assert [info.uuid for info in sampler.gpu_infos] == [f"GPU-fake-{i}" for i in range(4)]
    clock.t += 0.2
    sample = sampler.tick()
    assert [g.index for g in sample.gpus] == [0, 1, 2, 3]
    assert [g.mem_total_bytes // GIB for g in sample.gpus] == list(SIZES_GIB)
    # Each GPU's own utilization readings, by index: the stand-in scripts 10 % + 10 % per index.
    util = sample.gpu_util()
    assert {index: {u for _, u in readings} for index, readings in util.items()} == {
        0: {10.0}, 1: {20.0}, 2: {30.0}, 3: {40.0}
    }  # fmt: skip
    assert sample.gpu is sample.gpus[0] and sample.util_samples == util[0]
    sampler.stop()
    assert nvmls[0].inits == 0  # every reader gave its NVML reference back


def test_gpus_limits_the_sampled_set_and_closes_the_rest() -> None:
    clock = FakeClock(T0)
    nvmls: list[FakeNvml] = []
    readers = keep_gpus(_four(clock, nvmls), (0, 2))
    assert [r.info.index for r in readers] == [0, 2]
    assert nvmls[0].inits == 2  # the two others were closed
    sampler = Sampler(gpus=readers, clock=clock)
    clock.t += 0.2
    assert [g.index for g in sampler.tick().gpus] == [0, 2]
    assert [room.index for room in sampler.gpu_rooms()] == [0, 2]


def test_a_gpu_that_fails_is_dropped_and_the_others_are_still_sampled() -> None:
    clock = FakeClock(T0)
    nvmls: list[FakeNvml] = []
    sampler = Sampler(gpus=_four(clock, nvmls), clock=clock)
    real = nvmls[0].nvmlDeviceGetMemoryInfo

    def gpu1_off_the_bus(handle: str) -> object:
        if handle == "gpu1":
            # pynvml's NVMLError carries NVML's return code as `value` (NVML_ERROR_GPU_IS_LOST, nvml.h).
            lost = nvmls[0].NVMLError("GPU is lost")
            lost.value = ERROR_GPU_IS_LOST
            raise lost
        return real(handle)

    nvmls[0].nvmlDeviceGetMemoryInfo = gpu1_off_the_bus  # type: ignore[method-assign]
    clock.t += 0.2
    assert [g.index for g in sampler.tick().gpus] == [0, 2, 3]
    assert sampler.gpu_status.startswith("GPU 1 lost")
    assert [room.index for room in sampler.gpu_rooms()] == [0, 2, 3]  # no job is placed on it again
    assert [info.index for info in sampler.gpu_infos] == [0, 1, 2, 3]  # the run still names it


# ----- placement -----


def _rooms(used_gib: tuple[int, ...] = (1, 1, 1, 1)) -> list[GpuRoom]:
    return [
        GpuRoom(i, f"GPU-fake-{i}", s * GIB, (s - u) * GIB)
        for i, (s, u) in enumerate(zip(SIZES_GIB, used_gib, strict=True))
    ]


def test_placement_takes_the_fewest_jobs_then_the_most_free_memory_then_the_lowest_index() -> None:
    rooms = _rooms()
    assert place(rooms, {}).index == 3  # all empty: the 80 GiB GPU has the most free memory
    assert place(rooms, {3: 1}).index == 1  # 1 and 2 tie on free memory: the lower index
    assert place(rooms, {3: 1, 1: 1}).index == 2
    assert place(rooms, {3: 1, 1: 1, 2: 1}).index == 0  # fewest jobs beats free memory
    assert place(rooms, {0: 1, 1: 1, 2: 1, 3: 1}).index == 3
    assert place([], {}) is None  # no GPU: no placement


def test_a_job_keeps_its_gpu_unless_it_is_gone() -> None:
    rooms = _rooms()
    assert place(rooms, {0: 1, 1: 1, 2: 1, 3: 1}, GpuRef(0, "GPU-fake-0")).index == 0  # though 3 has more room
    assert place(rooms[1:], {}, GpuRef(0, "GPU-fake-0")).index == 3  # its GPU missing: placed afresh
    swapped = [replace(rooms[0], uuid="GPU-other"), *rooms[1:]]
    assert place(swapped, {}, GpuRef(0, "GPU-fake-0")).index == 3  # another GPU at its index
    unknown = [replace(r, uuid="") for r in rooms]
    assert place(unknown, {}, GpuRef(0)).index == 0  # no UUID on either side: the index decides


def _supervisor(tmp_path: Path, rooms: list[GpuRoom], agents: int) -> tuple[Supervisor, FakeLauncher]:
    launcher = FakeLauncher()
    sup = Supervisor(run_dir=tmp_path, template=JobTemplate("cartpole", "CartPole-v1", 1000), seeds=range(agents),
                     slots=agents, launcher=launcher, budget=thread_budget(agents, 2), clock=FakeClock(),
                     placement=Placement(gpus=lambda: rooms))  # fmt: skip
    return sup, launcher


def test_the_supervisor_spreads_jobs_over_the_gpus_and_restarts_them_on_theirs(tmp_path: Path) -> None:
    rooms = _rooms()
    sup, launcher = _supervisor(tmp_path, rooms, agents=6)
    sup.tick()
    placed = {p.request.job_id: p.request.gpu.index for p in launcher.processes if p.request.gpu is not None}
    assert placed == {"000": 3, "001": 1, "002": 2, "003": 0, "004": 3, "005": 1}
    assert {job.id: job.gpu for job in sup.snapshot().jobs} == placed
    assert launcher.processes[0].request.gpu == GpuRef(3, "GPU-fake-3")  # the launcher gets the UUID too
    crash(sup, launcher, "000")
    sup.tick()
    sup.clock.t += 5  # type: ignore[attr-defined]
    sup.tick()  # back from its back-off: on GPU 3 again, though GPU 2 and 0 have fewer jobs now
    assert launcher.processes[-1].request.job_id == "000" and launcher.processes[-1].request.gpu == GpuRef(
        3, "GPU-fake-3"
    )
    finish(sup, launcher, "000")
    sup.tick()
    rooms[3:] = []  # GPU 3 is gone: its other job goes where placement puts it now
    crash(sup, launcher, "004")
    sup.tick()
    sup.clock.t += 5  # type: ignore[attr-defined]
    sup.tick()
    assert launcher.processes[-1].request.job_id == "004" and launcher.processes[-1].request.gpu == GpuRef(
        2, "GPU-fake-2"
    )


def test_without_a_gpu_nothing_is_placed(tmp_path: Path) -> None:
    sup, launcher = _supervisor(tmp_path, [], agents=2)
    sup.tick()
    assert [p.request.gpu for p in launcher.processes] == [None, None]


# ----- --gpus -----


def test_gpus_flag_must_be_distinct_non_negative_integers(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_parser().parse_args(["run", "--gpus", "2,0"]).gpus == (2, 0)
    for bad, said in (("0,x", "expected GPU indices such as 0,2"), ("-1", "expected GPU indices"),
                      ("0,2,0", "GPU 0 is given twice")):  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(["run", "--gpus", bad])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "argument --gpus" in err and said in err


def test_gpus_must_be_on_this_machine(tmp_path: Path) -> None:
    common = dict(jobs=1, agents=1, preset="cartpole", env=None, timesteps=None, seed=0, max_restarts=0,
                  pin=False)  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        build_spec(
            RunSettings(**common, run_dir=tmp_path / "a", gpus=(0, 5)),
            command_line=("cockpit",),
            gpus_here=(0, 1, 2, 3),
        )  # type: ignore[arg-type]
    assert str(exc.value) == "--gpus 0,5: no GPU 5 here; NVML sees 4 GPU(s), indices 0-3"
    assert not (tmp_path / "a").exists()  # nothing started
    spec = build_spec(
        RunSettings(**common, run_dir=tmp_path / "b", gpus=(2, 0)), command_line=("cockpit",), gpus_here=(0, 1, 2, 3)
    )  # type: ignore[arg-type]
    assert spec.gpus == (0, 2)
    # Without NVML there is nothing to check against: the run goes on, CPU-only, and says so.
    args = build_parser().parse_args(["run", "--gpus", "0,2", "--run-dir", str(tmp_path / "c")])
    spec = run_command._spec(args, None, ("cockpit", "run", "--gpus", "0,2"))
    session = start_session(spec, Sampler(gpu_status="no GPU telemetry: test"), launcher=FakeLauncher(), serve=False)
    assert "--gpus 0,2: no GPU telemetry: test; training on the CPU" in session.supervisor.warnings


def test_a_run_on_four_gpus_samples_and_places_only_those_gpus_gives(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    args = build_parser().parse_args(["run", "--gpus", "1,3", "--jobs", "3", "--run-dir", str(tmp_path / "run")])
    readers = _four(clock)
    spec = run_command._spec(args, readers, ("cockpit",))
    launcher = FakeLauncher()
    session = start_session(spec, Sampler(gpus=keep_gpus(readers, spec.gpus), clock=clock), launcher=launcher,
                         serve=False)  # fmt: skip
    session.supervisor.tick()
    assert sorted(p.request.gpu.index for p in launcher.processes if p.request.gpu is not None) == [1, 3, 3]


# ----- phase accounting per GPU, in run.toml -----


def test_each_jobs_phases_meet_its_own_gpus_utilization_and_run_toml_has_each_gpu(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    # GPU 0 busy only while its job trains; GPU 3 flat at 40 %; GPUs 1 and 2 idle with no job.
    readers = _four(clock)
    sampler = Sampler(gpus=readers, clock=clock)
    recorder = Recorder(tmp_path)
    sampler.on_sample = recorder
    phases = {"000": [(T0, "rollout"), (T0 + 5, "train"), (T0 + 10, None)],
              "001": [(T0, "train"), (T0 + 10, None)]}  # fmt: skip
    placement = {"000": 0, "001": 3}
    nvml = readers[0].nvml
    nvml.gpus[0].util_at = lambda t: 90.0 if T0 + 5 <= t < T0 + 10 else 10.0
    nvml.gpus[0].period = nvml.gpus[3].period = 0.1
    for gpu in nvml.gpus:
        gpu.start = T0
    while clock.t < T0 + 10:
        clock.t += 0.2
        sampler.tick()
    accounting = recorder.accountant.result(phases, T0 + 10, placement=placement)
    job0, job1 = accounting.jobs["000"], accounting.jobs["001"]
    assert job0["rollout"].gpu_util_mean == pytest.approx(10.0, abs=2)
    assert job0["train"].gpu_util_mean == pytest.approx(90.0, abs=2)
    assert job1["train"].gpu_util_mean == pytest.approx(40.0, abs=0.5)  # GPU 3's, not GPU 0's bursts
    assert set(accounting.gpus) == {0, 3}  # idle GPUs 1 and 2 had no job to attribute samples to
    assert accounting.gpus[3].gpu_util_while_training == pytest.approx(40.0, abs=0.5)
    assert accounting.gpus[0].train_share == pytest.approx(0.5, abs=0.03)
    assert accounting.gpus[3].train_share == pytest.approx(1.0)

    sup, _ = _supervisor(tmp_path, sampler.gpu_rooms(), agents=2)
    state = sup.snapshot(gpu=sampler.gpu_info, gpus=sampler.gpu_infos)
    state = replace(state, jobs=tuple(replace(j, gpu=placement[j.id]) for j in state.jobs))
    spec = build_spec(
        RunSettings(
            jobs=2,
            agents=2,
            preset="cartpole",
            timesteps=None,
            max_restarts=0,
            run_dir=tmp_path,
            gpus=(0, 1, 2, 3),
        ),
        command_line=("cockpit",),
        gpus_here=(0, 1, 2, 3),
    )
    host = HostInfo("h", "cpu", 2, 2, 2**34, "Linux")
    write(tmp_path, record(spec, state, host, accounting, recorder))
    recorded = read(tmp_path)
    assert [(g.index, g.memory_total_mib // 1024, g.jobs) for g in recorded.gpus] == [
        (0, 8, ("000",)), (1, 24, ()), (2, 24, ()), (3, 80, ("001",))
    ]  # fmt: skip
    assert recorded.gpus[3].utilization is not None and recorded.gpus[1].utilization is None
    assert recorded.gpus[3].utilization.gpu_util_mean == pytest.approx(40.0, abs=0.5)
    assert [(j.id, j.gpu, j.gpu_uuid) for j in recorded.jobs] == [("000", 0, "GPU-fake-0"), ("001", 3, "GPU-fake-3")]
    assert recorded.jobs[1].phases["train"].gpu_util_mean == pytest.approx(40.0, abs=0.5)
    assert recorded.config.gpus == (0, 1, 2, 3)
    gpu_util_csv = (tmp_path / "gpu_util.csv").read_text().splitlines()
    assert gpu_util_csv[0] == "t,util,gpu" and {line.rsplit(",", 1)[1] for line in gpu_util_csv[1:]} == {
        "0", "1", "2", "3"
    }  # fmt: skip


def test_an_accountant_without_placement_counts_every_job_against_every_gpu() -> None:
    accountant = PhaseAccountant()
    accountant.add_util([(T0 + 1, 80.0)], gpu=0)
    accountant.add_util([(T0 + 1, 20.0)], gpu=1)
    accounting = accountant.result({"000": [(T0, "train"), (T0 + 2, None)]}, T0 + 2)
    assert accounting.jobs["000"]["train"].gpu_util_mean == 50.0
    assert accounting.gpu_util_mean == 50.0 and accounting.gpus[0].gpu_util_mean == 80.0


# ----- views -----


def _four_gpu_frame():  # type: ignore[no-untyped-def]
    base = frame(jobs=4)
    infos = tuple(GpuInfo(i, f"NVIDIA GPU{i} fake", n * GIB, "560", f"GPU-fake-{i}") for i, n in enumerate(SIZES_GIB))
    samples = tuple(
        replace(s, gpus=tuple(replace(s.gpu, index=i, mem_total_bytes=n * GIB, util_percent=10.0 * (i + 1))
                              for i, n in enumerate(SIZES_GIB)))
        for s in base.samples
    )  # fmt: skip
    jobs = tuple(replace(job, gpu=(3, 3, 1, 0)[k]) for k, job in enumerate(base.state.jobs))
    state = replace(base.state, gpu=infos[0], gpus=infos, jobs=jobs, sample=samples[-1])
    return replace(base, state=state, samples=samples)


async def test_the_tui_shows_each_gpu_with_the_lanes_of_its_jobs() -> None:
    app = make_app(ScriptedSource(_four_gpu_frame()))
    async with app.run_test(size=(100, 60)) as pilot:
        await pilot.pause()
        lines = [line.plain for line in app.screen.query_one(GpuPanel).lines()]
    heads = [i for i, line in enumerate(lines) if "fake" in line]
    assert [lines[i].split()[0] for i in heads] == ["0", "1", "2", "3"]
    assert "40%" in lines[heads[3]] and "/80.0 GiB" in lines[heads[3]] and "/8.0 GiB" in lines[heads[0]]
    section = {lines[h].split()[0]: lines[h : [*heads, len(lines)][k + 1]] for k, h in enumerate(heads)}
    lanes = {gpu: [line.split()[0] for line in body[3:] if line[:3].isdigit()] for gpu, body in section.items()}
    assert lanes == {"0": ["003"], "1": ["002"], "2": [], "3": ["000", "001"]}


def test_the_headless_line_gives_each_gpu_its_utilization_memory_and_jobs() -> None:
    line = system_line(_four_gpu_frame().state)
    parts = line.split("  |  ")[0].split("  ")
    assert [part.split()[0] for part in parts] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert parts[0].startswith("GPU0 busy 10% ") and parts[0].endswith("/8,192 MiB 1 job")
    assert parts[2].endswith("/24,576 MiB 0 jobs") and parts[3].endswith("/81,920 MiB 2 jobs")


# ----- advisor -----

FOUR = Machine(32, 64, 256 * GIB, "NVIDIA RTX 3070", 8 * GIB,
               tuple(GpuInfo(i, "NVIDIA fake", s * GIB, "") for i, s in enumerate(SIZES_GIB)))  # fmt: skip


def test_gpu_memory_is_counted_on_each_jobs_own_gpu() -> None:
    preset = load("cartpole")  # cheap envs: the cores fit 8 jobs, so the GPU memory decides
    # Eight jobs, two a GPU, 4 GiB each: 8 GiB on the 8 GiB GPU is over 90 %, the others are fine.
    jobs = tuple(JobMeasure(f"{k:03d}", gpu_mem_peak_bytes=4 * GIB, gpu=k % 4) for k in range(8))
    (item,) = [a for a in advise(FOUR, preset, 8, Measurements(jobs)) if a.numbers.get("gpu") == 0]
    # Placed evenly, GPU 0 takes one 4 GiB job: 7 jobs fit (the 8th would be its second).
    assert item.setting == "jobs" and item.suggested == "7"
    assert item.reason.startswith("GPU 0: 2 jobs x 4.0 GiB peak = 8.0 GiB, over 90% of its 8 GiB")
    assert fit_jobs(FOUR.gpu_rooms(), 4 * GIB, 0.9) == 7
    # The same 8 jobs of 4 GiB on one 80 GiB GPU are no memory problem at all.
    one = dataclasses.replace(FOUR, gpu_memory_bytes=80 * GIB, gpus=FOUR.gpus[3:])
    assert not [a for a in advise(one, preset, 8, Measurements(jobs)) if "GiB peak" in a.reason]


def test_adding_a_job_considers_the_least_loaded_gpu() -> None:
    preset = load("heavy")
    jobs = tuple(JobMeasure(f"{k:03d}", gpu_mem_peak_bytes=1 * GIB, gpu=g) for k, g in enumerate((3, 1, 2)))
    measured = Measurements(jobs, gpu_util_mean=20.0, gpu_util_while_training=70.0, cpu_percent_mean=30.0)
    (item,) = [a for a in advise(FOUR, preset, 3, measured) if a.setting == "jobs"]
    assert int(item.suggested) > 3 and "the next job goes to GPU 0, which runs 0" in item.reason


# ----- the worker's environment -----


def test_the_launched_worker_sees_only_its_gpu(tmp_path: Path) -> None:
    out = tmp_path / "seen"
    command = (sys.executable, "-c", f"import os; open({str(out)!r}, 'w').write(os.environ.get("
               f"{CUDA_VISIBLE_DEVICES_ENV!r}, '-') + ' ' + os.environ.get('CUDA_DEVICE_ORDER', '-'))")  # fmt: skip
    launcher = LocalLauncher()
    placed = (
        (GpuRef(2, "GPU-fake-2"), "GPU-fake-2 PCI_BUS_ID"),  # by UUID: whatever order CUDA numbers in
        (GpuRef(5, "MIG-fake-0-1"), "MIG-fake-0-1 PCI_BUS_ID"),  # a MIG slice: only its UUID names it
        (GpuRef(2), "2 PCI_BUS_ID"),  # no UUID known: the NVML index, in NVML's order
        (None, None),
    )
    for n, (gpu, expected) in enumerate(placed):
        out.unlink(missing_ok=True)
        args = ScriptArgs(tmp_path / f"job{n}", f"j{n}", 0, command)
        handle = launcher.launch(LaunchRequest(f"j{n}", args, gpu=gpu))
        deadline = time.monotonic() + 30
        while launcher.poll(handle) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert launcher.poll(handle) == 0
        seen = out.read_text()
        if expected is not None:
            assert seen == expected
        else:  # no placement: the worker sees what the cockpit sees, the whole value ("" is not "unset")
            mine = os.environ.get(CUDA_VISIBLE_DEVICES_ENV, "-") + " " + os.environ.get("CUDA_DEVICE_ORDER", "-")
            assert seen == mine
