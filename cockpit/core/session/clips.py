"""Clips of jobs playing, recorded beside a run without slowing it: `--video-every`, a fleet's
`[video] top = K`, and the cockpit's clip key.

Every clip is played by a player process (`cockpit.core.launch.player`: `python -m
cockpit_training.play`, at nice 19 (below the workers), its own session, the policy on the CPU) from a
checkpoint or a collected model, never by the worker, whose training goes on untouched. A
`ClipRecorder` runs one player at a time from a thread of its own, so the session's 5 Hz loop never
waits on one, and a queue of at most one pending clip per job (a newer checkpoint replaces the
older clip not started yet) keeps a slow recorder from falling ever further behind. A job's
checkpoint clip is queued as a `JobClip` (its job directory and checkpoint), resolved into a
`ClipTask` on the recorder's thread: reading the job's events and checking the checkpoint's SHA-256
sums takes long enough to stall the loop or the cockpit's screen. A checkpoint the worker pruned
before then (it keeps its newest few) is replaced by the job's newest, which the clip is named for.

When a clip is made, the recorder writes it into the job's TensorBoard (`cockpit.core.export.tb_video`,
at the checkpoint's step, naming it) when it has a logdir, calls the task's `after` (a fleet's
models.toml entry), and keeps one line saying where it went (`ClipDone.line`), which the caller
takes with `take_done`.

Where clips go (`cockpit.contract.rundir`): a job's checkpoint's clip is
`jobs/<id>/videos/<checkpoint>.mp4`, the player's result (returns, the clip's record) beside it as
`<checkpoint>.json`; a fleet model's clip is `models/<agent>.mp4`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cockpit.contract.checkpoint_files import MODEL_FILE, checkpoint_order, newest_checkpoint
from cockpit.contract.model_manifest import MODELS_DIR, read_manifest, with_video
from cockpit.contract.play import Clip
from cockpit.contract.rundir import JobDir, RunDir
from cockpit.contract.runspec import RunSpec
from cockpit.core.export.tb_video import gif_of, write_clip
from cockpit.core.export.tensorboard import tensorboard_api
from cockpit.core.feed.snapshot import RunState
from cockpit.core.fleet.run import FleetRun
from cockpit.core.launch.player import JobModel, job_model, read_result, start_player, trained_env
from cockpit.core.record.clips import job_clips
from cockpit.core.supervise.supervisor import Supervisor

EVERY_CLIP_S = 10.0  # of video for --video-every and the clip key: enough to see how it plays
MODEL_CLIP_S = 20.0  # of video for a fleet's top agents, each played one whole episode at most
EPISODES = 1
PLAYER_TIMEOUT_S = 600.0  # a player past this is killed: a clip must never hold the run's end forever
MAX_CLIP_WARNINGS = 5  # a run's warnings about clips: past these, one line says the rest are not listed


@dataclass(frozen=True)
class ClipTask:
    """One clip to record: `what` it shows (a line's subject: "job 003"), the model to play, the clip's
    path (`.mp4`), the TensorBoard logdir and step it goes to (None: no TensorBoard), how many seconds
    of video at most, and `after`, called with the clip once it is made."""

    what: str
    key: str  # one pending task per key: a newer one replaces it
    model: JobModel
    video: Path
    step: int | None = None
    tensorboard: Path | None = None
    max_seconds: float = EVERY_CLIP_S
    after: Callable[[Clip], None] | None = None


@dataclass(frozen=True)
class JobClip:
    """A clip of the job in `job_dir` from its `checkpoint` (None: its newest), queued as is and made
    a `ClipTask` by `resolve` on the recorder's thread. `job` and `step` name the job and the
    checkpoint's step for whoever queued it (`VideoEvery.failed`)."""

    job_dir: Path
    what: str
    checkpoint: Path | None = None
    tensorboard: bool = True
    max_seconds: float = EVERY_CLIP_S
    job: str = ""
    step: int | None = None

    @property
    def key(self) -> str:
        """One pending clip per job: a newer one replaces it."""
        return str(self.job_dir)

    def resolve(self) -> ClipTask:
        """The task recording the checkpoint, or the job's newest when the worker has pruned it since
        (the clip then named for the newest). ValueError (one line) when there is none to play."""
        checkpoint = self.checkpoint
        if checkpoint is not None and not (checkpoint / MODEL_FILE).is_file():
            checkpoint = None
        try:
            return checkpoint_task(self.job_dir, self.what, checkpoint, tensorboard=self.tensorboard,
                                   max_seconds=self.max_seconds)  # fmt: skip
        except OSError as exc:  # pruned between the look and the reading of its sums
            if checkpoint is None or (checkpoint / MODEL_FILE).is_file():
                raise ValueError(f"{exc.filename or checkpoint or self.job_dir}: {exc.strerror or exc}") from None
        try:
            return checkpoint_task(self.job_dir, self.what, tensorboard=self.tensorboard, max_seconds=self.max_seconds)
        except OSError as exc:
            raise ValueError(f"{exc.filename or self.job_dir}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class ClipDone:
    """A task's outcome: its clip, or the one-line error that kept it from being made (a `JobClip`
    that could not be resolved stays one)."""

    task: ClipTask | JobClip
    clip: Clip | None
    error: str | None = None

    def line(self) -> str:
        """Where the clip went ("clip of job 003 from step-4096-...: PATH, 240 frames, 10.0 s, 512 KB"),
        or why there is none."""
        task = self.task
        if isinstance(task, JobClip):
            source = task.checkpoint.name if task.checkpoint is not None else "its newest checkpoint"
        else:
            source = Path(task.model.source).name
        if self.clip is None:
            return f"clip of {self.task.what} from {source} not recorded: {self.error}"
        clip = self.clip
        note = f" ({clip.note})" if clip.note else ""
        tb = f"; TensorBoard {self.error}" if self.error else ""
        return (f"clip of {self.task.what} from {source}: {clip.path}, {clip.frames} frames, {clip.seconds:.1f} s, "
                f"{clip.bytes / 1024:,.0f} KB{note}{tb}")  # fmt: skip


@dataclass
class ClipRecorder:
    """Records queued clips one at a time, each by a niced player process (see the module docstring).
    `submit` from any thread; `take_done` for the lines of what finished; `close` to end."""

    python: str = sys.executable
    timeout_s: float = PLAYER_TIMEOUT_S
    _pending: list[ClipTask | JobClip] = field(default_factory=list)
    _done: list[ClipDone] = field(default_factory=list)
    _busy: bool = False
    _closed: bool = False
    _proc: subprocess.Popen[bytes] | None = None
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _thread: threading.Thread | None = None

    def submit(self, task: ClipTask | JobClip) -> None:
        """Queue `task`, replacing a pending one of the same key; starts the recording thread."""
        with self._lock:
            if self._closed:
                return
            self._pending = [t for t in self._pending if t.key != task.key] + [task]
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="cockpit-clips", daemon=True)
                self._thread.start()
            self._lock.notify_all()

    @property
    def idle(self) -> bool:
        """True when nothing is queued or recording."""
        with self._lock:
            return not self._pending and not self._busy

    def take_done(self) -> list[ClipDone]:
        """The tasks finished since the last call, oldest first."""
        with self._lock:
            done, self._done = self._done, []
            return done

    def wait(self, timeout_s: float, stop: Callable[[], bool] | None = None) -> bool:
        """Wait until every queued clip is made (True), or `timeout_s` passed or `stop` (looked at
        twice a second: a run's interrupt) said True (False)."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0 or (stop is not None and stop()):
                    return False
                self._lock.wait(min(left, 0.5))
            return True

    def close(self) -> None:
        """Drop what is queued and kill a player still recording (its process group)."""
        with self._lock:
            self._closed = True
            self._pending.clear()
            proc = self._proc
            self._lock.notify_all()
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                task = self._pending.pop(0)
                self._busy = True
            try:
                done = self._record(task)
            except Exception as exc:  # a recorder fault costs a line, never the run
                done = ClipDone(task, None, f"{type(exc).__name__}: {exc}")
            with self._lock:
                self._done.append(done)
                self._busy = False
                self._proc = None
                self._lock.notify_all()

    def _record(self, queued: ClipTask | JobClip) -> ClipDone:
        try:
            task = queued.resolve() if isinstance(queued, JobClip) else queued
        except ValueError as exc:  # replaced, quarantined or pruned: a line, never the run
            return ClipDone(queued, None, str(exc))
        task.video.parent.mkdir(parents=True, exist_ok=True)
        result_path = task.video.with_suffix(".json")
        request = task.model.request(result_path, episodes=EPISODES, video=task.video, max_seconds=task.max_seconds)
        with self._lock:
            if self._closed:
                return ClipDone(task, None, "the run ended first")
            proc = self._proc = start_player(request, python=self.python, stdout=subprocess.DEVNULL)
        try:
            _, stderr = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return ClipDone(task, None, f"the player ran past {self.timeout_s:.0f} s and was stopped")
        with self._lock:
            if self._closed:  # `close` killed it
                return ClipDone(task, None, "the run ended first: its player was stopped")
        try:
            result = read_result(result_path)
        except ValueError as exc:
            tail = (stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
            return ClipDone(task, None, f"{exc}{': ' + tail[0] if tail else ''}")
        if result.clip is None:
            return ClipDone(task, None, result.error or f"the player exited {proc.returncode} without a clip")
        clip = result.clip
        if task.after is not None:
            task.after(clip)
        tb_error = None
        if task.tensorboard is not None and task.step is not None:
            tb_error = _to_tensorboard(clip, task.tensorboard, task.step)
        return ClipDone(task, clip, tb_error)


def _to_tensorboard(clip: Clip, logdir: Path, step: int) -> str | None:
    """Write `clip` into TensorBoard at `logdir`; None, or why it was not written."""
    api = tensorboard_api()
    if api is None:
        return "not written: the tensorboard package is missing"
    try:
        write_clip(api, logdir, gif_of(clip.path), step=step, checkpoint=clip.checkpoint)
    except (OSError, ValueError) as exc:
        return f"not written: {exc}"
    return None


def checkpoint_task(job_dir: Path, what: str, checkpoint: Path | None = None, *, tensorboard: bool = True,
                    max_seconds: float = EVERY_CLIP_S) -> ClipTask:  # fmt: skip
    """The task recording the job's `checkpoint` (default: its newest) into its `videos/` and, with
    `tensorboard`, its `tb/cockpit/` at the checkpoint's step. ValueError (one line) when the job has
    no checkpoint to play (`job_model`)."""
    model = job_model(job_dir, checkpoint)  # reads every event and hashes the model: not on the 5 Hz loop
    files = JobDir(job_dir)
    order = checkpoint_order(model.source.name)
    return ClipTask(what=what, key=str(job_dir), model=model, video=files.clip_for(model.source),
                    step=order[0] if order else None, tensorboard=files.tensorboard_cockpit if tensorboard else None,
                    max_seconds=max_seconds)  # fmt: skip


@dataclass
class VideoEvery:
    """`--video-every STEPS`: which jobs' checkpoints have passed a multiple of STEPS they have no
    clip of yet. A job's clips already in `videos/` (a resumed run's) count as recorded; a clip that
    failed (`failed`) is asked for again from the job's next checkpoint."""

    run_dir: Path
    every: int
    tensorboard: bool = True
    _recorded: dict[str, int] = field(default_factory=dict)  # job -> the last multiple it has a clip of
    _failed: dict[str, int] = field(default_factory=dict)  # job -> the step of its checkpoint whose clip failed

    def due(self, state: RunState) -> list[JobClip]:
        """The clips to record now: one per job whose newest checkpoint passed a multiple of `every`
        that it has no clip of, or is newer than one whose clip failed, from that checkpoint. Only
        directory listings: the clip is resolved on the recorder's thread (`JobClip`)."""
        tasks = []
        for job in state.jobs:
            step = job.last_checkpoint_step
            if step is None or step < self.every:
                continue
            files = RunDir(self.run_dir).job(job.id)
            if job.id not in self._recorded:
                clips = job_clips(files.videos)  # oldest checkpoint first
                newest = checkpoint_order(clips[-1].path.stem) if clips else None
                self._recorded[job.id] = (newest[0] if newest else 0) // self.every
            multiple = step // self.every
            retry = step > self._failed.get(job.id, step)
            if multiple <= self._recorded[job.id] and not retry:
                continue
            checkpoint = newest_checkpoint(files.checkpoints)
            if checkpoint is None:
                continue  # replaced or quarantined since its event: the next checkpoint gets the clip
            tasks.append(JobClip(files.path, f"job {job.id}", checkpoint, tensorboard=self.tensorboard, job=job.id,
                                 step=step))  # fmt: skip
            self._recorded[job.id] = max(multiple, self._recorded[job.id])
            self._failed.pop(job.id, None)
        return tasks

    def failed(self, clip: JobClip) -> None:
        """`clip`, one of `due`'s, was not made: the job's next checkpoint gets the clip."""
        if clip.job and clip.step is not None:
            self._failed[clip.job] = clip.step


def fleet_model_tasks(run_dir: Path, fleet: str, top: int) -> list[ClipTask]:
    """The clips of the first `top` models in models.toml (the last tier's best first) that have none
    yet: each played from its collected model, with the env its job trained on, into
    `models/<agent>.mp4`, then listed in models.toml with its SHA-256 (`with_video`)."""
    tasks = []
    directory = run_dir / MODELS_DIR
    for entry in read_manifest(run_dir)[:top]:
        if entry.video is not None:
            continue
        try:
            env, env_kwargs = trained_env(RunDir(run_dir).job(entry.agent).path)
        except (OSError, ValueError):
            continue
        model = JobModel(source=directory / entry.file, model=directory / entry.file,
                         vecnormalize=directory / entry.vecnormalize if entry.vecnormalize else None, env=env,
                         env_kwargs=env_kwargs)  # fmt: skip
        video = directory / f"{entry.agent}.mp4"

        def after(clip: Clip, agent: str = entry.agent) -> None:
            with_video(run_dir, fleet, agent, clip.path)

        tasks.append(ClipTask(what=f"agent {entry.agent}", key=entry.agent, model=model, video=video,
                              max_seconds=MODEL_CLIP_S, after=after))  # fmt: skip
    return tasks


class EndingSession(Protocol):
    """What `SessionClips.finish` needs of the session that is ending (a `RunSession`)."""

    lost: str | None
    supervisor: Supervisor

    def snapshot(self, *, all_jobs: bool = False) -> RunState: ...

    def write_run_log(self, state: RunState, *, final: bool = False) -> None: ...


END_WAIT_S = 900.0  # a run's end waits this long at most for its clips (a fleet's top agents')


@dataclass
class SessionClips:
    """A session's clips (`RunSession.clips`): `--video-every`'s at each tick, and a fleet's top
    `fleet_top` agents' once it has ended. Lines go to `say` (a fleet's notices) or, for a failure,
    to `warnings` once per kind of reason (the reason less the paths and checkpoints it names), at
    most `MAX_CLIP_WARNINGS` of them and then one line saying later failures go unlisted."""

    run_dir: Path
    recorder: ClipRecorder
    warnings: list[str]
    every: VideoEvery | None = None
    fleet_name: str = ""
    fleet_top: int = 0
    say: Callable[[str], None] | None = None
    _reasons: set[str] = field(default_factory=set)

    def tick(self, state: RunState) -> None:
        """Queue the clips `--video-every` makes due now; report the clips made since the last tick."""
        if self.every is not None:
            for task in self.every.due(state):
                self.recorder.submit(task)
        self._report()

    def finish(self, session: EndingSession) -> RunState:
        """At a session's end, after its final run log: `close` (`ended` when the run was neither
        lost nor interrupted; an interrupt during the wait ends it); when that warned, the run log
        is written again with the warnings. Returns the final state, taken again: it holds the clips'
        notices and warnings."""
        warned = len(self.warnings)
        self.close(ended=session.lost is None and not session.supervisor.interrupted,
                   stop=lambda: session.supervisor.interrupted)  # fmt: skip
        state = session.snapshot(all_jobs=True)
        if len(self.warnings) > warned and session.lost is None:
            session.write_run_log(state, final=True)
        return state

    def close(self, *, ended: bool, stop: Callable[[], bool] | None = None) -> None:
        """Once the run is over: when it `ended` (not stopped, not lost), finish the clips queued (a
        short run ends before its last checkpoints' clips are made) and, for a fleet with `[video]
        top = K`, record its top agents' clips, waiting `END_WAIT_S` at most, or until `stop` (the
        run's interrupt: Ctrl-C, SIGTERM) says True; then stop the recorder, killing a player still
        recording (its clip is dropped: its checkpoint stays to play later)."""
        if ended:
            for task in fleet_model_tasks(self.run_dir, self.fleet_name, self.fleet_top) if self.fleet_top else ():
                self.recorder.submit(task)
            if not self.recorder.wait(END_WAIT_S, stop):
                self.warnings.append("clips not all recorded: interrupted at the run's end" if stop and stop() else
                                     f"clips not all recorded within {END_WAIT_S:.0f} s of the run's end")  # fmt: skip
        self.recorder.close()
        self._report()

    def _report(self) -> None:
        for done in self.recorder.take_done():
            if done.clip is not None and self.say is not None:
                self.say(done.line())
            if done.clip is None and isinstance(done.task, JobClip) and self.every is not None:
                self.every.failed(done.task)
            kind = _reason_kind(done.error) if done.clip is None and done.error else None
            if kind is None or kind in self._reasons:
                continue
            self._reasons.add(kind)
            if len(self._reasons) <= MAX_CLIP_WARNINGS:
                self.warnings.append(done.line())
            elif len(self._reasons) == MAX_CLIP_WARNINGS + 1:
                self.warnings.append(f"more clips not recorded, for other reasons: past {MAX_CLIP_WARNINGS}, "
                                     "their reasons are not listed")  # fmt: skip


_NAMED = re.compile(r"\S*/\S*|step-\d+-\d+")  # a path, or a checkpoint's name


def _reason_kind(reason: str) -> str:
    """`reason` less the paths and checkpoints it names: each clip's reason names its own, and one
    warning per kind is enough."""
    return _NAMED.sub("…", reason)


def session_clips(spec: RunSpec, warnings: list[str], fleet: FleetRun | None) -> SessionClips | None:
    """The clips `spec` asks for (`--video-every`), and a fleet's plan (`[video] top = K`); None for none."""
    top = fleet.plan.video_top if fleet is not None else 0
    if spec.video_every is None and top == 0:
        return None
    every = VideoEvery(spec.run_dir, spec.video_every, tensorboard=spec.tensorboard) if spec.video_every else None
    return SessionClips(spec.run_dir, ClipRecorder(), warnings, every, fleet_name=fleet.plan.name if fleet else "",
                        fleet_top=top, say=fleet.roster.notice if fleet is not None else None)  # fmt: skip
