"""Clips from real runs: `cockpit run --video-every STEPS` and a fleet whose plan says `[video] top = K`,
each recorded by the real player (`python -m cockpit_training.play`) from a real CartPole checkpoint
or collected model, and read back: the MP4s with imageio, TensorBoard's with its own
`EventAccumulator`, models.toml with the contract's reader and `verify`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from benchmarks.common import small_preset_text
from cockpit.contract.checkpoint_files import checkpoint_order
from cockpit.contract.model_manifest import MODELS_DIR, read_manifest, verify
from cockpit.contract.play import PlayResult
from cockpit.contract.rundir import RunDir
from cockpit.core.export.tb_video import CHECKPOINT_TAG, VIDEO_TAG

pytestmark = pytest.mark.slow


def cockpit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cockpit", *args, "--headless"], capture_output=True, text=True,
                          timeout=600, cwd=cwd, check=False)  # fmt: skip


def frames_of(path: Path) -> int:
    import imageio.v2 as imageio

    reader = imageio.get_reader(str(path), format="FFMPEG")
    try:
        return sum(1 for _ in reader.iter_data())
    finally:
        reader.close()


def test_video_every_records_each_jobs_checkpoints_into_its_videos_and_tensorboard(tmp_path: Path) -> None:
    preset = tmp_path / "quick.toml"
    preset.write_text(small_preset_text(checkpoint_every=2048, timesteps=6144))
    run_dir = tmp_path / "run"
    result = cockpit("run", "--preset", str(preset), "--agents", "2", "--jobs", "2", "--video-every", "4096",
                     "--run-dir", str(run_dir), cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for job_id in ("000", "001"):
        files = RunDir(run_dir).job(job_id)
        clips = sorted(files.videos.glob("*.mp4"))
        assert clips, f"job {job_id} has no clip: {result.stdout[-2000:]}"
        steps = []
        for clip in clips:
            order = checkpoint_order(clip.stem)
            assert order is not None and order[0] >= 4096, clip  # named for a checkpoint past the multiple
            played = PlayResult.from_json(clip.with_suffix(".json").read_text())
            assert played.clip is not None and played.clip.checkpoint == str(files.checkpoints / clip.stem)
            assert played.clip.frames == frames_of(clip) > 1
            steps.append(order[0])
        board = EventAccumulator(str(files.tensorboard_cockpit), size_guidance={"images": 0, "tensors": 0})
        board.Reload()
        images, named = board.Images(VIDEO_TAG), board.Tensors(CHECKPOINT_TAG)
        for image, text in zip(images, named, strict=True):
            print(f"job {job_id}: {VIDEO_TAG} step {image.step} {image.width}x{image.height} "
                  f"{len(image.encoded_image_string):,} bytes of GIF; {CHECKPOINT_TAG}: "
                  f"{text.tensor_proto.string_val[0].decode()}")  # fmt: skip
        assert [image.step for image in images] == steps
        assert [t.tensor_proto.string_val[0].decode() for t in named] == [
            str(files.checkpoints / c.stem) for c in clips
        ]
        assert all(image.encoded_image_string.startswith(b"GIF89a") for image in images)


PLAN = """
name = "clips"
jobs = 2
promotion = "sync"
[agents]
env = "CartPole-v1"
preset = "{preset}"
seeds = 4
[[tiers]]
timesteps = 2048
promote = 0.5
[[tiers]]
timesteps = 4096
[score]
episodes = 5
[video]
top = 1
"""


def test_a_fleets_top_agents_get_a_clip_beside_their_models_listed_with_its_sha256(tmp_path: Path) -> None:
    preset = tmp_path / "quick.toml"
    preset.write_text(small_preset_text(checkpoint_every=1024, timesteps=4096))
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(preset=preset))
    run_dir = tmp_path / "fleet"
    result = cockpit("fleet", str(plan), "--run-dir", str(run_dir), cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    best, second = read_manifest(run_dir)  # the last tier's two, best first
    assert best.video == f"{best.agent}.mp4" and best.video_sha256 is not None
    assert second.video is None and not (run_dir / MODELS_DIR / f"{second.agent}.mp4").exists()  # top = 1
    assert verify(run_dir, [best, second]) == []
    clip = run_dir / MODELS_DIR / best.video
    assert frames_of(clip) > 1
    assert f"clip of agent {best.agent} from {best.file}: {clip}" in result.stdout
