"""The player (`cockpit_training.play`): a normalized model plays as SB3's evaluate_policy scores it
with the statistics frozen, a clip's frames are the episodes it played, an MP4 asked for without
ffmpeg becomes a GIF (said), and an env that cannot render still gives its returns, with the one
line and exit 2. Models are untrained PPOs saved here: what is tested is how they are played."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize

from cockpit.contract.play import PlayRequest, PlayResult
from cockpit_training import clips
from cockpit_training.envs import make_vec_env
from cockpit_training.play import play
from tests.test_training_custom_env import workdir  # noqa: F401  (a fixture)


def save_model(directory: Path, env: str, *, normalize: bool = False, seed: int = 0) -> tuple[Path, Path | None]:
    """An untrained PPO for `env` saved as a checkpoint would hold it (and its VecNormalize, its
    statistics gathered over a few hundred random steps, when `normalize`)."""
    directory.mkdir(parents=True, exist_ok=True)
    venv = make_vec_env(env, 2, seed=seed, vec_env="dummy")
    env_for_model = VecNormalize(venv) if normalize else venv
    model = PPO("MlpPolicy", env_for_model, seed=seed, n_steps=64, batch_size=64, device="cpu")
    if normalize:
        env_for_model.reset()
        for _ in range(300):
            env_for_model.step(np.array([env_for_model.action_space.sample() for _ in range(2)]))
    model.save(directory / "model.zip")
    stats = None
    if normalize:
        stats = directory / "vecnormalize.pkl"
        env_for_model.save(str(stats))
    venv.close()
    return directory / "model.zip", stats


def test_a_normalized_model_plays_as_evaluate_policy_scores_it_frozen(tmp_path: Path) -> None:
    model_path, stats = save_model(tmp_path / "m", "CartPole-v1", normalize=True)
    request = PlayRequest(model=model_path, env="CartPole-v1", result=tmp_path / "r.json", vecnormalize=stats,
                          episodes=3, seed=5)  # fmt: skip
    result, code = play(request)
    assert code == 0 and result.error is None and len(result.returns) == 3
    model = PPO.load(model_path, device="cpu")
    venv = make_vec_env("CartPole-v1", 1, seed=5, vec_env="dummy")
    frozen = VecNormalize.load(str(stats), venv)
    frozen.training, frozen.norm_reward = False, False
    before = copy.deepcopy(frozen.obs_rms.mean)
    returns, lengths = evaluate_policy(model, frozen, n_eval_episodes=3, deterministic=True,
                                       return_episode_rewards=True, warn=False)  # fmt: skip
    assert result.returns == tuple(float(r) for r in returns)
    assert result.lengths == tuple(lengths)
    assert np.array_equal(frozen.obs_rms.mean, before)


def test_a_clip_holds_the_frames_of_the_episodes_played(tmp_path: Path) -> None:
    model_path, _ = save_model(tmp_path / "m", "CartPole-v1")
    request = PlayRequest(model=model_path, env="CartPole-v1", result=tmp_path / "r.json", episodes=2,
                          video=tmp_path / "clip.mp4", source="jobs/0/checkpoints/step-1")  # fmt: skip
    result, code = play(request)
    assert code == 0 and result.clip is not None
    clip = result.clip
    # A frame at each reset and after each step, at CartPole's render_fps.
    assert clip.frames == sum(result.lengths) + len(result.lengths)
    assert (clip.format, clip.fps, clip.width, clip.height) == ("mp4", 50.0, 600, 400)
    assert clip.seconds == pytest.approx(clip.frames / 50) and clip.bytes == clip.path.stat().st_size
    assert clip.checkpoint == "jobs/0/checkpoints/step-1" and clip.note == ""
    result.write(request.result)
    assert PlayResult.from_json(request.result.read_text()) == result


def test_an_mp4_without_ffmpeg_is_a_gif_said_in_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clips, "ffmpeg_exe", lambda: None)  # as where imageio-ffmpeg is not installed
    model_path, _ = save_model(tmp_path / "m", "CartPole-v1")
    request = PlayRequest(model=model_path, env="CartPole-v1", result=tmp_path / "r.json", episodes=1,
                          video=tmp_path / "clip.mp4")  # fmt: skip
    result, code = play(request)
    assert code == 0 and result.clip is not None
    assert (result.clip.path, result.clip.format) == (tmp_path / "clip.gif", "gif")
    assert result.clip.note == "ffmpeg absent (pip install 'cockpit[video]'): GIF"
    assert not (tmp_path / "clip.mp4").exists()


@pytest.mark.usefixtures("workdir")
def test_an_env_that_cannot_render_still_plays_its_episodes(tmp_path: Path) -> None:
    model_path, _ = save_model(tmp_path / "m", "gridworld:GridWorld-v0")
    request = PlayRequest(model=model_path, env="gridworld:GridWorld-v0", result=tmp_path / "r.json", episodes=2,
                          video=tmp_path / "clip.mp4")  # fmt: skip
    result, code = play(request)
    assert code == 2 and result.clip is None and len(result.returns) == 2
    assert result.error == (
        "gridworld:GridWorld-v0 cannot render: its render modes are ['ansi'], and a clip needs 'rgb_array'"
    )
    assert not list(tmp_path.glob("clip*"))


def test_a_model_that_does_not_load_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "model.zip").write_bytes(b"not a zip")
    result, code = play(PlayRequest(model=tmp_path / "model.zip", env="CartPole-v1", result=tmp_path / "r.json"))
    assert code == 2 and result.returns == ()
    assert result.error is not None and result.error.startswith(f"--model {tmp_path / 'model.zip'}: does not load")


def test_a_clip_stops_at_its_seconds_and_says_so_while_the_episodes_play_on(tmp_path: Path) -> None:
    model_path, _ = save_model(tmp_path / "m", "CartPole-v1")
    request = PlayRequest(model=model_path, env="CartPole-v1", result=tmp_path / "r.json", episodes=3,
                          video=tmp_path / "clip.gif", max_seconds=0.4)  # fmt: skip
    result, code = play(request)
    assert code == 0 and result.clip is not None and len(result.returns) == 3
    assert (result.clip.frames, result.clip.fps, result.clip.seconds) == (10, 25.0, 0.4)
    assert result.clip.note == "cut at 0.4 s (--max-seconds)"


def test_a_clip_whose_playing_fails_leaves_no_half_written_file(tmp_path: Path) -> None:
    model_path, _ = save_model(tmp_path / "m", "CartPole-v1")
    _, stats = save_model(tmp_path / "p", "Pendulum-v1", normalize=True)  # statistics of 3 observations, not 4
    videos = tmp_path / "videos"
    request = PlayRequest(model=model_path, env="CartPole-v1", result=tmp_path / "r.json", vecnormalize=stats,
                          episodes=1, video=videos / "clip.mp4")  # fmt: skip
    result, code = play(request)  # the reset's frame is written, then the policy's first step fails
    assert code == 1 and result.clip is None and result.error is not None
    assert list(videos.iterdir()) == []
