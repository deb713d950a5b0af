"""Checkpoints: atomic, verified, the newest two kept, and a corrupt newest one skipped."""

from __future__ import annotations

import errno
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecNormalize

from cockpit.contract.presets import load
from cockpit_training.checkpoints import MODEL_FILE, CheckpointStore
from cockpit_training.envpool_vec import EnvpoolVecEnv
from cockpit_training.model import new_model, resume


def test_save_keeps_the_newest_two_and_verifies(tmp_path: Path, tiny_ppo) -> None:
    model = tiny_ppo()
    store = CheckpointStore(tmp_path / "checkpoints")
    saved = [store.save(model, step) for step in (64, 128, 192)]
    assert store.list() == [saved[1].path, saved[2].path]
    assert not saved[0].path.exists()
    best, corrupt = store.newest_valid()
    assert best == saved[2] and corrupt == []
    assert PPO.load(best.model_path).n_steps == 16
    assert not list(store.directory.glob(".tmp-*"))


def test_a_corrupt_newest_checkpoint_falls_back_and_is_quarantined(tmp_path: Path, tiny_ppo) -> None:
    model = tiny_ppo()
    store = CheckpointStore(tmp_path / "checkpoints")
    older = store.save(model, 64)
    newer = store.save(model, 128)
    with (newer.path / MODEL_FILE).open("r+b") as fh:
        fh.seek(100)
        fh.write(b"garbage")
    best, corrupt = store.newest_valid()
    assert best == older
    assert len(corrupt) == 1 and "SHA-256" in corrupt[0].reason
    assert corrupt[0].path.parent.name == "corrupt" and corrupt[0].path.exists()
    # Quarantined checkpoints leave the rotation: the next save keeps the good older one.
    store.save(model, 192)
    assert [p.name.split("-")[1] for p in store.list()] == ["000000000064", "000000000192"]


def test_missing_or_truncated_files_are_corrupt(tmp_path: Path, tiny_ppo) -> None:
    store = CheckpointStore(tmp_path / "checkpoints")
    only = store.save(tiny_ppo(), 64)
    (only.path / "meta.json").write_text("{trunc")
    assert store.newest_valid()[0] is None


def test_a_failed_save_leaves_earlier_checkpoints_intact(tmp_path: Path, tiny_ppo, monkeypatch) -> None:
    model = tiny_ppo()
    store = CheckpointStore(tmp_path / "checkpoints")
    good = store.save(model, 64)

    def disk_full(path: Path, *_args: object, **_kwargs: object) -> None:
        Path(path).write_bytes(b"PK\x03\x04 half a model")  # the disk fills up mid-write
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(model, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        store.save(model, 128)
    assert store.list() == [good.path]
    assert not list(store.directory.glob(".tmp-*"))
    assert store.newest_valid() == (good, [])


def test_vecnormalize_statistics_travel_with_the_model(tmp_path: Path) -> None:
    preset = replace(load("cartpole"), n_envs=4, n_steps=16, batch_size=32, n_epochs=1, normalize=True)
    vecnorm = VecNormalize(EnvpoolVecEnv.make("CartPole-v1", 4, seed=0, num_threads=1), gamma=preset.gamma)
    model = new_model(preset, vecnorm, seed=0, device="cpu")
    vecnorm.reset()
    for _ in range(50):  # real env steps: the running statistics move away from their start
        vecnorm.step(np.array([vecnorm.action_space.sample() for _ in range(4)]))
    fresh = VecNormalize(EnvpoolVecEnv.make("CartPole-v1", 4, seed=1, num_threads=1))
    assert vecnorm.obs_rms.count == pytest.approx(1e-4 + 51 * 4)  # the reset's observations count too
    assert vecnorm.ret_rms.count > fresh.ret_rms.count
    assert not np.allclose(vecnorm.obs_rms.mean, fresh.obs_rms.mean)
    assert not np.allclose(vecnorm.obs_rms.var, fresh.obs_rms.var)
    assert not np.allclose(vecnorm.ret_rms.var, fresh.ret_rms.var)

    store = CheckpointStore(tmp_path / "checkpoints")
    saved = store.save(model, 200, vecnorm)
    assert saved.vecnormalize_path is not None
    resumed = resume(store, preset, EnvpoolVecEnv.make("CartPole-v1", 4, seed=2, num_threads=1), device="cpu")
    assert resumed.checkpoint == saved and resumed.vecnormalize is not None
    assert resumed.model is not None and resumed.model.get_env() is resumed.vecnormalize
    for name in ("obs_rms", "ret_rms"):
        before, after = getattr(vecnorm, name), getattr(resumed.vecnormalize, name)
        assert np.allclose(after.mean, before.mean) and np.allclose(after.var, before.var), name
        assert after.count == pytest.approx(before.count), name
    assert store.save(model, 256).vecnormalize_path is None


def test_a_resumed_normaliser_discounts_by_the_presets_gamma_not_the_one_it_was_saved_with(tmp_path: Path) -> None:
    # A pbt exploit resumes a copied checkpoint under a perturbed gamma: the reward normaliser's
    # running return must discount by the new one, as the model's advantages do.
    preset = replace(load("cartpole"), n_envs=4, n_steps=16, batch_size=32, n_epochs=1, normalize=True, gamma=0.99)
    vecnorm = VecNormalize(EnvpoolVecEnv.make("CartPole-v1", 4, seed=0, num_threads=1), gamma=preset.gamma)
    store = CheckpointStore(tmp_path / "checkpoints")
    store.save(new_model(preset, vecnorm, seed=0, device="cpu"), 64, vecnorm)
    perturbed = replace(preset, gamma=0.8)
    resumed = resume(store, perturbed, EnvpoolVecEnv.make("CartPole-v1", 4, seed=2, num_threads=1), device="cpu")
    assert resumed.vecnormalize is not None
    resumed.vecnormalize.reset()
    for _ in range(2):  # CartPole pays 1 a step and no episode ends in 2 steps: the return is 1 x gamma + 1
        resumed.vecnormalize.step(np.zeros(4, dtype=np.int64))
    assert resumed.vecnormalize.returns == pytest.approx([1.8] * 4)


def test_a_full_disk_mid_save_prunes_nothing_and_the_newest_checkpoint_still_loads(
    tmp_path: Path, tiny_ppo, monkeypatch
) -> None:
    model = tiny_ppo()
    store = CheckpointStore(tmp_path / "checkpoints")
    kept = [store.save(model, 64), store.save(model, 128)]  # as many as the store keeps

    def disk_full(path: object, *_args: object, **_kwargs: object) -> None:
        Path(str(path)).write_bytes(b"PK\x03\x04 half a model")
        raise OSError(errno.ENOSPC, "No space left on device")  # as torch's stream writer raises it: no filename

    monkeypatch.setattr(model, "save", disk_full)
    with pytest.raises(OSError, match="No space left") as failed:
        store.save(model, 192)
    assert failed.value.filename == str(store.directory)  # the worker's disk_full message names it
    assert store.list() == [k.path for k in kept]
    assert not list(store.directory.glob(".tmp-*"))
    best, corrupt = store.newest_valid()
    assert best == kept[1] and corrupt == []
    assert PPO.load(best.model_path).num_timesteps == model.num_timesteps
