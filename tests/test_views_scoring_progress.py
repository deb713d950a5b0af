"""A fleet's scoring as the views show it: the worker's `score` phase and its heartbeats.

A real worker's stream (a score phase after the last train phase, heartbeats counting the
episodes) is checked in tests/test_contract_event_stream.py; here those events drive the supervisor on a
fake clock, and the views (headless line, jobs tables, lanes, replay) are read back.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from cockpit.contract import presets
from cockpit.contract.runspec import RunSpec
from cockpit.contract.states import JobState
from cockpit.core.record.replay import open_replay
from cockpit.views.headless import job_line, jobs_table
from cockpit.views.tui.jobs_table import cells
from tests.fakeclock import FakeClock
from tests.test_supervise_stall import running, wait
from tests.test_supervise_supervisor import events, make, run_log


def _scoring(tmp_path: Path) -> tuple[object, FakeClock, float]:
    """A job trained to 1000 steps, then 90 s into a score phase of 10 episodes with 3 scored:
    (supervisor, clock, the score phase's start)."""
    sup, _, clock = make(tmp_path, agents=1, slots=1)  # the default stall timeout: 60 s at first
    running(sup, clock)
    w = events(sup, "000")
    w.phase("train", iteration=1, num_timesteps=1000, t=clock.t)
    wait(sup, clock, 2)
    start = clock.t
    w.phase("score", iteration=1, num_timesteps=1000, t=start)
    w.heartbeat("score", num_timesteps=1000, scored=0, to_score=10, t=start)
    for scored in (1, 2, 3):  # an episode every 30 s: longer than no heartbeat at all would be allowed
        for _ in range(6):
            wait(sup, clock, 5, step=0.5)
            w.heartbeat("score", num_timesteps=1000, scored=scored - 1, to_score=10, t=clock.t)
        w.heartbeat("score", num_timesteps=1000, scored=scored, to_score=10, t=clock.t)
    sup.tick()
    return sup, clock, start


def test_a_long_score_phase_with_heartbeats_is_not_a_stall_and_shows_its_episodes(tmp_path: Path) -> None:
    sup, _, start = _scoring(tmp_path)
    job = sup.jobs["000"]  # type: ignore[attr-defined]
    assert job.state is JobState.RUNNING and job.restarts == 0
    (view,) = sup.snapshot().jobs  # type: ignore[attr-defined]
    assert (view.phase, view.scored, view.to_score, view.steps) == ("score", 3, 10, 1000)
    # 90 s for 3 of 10 episodes: about 300 s in all at that pace.
    assert "score 3/10 ep, 1m30s of about 5m00s" in job_line(view, now=start + 90)
    assert "score 3/10 ep" in job_line(view) and " of about" not in job_line(view)
    row = cells(view, sup.snapshot(), wide=True)  # type: ignore[attr-defined]
    assert row["phase"] == "score" and row["steps"] == "scored 3/10 ep"
    console = Console(width=160, record=True)
    console.print(jobs_table(sup.snapshot()))  # type: ignore[attr-defined]
    assert "scored 3/10 ep" in console.export_text()


def test_the_next_phase_or_the_workers_end_clears_the_scoring(tmp_path: Path) -> None:
    sup, clock, _ = _scoring(tmp_path)
    w = events(sup, "000")
    w.phase("rollout", iteration=2, num_timesteps=1000, t=clock.t)  # a worker trained on after scoring
    sup.tick()
    (view,) = sup.snapshot().jobs  # type: ignore[attr-defined]
    assert view.phase == "rollout" and view.scored is None and view.to_score is None
    row = cells(view, sup.snapshot(), wide=True)  # type: ignore[attr-defined]
    assert row["steps"].startswith("1,000/1,000")


def test_a_replay_shows_the_scoring_as_it_was(tmp_path: Path) -> None:
    sup, clock, start = _scoring(tmp_path)
    events(sup, "000").finished(status="done", steps=1000, duration=100.0, t=clock.t)
    sup.tick()
    spec = RunSpec(jobs=1, agents=1, loaded_preset=presets.load("cartpole"), preset="cartpole", env="CartPole-v1",
                   timesteps=1000, seed=0, run_dir=tmp_path, pin=False,
                   command_line=("cockpit", "run"))  # fmt: skip
    run_log(sup, spec)  # type: ignore[arg-type]
    replay = open_replay(tmp_path)
    replay.seek(start + 65)  # two episodes scored by then
    frame = replay.frame()
    (view,) = frame.state.jobs
    assert (view.phase, view.scored, view.to_score) == ("score", 2, 10)
    replay.seek(start - 1)  # still training
    (view,) = replay.frame().state.jobs
    assert view.phase == "train" and view.scored is None
