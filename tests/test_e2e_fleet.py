"""Real fleets end to end: `cockpit fleet` with real workers, sync promotion, models, and kill -9.

One never-killed sync fleet (8 CartPole agents, tiers 2k then 4k, promoting 0.5, 2 slots) is the
reference. A second run of the same plan has its cockpit killed with SIGKILL three times (during
a tier's training, during an evaluation, right after a promotion), each followed by
`cockpit fleet --resume`.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.common import small_preset_text
from cockpit.contract.events import (
    CheckpointEvent,
    EvaluatedEvent,
    FinishedEvent,
    ProgressEvent,
    StartedEvent,
    of_kind,
    read_events,
)
from cockpit.contract.model_manifest import read_manifest, verify
from cockpit.core.fleet.promotion import ranked
from cockpit.core.fleet.report import fleet_summary
from cockpit.core.fleet.store import FleetStore

# One pytest-xdist worker runs the module: its tests share the module's `reference`, made once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_e2e_fleet")]

PRESET = small_preset_text(checkpoint_every=1024, timesteps=4096)

PLAN = """
name = "e2e"
jobs = 2
promotion = "sync"
rate_usd_per_h = 1.99
[agents]
env = "CartPole-v1"
preset = "{preset}"
seeds = 8
[[tiers]]
timesteps = 2048
promote = 0.5
[[tiers]]
timesteps = 4096
[score]
episodes = 100
"""
# Each tier is a few rollouts (256 steps each) and has a checkpoint before its end (checkpoint_every):
# what the promotion, the resumes and the kill points need; longer tiers would only train longer.
TIERS = (2048, 4096)


def write_plan(directory: Path) -> Path:
    preset = directory / "quick.toml"
    preset.write_text(PRESET)
    plan = directory / "plan.toml"
    plan.write_text(PLAN.format(preset=preset))
    return plan


def start(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "cockpit", "fleet", *args, "--headless"], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip


def wait_until(proc: subprocess.Popen[bytes], condition: Callable[[], bool], log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the cockpit exited {proc.returncode} first:\n{log.read_text()[-3000:]}")
        time.sleep(0.02)
    raise AssertionError(f"timed out:\n{log.read_text()[-3000:]}")


def outcome(run_dir: Path) -> tuple[dict[tuple[str, int], float], dict[int, set[str]]]:
    store = FleetStore.in_run_dir(run_dir, read_only=True)
    try:
        return {(r.agent, r.tier): r.score for r in store.results()}, store.promotions()
    finally:
        store.close()


def episodes_at_rollout_ends(stream: list) -> list[list[int]]:
    """For each start of a job's worker: the episode count it started from, then its count at each
    rollout boundary (a progress event with losses: after the train phase)."""
    counts: list[list[int]] = []
    for e in stream:
        if isinstance(e, StartedEvent):
            counts.append([e.resumed_episodes or 0])
        elif isinstance(e, ProgressEvent) and e.losses is not None and counts:
            assert e.episodes is not None, "an episode-target worker counts its episodes"
            counts[-1].append(e.episodes)
    return counts


def events(run_dir: Path, agent: str) -> list:
    return read_events(run_dir / "jobs" / agent / "events.jsonl")


def undisturbed(run_dir: Path, agent: str, tier: int) -> bool:
    """True when one worker trained `agent` through `tier` from the tier's start to its end (no
    kill mid-training), and every earlier tier was undisturbed too: its score must then be the
    reference's, since the same seed and checkpoint train the same model."""
    start = TIERS[tier - 1] if tier else None
    started = [e for e in of_kind(events(run_dir, agent), StartedEvent) if e.target_steps == TIERS[tier]]
    trained = [e for e in started if e.resumed_from_step != TIERS[tier]]  # a resume at the target trains nothing
    ok = len(trained) == 1 and trained[0].resumed_from_step == start
    return ok and (tier == 0 or undisturbed(run_dir, agent, tier - 1))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("fleet")
    run_dir, log = directory / "run", directory / "run.log"
    proc = start(str(write_plan(directory)), "--run-dir", str(run_dir), log=log)
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    return run_dir


def test_a_sync_fleet_promotes_exactly_the_best_half_which_resume_from_their_checkpoints(reference: Path) -> None:
    scores, promotions = outcome(reference)
    tier0 = {agent: score for (agent, tier), score in scores.items() if tier == 0}
    assert len(tier0) == 8
    store = FleetStore.in_run_dir(reference, read_only=True)
    best = [r.agent for r in ranked(store.results(0))][:4]
    store.close()
    assert promotions == {0: set(best)}
    assert {agent for (agent, tier) in scores if tier == 1} == set(best)
    for agent in best:
        stream = events(reference, agent)
        started = of_kind(stream, StartedEvent)
        # Tier 1 began from the tier-0 checkpoint at 2,048 steps, never from zero.
        assert [e.resumed_from_step for e in started] == [None, TIERS[0]]
        assert [e.steps for e in of_kind(stream, FinishedEvent)] == list(TIERS)
        assert [(e.step, e.episodes) for e in of_kind(stream, EvaluatedEvent)] == [(TIERS[0], 100), (TIERS[1], 100)]
    for agent in set(tier0) - set(best):
        assert of_kind(events(reference, agent), FinishedEvent)[-1].steps == TIERS[0]  # culled: trained no further
    entries = read_manifest(reference)
    assert sorted(e.agent for e in entries) == sorted(best)
    assert [e.score for e in entries] == sorted((scores[a, 1] for a in best), reverse=True)
    assert all(e.steps == TIERS[1] for e in entries)
    assert verify(reference, entries) == []
    # The run log and the collected files are whole; a tampered model no longer verifies.
    (reference / "models" / entries[0].file).write_bytes(b"not a model")
    assert verify(reference, entries) == [f"{reference / 'models' / entries[0].file}: does not match its SHA-256 "
                                          "in models.toml"]  # fmt: skip


def test_kill_9_at_three_points_then_resume_ends_like_the_run_never_killed(reference: Path, tmp_path: Path) -> None:
    plan, run_dir, log = write_plan(tmp_path), tmp_path / "run", tmp_path / "run.log"
    db = run_dir / "fleet.db"

    def any_event(predicate: Callable[[object], bool]) -> bool:
        jobs = run_dir / "jobs"
        return jobs.is_dir() and any(predicate(e) for d in jobs.iterdir() for e in events(run_dir, d.name))

    def promoted() -> bool:
        if not db.exists():
            return False
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return conn.execute("SELECT COUNT(*) FROM promotions").fetchone()[0] > 0

    def evaluating() -> bool:  # a final checkpoint at a tier's target with no score yet: evaluating
        jobs = run_dir / "jobs"
        if not jobs.is_dir():
            return False
        for d in jobs.iterdir():
            stream = events(run_dir, d.name)
            at_target = [e for e in of_kind(stream, CheckpointEvent) if e.step in TIERS]
            scored = {e.step for e in of_kind(stream, EvaluatedEvent)}
            if any(e.step not in scored for e in at_target):
                return True
        return False

    points: list[Callable[[], bool]] = [
        lambda: any_event(lambda e: isinstance(e, CheckpointEvent) and e.step < TIERS[0]),  # mid-tier, checkpointed
        evaluating,
        promoted,
    ]
    args: list[str] = [str(plan), "--run-dir", str(run_dir)]
    for point in points:
        proc = start(*args, log=log)
        wait_until(proc, point, log)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        args = ["--resume", str(run_dir)]
        time.sleep(1.0)  # the orphaned workers checkpoint and exit on their parent-death signal
    proc = start(*args, log=log)
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]

    scores, promotions = outcome(run_dir)
    ref_scores, ref_promotions = outcome(reference)
    assert set(scores) == {(a, t) for (a, t) in scores if t == 0} | {(a, 1) for a in promotions[0]}
    assert len([k for k in scores if k[1] == 0]) == 8
    # The promotions follow the recorded scores exactly: the top half.
    store = FleetStore.in_run_dir(run_dir, read_only=True)
    assert promotions == {0: {r.agent for r in ranked(store.results(0))[:4]}}
    store.close()
    # Every agent and tier one worker trained from the tier's start, without a kill in between,
    # scored exactly what the never-killed run scored.
    # (An agent promoted here but not there, because a disturbed agent scored differently, has no
    # reference score in the next tier to compare with.)
    same = [(a, t) for (a, t) in scores if undisturbed(run_dir, a, t) and (a, t) in ref_scores]
    assert len(same) >= 4
    assert {k: scores[k] for k in same} == {k: ref_scores[k] for k in same}
    if all(undisturbed(run_dir, a, 0) for a, t in scores if t == 0):
        assert promotions == ref_promotions
    # No tier was trained twice: every start went on from the newest checkpoint before it (a tier
    # done is never begun again), and each tier ended at its own target.
    for agent_dir in (run_dir / "jobs").iterdir():
        stream = events(run_dir, agent_dir.name)
        newest = None
        for e in stream:
            if isinstance(e, CheckpointEvent):
                newest = e.step
            elif isinstance(e, StartedEvent):
                assert e.resumed_from_step == newest, (agent_dir.name, e.resumed_from_step, newest)
        assert all(e.steps in TIERS for e in of_kind(stream, FinishedEvent) if e.status == "done")
    entries = read_manifest(run_dir)
    assert sorted(e.agent for e in entries) == sorted(promotions[0])
    assert verify(run_dir, entries) == []


def test_a_fleet_in_episodes_trains_each_tier_to_its_whole_episodes_and_resumes_the_promoted(tmp_path: Path) -> None:
    """4 agents, tiers of 20 then 40 whole episodes, the best 2 promoted: each tier ends at the
    first rollout boundary past its episodes, and a promoted agent goes on from its tier-0
    checkpoint with the episodes it had, never from zero."""
    plan = write_plan(tmp_path)
    text = plan.read_text().replace("seeds = 8", "seeds = 4").replace("episodes = 100", "episodes = 10")
    plan.write_text(text.replace("timesteps = 2048", "episodes = 20").replace("timesteps = 4096", "episodes = 40"))
    run_dir, log = tmp_path / "run", tmp_path / "run.log"
    proc = start(str(plan), "--run-dir", str(run_dir), log=log)
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    assert "tier 0 (20 ep)" in log.read_text()
    scores, promotions = outcome(run_dir)
    store = FleetStore.in_run_dir(run_dir, read_only=True)
    best = [r.agent for r in ranked(store.results(0))][:2]
    store.close()
    assert promotions == {0: set(best)} and {a for (a, t) in scores if t == 1} == set(best)
    rollout = 8 * 32  # n_envs x n_steps: the stop comes at the first rollout boundary past the target
    for agent in (run_dir / "jobs").iterdir():
        stream = events(run_dir, agent.name)
        started = of_kind(stream, StartedEvent)
        evaluated = of_kind(stream, EvaluatedEvent)
        targets = (20, 40) if agent.name in best else (20,)
        assert [e.target_episodes for e in started] == list(targets)
        assert len(evaluated) == len(targets)
        for e, target, counts in zip(evaluated, targets, episodes_at_rollout_ends(stream), strict=True):
            # It ended at the first rollout boundary past its target: the count there reaches the
            # target, the count at the boundary before (or at its start) did not.
            assert e.trained_episodes == counts[-1] >= target > counts[-2], (agent.name, target, counts)
            assert e.step % rollout == 0, (agent.name, e.step)
        if agent.name in best:  # tier 1 went on from tier 0's end: its steps and its episodes
            assert started[1].resumed_from_step == evaluated[0].step
            assert started[1].resumed_episodes == evaluated[0].trained_episodes
    entries = read_manifest(run_dir)
    assert sorted(e.agent for e in entries) == sorted(best) and verify(run_dir, entries) == []
    summary = fleet_summary(run_dir)
    assert summary is not None
    assert [(t.episodes, t.timesteps, t.finished, t.promoted) for t in summary.tiers] == [(20, None, 4, 2),
                                                                                          (40, None, 2, 0)]  # fmt: skip
