"""Which clips `--video-every STEPS` asks for (`cockpit.core.session.clips.VideoEvery`): one per job
each time its newest checkpoint passes a multiple of STEPS, played from that checkpoint into the job's
`videos/<checkpoint>.mp4` and TensorBoard at the checkpoint's step; a resumed run's clips already in
`videos/` count as made. The job directories are written through the contract's writers: the
worker's `started` event (`EventWriter`) and checkpoints with their recorded sums (meta.json)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from cockpit.contract.checkpoint_files import META_FILE, MODEL_FILE
from cockpit.contract.events import EventWriter
from cockpit.contract.files import sha256_of
from cockpit.contract.rundir import RunDir
from cockpit.core.feed.snapshot import JobView
from cockpit.core.session.clips import VideoEvery
from tests.test_export_tensorboard import T0, run_state, view


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
