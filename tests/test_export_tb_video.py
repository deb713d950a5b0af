"""A clip into a job's TensorBoard (`cockpit.core.export.tb_video`), read back with TensorBoard's own
`EventAccumulator`: an image summary holding an animated GIF (what torch's `add_video` writes, SB3's
logger's `Video`) at the checkpoint's step, and the checkpoint named in a text summary beside it.
The clips are made as the recorder makes them (`tests.clipfiles`)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cockpit.contract.rundir import RunDir
from cockpit.core.export.tb_video import CHECKPOINT_TAG, VIDEO_TAG, gif_of, write_clip
from cockpit.core.export.tensorboard import tensorboard_api
from tests.clipfiles import write_gif, write_mp4


def read_back(logdir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(logdir), size_guidance={"images": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def test_an_mp4_clip_reads_back_as_an_animated_gif_at_its_checkpoints_step(tmp_path: Path) -> None:
    api = tensorboard_api()
    assert api is not None
    job = RunDir(tmp_path).job("000")
    checkpoint = job.checkpoints / "step-4096-1700000000000000000"
    clip = write_mp4(job.clip_for(checkpoint), count=48, fps=24)
    write_clip(api, job.tensorboard_cockpit, gif_of(clip), step=4096, checkpoint=str(checkpoint))
    later = job.checkpoints / "step-8192-1700000000000000001"
    write_clip(api, job.tensorboard_cockpit, gif_of(write_mp4(job.clip_for(later), count=24)), step=8192,
               checkpoint=str(later))  # fmt: skip
    board = read_back(job.tensorboard_cockpit)
    assert VIDEO_TAG in board.Tags()["images"] and CHECKPOINT_TAG in board.Tags()["tensors"]
    images = board.Images(VIDEO_TAG)
    named = board.Tensors(CHECKPOINT_TAG)
    for image, text in zip(images, named, strict=True):
        with Image.open(io.BytesIO(image.encoded_image_string)) as gif:
            print(f"{VIDEO_TAG} step {image.step}: {gif.format} {image.width}x{image.height}, {gif.n_frames} frames; "
                  f"{CHECKPOINT_TAG}: {text.tensor_proto.string_val[0].decode()}")  # fmt: skip
    assert [image.step for image in images] == [4096, 8192] == [text.step for text in named]
    with Image.open(io.BytesIO(images[0].encoded_image_string)) as gif:
        # 48 frames at 24 fps, thinned to 12 fps: every other frame, moving as the clip's did.
        assert gif.format == "GIF" and gif.n_frames == 24 and (images[0].width, images[0].height) == (96, 64)
        first = np.asarray(gif.convert("RGB"))
        gif.seek(gif.n_frames - 1)
        assert not np.array_equal(first, np.asarray(gif.convert("RGB")))
    assert [text.tensor_proto.string_val[0].decode() for text in named] == [str(checkpoint), str(later)]


def test_a_small_gif_clip_goes_in_as_it_is_and_a_wide_one_scaled_down(tmp_path: Path) -> None:
    small = write_gif(tmp_path / "small.gif", count=10)
    assert gif_of(small).gif == small.read_bytes()
    wide = gif_of(small, max_width=48)  # and thinned from 24 fps to 12
    assert (wide.width, wide.height, wide.frames) == (48, 32, 5)


def test_a_clip_that_is_no_video_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"not a video")
    with pytest.raises(ValueError, match=r"broken.mp4: not a readable MP4"):
        gif_of(broken)
