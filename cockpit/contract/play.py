"""Playing a trained agent in a process of its own: what to play (`PlayRequest`), what came of it
(`PlayResult`, with its `Clip`), and the progress lines between the two.

`cockpit play`, a fleet's clips and a run's `--video-every` all play the same way: the cockpit
builds a `PlayRequest` and starts `python -m cockpit_training.play` with its argv (`to_argv`; the
player reads it back with `PlayRequest.parse`), niced, in its own process group
(`cockpit.core.launch.player`). The player loads the model with its VecNormalize statistics frozen
(`training=False`, `norm_reward=False`, as SB3's `evaluate_policy` expects), plays `episodes`
episodes on the job's env built with the job's own `env_kwargs`, records them to `video` when it is
given, and writes a `PlayResult` as JSON to `result`, atomically (`files.write_atomic`), whatever
happened: the returns and lengths of the episodes it played, the clip, or the one-line `error` that
kept it from making one. Meanwhile it prints one `EPISODE_PREFIX` line per finished episode on its
stdout (`episode_line`, `parse_episode_line`): the command's progress.

Exit codes: 0 played (and recorded, when asked); 2 bad input, the message in `error` and on stderr
(a model that does not load, an env that cannot render: the returns are still in the result when
the episodes could be played); 1 anything else.

The clip's caps: `max_seconds` of video (frames past it are not recorded: the episodes still play
to their end for the returns), `max_width` pixels (wider frames are scaled down, keeping their
aspect), and `max_mb` of file (a file over it is written again at a smaller scale, and the one
that still does not fit is an error). MP4 (H.264) needs imageio with imageio-ffmpeg's ffmpeg; GIF
is written with Pillow, and a `.mp4` asked for where ffmpeg is absent becomes a `.gif` beside it,
said in the clip's `note`, never a failure.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from cockpit.contract.arguments import ArgumentParser, int_at_least, non_negative_int, positive_float, positive_int
from cockpit.contract.files import write_atomic

PLAY_MODULE = "cockpit_training.play"
BAD_INPUT_EXIT = 2
VideoFormat = Literal["mp4", "gif"]
VIDEO_FORMATS: tuple[VideoFormat, ...] = ("mp4", "gif")

DEFAULT_EPISODES = 5  # rl-zoo3's enjoy plays until stopped; five gives a mean and a spread
DEFAULT_SEED = 0
DEFAULT_MAX_SECONDS = 30.0  # of video: a clip to watch, not a recording of a whole Atari game
DEFAULT_MAX_MB = 20.0  # of file: small enough to embed in a page or a TensorBoard event file
DEFAULT_MAX_WIDTH = 640  # pixels: LunarLander's 600 as it is; wider renders scaled down
MIN_MAX_WIDTH = 16  # pixels: H.264 codes 16x16 macroblocks, and a narrower clip shows nothing
max_width_px = int_at_least(MIN_MAX_WIDTH, f"a width in pixels, at least {MIN_MAX_WIDTH}")
"""argparse type of `--max-width`, `cockpit play`'s and the player's: `PlayRequest`'s own minimum."""
EPISODE_PREFIX = "play-episode "
VIDEO_EXTRA = "cockpit[video]"  # the extra that installs what recording needs, named in errors


def video_format(path: Path) -> VideoFormat | None:
    """The format a video path asks for by its suffix (`.mp4`, `.gif`, any case); None for others."""
    suffix = path.suffix.lower().lstrip(".")
    return "mp4" if suffix == "mp4" else "gif" if suffix == "gif" else None


@dataclass(frozen=True)
class PlayRequest:
    """What to play: the model (`model.zip`, SB3's format) and its VecNormalize statistics (None
    when it did not normalize), the env id and the preset's `env_kwargs` the job trained with,
    `episodes` episodes seeded from `seed`, deterministic actions or sampled ones, and where the
    clip (`video`, None for none; `.mp4` or `.gif`) and the result's JSON (`result`) go. `source`
    names what the model came from (a checkpoint directory, a `models/` file), for the clip's
    record. `device` is torch's for the policy: the CPU unless told (a player must never take a
    GPU's memory from training)."""

    model: Path
    env: str
    result: Path
    vecnormalize: Path | None = None
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    episodes: int = DEFAULT_EPISODES
    deterministic: bool = True
    seed: int = DEFAULT_SEED
    video: Path | None = None
    max_seconds: float = DEFAULT_MAX_SECONDS
    max_mb: float = DEFAULT_MAX_MB
    max_width: int = DEFAULT_MAX_WIDTH
    source: str = ""
    device: str = "cpu"

    def __post_init__(self) -> None:
        # The same bounds as the flags' argparse types (build_parser, cockpit.cli): a value the
        # flags take must build a request, or `cockpit play` would fail past its argument checks.
        if self.episodes < 1:
            raise ValueError(f"--episodes {self.episodes}: must be at least 1")
        if self.seed < 0:
            raise ValueError(f"--seed {self.seed}: must be an integer >= 0")
        if self.video is not None and video_format(self.video) is None:
            raise ValueError(f"--video {self.video}: must end in .mp4 or .gif")
        for flag, value in (("--max-seconds", self.max_seconds), ("--max-mb", self.max_mb)):
            if not 0 < value < math.inf:  # also refuses nan, as positive_float does
                raise ValueError(f"{flag} {value}: must be a positive number")
        if self.max_width < MIN_MAX_WIDTH:
            raise ValueError(f"--max-width {self.max_width}: must be at least {MIN_MAX_WIDTH} pixels")

    def to_argv(self) -> tuple[str, ...]:
        """The flags after `python -m cockpit_training.play`; `parse(to_argv())` gives this back."""
        argv = ["--model", str(self.model), "--env", self.env, "--result", str(self.result)]
        if self.vecnormalize is not None:
            argv += ["--vecnormalize", str(self.vecnormalize)]
        if self.env_kwargs:
            argv += ["--env-kwargs", json.dumps(dict(self.env_kwargs), sort_keys=True)]
        argv += ["--episodes", str(self.episodes), "--seed", str(self.seed)]
        argv.append("--deterministic" if self.deterministic else "--stochastic")
        if self.video is not None:
            argv += ["--video", str(self.video)]
        argv += ["--max-seconds", repr(self.max_seconds), "--max-mb", repr(self.max_mb)]
        argv += ["--max-width", str(self.max_width), "--source", self.source, "--device", self.device]
        return tuple(argv)

    def command(self, python: str) -> list[str]:
        """The whole command line that plays this request with the interpreter `python`."""
        return [python, "-m", PLAY_MODULE, *self.to_argv()]

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None) -> PlayRequest:
        """The request from the player's argv (sys.argv[1:] when None); bad input prints one line
        naming the flag and exits 2."""
        parser = build_parser()
        ns = parser.parse_args(None if argv is None else list(argv))
        try:
            kwargs = json.loads(ns.env_kwargs)
        except ValueError:
            kwargs = None
        if not isinstance(kwargs, dict):
            parser.error(f"argument --env-kwargs: expected a JSON object, got {ns.env_kwargs!r}")
        try:
            return cls(
                model=ns.model,
                env=ns.env,
                result=ns.result,
                vecnormalize=ns.vecnormalize,
                env_kwargs=kwargs,
                episodes=ns.episodes,
                deterministic=ns.deterministic,
                seed=ns.seed,
                video=ns.video,
                max_seconds=ns.max_seconds,
                max_mb=ns.max_mb,
                max_width=ns.max_width,
                source=ns.source,
                device=ns.device,
            )
        except ValueError as exc:
            parser.error(str(exc))


def build_parser() -> ArgumentParser:
    """The player's command line, with its help."""
    parser = ArgumentParser(
        prog=f"python -m {PLAY_MODULE}",
        description="Play a trained PPO model on its env, frozen as SB3's evaluate_policy does, "
        "and write the returns (and a clip) as JSON to --result.",
    )
    parser.add_argument("--model", type=Path, required=True, help="the model.zip (SB3's format)")
    parser.add_argument("--env", required=True, help="the env id the model trained on")
    parser.add_argument("--result", type=Path, required=True, help="where the result's JSON goes (written atomically)")
    parser.add_argument("--vecnormalize", type=Path, help="the model's VecNormalize statistics (.pkl)")
    parser.add_argument("--env-kwargs", default="{}", help="the preset's env_kwargs, as a JSON object")
    add_play_options(parser)
    parser.add_argument("--source", default="", help="what the model came from, for the clip's record")
    parser.add_argument("--device", default="cpu", help="torch's device for the policy (default: cpu)")
    return parser


def add_play_options(parser: ArgumentParser) -> None:
    """The options `cockpit play` and the player both take (episodes, actions, seed, the clip and
    its caps), declared once so their types and defaults are `PlayRequest`'s on both sides."""
    parser.add_argument("--episodes", type=positive_int, default=DEFAULT_EPISODES, metavar="N")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--deterministic",
        dest="deterministic",
        action="store_true",
        default=True,
        help="the likeliest action (default)",
    )
    mode.add_argument(
        "--stochastic", dest="deterministic", action="store_false", help="actions sampled from the policy"
    )
    parser.add_argument("--video", type=Path, metavar="OUT.mp4|OUT.gif", help="record the episodes to this file")
    parser.add_argument("--seed", type=non_negative_int, default=DEFAULT_SEED, metavar="S", help="the env's seed")
    parser.add_argument(
        "--max-seconds",
        type=positive_float,
        default=DEFAULT_MAX_SECONDS,
        metavar="S",
        help="the clip's length cap; later frames are not recorded (default: %(default)g)",
    )
    parser.add_argument(
        "--max-mb",
        type=positive_float,
        default=DEFAULT_MAX_MB,
        metavar="MB",
        help="the clip's file size cap; a larger clip is scaled down to fit (default: %(default)g)",
    )
    parser.add_argument(
        "--max-width",
        type=max_width_px,
        default=DEFAULT_MAX_WIDTH,
        metavar="PX",
        help="wider frames are scaled down to it (default: %(default)d)",
    )


@dataclass(frozen=True)
class Clip:
    """A recorded video file: where it is, its format, how many frames over how many seconds at
    which frame rate, its frame size, its size in bytes and SHA-256, the checkpoint or model file
    it was played from, and a note on what was done other than asked ("ffmpeg absent: GIF")."""

    path: Path
    format: VideoFormat
    frames: int
    seconds: float
    fps: float
    width: int
    height: int
    bytes: int
    sha256: str
    checkpoint: str
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The clip as JSON takes it."""
        return {**asdict(self), "path": str(self.path)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Clip:
        """The clip from `as_dict`'s form; ValueError (one line) when a field is missing or wrong."""
        try:
            fmt = str(data["format"])
            if fmt not in VIDEO_FORMATS:
                raise ValueError(f"format {fmt!r}")
            return cls(
                path=Path(str(data["path"])),
                format="mp4" if fmt == "mp4" else "gif",
                frames=int(data["frames"]),
                seconds=float(data["seconds"]),
                fps=float(data["fps"]),
                width=int(data["width"]),
                height=int(data["height"]),
                bytes=int(data["bytes"]),
                sha256=str(data["sha256"]),
                checkpoint=str(data["checkpoint"]),
                note=str(data.get("note", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a clip record ({exc})") from None


@dataclass(frozen=True)
class PlayResult:
    """What a player did: each played episode's return and length, in the order they ended, the
    clip when one was recorded, and the one-line `error` that ended it short (None when nothing
    did). `env` and `deterministic` repeat the request's, for the report."""

    env: str
    deterministic: bool
    returns: tuple[float, ...] = ()
    lengths: tuple[int, ...] = ()
    clip: Clip | None = None
    error: str | None = None

    @property
    def mean_return(self) -> float:
        """The mean return; NaN with no episode."""
        return statistics.fmean(self.returns) if self.returns else math.nan

    @property
    def std_return(self) -> float:
        """The returns' population standard deviation, as numpy's and rl-zoo3's; NaN with none."""
        return statistics.pstdev(self.returns) if self.returns else math.nan

    @property
    def mean_length(self) -> float:
        """The mean episode length in steps; NaN with no episode."""
        return statistics.fmean(self.lengths) if self.lengths else math.nan

    @property
    def std_length(self) -> float:
        """The lengths' population standard deviation; NaN with none."""
        return statistics.pstdev(self.lengths) if self.lengths else math.nan

    def to_json(self) -> str:
        """The result as the player writes it."""
        data = {
            "env": self.env,
            "deterministic": self.deterministic,
            "returns": list(self.returns),
            "lengths": list(self.lengths),
            "clip": None if self.clip is None else self.clip.as_dict(),
            "error": self.error,
        }
        return json.dumps(data, indent=1) + "\n"

    def write(self, path: Path) -> None:
        """Write the result to `path` atomically."""
        write_atomic(path, self.to_json())

    @classmethod
    def from_json(cls, text: str) -> PlayResult:
        """The result from `to_json`'s text; ValueError (one line) when it is not one."""
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            clip = data.get("clip")
            error = data.get("error")
            return cls(
                env=str(data["env"]),
                deterministic=bool(data["deterministic"]),
                returns=tuple(float(r) for r in data["returns"]),
                lengths=tuple(int(n) for n in data["lengths"]),
                clip=None if clip is None else Clip.from_dict(clip),
                error=None if error is None else str(error),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a play result ({exc})") from None


@dataclass(frozen=True)
class EpisodeDone:
    """One finished episode, as the player's progress line says it: the `index`-th (from 1) of
    `episodes`, its return and length."""

    index: int
    episodes: int
    ret: float
    length: int


def episode_line(done: EpisodeDone) -> str:
    """The player's progress line for `done` (no newline)."""
    payload = {"index": done.index, "episodes": done.episodes, "return": done.ret, "length": done.length}
    return EPISODE_PREFIX + json.dumps(payload)


def parse_episode_line(line: str) -> EpisodeDone | None:
    """The episode a progress line reports; None for any other line (the player's other output)."""
    if not line.startswith(EPISODE_PREFIX):
        return None
    try:
        data = json.loads(line[len(EPISODE_PREFIX) :])
        return EpisodeDone(int(data["index"]), int(data["episodes"]), float(data["return"]), int(data["length"]))
    except (KeyError, TypeError, ValueError):
        return None
