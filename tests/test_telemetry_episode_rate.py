"""Episodes per hour and ETAs to an episode target, against a scripted worker whose episodes grow
longer as it learns: the supervisor's figures, as the TUI, headless lines and report --json show
them, and the same figures from a replay of the files."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from rich.console import Console

from cockpit.contract.events import EVENTS_FILE, EventWriter
from cockpit.contract.runspec import RestartPolicy
from cockpit.contract.states import JobState
from cockpit.core.feed.snapshot import JobView, RunState
from cockpit.core.machine.host import thread_budget
from cockpit.core.record.replay import _JobHistory  # the replay's per-job index, fed the same file
from cockpit.core.record.run_report import state_json
from cockpit.core.supervise.supervisor import JobTemplate, Supervisor
from cockpit.core.telemetry.throughput import job_eta, run_eta, steps_left
from cockpit.views.headless import job_line, jobs_table, run_line
from cockpit.views.tui.app import make_app
from cockpit.views.tui.jobs_table import JobsTable, cells
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher
from tests.tui_fakes import ScriptedSource
from tests.tui_fakes import frame as tui_frame

T0 = 1_800_000_000.0
CYCLE_S, ROLLOUT_S = 10.0, 6.0  # a 6-s rollout of 1,200 steps, then a 4-s train phase
STEPS_PER_CYCLE = 1_200
# The mean episode length in each cycle: the agent learns, its episodes last longer, so each cycle
# of the same steps finishes fewer of them (60, 50, 40, 30, 25).
LENGTHS = (20, 24, 30, 40, 48)
TARGET_EPISODES = 300


def _rollout_start(writer: EventWriter, k: int, episodes: int) -> None:
    """Cycle k starts at T0 + 10 k: the progress event that ends the previous cycle's train phase
    (as the worker emits it, just before the rollout's phase event), then the rollout's phase."""
    t, steps = T0 + CYCLE_S * k, STEPS_PER_CYCLE * k
    if k:
        writer.progress(t=t, num_timesteps=steps, iteration=k, sps=200.0, ep_len_mean=float(LENGTHS[k - 1]),
                        episodes=episodes, losses={})  # fmt: skip
    writer.phase("rollout", t=t, iteration=k, num_timesteps=steps)


def _rest_of_cycle(writer: EventWriter, k: int, episodes: int) -> int:
    """Cycle k's rollout, with a progress event halfway, and its train phase; returns the episodes
    finished by the cycle's end."""
    t, steps = T0 + CYCLE_S * k, STEPS_PER_CYCLE * k
    done = STEPS_PER_CYCLE // LENGTHS[k]
    writer.progress(t=t + 3, num_timesteps=steps + STEPS_PER_CYCLE // 2, iteration=k, sps=200.0,
                    ep_len_mean=float(LENGTHS[k]), episodes=episodes + done // 2)  # fmt: skip
    writer.phase("train", t=t + ROLLOUT_S, iteration=k + 1, num_timesteps=steps + STEPS_PER_CYCLE)
    return episodes + done


def headless_table_text(state: RunState, width: int) -> str:
    """The headless live table as a terminal `width` columns wide shows it."""
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(jobs_table(state, width))
    return console.export_text()


def _supervisor(tmp_path: Path) -> tuple[Supervisor, FakeLauncher, FakeClock]:
    clock, launcher = FakeClock(T0 - 5), FakeLauncher()
    sup = Supervisor(run_dir=tmp_path, template=JobTemplate("cartpole", "CartPole-v1", 0, episodes=TARGET_EPISODES),
                     seeds=range(1), slots=1, launcher=launcher, budget=thread_budget(1, 2),
                     restart=RestartPolicy(), clock=clock)  # fmt: skip
    return sup, launcher, clock


def _view(sup: Supervisor, clock: FakeClock, t: float) -> tuple[JobView, RunState]:
    clock.t = t
    sup.tick()
    state = sup.snapshot()
    (job,) = state.jobs
    return job, state


def test_episodes_per_hour_and_the_episode_eta_follow_episodes_as_they_grow(tmp_path: Path) -> None:
    sup, launcher, clock = _supervisor(tmp_path)
    sup.tick()
    args = launcher.processes[0].request.args
    assert args.episodes == TARGET_EPISODES and args.timesteps is None  # the worker gets the episode target
    assert "--episodes" in args.to_argv() and "--timesteps" not in args.to_argv()
    writer = EventWriter(sup.jobs["000"].job_dir / EVENTS_FILE)
    writer.started(t=T0 - 5, pid=1, device="cpu", target_episodes=TARGET_EPISODES)

    episodes = 0
    for k in range(3):
        _rollout_start(writer, k, episodes)
        episodes = _rest_of_cycle(writer, k, episodes)
    _rollout_start(writer, 3, episodes)
    early, _ = _view(sup, clock, T0 + 30)
    # The window is the 30 s from the rollout start at T0 to the one at T0 + 30: 60 + 50 + 40
    # episodes in it, 3,600 steps.
    assert early.sps == pytest.approx(120.0)
    assert early.episodes == 150
    assert early.episodes_per_h == pytest.approx(150 / 30 * 3600)

    for k in (3, 4):
        episodes = _rest_of_cycle(writer, k, episodes)
        _rollout_start(writer, k + 1, episodes)
    job, state = _view(sup, clock, T0 + 50)
    assert job.episodes == 205 and job.ep_len_mean == 48.0  # as of the rollout start at T0 + 50
    assert job.sps == pytest.approx(120.0)  # the steps per cycle never changed
    # Over the window from T0 + 20 to T0 + 50: 40 + 30 + 25 episodes. Longer episodes, fewer per hour.
    assert job.episodes_per_h == pytest.approx(95 / 30 * 3600)
    assert job.episodes_per_h < early.episodes_per_h
    # The ETA: 95 episodes left at the newest length (48 steps) at 120 SPS. Dividing by the window's
    # episode rate would say 30 s: too soon, since the window still holds the shorter episodes.
    assert job.eta_s == pytest.approx(95 * 48 / 120)
    assert job.eta_s > (TARGET_EPISODES - 205) / job.episodes_per_h * 3600
    assert job.fraction == pytest.approx(205 / TARGET_EPISODES)
    assert state.eta_s == pytest.approx(job.eta_s)  # the run's ETA works in episodes too

    # What the front ends and report --json show.
    line = job_line(job)
    assert run_line(state) == "120 sps  11,400 ep/h  eta 38s"
    assert "205/300 ep (68%)" in line and "120 sps" in line and "11,400 ep/h" in line and "eta 38s" in line
    row = cells(job, state, wide=True)
    assert row["eph"] == "11k" and row["steps"].startswith("205/300 ep") and row["eta"] == "38s"
    report = state_json(state, live=True, command="cockpit run --episodes 300")
    (reported,) = report["jobs"]
    assert reported["target_episodes"] == 300 and reported["episodes"] == 205
    assert reported["episodes_per_h"] == pytest.approx(11_400.0) == report["episodes_per_h"]

    # A replay of the same file (what report --json reads once the run is over) says the same.
    history = _JobHistory("000", 0, 0, None)
    history.read(sup.jobs["000"].job_dir / EVENTS_FILE)
    replayed = history.view(T0 + 50, False, None, math.inf)
    assert replayed.target_episodes == 300 and replayed.episodes == 205 and replayed.ep_len_mean == 48.0
    assert replayed.episodes_per_h == pytest.approx(job.episodes_per_h)
    assert replayed.eta_s == pytest.approx(job.eta_s)
    assert history.view(T0 + 30, False, None, math.inf).episodes_per_h == pytest.approx(early.episodes_per_h)


def test_steps_left_to_an_episode_target_need_an_episode_length() -> None:
    assert steps_left(500, 1_000) == 500.0
    assert steps_left(500, 0, target_episodes=10, episodes=4, ep_len_mean=50.0) == 300.0
    assert steps_left(500, 0, target_episodes=10, episodes=4, ep_len_mean=None) is None  # never invented
    assert steps_left(500, 0, target_episodes=10, episodes=12, ep_len_mean=None) == 0.0
    assert job_eta(JobState.RUNNING, 0, 0, 100.0, target_episodes=10, episodes=4, ep_len_mean=None) is None
    assert job_eta(JobState.DONE, 0, 0, None, target_episodes=10, episodes=10) == 0.0
    assert job_eta(JobState.RUNNING, 0, 0, 100.0, target_episodes=10, episodes=4, ep_len_mean=50.0) == pytest.approx(
        3.0
    )


def test_a_queued_job_with_an_episode_target_takes_the_running_jobs_episode_length() -> None:
    base = dict(phase=None, phase_since=None, target=0, mean_sps=None, ep_rew_mean=None, restarts=0, checkpoints=0,
                last_checkpoint_step=None, error=None, exit_reason=None, pid=None, device=None, cpu_percent=None,
                rss_bytes=None, gpu_mem_bytes=None, peak_gpu_mem_bytes=None, started_at=None, ended_at=None,
                target_episodes=10)  # fmt: skip
    running = JobView(id="000", seed=0, state=JobState.RUNNING, steps=300, sps=100.0, episodes=6, ep_len_mean=50.0,
                      eta_s=2.0, **base)  # fmt: skip
    queued = JobView(id="001", seed=1, state=JobState.QUEUED, steps=0, sps=None, episodes=0, **base)
    assert run_eta([running, queued], slots=1) == pytest.approx(2.0 + 10 * 50 / 100)
    lone = JobView(id="001", seed=1, state=JobState.QUEUED, steps=0, sps=None, episodes=0, **base)
    assert run_eta([lone], slots=1) is None  # no rate, no length: unknown


async def test_the_jobs_table_shows_episodes_per_hour_beside_sps() -> None:
    older = tui_frame(jobs=2)  # views from files that report no episode counts: no ep/h column
    counted = tui_frame(jobs=2, episodes=400, episodes_per_h=12_345.0, target_episodes=3_000)
    source = ScriptedSource(older)
    app = make_app(source)
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(JobsTable)
        assert "ep/h" not in str(table.lines()[0])
        source.current = counted
        await pilot.pause(0.5)
        header = str(table.lines()[0])
        assert header.index("SPS") < header.index("ep/h") < header.index("ETA")  # beside SPS
        assert table.cell("000", "eph") == "12k"
        assert table.cell("000", "steps") == "400/3,000 ep  13%"
        assert " 12k " in str(table.lines()[1])


@pytest.mark.parametrize("target_episodes", [None, 3_000])
async def test_at_80_columns_ep_h_is_shown_for_an_episode_target_and_every_column_fits(
    target_episodes: int | None,
) -> None:
    # As the supervisor makes them: an episode target's step target is 0; 4-character counts, the widest.
    episodes = {} if target_episodes is None else {"target": 0, "target_episodes": target_episodes}
    counted = tui_frame(gpu=False, jobs=2, episodes=2_950, episodes_per_h=12_345.0, **episodes)
    app = make_app(ScriptedSource(counted))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.5)  # the first frame's rows are made before the table has its width
        table = app.screen.query_one(JobsTable)
        header = str(table.lines()[0])
        assert ("ep/h" in header and "episodes" in header) is (target_episodes is not None)
        assert all(len(str(line).rstrip()) <= 80 for line in table.lines())
        assert header.rstrip().endswith("CPU%") and len(header.rstrip()) <= table.size.width  # nothing cut off
    narrow = headless_table_text(counted.state, 80)
    assert ("ep/h" in narrow) is (target_episodes is not None) and "CPU%" in narrow and "…" not in narrow
