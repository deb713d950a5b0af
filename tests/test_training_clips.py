"""Video files (`cockpit_training.clips`): an MP4 read back with imageio's own ffmpeg reader is H.264
at the frame rate asked, a GIF read back with Pillow has its frames and delays, and the caps hold:
seconds (later frames dropped, said), width (scaled down, aspect kept, sides even), bytes (written
again smaller, said; refused in one line when nothing fits)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cockpit_training.clips import ClipTooLarge, ClipWriter, ffmpeg_exe


def _frames(n: int, height: int = 100, width: int = 150) -> list[np.ndarray]:
    """Frames with noise, so a codec cannot make them nothing: a moving bar over a random field."""
    rng = np.random.default_rng(0)
    frames = []
    for i in range(n):
        frame = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
        frame[:, (i * 3) % width] = 255
        frames.append(frame)
    return frames


def _writer(path: Path, fmt: str, **caps: object) -> ClipWriter:
    options: dict[str, object] = {"fps": 50.0, "max_seconds": 30.0, "max_width": 640, "max_bytes": 50_000_000}
    options.update(caps)
    return ClipWriter(path, fmt, ffmpeg=ffmpeg_exe(), **options)  # type: ignore[arg-type]


def _probe(path: Path) -> str:
    exe = ffmpeg_exe()
    assert exe is not None
    return subprocess.run([exe, "-hide_banner", "-i", str(path)], capture_output=True, text=True).stderr


def test_an_mp4_is_h264_at_the_envs_frame_rate_and_stops_at_its_seconds(tmp_path: Path) -> None:
    import imageio.v2 as imageio

    writer = _writer(tmp_path / "c.mp4", "mp4", max_seconds=1.0)
    for frame in _frames(80):
        writer.add(frame)
    clip = writer.close()
    assert (clip.frames, clip.fps, clip.width, clip.height) == (50, 50.0, 150, 100)
    assert clip.notes == ("cut at 1 s (--max-seconds)",)
    reader = imageio.get_reader(str(clip.path))
    assert reader.count_frames() == 50 and reader.get_meta_data()["fps"] == 50.0
    assert "Video: h264" in _probe(clip.path)
    assert not list(tmp_path.glob(".*tmp*"))  # written under a temporary name, renamed into place


def test_wide_frames_are_scaled_to_the_width_cap_with_even_sides(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "c.mp4", "mp4", max_width=101)
    for frame in _frames(5, height=75, width=303):
        writer.add(frame)
    clip = writer.close()
    assert (clip.width, clip.height) == (100, 24)
    assert "100x24" in _probe(clip.path)


def test_a_gif_keeps_its_frames_at_no_more_than_25_fps(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "c.gif", "gif")
    for frame in _frames(20):
        writer.add(frame)
    clip = writer.close()
    assert (clip.frames, clip.fps) == (10, 25.0)  # every second frame of a 50 fps env
    with Image.open(clip.path) as gif:
        assert gif.n_frames == 10 and gif.info["duration"] == 40 and gif.size == (150, 100)


def test_a_clip_over_its_size_cap_is_written_again_smaller_or_refused(tmp_path: Path) -> None:
    frames = _frames(25, height=200, width=300)
    big = _writer(tmp_path / "big.mp4", "mp4")
    for frame in frames:
        big.add(frame)
    size = big.close().path.stat().st_size
    cap = size // 2
    writer = _writer(tmp_path / "c.mp4", "mp4", max_bytes=cap)
    for frame in frames:
        writer.add(frame)
    clip = writer.close()
    assert clip.path.stat().st_size <= cap and clip.width < 300
    assert clip.notes[-1].startswith(f"scaled to {clip.width}x{clip.height} to fit")
    tiny = _writer(tmp_path / "t.gif", "gif", max_bytes=100)
    for frame in frames:
        tiny.add(frame)
    with pytest.raises(ClipTooLarge, match=r"t\.gif: .* over the 0\.0001 MB cap \(--max-mb\) even at 1/"):
        tiny.close()
    assert not (tmp_path / "t.gif").exists()
