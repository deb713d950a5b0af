"""A fleet plan in episodes (`episodes = 3_000` per tier): validation, the projection at a measured
episode length, workers given each tier's episode target, promotion and resume in episodes, and
the live ETA from the episode lengths the agents report as they learn."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.cli import main
from cockpit.contract.costs import Costs
from cockpit.contract.events import EVENTS_FILE, EventWriter
from cockpit.contract.fleetplan import PlanError, load_plan, parse_plan
from cockpit.contract.runrecord import ConfigRecord, HostRecord, JobRecord, RunRecord
from cockpit.contract.states import JobState, RunStatus
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.projection import episode_steps_from_record, project
from cockpit.core.sizing.overlap import speed_of
from tests.test_contract_fleetplan import cache_costs, forbid_processes
from tests.test_fleet_run import ScriptedFleet, by_index, outcome
from tests.test_supervise_supervisor import FakeProcess

EPISODES = (20, 40)


def plan_text(agents: int = 8, slots: int = 2, tiers: tuple[str, ...] = ("episodes = 20", "episodes = 40")) -> str:
    tables = "".join(f"[[tiers]]\n{t}\n" + ("promote = 0.5\n" if i < len(tiers) - 1 else "")
                     for i, t in enumerate(tiers))  # fmt: skip
    return (f'name = "eps"\njobs = {slots}\npromotion = "sync"\nrate_usd_per_h = 3.6\n'
            f'[agents]\nenv = "CartPole-v1"\npreset = "cartpole"\nseeds = {agents}\n{tables}')  # fmt: skip


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


# ----- the plan -----


def test_a_plan_in_episodes_has_episode_targets_and_the_same_funnel(tmp_path: Path) -> None:
    plan = load_plan(write(tmp_path, plan_text()))
    assert plan.unit == "episodes"
    assert [(t.episodes, t.timesteps, t.target) for t in plan.tiers] == [(20, None, 20), (40, None, 40)]
    assert plan.funnel() == [8, 4]


@pytest.mark.parametrize(
    ("tiers", "says"),
    [
        (("episodes = 20", "timesteps = 4_000"), "'tiers': give every tier 'timesteps' or every tier 'episodes'"),
        (("episodes = 40", "episodes = 20"), "'tiers[1].episodes' 20 must be more than the tier before it (40)"),
        (("episodes = 0", "episodes = 20"), "'tiers[0].episodes' must be a positive integer, got 0"),
        (("episodes = 2.5", "episodes = 20"), "'tiers[0].episodes' must be a positive integer, got 2.5"),
        (("episodes = 20\ntimesteps = 5", "episodes = 40"), "not some of each"),
    ],
)
def test_a_bad_tier_in_episodes_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiers: tuple[str, ...], says: str
) -> None:
    path = write(tmp_path, plan_text(tiers=tiers))
    with pytest.raises(PlanError) as refused:
        load_plan(path)
    assert str(refused.value).startswith(f"{path}: ") and says in str(refused.value)
    assert main(["fleet", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.toml"]  # nothing started


# ----- the projection -----

COSTS = Costs("cpu", step_overhead_us=400.0, env_policy_us=10.0, env_step_us=5.0, train_sample_us=2.0)


def test_the_projection_in_episodes_is_the_steps_projection_at_the_measured_episode_length(tmp_path: Path) -> None:
    in_episodes = load_plan(write(tmp_path, plan_text()))
    # 30 steps an episode: the same plan in steps is 600 then 1,200 steps.
    in_steps = parse_plan(tomllib.loads(plan_text(tiers=("timesteps = 600", "timesteps = 1200"))), "steps.toml")

    def speed(preset):  # type: ignore[no-untyped-def]
        return speed_of(preset, COSTS, 2, 2)

    episodes = project(in_episodes, speed, lambda env: 30.0 if env == "CartPole-v1" else None)
    steps = project(in_steps, speed)
    assert episodes.unit == "episodes" and steps.unit == "timesteps"
    assert [(s.agents, s.each, s.amount) for s in episodes.tiers] == [(8, 20, 160), (4, 20, 80)]
    assert [s.steps for s in episodes.tiers] == [s.steps for s in steps.tiers] == [4_800, 2_400]
    assert [s.seconds for s in episodes.tiers] == pytest.approx([s.seconds for s in steps.tiers])
    assert episodes.total.seconds == pytest.approx(steps.total.seconds)
    assert episodes.total.cost_usd == pytest.approx(steps.total.cost_usd)
    assert (episodes.total.amount, episodes.all_to_last.amount) == (240, 320)
    assert episodes.saving == pytest.approx(1 - 240 / 320)
    # Nothing measured an episode's length: the episodes are known, the steps, time and cost not.
    unknown = project(in_episodes, speed)
    assert unknown.total.amount == 240 and unknown.total.steps is None
    assert unknown.total.seconds is None and unknown.total.cost_usd is None


def test_a_runs_record_gives_its_envs_steps_per_episode() -> None:
    host = HostRecord(hostname="h", cpu_model="c", physical_cores=2, logical_cores=2, ram_gib=4.0, os="Linux")
    config = ConfigRecord(jobs=2, agents=2, preset="cartpole", env="CartPole-v1", timesteps=0, seed=0,
                          max_restarts=3, episodes=50)  # fmt: skip
    jobs = [JobRecord(id=f"00{i}", seed=i, status=JobState.DONE, steps=steps, target=0, restarts=0, checkpoints=1,
                      episodes=episodes) for i, (steps, episodes) in enumerate([(3_000, 50), (5_000, 50)])]  # fmt: skip
    record = RunRecord(command="cockpit run", status=RunStatus.DONE, started_at="x", updated_at="x", duration_s=1.0,
                       config=config, host=host, jobs=jobs)  # fmt: skip
    assert episode_steps_from_record("CartPole-v1", record) == pytest.approx(8_000 / 100)
    assert episode_steps_from_record("Acrobot-v1", record) is None
    older = RunRecord(command="cockpit run", status=RunStatus.DONE, started_at="x", updated_at="x", duration_s=1.0,
                      config=config, host=host, jobs=[JobRecord(id="000", seed=0, status=JobState.DONE, steps=10,
                                                                target=10, restarts=0, checkpoints=1)])  # fmt: skip
    assert episode_steps_from_record("CartPole-v1", older) is None  # it recorded no episodes


def test_a_dry_run_in_episodes_without_a_measured_length_says_so_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plan = load_plan(write(tmp_path, plan_text()))
    cache_costs(plan)
    forbid_processes(monkeypatch)
    assert main(["fleet", str(tmp_path / "plan.toml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "episodes each" in out and "the tiers train 240 episodes instead of 320: 25% saved" in out
    assert "CartPole-v1: no measured episode length, so no steps, time or cost" in out
    total = next(line for line in out.splitlines() if line.strip().startswith("total"))
    assert "240" in total and "unknown" in total


# ----- running it -----


class EpisodeFleet(ScriptedFleet):
    """`ScriptedFleet` whose workers train to episode targets: an agent's episodes take 20 steps
    each in tier 0 and 40 in tier 1 (it learns), and it ends a tier one episode past its target."""

    def tier_of(self, proc: FakeProcess) -> int:
        return [t.episodes for t in self.plan.tiers].index(proc.request.args.episodes)

    def check_no_idle_slot(self) -> None:
        pass  # async's idling is `test_fleet_run`'s; these plans are sync

    def finish(self, events: EventWriter, proc: FakeProcess, agent: str, tier: int) -> None:
        done = EPISODES[tier] + 1
        steps = 21 * 20 + (done - 21) * 40 if tier else done * 20
        events.started(pid=proc.pid, device="cpu", resumed_from_step=21 * 20 if tier else None,
                       target_episodes=EPISODES[tier], resumed_episodes=21 if tier else None)  # fmt: skip
        events.progress(num_timesteps=steps, episodes=done, ep_len_mean=20.0 * (tier + 1),
                        ep_rew_mean=self.score(agent, tier) / 2)  # fmt: skip
        events.evaluated(step=steps, mean_reward=self.score(agent, tier), std_reward=0.0, episodes=5, seed=1,
                         trained_episodes=done)  # fmt: skip
        events.finished(status="done", steps=steps)


def test_workers_train_to_each_tiers_episodes_and_the_promoted_resume_to_the_next(tmp_path: Path) -> None:
    fleet = EpisodeFleet(tmp_path, plan_text(), lambda a, t: 10.0, by_index)
    fleet.run()
    for proc in fleet.launcher.processes:
        assert proc.request.args.timesteps is None and proc.request.args.episodes in EPISODES
    store = fleet.fleet.store
    tier0 = sorted(store.results(0), key=lambda r: -r.score)
    assert len(tier0) == 8 and store.promotions() == {0: {r.agent for r in tier0[:4]}}
    assert sorted(r.agent for r in store.results(1)) == sorted(r.agent for r in tier0[:4])
    # The promoted went on with a second worker, given the next tier's episodes; the rest stopped.
    runs = {agent: [p.request.args.episodes for p in fleet.launcher.processes if p.request.job_id == agent]
            for agent in fleet.sup.jobs}  # fmt: skip
    assert all(runs[r.agent] == [20, 40] for r in tier0[:4]) and all(runs[r.agent] == [20] for r in tier0[4:])
    view = fleet.fleet.view(live_sps=None, elapsed_s=fleet.clock.t)
    assert [(t.episodes, t.timesteps, t.finished, t.promoted) for t in view.tiers] == [(20, None, 8, 4),
                                                                                        (40, None, 4, 0)]  # fmt: skip


@pytest.mark.parametrize("stop_after_s", [5.0, 12.0, 31.0, 47.0])
def test_resumed_in_episodes_no_tier_ends_on_an_earlier_tiers_score(tmp_path: Path, stop_after_s: float) -> None:
    """A promoted agent's events hold its previous tier's `evaluated`: resumed mid-tier, that score
    (at fewer episodes than this tier's) must not end this tier."""
    reference = EpisodeFleet(tmp_path / "whole", plan_text(), lambda a, t: 10.0, by_index)
    reference.run()
    first = EpisodeFleet(tmp_path / "killed", plan_text(), lambda a, t: 10.0, by_index)
    while first.clock.t - 1_800_000_000.0 < stop_after_s:
        first.step()
    first.fleet.store.close()
    second = EpisodeFleet(tmp_path / "killed", plan_text(), lambda a, t: 10.0, by_index, resume=True)
    second.run()
    assert outcome(second) == outcome(reference)


def test_the_eta_in_episodes_follows_the_measured_episode_lengths(tmp_path: Path) -> None:
    fleet = EpisodeFleet(tmp_path, plan_text(), lambda a, t: 1e9, by_index)  # nobody finishes
    for _ in range(3):
        fleet.step()
    running = [j for j in fleet.sup.jobs.values() if j.state.holds_slot]
    assert len(running) == 2
    # No episode measured yet: the steps the episodes take, and so the time, are unknown.
    assert [t.eta_s for t in fleet.fleet.view(live_sps=100.0, elapsed_s=1.0).tiers] == [None, None]

    def report(ep_len: float) -> list[float | None]:
        for job in running:
            EventWriter(job.job_dir / EVENTS_FILE).progress(num_timesteps=100, episodes=5, ep_len_mean=ep_len)
        fleet.step()
        return [t.eta_s for t in fleet.fleet.view(live_sps=100.0, elapsed_s=1.0).tiers]

    # Tier 0: the 2 running agents' 15 episodes left at their 20 steps, 6 waiting agents' 20 at the
    # tier's mean 20; tier 1 (nobody there yet: every agent's mean) adds 4 agents' 20 more episodes.
    assert report(20.0) == pytest.approx([(2 * 15 * 20 + 6 * 20 * 20) / 100, 30.0 + 4 * 20 * 20 / 100])
    # The episodes grew longer as they learned: the same episodes left take twice the steps.
    assert report(40.0) == pytest.approx([60.0, 60.0 + 4 * 20 * 40 / 100])
