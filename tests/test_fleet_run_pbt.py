"""A pbt fleet on a scripted supervisor (`tests/test_fleet_run.py`'s `ScriptedFleet`): at a tier
boundary nobody is culled, the bottom agent copies the top agent's checkpoint and takes its perturbed
searched values, fleet.db records the lineage, and a kill between the decision and the copy is
repaired on resume. The scripted workers write a checkpoint directory as a real one does."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from cockpit.contract.checkpoint_files import newest_checkpoint
from cockpit.contract.events import EventWriter
from cockpit.contract.files import sha256_of
from cockpit.contract.model_manifest import MODELS_DIR, read_manifest
from cockpit.contract.presets import load
from cockpit.core.fleet import pbt
from cockpit.core.fleet.report import fleet_summary
from cockpit.core.fleet.store import FleetStore
from tests.test_fleet_run import ScriptedFleet
from tests.test_supervise_supervisor import FakeProcess

PLAN = """
name = "scripted-pbt"
jobs = 2
promotion = "pbt"
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = 1
[agents.search]
samples = 4
learning_rate = { loguniform = [1e-4, 1e-2] }
[[tiers]]
timesteps = 1000
[[tiers]]
timesteps = 2000
[pbt]
quantile = 0.25
resample_probability = 0.0
seed = 3
"""


def score(agent: str, tier: int) -> float:
    return 10.0 * (int(agent[1:]) + 1)  # a0003 best, a0000 worst


class CheckpointingFleet(ScriptedFleet):
    """Its workers also leave a checkpoint at their tier's target, named as the worker names them,
    its model.zip saying whose it is."""

    def finish(self, events: EventWriter, proc: FakeProcess, agent: str, tier: int) -> None:
        target = self.plan.tiers[tier].timesteps or 0
        checkpoint = proc.request.args.job_dir / "checkpoints" / f"step-{target:012d}-{int(self.clock.t * 1e9)}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "model.zip").write_text(f"{agent} at {target}")
        sums = {"model.zip": sha256_of(checkpoint / "model.zip")}  # as the worker records them
        (checkpoint / "meta.json").write_text(json.dumps({"step": target, "files": sums}))
        super().finish(events, proc, agent, tier)


def launches(fleet: ScriptedFleet, agent: str) -> list[FakeProcess]:
    return [p for p in fleet.launcher.processes if p.request.job_id == agent]


def test_a_pbt_boundary_moves_everyone_on_and_the_worst_copies_the_best(tmp_path: Path) -> None:
    fleet = CheckpointingFleet(tmp_path / "run", PLAN, lambda a, t: 1.0, score)
    fleet.run()
    store = FleetStore(fleet.fleet.store.path, read_only=True)
    try:
        (exploit,) = store.lineage()
        promotions = store.promotions()
        rows = {row.id: row for row in store.agents()}
        drawn = {draw: values["learning_rate"] for draw, (_trial, values) in store.draws().items()}
    finally:
        store.close()
    # Nobody culled: all four scored in tier 0 went on and scored in tier 1.
    assert promotions == {0: {"a0000", "a0001", "a0002", "a0003"}}
    assert sorted((r.agent, r.tier) for r in fleet.fleet.store.results()) == [
        (f"a000{i}", t) for i in range(4) for t in (0, 1)]  # fmt: skip
    # floor(4 x 0.25) = 1: the worst (a0000) copies the only top agent (a0003).
    assert (exploit.agent, exploit.tier, exploit.source, exploit.source_steps) == ("a0000", 0, "a0003", 1000)
    assert exploit.applied and (exploit.score, exploit.source_score) == (10.0, 40.0)
    # One agent a draw (seeds = 1, no grid): a0000 takes a0003's value (draw 3's) x0.8 or x1.2,
    # clipped into the range; the change is told from the source's value, not a0000's own (draw 0's).
    old, new = exploit.changes["learning_rate"]
    source = drawn[3]
    assert old == source != drawn[0] and rows["a0003"].overrides == {"learning_rate": source}
    assert new in {min(max(f * source, 1e-4), 1e-2) for f in (0.8, 1.2)}
    # fleet.db's row: its overrides and its preset file say the new value, and its tier-1 worker got that file.
    assert rows["a0000"].overrides == {"learning_rate": new}
    assert load(rows["a0000"].preset).learning_rate == new
    first, second = launches(fleet, "a0000")
    assert second.request.args.preset == rows["a0000"].preset != first.request.args.preset
    unexploited = launches(fleet, "a0001")  # keeps its own draw's preset file in both tiers
    assert len(unexploited) == 2
    assert all(p.request.args.preset == unexploited[0].request.args.preset for p in unexploited)
    # Its newest checkpoint when its tier-1 worker started was a0003's from tier 0; its own was set aside.
    checkpoints = tmp_path / "run" / "jobs" / "a0000" / "checkpoints"
    assert (checkpoints / exploit.checkpoint / "model.zip").read_text() == "a0003 at 1000"
    (replaced,) = (checkpoints / pbt.REPLACED_DIR).iterdir()
    assert replaced.name.startswith("step-000000001000-")  # its own tier-0 checkpoint
    # The notices and the report say so.
    assert f"a0000 exploits a0003 (score 40.0 > 10.0): learning_rate {old:.3g} -> {new:.3g}" in fleet.fleet.notices
    summary = fleet_summary(tmp_path / "run")
    assert summary is not None
    agents = {a.id: a for a in summary.agents}
    assert [e.source for e in agents["a0000"].lineage] == ["a0003"] and agents["a0003"].lineage == ()
    assert all(t.culled == 0 for t in summary.tiers) and summary.count("done") == 4
    leaders = fleet.fleet.view(None, 1.0).leaders
    assert {leader.agent: leader.lineage for leader in leaders}["a0000"] == "a0003@t0"


def test_the_no_exploit_control_trains_and_scores_everyone_through_every_tier_and_copies_nothing(
    tmp_path: Path,
) -> None:
    fleet = CheckpointingFleet(tmp_path / "run", PLAN + "exploit = false\n", lambda a, t: 1.0, score)
    fleet.run()
    store = FleetStore(fleet.fleet.store.path, read_only=True)
    try:
        lineage, promotions, rows = store.lineage(), store.promotions(), {row.id: row for row in store.agents()}
        drawn = {draw: values["learning_rate"] for draw, (_trial, values) in store.draws().items()}
    finally:
        store.close()
    assert lineage == [] and promotions == {0: {"a0000", "a0001", "a0002", "a0003"}}
    assert sorted((r.agent, r.tier) for r in fleet.fleet.store.results()) == [
        (f"a000{i}", t) for i in range(4) for t in (0, 1)]  # fmt: skip
    # The same draws as the exploiting fleet's, each kept: a0000 is worst, and still trains its own.
    assert all(rows[f"a000{i}"].overrides == {"learning_rate": drawn[i]} for i in range(4))
    for agent in ("a0000", "a0003"):
        first, second = launches(fleet, agent)
        assert first.request.args.preset == second.request.args.preset
        assert not (tmp_path / "run" / "jobs" / agent / "checkpoints" / pbt.REPLACED_DIR).exists()
    assert not any("exploits" in notice for notice in fleet.fleet.notices)
    assert "tier 0 done: 4 scored, all go on, 0 exploited a top agent, best a0003 40.0" in fleet.fleet.notices


def test_a_kill_between_the_decision_and_the_copy_is_repaired_on_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fleet = CheckpointingFleet(run_dir, PLAN, lambda a, t: 1.0, score)
    fleet.fleet.boundary.apply_exploits = lambda: None  # type: ignore[method-assign]  # "killed" before any copy
    while not fleet.fleet.store.lineage():
        fleet.step()
    fleet.fleet.close()
    checkpoints = run_dir / "jobs" / "a0000" / "checkpoints"
    assert [p.name for p in checkpoints.glob("step-*")] != [fleet.fleet.lineage["a0000"][0].checkpoint]

    resumed = CheckpointingFleet(run_dir, PLAN, lambda a, t: 1.0, score, resume=True)
    (exploit,) = resumed.fleet.store.lineage()
    assert exploit.applied
    assert [p.name for p in checkpoints.glob("step-*")] == [exploit.checkpoint]
    assert (checkpoints / exploit.checkpoint / "model.zip").read_text() == "a0003 at 1000"
    resumed.run()
    assert sorted(r.agent for r in resumed.fleet.store.results(1)) == ["a0000", "a0001", "a0002", "a0003"]


def test_agents_copy_only_agents_of_their_own_env_preset_and_grid(tmp_path: Path) -> None:
    # Two grid groups (n_epochs 4: a0000, a0002, ...; 8: a0001, a0003, ...); the odd ones all score
    # higher, so across the whole fleet the top two would both be odd.
    text = PLAN.replace("[agents.search]", "[agents.overrides]\nn_epochs = [4, 8]\n[agents.search]")
    fleet = CheckpointingFleet(tmp_path / "run", text, lambda a, t: 1.0,
                               lambda a, t: (100.0 if int(a[1:]) % 2 else 0.0) + int(a[1:]))  # fmt: skip
    fleet.run()
    exploits = fleet.fleet.store.lineage()
    assert {(e.agent, e.source) for e in exploits} == {("a0000", "a0006"), ("a0001", "a0007")}
    rows = {row.id: row for row in fleet.fleet.store.agents()}
    assert rows["a0000"].overrides["n_epochs"] == 4 and rows["a0001"].overrides["n_epochs"] == 8


def test_agents_pair_only_within_their_searched_network_and_keep_it(tmp_path: Path) -> None:
    # 8 draws of net_arch and learning_rate; the higher the id the better, so across the fleet the
    # bottom two would copy the top two whatever their networks.
    text = PLAN.replace("samples = 4", "samples = 8").replace(
        "[[tiers]]", "net_arch = { choice = [[32, 32], [64, 64]] }\n[[tiers]]", 1).replace(
        "quantile = 0.25", "quantile = 0.5")  # fmt: skip
    fleet = CheckpointingFleet(tmp_path / "run", text, lambda a, t: 1.0, score)
    fleet.run()
    rows = {row.id: row for row in fleet.fleet.store.agents()}
    drawn = {f"a{draw:04d}": values["net_arch"] for draw, (_trial, values) in fleet.fleet.store.draws().items()}
    exploits = fleet.fleet.store.lineage()
    assert exploits and len(set(map(str, drawn.values()))) == 2  # both networks drawn, someone exploited
    for exploit in exploits:  # one boundary: each drew its network in tier 0 and still has it
        assert drawn[exploit.agent] == drawn[exploit.source] == rows[exploit.agent].overrides["net_arch"], exploit
        assert exploit.changes["net_arch"] == (drawn[exploit.agent], drawn[exploit.agent])
    told = [n for n in fleet.fleet.notices if n.startswith("a0") and " exploits " in n]
    assert len(told) == len(exploits) and all("learning_rate" in n and "net_arch" not in n for n in told)
    notes = [n for n in fleet.fleet.notices if n.startswith("pbt: net_arch shapes the saved network")]
    assert len(notes) == 1


def test_a_small_group_is_a_notice_once_and_never_exploits(tmp_path: Path) -> None:
    text = PLAN.replace("samples = 4", "samples = 1").replace(
        "[agents.search]", "[agents.overrides]\nn_epochs = [4, 8]\n[agents.search]")  # fmt: skip
    fleet = CheckpointingFleet(tmp_path / "run", text, lambda a, t: 1.0, score)
    fleet.run()
    assert fleet.fleet.store.lineage() == []
    small = [n for n in fleet.fleet.notices if "it never exploits" in n]
    assert small == [
        f"pbt: the group CartPole-v1 cartpole n_epochs={n} has 1 agent(s): it never exploits (a group needs 2 "
        "agents; add samples or seeds)" for n in (4, 8)]  # fmt: skip


# Each value alone suits the preset, and so do the midpoints (the first choices); 1 x 7 with a batch
# of 4 has no divisor >= 2 at or below 4. A choice is always resampled at a boundary, so an exploiter
# may draw that point while its source's values are fine.
REFUSED = "n_envs = { choice = [8, 1] }\nn_steps = { choice = [32, 7] }\nbatch_size = { choice = [64, 4] }\n"


def test_perturbed_values_a_preset_refuses_together_are_taken_unperturbed_and_the_fleet_goes_on(
    tmp_path: Path,
) -> None:
    text = PLAN.replace("learning_rate = { loguniform = [1e-4, 1e-2] }\n", REFUSED)
    text = text.replace("quantile = 0.25", "quantile = 0.5").replace("seed = 3", "seed = 0")  # draws 1 x 7 x 4
    fleet = CheckpointingFleet(tmp_path / "run", text, lambda a, t: 1.0, score)
    fleet.run()
    unperturbed = [n for n in fleet.fleet.notices if " values unperturbed: " in n]
    assert unperturbed == [
        "a0000 takes a0002's values unperturbed: presets/cartpole.toml: 'batch_size' resolves to 1 for n_envs x "
        "n_steps = 7; PPO needs minibatches of at least 2 (raise batch_size_cap or choose n_envs x n_steps with "
        "a divisor >= 2)"
    ]
    exploits = {e.agent: e for e in fleet.fleet.store.lineage()}
    rows = {row.id: row for row in fleet.fleet.store.agents()}
    source = rows["a0002"].overrides
    assert {key: new for key, (_old, new) in exploits["a0000"].changes.items()} == source
    assert rows["a0000"].overrides == source and load(rows["a0000"].preset).n_steps == source["n_steps"]
    # Draw 3 (a0003) was refused from the start; the other three trained both tiers, a0000 on a0002's values.
    assert rows["a0003"].status == "failed"
    assert sorted(r.agent for r in fleet.fleet.store.results(1)) == ["a0000", "a0001", "a0002"]
    second = launches(fleet, "a0000")[-1]
    assert second.request.args.preset == rows["a0000"].preset


def test_a_full_disk_during_the_copy_fails_that_agent_and_the_fleet_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copyfile = shutil.copyfile

    def full_disk(src: Path, dst: Path) -> Path:
        """The disk is full for the checkpoint copy (its `.tmp-<name>` directory), not for the models."""
        if Path(dst).parent.name.startswith(".tmp-step-"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return copyfile(src, dst)

    monkeypatch.setattr(shutil, "copyfile", full_disk)
    run_dir = tmp_path / "run"
    fleet = CheckpointingFleet(run_dir, PLAN, lambda a, t: 1.0, score)
    fleet.run()
    (exploit,) = fleet.fleet.store.lineage()
    assert (exploit.agent, exploit.source) == ("a0000", "a0003")
    rows = {row.id: row for row in fleet.fleet.store.agents()}
    error = rows["a0000"].error or ""
    assert rows["a0000"].status == "failed" and "No space left on device" in error
    assert error.startswith(f"could not copy a0003's checkpoint {exploit.checkpoint}: ")
    failed = [n for n in fleet.fleet.notices if n.startswith("a0000 failed in tier 1: could not copy a0003's")]
    assert len(failed) == 1
    # No worker trained a0000 past the failed copy; the three others trained tier 1 and finished.
    assert len(launches(fleet, "a0000")) == 1
    assert sorted(r.agent for r in fleet.fleet.store.results(1)) == ["a0001", "a0002", "a0003"]
    summary = fleet_summary(run_dir)
    assert summary is not None and (summary.count("done"), summary.count("failed")) == (3, 1)
    # Its own checkpoint is untouched and no half copy is left behind.
    checkpoints = run_dir / "jobs" / "a0000" / "checkpoints"
    (own,) = checkpoints.iterdir()
    assert own.name.startswith("step-000000001000-") and (own / "model.zip").read_text() == "a0000 at 1000"
    # A resume finds the agent failed and the exploit applied: it neither copies again nor crashes.
    fleet.fleet.close()
    monkeypatch.undo()
    resumed = CheckpointingFleet(run_dir, PLAN, lambda a, t: 1.0, score, resume=True)
    resumed.run()
    assert {row.id: row.status for row in resumed.fleet.store.agents()}["a0000"] == "failed"
    assert [p.name for p in checkpoints.iterdir()] == [own.name]


class RottingFleet(CheckpointingFleet):
    """Its workers' checkpoints rot on disk for the agents and tiers in `rotten`: model.zip changes
    after its worker recorded its sum (a bad sector, a file truncated by a full disk)."""

    rotten: tuple[tuple[str, int], ...] = ()

    def finish(self, events: EventWriter, proc: FakeProcess, agent: str, tier: int) -> None:
        if (agent, tier) in self.rotten:
            target = self.plan.tiers[tier].timesteps or 0
            checkpoint = proc.request.args.job_dir / "checkpoints" / f"step-{target:012d}-{int(self.clock.t * 1e9)}"
            checkpoint.mkdir(parents=True)
            (checkpoint / "model.zip").write_text(f"{agent} at {target}")
            sums = {"model.zip": sha256_of(checkpoint / "model.zip")}
            (checkpoint / "meta.json").write_text(json.dumps({"step": target, "files": sums}))
            (checkpoint / "model.zip").write_text("bit rot")
            ScriptedFleet.finish(self, events, proc, agent, tier)
            return
        super().finish(events, proc, agent, tier)


def test_a_corrupt_checkpoint_is_neither_exploited_nor_collected_and_the_rest_are_collected_with_their_own_sums(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    RottingFleet.rotten = (("a0003", 0), ("a0002", 1))  # the PBT source at the boundary; a model at the end
    fleet = RottingFleet(run_dir, PLAN, lambda a, t: 1.0, score)
    fleet.run()
    jobs = run_dir / "jobs"
    # The bottom agent keeps its own checkpoint and goes on from it, rather than copying the rotten one
    # (which its worker would set aside, to start again from step 0).
    assert fleet.fleet.store.lineage() == []
    (source,) = (jobs / "a0003" / "checkpoints").glob("step-000000001000-*")  # its tier-0 checkpoint
    rotten = "model.zip does not match the SHA-256 its worker recorded"
    assert [n for n in fleet.fleet.notices if n.startswith("a0000 cannot exploit")] == [
        f"a0000 cannot exploit a0003: checkpoint {source}: {rotten}"
    ]
    assert not (jobs / "a0000" / "checkpoints" / pbt.REPLACED_DIR).exists()
    # The rotten model is not collected; every other one is, with the sum its worker recorded.
    collected = {entry.agent: entry for entry in read_manifest(run_dir)}
    assert sorted(collected) == ["a0000", "a0001", "a0003"]
    assert not (run_dir / MODELS_DIR / "a0002.zip").exists()
    newest = newest_checkpoint(jobs / "a0002" / "checkpoints")
    assert [n for n in fleet.fleet.notices if n.startswith("a0002: ")] == [
        f"a0002: its model is not collected: checkpoint {newest}: model.zip does not match the SHA-256 its worker "
        "recorded"]  # fmt: skip
    for agent, entry in collected.items():
        checkpoint = newest_checkpoint(jobs / agent / "checkpoints")
        assert checkpoint is not None
        assert entry.sha256 == json.loads((checkpoint / "meta.json").read_text())["files"]["model.zip"]
