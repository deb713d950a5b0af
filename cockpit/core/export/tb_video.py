"""A clip of a job playing, into the job's TensorBoard: `<job dir>/tb/cockpit/`, beside its scalars.

SB3's logger hands a `Video` to torch's `SummaryWriter.add_video`, which writes an image summary
(`Summary.Image`) whose encoded bytes are an animated GIF: TensorBoard's Images tab plays it. torch
never loads in the cockpit, so this writes the same proto with TensorBoard's own `RecordWriter`
(`tensorboard.tensorboard_api`, the one place the package is imported):

- `cockpit/video`: the clip as an animated GIF, at the step of the checkpoint it was recorded from;
- `cockpit/video/checkpoint`: a text summary at the same step naming that checkpoint (TensorBoard's
  Text tab), since an image summary carries no caption of its own.

The GIF is made from the recorded clip (`gif_of`): a GIF clip as it is, when it is small enough; an
MP4 decoded with imageio's ffmpeg, scaled down to `TB_MAX_WIDTH` and thinned to `TB_MAX_FPS`, then
encoded with Pillow, so an event file stays a few MB. Each clip goes into an event file of its own,
written whole and closed: clips come minutes apart, from a thread of their own, and must not share
the scalars' open file.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.core.export.tensorboard import TensorBoardApi

VIDEO_TAG = "cockpit/video"
CHECKPOINT_TAG = "cockpit/video/checkpoint"
TB_MAX_WIDTH = 320  # pixels: TensorBoard shows images at their size; a GIF of 600 px costs 4x the bytes
TB_MAX_FPS = 15.0  # GIF frame delays are in 10 ms steps, and half the frames look the same to a reader
TB_GIF_AS_IS_BYTES = 8 * 2**20
DT_STRING = 7  # tensorflow's DataType enum (types.proto), as TensorBoard's text summaries use


@dataclass(frozen=True)
class TbClip:
    """An animated GIF ready for an image summary: its bytes, width and height, and frame count."""

    gif: bytes
    width: int
    height: int
    frames: int


def gif_of(clip: Path, *, max_width: int = TB_MAX_WIDTH, max_fps: float = TB_MAX_FPS) -> TbClip:
    """The clip at `clip` (.mp4 or .gif) as an animated GIF for TensorBoard (see the module
    docstring). ValueError (one line) when the file cannot be read or decoded (an MP4 needs imageio
    and imageio-ffmpeg: `cockpit[video]`)."""
    from PIL import Image

    if clip.suffix.lower() == ".gif":
        try:
            data = clip.read_bytes()
            with Image.open(io.BytesIO(data)) as image:
                width, height, frames = image.width, image.height, getattr(image, "n_frames", 1)
        except OSError as exc:
            raise ValueError(f"{clip}: not a readable GIF ({exc})") from None
        if width <= max_width and len(data) <= TB_GIF_AS_IS_BYTES:
            return TbClip(data, width, height, frames)
        images, fps = _gif_frames(clip)
    else:
        images, fps = _mp4_frames(clip)
    if not images:
        raise ValueError(f"{clip}: no frames")
    step = max(1, round(fps / max_fps)) if fps > 0 else 1
    kept = images[::step]
    scale = min(1.0, max_width / kept[0].width)
    size = (max(1, round(kept[0].width * scale)), max(1, round(kept[0].height * scale)))
    kept = [image.resize(size) if scale < 1.0 else image for image in kept]
    out = io.BytesIO()
    delay = round(1000 * step / fps) if fps > 0 else 100
    kept[0].save(out, format="GIF", save_all=True, append_images=kept[1:], duration=delay, loop=0)
    return TbClip(out.getvalue(), size[0], size[1], len(kept))


def _gif_frames(clip: Path) -> tuple[list[Any], float]:
    from PIL import Image, ImageSequence

    with Image.open(clip) as image:
        delay = image.info.get("duration") or 100
        return [frame.convert("RGB") for frame in ImageSequence.Iterator(image)], 1000.0 / delay


def _mp4_frames(clip: Path) -> tuple[list[Any], float]:
    from PIL import Image

    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ValueError(f"{clip}: an MP4 is read with imageio: pip install 'cockpit[video]'") from None
    try:
        reader = imageio.get_reader(str(clip), format="FFMPEG")
        try:
            fps = float(reader.get_meta_data().get("fps") or 0.0)
            frames = [Image.fromarray(frame) for frame in reader.iter_data()]
        finally:
            reader.close()
    except (OSError, RuntimeError, ValueError) as exc:
        raise ValueError(f"{clip}: not a readable MP4 ({exc})") from None
    return frames, fps


def write_clip(api: TensorBoardApi, logdir: Path, clip: TbClip, *, step: int, checkpoint: str,
               wall_time: float | None = None) -> None:  # fmt: skip
    """Append `clip` to a new event file in `logdir` (a job's `tb/cockpit/`) as `VIDEO_TAG` at
    `step`, with `checkpoint` (what it was recorded from) as `CHECKPOINT_TAG`'s text at the same
    step. OSError when the file cannot be written."""
    summary = api.summary
    image = summary.Value(tag=VIDEO_TAG, image=summary.Image(height=clip.height, width=clip.width, colorspace=3,
                                                              encoded_image_string=clip.gif))  # fmt: skip
    text = summary.Value(tag=CHECKPOINT_TAG)
    text.metadata.plugin_data.plugin_name = "text"
    text.tensor.dtype = DT_STRING
    text.tensor.string_val.append(checkpoint.encode("utf-8"))
    event = api.event(wall_time=time.time() if wall_time is None else wall_time, step=step,
                      summary=summary(value=[image, text]))  # fmt: skip
    file = api.writer(str(logdir))
    try:
        file.add_event(event)
    finally:
        file.close()
