"""A fleet on a scripted supervisor: promotion, durability and slots, with a fake clock.

The workers are scripted (`FakeLauncher`): each agent's tier takes a set time, then its "worker"
writes the events a real one writes (`started`, `evaluated`, `finished`) and exits 0. Everything
else is the product: the supervisor, `FleetRun`, and fleet.db on disk.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cockpit.contract.events import EVENTS_FILE, EventWriter
from cockpit.contract.fleetplan import parse_plan
from cockpit.contract.states import JobState
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.promotion import async_promotions
from cockpit.core.fleet.run import FleetRun
from cockpit.core.fleet.store import FleetStore
from cockpit.core.machine.host import thread_budget
from cockpit.core.supervise.supervisor import JobTemplate, Supervisor
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher, FakeProcess

TICK = 0.2


def plan_text(agents: int, promotion: str, slots: int = 2, tiers: tuple[tuple[int, float | None], ...] = ()) -> str:
    tiers = tiers or ((1000, 0.5), (2000, 0.5), (4000, None))
    tables = "".join(f"[[tiers]]\ntimesteps = {t}\n" + (f"promote = {p}\n" if p is not None else "") for t, p in tiers)
    return (f'name = "scripted"\njobs = {slots}\npromotion = "{promotion}"\nrate_usd_per_h = 3.6\n'
            f'[agents]\nenv = "CartPole-v1"\npreset = "cartpole"\nseeds = {agents}\n{tables}')  # fmt: skip


class ScriptedFleet:
    """A fleet whose workers take `duration(agent, tier)` seconds and score `score(agent, tier)`."""

    def __init__(self, run_dir: Path, text: str, duration: Callable[[str, int], float],
                 score: Callable[[str, int], float], *, resume: bool = False) -> None:  # fmt: skip
        self.clock, self.launcher = FakeClock(), FakeLauncher()
        self.plan = parse_plan(tomllib.loads(text), "plan.toml")
        self.sup = Supervisor(run_dir=run_dir, template=JobTemplate("cartpole", "CartPole-v1", 1000), seeds=(),
                              slots=self.plan.jobs, launcher=self.launcher, budget=thread_budget(self.plan.jobs, 2),
                              clock=self.clock)  # fmt: skip
        if resume:
            self.fleet = FleetRun.resume(self.sup, clock=self.clock)
        else:
            self.fleet = FleetRun.new(self.plan, text, self.sup, clock=self.clock)
        self.duration, self.score = duration, score
        self.started: dict[int, float] = {}
        self.idle_with_work: list[str] = []

    def tier_of(self, proc: FakeProcess) -> int:
        targets = [t.timesteps for t in self.plan.tiers]
        return targets.index(proc.request.args.timesteps or 0)

    def step(self) -> None:
        """One session tick: the supervisor (and the fleet inside it), then the scripted workers."""
        self.sup.tick()
        self.check_no_idle_slot()
        for proc in self.launcher.processes:
            if proc.exit_code is not None:
                continue
            started = self.started.setdefault(proc.pid, self.clock.t)
            agent, tier = proc.request.job_id, self.tier_of(proc)
            if self.clock.t - started >= self.duration(agent, tier):
                events = EventWriter(proc.request.args.job_dir / EVENTS_FILE)
                self.finish(events, proc, agent, tier)
                events.close()
                proc.exit_code = 0
        self.clock.sleep(TICK)

    def finish(self, events: EventWriter, proc: FakeProcess, agent: str, tier: int) -> None:
        """Write what a worker that trained `agent` through `tier` writes."""
        target = self.plan.tiers[tier].timesteps or 0
        before = self.plan.tiers[tier - 1].timesteps if tier else None
        events.started(pid=proc.pid, device="cpu", resumed_from_step=before, target_steps=target)
        events.progress(num_timesteps=target, ep_rew_mean=self.score(agent, tier) / 2)
        events.evaluated(step=target, mean_reward=self.score(agent, tier), std_reward=0.0, episodes=5, seed=1)
        events.finished(status="done", steps=target)

    def check_no_idle_slot(self) -> None:
        """Record any moment a slot is free while work could start: an agent not started, or one
        ASHA would promote (recomputed from fleet.db, independently of FleetRun) without a job."""
        busy = sum(1 for j in self.sup.jobs.values() if j.state.holds_slot)
        if busy >= self.sup.slots:
            return
        store = FleetStore(self.fleet.store.path, read_only=True)
        try:
            waiting = [a.id for a in store.agents() if a.status == "waiting"]
            promoted = store.promotions()
            promotable = []
            for tier in range(len(self.plan.tiers) - 1):
                results = store.results(tier)
                fraction = self.fleet._fractions[tier]
                promotable += async_promotions(results, fraction, promoted.get(tier, set()))
                for agent in promoted.get(tier, set()):
                    job = self.sup.jobs[agent]
                    if job.target < self.plan.tiers[tier + 1].timesteps:
                        promotable.append(agent)  # promoted, but its job is not on the next tier yet
        finally:
            store.close()
        if waiting or promotable:
            self.idle_with_work.append(f"t={self.clock.t:.1f}: {busy} busy, waiting {waiting[:3]}, {promotable}")

    def run(self, limit_s: float = 10_000) -> float:
        """Tick until the fleet is finished; returns the scripted seconds it took."""
        begin = self.clock.t
        while not self.sup.finished:
            self.step()
            assert self.clock.t - begin < limit_s, "the fleet never finished"
        return self.clock.t - begin


def outcome(fleet: ScriptedFleet) -> tuple[object, ...]:
    """What a fleet decided: every score (agent, tier, steps, score) and every tier's promotions."""
    store = fleet.fleet.store
    return (sorted((r.agent, r.tier, r.steps, r.score) for r in store.results()),
            {t: sorted(a) for t, a in store.promotions().items()})  # fmt: skip


def uneven(agent: str, tier: int) -> float:
    """Stragglers: every fifth agent takes five times as long."""
    return (50.0 if int(agent[1:]) % 5 == 0 else 10.0) * (tier + 1)


def by_index(agent: str, tier: int) -> float:
    return float((int(agent[1:]) * 37) % 101) + tier  # a fixed, shuffled order of quality


def first_best(agent: str, tier: int) -> float:
    """The earlier an agent starts, the better it scores: ASHA's early promotions are sync's."""
    return float(100 - int(agent[1:]))


def test_async_never_idles_a_slot_while_promotable_work_exists(tmp_path: Path) -> None:
    fleet = ScriptedFleet(tmp_path, plan_text(16, "async", slots=3), uneven, by_index)
    fleet.run()
    assert fleet.idle_with_work == []
    assert all(j.state is JobState.DONE for j in fleet.sup.jobs.values())
    assert fleet.fleet.done
    # Every tier promoted at least what sync would have: ASHA never promotes fewer.
    promoted = fleet.fleet.store.promotions()
    assert len(promoted[0]) >= 8 and len(promoted[1]) >= len(promoted[0]) // 2


def test_sync_promotes_exactly_the_top_share_of_each_complete_tier(tmp_path: Path) -> None:
    fleet = ScriptedFleet(tmp_path, plan_text(16, "sync", slots=3), uneven, by_index)
    fleet.run()
    store = fleet.fleet.store
    promoted = store.promotions()
    tier0 = sorted(store.results(0), key=lambda r: -r.score)
    assert len(tier0) == 16 and promoted[0] == {r.agent for r in tier0[:8]}
    tier1 = sorted(store.results(1), key=lambda r: -r.score)
    assert {r.agent for r in tier1} == promoted[0] and promoted[1] == {r.agent for r in tier1[:4]}
    assert {r.agent for r in store.results(2)} == promoted[1]
    # Each promoted agent's job went on from its tier's steps: the supervisor extended it.
    for agent in promoted[1]:
        assert fleet.sup.jobs[agent].target == 4000


def test_sync_waits_for_stragglers_where_async_does_not(tmp_path: Path) -> None:
    # Wall time alone does not show the waits: ASHA's extra promotions cost steps too (on
    # `by_index` they outweigh the waits). Where both rules promote the same agents, the time
    # sync takes beyond async is its slots waiting for each tier's stragglers.
    sync = ScriptedFleet(tmp_path / "sync", plan_text(16, "sync", slots=3), uneven, first_best)
    async_fleet = ScriptedFleet(tmp_path / "async", plan_text(16, "async", slots=3), uneven, first_best)
    sync_s, async_s = sync.run(), async_fleet.run()
    assert async_fleet.fleet.store.promotions() == sync.fleet.store.promotions()
    assert async_s < sync_s


def test_the_fleet_view_counts_the_funnel_and_costs_the_time(tmp_path: Path) -> None:
    fleet = ScriptedFleet(tmp_path, plan_text(8, "sync"), lambda a, t: 10.0, by_index)
    elapsed = fleet.run()
    view = fleet.fleet.view(live_sps=None, elapsed_s=elapsed)
    assert [(t.planned, t.entered, t.finished, t.promoted, t.culled) for t in view.tiers] == [
        (8, 8, 8, 4, 4), (4, 4, 4, 2, 2), (2, 2, 2, 0, 0)
    ]  # fmt: skip
    assert view.eta_s == 0.0
    assert view.spent_usd == pytest.approx(elapsed / 3600 * 3.6)
    # The two agents of the last tier lead, best first, then tier 1's culled agents.
    last = sorted(fleet.fleet.store.results(2), key=lambda r: -r.score)
    assert [(r.agent, r.tier, r.score) for r in view.leaders[:2]] == [(r.agent, 2, r.score) for r in last]
    assert [r.tier for r in view.leaders[2:4]] == [1, 1]


def test_an_async_fleets_view_counts_its_unpromoted_agents_culled_once_the_fleet_is_done(tmp_path: Path) -> None:
    # Async decides no tier complete: only the fleet's end says the agents not promoted never will be.
    fleet = ScriptedFleet(tmp_path, plan_text(8, "async"), lambda a, t: 10.0, by_index)
    while not fleet.fleet.store.results(0):
        fleet.step()
    assert [t.culled for t in fleet.fleet.view(None, 1.0).tiers] == [0, 0, 0]  # anyone may yet be promoted
    fleet.run()
    view = fleet.fleet.view(None, 1.0)
    assert fleet.fleet.done
    assert [t.culled for t in view.tiers] == [t.finished - t.promoted for t in view.tiers[:-1]] + [0]
    assert view.tiers[0].culled > 0


@pytest.mark.parametrize("stop_after_s", [5.0, 12.0, 31.0, 47.0])
def test_a_fleet_rebuilt_from_fleet_db_ends_like_one_never_stopped(tmp_path: Path, stop_after_s: float) -> None:
    """The cockpit vanishes (its in-memory state is dropped mid-run: what kill -9 leaves) and a new
    one resumes from fleet.db and the job dirs: same results, promotions and no tier trained twice."""
    reference = ScriptedFleet(tmp_path / "whole", plan_text(8, "sync"), lambda a, t: 10.0, by_index)
    reference.run()
    first = ScriptedFleet(tmp_path / "killed", plan_text(8, "sync"), lambda a, t: 10.0, by_index)
    while first.clock.t - 1_800_000_000.0 < stop_after_s:
        first.step()
    first.fleet.store.close()  # nothing else of the first cockpit survives
    second = ScriptedFleet(tmp_path / "killed", plan_text(8, "sync"), lambda a, t: 10.0, by_index, resume=True)
    second.run()
    assert outcome(second) == outcome(reference)
    # No agent trained a tier twice: per agent and tier, one worker ran it to its end. (A worker
    # killed with the first cockpit, before its events, ran again; its tier had not ended.)
    finished_runs: dict[tuple[str, int], int] = {}
    for fleet in (first, second):
        for proc in fleet.launcher.processes:
            if proc.exit_code == 0:
                key = (proc.request.job_id, fleet.tier_of(proc))
                finished_runs[key] = finished_runs.get(key, 0) + 1
    assert all(count == 1 for count in finished_runs.values()), finished_runs


def test_an_agent_with_overrides_is_shown_by_the_preset_named_and_its_overrides(tmp_path: Path) -> None:
    text = plan_text(2, "sync", tiers=((1000, None),)).replace(
        "seeds = 2\n", "seeds = 1\n[agents.overrides]\nlearning_rate = [1e-3, 3e-4]\n"
    )
    fleet = ScriptedFleet(tmp_path, text, lambda a, t: 10.0, by_index)
    fleet.step()
    # The worker still gets the file written for the overrides; the views get what the plan named.
    assert all(job.preset_arg and job.preset_arg.endswith(".toml") for job in fleet.sup.jobs.values())
    views = {job.id: (job.preset, job.overrides) for job in fleet.sup.snapshot(None).jobs}
    assert views == {"a0000": ("cartpole", (("learning_rate", "0.001"),)),
                     "a0001": ("cartpole", (("learning_rate", "0.0003"),))}  # fmt: skip


def test_a_full_disk_under_fleet_db_is_waited_out_and_the_fleet_ends_as_one_never_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    control = ScriptedFleet(tmp_path / "control", plan_text(6, "sync", slots=2), uneven, by_index)
    control.run()
    fleet = ScriptedFleet(tmp_path / "full", plan_text(6, "sync", slots=2), uneven, by_index)
    begin, refused = fleet.clock.t, [0]
    real = FleetStore._transaction

    @contextmanager
    def transaction(self: FleetStore) -> Iterator[sqlite3.Connection]:
        with real(self) as db:
            yield db
            if 15.0 <= fleet.clock.t - begin < 75.0:  # as SQLite's COMMIT on a full disk: refused
                refused[0] += 1
                raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(FleetStore, "_transaction", transaction)
    fleet.run()
    assert refused[0] > 1  # the fleet wrote (and was refused) more than once while the disk was full
    assert outcome(fleet) == outcome(control) and fleet.fleet.done
    full = [line for line in fleet.fleet.notices if line.startswith("fleet.db not updated")]
    assert full == ["fleet.db not updated (database or disk is full): the fleet goes on once there is room"]


def test_an_agent_whose_start_fleet_db_refused_waits_and_starts_once_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the start is refused: the agents' results went in, the next agents wait for room.
    control = ScriptedFleet(tmp_path / "control", plan_text(6, "sync", slots=2), uneven, by_index)
    control.run()
    fleet = ScriptedFleet(tmp_path / "full", plan_text(6, "sync", slots=2), uneven, by_index)
    begin, real = fleet.clock.t, FleetStore.start

    def start(self: FleetStore, agent: str, tier: int) -> None:
        if 5.0 <= fleet.clock.t - begin < 40.0:
            raise sqlite3.OperationalError("database or disk is full")
        real(self, agent, tier)

    monkeypatch.setattr(FleetStore, "start", start)
    fleet.run()
    assert outcome(fleet) == outcome(control) and fleet.fleet.done
    assert {a.id for a in fleet.fleet.store.agents()} == {f"a{i:04d}" for i in range(6)}
