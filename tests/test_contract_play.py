"""The player's contract: a request survives its trip through argv, a result through its JSON, and
an episode through its progress line; bad ones are refused in one line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cockpit.contract.play import (
    Clip,
    EpisodeDone,
    PlayRequest,
    PlayResult,
    episode_line,
    parse_episode_line,
    video_format,
)
from cockpit.core.launch.player import read_result


def _request(**changes: object) -> PlayRequest:
    base: dict[str, object] = {
        "model": Path("/runs/r/jobs/0/checkpoints/step-1/model.zip"),
        "env": "Pong-v5",
        "result": Path("/tmp/out/play.json"),
        "vecnormalize": Path("/runs/r/jobs/0/checkpoints/step-1/vecnormalize.pkl"),
        "env_kwargs": {"stack_num": 2, "img_height": 64},
        "episodes": 3,
        "deterministic": False,
        "seed": 7,
        "video": Path("/tmp/out/clip.gif"),
        "max_seconds": 12.5,
        "max_mb": 3.0,
        "max_width": 320,
        "source": "/runs/r/jobs/0/checkpoints/step-1",
    }
    base.update(changes)
    return PlayRequest(**base)  # type: ignore[arg-type]


def test_request_round_trips_through_argv() -> None:
    request = _request()
    assert PlayRequest.parse(request.to_argv()) == request
    plain = PlayRequest(model=Path("m.zip"), env="CartPole-v1", result=Path("r.json"))
    assert PlayRequest.parse(plain.to_argv()) == plain


def test_bad_request_flags_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = list(_request().to_argv())
    for flag, value, said in (
        ("--video", "clip.avi", "must end in .mp4 or .gif"),
        ("--env-kwargs", "[1]", "--env-kwargs: expected a JSON object"),
        ("--episodes", "0", "--episodes: expected a positive integer"),
    ):
        bad = [*argv, flag, value]
        with pytest.raises(SystemExit) as exit_:
            PlayRequest.parse(bad)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err


def test_result_round_trips_and_summarizes(tmp_path: Path) -> None:
    clip = Clip(
        path=tmp_path / "c.mp4",
        format="mp4",
        frames=300,
        seconds=6.0,
        fps=50.0,
        width=600,
        height=400,
        bytes=123_456,
        sha256="ab" * 32,
        checkpoint="jobs/0/checkpoints/step-1",
        note="",
    )
    result = PlayResult(env="LunarLander-v3", deterministic=True, returns=(1.0, 3.0), lengths=(10, 30), clip=clip)
    result.write(tmp_path / "r.json")
    back = read_result(tmp_path / "r.json")
    assert back == result
    assert (back.mean_return, back.std_return, back.mean_length, back.std_length) == (2.0, 1.0, 20.0, 10.0)
    assert math.isnan(PlayResult(env="x", deterministic=True).mean_return)


def test_read_result_names_the_file_when_missing_or_bad(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"r\.json: no play result"):
        read_result(tmp_path / "r.json")
    (tmp_path / "r.json").write_text('{"env": "x"}')
    with pytest.raises(ValueError, match=r"r\.json: not a play result"):
        read_result(tmp_path / "r.json")


def test_episode_lines_round_trip_and_other_lines_are_not_episodes() -> None:
    done = EpisodeDone(index=2, episodes=5, ret=-21.0, length=764)
    assert parse_episode_line(episode_line(done)) == done
    assert parse_episode_line("A.L.E: Arcade Learning Environment") is None
    assert parse_episode_line("play-episode {broken") is None


def test_video_format_is_read_from_the_suffix() -> None:
    assert video_format(Path("a.MP4")) == "mp4"
    assert video_format(Path("a.gif")) == "gif"
    assert video_format(Path("a.webm")) is None


@pytest.mark.parametrize(
    ("flag", "field", "lowest", "below"),
    [
        ("--max-width", "max_width", "16", "15"),
        ("--episodes", "episodes", "1", "0"),
        ("--seed", "seed", "0", "-1"),
        ("--max-seconds", "max_seconds", "1e-9", "0"),
        ("--max-mb", "max_mb", "1e-9", "0"),
    ],
)
def test_cockpit_plays_flags_take_what_a_request_takes(flag: str, field: str, lowest: str, below: str) -> None:
    """`cockpit play`'s argparse types and `PlayRequest`'s checks draw the same line: a value the
    flag takes builds a request, and one the request refuses is refused by the flag."""
    from cockpit.cli import build_parser

    parser = build_parser()
    taken = getattr(parser.parse_args(["play", "run", flag, lowest]), field)
    assert getattr(_request(**{field: taken}), field) == taken
    with pytest.raises(ValueError, match=f"^{flag} "):
        _request(**{field: type(taken)(below)})
    with pytest.raises(SystemExit):
        parser.parse_args(["play", "run", flag, below])
