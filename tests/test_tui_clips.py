"""The cockpit's clip key (`c`): on the selected job it records a clip of the job's newest checkpoint
in the background, through the real player (`python -m cockpit_training.play`, niced), and says
where the clip goes and then where it went. The run is a real CartPole run's directory; the screen
is fed a scripted frame of it (`tests.tui_fakes`), as the other Pilot tests are."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import small_preset_text
from cockpit.contract.checkpoint_files import META_FILE, MODEL_FILE, newest_checkpoint
from cockpit.contract.events import EventWriter
from cockpit.contract.rundir import RunDir
from cockpit.views.tui.app import make_app
from tests.tui_fakes import ScriptedSource, frame

SIZE = (100, 30)


def frame_of(run_dir: Path, jobs: int = 1) -> ScriptedSource:
    scripted = frame(jobs=jobs)
    return ScriptedSource(dataclasses.replace(scripted, state=dataclasses.replace(scripted.state,
                                                                                  run_dir=str(run_dir))))  # fmt: skip


async def test_the_clip_key_on_a_job_without_a_checkpoint_says_so(tmp_path: Path) -> None:
    files = RunDir(tmp_path).job("000")
    files.path.mkdir(parents=True)
    EventWriter(files.events).started(pid=1, device="cpu", config={"env": "CartPole-v1"})
    app = make_app(frame_of(tmp_path))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        await pilot.press("c")
        await pilot.pause()
        (notice,) = [n.message for n in app._notifications]
        assert notice.startswith(f"{files.path}: no checkpoint yet"), notice
    assert not files.videos.exists()


async def test_the_clip_key_checks_the_checkpoint_in_the_background_and_says_why_no_clip_came(tmp_path: Path) -> None:
    files = RunDir(tmp_path).job("000")
    files.path.mkdir(parents=True)
    EventWriter(files.events).started(pid=1, device="cpu", config={"env": "CartPole-v1"})
    corrupt = files.checkpoints / "step-000000004096-1800000000000004096"
    corrupt.mkdir(parents=True)
    (corrupt / MODEL_FILE).write_bytes(b"not what the worker wrote")
    (corrupt / META_FILE).write_text(json.dumps({"step": 4096, "files": {MODEL_FILE: "0" * 64}}))
    app = make_app(frame_of(tmp_path))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        await pilot.press("c")  # reads no more than the checkpoints' listing here
        await pilot.pause()
        seen = [n.message for n in app._notifications]
        assert seen == [f"job 000: recording a clip of {corrupt.name} in the background, to {files.clip_for(corrupt)}"]
        for _ in range(600):  # the recorder's thread checks the sums; the screen looks each second
            await asyncio.sleep(0.1)
            seen += [n.message for n in app._notifications if n.message not in seen]
            if len(seen) > 1:
                break
        assert seen[1] == (f"clip of job 000 from {corrupt.name} not recorded: checkpoint {corrupt}: model.zip does "
                           "not match the SHA-256 its worker recorded")  # fmt: skip
    assert not files.videos.exists()


@pytest.mark.slow
async def test_the_clip_key_records_the_selected_jobs_newest_checkpoint_and_says_where_it_went(tmp_path: Path) -> None:
    preset = tmp_path / "quick.toml"
    preset.write_text(small_preset_text(checkpoint_every=1024, timesteps=2048))
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "cockpit", "run", "--preset", str(preset), "--agents", "2", "--jobs",
                           "2", "--run-dir", str(run_dir), "--headless"], capture_output=True, text=True, timeout=300,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]
    files = RunDir(run_dir).job("001")
    checkpoint = newest_checkpoint(files.checkpoints)
    assert checkpoint is not None
    clip = files.clip_for(checkpoint)
    app = make_app(frame_of(run_dir, jobs=2))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        await pilot.press("down", "c")  # job 001
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert messages == [f"job 001: recording a clip of {checkpoint.name} in the background, to {clip}"]
        seen = list(messages)  # a notification leaves the screen after its timeout: keep what was shown
        for _ in range(1800):  # the player imports torch and plays an episode: up to 3 minutes here
            await asyncio.sleep(0.1)
            seen += [n.message for n in app._notifications if n.message not in seen]
            if len(seen) > 1:
                break
        print(seen[-1])
        assert seen[-1].startswith(f"clip of job 001 from {checkpoint.name}: {clip}, "), seen
    assert clip.is_file() and clip.stat().st_size > 0
    assert not RunDir(run_dir).job("000").videos.exists()
