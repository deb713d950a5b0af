"""Fleet plans: validation of every kind of bad input, the agent matrix and tier funnel, and the
dry-run's projection from measured costs (`cockpit fleet PLAN --dry-run`)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from cockpit.cli import main
from cockpit.contract.costs import Costs
from cockpit.contract.fleetplan import FleetPlan, PlanError, load_plan
from cockpit.contract.presets import load
from cockpit.contract.workerargs import EVAL_ENVS_MAX, eval_envs
from cockpit.core.fleet.projection import project
from cockpit.core.sizing.cost_probe import measured_costs
from cockpit.core.sizing.overlap import Speed, speed_of

GOOD = """
name = "screen"
jobs = 2
rate_usd_per_h = 2.0
promotion = "sync"

[agents]
env = ["CartPole-v1", "Acrobot-v1"]
preset = ["cartpole"]
seeds = 10
[agents.overrides]
learning_rate = [1e-3, 3e-4]

[[tiers]]
timesteps = 4_000
promote = 0.5
[[tiers]]
timesteps = 8_000
promote = 3
[[tiers]]
timesteps = 20_000

[score]
episodes = 5
"""


def plan_file(tmp_path: Path, text: str = GOOD) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def cache_costs(plan: FleetPlan) -> None:
    """Put measured costs for every preset of `plan` in the (test's) cache, as a probe would."""
    record = {"device": "cpu", "step_overhead_us": 400.0, "env_policy_us": 10.0, "env_step_us": 5.0,
              "train_sample_us": 2.0, "train_epoch_us": 300.0, "setup_s": 0.5, "import_s": 6.0,
              "episode_steps_max": 500, "busy_factor": 1.0, "shared_factor": 1.0,
          "train_threads": 2, "train_speedup": 0.94}  # fmt: skip
    for preset in {agent.preset for agent in plan.agents}:
        measured_costs(preset, None, probe=lambda p, d: record)


def forbid_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything starts a process (a probe, a worker)."""

    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_process)


def test_a_plan_expands_its_matrix_and_funnel(tmp_path: Path) -> None:
    plan = load_plan(plan_file(tmp_path))
    assert len(plan.agents) == 2 * 1 * 2 * 10  # envs x presets x learning rates x seeds
    assert plan.funnel() == [40, 20, 3]
    first = plan.agents[0]
    assert (first.env, first.seed, first.preset.learning_rate, first.preset.env) == ("CartPole-v1", 0, 1e-3,
                                                                                      "CartPole-v1")  # fmt: skip
    assert plan.agents[-1].preset.env == "Acrobot-v1" and plan.agents[-1].preset.learning_rate == 3e-4
    assert len({a.id for a in plan.agents}) == 40 and plan.score_episodes == 5


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (("jobs = 2", "jobs = 0"), "'jobs' must be a positive integer"),
        (("jobs = 2", "jobs = 2\nslots = 4"), "unknown key 'slots'"),
        (("rate_usd_per_h = 2.0", "rate_usd_per_h = -1"), "'rate_usd_per_h'"),
        (('promotion = "sync"', 'promotion = "lazy"'), "'promotion' must be 'sync', 'async' or 'pbt'"),
        (('name = "screen"', 'name = "../up"'), "'name'"),
        (('env = ["CartPole-v1", "Acrobot-v1"]', 'env = ["CartPol-v1"]'), "'agents.env' 'CartPol-v1'"),
        (('preset = ["cartpole"]', 'preset = ["nope"]'), "'agents.preset'"),
        (("seeds = 10", "seeds = 0"), "'agents.seeds'"),
        (("seeds = 10", "seeds = [1, 1]"), "'agents.seeds' lists a seed twice"),
        (("learning_rate = [1e-3, 3e-4]", "lr = [1e-3]"), "unknown key 'agents.overrides.lr'"),
        (("learning_rate = [1e-3, 3e-4]", "learning_rate = 1e-3"), "'agents.overrides.learning_rate' must be a"),
        (("learning_rate = [1e-3, 3e-4]", "n_epochs = [0]"), "'n_epochs' must be a positive integer"),
        (("learning_rate = [1e-3, 3e-4]", "batch_size = [100]"), "'batch_size' 100 must divide"),
        (("timesteps = 8_000", "timesteps = 3_000"), "'tiers[1].timesteps' 3,000 must be more than"),
        (("promote = 0.5", "promote = 1.5"), "'tiers[0].promote' must be a fraction in (0, 1]"),
        (("promote = 0.5", "promote = 0"), "'tiers[0].promote' must be a fraction"),
        (("promote = 3", "promote = 0.01"), "'tiers[1].promote' promotes no one of the 20 agents"),
        (("timesteps = 20_000", "timesteps = 20_000\npromote = 2"), "'tiers[2].promote': the last tier"),
        (("promote = 3\n", ""), "'tiers[1].promote' is missing"),
        (("[score]\nepisodes = 5", "[score]\nepisodes = 0"), "'score.episodes'"),
        (("[agents]", "[agent]"), "unknown key 'agent'"),
        (("episodes = 5\n", "episodes = 5\n[video]\ntop = -1\n"), "'[video]' takes top = K"),
        (("episodes = 5\n", 'episodes = 5\n[video]\ntop = "3"\n'), "'[video]' takes top = K"),
        (("episodes = 5\n", "episodes = 5\n[video]\nbest = 3\n"), "'[video]' takes top = K"),
    ],
)
def test_every_bad_input_is_one_line_naming_the_file_and_key(tmp_path: Path, change: tuple[str, str],
                                                             names: str) -> None:  # fmt: skip
    old, new = change
    assert old in GOOD
    path = plan_file(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(PlanError) as raised:
        load_plan(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and "\n" not in message and names in message, message


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = plan_file(tmp_path, GOOD.replace("jobs = 2", "jobs = -1").replace('"sync"', '"never"'))
    with pytest.raises(PlanError, match=r"'jobs'.*; .*'promotion'"):
        load_plan(path)


def test_unreadable_plans(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="no such plan file"):
        load_plan(tmp_path / "missing.toml")
    with pytest.raises(PlanError, match="invalid TOML"):
        load_plan(plan_file(tmp_path, "jobs = ["))


def test_a_bad_plan_exits_2_with_one_line_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = plan_file(tmp_path, GOOD.replace("jobs = 2", "jobs = 0"))
    assert main(["fleet", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'jobs'" in err and str(path) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.toml"]


def test_a_plan_over_the_agent_cap_is_refused_in_one_line_before_its_matrix_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 million seeds once ran the dry run for 103 s up to 5.9 GB and ended in a MemoryError: the
    count is taken from the lists' lengths, so nothing of the matrix is listed before the refusal."""
    from cockpit.contract import fleetplan

    monkeypatch.chdir(tmp_path)
    path = plan_file(tmp_path, GOOD.replace("seeds = 10", "seeds = 30_000_000"))
    built: list[object] = []
    monkeypatch.setattr(fleetplan, "_seeds", lambda value: built.append(value) or ([], []))
    assert main(["fleet", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"cockpit fleet: error: {path}: the plan makes 120,000,000 agents ('agents.env' 2 x 'agents.overrides' 2 x "
        "'agents.seeds' 30,000,000); a plan may make at most 10,000: split it into fleets\n"
    )
    assert built == [] and sorted(p.name for p in tmp_path.iterdir()) == ["plan.toml"]


@pytest.mark.parametrize(
    ("seeds", "samples", "refused"), [(2_500, None, False), (2_501, None, True), (125, 20, False), (125, 21, True)]
)
def test_the_agent_cap_counts_envs_grid_seeds_and_search_draws(
    tmp_path: Path, seeds: int, samples: int | None, refused: bool
) -> None:
    """The cap is on the whole matrix: 2 envs x 2 learning rates x seeds (x draws), 10,000 allowed."""
    from cockpit.contract.fleetplan import MAX_AGENTS

    text = GOOD.replace("seeds = 10", f"seeds = {seeds}")
    if samples is not None:
        text = text.replace(
            "[[tiers]]",
            f"[agents.search]\nsamples = {samples}\nent_coef = {{ loguniform = [1e-4, 1e-2] }}\n\n[[tiers]]",
            1,
        )
    path = plan_file(tmp_path, text)
    if refused:
        with pytest.raises(PlanError, match=f"a plan may make at most {MAX_AGENTS:,}"):
            load_plan(path)
    else:
        assert len(load_plan(path).agents) == 4 * seeds * (samples or 1) == MAX_AGENTS


def test_the_projection_follows_the_documented_model(tmp_path: Path) -> None:
    plan = load_plan(plan_file(tmp_path))
    # One job steps at 1e6 / sample_us: 400 / 8 + 10 + 20 x 2 = 100 us a sample -> 10,000 SPS; two
    # slots on 2 cores with a CPU job's 1 core each run 2 jobs' worth: the fleet does 20,000 SPS.
    costs = Costs("cpu", step_overhead_us=400.0, env_policy_us=10.0, env_step_us=5.0, train_sample_us=2.0)
    speeds = {}

    def speed(preset):  # type: ignore[no-untyped-def]
        speeds[preset] = speed_of(preset, costs, 2, 2)
        return speeds[preset]

    projection = project(plan, speed)
    assert all(s.sps == pytest.approx(10_000) and s.fleet_sps == pytest.approx(20_000) for s in speeds.values())
    # tier 0: 40 agents x 4,000; tier 1: 20 x 4,000 more (they resume); tier 2: 3 x 12,000 more.
    assert [(s.agents, s.each, s.amount) for s in projection.tiers] == [
        (40, 4_000, 160_000), (20, 4_000, 80_000), (3, 12_000, 36_000),
    ]  # fmt: skip
    # Each agent holds a slot for its steps at 10,000 SPS; a sync tier takes whole rounds of 2
    # agents: 20 rounds of 0.4 s, 10 of 0.4 s, and 2 of 1.2 s (the third agent's slot-mate idles).
    assert [s.seconds for s in projection.tiers] == pytest.approx([8.0, 4.0, 2.4])
    assert projection.total.steps == 276_000 and projection.total.seconds == pytest.approx(14.4)
    assert projection.total.cost_usd == pytest.approx(14.4 / 3600 * 2.0)
    assert projection.all_to_last.steps == 40 * 20_000 and projection.all_to_last.seconds == pytest.approx(40.0)
    assert projection.saving == pytest.approx(1 - 276_000 / 800_000)


def test_the_projection_costs_each_agents_setup_scoring_and_the_workers_start_ups(tmp_path: Path) -> None:
    plan = load_plan(plan_file(tmp_path))
    costs = Costs("cpu", step_overhead_us=400.0, env_policy_us=10.0, env_step_us=5.0, train_sample_us=2.0,
                  setup_s=0.5, import_s=6.0, episode_steps_max=500)  # fmt: skip
    speed = speed_of(load("cartpole"), costs, 2, 2, score_episodes=plan.score_episodes)
    # 5 episodes on 5 envs at once, one each, at most 500 steps of 400 + 5 x 10 us
    assert speed.score_s == pytest.approx(500 * 450e-6) and speed.setup_s == 0.5 and speed.start_s == 6.0
    projection = project(plan, lambda preset: speed)
    # per agent and tier: setup, scoring, and 1/25 of a fresh worker's start (a served worker
    # retires after 25 jobs); the first tier also waits for the first workers' 6 s start.
    job_s = 0.5 + 0.225 + 6.0 / 25
    assert [s.seconds for s in projection.tiers] == pytest.approx(
        [20 * (0.4 + job_s) + 6.0, 10 * (0.4 + job_s), 2 * (1.2 + job_s)]
    )
    assert projection.all_to_last.seconds == pytest.approx(20 * (2.0 + job_s) + 6.0)
    async_plan = dataclasses.replace(plan, promotion="async")  # no rounds: 3 agents on 2 slots
    assert project(async_plan, lambda preset: speed).tiers[2].seconds == pytest.approx(1.5 * (1.2 + job_s))


def test_scoring_plays_every_episode_at_once_up_to_a_bound_of_envs() -> None:
    costs = Costs("cpu", step_overhead_us=400.0, env_policy_us=10.0, env_step_us=5.0, train_sample_us=2.0,
                  episode_steps_max=500)  # fmt: skip
    cartpole = load("cartpole")  # trains on 8 envs
    # 10 episodes: one round on 10 envs (not two on 8), at most 500 steps of 400 + 10 x 10 us
    assert eval_envs(10, cartpole.n_envs) == 10
    assert speed_of(cartpole, costs, 2, 2, score_episodes=10).score_s == pytest.approx(500 * 500e-6)
    # 40 episodes: 16 envs at once, three rounds
    assert eval_envs(40, cartpole.n_envs) == EVAL_ENVS_MAX == 16
    assert speed_of(cartpole, costs, 2, 2, score_episodes=40).score_s == pytest.approx(3 * 500 * 560e-6)
    assert eval_envs(40, 64) == 40  # a preset on more envs scores on as many


def test_an_env_without_an_episode_limit_has_no_scoring_bound(tmp_path: Path) -> None:
    costs = Costs("cpu", 400.0, 10.0, 5.0, 2.0, episode_steps_max=0)
    assert speed_of(load("cartpole"), costs, 2, 2, score_episodes=10).score_s == 0.0


def test_an_unmeasured_speed_leaves_time_and_cost_unknown(tmp_path: Path) -> None:
    projection = project(load_plan(plan_file(tmp_path)), lambda preset: None)
    assert projection.total.seconds is None and projection.total.cost_usd is None
    assert projection.total.steps == 276_000


def test_more_slots_than_cores_run_no_faster_than_the_cores(tmp_path: Path) -> None:
    costs = Costs("cpu", 400.0, 10.0, 5.0, 2.0)
    speed = speed_of(load("cartpole"), costs, slots=8, physical_cores=2)
    assert isinstance(speed, Speed) and speed.parallel == 2.0


def test_with_costs_cached_a_dry_run_starts_no_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plan = load_plan(plan_file(tmp_path))
    cache_costs(plan)

    forbid_processes(monkeypatch)
    assert main(["fleet", str(tmp_path / "plan.toml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "tier 2" in out and "all to the last tier" in out and "66% saved" in out and "$" in out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "give a PLAN.toml, or --resume RUN_DIR"),
        (["PLAN", "--resume", "RUN"], "give a PLAN.toml, or --resume RUN_DIR"),
        (["--resume", "RUN"], "no fleet there"),
        (["--resume", "RUN", "--dry-run"], "drop --dry-run"),
    ],
)
def test_what_to_run_is_checked_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    plan, run = plan_file(tmp_path), tmp_path / "run"
    run.mkdir()
    argv = [str(plan) if a == "PLAN" else str(run) if a == "RUN" else a for a in argv]
    assert main(["fleet", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert list(run.iterdir()) == []  # nothing started, nothing written


def test_a_500_agent_dry_run_prints_the_cost_models_figures_and_starts_no_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from cockpit.commands.fleet import _duration
    from cockpit.core.sizing.starting_point import this_machine

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plan = load_plan(plan_file(tmp_path, GOOD.replace("seeds = 10", "seeds = 125")))
    assert len(plan.agents) == 500
    cache_costs(plan)
    costs = Costs("cpu", 400.0, 10.0, 5.0, 2.0, 300.0, 0.5, 6.0, 500)
    cores = this_machine().physical_cores
    expected = project(plan, lambda preset: speed_of(preset, costs, plan.jobs, cores, score_episodes=5))

    forbid_processes(monkeypatch)
    assert main(["fleet", str(tmp_path / "plan.toml"), "--dry-run", "--rate", "2"]) == 0
    rows = {line.split()[0] + (" " + line.split()[1] if line.split()[0] == "tier" else ""): line
            for line in capsys.readouterr().out.splitlines() if line.strip()}  # fmt: skip
    for stage in (*expected.tiers, expected.total):
        row = rows[stage.label].split()
        assert f"{stage.agents:,}" in row and f"{stage.amount:,}" in row
        assert _duration(stage.seconds) in row and f"${stage.cost_usd:,.2f}" in row
    assert expected.total.agents == 500 and expected.tiers[1].agents == 250 and expected.tiers[2].agents == 3


def test_from_a_finished_run_the_dry_run_uses_its_measured_speed_and_probes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The golden run trained cartpole on CartPole-v1, 2 jobs at a time at 555.4, 555.8 and 789.5
    SPS each: a plan of that preset is costed at their mean per job, 2 jobs at once at most."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing cached: a probe would run

    forbid_processes(monkeypatch)
    golden = Path(__file__).parent / "data" / "run-v1"
    text = GOOD.replace('env = ["CartPole-v1", "Acrobot-v1"]', 'env = "CartPole-v1"')
    plan = load_plan(plan_file(tmp_path, text))
    assert main(["fleet", str(tmp_path / "plan.toml"), "--dry-run", "--from", str(golden), "--jobs", "4"]) == 0
    out = capsys.readouterr().out
    per_job = (555.4 + 555.8 + 789.5) / 3
    assert f"{per_job:,.0f} SPS per job, 2 at once" in out and str(golden) in out
    from cockpit.commands.fleet import _duration

    total = project(dataclasses.replace(plan, jobs=4), lambda p: Speed(p, per_job, 2.0)).total
    assert _duration(total.seconds) in next(line for line in out.splitlines() if line.strip().startswith("total"))


def test_from_a_run_of_another_preset_leaves_the_speed_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    golden = Path(__file__).parent / "data" / "run-v1"
    text = GOOD.replace('env = ["CartPole-v1", "Acrobot-v1"]', 'env = "Acrobot-v1"')
    plan_file(tmp_path, text)
    assert main(["fleet", str(tmp_path / "plan.toml"), "--dry-run", "--from", str(golden)]) == 0
    out = capsys.readouterr().out
    assert "unknown" in out and f"{golden} measured no run of it" in out


def test_from_needs_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", str(plan_file(tmp_path)), "--dry-run", "--from", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "--from" in err and "not a run directory" in err and len(err.strip().splitlines()) == 1


def test_a_plans_video_table_asks_for_clips_of_its_top_agents(tmp_path: Path) -> None:
    assert load_plan(plan_file(tmp_path)).video_top == 0  # no [video]: no clips
    assert load_plan(plan_file(tmp_path, GOOD + "\n[video]\ntop = 3\n")).video_top == 3
