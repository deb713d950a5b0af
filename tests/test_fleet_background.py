"""`cockpit fleet PLAN` on a terminal: the fleet runs in the background as `cockpit fleet --headless`
with a flag list built from the validated spec, and the cockpit opens on it. The flag list must
carry everything: parsed back, it gives the same run (the same spec, plan and rate)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from cockpit.cli import build_parser, main
from cockpit.commands import fleet
from cockpit.contract.events import read_events
from cockpit.contract.fleetplan import FleetPlan
from cockpit.contract.runrecord import read
from cockpit.core.fleet.run import FleetRun
from cockpit.core.machine.host import thread_budget
from cockpit.core.session import background, start
from cockpit.core.supervise.supervisor import JobTemplate, Supervisor
from tests.cockpitproc import Tmux
from tests.fakeclock import FakeClock
from tests.test_e2e_tui import _processes_of
from tests.test_supervise_supervisor import FakeLauncher

PLAN = """
name = "sweep"
jobs = 2
promotion = "sync"
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = 2
[agents.overrides]
learning_rate = [1e-3, 3e-4]
[[tiers]]
timesteps = 2000
promote = 0.5
[[tiers]]
timesteps = 4000
"""
GPUS_HERE = (0, 1)


def fleet_args(*words: str) -> argparse.Namespace:
    """`cockpit fleet WORDS` as the command line parses it."""
    args = build_parser().parse_args(["fleet", *words])
    args.script, args.argv = None, ["fleet", *words]
    return args


def in_background(args: argparse.Namespace, monkeypatch: pytest.MonkeyPatch) -> tuple[fleet.RunSpec, list[str]]:
    """The spec `cockpit fleet` on a terminal validates for `args`, and the whole command line of
    the background run it starts for it (after `cockpit`)."""
    plan, _ = fleet._plan(args)
    command_line = background.typed_command_line(args.typed, args.argv)  # as the front door takes it
    assert command_line is not None
    spec = fleet._spec(args, plan, GPUS_HERE, "", command_line)
    started: list[list[str]] = []

    def spawn(run_args: list[str], run_dir: Path, verb: str = "run") -> SimpleNamespace:
        started.append([verb, "--headless", *run_args])  # as `background.spawn` runs it
        return SimpleNamespace(run_dir=run_dir, log=run_dir / "cockpit.log")

    monkeypatch.setattr(background, "spawn", spawn)
    monkeypatch.setattr(background, "watch_to_exit", lambda run, watch, who: 0)
    # What `start.start_fleet` starts on a terminal: the fleet's own arguments, then the spec as data.
    argv = [*fleet._background_args(args, spec), *background.spec_argv(spec)]
    assert start.run_in_background(argv, spec, None, "cockpit fleet", verb="fleet") == 0  # type: ignore[arg-type]
    (argv,) = started
    return spec, argv


def same_run(args: argparse.Namespace, monkeypatch: pytest.MonkeyPatch) -> tuple[fleet.RunSpec, FleetPlan]:
    """Assert that the background run `args` starts parses back to the same spec, plan and rate."""
    spec, argv = in_background(args, monkeypatch)
    back = build_parser().parse_args(argv)
    back.script, back.argv = None, argv
    assert back.command == "fleet" and back.headless and not back.dry_run
    plan, _ = fleet._plan(args)
    back_plan, _ = fleet._plan(back)
    assert back_plan == plan
    assert back.rate == args.rate
    typed = background.typed_command_line(back.typed, back.argv)
    assert typed is not None
    assert fleet._spec(back, back_plan, GPUS_HERE, "", typed) == spec
    return spec, plan


def test_a_new_fleets_background_run_parses_back_to_the_same_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN)
    args = fleet_args(str(plan_file), "--jobs", "3", "--rate", "2.5", "--name", "lr-sweep", "--max-restarts", "5",
                      "--no-tensorboard", "--gpus", "1", "--run-dir", str(tmp_path / "run"))  # fmt: skip
    spec, _ = same_run(args, monkeypatch)
    # Each flag moved the spec off its default, so a flag left off the list shows above.
    assert (spec.jobs, spec.name, spec.restart.max_restarts, spec.tensorboard, spec.gpus) == (
        3, "lr-sweep", 5, False, (1,),
    )  # fmt: skip
    assert spec.command_line == ("cockpit", *args.argv)  # what the user typed, for run.toml


def test_a_fleet_with_every_default_runs_in_the_stamped_dir_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.toml").write_text(PLAN)
    spec, _ = same_run(fleet_args("plan.toml"), monkeypatch)  # the same dir: not a second, later timestamp
    assert spec.name == "sweep" and spec.run_dir.name.endswith("-fleet-sweep")


def test_a_resumed_fleets_background_run_parses_back_to_the_same_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_file, run_dir = tmp_path / "plan.toml", tmp_path / "run"
    plan_file.write_text(PLAN)
    plan, _ = fleet._plan(fleet_args(str(plan_file)))
    supervisor = Supervisor(run_dir=run_dir, template=JobTemplate("cartpole", "CartPole-v1", 1000), seeds=(), slots=2,
                            launcher=FakeLauncher(), budget=thread_budget(2, 2), clock=FakeClock())  # fmt: skip
    FleetRun.new(plan, PLAN, supervisor, clock=supervisor.clock).close()
    args = fleet_args("--resume", str(run_dir), "--jobs", "4", "--rate", "1.25", "--max-restarts", "0")
    spec, _ = same_run(args, monkeypatch)
    assert (spec.jobs, spec.restart.max_restarts, spec.run_dir) == (4, 0, run_dir)


def test_a_typed_line_that_is_not_a_json_list_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN)
    assert main(["fleet", str(plan_file), "--headless", "--run-dir", str(tmp_path / "run"), "--typed", "[1]"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--typed" in err
    assert not (tmp_path / "run").exists()  # nothing was started


@pytest.mark.slow
def test_cockpit_fleet_in_tmux_runs_in_the_background_and_records_what_was_typed(tmp_path: Path) -> None:
    plan_file, run_dir = tmp_path / "plan.toml", tmp_path / "run"
    plan_file.write_text(PLAN.replace("timesteps = 4000", "timesteps = 2_000_000"))
    typed = f"cockpit fleet {plan_file} --jobs 2 --run-dir {run_dir}"
    term = Tmux("cockpit-fleet", f"{sys.executable} -m {typed}; echo EXIT=$?; sleep 60", (100, 30))

    def wait(condition: object, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():  # type: ignore[operator]
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}:\n{term.screen()}")

    def started() -> int:
        jobs = run_dir / "jobs"
        dirs = list(jobs.iterdir()) if jobs.is_dir() else []
        return sum(any(e.kind == "started" for e in read_events(d / "events.jsonl")) for d in dirs)

    try:
        wait(lambda: started() == 2, 180, "both agents' workers to start")
        wait(lambda: "sweep" in term.screen(), 30, "the cockpit on the fleet")
        term.send("q")
        wait(lambda: "Stop all jobs" in term.screen(), 10, "the quit dialog")
        term.send("s")
        wait(lambda: "EXIT=" in term.screen(), 120, "cockpit fleet to exit after stop all")
        assert "EXIT=130" in term.screen(), term.screen()
        record = read(run_dir)
        assert record.status == "interrupted"
        assert record.command == typed  # not the background `cockpit fleet --headless ...` that ran it
    finally:
        term.close()
        for proc in _processes_of(run_dir):  # the background fleet and its workers, after a failure
            proc.kill()
