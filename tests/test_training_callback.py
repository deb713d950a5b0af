"""CockpitCallback on a real (tiny) SB3 PPO run: phases, progress, exact targets, stops, checkpoints."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from cockpit.contract.events import E, EventWriter, PhaseEvent, read_events
from cockpit_training.callback import CockpitCallback
from cockpit_training.stopping import StopFlag, StopRequested

ROLLOUT = 64  # 4 envs x 16 steps in the tiny_ppo fixture


def run(tmp_path: Path, model: Any, total: int, **kwargs: Any) -> tuple[CockpitCallback, list[dict]]:
    events = EventWriter(tmp_path / "events.jsonl")
    callback = CockpitCallback(events, **kwargs)
    model.learn(total, callback=callback)
    return callback, read_events(tmp_path / "events.jsonl")


def test_phases_alternate_and_progress_carries_losses(tmp_path: Path, tiny_ppo) -> None:
    model = tiny_ppo()
    _, events = run(tmp_path, model, 3 * ROLLOUT, progress_interval=3600, started_extra={"config": {"x": 1}})
    assert events[0].kind == "started" and events[0].config == {"x": 1} and events[0].device == "cpu"
    phases = [e for e in events if e.kind == "phase"]
    assert [p.phase for p in phases] == ["rollout", "train"] * 3
    assert [p.num_timesteps for p in phases] == [0, 64, 64, 128, 128, 192]
    assert all(a.t <= b.t for a, b in itertools.pairwise(events))
    progress = [e for e in events if e.kind == "progress"]
    assert len(progress) == 2  # at the start of rollouts 2 and 3, after each train phase
    assert {"value_loss", "policy_gradient_loss", "entropy_loss", "approx_kl", "clip_fraction"} <= set(
        progress[0].losses
    )
    assert progress[0].num_timesteps == 64 and progress[0].sps > 0
    assert progress[-1].episodes > 0 and progress[-1].ep_rew_mean > 0


def test_target_mid_rollout_stops_exactly(tmp_path: Path, tiny_ppo) -> None:
    model = tiny_ppo()
    run(tmp_path, model, 3 * ROLLOUT + 8)  # SB3 alone would collect 4 whole rollouts
    assert model.num_timesteps == 3 * ROLLOUT + 8


def test_target_on_a_rollout_boundary_still_trains_that_rollout(tmp_path: Path, tiny_ppo) -> None:
    model = tiny_ppo()
    _, events = run(tmp_path, model, 3 * ROLLOUT)
    assert model.num_timesteps == 3 * ROLLOUT
    assert [e.phase for e in events if e.kind == "phase"].count("train") == 3
    assert model._n_updates == 3 * 2  # SB3 counts epochs: 3 updates x 2 epochs


def test_stop_mid_rollout_ends_learning_at_the_next_step(tmp_path: Path, tiny_ppo) -> None:
    model = tiny_ppo()
    stop = StopFlag()

    class StopAtStep(EventWriter):
        def emit(self, event: E) -> E:
            if isinstance(event, PhaseEvent) and event.phase == "rollout" and event.num_timesteps == ROLLOUT:
                stop.request("SIGTERM")
            return super().emit(event)

    callback = CockpitCallback(StopAtStep(tmp_path / "events.jsonl"), stop=stop)
    model.learn(10 * ROLLOUT, callback=callback)
    assert model.num_timesteps == ROLLOUT + 4  # one vector step of 4 envs into the second rollout


def test_stop_during_training_raises_after_the_current_optimizer_step(tmp_path: Path, tiny_ppo) -> None:
    model = tiny_ppo(n_epochs=10)
    stop = StopFlag()
    steps: list[int] = []
    model.policy.optimizer.register_step_post_hook(lambda *_: steps.append(1))

    class StopInTrain(EventWriter):
        def emit(self, event: E) -> E:
            if isinstance(event, PhaseEvent) and event.phase == "train":
                stop.request("SIGTERM")
            return super().emit(event)

    callback = CockpitCallback(StopInTrain(tmp_path / "events.jsonl"), stop=stop)
    with pytest.raises(StopRequested, match="SIGTERM"):
        model.learn(10 * ROLLOUT, callback=callback)
    callback.close()
    assert len(steps) == 1  # 20 optimizer steps were due; the stop came after the first
    assert model.num_timesteps == ROLLOUT
    assert len(model.policy.optimizer._optimizer_step_post_hooks) == 1  # only the test's own hook is left


def test_periodic_checkpoints_come_after_training(tmp_path: Path, tiny_ppo) -> None:
    model = tiny_ppo()
    saved: list[tuple[int, int]] = []

    def checkpoint(m: Any) -> tuple[str, int]:
        saved.append((m.num_timesteps, m._n_updates))
        return f"ckpt-{m.num_timesteps}", m.num_timesteps

    _, events = run(tmp_path, model, 6 * ROLLOUT, checkpoint=checkpoint, checkpoint_every=100)
    # Checked at each rollout start: first at or past 100 steps, then past 200, 300.
    assert [s for s, _ in saved] == [128, 256, 320]
    assert all(updates == steps // ROLLOUT * 2 for steps, updates in saved)  # trained up to there
    assert [e.step for e in events if e.kind == "checkpoint"] == [128, 256, 320]


def test_a_train_phase_sends_a_heartbeat_every_interval_from_its_optimizer_steps(
    tmp_path: Path, tiny_ppo, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cockpit_training.callback

    model = tiny_ppo(n_epochs=10)  # 20 optimizer steps per train phase (64 samples, batches of 32)
    now = [0.0]
    model.policy.optimizer.register_step_post_hook(lambda *_: now.__setitem__(0, now[0] + 2.0))  # 2 s a step
    monkeypatch.setattr(cockpit_training.callback.time, "monotonic", lambda: now[0])
    _, events = run(tmp_path, model, 3 * ROLLOUT, progress_interval=3600, heartbeat_interval=5.0)
    beats = [e for e in events if e.kind == "heartbeat"]
    # Each 40-s phase: a heartbeat 6, 12 ... 36 s in (the first step at or past 5 s since the last).
    assert len(beats) == 3 * 6
    assert {(b.phase, b.num_timesteps) for b in beats} == {("train", 64), ("train", 128), ("train", 192)}
    kinds = [e.kind if e.kind != "phase" else e.phase for e in events]
    # Only inside train phases: between a train phase's start and the next rollout's progress.
    assert kinds[kinds.index("train") + 1 : kinds.index("train") + 7] == ["heartbeat"] * 6
    assert "heartbeat" not in kinds[: kinds.index("train")]


def test_short_train_phases_send_no_heartbeat(tmp_path: Path, tiny_ppo) -> None:
    _, events = run(tmp_path, tiny_ppo(), 3 * ROLLOUT)  # each phase lasts milliseconds: nothing to say
    assert not [e for e in events if e.kind == "heartbeat"]


def test_progress_carries_the_workers_own_cuda_memory_where_it_trains_on_cuda(
    tmp_path: Path, tiny_ppo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On the CPU there is none to report; on CUDA, what `device.cuda_memory` reads of the model's device
    # reaches each progress event (the cockpit's per-job GPU memory where NVML cannot attribute the job).
    _, events = run(tmp_path / "cpu", tiny_ppo(), 2 * ROLLOUT, progress_interval=3600)
    progress = [e for e in events if e.kind == "progress"]
    assert progress and all(e.cuda_reserved_bytes is None and e.cuda_peak_bytes is None for e in progress)
    asked: list[str] = []

    def on_cuda(device: Any) -> dict[str, int]:
        asked.append(str(device))
        return {"cuda_reserved_bytes": 5 * 2**30, "cuda_peak_bytes": 7 * 2**30}

    monkeypatch.setattr("cockpit_training.callback.cuda_memory", on_cuda)
    _, events = run(tmp_path / "cuda", tiny_ppo(), 2 * ROLLOUT, progress_interval=3600)
    progress = [e for e in events if e.kind == "progress"]
    assert asked and set(asked) == {"cpu"}  # the model's own device is what is asked about
    assert [(e.cuda_reserved_bytes, e.cuda_peak_bytes) for e in progress] == [(5 * 2**30, 7 * 2**30)] * len(progress)
