"""The clips a run holds, found for its report: each job's `videos/` and a fleet's `models/`.

A job's clips are `jobs/<id>/videos/<checkpoint>.mp4` (or `.gif`), each named for the checkpoint it
was recorded from (`JobDir.clip_for`): `--video-every` leaves one per interval, the cockpit's clip
key one more. A fleet's are the clips models.toml lists beside its top agents' models (`[video]
top = K`). A dot-file is a player's temp file, a clip still being written (or left half written by
a player that was killed), never a clip. Reading only: a clip that is missing or unreadable is
simply not there, and a model's clip that fails its SHA-256 is the models check's problem
(`model_manifest.verify`), not a clip.

`cockpit report --html` embeds each one in the page as a `data:` URI (`data_uri`), an MP4 in a
`<video>`, a GIF in an `<img>`, so the page stays one offline file; a clip larger than
`EMBED_MAX_BYTES` is named with its path instead, so one oversized file cannot make the page
unopenable.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path

from cockpit.contract.checkpoint_files import checkpoint_order
from cockpit.contract.model_manifest import MODELS_DIR, read_manifest
from cockpit.contract.rundir import RunDir

MEDIA_TYPES = {".mp4": "video/mp4", ".gif": "image/gif"}
EMBED_MAX_BYTES = 32 * 2**20  # a clip is capped far below this; a page past it is slow to open


@dataclass(frozen=True)
class Clip:
    """One clip file: where it is, what it shows (`label`: the checkpoint or model it was recorded
    from) and its size."""

    path: Path
    label: str
    size: int

    @property
    def media_type(self) -> str:
        """`video/mp4` or `image/gif`, by the file's suffix."""
        return MEDIA_TYPES[self.path.suffix.lower()]

    @property
    def is_video(self) -> bool:
        """True for an MP4 (a `<video>`), False for a GIF (an `<img>`)."""
        return self.media_type.startswith("video/")

    @property
    def embeddable(self) -> bool:
        """Whether the page embeds it (at most `EMBED_MAX_BYTES`)."""
        return self.size <= EMBED_MAX_BYTES

    def data_uri(self) -> str | None:
        """The clip as a `data:` URI; None when it can no longer be read."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return None
        return f"data:{self.media_type};base64,{base64.b64encode(data).decode('ascii')}"


@dataclass(frozen=True)
class RunClips:
    """A run's clips: each job's (`jobs`: job id -> its clips, oldest checkpoint first) and each
    fleet agent's model clip (`models`: agent -> the clip models.toml lists)."""

    jobs: dict[str, tuple[Clip, ...]] = field(default_factory=dict)
    models: dict[str, Clip] = field(default_factory=dict)

    def newest(self, job_id: str) -> Clip | None:
        """The job's clip of its newest checkpoint; None when it has none."""
        clips = self.jobs.get(job_id, ())
        return clips[-1] if clips else None

    def of_agent(self, agent: str) -> Clip | None:
        """What the leaderboard shows for `agent`: its model's clip, else its newest checkpoint's."""
        return self.models.get(agent) or self.newest(agent)

    def __bool__(self) -> bool:
        return bool(self.jobs or self.models)


def _clip(path: Path, label: str) -> Clip | None:
    if path.suffix.lower() not in MEDIA_TYPES or path.name.startswith("."):  # a player's temp file, half written
        return None
    try:
        stat = path.stat()
    except OSError:
        return None
    return Clip(path, label, stat.st_size) if stat.st_size > 0 else None


def job_clips(videos: Path) -> tuple[Clip, ...]:
    """The clips in a job's `videos/` directory, oldest checkpoint first (by the step and time in
    each name); a file not named for a checkpoint comes first, by name."""
    try:
        paths = sorted(videos.iterdir())
    except OSError:
        return ()
    found = [(checkpoint_order(p.stem) or (-1, 0), p.name, clip) for p in paths if (clip := _clip(p, p.stem))]
    return tuple(clip for *_, clip in sorted(found, key=lambda item: (item[0], item[1])))


def run_clips(run_dir: Path, job_ids: tuple[str, ...]) -> RunClips:
    """Every clip of the jobs `job_ids` in `run_dir` and of the fleet's models (see the module
    docstring). A models.toml that cannot be read holds no clips here."""
    files = RunDir(run_dir)
    jobs = {job_id: clips for job_id in job_ids if (clips := job_clips(files.job(job_id).videos))}
    try:
        entries = read_manifest(run_dir)
    except ValueError:
        entries = []
    models = {}
    for entry in entries:
        if entry.video is not None and (clip := _clip(run_dir / MODELS_DIR / entry.video, f"final model {entry.file}")):
            models[entry.agent] = clip
    return RunClips(jobs, models)
