"""TensorBoard per job: SB3's own scalars from the worker (`<job dir>/tb/PPO_0`) and the cockpit's
(`<job dir>/tb/cockpit`), read back with TensorBoard's own `EventAccumulator`; one SB3 run directory
across a stop and a resume, its steps going on; `--no-tensorboard`; and a machine without the
package, where the worker trains as before and the run says once how to enable it."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest
from rich.console import Console
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cockpit.cli import build_parser
from cockpit.contract.events import read_events
from cockpit.contract.rundir import TB_COCKPIT_RUN, TB_SB3_RUN, JobDir, RunDir
from cockpit.contract.runspec import build_spec
from cockpit.contract.settings import RunSettings
from cockpit.contract.workerargs import WorkerArgs
from cockpit.core.export.tensorboard import CPU_TAG, GPU_TAG, SPS_TAG, install_hint
from cockpit.core.launch.protocol import LaunchRequest, WorkerHandle
from cockpit.core.session.background import headless_argv
from cockpit.core.session.run_session import RunSession
from cockpit.core.session.startup import start_session
from cockpit.core.telemetry.sampler import Sampler
from cockpit.views.headless import HeadlessView
from cockpit_training import worker
from cockpit_training.stopping import StopFlag
from tests.background_child import child_spec
from tests.cockpitproc import PLAIN_RUN, Cockpit
from tests.test_export_tensorboard import hide_tensorboard
from tests.test_feed_control import FakeWorkers
from tests.test_training_worker_seams import ROLLOUT, StopAtRollout, config, tiny_preset

SB3_TAGS = {"rollout/ep_rew_mean", "train/loss", "train/entropy_loss", "time/fps"}


def read_scalars(path: Path) -> EventAccumulator:
    """A run directory or one event file as TensorBoard reads it, every point kept in file order
    (no purge of points whose step goes back: a test must see them)."""
    accumulator = EventAccumulator(str(path), size_guidance={"scalars": 0}, purge_orphaned_data=False)
    accumulator.Reload()
    return accumulator


def steps_of(accumulator: EventAccumulator, tag: str) -> list[int]:
    return [event.step for event in accumulator.Scalars(tag)]


def event_files(run: Path) -> list[Path]:
    """A TensorBoard run's event files, oldest first: by the time in their names
    (`events.out.tfevents.<time>.<host>.<pid>.<n>`), then by `n`, a counter in the process."""

    def order(file: Path) -> tuple[int, int]:
        parts = file.name.split(".")
        return int(parts[3]), int(parts[-1])

    return sorted(run.glob("events.out.tfevents.*"), key=order)


# ----- the real worker, in process -----


def train(job_dir: Path, timesteps: int, *, tensorboard: bool = True, stop_at: int | None = None) -> int:
    """The worker's `train` on the tiny CartPole preset; with `stop_at`, stopped (as by SIGTERM) in
    the rollout that starts at that step, one vector step into it."""
    stop = StopFlag()
    return worker.train(config(job_dir, tiny_preset(), timesteps, tensorboard=tensorboard), stop,
                        StopAtRollout(JobDir(job_dir).events, stop, stop_at))  # fmt: skip


@pytest.mark.usefixtures("torch_threads_kept")
def test_the_worker_logs_sb3s_scalars_to_one_run_that_a_resume_continues(tmp_path: Path) -> None:
    job = JobDir(tmp_path / "job")
    job.path.mkdir()
    assert train(job.path, 100 * ROLLOUT, stop_at=3 * ROLLOUT) == 0  # stopped one vector step into the 4th rollout
    stopped = read_events(job.events)[-1].steps
    assert train(job.path, 6 * ROLLOUT) == 0  # resumed from its checkpoint, to the target
    assert read_events(job.events)[-1].status == "done"
    # One run directory, named by SB3 itself (`tb_log_name` PPO, `reset_num_timesteps=False`), an
    # event file per worker in it.
    assert [p.name for p in job.tensorboard.iterdir()] == [TB_SB3_RUN] == [job.tensorboard_run.name]
    first, second = (read_scalars(f) for f in event_files(job.tensorboard_run))
    assert set(first.Tags()["scalars"]) | set(second.Tags()["scalars"]) >= SB3_TAGS
    # SB3 logs after each whole rollout, at its step count: the resumed worker goes on from the stop.
    assert steps_of(first, "time/fps") == [ROLLOUT, 2 * ROLLOUT, 3 * ROLLOUT]
    assert steps_of(second, "time/fps") == [stopped + ROLLOUT, stopped + 2 * ROLLOUT]


@pytest.mark.usefixtures("torch_threads_kept")
def test_jobs_run_one_after_another_in_one_process_each_log_to_their_own_dir(tmp_path: Path) -> None:
    # As a served worker (`worker --serve`) runs them: each job's SB3 logger closed at its end, so
    # no writer thread or open event file is carried into the next job.
    threads = threading.active_count()
    for name in ("a", "b"):
        assert train(tmp_path / name, 2 * ROLLOUT) == 0
        assert threading.active_count() == threads
    for name in ("a", "b"):
        (only,) = event_files(JobDir(tmp_path / name).tensorboard_run)
        assert steps_of(read_scalars(only), "time/fps") == [ROLLOUT, 2 * ROLLOUT]


@pytest.mark.usefixtures("torch_threads_kept")
def test_without_sb3s_tensorboard_writer_the_worker_trains_without_tensorboard_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What stable-baselines3 is left with where `import torch.utils.tensorboard` fails (no package):
    # no SummaryWriter. Had the worker still given PPO a tensorboard_log, SB3 would raise ImportError.
    import stable_baselines3.common.logger

    monkeypatch.setattr(stable_baselines3.common.logger, "SummaryWriter", None)
    assert train(tmp_path, 2 * ROLLOUT) == 0
    assert read_events(JobDir(tmp_path).events)[-1].status == "done"
    assert not JobDir(tmp_path).tensorboard.exists()


@pytest.mark.usefixtures("torch_threads_kept")
def test_no_tensorboard_writes_no_tb(tmp_path: Path) -> None:
    assert train(tmp_path, 2 * ROLLOUT, tensorboard=False) == 0
    assert read_events(JobDir(tmp_path).events)[-1].status == "done"
    assert not JobDir(tmp_path).tensorboard.exists()


# ----- the flag, from the command line to the worker and the cockpit's writer -----


class RecordingWorkers(FakeWorkers):
    """`FakeWorkers` that keep what they were asked to launch."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[LaunchRequest] = []

    def launch(self, request: LaunchRequest) -> WorkerHandle:
        self.requests.append(request)
        return super().launch(request)


def session_of(run_dir: Path, *, tensorboard: bool = True) -> RunSession:
    """An unserved session of two cartpole agents on recording fake workers."""
    spec = build_spec(
        RunSettings(
            jobs=2,
            agents=2,
            preset="cartpole",
            timesteps=None,
            run_dir=run_dir,
            max_restarts=0,
            tensorboard=tensorboard,
        ),
        command_line=("cockpit", "run"),
    )
    run_dir.mkdir(parents=True)
    return start_session(spec, Sampler(gpu=None, gpu_status="test"), launcher=RecordingWorkers(), serve=False)


def test_no_tensorboard_reaches_the_worker_the_background_run_and_the_session(tmp_path: Path) -> None:
    args = WorkerArgs(tmp_path, tensorboard=False)
    assert "--no-tensorboard" in args.to_argv() and WorkerArgs.parse(args.to_argv()) == args
    assert WorkerArgs.parse(WorkerArgs(tmp_path).to_argv()).tensorboard
    for verb in (["run"], ["fleet", "plan.toml"]):
        assert build_parser().parse_args([*verb, "--no-tensorboard"]).no_tensorboard
        assert not build_parser().parse_args(verb).no_tensorboard
    off, on = session_of(tmp_path / "off", tensorboard=False), session_of(tmp_path / "on")
    assert not child_spec(headless_argv(off.spec, resume=True)).tensorboard
    assert child_spec(headless_argv(on.spec, resume=True)).tensorboard
    for session in (off, on):
        session.supervisor.tick()
        session.recorder.close()
    assert off.tensorboard is None and on.tensorboard is not None
    assert not off.supervisor.warnings and not on.supervisor.warnings
    assert [r.args.tensorboard for r in off.launcher.requests] == [False, False]  # type: ignore[attr-defined]
    assert [r.args.tensorboard for r in on.launcher.requests] == [True, True]  # type: ignore[attr-defined]


def test_without_the_package_the_run_says_once_how_to_enable_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hide_tensorboard(monkeypatch)
    session = session_of(tmp_path / "run")
    assert session.tensorboard is None
    out = io.StringIO()
    view = HeadlessView(Console(file=out, width=300), every_s=1.0)
    for _ in range(3):
        session.supervisor.tick()
        view.update(session.snapshot())
    view.close(session.snapshot())
    session.recorder.close()
    hint = install_hint(tmp_path / "run")
    assert out.getvalue().count(hint) == 1 and f"[cockpit] {hint}" in out.getvalue()
    assert not RunDir(tmp_path / "run").job("000").tensorboard.exists()


# ----- real runs -----


def cockpit_scalars_in_order(job: JobDir) -> dict[str, list[int]]:
    """The steps of each cockpit scalar, over every session's event file in turn."""
    steps: dict[str, list[int]] = {}
    for file in event_files(job.tensorboard_cockpit):
        accumulator = read_scalars(file)
        for tag in accumulator.Tags()["scalars"]:
            steps.setdefault(tag, []).extend(steps_of(accumulator, tag))
    return steps


@PLAIN_RUN
@pytest.mark.slow
def test_every_job_of_a_run_has_sb3s_scalars_and_the_cockpits(plain_cartpole_run: Cockpit) -> None:
    log = plain_cartpole_run.run_log()
    assert log.status == "done" and "tensorboard not installed" not in plain_cartpole_run.text()
    for record in log.jobs:
        job = RunDir(plain_cartpole_run.run_dir).job(record.id)
        assert sorted(p.name for p in job.tensorboard.iterdir()) == [TB_SB3_RUN, TB_COCKPIT_RUN]
        sb3 = read_scalars(job.tensorboard_run)
        assert set(sb3.Tags()["scalars"]) >= SB3_TAGS
        reward = sb3.Scalars("rollout/ep_rew_mean")
        assert 99_000 < reward[-1].step <= record.steps and reward[-1].value >= 400  # it learned, as run.toml says
        cockpit = read_scalars(job.tensorboard_cockpit)
        tags = set(cockpit.Tags()["scalars"])
        assert {SPS_TAG, CPU_TAG + "rollout", CPU_TAG + "train"} <= tags
        assert not [tag for tag in tags if tag.startswith(GPU_TAG)]  # this run had no GPU: no GPU scalar
        assert log.gpu.present is False
        sps = cockpit.Scalars(SPS_TAG)
        assert all(point.value > 0 for point in sps) and [p.step for p in sps] == sorted(p.step for p in sps)
        assert all(point.value > 0 for point in cockpit.Scalars(CPU_TAG + "rollout"))


def assert_curves_go_on_in_the_same_runs(job: JobDir, stopped: int, target: int, output: str) -> None:
    """What a real run stopped at step `stopped` and resumed to `target` left in `job`'s tb/ (the
    run's whole console `output` says nothing of a missing tensorboard): SB3's scalars in one run
    directory, one event file per start, the resumed one's steps after the first's and never back;
    the cockpit's scalars in order, some from after the resume. Called by the stop-and-resume
    end-to-end test in test_e2e_run.py, which pays for the real run."""
    assert "tensorboard not installed" not in output
    assert sorted(p.name for p in job.tensorboard.iterdir()) == [TB_SB3_RUN, TB_COCKPIT_RUN]  # no second run
    first, second = (read_scalars(f) for f in event_files(job.tensorboard_run))
    for tag in SB3_TAGS - {"rollout/ep_rew_mean"}:
        before, after = steps_of(first, tag), steps_of(second, tag)
        assert before == sorted(before) and after == sorted(after), tag
        assert before[-1] <= stopped < after[0] and after[-1] <= target, tag
    for tag, steps in cockpit_scalars_in_order(job).items():
        assert steps == sorted(steps), tag  # never back, let alone to 0
    assert max(steps_of(read_scalars(job.tensorboard_cockpit), CPU_TAG + "rollout")) > stopped
