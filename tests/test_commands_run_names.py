"""Run names (`--name`): the run directory, run.toml, the views' headers, the start screen's recent
runs, `report --json`, `cockpit attach NAME`, and the one-line refusal of an unsafe name.

No process is started: specs are built and refused in this process, run directories are copies of
the golden v1 run with a name written into their run.toml."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from cockpit.cli import build_parser
from cockpit.cli import main as cli_main
from cockpit.commands import attach, fleet, run
from cockpit.commands.report import print_report
from cockpit.contract.rundir import RunDir, RunNameError, check_run_name, stamp_time
from cockpit.contract.runrecord import parse, read, render, write
from cockpit.contract.runspec import ConfigError, build_spec
from cockpit.contract.settings import RunSettings
from cockpit.contract.states import RunStatus
from cockpit.core.feed.source import RunSource, SourceError
from cockpit.core.machine.host import HostInfo
from cockpit.core.record.find_runs import named_run, recent_runs
from cockpit.core.record.replay import open_replay
from cockpit.core.record.run_report import state_json
from cockpit.core.record.runlog import Recorder, phase_accounting, record
from cockpit.core.session.background import headless_argv
from cockpit.core.session.run_session import resume_settings
from cockpit.views.headless import HeadlessView
from cockpit.views.tui.app import make_app
from cockpit.views.tui.cockpit_screen import RunHeader, header_line
from cockpit.views.tui.start_screen import StartScreen
from tests.background_child import child_spec
from tests.test_contract_fleetplan import plan_file
from tests.test_views_headless import T0
from tests.test_views_headless import state as headless_state
from tests.tui_fakes import ScriptedSource, frame

GOLDEN = Path(__file__).parent / "data" / "run-v1"
STAMPED = re.compile(r"runs/\d{8}T\d{6}Z-production")
BAD_NAMES = ["a/b", "../up", ".hidden", "-flag", "", "two words", "x" * 65, "tab\tname", "ünï"]


def _named_run(run_dir: Path, name: str | None, started_at: str | None = None) -> Path:
    """A copy of the golden run in `run_dir`, its run.toml naming it `name`."""
    shutil.copytree(GOLDEN, run_dir)
    recorded = read(run_dir)
    write(run_dir, dataclasses.replace(recorded, name=name, started_at=started_at or recorded.started_at))
    return run_dir


# ----- the name itself -----


@pytest.mark.parametrize("name", ["production", "parallel-3", "v1.2_b", "A" * 64, "7"])
def test_safe_names_pass(name: str) -> None:
    assert check_run_name(name) == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_an_unsafe_name_is_refused_in_one_line_naming_the_flag_and_the_rule(name: str) -> None:
    with pytest.raises(RunNameError) as raised:
        check_run_name(name)
    message = str(raised.value)
    assert message.startswith(f"--name {name!r}: a run name is 1 to 64 letters, digits")
    assert "\n" not in message


@pytest.mark.parametrize("name", ["a/b", ".hidden", "x" * 65])
def test_run_with_a_bad_name_exits_2_in_one_line_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli_main(["run", "--headless", "--name", name]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cockpit run: error: --name {name!r}: a run name is") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # no runs/, no run directory: nothing started


def test_fleet_with_a_bad_name_exits_2_and_resume_refuses_a_new_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli_main(["fleet", str(plan), "--headless", "--name", "../x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cockpit fleet: error: --name '../x': a run name is") and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()
    (tmp_path / "old").mkdir()
    assert cli_main(["fleet", "--resume", "old", "--name", "again"]) == 2
    assert "drop --name" in capsys.readouterr().err


# ----- where a name goes -----


def _run_args(*argv: str):  # type: ignore[no-untyped-def]
    args = build_parser().parse_args(["run", *argv])
    args.script, args.argv = None, ["run", *argv]
    return args


def test_the_name_makes_the_run_directory_and_reaches_the_background_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = run._spec(_run_args("--name", "production"), None, ("cockpit", "run", "--name", "production"))
    assert spec.name == "production" and STAMPED.fullmatch(str(spec.run_dir))
    assert stamp_time(spec.run_dir) is not None
    child = child_spec(headless_argv(spec))
    assert child.name == "production" and child.run_dir == spec.run_dir
    # --run-dir still decides where; the name is recorded all the same.
    chosen = run._spec(_run_args("--name", "production", "--run-dir", "here"), None, ("cockpit",))
    assert chosen.run_dir == Path("here") and chosen.name == "production"
    # A script run takes a name the same way.
    (tmp_path / "t.py").write_text("")
    script = build_spec(
        RunSettings(
            jobs=1,
            preset="",
            timesteps=None,
            run_dir=None,
            max_restarts=0,
            script=("python", "t.py"),
            name="production",
        ),
        command_line=("cockpit",),
    )
    assert STAMPED.fullmatch(str(script.run_dir)) and script.name == "production"


def test_a_resumed_run_keeps_its_recorded_name_and_refuses_another(tmp_path: Path) -> None:
    run_dir = _named_run(tmp_path / "run", "production")
    assert resume_settings(run_dir, read(run_dir)).name == "production"
    with pytest.raises(ConfigError, match="drop --name"):
        run._spec(_run_args("--resume", str(run_dir), "--name", "other"), None, ("cockpit",))


def test_a_fleet_is_named_by_its_plan_or_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan_path = plan_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    plan, _ = fleet._plan(build_parser().parse_args(["fleet", str(plan_path)]))

    def spec(*argv: str):  # type: ignore[no-untyped-def]
        args = build_parser().parse_args(["fleet", str(plan_path), *argv])
        args.argv = ["fleet", str(plan_path), *argv]
        return fleet._spec(args, plan)

    plain = spec()
    assert plain.name == "screen" and re.fullmatch(r"runs/\d{8}T\d{6}Z-fleet-screen", str(plain.run_dir))
    named = spec("--name", "sweep-2")
    assert named.name == "sweep-2" and re.fullmatch(r"runs/\d{8}T\d{6}Z-sweep-2", str(named.run_dir))


def test_run_toml_records_the_name_and_old_files_without_one_still_load(tmp_path: Path) -> None:
    old = read(GOLDEN)
    assert old.name is None  # written before runs had names
    text = render(dataclasses.replace(old, name="production"))
    assert text.startswith('schema_version = 1\nname = "production"\ncommand = ')
    assert parse(text, "x").name == "production"
    run_dir = _named_run(tmp_path / "run", "production")
    assert read(run_dir).name == "production"


def test_the_record_writer_takes_the_name_from_the_spec(tmp_path: Path) -> None:
    spec = build_spec(
        RunSettings(
            jobs=1,
            agents=1,
            preset="cartpole",
            timesteps=None,
            run_dir=tmp_path / "r",
            max_restarts=0,
            name="production",
        ),
        command_line=("cockpit",),
    )
    recorder = Recorder(tmp_path)
    now = headless_state(T0, RunStatus.RUNNING)
    written = record(spec, now, HostInfo("h", "cpu", 2, 2, 2**30, "Linux"), phase_accounting({}, recorder, T0),
                     recorder)  # fmt: skip
    recorder.close()
    assert written.name == "production"


def test_the_header_the_headless_table_report_and_replay_show_the_name(tmp_path: Path) -> None:
    named = frame()
    named = dataclasses.replace(named, state=dataclasses.replace(named.state, name="production"))
    assert header_line(named, replay=False).startswith("cockpit  production: heavy on LunarLander-v3  running")
    assert header_line(frame(), replay=False).startswith("cockpit  heavy on LunarLander-v3  running")
    console = Console(record=True, width=120, force_terminal=True)
    console.print(HeadlessView(console)._renderable(named.state))
    assert "cockpit  production: heavy on LunarLander-v3" in console.export_text()
    assert state_json(named.state, live=True, command="")["name"] == "production"
    run_dir = _named_run(tmp_path / "run", "production")
    replay = open_replay(run_dir)
    assert replay.frame().state.name == "production"
    assert state_json(replay.frame().state, live=False, command="")["name"] == "production"
    report = Console(record=True, width=200)
    print_report(run_dir, report)
    assert "name production" in report.export_text().splitlines()[0]


async def test_the_tui_header_shows_the_name() -> None:
    named = frame()
    app = make_app(ScriptedSource(dataclasses.replace(named, state=dataclasses.replace(named.state, name="nightly"))))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.screen.query_one(RunHeader).line.startswith("cockpit  nightly: heavy on LunarLander-v3")


async def test_the_launchers_recent_runs_show_the_name(tmp_path: Path) -> None:
    from textual.widgets import DataTable

    from tests.test_tui import FakeOpener

    root = tmp_path / "runs"
    _named_run(root / "20261102T000000Z-production", "production")
    _named_run(root / "20261101T000000Z-cartpole-CartPole-v1", None)
    runs = recent_runs(root)
    assert sorted((r.run_dir.name, r.name) for r in runs) == [
        ("20261101T000000Z-cartpole-CartPole-v1", None), ("20261102T000000Z-production", "production")
    ]  # fmt: skip

    class Opener(FakeOpener):
        def recent(self):  # type: ignore[no-untyped-def]
            return runs

    app = make_app(opener=Opener(ScriptedSource(frame())))
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, StartScreen)
        table = app.screen.query_one("#recent", DataTable)
        assert [str(c.label) for c in table.columns.values()][:2] == ["name", "run"]
        names = {str(table.get_row_at(i)[1]): str(table.get_row_at(i)[0]) for i in range(table.row_count)}
        assert names == {"20261102T000000Z-production": "production", "20261101T000000Z-cartpole-CartPole-v1": "-"}


# ----- cockpit attach NAME -----


def test_attach_name_finds_the_newest_run_of_that_name(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    _named_run(root / "20261101T000000Z-production", "production")
    newest = _named_run(root / "20261102T000000Z-production", "production")
    _named_run(root / "20261103T000000Z-cartpole-CartPole-v1", None)  # newer, but not named so
    _named_run(root / "20261104T000000Z-staging", "staging")
    # A --run-dir of the user's choosing: no time in its name, so its recorded start counts.
    _named_run(root / "mine", "production", started_at="2026-11-01T12:00:00Z")
    assert named_run("production", root) == newest
    assert attach.find(Path("production"), root) == newest
    assert attach.find(Path("staging"), root) == root / "20261104T000000Z-staging"
    # A run that has not written its first run.toml yet is known by its directory's name.
    starting = root / "20261105T000000Z-production"
    starting.mkdir()
    assert attach.find(Path("production"), root) == starting
    # An existing directory is itself, whatever its name.
    assert attach.find(root / "mine", root) == root / "mine"
    with pytest.raises(SourceError) as raised:
        attach.find(Path("nightly"), root)
    assert str(raised.value) == (f"no run directory nightly here, and no run named 'nightly' in {root}/ "
                                 "(runs get a name with: cockpit run --name nightly)")  # fmt: skip


class _Front:
    """Records the run the cockpit was opened on."""

    def __init__(self) -> None:
        self.watched: list[Path] = []

    def watch(self, source: RunSource, *, who: str) -> int:
        self.watched.append(Path(source.run_dir))  # type: ignore[attr-defined]
        source.close()
        return 0


def test_cockpit_attach_name_opens_that_run_and_an_unknown_name_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    _named_run(tmp_path / "runs" / "20261101T000000Z-production", "production")
    newest = _named_run(tmp_path / "runs" / "20261102T000000Z-production", "production")
    monkeypatch.setattr(attach, "interactive", lambda: True)
    front = _Front()
    assert attach.main(Path("production"), front) == 0  # type: ignore[arg-type]
    assert front.watched == [Path("runs") / newest.name]
    assert attach.main(Path("nightly"), front) == 2  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert err == ("cockpit attach: error: no run directory nightly here, and no run named 'nightly' in runs/ "
                   "(runs get a name with: cockpit run --name nightly)\n")  # fmt: skip
    assert RunDir(newest).run_toml.exists()
