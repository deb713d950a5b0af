"""The cockpit's own TensorBoard scalars (`cockpit.core.export.tensorboard`) from scripted telemetry, read
back with TensorBoard's own `EventAccumulator`: SPS at the job's steps, CPU % and GPU utilization
by phase per interval, nothing for a GPU that is not there, one event file per session in the
same run directory, and a failed write that ends the scalars with a warning instead of the run.

Two jobs alternate phases in 5 s cycles: job 000 is in rollout for the first 2.5 s of each cycle
and in train for the rest, job 001 the other way round. A sample a second carries each job's CPU %
(000: 100 in rollout, 20 in train; 001: 50 always) and one NVML utilization sample (10 % while
000 rolls out, 90 % while it trains)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import psutil
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cockpit.contract.rundir import RunDir
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.export.tensorboard import (
    CPU_TAG,
    GPU_TAG,
    SPS_TAG,
    TensorBoardApi,
    TensorBoardScalars,
    install_hint,
    tensorboard_api,
)
from cockpit.core.feed.snapshot import JobView, RunState
from cockpit.core.telemetry.sampler import JobUsage, Sample

T0 = 1_800_000_000.0
CYCLE_S = 5.0
STEPS_PER_S = 1000


def phases_of(job_id: str, seconds: float) -> list[tuple[float, str | None]]:
    """The job's phase transitions over the first `seconds`, as the supervisor keeps them."""
    first, second = ("rollout", "train") if job_id == "000" else ("train", "rollout")
    transitions: list[tuple[float, str | None]] = []
    for k in range(int(seconds / CYCLE_S)):
        transitions += [(T0 + k * CYCLE_S, first), (T0 + k * CYCLE_S + CYCLE_S / 2, second)]
    return transitions


def samples(seconds: float, *, gpu: bool = True) -> list[Sample]:
    """One sample a second, half a second into each: fresh CPU readings, and with `gpu` one NVML
    utilization sample each."""
    out = []
    for k in range(int(seconds)):
        t = T0 + k + 0.5
        rollout = (t - T0) % CYCLE_S < CYCLE_S / 2  # job 000's phase at t
        jobs = {"000": JobUsage(100.0 if rollout else 20.0, 2**28, pid=1), "001": JobUsage(50.0, 2**28, pid=2)}
        util = ((t, 10.0 if rollout else 90.0),) if gpu else ()
        out.append(Sample(t=t, cpu_percent=(60.0, 60.0), ram_used_bytes=2**33, ram_total_bytes=2**34, gpu=None,
                          jobs=jobs, cost_s=0.0, util_samples=util))  # fmt: skip
    return out


def view(job_id: str, now: float, state: JobState = JobState.RUNNING, sps: float | None = 1000.0) -> JobView:
    """The job at `now`: 1,000 steps a second since T0."""
    return JobView(
        id=job_id, seed=int(job_id), state=state, phase=None, phase_since=None,
        steps=int((now - T0) * STEPS_PER_S), target=10**6, sps=sps, mean_sps=None, ep_rew_mean=None, restarts=0,
        checkpoints=0, last_checkpoint_step=None, error=None, exit_reason=None, pid=None, device=None,
        cpu_percent=None, rss_bytes=None, gpu_mem_bytes=None, peak_gpu_mem_bytes=None, started_at=T0, ended_at=None,
    )  # fmt: skip


def run_state(run_dir: Path, now: float, *jobs: JobView) -> RunState:
    """The run's state at `now`, with each job's directory there, as its launch made it."""
    for job in jobs:
        RunDir(run_dir).job(job.id).path.mkdir(parents=True, exist_ok=True)
    return RunState(run_dir=str(run_dir), preset="cartpole", env="CartPole-v1", status=RunStatus.RUNNING,
                    started_at=T0, now=now, slots=2, jobs=jobs, sample=None, gpu=None, gpu_status="",
                    warnings=())  # fmt: skip


def read(path: Path) -> EventAccumulator:
    """A TensorBoard run directory or event file as TensorBoard reads it, every point kept."""
    accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0}, purge_orphaned_data=False)
    accumulator.Reload()
    return accumulator


def scalars(run_dir: Path, job_id: str) -> EventAccumulator:
    """The job's cockpit run (every event file in it)."""
    return read(RunDir(run_dir).job(job_id).tensorboard_cockpit)


def points(accumulator: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(event.step, round(event.value, 3)) for event in accumulator.Scalars(tag)]


def drive(writer: TensorBoardScalars, run_dir: Path, seconds: float, *, gpu: bool = True,
          sps: float | None = 1000.0) -> None:  # fmt: skip
    """The session's calls: an update every 5 s while both jobs run (with the sampler's samples so
    far and the jobs' phases so far), then the final one once they are done."""
    phases = {job_id: phases_of(job_id, seconds) for job_id in ("000", "001")}
    history = samples(seconds, gpu=gpu)
    for now in [T0 + s for s in range(0, int(seconds), 5)]:
        assert writer.due(now)
        so_far = [s for s in history if s.t <= now]
        writer.update(run_state(run_dir, now, view("000", now, sps=sps if now > T0 else None), view("001", now)),
                      so_far, {j: [tr for tr in p if tr[0] <= now] for j, p in phases.items()})  # fmt: skip
        assert not writer.due(now + 4.9)
    end = T0 + seconds
    done = (view("000", end, JobState.DONE), view("001", end, JobState.DONE))
    ended = {j: [*p, (end, None)] for j, p in phases.items()}
    writer.update(run_state(run_dir, end, *done), history, ended, final=True)
    writer.close()


@pytest.fixture
def api() -> TensorBoardApi:
    found = tensorboard_api()
    assert found is not None, "the tensorboard package is a dev dependency (pip install -e '.[dev]')"
    return found


def test_cpu_and_gpu_by_phase_are_written_per_interval_at_the_jobs_steps(tmp_path: Path, api: TensorBoardApi) -> None:
    drive(TensorBoardScalars(tmp_path, api), tmp_path, 20)
    first = scalars(tmp_path, "000")
    # Updates at 5, 10 and 15 s settle the samples older than 5 s (taken before 0, 5 and 10 s);
    # the final one settles the rest. Each interval's figures go at the steps of its end.
    assert points(first, CPU_TAG + "rollout") == [(5000, 100.0), (10_000, 100.0), (20_000, 100.0)]
    assert points(first, CPU_TAG + "train") == [(5000, 20.0), (10_000, 20.0), (20_000, 20.0)]
    assert points(first, GPU_TAG + "rollout") == [(5000, 10.0), (10_000, 10.0), (20_000, 10.0)]
    assert points(first, GPU_TAG + "train") == [(5000, 90.0), (10_000, 90.0), (20_000, 90.0)]
    second = scalars(tmp_path, "001")
    # The same GPU, seen from the job in the other phase; its own CPU readings.
    assert points(second, GPU_TAG + "train") == [(5000, 10.0), (10_000, 10.0), (20_000, 10.0)]
    assert points(second, GPU_TAG + "rollout") == [(5000, 90.0), (10_000, 90.0), (20_000, 90.0)]
    assert points(second, CPU_TAG + "rollout") == [(5000, 50.0), (10_000, 50.0), (20_000, 50.0)]


def test_sps_is_written_at_the_jobs_steps_once_it_is_known(tmp_path: Path, api: TensorBoardApi) -> None:
    drive(TensorBoardScalars(tmp_path, api), tmp_path, 20)
    # None at the first update (before a whole cycle): no point, never a zero.
    assert points(scalars(tmp_path, "000"), SPS_TAG) == [(5000, 1000.0), (10_000, 1000.0), (15_000, 1000.0)]
    first = scalars(tmp_path, "001").Scalars(SPS_TAG)[0]  # 001 had a figure at once: written at step 0
    assert (first.wall_time, first.step) == (T0, 0)


def test_without_a_gpu_there_is_no_gpu_scalar_at_all(tmp_path: Path, api: TensorBoardApi) -> None:
    drive(TensorBoardScalars(tmp_path, api), tmp_path, 20, gpu=False)
    for job_id in ("000", "001"):
        tags = scalars(tmp_path, job_id).Tags()["scalars"]
        assert not [tag for tag in tags if tag.startswith(GPU_TAG)], tags
        assert {CPU_TAG + "rollout", CPU_TAG + "train", SPS_TAG} <= set(tags)


def test_a_resumed_session_adds_an_event_file_to_the_same_run_and_steps_go_on(
    tmp_path: Path, api: TensorBoardApi
) -> None:
    drive(TensorBoardScalars(tmp_path, api), tmp_path, 10)
    resumed = TensorBoardScalars(tmp_path, api)  # `run --resume`: the jobs go on from 10,000 steps
    for now in (T0 + 10, T0 + 15):
        resumed.update(run_state(tmp_path, now, view("000", now), view("001", now)), [], {})
    resumed.close()
    files = list(RunDir(tmp_path).job("000").tensorboard_cockpit.iterdir())
    assert len(files) == 2 and all(f.name.startswith("events.out.tfevents.") for f in files)
    per_file = sorted([event.step for event in read(file).Scalars(SPS_TAG)] for file in files)
    assert per_file == [[5000], [10_000, 15_000]]  # the first session's, then the resumed one's


def open_event_files(run_dir: Path) -> set[str]:
    """The jobs whose cockpit event file this process holds open."""
    return {Path(f.path).parent.parent.parent.name for f in psutil.Process().open_files() if ".tfevents." in f.path
            and Path(f.path).is_relative_to(run_dir)}  # fmt: skip


def test_an_ended_jobs_file_is_closed_once_its_samples_are_written(tmp_path: Path, api: TensorBoardApi) -> None:
    writer = TensorBoardScalars(tmp_path, api)
    history = samples(20)
    phases = {"000": phases_of("000", 20), "001": [*phases_of("001", 5), (T0 + 5, "train"), (T0 + 7, None)]}
    writer.update(run_state(tmp_path, T0 + 5, view("000", T0 + 5), view("001", T0 + 5)), history[:5], phases)
    assert open_event_files(tmp_path) == {"000", "001"}  # a file open per job
    # Job 001 ends at 7 s while 000 goes on: once the samples up to then are written, its file closes.
    for now in (T0 + 10, T0 + 15):
        writer.update(run_state(tmp_path, now, view("000", now), view("001", T0 + 7, JobState.DONE)),
                      [s for s in history if s.t <= now], phases)  # fmt: skip
    assert open_event_files(tmp_path) == {"000"}
    writer.close()
    assert open_event_files(tmp_path) == set()
    assert points(scalars(tmp_path, "001"), CPU_TAG + "train") == [(5000, 50.0), (7000, 50.0)]


def test_a_failed_write_ends_the_scalars_with_one_line_and_the_run_goes_on(tmp_path: Path, api: TensorBoardApi) -> None:
    RunDir(tmp_path).job("000").path.mkdir(parents=True)
    RunDir(tmp_path).job("000").tensorboard.write_text("in the way")  # so tb/cockpit/ cannot be made
    writer = TensorBoardScalars(tmp_path, api)
    writer.update(run_state(tmp_path, T0 + 5, view("000", T0 + 5)), samples(5), {"000": phases_of("000", 5)})
    assert writer.failed is not None and writer.failed.startswith("TensorBoard scalars not written after ")
    assert not writer.due(T0 + 100)
    writer.update(run_state(tmp_path, T0 + 100, view("000", T0 + 100)), [], {})  # a no-op, not an error


def test_a_deleted_run_directory_is_not_made_again(tmp_path: Path, api: TensorBoardApi) -> None:
    run_dir = tmp_path / "run"
    writer = TensorBoardScalars(run_dir, api)
    state = run_state(run_dir, T0 + 5, view("000", T0 + 5))
    shutil.rmtree(run_dir)  # deleted under the run: the session must find it gone, not replaced
    writer.update(state, samples(5), {"000": phases_of("000", 5)})
    assert not run_dir.exists()
    assert writer.failed is not None and writer.failed.startswith("TensorBoard scalars not written after ")


def test_the_hint_names_the_extra_and_where_the_logs_would_go(tmp_path: Path) -> None:
    assert install_hint(tmp_path / "run") == (
        f"tensorboard not installed: pip install 'cockpit[tensorboard]' to log each job to {tmp_path}/run/jobs/<id>/tb"
    )


def test_without_the_package_the_api_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    hide_tensorboard(monkeypatch)
    assert tensorboard_api() is None


def hide_tensorboard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every `import tensorboard...` fail, as it does where the package is not installed
    (a None in sys.modules halts the import, also of modules imported before)."""
    for name in [name for name in sys.modules if name == "tensorboard" or name.startswith("tensorboard.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
