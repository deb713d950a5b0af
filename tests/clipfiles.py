"""Clip files for tests, made as the recorder makes them: an MP4 (H.264, yuv420p) through imageio
with the ffmpeg binary imageio-ffmpeg ships, a GIF through Pillow. Each frame shows a white square
moving across a dark field, so a clip that decodes has frames that differ."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def frames(count: int = 24, width: int = 96, height: int = 64) -> list[np.ndarray]:
    """`count` RGB frames of a square moving left to right."""
    out = []
    for i in range(count):
        frame = np.full((height, width, 3), 30, dtype=np.uint8)
        x = (i * (width - 16)) // max(count - 1, 1)
        frame[24:40, x : x + 16] = 255
        out.append(frame)
    return out


def write_mp4(path: Path, count: int = 24, fps: int = 24) -> Path:
    """An H.264 MP4 of `frames(count)` at `fps`."""
    import imageio.v2 as imageio

    path.parent.mkdir(parents=True, exist_ok=True)
    writer = imageio.get_writer(str(path), fps=fps, codec="libx264", pixelformat="yuv420p", macro_block_size=16)
    for frame in frames(count):
        writer.append_data(frame)
    writer.close()
    return path


def write_gif(path: Path, count: int = 24, fps: int = 24) -> Path:
    """An animated GIF of `frames(count)` at `fps`, looping."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    images = [Image.fromarray(frame) for frame in frames(count)]
    images[0].save(path, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
    return path
