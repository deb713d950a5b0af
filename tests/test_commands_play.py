"""`cockpit play` from its command line: a run's job played in a real player process, its returns
and clip printed; each bad input one line on stderr and exit 2 (no such job, a model failing its
checksum, an env that cannot render, whose returns still print)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.cli import main
from cockpit.commands.play import play
from cockpit.contract.checkpoint_files import META_FILE, MODEL_FILE
from cockpit.contract.events import EventWriter
from cockpit.contract.files import sha256_of
from cockpit.contract.rundir import RUN_TOML, RunDir
from tests.test_record_playable import write_job
from tests.test_training_custom_env import workdir  # noqa: F401  (a fixture)
from tests.test_training_play import save_model


def real_run(run_dir: Path, env: str, job: str = "0") -> Path:
    """A run directory with one job as its worker leaves it: a `started` event naming `env`, and a
    checkpoint holding an untrained PPO for it with its sums; the checkpoint."""
    job_dir = RunDir(run_dir).job(job).path
    checkpoint = job_dir / "checkpoints" / "step-000000004096-1"
    save_model(checkpoint, env)
    (checkpoint / META_FILE).write_text(
        json.dumps({"step": 4096, "files": {MODEL_FILE: sha256_of(checkpoint / MODEL_FILE)}})
    )
    EventWriter(job_dir / "events.jsonl").started(
        pid=1, device="cpu", config={"env": env, "preset": {"env_kwargs": {}}}
    )
    (run_dir / RUN_TOML).write_text("")
    return checkpoint


def cockpit_play(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cockpit", "play", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)  # fmt: skip


def test_a_jobs_model_plays_and_its_clip_is_described(tmp_path: Path) -> None:
    checkpoint = real_run(tmp_path / "run", "CartPole-v1").relative_to(tmp_path)  # as RUN_DIR was given
    done = cockpit_play(tmp_path, "run", "--episodes", "2", "--video", "clip.mp4", "--seed", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"Playing {checkpoint} on CartPole-v1 (deterministic, seed 3)"
    assert [line.split(":")[0] for line in lines[1:3]] == ["Episode 1/2", "Episode 2/2"]
    assert lines[3].startswith("Mean reward: ") and lines[3].endswith(" over 2 episode(s)")
    assert lines[4].startswith("Mean episode length: ")
    assert lines[5].startswith(f"Video: {tmp_path / 'clip.mp4'} (mp4, ") and "at 50 fps, 600x400, " in lines[5]
    assert lines[5].endswith(f"from {checkpoint}")
    assert (tmp_path / "clip.mp4").stat().st_size > 0


@pytest.mark.usefixtures("workdir")
def test_an_env_that_cannot_render_prints_its_returns_then_one_line(tmp_path: Path) -> None:
    work = Path.cwd()
    real_run(work / "run", "gridworld:GridWorld-v0")
    done = cockpit_play(work, "run", "--episodes", "2", "--video", "clip.mp4")
    assert done.returncode == 2
    assert "Mean reward: " in done.stdout and "Video:" not in done.stdout
    assert done.stderr == (
        "cockpit play: gridworld:GridWorld-v0 cannot render: its render modes are ['ansi'], and a clip needs "
        "'rgb_array'\n"
    )


def test_no_such_job_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "run" / "jobs" / "0").mkdir(parents=True)
    (tmp_path / "run" / "jobs" / "0" / "events.jsonl").write_text("")
    (tmp_path / "run" / RUN_TOML).write_text("")
    assert main(["play", str(tmp_path / "run"), "--job", "3"]) == 2
    err = capsys.readouterr().err
    assert err == f"cockpit play: --job 3: no such job in {tmp_path / 'run'} (its jobs: 0)\n"


def test_a_model_failing_its_checksum_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = tmp_path / "run" / "jobs" / "0" / "checkpoints" / "step-000000004096-1"
    checkpoint.mkdir(parents=True)
    (checkpoint / MODEL_FILE).write_bytes(b"a model")
    (checkpoint / META_FILE).write_text(json.dumps({"step": 4096, "files": {MODEL_FILE: "0" * 64}}))
    EventWriter(tmp_path / "run" / "jobs" / "0" / "events.jsonl").started(
        pid=1, device="cpu", config={"env": "CartPole-v1"}
    )
    (tmp_path / "run" / RUN_TOML).write_text("")
    assert main(["play", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err == f"cockpit play: checkpoint {checkpoint}: model.zip does not match the SHA-256 its worker recorded\n"


def test_a_video_that_is_neither_mp4_nor_gif_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["play", str(tmp_path), "--video", str(tmp_path / "a.webm")]) == 2
    assert capsys.readouterr().err.startswith(f"cockpit play: --video {tmp_path / 'a.webm'}: must end in .mp4 or .gif")


def test_a_max_width_below_the_players_minimum_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_job(tmp_path / "job")  # a model to find, so that only the width is wrong
    with pytest.raises(SystemExit) as exit_:
        main(["play", str(tmp_path / "job"), "--max-width", "8"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-width: expected a width in pixels, at least 16, got '8'" in err


def test_options_no_request_takes_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_job(tmp_path / "job")
    assert play(tmp_path / "job", options={"max_width": 8}) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", "cockpit play: --max-width 8: must be at least 16 pixels\n")
