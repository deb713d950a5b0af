"""`cockpit run --episodes N`: one line and exit 2 beside --timesteps, the spec, the background
run, run.toml, --resume and the supervisor carry the episode target (a fleet's tiers in episodes:
`test_fleet_episodes`)."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from rich.console import Console

from cockpit.cli import build_parser, main
from cockpit.commands.report import print_report
from cockpit.commands.run import _spec
from cockpit.contract.events import EVENTS_FILE, EventWriter
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import ConfigRecord, HostRecord, JobRecord, RunRecord, write
from cockpit.contract.runspec import ConfigError, RestartPolicy, RunSpec, build_spec
from cockpit.contract.settings import RunSettings
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.machine.host import thread_budget
from cockpit.core.session.background import headless_argv
from cockpit.core.session.run_session import resume_settings
from cockpit.core.supervise.supervisor import JobTemplate, Supervisor
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher, make, run_log

HOST = HostRecord(hostname="h", cpu_model="c", physical_cores=2, logical_cores=2, ram_gib=4.0, os="Linux")


def test_cockpit_run_refuses_timesteps_and_episodes_together_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--headless", "--run-dir", str(tmp_path / "run"), "--timesteps", "1000", "--episodes", "50"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --episodes: not allowed with argument --timesteps" in err
    assert not (tmp_path / "run").exists()  # nothing was started
    with pytest.raises(ConfigError, match=r"^--episodes 50: a run's target is --timesteps or --episodes, not both$"):
        build_spec(
            RunSettings(
                jobs=1,
                agents=1,
                preset="cartpole",
                timesteps=1000,
                episodes=50,
                run_dir=tmp_path / "run",
                max_restarts=0,
            ),
            command_line=("cockpit",),
        )


def test_an_episode_target_reaches_the_spec_the_background_run_run_toml_and_a_resume(tmp_path: Path) -> None:
    def spec_of(argv: list[str]) -> RunSpec:
        return _spec(build_parser().parse_args(["run", *argv]), None, ("cockpit", "run"))

    run_dir = tmp_path / "run"
    spec = spec_of(["--run-dir", str(run_dir), "--episodes", "50"])
    assert spec.episodes == 50 and spec.timesteps == 0  # the preset's 100,000 steps do not apply
    assert (
        spec_of(["--run-dir", str(run_dir)]).timesteps == 100_000
        and spec_of(["--run-dir", str(run_dir)]).episodes is None
    )
    argv = headless_argv(spec)  # a run the TUI starts in the background gets the same target
    assert (spec_of(argv).episodes, spec_of(argv).timesteps) == (50, 0)
    assert spec_of(argv) == dataclasses.replace(spec, command_line=("cockpit", "run"))
    # The run writes it in run.toml's [config]; --resume reads it back from there.
    sup, _, _ = make(tmp_path, agents=1, slots=1)
    recorded = run_log(sup, spec)
    assert "\nepisodes = 50\n" in RunDir(tmp_path).run_toml.read_text()
    assert recorded.config.episodes == 50 and recorded.config.timesteps == 0
    args = resume_settings(run_dir, recorded)
    assert args.episodes == 50 and args.timesteps is None


def test_the_supervisor_gives_each_worker_the_episode_target_and_follows_its_count(tmp_path: Path) -> None:
    clock, launcher = FakeClock(), FakeLauncher()
    sup = Supervisor(run_dir=tmp_path, template=JobTemplate("cartpole", "CartPole-v1", 0, episodes=50),
                     seeds=range(1), slots=1, launcher=launcher, budget=thread_budget(1, 2),
                     restart=RestartPolicy(), clock=clock)  # fmt: skip
    sup.tick()
    args = launcher.processes[0].request.args
    assert args.episodes == 50 and args.timesteps is None
    writer = EventWriter(sup.jobs["000"].job_dir / EVENTS_FILE)
    writer.started(pid=1, device="cpu", resumed_from_step=512, target_episodes=50, resumed_episodes=20)
    sup.tick()
    (job,) = sup.snapshot().jobs
    assert job.target_episodes == 50 and job.episodes == 20 and job.fraction == pytest.approx(0.4)
    writer.progress(num_timesteps=768, episodes=31, ep_len_mean=24.0)
    sup.tick()
    (job,) = sup.snapshot().jobs
    assert job.episodes == 31 and job.ep_len_mean == 24.0


def test_the_readable_report_says_an_episode_target(tmp_path: Path) -> None:
    config = ConfigRecord(jobs=1, agents=1, preset="cartpole", env="CartPole-v1", timesteps=0, seed=0,
                          max_restarts=3, episodes=50)  # fmt: skip
    job = JobRecord(id="000", seed=0, status=JobState.DONE, steps=1_536, target=0, restarts=0, checkpoints=2,
                    target_episodes=50, episodes=57)  # fmt: skip
    write(tmp_path, RunRecord(command="cockpit run --episodes 50", status=RunStatus.DONE, started_at="x",
                              updated_at="x", duration_s=1.0, config=config, host=HOST, jobs=(job,)))  # fmt: skip
    console = Console(width=200, record=True, file=io.StringIO())
    print_report(tmp_path, console)
    text = console.export_text()
    assert "preset cartpole on CartPole-v1, 50 episodes each" in text
    assert "57/50 ep, 1,536" in text
