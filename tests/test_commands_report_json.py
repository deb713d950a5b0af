"""`cockpit report RUN_DIR --json`: the run as one JSON object that validates against its schema,
for a live run (through its control socket) and a finished one (from its files)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rich.console import Console

from cockpit.cli import main
from cockpit.commands.htmlreport import page
from cockpit.commands.report import print_report
from cockpit.contract.controls import StopAll
from cockpit.contract.runrecord import read, write
from cockpit.contract.runspec import build_spec
from cockpit.contract.settings import RunSettings
from cockpit.contract.states import JobState
from cockpit.core.fleet.report import STATUSES
from cockpit.core.record.run_report import json_report
from cockpit.core.record.series import read_series
from cockpit.core.session.startup import start_session
from cockpit.core.telemetry.sampler import Sampler
from tests.test_feed_control import FakeWorkers, QuietView, _try_connect, wait_for

SCHEMA = json.loads((Path(__file__).parent.parent / "docs" / "report.schema.json").read_text())
GOLDEN_RUN = Path(__file__).parent / "data" / "run-v1"


def validate(report: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(report)


def test_the_schema_names_every_job_state() -> None:
    assert set(SCHEMA["$defs"]["state"]["enum"]) == {state.value for state in JobState}


def test_the_schema_names_every_fleet_agent_status() -> None:
    assert SCHEMA["$defs"]["agentStatus"]["enum"] == list(STATUSES)


def test_a_finished_run_reports_from_its_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(GOLDEN_RUN, run_dir)
    report = json_report(run_dir)
    validate(report)
    assert report["live"] is False and report["status"] == "done" and report["agents"] == 3
    assert report["command"].startswith("cockpit run")
    assert [job["state"] for job in report["jobs"]] == ["done", "done", "done"]
    assert all(job["steps"] >= job["target"] for job in report["jobs"])
    assert report["counts"] == {"done": 3}
    assert report["fleet"] is None  # an ordinary run: the key is there, null
    assert main(["report", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == report


def test_a_directory_without_a_run_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path), "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path) in err


def test_a_live_run_reports_through_its_socket(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    spec = build_spec(
        RunSettings(
            jobs=2,
            agents=3,
            preset="cartpole",
            timesteps=None,
            run_dir=run_dir,
            max_restarts=0,
        ),
        command_line=("cockpit", "run", "--agents", "3"),
    )
    session = start_session(spec, Sampler(gpu=None, gpu_status="no GPU telemetry: test", hz=20), launcher=FakeWorkers())
    reports: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def monitor() -> None:
        # The session runs on the main thread (signal handlers); whatever happens, this ends it.
        try:
            wait_for(lambda: _try_connect(run_dir))
            wait_for(lambda: (run_dir / "run.toml").exists())
            reports.append(wait_for(lambda: (r := json_report(run_dir))["counts"].get("running") == 2 and r))
        except BaseException as exc:
            failures.append(exc)
        finally:
            session.submit(StopAll())

    thread = threading.Thread(target=monitor)
    thread.start()
    session.run(QuietView(), handle_signals=False)
    thread.join(timeout=10)
    assert not failures, failures
    (report,) = reports
    validate(report)
    assert report["live"] is True and report["status"] == "running" and report["slots"] == 2
    assert report["counts"] == {"running": 2, "queued": 1}
    assert report["command"] == "cockpit run --agents 3"
    assert report["fleet"] is None
    assert [job["state"] for job in report["jobs"]] == ["running", "running", "queued"]


def fleet_like_run(run_dir: Path) -> None:
    """The golden run with its first job recorded as a fleet agent: its own preset and override."""
    shutil.copytree(GOLDEN_RUN, run_dir)
    record = read(run_dir)
    agent = dataclasses.replace(record.jobs[0], preset="cartpole", overrides={"learning_rate": "0.001"})
    write(run_dir, dataclasses.replace(record, jobs=(agent, *record.jobs[1:])))


def test_each_job_has_its_preset_as_named_and_its_overrides(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fleet_like_run(run_dir)
    report = json_report(run_dir)
    validate(report)
    assert [(job["preset"], job["overrides"]) for job in report["jobs"]] == [
        ("cartpole", {"learning_rate": "0.001"}), ("cartpole", {}), ("cartpole", {})]  # fmt: skip


def test_the_text_and_html_reports_name_a_fleet_agents_preset_and_overrides(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    fleet_like_run(run_dir)
    console = Console(record=True, width=300)
    print_report(run_dir, console)
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in console.export_text().splitlines()]
    assert [row[:3] for row in rows if row[:1] == ["000"]] == [["000", "0", "cartpole learning_rate=0.001"]]
    assert [row[:3] for row in rows if row[:1] == ["001"]] == [["001", "1", "cartpole"]]
    html = page(read_series(run_dir), [])
    assert '<th class="l">preset</th>' in html and '<td class="l">cartpole learning_rate=0.001</td>' in html
    # A plain run's jobs have no preset column: the run's preset is in the header.
    shutil.rmtree(run_dir)
    shutil.copytree(GOLDEN_RUN, run_dir)
    assert '<th class="l">preset</th>' not in page(read_series(run_dir), [])
