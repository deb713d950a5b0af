"""The leak watch from the sampler's readings to everywhere it shows: the jobs' states (live and
replayed), run.toml ("no growth" on a quiet job, the flag with its rate on a leaking one), `report`
and `report --json`, headless lines (once when the flag turns on), the TUI's jobs table, job detail
and advice, and the advisor's explanation.

A session on fake workers is fed scripted readings (25 minutes at one a second: job 000 flat with
noise, job 001 growing 200 MiB/h); nothing trains."""

from __future__ import annotations

import dataclasses
import io
import json
import random
from pathlib import Path

import pytest
from rich.console import Console
from textual.widgets import Label, Static

from cockpit.commands.report import print_report
from cockpit.contract.advice import AdviceSetting
from cockpit.contract.controls import ApplyAdvice
from cockpit.contract.runrecord import read
from cockpit.contract.states import RunStatus
from cockpit.core.feed.snapshot import RunState
from cockpit.core.machine.host import HostInfo
from cockpit.core.record.replay import open_replay
from cockpit.core.record.run_report import json_report
from cockpit.core.session.run_session import RunSession
from cockpit.core.session.startup import start_session
from cockpit.core.sizing.advisor import JobMeasure, Measurements, advise, job_measure, machine_of, memory_advice
from cockpit.core.telemetry.memwatch import MIB, MemoryVerdict
from cockpit.core.telemetry.sampler import JobUsage, Sample, Sampler
from cockpit.views.headless import HeadlessView
from cockpit.views.tui.app import make_app
from cockpit.views.tui.detail_screen import JobDetailScreen
from cockpit.views.tui.jobs_table import JobsTable
from tests.specs import cartpole_spec
from tests.test_commands_report_json import validate
from tests.test_feed_control import FakeWorkers, scripted_session
from tests.test_views_headless import T0, job, state
from tests.tui_fakes import ScriptedSource, frame

MINUTES = 25
LEAK_MIB_H = 200.0


def _feed(session: RunSession, minutes: float = MINUTES, start: float = T0) -> None:
    """The sampler's readings, one a second, as the recorder gets them."""
    rng = random.Random(7)
    for s in range(int(minutes * 60)):
        jobs = {
            "000": JobUsage(90.0, int((900 + rng.uniform(-15, 15)) * MIB), pid=101),
            "001": JobUsage(90.0, int((700 + LEAK_MIB_H * s / 3600 + rng.uniform(-15, 15)) * MIB), pid=102),
        }
        session.recorder(Sample(t=start + s, cpu_percent=(90.0, 90.0), ram_used_bytes=2**33, ram_total_bytes=2**34,
                                gpu=None, jobs=jobs, cost_s=0.0))  # fmt: skip


@pytest.fixture
def watched_run(tmp_path: Path) -> tuple[Path, RunState]:
    """A run whose recorder saw the readings above, its run.toml written as the live run writes it."""
    session = scripted_session(tmp_path / "run")
    session.supervisor.tick()  # both fake workers start
    _feed(session)
    live = session.snapshot()
    session.write_run_log(live)  # also what the advisor makes of it
    after = session.snapshot()
    session.recorder.close()
    return tmp_path / "run", after


def test_the_live_state_flags_the_leaking_job_and_says_no_growth_of_the_quiet_one(
    watched_run: tuple[Path, RunState],
) -> None:
    _, live = watched_run
    quiet, leaking = live.jobs
    assert quiet.memory == "no growth" and not quiet.memory_growing
    assert leaking.memory_growing and leaking.memory_growth_mib_h == pytest.approx(LEAK_MIB_H, rel=0.1)
    assert leaking.memory == f"memory growing: +{leaking.memory_growth_mib_h:,.0f} MiB/h"
    # The advisor explains it in the run's advice.
    (item,) = [a for a in live.suggestions if a.setting is AdviceSetting.MEMORY]
    assert item.current.startswith("RSS of job 001 +") and item.suggested == "no growth"
    assert "replay buffer" in item.reason and "custom env" in item.reason and "tracemalloc" in item.reason
    assert "GiB more a day" in item.effect


def test_run_toml_records_no_growth_and_the_flag_with_its_rate(watched_run: tuple[Path, RunState]) -> None:
    run_dir, _ = watched_run
    text = (run_dir / "run.toml").read_text()
    assert 'memory = "no growth"' in text and 'memory = "memory growing: +' in text
    quiet, leaking = read(run_dir).jobs
    assert quiet.memory == "no growth" and quiet.memory_growth_mib_h is None
    assert leaking.memory is not None and leaking.memory.startswith("memory growing: +")
    assert leaking.memory_growth_mib_h == pytest.approx(LEAK_MIB_H, rel=0.1)


def test_report_and_report_json_carry_the_verdicts(watched_run: tuple[Path, RunState]) -> None:
    run_dir, _ = watched_run
    report = json_report(run_dir)  # no socket: from the files, as a finished run
    validate(report)
    by_id = {j["id"]: j for j in report["jobs"]}
    assert by_id["000"]["memory"] == "no growth" and by_id["000"]["memory_growth_mib_h"] is None
    assert by_id["001"]["memory"].startswith("memory growing: +")
    assert by_id["001"]["memory_growth_mib_h"] == pytest.approx(LEAK_MIB_H, rel=0.1)
    assert by_id["001"]["gpu_memory_growth_mib_h"] is None
    json.dumps(report)
    console = Console(record=True, width=250)
    print_report(run_dir, console)
    assert "memory: job 001: memory growing: +" in console.export_text()


def test_a_replay_shows_the_verdicts_as_they_formed(watched_run: tuple[Path, RunState]) -> None:
    run_dir, _ = watched_run
    replay = open_replay(run_dir)
    replay.seek(T0 + 8 * 60)  # the warm-up and a little: too early to judge
    early = {j.id: j for j in replay.frame().state.jobs}
    assert early["001"].memory is not None and early["001"].memory.startswith("not judged")
    replay.seek(T0 + MINUTES * 60 - 30)
    late = {j.id: j for j in replay.frame().state.jobs}
    assert late["001"].memory_growing and late["000"].memory == "no growth"
    replay.seek(T0 + 10**6)  # the end: run.toml's word
    end = {j.id: j for j in replay.frame().state.jobs}
    assert end["001"].memory == read(run_dir).jobs[1].memory


def test_a_quiet_run_says_no_growth_in_run_toml(tmp_path: Path) -> None:
    # The seeds' "Memory leaks: none detected", without a leaking job beside it.
    session = scripted_session(tmp_path / "run", jobs=1)
    session.supervisor.tick()
    rng = random.Random(3)
    for s in range(20 * 60):
        usage = {"000": JobUsage(90.0, int((900 + rng.uniform(-30, 30)) * MIB), pid=101)}
        session.recorder(Sample(t=T0 + s, cpu_percent=(90.0,), ram_used_bytes=2**33, ram_total_bytes=2**34,
                                gpu=None, jobs=usage, cost_s=0.0))  # fmt: skip
    session.write_run_log(session.snapshot())
    session.recorder.close()
    (only,) = read(tmp_path / "run").jobs
    assert only.memory == "no growth" and only.memory_growth_mib_h is None and only.gpu_memory_growth_mib_h is None
    assert not [a for a in session.snapshot().suggestions if a.setting is AdviceSetting.MEMORY]


def test_a_resumed_run_shows_the_recorded_verdict_until_it_judges_anew(
    watched_run: tuple[Path, RunState],
) -> None:
    run_dir, _ = watched_run
    spec = cartpole_spec(run_dir, resuming=True)
    resumed = start_session(
        spec, Sampler(gpu=None, gpu_status="test"), launcher=FakeWorkers(), serve=False, resume=True
    )
    jobs = {j.id: j for j in resumed.snapshot().jobs}
    assert jobs["000"].memory == "no growth" and jobs["001"].memory_growing
    resumed.recorder.close()
    assert MemoryVerdict.recorded("not judged: 2 of 13 min watched", None, None) is None
    assert MemoryVerdict.recorded(None, None, None) is None
    assert MemoryVerdict.recorded("GPU memory growing: +80 MiB/h", None, 80.0).line() == "GPU memory growing: +80 MiB/h"  # type: ignore[union-attr]


def test_memory_advice_changes_no_setting_and_is_refused_when_applied(tmp_path: Path) -> None:
    session = scripted_session(tmp_path / "run")
    session._latest = session.snapshot()
    with pytest.raises(ValueError, match="memory advice changes no setting"):
        session.submit(ApplyAdvice(AdviceSetting.MEMORY, "no growth"))
    session.recorder.close()


def test_the_advisor_explains_growing_gpu_memory_and_recommend_sees_a_recorded_leak() -> None:
    def measure(job_id: str, **growth: float) -> JobMeasure:
        return job_measure(
            job_id, sps=100.0, phases={}, gpu_mem_peak_bytes=None, cpu_percent=90.0, error=None, **growth
        )  # type: ignore[arg-type]

    jobs = (measure("000", gpu_memory_growth_mib_h=80.0), measure("001"))
    (item,) = memory_advice(Measurements(jobs))
    assert item.current == "GPU memory of job 000 +80 MiB/h" and ".detach()" in item.reason
    assert item.numbers == {"gpu_growth_mib_h": 80.0}
    assert memory_advice(Measurements(jobs[1:])) == []
    from cockpit.contract.presets import load

    machine = machine_of(HostInfo("h", "cpu", 2, 2, 2**34, "Linux"), None)
    assert any(a.setting is AdviceSetting.MEMORY for a in advise(machine, load("cartpole"), 2, Measurements(jobs)))


def test_recommend_from_a_run_with_a_leak_explains_it(
    watched_run: tuple[Path, RunState], capsys: pytest.CaptureFixture[str]
) -> None:
    from cockpit.cli import main

    run_dir, _ = watched_run
    assert main(["recommend", "--from", str(run_dir), "--no-probe"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "memory" in out and "RSS of job 001 +" in out and "replay buffer" in out


# ----- headless -----


def test_headless_prints_the_flag_once_when_it_turns_on_and_sums_up_at_the_end() -> None:
    out = io.StringIO()
    view = HeadlessView(Console(file=out, width=200), every_s=1e9)
    flagged = {"memory": "memory growing: +120 MiB/h", "memory_growth_mib_h": 120.0}
    steps = [
        {},
        {"memory": "not judged: 5 of 13 min watched"},
        flagged,
        {"memory": "memory growing: +125 MiB/h", "memory_growth_mib_h": 125.0},  # its rate moves: no new line
        flagged,
        {"memory": "no growth"},  # it cleared
        flagged,  # and came back: said again
    ]
    for i, fields in enumerate(steps):
        view.update(
            state(T0 + i, RunStatus.RUNNING, job("000", "running", 1000 * i, **fields), job("001", "running", 0))
        )
    lines = [line for line in out.getvalue().splitlines() if "memory" in line]
    assert lines == ["2027-01-15T08:00:02Z [job 000] memory growing: +120 MiB/h",
                     "2027-01-15T08:00:06Z [job 000] memory growing: +120 MiB/h"]  # fmt: skip
    out.truncate(0)
    view.close(state(T0 + 9, RunStatus.DONE, job("000", "done", 100_000, **flagged),
                     job("001", "done", 100_000, memory="no growth")))  # fmt: skip
    tail = out.getvalue().splitlines()
    assert tail[-3:] == ["memory:", "  job 000: memory growing: +120 MiB/h", "run log: runs/x/run.toml"]
    quiet = io.StringIO()
    ended = (job("000", "done", 100_000, memory="no growth"), job("001", "done", 100_000, memory="no growth"))
    HeadlessView(Console(file=quiet, width=200)).close(state(T0, RunStatus.DONE, *ended))
    assert "memory: no growth (2 jobs watched long enough to judge)" in quiet.getvalue().splitlines()


# ----- the TUI -----


async def test_the_tui_shows_the_flag_in_the_jobs_table_the_detail_and_the_advice() -> None:
    base = frame()
    jobs = list(base.state.jobs)
    jobs[1] = dataclasses.replace(jobs[1], memory="memory growing: +120 MiB/h", memory_growth_mib_h=120.0)
    jobs[0] = dataclasses.replace(jobs[0], memory="no growth")
    measured = Measurements(tuple(JobMeasure(j.id, memory_growth_mib_h=j.memory_growth_mib_h) for j in jobs))
    suggestions = tuple(memory_advice(measured))
    shown = dataclasses.replace(base, state=dataclasses.replace(base.state, jobs=tuple(jobs), suggestions=suggestions))
    app = make_app(ScriptedSource(shown))
    async with app.run_test(size=(130, 40)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(JobsTable)
        assert table.cell("001", "memory") == "+120 MiB/h" and table.cell("000", "memory") == "900 MiB"
        assert "+120 MiB/h" in "".join(line.plain for line in table.lines())  # the wide layout shows it
        advice = str(app.screen.query_one("#advice", Static).render())
        assert "memory RSS of job 001 +120 MiB/h -> no growth" in advice and "replay buffer" in advice
        await pilot.press("down", "enter")
        await pilot.pause(0.3)
        assert isinstance(app.screen, JobDetailScreen)
        assert "memory growing: +120 MiB/h" in str(app.screen.query_one("#detail-title", Label).render())
        await pilot.press("escape", "up", "enter")
        await pilot.pause(0.3)
        assert "memory: no growth" in str(app.screen.query_one("#detail-title", Label).render())
