"""Writing a player's frames to a video file: MP4 (H.264) through imageio and the ffmpeg binary
imageio-ffmpeg ships, or GIF through Pillow where that ffmpeg is absent.

`ClipWriter` takes RGB frames (height × width × 3, uint8) one at a time, up to `max_seconds` of
video: those past the cap are dropped (the player's episodes still end, for their returns) and the cut is said
in the clip's note. Frames wider than `max_width` are scaled down, keeping their aspect, to even
sides (H.264's 4:2:0 chroma halves both). An MP4 streams to ffmpeg as it comes, so a long clip holds
no frames in memory; a GIF keeps each frame as a palette image (a byte a pixel) until it is written,
at no more than `GIF_MAX_FPS` (every second frame of a 50 fps env: browsers play a GIF's shorter
frame delays slower than asked, and each frame costs the file more than an MP4's). A file over
`max_bytes` is written again at half the size, up to `MAX_SHRINKS` times; one still over it is an
error (`ClipTooLarge`). Files are written under a temporary name and renamed into place.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from PIL import Image

GIF_MAX_FPS = 25.0
MAX_SHRINKS = 3
Format = Literal["mp4", "gif"]


class ClipTooLarge(ValueError):
    """The clip does not fit its size cap even at its smallest scale; the message names the cap."""


def ffmpeg_exe() -> str | None:
    """The ffmpeg binary imageio-ffmpeg ships (or the one it is pointed at, `IMAGEIO_FFMPEG_EXE`);
    None where imageio or imageio-ffmpeg is not installed, or it has no binary for this platform."""
    try:
        import imageio.v2  # noqa: F401  (the writer below; absent imageio means no MP4 either)
        import imageio_ffmpeg
    except ImportError:
        return None
    try:
        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except RuntimeError:  # no binary shipped for this platform and none on PATH
        return None


@dataclass(frozen=True)
class WrittenClip:
    """What `ClipWriter.close` wrote: the file, its format, frames, frame rate, size, and notes."""

    path: Path
    format: Format
    frames: int
    fps: float
    width: int
    height: int
    notes: tuple[str, ...]


def _even_size(width: int, height: int, max_width: int) -> tuple[int, int]:
    """The frame size to write: at most `max_width` wide, the aspect kept, both sides even."""
    if width > max_width:
        height, width = max(2, round(height * max_width / width)), max_width
    return width - width % 2, height - height % 2


class ClipWriter:
    """Frames to `path` as `fmt` at `fps`, at most `max_seconds` of them, at most `max_width` pixels
    wide, at most `max_bytes` of file (see the module's docstring)."""

    def __init__(
        self,
        path: Path,
        fmt: Format,
        *,
        fps: float,
        max_seconds: float,
        max_width: int,
        max_bytes: int,
        ffmpeg: str | None,
    ) -> None:
        self.path, self.format, self.max_width, self.max_bytes, self.ffmpeg = path, fmt, max_width, max_bytes, ffmpeg
        self.max_seconds = max_seconds
        self.step = max(1, math.ceil(fps / GIF_MAX_FPS)) if fmt == "gif" else 1
        self.fps = fps / self.step
        self.max_frames = max(1, math.floor(max_seconds * self.fps))
        self.cut = False  # a frame was dropped at the cap
        self.offered = 0  # every frame given, the dropped ones too
        self.written = 0
        self.size: tuple[int, int] | None = None
        self._tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.{fmt}")
        self._gif: list[Image.Image] = []
        self._mp4: Any = None

    @property
    def full(self) -> bool:
        """Whether the clip holds `max_frames` frames: the caller may stop rendering."""
        return self.written >= self.max_frames

    def add(self, frame: np.ndarray) -> None:
        """Take one RGB frame (dropped when the clip is full, or skipped by a GIF's frame step)."""
        self.offer(lambda: frame)

    def offer(self, render: Callable[[], np.ndarray]) -> None:
        """`add(render())`, calling `render` only for a frame the clip keeps: a frame past the cap or
        between a GIF's kept ones costs no drawing."""
        self.offered += 1
        if (self.offered - 1) % self.step:
            return
        if self.full:
            self.cut = True
            return
        frame = render()
        if self.size is None:
            self.size = _even_size(frame.shape[1], frame.shape[0], self.max_width)
        image = Image.fromarray(np.ascontiguousarray(frame[..., :3], dtype=np.uint8))
        if image.size != self.size:
            image = image.resize(self.size, Image.Resampling.BILINEAR)
        if self.format == "gif":
            self._gif.append(image.quantize(colors=256, method=Image.Quantize.MEDIANCUT))
        else:
            self._mp4_writer().append_data(np.asarray(image))
        self.written += 1

    def _mp4_writer(self) -> Any:
        if self._mp4 is None:
            import imageio.v2 as imageio

            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._mp4 = imageio.get_writer(
                str(self._tmp),
                format="FFMPEG",  # type: ignore[arg-type]  # imageio's stubs list fewer names than it takes
                mode="I",
                fps=self.fps,
                codec="libx264",
                pixelformat="yuv420p",
                macro_block_size=2,  # the sides are even already: no rescaling to multiples of 16
                ffmpeg_log_level="error",
            )
        return self._mp4

    def close(self) -> WrittenClip:
        """Write the file (nothing when no frame came: ValueError) and rename it into place;
        ClipTooLarge when it cannot be made to fit `max_bytes`."""
        if not self.written or self.size is None:
            raise ValueError("no frame was rendered")
        try:
            if self.format == "gif":
                self._write_gif(self._gif)
            else:
                self._mp4.close()
            notes, width, height = self._fit()
            os.replace(self._tmp, self.path)
        finally:
            self._tmp.unlink(missing_ok=True)
        return WrittenClip(self.path, self.format, self.written, self.fps, width, height, notes)

    def discard(self) -> None:
        """Drop the clip (playing failed): close the MP4 writer and remove its temp file, which would
        otherwise stay beside the clips, half written."""
        if self._mp4 is not None:
            with contextlib.suppress(Exception):  # the failure that matters is the caller's
                self._mp4.close()
            self._mp4 = None
        self._tmp.unlink(missing_ok=True)

    def _write_gif(self, frames: list[Image.Image]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        duration = round(1000 / self.fps)
        frames[0].save(self._tmp, format="GIF", save_all=True, append_images=frames[1:], duration=duration, loop=0)

    def _fit(self) -> tuple[tuple[str, ...], int, int]:
        """Shrink the written file by halves until it fits `max_bytes`; the notes and final size."""
        assert self.size is not None
        width, height = self.size
        notes: list[str] = []
        shrinks = 0
        while self._tmp.stat().st_size > self.max_bytes:
            if shrinks == MAX_SHRINKS or min(width, height) < 32:
                raise ClipTooLarge(
                    f"{self.path}: {self._tmp.stat().st_size / 1e6:.1f} MB at {width}x{height}, over the "
                    f"{self.max_bytes / 1e6:g} MB cap (--max-mb) even at 1/{2**shrinks} scale"
                )
            width, height = _even_size(width // 2, height // 2, width)
            shrinks += 1
            self._shrink(width, height)
        if self.cut:
            notes.append(f"cut at {self.max_seconds:g} s (--max-seconds)")
        if shrinks:
            notes.append(f"scaled to {width}x{height} to fit {self.max_bytes / 1e6:g} MB (--max-mb)")
        return tuple(notes), width, height

    def _shrink(self, width: int, height: int) -> None:
        if self.format == "gif":
            self._write_gif([frame.resize((width, height), Image.Resampling.NEAREST) for frame in self._gif])
            return
        assert self.ffmpeg is not None
        smaller = self._tmp.with_name(self._tmp.name + ".small.mp4")
        try:
            subprocess.run(
                [
                    *(self.ffmpeg, "-y", "-loglevel", "error", "-i", str(self._tmp), "-vf", f"scale={width}:{height}"),
                    *("-c:v", "libx264", "-pix_fmt", "yuv420p", str(smaller)),
                ],
                check=True,
                stdin=subprocess.DEVNULL,
                capture_output=True,
            )
            os.replace(smaller, self._tmp)
        finally:
            with contextlib.suppress(FileNotFoundError):
                smaller.unlink()
