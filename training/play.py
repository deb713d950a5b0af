"""Playing a trained model: `python -m cockpit_training.play --model M --env E --result R ...`.

The flags are `cockpit.contract.play.PlayRequest`'s (the cockpit builds them); the result is a
`PlayResult` written as JSON to `--result`, whatever happened, and one progress line per finished
episode goes to stdout.

The model is loaded with its VecNormalize statistics frozen (`training=False`, `norm_reward=False`,
as SB3's `evaluate_policy` expects: observations normalized with the statistics the model trained
with, rewards as the env gives them), and plays `--episodes` episodes:

- without `--video`, on the job's own env as the worker builds it (`envs.make_vec_env`: envpool
  where it has the id, with the preset's `env_kwargs`), one env seeded `--seed`; the returns are
  whole episodes (for Atari, whole games' raw scores, as the worker's scoring counts them);
- with `--video`, on the env's rendering twin, stepped one episode after another and rendered after
  every step with gymnasium's `render_mode="rgb_array"`: the gymnasium env itself for classic control,
  Box2D and a user's env; for an envpool Atari id (envpool renders nothing), gymnasium's ALE env
  (ale-py) under the preprocessing the job trained with, read from envpool's config with the
  preset's `env_kwargs` (frame skip with the max of the last two frames, no-op starts, the resize with
  OpenCV's area filter, grayscale, the frame stack, FIRE at each start and after a lost life), so the
  model sees what it trained on while the clip shows the game's full-colour screen.

An env with no rendering twin (one whose render modes lack `rgb_array`, an envpool id gymnasium
lacks) plays on its own env instead, prints its returns, and ends with one line saying why there
is no clip, exit 2. The clip's frame rate is the env's `render_fps`, one frame per step the agent
takes (for Atari, every `frame_skip`-th frame of the game, as SB3's `VecVideoRecorder` records it).
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any

from cockpit.contract.envids import EnvError, ensure_importable, is_custom
from cockpit.contract.files import sha256_of
from cockpit.contract.play import (
    BAD_INPUT_EXIT,
    PLAY_MODULE,
    VIDEO_EXTRA,
    Clip,
    EpisodeDone,
    PlayRequest,
    PlayResult,
    episode_line,
    video_format,
)
from cockpit_training.stopping import die_with_parent


class PlayInputError(ValueError):
    """The request cannot be played as given (a model that does not load, an unknown env); one line."""


def load_policy(request: PlayRequest) -> tuple[Any, Any]:
    """The PPO model and its frozen VecNormalize (None without one); PlayInputError when either
    does not load."""
    from stable_baselines3 import PPO

    # As rl-zoo3's enjoy: the schedules are training's, and their pickles may not load elsewhere.
    custom = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0}
    try:
        model = PPO.load(request.model, device=request.device, custom_objects=custom)
    except Exception as exc:
        raise PlayInputError(f"--model {request.model}: does not load as an SB3 PPO model ({_line(exc)})") from None
    vecnorm = None
    if request.vecnormalize is not None:
        try:
            with request.vecnormalize.open("rb") as fh:
                vecnorm = pickle.load(fh)
        except Exception as exc:
            raise PlayInputError(f"--vecnormalize {request.vecnormalize}: does not load ({_line(exc)})") from None
        vecnorm.training = False
        vecnorm.norm_reward = False
    return model, vecnorm


def _line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def _normalized(vecnorm: Any, obs: Any) -> Any:
    return obs if vecnorm is None else vecnorm.normalize_obs(obs)


def _report(returns: list[float], lengths: list[int], episodes: int, ret: float, length: int) -> None:
    returns.append(float(ret))
    lengths.append(int(length))
    print(episode_line(EpisodeDone(len(returns), episodes, float(ret), int(length))), flush=True)


def play_job_env(request: PlayRequest, model: Any, vecnorm: Any) -> tuple[list[float], list[int]]:
    """Play the episodes on one copy of the job's own env (`envs.make_vec_env`); returns, lengths."""
    from cockpit_training.envs import make_vec_env

    venv = make_vec_env(request.env, 1, seed=request.seed, threads=1, env_kwargs=request.env_kwargs, vec_env="dummy")
    returns: list[float] = []
    lengths: list[int] = []
    try:
        obs = venv.reset()
        while len(returns) < request.episodes:
            action, _ = model.predict(_normalized(vecnorm, obs), deterministic=request.deterministic)
            obs, _, dones, infos = venv.step(action)
            episode = infos[0].get("episode")
            if dones[0] and episode is not None:  # a whole episode (an Atari game, not one life)
                _report(returns, lengths, request.episodes, episode["r"], episode["l"])
    finally:
        venv.close()
    return returns, lengths


def play_rendered(
    request: PlayRequest, model: Any, vecnorm: Any, env: Any, writer: Any
) -> tuple[list[float], list[int]]:
    """Play the episodes on the rendering twin `env`, offering `writer` each frame: the reset's, then
    one after every step (it draws only those it keeps; the episodes play on past its cap for their
    returns)."""
    returns: list[float] = []
    lengths: list[int] = []
    obs, _ = env.reset(seed=request.seed)
    writer.offer(env.render)
    ret, length = 0.0, 0
    while len(returns) < request.episodes:
        action, _ = model.predict(_normalized(vecnorm, obs), deterministic=request.deterministic)
        obs, reward, terminated, truncated, _ = env.step(action)
        ret, length = ret + float(reward), length + 1
        writer.offer(env.render)
        if terminated or truncated:
            _report(returns, lengths, request.episodes, ret, length)
            ret, length = 0.0, 0
            if len(returns) < request.episodes:
                obs, _ = env.reset()
                writer.offer(env.render)
    return returns, lengths


def record(request: PlayRequest, model: Any, vecnorm: Any) -> tuple[list[float], list[int], Clip | str]:
    """Play on the env's rendering twin and write the clip to `request.video` (a `.gif` beside it
    where an MP4 was asked for and ffmpeg is absent); the returns, lengths, and the clip or the one
    line why none fits its size cap. CannotRender before any episode is played when the env has no
    twin."""
    from cockpit_training.clips import ClipTooLarge, ClipWriter, ffmpeg_exe
    from cockpit_training.render_envs import render_twin

    assert request.video is not None
    env, fps = render_twin(request.env, request.env_kwargs, model.observation_space)
    path, fmt, notes = request.video, video_format(request.video), []
    ffmpeg = ffmpeg_exe()
    if fmt == "mp4" and ffmpeg is None:
        path, fmt = path.with_suffix(".gif"), "gif"
        notes.append(f"ffmpeg absent (pip install '{VIDEO_EXTRA}'): GIF")
    assert fmt is not None
    writer = ClipWriter(
        path,
        fmt,
        fps=fps,
        max_seconds=request.max_seconds,
        max_width=request.max_width,
        max_bytes=int(request.max_mb * 1e6),
        ffmpeg=ffmpeg,
    )
    try:
        returns, lengths = play_rendered(request, model, vecnorm, env, writer)
    except BaseException:
        writer.discard()
        raise
    finally:
        env.close()
    try:
        written = writer.close()
    except ClipTooLarge as exc:
        return returns, lengths, str(exc)
    clip = Clip(
        path=written.path,
        format=written.format,
        frames=written.frames,
        seconds=round(written.frames / written.fps, 3),
        fps=written.fps,
        width=written.width,
        height=written.height,
        bytes=written.path.stat().st_size,
        sha256=sha256_of(written.path),
        checkpoint=request.source or str(request.model),
        note="; ".join([*notes, *written.notes]),
    )
    return returns, lengths, clip


def play(request: PlayRequest) -> tuple[PlayResult, int]:
    """Play `request`; the result and the exit code (see `cockpit.contract.play`)."""
    from cockpit_training.render_envs import CannotRender

    returns: list[float] = []
    lengths: list[int] = []
    clip: Clip | None = None
    error: str | None = None
    code = 0
    try:
        if is_custom(request.env):
            ensure_importable()
        model, vecnorm = load_policy(request)
        if request.video is None:
            returns, lengths = play_job_env(request, model, vecnorm)
        else:
            try:
                returns, lengths, made = record(request, model, vecnorm)
                if isinstance(made, Clip):
                    clip = made
                else:
                    error, code = made, BAD_INPUT_EXIT
            except CannotRender as exc:
                # The evaluation still plays, on the job's own env: only the clip is refused.
                error, code = str(exc), BAD_INPUT_EXIT
                returns, lengths = play_job_env(request, model, vecnorm)
    except (PlayInputError, EnvError) as exc:
        error, code = str(exc), BAD_INPUT_EXIT
    except Exception as exc:
        error, code = _line(exc), 1
    result = PlayResult(request.env, request.deterministic, tuple(returns), tuple(lengths), clip, error)
    return result, code


def main(argv: list[str] | None = None) -> int:
    """Play the request on the command line, write its result, say its error (one line) on stderr."""
    from cockpit_training.device import limit_native_threads

    request = PlayRequest.parse(argv)
    die_with_parent()  # nothing to save: a cockpit that dies takes its players with it
    if not request.result.parent.is_dir():
        print(f"python -m {PLAY_MODULE}: error: --result {request.result}: no such directory", file=sys.stderr)
        return BAD_INPUT_EXIT
    # pygame draws classic control's frames off screen; with no display or sound it would say so.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    if "OMP_NUM_THREADS" not in os.environ:  # run by hand: one thread, as a worker's pools
        limit_native_threads()
    result, code = play(request)
    result.write(request.result)
    if result.error is not None:
        print(f"python -m {PLAY_MODULE}: error: {result.error}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
