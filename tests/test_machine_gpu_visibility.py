"""Which GPUs a run uses and where each job goes, as a scheduler or a MIG-cut GPU would have it:
the cockpit's own CUDA_VISIBLE_DEVICES (CUDA's meaning), a job finding its GPU again by UUID after
NVML renumbered it, sticky placement giving way to a crowded or full GPU, and MIG slices placed on
by their UUIDs with their own memory. Against the scripted pynvml stand-in with four GPUs of 8, 24,
24 and 80 GiB (`tests.fake_pynvml.four_gpus`) and `GpuInfo`s of an 80 GB A100 cut in two."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.cli import build_parser
from cockpit.commands import run as run_command
from cockpit.contract.presets import load
from cockpit.contract.runspec import ConfigError
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.host import thread_budget
from cockpit.core.machine.nvml import GpuReader, close_gpus, open_gpus
from cockpit.core.machine.placement import GpuRef, GpuRoom, fit_jobs, place, rooms_of
from cockpit.core.machine.visibility import open_first_gpu, visible, visible_gpus
from cockpit.core.session.run_session import sampled_gpus
from cockpit.core.session.startup import start_session
from cockpit.core.sizing.advisor import GIB, JobMeasure, Machine, Measurements, advise
from cockpit.core.supervise.supervisor import JobTemplate, Placement, Supervisor
from cockpit.core.telemetry.sampler import Sampler
from tests.fake_pynvml import FakeNvml, FakeSlice, four_gpus
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher

T0 = 1_790_000_000.0


def _four() -> list[GpuReader]:
    readers, status = open_gpus(FakeNvml(four_gpus(FakeClock(T0).time)))
    assert status == ""
    return readers


def _infos() -> list[GpuInfo]:
    return [r.info for r in _four()]


# ----- CUDA_VISIBLE_DEVICES, as CUDA reads it -----


def test_cuda_visible_devices_is_read_as_cuda_reads_it() -> None:
    infos = _infos()  # GPU-fake-0..3: an RTX 3070, two RTX 4090s, an A100
    assert visible(None, infos).indices == (0, 1, 2, 3)  # unset: every GPU
    empty = visible("", infos)
    assert empty.indices == () and "set but empty" in empty.warnings[0] and "CPU" in empty.warnings[0]
    assert visible("1", infos, "PCI_BUS_ID").indices == visible("GPU-fake-1", infos).indices == (1,)
    assert visible("GPU-fake-2,3", infos, "PCI_BUS_ID").indices == (2, 3)
    # A prefix names a GPU when it names one alone; "GPU-fake-" is the start of all four: none.
    ambiguous = visible("GPU-fake-,1", infos, "PCI_BUS_ID")
    assert (
        ambiguous.indices == ()
        and "'GPU-fake-' names no GPU here; CUDA ignores what follows it (1)" in (ambiguous.warnings[0])
    )
    # The first entry that names nothing ends the list (CUDA's "0,2,-1,1" -> 0 and 2).
    ended = visible("0,2,-1,1", infos, "PCI_BUS_ID")
    assert ended.indices == (0, 2) and ended.warnings == (
        "CUDA_VISIBLE_DEVICES='0,2,-1,1': '-1' names no GPU here; CUDA ignores what follows it (1)",
    )
    # By index on mixed models, without PCI_BUS_ID, CUDA's fastest-first order is unknown: said.
    (order,) = visible("1", infos).warnings
    assert "without CUDA_DEVICE_ORDER=PCI_BUS_ID" in order and "NVML's order" in order
    assert visible("GPU-fake-1", infos).warnings == ()  # a UUID needs no order


def test_a_run_uses_only_the_gpus_its_cuda_visible_devices_leaves_it(tmp_path: Path) -> None:
    environ = {"CUDA_VISIBLE_DEVICES": "1,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    gpus, status, seen = visible_gpus(_four(), "", environ)
    assert [r.info.index for r in gpus] == [1, 3] and status == "" and seen.warnings == ()
    args = build_parser().parse_args(["run", "--jobs", "3", "--run-dir", str(tmp_path / "run")])
    spec = run_command._spec(args, gpus, ("cockpit",), seen.described)
    launcher = FakeLauncher()
    session = start_session(spec, Sampler(gpus=gpus, clock=FakeClock(T0)), launcher=launcher, serve=False)
    session.supervisor.tick()
    placed = sorted((p.request.gpu.index, p.request.gpu.uuid) for p in launcher.processes if p.request.gpu)
    assert placed == [(1, "GPU-fake-1"), (3, "GPU-fake-3"), (3, "GPU-fake-3")]  # never GPU 0, the first
    # --gpus among the visible GPUs narrows them; outside them it is bad input, before anything starts.
    args = build_parser().parse_args(["run", "--gpus", "0,3", "--run-dir", str(tmp_path / "bad")])
    with pytest.raises(ConfigError) as exc:
        run_command._spec(args, gpus, ("cockpit",), seen.described)
    assert str(exc.value) == (
        "--gpus 0,3: GPU 0 is not visible to this run; CUDA_VISIBLE_DEVICES='1,3' leaves it GPU(s) 1,3"
    )
    assert not (tmp_path / "bad").exists()


def test_an_empty_cuda_visible_devices_trains_on_the_cpu_and_says_why(tmp_path: Path) -> None:
    gpus, status, seen = visible_gpus(_four(), "", {"CUDA_VISIBLE_DEVICES": ""})
    assert gpus == [] and status.startswith("no GPU: CUDA_VISIBLE_DEVICES='' leaves the run none of the 4")
    args = build_parser().parse_args(["run", "--run-dir", str(tmp_path / "run")])
    spec = run_command._spec(args, gpus, ("cockpit",), seen.described)
    assert spec.loaded_preset is not None and spec.loaded_preset.name == "cartpole"  # the CPU's default, not the GPU's
    launcher = FakeLauncher()
    session = start_session(spec, Sampler(gpus=gpus, gpu_status=status), launcher=launcher, serve=False,
                         notes=seen.warnings)  # fmt: skip
    session.supervisor.tick()
    assert [p.request.gpu for p in launcher.processes] == [None, None]  # the worker keeps the "" it inherits
    assert any("set but empty" in w for w in session.supervisor.warnings)
    args = build_parser().parse_args(["run", "--gpus", "0", "--run-dir", str(tmp_path / "bad")])
    with pytest.raises(ConfigError, match=r"leaves it no GPU$"):
        run_command._spec(args, gpus, ("cockpit",), seen.described)


# ----- a job's GPU, found again by UUID -----


def _rooms(*uuids: str) -> list[GpuRoom]:
    """Two 24 GiB GPUs, the first with 20 GiB free, the second 23: a job placed afresh goes to the second."""
    return [GpuRoom(i, u, 24 * GIB, free * GIB) for i, (u, free) in enumerate(zip(uuids, (20, 23), strict=True))]


def test_a_resumed_job_finds_its_gpu_by_uuid_wherever_nvml_lists_it_now() -> None:
    # After a reboot NVML lists the same two GPUs the other way round.
    rebooted = _rooms("GPU-b", "GPU-a")
    assert place(rebooted, {}, GpuRef(0, "GPU-a")).index == 1  # its GPU, at its new index
    assert place(rebooted, {}, GpuRef(1, "GPU-b")).index == 0  # though GPU 1 has more free memory
    # The index counts only where neither side knows a UUID: a record without one is placed afresh.
    assert place(rebooted, {}, GpuRef(0)).index == 1
    assert place(_rooms("", ""), {}, GpuRef(0)).index == 0


# ----- sticky, but not crowded, not full -----


def test_a_sticky_job_goes_elsewhere_when_its_gpu_is_crowded_or_full(tmp_path: Path) -> None:
    rooms = _rooms("GPU-a", "GPU-b")
    before = GpuRef(0, "GPU-a")
    assert place(rooms, {0: 1, 1: 1}, before).index == 0  # back on it: 2 against 1, one more is fine
    assert place(rooms, {0: 1}, before).index == 1  # 2 against 0: crowded
    assert place(rooms, {}, before, peak_bytes=20 * GIB).index == 0  # its peak fits what is free
    assert place(rooms, {}, before, peak_bytes=21 * GIB).index == 1  # it does not: placed afresh

    def supervisor(run_dir: Path, jobs: int, peaks: dict[str, int]) -> FakeLauncher:
        launcher = FakeLauncher()
        sup = Supervisor(run_dir=run_dir, template=JobTemplate("cartpole", "CartPole-v1", 1000), seeds=range(jobs),
                         slots=jobs, launcher=launcher, budget=thread_budget(jobs, 2), clock=FakeClock(),
                         placement=Placement(gpus=lambda: rooms, peak_gpu_mem=lambda: peaks))  # fmt: skip
        for job in sup.jobs.values():
            job.gpu = before
        sup.tick()
        return launcher

    # A fleet's promoted agents, all from GPU 0, relaunched one after the other: spread, not piled up.
    launcher = supervisor(tmp_path / "a", 2, {})
    assert [p.request.gpu.uuid for p in launcher.processes if p.request.gpu] == ["GPU-a", "GPU-b"]
    # A job whose measured peak no longer fits its GPU's free memory goes elsewhere.
    launcher = supervisor(tmp_path / "b", 1, {"000": 21 * GIB})
    assert [p.request.gpu for p in launcher.processes] == [GpuRef(1, "GPU-b")]


# ----- MIG: each slice is a GPU of its own -----

A100 = GpuInfo(0, "NVIDIA A100-SXM4-80GB", 80 * GIB, "550.54", "GPU-a100")
SLICES = (
    GpuInfo(1, "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 40 * GIB, "550.54", "MIG-aaaa", parent_index=0),
    GpuInfo(2, "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 40 * GIB, "550.54", "MIG-bbbb", parent_index=0),
)


def test_jobs_are_placed_on_mig_slices_by_uuid_with_the_slices_memory(tmp_path: Path) -> None:
    infos = [A100, *SLICES]
    rooms = rooms_of(infos)
    assert [(r.index, r.uuid, r.total_bytes) for r in rooms] == [(1, "MIG-aaaa", 40 * GIB), (2, "MIG-bbbb", 40 * GIB)]
    # 10 GiB jobs: 3 fit in 90 % of each 40 GiB slice, 6 in all (the whole 80 GiB GPU would take 7).
    assert fit_jobs(rooms, 10 * GIB, 0.9) == 6
    assert fit_jobs(Machine(16, 32, 256 * GIB, A100.name, A100.memory_total_bytes, tuple(infos)).gpu_rooms(),
                    10 * GIB, 0.9) == 6  # fmt: skip
    sup = Supervisor(run_dir=tmp_path, template=JobTemplate("cartpole", "CartPole-v1", 1000), seeds=range(2),
                     slots=2, launcher=(launcher := FakeLauncher()), budget=thread_budget(2, 2), clock=FakeClock(),
                     placement=Placement(gpus=lambda: rooms))  # fmt: skip
    sup.tick()
    assert sorted(p.request.gpu.uuid for p in launcher.processes if p.request.gpu) == ["MIG-aaaa", "MIG-bbbb"]
    # Naming the GPU makes its slices visible; naming a slice, that slice alone.
    assert visible("0", infos, "PCI_BUS_ID").indices == (0, 1, 2)
    assert visible("MIG-bbbb", infos).indices == (2,)


def test_the_advice_caps_jobs_by_the_mig_slices_memory_not_the_whole_gpus() -> None:
    # One slice visible (CUDA_VISIBLE_DEVICES=MIG-aaaa); the first GPU the run saw was the 80 GB A100.
    machine = Machine(16, 32, 256 * GIB, A100.name, A100.memory_total_bytes, SLICES[:1])
    jobs = tuple(JobMeasure(f"{k:03d}", gpu_mem_peak_bytes=10 * GIB, gpu=1) for k in range(4))
    (item,) = [a for a in advise(machine, load("cartpole"), 4, Measurements(jobs)) if "GiB peak" in a.reason]
    assert item.suggested == "3" and "of 40 GiB" in item.reason  # 40 GiB of 4 x 10 GiB is over 90 %


def test_a_gpu_the_reader_lists_through_its_mig_slices_is_named_by_its_index_or_uuid(tmp_path: Path) -> None:
    # NVML's reader lists a GPU in MIG mode through its slices alone (nvml.open_gpus); naming that GPU
    # by index or GPU- UUID, in CUDA_VISIBLE_DEVICES or --gpus, must still name its slices.
    gpus = four_gpus(FakeClock(T0).time)
    gpus[3].mig_slices = (FakeSlice(slot=0, uuid="MIG-x", mem_total=40 * GIB),
                          FakeSlice(slot=1, uuid="MIG-y", mem_total=40 * GIB))  # fmt: skip
    readers, _ = open_gpus(FakeNvml(gpus))
    infos = [r.info for r in readers]
    assert [(i.index, i.parent_index, i.parent_uuid) for i in infos if i.is_mig] == [(4, 3, "GPU-fake-3"),
                                                                                    (5, 3, "GPU-fake-3")]  # fmt: skip
    for setting in ("3", "GPU-fake-3", "MIG-y,3"):
        seen = visible(setting, infos, "PCI_BUS_ID")
        assert seen.indices == (4, 5) and seen.warnings == (), setting
    assert visible("MIG-y", infos).indices == (5,)
    args = build_parser().parse_args(["run", "--gpus", "3", "--jobs", "2", "--run-dir", str(tmp_path / "run")])
    spec = run_command._spec(args, readers, ("cockpit",))
    kept, _ = sampled_gpus(spec, readers, "")
    sampler = Sampler(gpus=kept, clock=FakeClock(T0))
    assert [(r.uuid, r.total_bytes) for r in sampler.gpu_rooms()] == [("MIG-x", 40 * GIB), ("MIG-y", 40 * GIB)]
    sampler.stop()


def test_recommend_and_tune_measure_on_the_first_gpu_cuda_visible_devices_leaves_them() -> None:
    # A scheduler gave this process GPU 2: recommend's machine and tune's trials are GPU 2's, not GPU 0's.
    nvml = FakeNvml(four_gpus(FakeClock(T0).time))
    reader = open_first_gpu({"CUDA_VISIBLE_DEVICES": "GPU-fake-2"}, nvml)
    assert reader is not None and reader.info.uuid == "GPU-fake-2"
    reader.close()
    assert nvml.inits == 0  # the readers it did not keep gave their NVML references back
    assert open_first_gpu({"CUDA_VISIBLE_DEVICES": ""}, nvml) is None
    # GPU 0 in MIG mode: its CUDA work runs in its first slice, whose memory is what a job gets.
    gpus = four_gpus(FakeClock(T0).time)
    gpus[0].mig_slices = (FakeSlice(slot=0, uuid="MIG-a", mem_total=10 * GIB),)
    reader = open_first_gpu({"CUDA_VISIBLE_DEVICES": "0"}, FakeNvml(gpus))
    assert reader is not None and (reader.info.uuid, reader.info.memory_total_bytes) == ("MIG-a", 10 * GIB)
    reader.close()


def test_a_cluster_joined_by_address_samples_no_local_gpu_and_closes_its_readers(tmp_path: Path) -> None:
    # The jobs run on the cluster's nodes, each of whose GPUs its node's sampler reads: this
    # machine's GPUs are no job's, so the run gives their NVML references back and says why.
    nvml = FakeNvml(four_gpus(FakeClock(T0).time))
    readers, _ = open_gpus(nvml)
    args = build_parser().parse_args(
        ["run", "--jobs", "2", "--run-dir", str(tmp_path / "run"), "--ray", "10.0.0.7:6379"]
    )
    spec = run_command._spec(args, readers, ("cockpit",))
    assert spec.cluster is not None and spec.cluster.address == "10.0.0.7:6379"
    kept, status = sampled_gpus(spec, readers, "")
    assert kept == [] and nvml.inits == 0
    assert status == "no GPU telemetry here: the jobs run on the Ray cluster (each node's GPU is on its line)"
    # A local Ray instance runs the jobs on this machine's GPUs, which the run samples as without Ray.
    readers, _ = open_gpus(nvml)
    local = run_command._spec(build_parser().parse_args(["run", "--jobs", "2", "--run-dir", str(tmp_path / "run"),
                                                          "--ray"]), readers, ("cockpit",))  # fmt: skip
    assert local.cluster is not None and local.cluster.address is None
    kept, status = sampled_gpus(local, readers, "")
    assert kept == readers and len(kept) == 4 and status == "" and nvml.inits > 0
    close_gpus(kept)
    assert nvml.inits == 0
