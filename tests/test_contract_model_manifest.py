"""models.toml names files inside models/ only, and a copy into it is held to its checkpoint's own sums."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cockpit.contract.files import sha256_of
from cockpit.contract.model_manifest import (
    MODELS_DIR,
    ModelEntry,
    copy_atomic,
    read_manifest,
    verify,
    with_video,
    write_manifest,
)


def _entry(file: str = "a0003.zip", vecnormalize: str | None = None) -> ModelEntry:
    return ModelEntry("a0003", file, "0" * 64, "CartPole-v1", "cartpole", 3, 500.0, 8192, vecnormalize=vecnormalize)


def test_plain_file_names_are_read_back(tmp_path: Path) -> None:
    (tmp_path / MODELS_DIR).mkdir()
    entries = [_entry(), _entry("a0001.zip", "a0001.vecnormalize.pkl")]
    write_manifest(tmp_path, "screen", entries)
    assert read_manifest(tmp_path) == entries


@pytest.mark.parametrize("name", ["../x.zip", "/etc/passwd", "sub/a0003.zip", "..", ".", "", "a\\b.zip"])
@pytest.mark.parametrize("key", ["file", "vecnormalize", "video"])
def test_a_file_entry_that_is_no_plain_name_is_refused_in_one_line_naming_the_entry(
    tmp_path: Path, key: str, name: str
) -> None:
    (tmp_path / MODELS_DIR).mkdir()
    entry = _entry(file=name) if key == "file" else _entry(vecnormalize=name)
    entry = replace(_entry(), video=name) if key == "video" else entry
    write_manifest(tmp_path, "screen", [entry])
    with pytest.raises(ValueError) as raised:
        read_manifest(tmp_path)
    message = str(raised.value)
    assert message == (f"{tmp_path / MODELS_DIR / 'models.toml'}: model 'a0003': {key} = {name!r} is not a plain "
                       f"file name in {MODELS_DIR}/ (no '/', no '..'; e.g. 'a0003.zip')")  # fmt: skip
    assert "\n" not in message


def test_a_copy_that_does_not_match_its_recorded_sum_is_removed_and_never_hashed_afresh(tmp_path: Path) -> None:
    source = tmp_path / "model.zip"
    source.write_bytes(b"the model")
    recorded = sha256_of(source)
    target = tmp_path / "a0003.zip"
    assert copy_atomic(source, target, recorded) == recorded and target.read_bytes() == b"the model"
    source.write_bytes(b"bit rot")
    target.unlink()
    with pytest.raises(ValueError, match=rf"^{source} does not match the SHA-256 its checkpoint recorded$"):
        copy_atomic(source, target, recorded)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.zip"]  # no copy, no temp file


def test_a_models_clip_is_listed_with_its_sha256_and_one_outside_models_is_refused(tmp_path: Path) -> None:
    models = tmp_path / MODELS_DIR
    models.mkdir()
    (models / "a0003.zip").write_bytes(b"model")
    entry = replace(_entry(), sha256=sha256_of(models / "a0003.zip"))
    write_manifest(tmp_path, "screen", [entry, replace(entry, agent="a0001", file="a0001.zip")])
    (models / "a0001.zip").write_bytes(b"model")
    clip = models / "a0003.mp4"
    clip.write_bytes(b"a clip")
    assert with_video(tmp_path, "screen", "a0003", clip) == replace(entry, video="a0003.mp4",
                                                                     video_sha256=sha256_of(clip))  # fmt: skip
    first, second = read_manifest(tmp_path)
    assert (first.video, first.video_sha256, second.video) == ("a0003.mp4", sha256_of(clip), None)
    assert verify(tmp_path, [first]) == []
    outside = tmp_path / "a0003.mp4"
    outside.write_bytes(b"a clip")
    with pytest.raises(ValueError, match=r"a0003.mp4: a model's clip is a file directly in"):
        with_video(tmp_path, "screen", "a0003", outside)
    with pytest.raises(ValueError, match=r"no model of agent 'a9999' to give a clip"):
        with_video(tmp_path, "screen", "a9999", clip)
