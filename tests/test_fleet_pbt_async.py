"""PBT's asynchronous mode (`synch = false`), its burn-in (`burn_in_period`), an agent's schedule
through its lineage (`cockpit report --json`) and its replay (`cockpit fleet --replay`), on the
scripted supervisor of `tests/test_fleet_run.py`, whose workers leave real checkpoint directories."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from cockpit.cli import main
from cockpit.contract.checkpoint_files import checkpoints_in
from cockpit.contract.events import EventWriter
from cockpit.contract.fleetplan import PlanError, parse_plan
from cockpit.contract.presets import load
from cockpit.contract.toml import tomllib
from cockpit.core.fleet import pbt
from cockpit.core.fleet.report import fleet_summary
from cockpit.core.fleet.schedule import ReplayError, replay_text
from cockpit.core.record.run_report import fleet_json
from tests.test_commands_report_json import SCHEMA
from tests.test_fleet_run_pbt import CheckpointingFleet, launches, score
from tests.test_supervise_supervisor import FakeProcess

PLAN = """
name = "scripted-pbt"
jobs = {jobs}
promotion = "pbt"
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = 1
[agents.search]
samples = 4
learning_rate = {{ loguniform = [1e-4, 1e-2] }}
[[tiers]]
timesteps = 1000
[[tiers]]
timesteps = 2000
[[tiers]]
timesteps = 3000
[pbt]
quantile = 0.25
resample_probability = 0.0
seed = 3
{more}
"""


def plan(jobs: int = 2, more: str = "") -> str:
    return PLAN.format(jobs=jobs, more=more)


class PruningFleet(CheckpointingFleet):
    """Its workers keep their newest two checkpoints, as the worker's CheckpointStore does (keep=2)."""

    def finish(self, events: EventWriter, proc: FakeProcess, agent: str, tier: int) -> None:
        super().finish(events, proc, agent, tier)
        for old in checkpoints_in(proc.request.args.job_dir / "checkpoints")[:-2]:
            shutil.rmtree(old)


def test_an_async_agent_exploits_as_it_reaches_the_boundary_not_when_the_tier_is_done(tmp_path: Path) -> None:
    # 3 slots: a0001 takes 100 s in tier 0, the others 1 to 5 s; a0000 (the worst) reaches the
    # boundary after a0002 and a0003 have scored there, long before a0001 has.
    def duration(agent: str, tier: int) -> float:
        return {"a0000": 5.0, "a0001": 100.0}.get(agent, 1.0) if tier == 0 else 1.0

    fleet = CheckpointingFleet(tmp_path / "async", plan(3, "synch = false"), duration, score)
    while not fleet.fleet.store.lineage():
        fleet.step()
    (exploit,) = fleet.fleet.store.lineage()
    scored = {r.agent for r in fleet.fleet.store.results(0)}
    # Ranked among the three scored (ceil(3 x 0.25) = 1): a0000 is the bottom, a0003 the top.
    assert (exploit.agent, exploit.tier, exploit.source) == ("a0000", 0, "a0003")
    assert scored == {"a0000", "a0002", "a0003"}  # a0001 still training its tier 0
    assert fleet.fleet.store.meta("decided:0") is None  # no tier-wide decision: each agent's own
    fleet.run()
    rows = {row.id: row for row in fleet.fleet.store.agents()}
    assert {row.status for row in rows.values()} == {"scored"} and {row.tier for row in rows.values()} == {2}
    second = launches(fleet, "a0000")[1]
    assert load(second.request.args.preset).learning_rate == exploit.changes["learning_rate"][1]
    # a0001, the last to reach boundary 0, ranks third of four there: not the bottom, it goes on.
    assert not [e for e in fleet.fleet.store.lineage() if e.agent == "a0001" and e.tier == 0]
    assert "a0001 goes on to tier 1 (3 of 4 scored there so far)" in fleet.fleet.notices

    # The same plan, synchronous: no exploit until every agent of tier 0 has scored.
    sync = CheckpointingFleet(tmp_path / "sync", plan(3), duration, score)
    while not sync.fleet.store.lineage():
        sync.step()
    assert {r.agent for r in sync.fleet.store.results(0)} == {"a0000", "a0001", "a0002", "a0003"}


def test_an_async_exploit_copies_the_sources_boundary_checkpoint_after_its_worker_pruned_it(tmp_path: Path) -> None:
    # a0000 takes 100 s in tier 0: by then the others have trained all three tiers, and their
    # workers have pruned their tier-0 checkpoints.
    def duration(agent: str, tier: int) -> float:
        return 100.0 if (agent, tier) == ("a0000", 0) else 1.0

    run_dir = tmp_path / "run"
    fleet = PruningFleet(run_dir, plan(2, "synch = false"), duration, score)
    fleet.run()
    exploits = {(e.agent, e.tier): e for e in fleet.fleet.store.lineage()}
    exploit = exploits["a0000", 0]
    assert exploit.source == "a0003" and exploit.applied
    source = run_dir / "jobs" / "a0003" / "checkpoints"
    assert not list(source.glob("step-000000001000-*"))  # pruned by its worker
    # a0000's worker for tier 1 resumed a0003's tier-0 weights.
    assert exploit.checkpoint.startswith("step-000000001000-")
    assert sorted(r.agent for r in fleet.fleet.store.results(2)) == ["a0000", "a0001", "a0002", "a0003"]
    # Every kept checkpoint is dropped once no agent can reach its boundary any more.
    assert not list(run_dir.glob("jobs/*/checkpoints/boundary-*"))


class FailingFleet(CheckpointingFleet):
    """a0000's tier-0 worker ends without an evaluation (a crash after its checkpoint): it fails there."""

    def finish(self, events: EventWriter, proc: FakeProcess, agent: str, tier: int) -> None:
        if (agent, tier) != ("a0000", 0):
            super().finish(events, proc, agent, tier)
            return
        events.started(pid=proc.pid, device="cpu", target_steps=self.plan.tiers[0].timesteps)
        events.finished(status="done", steps=self.plan.tiers[0].timesteps or 0)


def test_async_kept_checkpoints_are_dropped_when_the_last_agent_short_of_their_boundary_fails(tmp_path: Path) -> None:
    # a0000, the slowest in tier 0, fails there after the three others have passed boundary 0 and
    # boundary 1: nobody arrives at either again, and its failure alone says no one can.
    def duration(agent: str, tier: int) -> float:
        return 100.0 if (agent, tier) == ("a0000", 0) else 1.0

    run_dir = tmp_path / "run"
    fleet = FailingFleet(run_dir, plan(2, "synch = false"), duration, score)
    while not list(run_dir.glob("jobs/*/checkpoints/boundary-1")):
        fleet.step()
    assert list(run_dir.glob("jobs/*/checkpoints/boundary-0"))  # kept while a0000 may still reach it
    fleet.run()
    rows = {row.id: row for row in fleet.fleet.store.agents()}
    assert (rows["a0000"].status, rows["a0000"].tier) == ("failed", 0)
    assert sorted(r.agent for r in fleet.fleet.store.results(2)) == ["a0001", "a0002", "a0003"]
    assert not list(run_dir.glob("jobs/*/checkpoints/boundary-*"))


def test_an_async_exploit_resumes_the_copy_it_recorded(tmp_path: Path) -> None:
    def duration(agent: str, tier: int) -> float:
        return 100.0 if (agent, tier) == ("a0000", 0) else 1.0

    run_dir = tmp_path / "run"
    fleet = PruningFleet(run_dir, plan(2, "synch = false"), duration, score)
    while not fleet.fleet.lineage.get("a0000"):
        fleet.step()
    checkpoints = run_dir / "jobs" / "a0000" / "checkpoints"
    (copy,) = checkpoints_in(checkpoints)
    assert (copy / "model.zip").read_text() == "a0003 at 1000"
    assert (checkpoints / pbt.REPLACED_DIR).is_dir()


@pytest.mark.parametrize("synch", ["true", "false"])
def test_no_agent_exploits_before_the_burn_in(tmp_path: Path, synch: str) -> None:
    # Boundaries at 1,000 and 2,000 steps; a burn-in of 1,500 leaves only the second.
    fleet = CheckpointingFleet(tmp_path / "run", plan(2, f"synch = {synch}\nburn_in_period = 1500"),
                               lambda a, t: 1.0, score)  # fmt: skip
    fleet.run()
    exploits = fleet.fleet.store.lineage()
    assert exploits and {e.tier for e in exploits} == {1}
    assert all(e.source_steps >= 1500 for e in exploits)
    assert any("no exploit before step 1,500: the burn-in" in n for n in fleet.fleet.notices)


@pytest.mark.parametrize(("more", "says"), [
    ("synch = 0", "'pbt.synch' must be true (exploit once a tier is scored) or false (as each agent ends it), got 0"),
    ("burn_in_period = -5", "'pbt.burn_in_period' must be a whole number of steps >= 0, got -5"),
    ("burn_in_period = 2000", "'pbt.burn_in_period' 2,000 is at or past the last tier boundary (2,000 steps)"),
    ("schedule = 3", "'pbt.schedule' must be a list of tables, one per tier, each the same preset keys"),
    ("schedule = [{ learning_rate = 1e-3 }]", "'pbt.schedule' has 1 table(s) for 3 tier(s)"),
])  # fmt: skip
def test_a_bad_async_burn_in_or_schedule_key_is_one_line(more: str, says: str) -> None:
    with pytest.raises(PlanError) as info:
        parse_plan(tomllib.loads(plan(2, more)), "plan.toml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("plan.toml: ") and says in message


def test_the_plan_takes_synch_and_burn_in() -> None:
    settings = parse_plan(tomllib.loads(plan(2, "synch = false\nburn_in_period = 1000")), "plan.toml").pbt
    assert settings is not None and (settings.synch, settings.burn_in_period) == (False, 1000)
    default = parse_plan(tomllib.loads(plan()), "plan.toml").pbt
    assert default is not None and (default.synch, default.burn_in_period) == (True, 0)


def _ran(run_dir: Path) -> CheckpointingFleet:
    """A sync pbt fleet of 4 through 3 tiers, each agent scoring its index: the worst copies the best
    at each boundary."""
    fleet = CheckpointingFleet(run_dir, plan(), lambda a, t: 1.0, score)
    fleet.run()
    return fleet


def test_an_agents_schedule_follows_its_lineage_back_tier_by_tier(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fleet = _ran(run_dir)
    with_exploits = fleet.fleet.store.lineage()
    # a0000 copies a0003 at the end of tier 0; at the end of tier 1 it is a0003's equal or better,
    # and whoever is worst then copies.
    assert ("a0000", 0, "a0003") in {(e.agent, e.tier, e.source) for e in with_exploits}
    summary = fleet_summary(run_dir)
    assert summary is not None
    agents = {a.id: a for a in summary.agents}
    drawn = {f"a{draw:04d}": values for draw, (_trial, values) in fleet.fleet.store.draws().items()}
    for agent in agents.values():
        steps = agent.schedule
        assert [s.tier for s in steps] == [0, 1, 2]
        assert steps[-1].trained_by == agent.id
        for before, after in itertools.pairwise(steps):
            exploit = next((e for e in agent.lineage + agents[after.trained_by].lineage
                            if e.agent == after.trained_by and e.tier == before.tier), None)  # fmt: skip
            if exploit is None:  # it went on from its own checkpoint
                assert before.trained_by == after.trained_by and after.copied_from is None
            else:  # it copied the trainer of the tier before, and trained on with its explored values
                assert before.trained_by == after.copied_from == exploit.source
                assert after.values == {k: new for k, (_old, new) in exploit.changes.items()}
                assert before.values == {k: old for k, (old, _new) in exploit.changes.items()}
        assert steps[0].values == drawn[steps[0].trained_by]  # tier 0: a draw's own values
    # a0000, always the worst, copied a0003 (always the best) at both boundaries: its weights are
    # a0003's through tier 1, trained on by a0000 in tier 2.
    a0000 = agents["a0000"].schedule
    assert [(s.trained_by, s.copied_from, s.steps) for s in a0000] == [
        ("a0003", None, 1000), ("a0003", None, 2000), ("a0000", "a0003", 3000)]  # fmt: skip
    # report --json lists it, as docs/report.schema.json says.
    import jsonschema

    data = fleet_json(summary, run_dir)
    assert data is not None
    jsonschema.Draft202012Validator({"$defs": SCHEMA["$defs"], "$ref": "#/$defs/fleet"}).validate(data)
    listed = {a["id"]: a["schedule"] for a in data["agents"]}
    assert listed["a0000"][2] == {"tier": 2, "trained_by": "a0000", "copied_from": "a0003", "steps": 3000,
                                  "values": a0000[2].values}  # fmt: skip


def test_a_replay_trains_the_schedule_from_scratch_with_each_tiers_values(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _ran(run_dir)
    summary = fleet_summary(run_dir)
    assert summary is not None
    wanted = {a.id: a for a in summary.agents}["a0000"].schedule
    replayed, text = replay_text(run_dir, "a0000")
    assert replayed.promotion == "pbt" and replayed.search is None and len(replayed.agents) == 1
    assert replayed.agents[0].seed == {a.id: a.seed for a in summary.agents}[wanted[0].trained_by]
    assert "# tier 2: trained by a0000, resuming a0003's checkpoint" in text
    replay_dir = tmp_path / "replay"
    fleet = CheckpointingFleet(replay_dir, text, lambda a, t: 1.0, score)
    fleet.run()
    # Its one worker per tier trained with that tier's values; nothing was copied.
    presets = [load(p.request.args.preset) for p in launches(fleet, "a0000")]
    assert [p.learning_rate for p in presets] == [s.values["learning_rate"] for s in wanted]
    assert fleet.fleet.store.lineage() == []
    old, new = wanted[1].values["learning_rate"], wanted[2].values["learning_rate"]
    said = [n for n in fleet.fleet.notices if " as its schedule says: " in n]
    assert said == ["a0000 trains tier 1 as its schedule says: the same values",
                    f"a0000 trains tier 2 as its schedule says: learning_rate {old:.3g} -> {new:.3g}"]  # fmt: skip
    assert not (replay_dir / "jobs" / "a0000" / "checkpoints" / pbt.REPLACED_DIR).exists()
    again = fleet_summary(replay_dir)
    assert again is not None
    (agent,) = again.agents
    assert agent.status == "done" and [s.values for s in agent.schedule] == [s.values for s in wanted]


def test_replay_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    _ran(run_dir)
    cases: list[tuple[list[str], str]] = [
        (["a0009", str(run_dir)], "--replay a0009: no such agent in "),
        (["a0000", str(tmp_path / "nowhere")], "--replay " + str(tmp_path / "nowhere") + ": no fleet there"),
    ]
    sync = tmp_path / "sync"
    sync_plan = plan().replace('promotion = "pbt"', 'promotion = "sync"').replace("[pbt]", "[score]")
    sync_plan = sync_plan.split("[score]")[0].replace("timesteps = 1000", "timesteps = 1000\npromote = 2").replace(
        "timesteps = 2000", "timesteps = 2000\npromote = 1")  # fmt: skip
    CheckpointingFleet(sync, sync_plan, lambda a, t: 1.0, score).run()
    cases.append((["a0000", str(sync)], "its fleet is promoted by sync, not a pbt search"))
    for args, says in cases:
        assert main(["fleet", "--replay", *args, "--headless"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("cockpit fleet: error: ") and says in err, err
    with pytest.raises(ReplayError):
        replay_text(sync, "a0000")
    assert main(["fleet", str(tmp_path / "plan.toml"), "--replay", "a0000", str(run_dir)]) == 2
    assert "one of the three" in capsys.readouterr().err


def test_fleet_help_teaches_replay(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["fleet", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--replay AGENT RUN_DIR" in out and "PopulationBasedTrainingReplay" in out
    assert "cockpit fleet --replay a0003 runs/" in out


def test_an_async_source_that_exploited_on_arriving_is_copied_with_the_values_it_trained_with(tmp_path: Path) -> None:
    # All four start at once and reach boundary 0 in the order a0003, a0002, a0000, a0001. a0002
    # arrives second, is the bottom of two and copies a0003; a0001 arrives last, is the bottom of
    # four with a0000 (quantile 0.5: two and two) and copies a0002 (this seed's draw): its own tier-0
    # checkpoint, trained with its draw's values, not with those it took from a0003 since.
    def duration(agent: str, tier: int) -> float:
        return {"a0003": 1.0, "a0002": 2.0, "a0000": 3.0, "a0001": 4.0}[agent] if tier == 0 else 1.0

    text = plan(4, "synch = false").replace("quantile = 0.25", "quantile = 0.5").replace("seed = 3", "seed = 0")
    run_dir = tmp_path / "run"
    fleet = CheckpointingFleet(run_dir, text, duration, score)
    fleet.run()
    exploits = {(e.agent, e.tier): e for e in fleet.fleet.store.lineage()}
    assert exploits["a0002", 0].source == "a0003"
    late = exploits["a0001", 0]
    assert late.source == "a0002"
    drawn = {draw: values["learning_rate"] for draw, (_trial, values) in fleet.fleet.store.draws().items()}
    took = exploits["a0002", 0].changes["learning_rate"][1]
    assert late.changes["learning_rate"][0] == drawn[2] != took
    assert late.checkpoint.startswith("step-000000001000-")
    replaced = run_dir / "jobs" / "a0001" / "checkpoints" / pbt.REPLACED_DIR
    assert replaced.is_dir()
    first = launches(fleet, "a0001")[1]  # its tier-1 worker: a0002's draw's rate, explored
    assert load(first.request.args.preset).learning_rate == late.changes["learning_rate"][1]
