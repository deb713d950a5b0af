"""Which clips `--video-every STEPS` asks for (`cockpit.core.session.clips.VideoEvery`): one per job
each time its newest checkpoint passes a multiple of STEPS, played from that checkpoint into the job's
`videos/<checkpoint>.mp4` and TensorBoard at the checkpoint's step; a resumed run's clips already in
`videos/` count as made, and a failed clip is asked for again from the next checkpoint. A clip is
queued as a `JobClip` and read on the recorder's thread, a pruned checkpoint giving way to the
newest; failures warn once per kind of reason, capped; a run's end writes its record before it waits
for clips, and an interrupt ends the wait. The job directories are written through the contract's
writers: the worker's `started` event (`EventWriter`) and checkpoints with their recorded sums
(meta.json). A player that hangs is a shell script standing in for the recorder's `python`."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import threading
from pathlib import Path

import pytest

from cockpit.contract.checkpoint_files import META_FILE, MODEL_FILE, VECNORMALIZE_FILE
from cockpit.contract.events import EventWriter
from cockpit.contract.files import sha256_of
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import read
from cockpit.contract.runspec import build_spec
from cockpit.contract.settings import RunSettings
from cockpit.contract.states import RunStatus
from cockpit.core.feed.snapshot import JobView, RunState
from cockpit.core.session import clips as clips_module
from cockpit.core.session.clips import ClipRecorder, JobClip, SessionClips, VideoEvery
from cockpit.core.session.startup import start_session
from cockpit.core.telemetry.sampler import Sampler
from tests.test_export_tensorboard import T0, run_state, view
from tests.test_feed_control import FakeWorkers, QuietView


def checkpoint(run_dir: Path, job_id: str, step: int) -> Path:
    """A checkpoint of `job_id` at `step`, its model's sum recorded as the worker records it."""
    path = RunDir(run_dir).job(job_id).checkpoints / f"step-{step:012d}-{T0 * 1e9 + step:.0f}"
    path.mkdir(parents=True)
    (path / MODEL_FILE).write_bytes(f"model at {step}".encode())
    (path / META_FILE).write_text(json.dumps({"step": step, "files": {MODEL_FILE: sha256_of(path / MODEL_FILE)}}))
    return path


def started_job(run_dir: Path, job_id: str) -> None:
    files = RunDir(run_dir).job(job_id)
    files.path.mkdir(parents=True, exist_ok=True)
    EventWriter(files.events).started(pid=1, device="cpu", config={"env": "CartPole-v1", "preset": {}}, t=T0)


def at(job: JobView, step: int | None) -> JobView:
    return dataclasses.replace(job, last_checkpoint_step=step)


def test_each_job_gets_a_clip_each_time_its_checkpoint_passes_a_multiple(tmp_path: Path) -> None:
    for job_id in ("000", "001"):
        started_job(tmp_path, job_id)
    every = VideoEvery(tmp_path, 4096)
    jobs = view("000", T0 + 1), view("001", T0 + 1)
    first = checkpoint(tmp_path, "000", 2048)
    assert every.due(run_state(tmp_path, T0 + 1, at(jobs[0], 2048), at(jobs[1], None))) == []  # below STEPS
    passed = checkpoint(tmp_path, "000", 4608)
    (queued,) = every.due(run_state(tmp_path, T0 + 2, at(jobs[0], 4608), jobs[1]))
    task = queued.resolve()  # on the recorder's thread, in a run
    files = RunDir(tmp_path).job("000")
    assert task.model.source == passed and task.model.model == passed / MODEL_FILE and task.model.env == "CartPole-v1"
    assert task.video == files.videos / f"{passed.name}.mp4" and task.step == 4608
    assert task.tensorboard == files.tensorboard_cockpit and first != passed
    assert every.due(run_state(tmp_path, T0 + 3, at(jobs[0], 4608), jobs[1])) == []  # once per multiple
    checkpoint(tmp_path, "000", 7680)
    assert every.due(run_state(tmp_path, T0 + 4, at(jobs[0], 7680), jobs[1])) == []  # the same multiple
    newest = checkpoint(tmp_path, "000", 12800)  # past two more: one clip, of the newest
    other = checkpoint(tmp_path, "001", 8192)
    tasks = every.due(run_state(tmp_path, T0 + 5, at(jobs[0], 12800), at(jobs[1], 8192)))
    assert [(t.what, t.resolve().model.source) for t in tasks] == [("job 000", newest), ("job 001", other)]


def test_a_resumed_run_does_not_record_again_what_its_videos_hold(tmp_path: Path) -> None:
    started_job(tmp_path, "000")
    old = checkpoint(tmp_path, "000", 8192)
    files = RunDir(tmp_path).job("000")
    files.videos.mkdir()
    files.clip_for(old).write_bytes(b"a clip made before the resume")
    job = view("000", T0 + 1)
    every = VideoEvery(tmp_path, 4096, tensorboard=False)
    assert every.due(run_state(tmp_path, T0 + 1, at(job, 8192))) == []
    new = checkpoint(tmp_path, "000", 12288)
    (queued,) = every.due(run_state(tmp_path, T0 + 2, at(job, 12288)))
    task = queued.resolve()
    assert task.model.source == new and task.tensorboard is None


def hanging_player(tmp_path: Path) -> tuple[Path, Path]:
    """A player that never finishes (as one stuck in its env would): run as the recorder's `python`,
    it writes its pid and sleeps; the pid file says it has started."""
    pid_file = tmp_path / "player.pid"
    script = tmp_path / "hanging-python"
    script.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 600\n")
    script.chmod(0o755)
    return script, pid_file


def test_an_interrupt_ends_the_wait_for_clips_at_the_runs_end_and_kills_the_player(tmp_path: Path) -> None:
    started_job(tmp_path, "000")
    newest = checkpoint(tmp_path, "000", 4096)
    script, pid_file = hanging_player(tmp_path)
    warnings: list[str] = []
    clips = SessionClips(tmp_path, ClipRecorder(python=str(script)), warnings)
    clips.recorder.submit(JobClip(RunDir(tmp_path).job("000").path, "job 000", newest))
    # Ctrl-C comes once the player is recording; the wait would otherwise last END_WAIT_S (15 min).
    closing = threading.Thread(target=clips.close, kwargs={"ended": True, "stop": pid_file.is_file}, daemon=True)
    closing.start()
    closing.join(timeout=120)  # a guard against a hang, far from both outcomes
    assert not closing.is_alive(), "the interrupt did not end the wait"
    assert warnings == [
        "clips not all recorded: interrupted at the run's end",
        f"clip of job 000 from {newest.name} not recorded: the run ended first: its player was stopped",
    ]
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_a_checkpoint_pruned_before_its_clip_is_made_gives_way_to_the_jobs_newest(tmp_path: Path) -> None:
    started_job(tmp_path, "000")
    asked = checkpoint(tmp_path, "000", 4096)
    newest = checkpoint(tmp_path, "000", 8192)
    queued = JobClip(RunDir(tmp_path).job("000").path, "job 000", asked)
    shutil.rmtree(asked)  # the worker keeps its newest two
    task = queued.resolve()
    assert task.model.source == newest and task.step == 8192
    assert task.video == RunDir(tmp_path).job("000").clip_for(newest)


def test_due_only_lists_the_checkpoint_its_files_are_read_on_the_recorders_thread(tmp_path: Path) -> None:
    started_job(tmp_path, "000")
    corrupt = checkpoint(tmp_path, "000", 4096)
    (corrupt / MODEL_FILE).write_bytes(b"not what the worker wrote")
    every = VideoEvery(tmp_path, 4096)
    (queued,) = every.due(run_state(tmp_path, T0 + 1, at(view("000", T0 + 1), 4096)))
    assert isinstance(queued, JobClip) and queued.checkpoint == corrupt and queued.step == 4096
    with pytest.raises(ValueError, match=r"model\.zip does not match"):
        queued.resolve()


def test_a_failed_clip_is_asked_for_again_from_the_jobs_next_checkpoint(tmp_path: Path) -> None:
    started_job(tmp_path, "000")
    corrupt = checkpoint(tmp_path, "000", 4608)
    (corrupt / MODEL_FILE).write_bytes(b"not what the worker wrote")
    every = VideoEvery(tmp_path, 4096)
    warnings: list[str] = []
    clips = SessionClips(tmp_path, ClipRecorder(), warnings, every)
    job = view("000", T0 + 1)
    clips.tick(run_state(tmp_path, T0 + 1, at(job, 4608)))
    assert clips.recorder.wait(60)
    clips.tick(run_state(tmp_path, T0 + 2, at(job, 4608)))  # takes the failure
    clips.recorder.close()
    assert len(warnings) == 1 and "model.zip does not match" in warnings[0], warnings
    assert every.due(run_state(tmp_path, T0 + 3, at(job, 4608))) == []  # not that checkpoint again
    newer = checkpoint(tmp_path, "000", 7680)  # the same multiple of 4096
    (queued,) = every.due(run_state(tmp_path, T0 + 4, at(job, 7680)))
    assert queued.checkpoint == newer


def test_failed_clips_warn_once_per_kind_of_reason_and_at_most_so_many_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(clips_module, "MAX_CLIP_WARNINGS", 2)
    run = RunDir(tmp_path)
    for job_id in ("000", "001"):  # no events: not job directories, each reason naming its own
        run.job(job_id).path.mkdir(parents=True)
    started_job(tmp_path, "002")  # no checkpoint yet
    run.job("003").path.mkdir(parents=True)  # a user's script's job: no env to play
    EventWriter(run.job("003").events).started(pid=1, device="cpu", config={"preset": {}}, t=T0)
    warnings: list[str] = []
    clips = SessionClips(tmp_path, ClipRecorder(), warnings)
    for job_id in ("000", "001", "002", "003"):
        clips.recorder.submit(JobClip(run.job(job_id).path, f"job {job_id}"))
    assert clips.recorder.wait(60)
    clips.close(ended=False)
    newest = "clip of job {} from its newest checkpoint not recorded: {}: "
    assert warnings == [
        newest.format("000", run.job("000").path) + "not a job directory (no events.jsonl)",
        newest.format("002", run.job("002").path) + "no checkpoint yet (a job checkpoints every checkpoint_every "
        "steps and at its end)",
        "more clips not recorded, for other reasons: past 2, their reasons are not listed",
    ]


def test_a_checkpoint_that_cannot_be_read_costs_a_line_never_the_recorder(tmp_path: Path) -> None:
    started_job(tmp_path, "000")
    unreadable = checkpoint(tmp_path, "000", 4096)
    # A file that opens and then fails to read (EIO), as one the worker prunes mid-read fails.
    (unreadable / VECNORMALIZE_FILE).symlink_to("/proc/self/mem")
    meta = json.loads((unreadable / META_FILE).read_text())
    (unreadable / META_FILE).write_text(json.dumps({**meta, "files": {**meta["files"], VECNORMALIZE_FILE: "0" * 64}}))
    recorder = ClipRecorder()
    recorder.submit(JobClip(RunDir(tmp_path).job("000").path, "job 000", unreadable))
    assert recorder.wait(60)
    (done,) = recorder.take_done()
    recorder.close()
    assert done.clip is None
    assert done.line() == f"clip of job 000 from {unreadable.name} not recorded: {unreadable}: Input/output error"


def test_a_run_writes_its_record_before_waiting_for_clips_and_an_interrupt_ends_that_wait(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    workers = FakeWorkers()
    spec = build_spec(RunSettings(jobs=1, agents=1, preset="cartpole", timesteps=None, run_dir=run_dir, max_restarts=0),
                      command_line=("cockpit", "run"))  # fmt: skip
    run_dir.mkdir(parents=True)
    session = start_session(spec, Sampler(gpu=None, gpu_status="test", hz=5), launcher=workers, serve=False)
    other = tmp_path / "other"  # a job of another run: a checkpoint to play
    started_job(other, "000")
    played = checkpoint(other, "000", 4096)
    script, pid_file = hanging_player(tmp_path)
    session.clips = SessionClips(run_dir, ClipRecorder(python=str(script)), session.supervisor.warnings)
    session.clips.recorder.submit(JobClip(RunDir(other).job("000").path, "job 000", played))

    def finish_workers(_state: object) -> None:  # each fake worker ends its job, done
        for pid, code in workers.exit_codes.items():
            if code is None:
                workers.writers[pid].finished(status="done", steps=0, duration=1.0)
                workers.exit_codes[pid] = 0

    final: list[RunState] = []
    runner = threading.Thread(target=lambda: final.append(session.run(QuietView(), on_tick=finish_workers,
                                                                      handle_signals=False)), daemon=True)  # fmt: skip
    runner.start()
    for _ in range(1200):  # the run's end: its final record is written while the player still records
        if run_dir.joinpath("run.toml").is_file() and read(run_dir).status is RunStatus.DONE:
            break
        runner.join(timeout=0.1)
    assert read(run_dir).status is RunStatus.DONE and pid_file.is_file() and runner.is_alive()
    session.supervisor.interrupt(signal.SIGINT)  # as Ctrl-C during the wait
    runner.join(timeout=120)  # a guard against a hang, far from both outcomes
    assert not runner.is_alive(), "the interrupt did not end the wait"
    interrupted = "clips not all recorded: interrupted at the run's end"
    assert interrupted in final[0].warnings and interrupted in read(run_dir).warnings
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
