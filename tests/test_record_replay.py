"""A replay shows a finished run, read from its files, as it was at any moment of it.

The run below is synthetic but written by the real writers (EventWriter, Recorder, render):
from T0 to T0+100, job 000 runs 10..60 and finishes done; job 001 starts at 30, fails with a
CUDA OOM at 40, is restarted at 42 and is stopped by an interrupt at 90; job 002 never starts.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from cockpit.contract import presets
from cockpit.contract.controls import StopAll, StopJob
from cockpit.contract.events import EVENTS_FILE, CheckpointEvent, Event, EventWriter, ProgressEvent, StartedEvent
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import write
from cockpit.contract.runspec import RunSpec
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.feed.snapshot import JobView, RunState
from cockpit.core.feed.source import WINDOW_S, Replay, SourceError
from cockpit.core.machine.gpu_types import GpuInfo, GpuSample
from cockpit.core.machine.host import HostInfo, thread_budget
from cockpit.core.record.replay import NO_GPU_RECORDED, ReplaySource, open_replay
from cockpit.core.record.runlog import MIB, Recorder, phase_accounting, record
from cockpit.core.supervise.supervisor import JobTemplate, Supervisor
from cockpit.core.telemetry.sampler import JobUsage, Sample
from cockpit.core.telemetry.throughput import Throughput
from tests.cycles import script
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher, events

T0 = 1_800_000_000.0
END = T0 + 100
GPU = GpuInfo(index=0, name="Test GPU", memory_total_bytes=8192 * MIB, driver="550.1")


def _cores(i: int) -> tuple[float, ...]:
    return (float(i % 7) + 0.5, 50.0, 99.9, 0.0)


def _usage(i: int) -> dict[str, JobUsage]:
    jobs = {}
    if 10 <= i <= 60:
        jobs["000"] = JobUsage(cpu_percent=100.0 + i, rss_bytes=(200 + i) * MIB, gpu_mem_bytes=(300 + i) * MIB)
    if 30 <= i <= 90:
        jobs["001"] = JobUsage(cpu_percent=90.0, rss_bytes=150 * MIB, gpu_mem_bytes=None)
    return jobs


def _sample(i: int, gpu: bool) -> Sample:
    t = T0 + i
    g = GpuSample(40.0 + i % 10, 80.0, (1000 + i) * MIB, GPU.memory_total_bytes, 120.0, 60.0, 1800, ()) if gpu else None
    return Sample(t=t, cpu_percent=_cores(i), ram_used_bytes=(4000 + i) * MIB, ram_total_bytes=16 * 1024**3, gpu=g,
                  jobs=_usage(i), cost_s=0.002, util_samples=((t - 0.5, 30.0), (t, 50.0)) if gpu else ())  # fmt: skip


def _view(job_id: str, seed: int, state: str, **fields: Any) -> JobView:
    base = dict(id=job_id, seed=seed, state=state, phase=None, phase_since=None, steps=0, target=1000, sps=None,
                mean_sps=None, ep_rew_mean=None, restarts=0, checkpoints=0, last_checkpoint_step=None, error=None,
                exit_reason=None, pid=None, device=None, cpu_percent=None, rss_bytes=None, gpu_mem_bytes=None,
                peak_gpu_mem_bytes=None, started_at=None, ended_at=None)  # fmt: skip
    return JobView(**{**base, **fields})


def _write_events(run_dir: Path) -> None:
    job0 = EventWriter(run_dir / "jobs" / "000" / EVENTS_FILE)
    job0.started(t=T0 + 10, config={"env": "CartPole-v1", "threads": 2, "seed": 0}, pid=101, device="cpu",
                 versions={}, resumed_from_step=None, target_steps=1024)  # fmt: skip
    job0.phase(t=T0 + 10.5, phase="rollout", iteration=0, num_timesteps=0)
    job0.phase(t=T0 + 12, phase="train", iteration=1, num_timesteps=256)
    job0.progress(t=T0 + 12.5, num_timesteps=256, iteration=1, sps=100.0, ep_rew_mean=10.0)
    job0.phase(t=T0 + 13, phase="rollout", iteration=1, num_timesteps=256)
    ckpt = run_dir / "jobs" / "000" / "checkpoints" / "step-000000000512-7"
    ckpt.mkdir(parents=True)
    job0.checkpoint(t=T0 + 20, path=str(ckpt), step=512)
    job0.progress(t=T0 + 30, num_timesteps=512, iteration=2, sps=200.0, ep_rew_mean=None)
    job0.finished(t=T0 + 60, status="done", steps=1024, duration=50.0)
    job0.close()
    job1 = EventWriter(run_dir / "jobs" / "001" / EVENTS_FILE)
    job1.started(t=T0 + 30, config={"threads": 2}, pid=201, device="cuda:0", versions={}, resumed_from_step=None)
    job1.phase(t=T0 + 31, phase="rollout", iteration=0, num_timesteps=0)
    job1.error(t=T0 + 40, type="cuda_oom", message="CUDA out of memory")
    job1.started(t=T0 + 42, config={"threads": 2}, pid=202, device="cuda:0", versions={}, resumed_from_step=0)
    job1.phase(t=T0 + 43, phase="rollout", iteration=0, num_timesteps=0)
    job1.phase(t=T0 + 50, phase="train", iteration=1, num_timesteps=128)
    job1.finished(t=T0 + 90, status="stopped", steps=128, duration=48.0)
    job1.close()
    with (run_dir / "jobs" / "001" / EVENTS_FILE).open("a") as fh:
        fh.write('{"t": 1800000095.0, "kind": "phase", "pha')  # a worker killed mid-write
    (run_dir / "jobs" / "002").mkdir(parents=True)


def _build_run(run_dir: Path, *, gpu: bool = True) -> Path:
    """The run described in the module docstring, in `run_dir`."""
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_events(run_dir)
    recorder = Recorder(run_dir)
    for i in range(101):
        recorder(_sample(i, gpu))
    recorder.close()
    spec = RunSpec(jobs=2, agents=3, loaded_preset=presets.load("cartpole"), preset="cartpole", env="CartPole-v1",
                   timesteps=1000, seed=0, run_dir=run_dir, pin=False,
                   command_line=("cockpit", "run"))  # fmt: skip
    jobs = (
        _view("000", 0, "done", steps=1024, checkpoints=1, last_checkpoint_step=512, exit_reason="done",
              mean_sps=20.48),
        _view("001", 1, "stopped", steps=128, restarts=1, exit_reason="stopped", error="cuda_oom: CUDA out of memory"),
        _view("002", 2, "stopped", exit_reason="stopped before it started"),
    )  # fmt: skip
    state = RunState(run_dir=str(run_dir), preset="cartpole", env="CartPole-v1", status=RunStatus.INTERRUPTED,
                     started_at=T0 - 2, now=END + 1, slots=2, jobs=jobs, sample=None, gpu=GPU if gpu else None,
                     gpu_status="" if gpu else "no GPU telemetry: nvidia-ml-py is not installed",
                     warnings=("warning: oversubscribed",))  # fmt: skip
    host = HostInfo("box", "Test CPU", 4, 4, 16 * 1024**3, "Linux")
    accounting = phase_accounting({}, recorder, END, final=True)
    write(run_dir, record(spec, state, host, accounting, recorder))
    return run_dir


@pytest.fixture
def replay(tmp_path: Path) -> ReplaySource:
    return open_replay(_build_run(tmp_path / "run"))


def _at(replay: ReplaySource, t: float) -> dict[str, JobView]:
    replay.seek(t)
    frame = replay.frame()
    assert frame.state.now == t
    return {job.id: job for job in frame.state.jobs}


def test_a_replay_is_a_read_only_replay_positioned_at_the_end(replay: ReplaySource) -> None:
    assert isinstance(replay, Replay) and replay.read_only
    assert replay.span == (T0, END)
    assert replay.position == END
    with pytest.raises(SourceError, match=r"run is a finished run: replay is read-only"):
        replay.submit(StopJob("000"))
    with pytest.raises(SourceError, match="read-only"):
        replay.submit(StopAll())


def test_seek_clamps_to_the_span(replay: ReplaySource) -> None:
    replay.seek(T0 - 1000)
    assert replay.position == T0 and replay.frame().state.now == T0
    replay.seek(END + 1000)
    assert replay.position == END


def test_before_any_start_every_job_is_queued(replay: ReplaySource) -> None:
    jobs = _at(replay, T0 + 5)
    state = replay.frame().state
    assert state.status is RunStatus.RUNNING and state.count("queued") == 3
    assert jobs["000"].steps == 0 and jobs["000"].phase is None and jobs["000"].started_at is None
    assert state.env == "CartPole-v1" and state.preset == "cartpole" and state.slots == 2
    assert state.threads_per_job == 2 and state.physical_cores == 4
    assert state.warnings == ("warning: oversubscribed",)


def test_a_running_job_has_its_phase_progress_and_usage(replay: ReplaySource) -> None:
    job = _at(replay, T0 + 12.2)["000"]
    assert (job.state, job.phase, job.phase_since, job.steps, job.sps) == ("running", "train", T0 + 12, 256, None)
    job = _at(replay, T0 + 25)["000"]
    assert (job.state, job.phase, job.phase_since) == ("running", "rollout", T0 + 13)
    assert (job.steps, job.rollout_sps, job.ep_rew_mean) == (256, 100.0, 10.0)
    # The live SPS: one whole cycle (10.5..13), lowered by the one under way since 13 (12 s so far).
    assert job.sps == pytest.approx(256 / 14.5) and job.eta_s == pytest.approx((1000 - 256) / (256 / 14.5))
    assert (job.checkpoints, job.last_checkpoint_step) == (1, 512)
    assert (job.device, job.pid, job.started_at, job.ended_at) == ("cpu", 101, T0 + 10, None)
    assert job.cpu_percent == 125.0 and job.rss_bytes == 225 * MIB and job.gpu_mem_bytes == 325 * MIB
    assert job.peak_gpu_mem_bytes == 325 * MIB
    assert job.mean_sps == pytest.approx(256 / 15)


def test_a_crashed_job_backs_off_then_counts_its_restart(replay: ReplaySource) -> None:
    job = _at(replay, T0 + 41)["001"]
    assert (job.state, job.phase, job.restarts, job.error) == ("backoff", None, 0, "cuda_oom: CUDA out of memory")
    job = _at(replay, T0 + 45)["001"]
    assert (job.state, job.phase, job.phase_since, job.restarts, job.pid) == ("running", "rollout", T0 + 43, 1, 202)


def test_finished_jobs_end_as_recorded(replay: ReplaySource) -> None:
    jobs = _at(replay, T0 + 61)
    assert (jobs["000"].state, jobs["000"].phase, jobs["000"].steps) == ("done", None, 1024)
    assert (jobs["000"].exit_reason, jobs["000"].ended_at, jobs["000"].cpu_percent) == ("done", T0 + 60, None)
    assert replay.frame().state.status is RunStatus.RUNNING
    jobs = _at(replay, END)
    state = replay.frame().state
    assert state.status is RunStatus.INTERRUPTED
    assert [(j.state, j.exit_reason) for j in state.jobs] == [
        ("done", "done"), ("stopped", "stopped"), ("stopped", "stopped before it started"),
    ]  # fmt: skip
    assert jobs["001"].restarts == 1 and jobs["000"].mean_sps == 20.5  # run.toml rounds it


def test_the_window_holds_the_last_minute_of_samples_and_phases(replay: ReplaySource) -> None:
    replay.seek(T0 + 5)
    frame = replay.frame()
    assert [s.t for s in frame.samples] == [T0 + i for i in range(6)]
    assert frame.phases == {"000": (), "001": (), "002": ()}
    replay.seek(T0 + 70.5)
    frame = replay.frame()
    assert [s.t for s in frame.samples] == [T0 + i for i in range(11, 71)]
    assert all(T0 + 70.5 - WINDOW_S < s.t <= T0 + 70.5 for s in frame.samples)
    assert frame.phases["000"] == ((T0 + 10.5, "rollout"), (T0 + 12, "train"), (T0 + 13, "rollout"), (T0 + 60, None))
    assert frame.phases["001"] == (
        (T0 + 31, "rollout"), (T0 + 40, None), (T0 + 43, "rollout"), (T0 + 50, "train"),
    )  # fmt: skip
    replay.seek(END)
    frame = replay.frame()
    assert frame.phases["000"] == ((T0 + 13, "rollout"), (T0 + 60, None))
    # The transition at the window's left edge (END - 60) comes first; the torn line is skipped.
    assert frame.phases["001"] == ((T0 + 40, None), (T0 + 43, "rollout"), (T0 + 50, "train"), (T0 + 90, None))


def test_samples_are_rebuilt_with_per_core_cpu_and_gpu(replay: ReplaySource) -> None:
    replay.seek(T0 + 15.7)  # between ticks: the tick at or before it
    sample = replay.frame().state.sample
    assert sample is not None and sample.t == T0 + 15
    assert sample.cpu_percent == _cores(15)
    assert sample.ram_used_bytes == 4015 * MIB and sample.ram_total_bytes == 16 * 1024**3
    assert sample.gpu is not None and sample.gpu.util_percent == 45.0 and sample.gpu.sm_clock_mhz == 1800
    assert sample.gpu.mem_used_bytes == 1015 * MIB and sample.gpu.mem_total_bytes == GPU.memory_total_bytes
    assert sample.util_samples == ((T0 + 14.5, 30.0), (T0 + 15, 50.0))
    assert set(sample.jobs) == {"000"} and sample.jobs["000"].cpu_percent == 115.0
    assert sample.cost_s == pytest.approx(0.002)
    state = replay.frame().state
    assert state.gpu == GPU and state.gpu_status == ""


def test_a_run_without_gpu_or_per_core_columns_still_replays(tmp_path: Path) -> None:
    run_dir = _build_run(tmp_path / "run", gpu=False)
    # An older samples.csv without the cpu_cores column: the total is all there is.
    lines = (run_dir / "samples.csv").read_text().splitlines()
    (run_dir / "samples.csv").write_text("\n".join(line.rsplit(",", 1)[0] for line in lines) + "\n")
    replay = open_replay(run_dir)
    replay.seek(T0 + 15)
    state = replay.frame().state
    assert state.sample is not None and state.sample.cpu_percent == (pytest.approx(sum(_cores(15)) / 4, abs=0.05),)
    assert state.sample.gpu is None and state.gpu is None
    assert state.gpu_status == "no GPU telemetry: nvidia-ml-py is not installed"
    doc = RunDir(run_dir).run_toml.read_text()
    RunDir(run_dir).run_toml.write_text(doc.split("[gpu]")[0])  # a run log without a gpu table at all
    assert open_replay(run_dir).frame().state.gpu_status == NO_GPU_RECORDED


def test_detail_is_read_from_the_job_directory(replay: ReplaySource) -> None:
    detail = replay.detail("000")
    assert detail.config == {"env": "CartPole-v1", "threads": 2, "seed": 0}
    assert [(c.step, c.t) for c in detail.checkpoints] == [(512, T0 + 20)]
    assert detail.curve == ((256, 10.0),)
    with pytest.raises(SourceError, match="no job '009'"):
        replay.detail("009")


def test_a_directory_without_a_readable_run_log_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match=f"^{tmp_path}: not a run directory") as missing:
        open_replay(tmp_path)
    RunDir(tmp_path).run_toml.write_text("status = \n[[[")
    with pytest.raises(SourceError, match=f"^{tmp_path}: unreadable run.toml") as garbled:
        open_replay(tmp_path)
    for error in (missing, garbled):
        assert "\n" not in str(error.value)


def test_frames_are_cached_per_position(replay: ReplaySource) -> None:
    replay.seek(T0 + 30)
    first = replay.frame()
    assert replay.frame() is first
    replay.seek(T0 + 31)
    assert replay.frame() is not first and replay.frame().link_error is None


def test_replay_shows_the_live_throughput_the_supervisor_showed(tmp_path: Path) -> None:
    # Seven 60 s cycles, then one with a 300 s train phase; the worker reports its rollout rate.
    run_dir = tmp_path / "run"
    run = script(T0 + 30, cycles=8, rollout_s=10, train_s=(50,) * 7 + (300,), steps_per_cycle=2048)
    writer = EventWriter(run_dir / "jobs" / "000" / EVENTS_FILE)
    for event in run.events:
        writer.emit(event)
    writer.close()
    recorder = Recorder(run_dir)
    recorder.close()
    spec = RunSpec(jobs=1, agents=1, loaded_preset=presets.load("cartpole"), preset="cartpole", env="CartPole-v1",
                   timesteps=run.target, seed=0, run_dir=run_dir, pin=False,
                   command_line=("cockpit", "run"))  # fmt: skip
    job = _view("000", 0, "done", steps=run.target, target=run.target, exit_reason="done")
    state = RunState(run_dir=str(run_dir), preset="cartpole", env="CartPole-v1", status=RunStatus.DONE,
                     started_at=T0, now=run.end + 1, slots=1, jobs=(job,), sample=None, gpu=None,
                     gpu_status="no GPU", warnings=())  # fmt: skip
    host = HostInfo("box", "Test CPU", 4, 4, 16 * 1024**3, "Linux")
    write(run_dir, record(spec, state, host, phase_accounting({}, recorder, run.end, final=True), recorder))
    replay = open_replay(run_dir)
    lowered = 0
    for second in range(40, int(run.end - T0), 3):
        t = T0 + second
        shown = _at(replay, t)["000"]
        # What the supervisor's tracker said at `t`, having read the events written by then.
        live = Throughput()
        live.observe_all(run.until(t))
        expected = live.rate(t)
        assert shown.state == "running"
        assert shown.sps == (None if expected is None else pytest.approx(expected)), second
        assert shown.eta_s == (None if expected is None else pytest.approx((run.target - shown.steps) / expected))
        assert replay.frame().state.eta_s == shown.eta_s
        if t >= run.cycle_starts[1]:
            assert shown.sps is not None and shown.sps < 0.5 * run.rollout_rate
            lowered += shown.sps < 0.95 * 2048 / 60
    assert lowered > 50  # the long train phase lowered the figure, as it did live


def test_a_replayed_job_shows_what_the_live_one_did(tmp_path: Path) -> None:
    # Both build their views through `job_view`: given the same events and samples, the replay
    # shows each job as the live supervisor's snapshots did at every tick of the run.
    clock, launcher = FakeClock(T0), FakeLauncher()
    long = script(T0 + 12, cycles=6, rollout_s=5, train_s=3, steps_per_cycle=1000, startup_s=10)
    short = script(T0 + 12, cycles=3, rollout_s=4, train_s=2, steps_per_cycle=800, startup_s=10)
    run_dir = tmp_path / "run"
    sup = Supervisor(run_dir=run_dir, template=JobTemplate("cartpole", "CartPole-v1", long.target), seeds=range(2),
                     slots=2, launcher=launcher, budget=thread_budget(2, 2), clock=clock)  # fmt: skip
    sup.tick()
    # Each worker's events as it writes them: its own pid, its episodes so far, and a checkpoint.
    pending: dict[str, list[Event]] = {}
    for job_id, run, pid in (("000", long, 10_001), ("001", short, 10_002)):
        evented = [replace(e, pid=pid) if isinstance(e, StartedEvent) else e for e in run.events]
        evented = [replace(e, episodes=int(e.t - T0) // (pid - 10_000)) if isinstance(e, ProgressEvent) else e
                   for e in evented]  # fmt: skip
        checkpoint = CheckpointEvent(run.cycle_starts[2], str(tmp_path / job_id), run.steps_per_cycle * 2)
        pending[job_id] = sorted([*evented, checkpoint], key=lambda e: e.t)
    writers = {job_id: events(sup, job_id) for job_id in pending}
    recorder = Recorder(run_dir)
    peaks: dict[str, int] = {}
    live: list[RunState] = []
    for tick in range(int((long.end - T0) / 0.25) + 2):
        clock.t = T0 + tick * 0.25  # exact in binary, as the CSVs' times read back
        for job_id, queue in pending.items():
            while queue and queue[0].t <= clock.t:
                writers[job_id].emit(queue.pop(0))
            if not queue and launcher.processes[int(job_id)].exit_code is None:
                launcher.processes[int(job_id)].exit_code = 0
        sup.tick()
        usage = {p.request.job_id: JobUsage(cpu_percent=50.0 + tick % 7, rss_bytes=(100 + tick // 4) * MIB,
                                            gpu_mem_bytes=(10 + tick % 5) * MIB, pid=p.pid)
                 for p in launcher.processes if p.exit_code is None}  # fmt: skip
        sample = Sample(t=clock.t, cpu_percent=(60.0,), ram_used_bytes=GPU.memory_total_bytes, ram_total_bytes=2**34,
                        gpu=None, jobs=usage, cost_s=0.0)  # fmt: skip
        recorder(sample)
        for job_id, job_usage in usage.items():
            peaks[job_id] = max(peaks.get(job_id, 0), job_usage.gpu_mem_bytes or 0)
        live.append(sup.snapshot(sample, dict(peaks), all_jobs=True, memory=recorder.memory.verdicts()))
    recorder.close()
    assert sup.finished and live[-1].status is RunStatus.DONE
    spec = RunSpec(jobs=2, agents=2, loaded_preset=presets.load("cartpole"), preset="cartpole", env="CartPole-v1",
                   timesteps=long.target, seed=0, run_dir=run_dir, pin=False,
                   command_line=("cockpit", "run"))  # fmt: skip
    host = HostInfo("box", "Test CPU", 4, 4, 16 * 1024**3, "Linux")
    write(run_dir, record(spec, live[-1], host, phase_accounting({}, recorder, clock.t, final=True), recorder))

    replay = open_replay(run_dir)
    # What the two know differently, by design: a job launched but not started yet is `starting`
    # live and queued in the files (they hold no launch); the mean SPS runs on the supervisor's
    # clock from the launch, and on the events' from the `started`; the leak watch re-forms its
    # verdicts in a replay from job_samples.csv at its own pace (at the end, run.toml's last word
    # is shown: compared below).
    apart = {"mean_sps", "memory", "memory_growth_mib_h", "gpu_memory_growth_mib_h"}
    rates = {"sps", "eta_s", "episodes_per_h"}  # the same measure, in a different order of sums
    compared = 0
    for state in live:
        shown = _at(replay, state.now)
        for job in state.jobs:
            if job.state not in (JobState.RUNNING, JobState.DONE):
                continue
            compared += 1
            replayed = shown[job.id]
            for name in {f.name for f in fields(JobView)} - apart - rates:
                assert getattr(replayed, name) == getattr(job, name), (state.now - T0, job.id, name)
            for name in rates:
                expected = getattr(job, name)
                assert getattr(replayed, name) == (None if expected is None else pytest.approx(expected)), name
    assert compared >= 2 * len(live) - 20  # all but the 2 s each job is `starting`
    assert any(job.eta_s for job in live[len(live) // 2].jobs) and live[-1].jobs[1].episodes == 13
    assert any(job.cpu_percent for job in live[len(live) // 2].jobs)
    # At the end run.toml has the last word, and its memory verdicts are the ones the run showed.
    final = _at(replay, replay.span[1])
    for job in live[-1].jobs:
        assert job.memory is not None and job.memory.startswith("not judged")
        replayed = final[job.id]
        assert (replayed.memory, replayed.memory_growth_mib_h, replayed.gpu_memory_growth_mib_h) == (
            job.memory, job.memory_growth_mib_h, job.gpu_memory_growth_mib_h)  # fmt: skip
