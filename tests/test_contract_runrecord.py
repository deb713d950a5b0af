"""run.toml as typed records: one render, one read, version 1 files read forever, newer ones refused.

`tests/data/run-v1/` is a real run written by the cockpit before the records existed (`cockpit run
--headless --jobs 2 --agents 3 --timesteps 3000` on a 2-core machine without a GPU; checkpoints and
worker logs dropped). It must keep opening everywhere a run is opened, and keep rendering to the
same bytes.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from cockpit.cli import main as cli_main
from cockpit.commands.report import print_report
from cockpit.contract import presets
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import (
    SCHEMA_VERSION,
    ConfigRecord,
    RunRecord,
    RunRecordError,
    parse,
    read,
    render,
    write,
)
from cockpit.contract.runspec import RunSpec
from cockpit.contract.settings import RunSettings
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.feed.snapshot import RunState
from cockpit.core.feed.source import SourceError
from cockpit.core.machine.host import HostInfo
from cockpit.core.record.replay import open_replay
from cockpit.core.record.runlog import Recorder, phase_accounting, record
from cockpit.core.session.run_session import resume_settings
from tests.test_record_replay import T0, _build_run, _view

GOLDEN = Path(__file__).parent / "data" / "run-v1"


def _copy_golden(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(GOLDEN, run_dir)
    return run_dir


def _newer(tmp_path: Path) -> Path:
    """The golden run, as a cockpit with schema version 2 might have written it."""
    run_dir = _copy_golden(tmp_path)
    toml = RunDir(run_dir).run_toml
    toml.write_text(toml.read_text().replace("schema_version = 1\n", "schema_version = 2\n"))
    return run_dir


# ----- the golden v1 file -----


def test_the_v1_golden_file_renders_back_byte_for_byte() -> None:
    text = RunDir(GOLDEN).run_toml.read_text()
    recorded = parse(text, str(GOLDEN))
    assert render(recorded) == text
    assert recorded.schema_version == 1 and recorded.status is RunStatus.DONE
    assert [(j.id, j.seed, j.status, j.steps) for j in recorded.jobs] == [
        ("000", 0, JobState.DONE, 3000), ("001", 1, JobState.DONE, 3000), ("002", 2, JobState.DONE, 3000)
    ]  # fmt: skip
    # Not recorded then: an absent setting reads as its default, and stays absent when written again.
    assert recorded.config.max_restarts == 3 and recorded.config.healthy_uptime_s == RunSettings.healthy_uptime_s
    assert recorded.preset is not None and recorded.preset.name == "cartpole" and recorded.preset.net_arch == (64, 64)
    assert recorded.gpu is not None and not recorded.gpu.present and recorded.gpu.telemetry.startswith("no GPU")
    assert recorded.jobs[0].phases["train"].seconds == 0.448 and recorded.jobs[0].phases["train"].gpu_util_mean is None


def test_a_record_written_now_reads_back_equal_and_renders_stably(tmp_path: Path) -> None:
    run_dir = _build_run(tmp_path / "run")  # the real writers: Recorder, record(), write()
    text = RunDir(run_dir).run_toml.read_text()
    recorded = read(run_dir)
    assert render(recorded) == text
    assert parse(render(recorded), "again") == recorded
    # A setting at its default is not written: absent reads as the default.
    assert recorded.config.healthy_uptime_s == 300.0 and "healthy_uptime_s" not in text
    assert [j.status for j in recorded.jobs] == [JobState.DONE, JobState.STOPPED, JobState.STOPPED]


def test_a_failed_rewrite_leaves_the_previous_run_log_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = read(GOLDEN)
    write(tmp_path, first)

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write(tmp_path, dataclasses.replace(first, status=RunStatus.FAILED, warnings=("x",) * 1000))
    assert read(tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == ["run.toml"]  # no temp file left behind


# ----- the v1 run opens everywhere -----


def test_the_v1_run_opens_in_report() -> None:
    console = Console(record=True, width=250)
    print_report(GOLDEN, console)
    text = console.export_text()
    assert "status done" in text and "3 agents, 2 at a time, preset cartpole on CartPole-v1" in text
    assert "GPU: no GPU telemetry" in text and "time with at least one job training: 33%" in text
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]
    assert [row[:4] for row in rows] == [["000", "0", "done", "3,000/3,000"], ["001", "1", "done", "3,000/3,000"],
                                         ["002", "2", "done", "3,000/3,000"]]  # fmt: skip


def test_the_v1_run_opens_in_replay() -> None:
    replay = open_replay(GOLDEN)
    state = replay.frame().state
    assert state.status is RunStatus.DONE and state.preset == "cartpole" and state.env == "CartPole-v1"
    assert [(j.id, j.state, j.steps) for j in state.jobs] == [
        ("000", JobState.DONE, 3000), ("001", JobState.DONE, 3000), ("002", JobState.DONE, 3000)
    ]  # fmt: skip
    assert state.slots == 2 and state.gpu is None and state.gpu_status.startswith("no GPU telemetry")
    # Before the end, from the events: two jobs training while the third waits, then the third.
    replay.seek(1795432773.9)
    assert [j.state for j in replay.frame().state.jobs] == [JobState.RUNNING, JobState.RUNNING, JobState.QUEUED]
    replay.seek(1795432777.7)
    assert [j.state for j in replay.frame().state.jobs] == [JobState.DONE, JobState.DONE, JobState.RUNNING]


def test_resuming_the_v1_run_takes_its_recorded_settings_and_the_default_healthy_uptime() -> None:
    args = resume_settings(GOLDEN, read(GOLDEN))
    assert args == RunSettings(jobs=2, agents=3, preset="cartpole", env="CartPole-v1", timesteps=3000, seed=0,
                               max_restarts=3, pin=False, run_dir=GOLDEN)  # fmt: skip
    recorded = dataclasses.replace(read(GOLDEN), config=dataclasses.replace(read(GOLDEN).config, healthy_uptime_s=60.0))
    assert resume_settings(GOLDEN, recorded).healthy_uptime_s == 60.0


# ----- versions -----


def test_a_file_without_schema_version_is_version_1_and_unknown_keys_are_ignored() -> None:
    text = RunDir(GOLDEN).run_toml.read_text()
    older = text.replace("schema_version = 1\n", "")
    newer_facts = text.replace("[host]\n", "[host]\nnuma_nodes = 2\n") + "\n[energy]\njoules = 12.5\n"
    assert parse(older, "old") == parse(text, "v1") == parse(newer_facts, "minor")
    assert SCHEMA_VERSION == 1


def test_a_newer_schema_version_is_one_line_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = _newer(tmp_path)
    expected = f"{run_dir}: run.toml written by a newer cockpit (schema_version 2; this cockpit reads up to 1): " \
               "upgrade cockpit"  # fmt: skip
    with pytest.raises(RunRecordError) as error:
        read(run_dir)
    assert str(error.value) == expected
    with pytest.raises(SourceError) as replay_error:
        open_replay(run_dir)
    assert str(replay_error.value) == expected
    for argv in (["report", str(run_dir)], ["recommend", "--from", str(run_dir), "--no-probe"],
                 ["run", "--headless", "--resume", str(run_dir)]):  # fmt: skip
        assert cli_main(argv) == 2, argv
        captured = capsys.readouterr()
        assert captured.err.count("\n") == 1 and expected in captured.err, (argv, captured.err)
        assert captured.err.startswith(f"cockpit {argv[0]}: error: "), captured.err
    assert not RunDir(run_dir).lock.exists()  # `run --resume` started nothing


# ----- bad files -----


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("jobs = 2\n", 'jobs = "2"\n'), "config.jobs: expected an integer, got '2'"),
        (("pin = false\n", "pin = 0\n"), "config.pin: expected true or false, got 0"),
        (("seed = 1\n", "seed = true\n"), "jobs[1].seed: expected an integer, got True"),
        (("ram_gib = 23.5\n", 'ram_gib = "big"\n'), "host.ram_gib: expected a number, got 'big'"),
        (('status = "done"\ns', 'status = "paused"\ns'), "status: expected one of 'running', 'stopping', 'done'"),
        (("net_arch = [\n    64,\n", "net_arch = [\n    \"wide\",\n"), "preset.net_arch[0]: expected an integer"),
        (("[jobs.phases.rollout]\nseconds = 0.994\n", "[jobs.phases.rollout]\nseconds = []\n"),
         "jobs[0].phases.rollout.seconds: expected a number, got []"),
        (('hostname = "vm"\n', ""), "missing key host.hostname"),
        (("schema_version = 1\n", "schema_version = 0\n"), "schema_version: expected a positive integer, got 0"),
    ],
)  # fmt: skip
def test_a_value_of_the_wrong_type_names_its_key(edit: tuple[str, str], message: str) -> None:
    text = RunDir(GOLDEN).run_toml.read_text()
    assert edit[0] in text
    with pytest.raises(RunRecordError) as error:
        parse(text.replace(edit[0], edit[1], 1), "runs/x")
    assert str(error.value).startswith("runs/x: invalid run.toml: ") and message in str(error.value)
    assert "\n" not in str(error.value)


def test_no_run_toml_and_unreadable_toml_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(RunRecordError) as missing:
        read(tmp_path)
    assert str(missing.value) == (
        f"{tmp_path}: not a run directory (no run.toml; runs live in runs/<time>-<preset>-<env>)"
    )
    RunDir(tmp_path).run_toml.write_text("status = \n[[[")
    with pytest.raises(RunRecordError) as garbled:
        read(tmp_path)
    assert str(garbled.value).startswith(f"{tmp_path}: unreadable run.toml: ") and "\n" not in str(garbled.value)


def test_config_records_the_restart_policy() -> None:
    config = ConfigRecord(jobs=1, agents=1, preset="cartpole", env="CartPole-v1", timesteps=10, seed=0,
                          max_restarts=5, healthy_uptime_s=1800.0)  # fmt: skip
    recorded = dataclasses.replace(read(GOLDEN), config=config)
    text = render(recorded)
    config_table = text.split("[config]\n")[1].split("\n\n")[0].splitlines()
    assert {"max_restarts = 5", "healthy_uptime_s = 1800.0", "pin = false"} <= set(config_table)
    assert parse(text, "x").config == config
    assert isinstance(parse(text, "x"), RunRecord)


def test_a_live_record_keeps_the_jobs_windowed_sps_and_the_etas(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recorder = Recorder(run_dir)
    spec = RunSpec(jobs=1, agents=2, loaded_preset=presets.load("cartpole"), preset="cartpole", env="CartPole-v1",
                   timesteps=1000, seed=0, run_dir=run_dir, pin=False,
                   command_line=("cockpit", "run"))  # fmt: skip
    jobs = (_view("000", 0, "running", steps=400, sps=34.1333, mean_sps=40.0, eta_s=17.578, rollout_sps=204.8),
            _view("001", 1, "queued"))  # fmt: skip
    state = RunState(run_dir=str(run_dir), preset="cartpole", env="CartPole-v1", status=RunStatus.RUNNING,
                     started_at=T0, now=T0 + 60, slots=1, jobs=jobs, sample=None, gpu=None, gpu_status="no GPU",
                     warnings=(), eta_s=46.873)  # fmt: skip
    host = HostInfo("box", "Test CPU", 4, 4, 16 * 1024**3, "Linux")
    write(run_dir, record(spec, state, host, phase_accounting({}, recorder, T0 + 60), recorder))
    recorder.close()
    text = RunDir(run_dir).run_toml.read_text()
    recorded = read(run_dir)
    assert recorded.eta_s == 46.9 and "\neta_s = 46.9\n" in text
    running, queued = recorded.jobs
    assert (running.mean_sps, running.sps_window, running.eta_s) == (40.0, 34.1, 17.6)
    assert (queued.sps_window, queued.eta_s) == (None, None)  # absent: not training
    assert render(recorded) == text
