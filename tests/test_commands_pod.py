"""`cockpit-pod`, the container's entrypoint: it starts the run in its directory on the volume, resumes
the same run after a restart (a kill -9 mid-run included), does nothing for one that ended, and
refuses a directory that holds another run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from cockpit.cli import main as cockpit_main
from cockpit.commands.pod import main as pod_main
from cockpit.commands.pod import pod_step
from cockpit.contract.events import CheckpointEvent, StartedEvent, of_kind, read_events
from cockpit.contract.runrecord import read
from cockpit.contract.runspec import ConfigError
from cockpit.contract.states import RunStatus

POD = str(Path(sys.executable).parent / "cockpit-pod")
PLAN = """name = "night"
jobs = 2
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = 2
[[tiers]]
timesteps = 2048
"""


def test_a_new_directory_starts_the_run_headless_under_the_volume(tmp_path: Path) -> None:
    step = pod_step(["run", "--preset", "cartpole", "--jobs", "2"], tmp_path)
    assert step.argv == ["run", "--preset", "cartpole", "--jobs", "2", "--run-dir", str(tmp_path / "run"), "--headless"]
    named = pod_step(["run", "--name", "nightly", "--", "python", "train.py"], tmp_path)
    assert named.argv == ["run", "--name", "nightly", "--run-dir", str(tmp_path / "nightly"), "--headless", "--",
                          "python", "train.py"]  # fmt: skip
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    fleet = pod_step(["fleet", str(plan), "--rate", "1.89"], tmp_path)
    assert fleet.argv == ["fleet", str(plan), "--rate", "1.89", "--run-dir", str(tmp_path / "night"), "--headless"]


@pytest.mark.parametrize(
    ("argv", "named"),
    [([], "give the command"), (["attach", "x"], "give the command"), (["run", "--resume", "r"], "--resume"),
     (["fleet", "p.toml", "--dry-run"], "--dry-run"), (["fleet", "--jobs", "2"], "give the plan first")],
)  # fmt: skip
def test_what_it_cannot_carry_out_is_one_line_exit_2(
    argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError, match=named):
        pod_step(argv, tmp_path)
    os.environ["COCKPIT_RUNS"] = str(tmp_path)
    try:
        assert pod_main(argv) == 2
    finally:
        del os.environ["COCKPIT_RUNS"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cockpit-pod: error: ")


def _ended_run(tmp_path: Path, script: str) -> tuple[list[str], Path]:
    """A script run started as the pod starts it, run to its end; the pod's argv and its run dir."""
    argv = ["run", "--max-restarts", "0", "--no-tensorboard", "--", sys.executable, "-c", script]
    step = pod_step(argv, tmp_path)
    assert step.argv is not None
    cockpit_main(step.argv)
    return argv, tmp_path / "run"


def test_an_ended_run_is_not_run_again_and_another_run_is_refused(tmp_path: Path) -> None:
    argv, run_dir = _ended_run(tmp_path, "pass")
    assert read(run_dir).status is RunStatus.DONE
    step = pod_step(argv, tmp_path)
    assert step.argv is None and step.code == 0 and step.note.endswith("already ended (done): nothing to do")
    before = sorted(p.name for p in run_dir.iterdir())
    with pytest.raises(ConfigError, match=rf"^{run_dir} holds another run \(cockpit run --max-restarts 0 .*\); give"):
        pod_step(["run", "--preset", "cartpole"], tmp_path)
    assert sorted(p.name for p in run_dir.iterdir()) == before  # nothing written there
    failed_argv, _ = _ended_run(tmp_path / "f", "raise SystemExit(3)")
    assert pod_step(failed_argv, tmp_path / "f").code == 1


def test_an_unfinished_run_resumes_with_only_the_flags_a_resume_takes(tmp_path: Path) -> None:
    argv = ["run", "--preset", "cartpole", "--env", "CartPole-v1", "--timesteps", "9000", "--jobs", "2", "--seed",
            "5", "--gpus", "0", "--no-tensorboard", "--on-done", "echo bye"]  # fmt: skip
    start = pod_step(argv, tmp_path).argv
    assert start is not None
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # What a pod killed mid-run leaves: run.toml says running, and records the command it began with.
    record = {"name": None, "command": " ".join(["cockpit", *start]), "status": "running"}
    (run_dir / "run.toml").write_text(_minimal_run_toml(record))
    step = pod_step(argv, tmp_path)
    assert step.argv == ["run", "--resume", str(run_dir), "--jobs", "2", "--gpus", "0", "--no-tensorboard",
                         "--on-done", "echo bye", "--headless", "--typed", json.dumps(["cockpit", *start])]  # fmt: skip
    assert "resuming the run in" in step.note


def _minimal_run_toml(fields: dict[str, object]) -> str:
    """A run.toml with what `runrecord.read` needs, and `fields` over it."""
    return (f'name = "x"\ncommand = {json.dumps(fields["command"])}\nstatus = "{fields["status"]}"\n'
            'started_at = "2026-11-28T10:00:00Z"\nupdated_at = "2026-11-28T10:00:01Z"\nduration_s = 1.0\n'
            '[config]\njobs = 2\nagents = 2\npreset = "cartpole"\nenv = "CartPole-v1"\ntimesteps = 9000\nseed = 5\n'
            'max_restarts = 3\n[host]\nhostname = "h"\ncpu_model = "c"\nphysical_cores = 2\nlogical_cores = 2\n'
            'ram_gib = 24.0\nos = "Linux"\n')  # fmt: skip


def checkpointed(job_dir: Path) -> bool:
    """Whether the job has written a checkpoint."""
    events = job_dir / "events.jsonl"
    return events.exists() and bool(of_kind(read_events(events), CheckpointEvent))


def kill_pod_once_checkpointed(argv: list[str], env: dict[str, str], job_dirs: list[Path]) -> None:
    """Start the pod (`argv`), and once every job in `job_dirs` has a checkpoint, kill it the way a
    pod dies: every process in it at once, the workers too (they run in sessions of their own, and
    would otherwise checkpoint on their way out when their parent dies)."""
    first = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while not all(checkpointed(job) for job in job_dirs):
            assert time.monotonic() < deadline and first.poll() is None, "no checkpoint of every job within 120 s"
            time.sleep(0.2)
        everyone = [psutil.Process(first.pid), *psutil.Process(first.pid).children(recursive=True)]
        for process in everyone:
            process.kill()
        first.wait(timeout=30)
        psutil.wait_procs(everyone, timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_pod_killed_mid_run_resumes_from_its_checkpoints_when_started_again(tmp_path: Path) -> None:
    env = {**os.environ, "COCKPIT_RUNS": str(tmp_path / "runs")}
    argv = [POD, "run", "--preset", "cartpole", "--jobs", "2", "--timesteps", "24000", "--no-tensorboard"]
    jobs = tmp_path / "runs" / "run" / "jobs"
    kill_pod_once_checkpointed(argv, env, [jobs / j for j in ("000", "001")])
    # A checkpoint every 10,000 steps (the preset's): each job had one, and had not finished.
    saved = {j: of_kind(read_events(jobs / j / "events.jsonl"), CheckpointEvent)[-1].step for j in ("000", "001")}
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "cockpit-pod: resuming the run in" in again.stderr
    record = read(tmp_path / "runs" / "run")
    started_as = ["cockpit", *argv[1:], "--run-dir", str(tmp_path / "runs" / "run"), "--headless"]
    assert record.status is RunStatus.DONE and record.command == " ".join(started_as)  # resumes record the start
    assert all(0 < steps < 24000 for steps in saved.values()), saved
    for j, steps in saved.items():
        started = of_kind(read_events(jobs / j / "events.jsonl"), StartedEvent)
        assert started[-1].resumed_from_step == steps  # each job went on from its newest checkpoint
    third = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert third.returncode == 0 and "already ended (done): nothing to do" in third.stderr


def test_a_volume_this_user_cannot_write_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    # The suite runs as root here, whom access() lets write anywhere: the check's answer is scripted.
    locked = tmp_path / "locked"
    locked.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "access", lambda path, mode: Path(path) != locked)
        uid = os.getuid()
        with pytest.raises(ConfigError, match=rf"^{locked} is not writable by uid {uid} .*chown {uid} that directory"):
            pod_step(["run", "--preset", "cartpole"], locked)
        assert pod_step(["run", "--preset", "cartpole", "--run-dir", str(tmp_path / "free")], locked).argv
    assert not (locked / "run").exists()


def test_an_unfinished_fleet_resumes_without_its_plan_and_name(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    argv = ["fleet", str(plan), "--name", "night", "--rate", "1.89", "--jobs", "2", "--no-tensorboard"]
    start = pod_step(argv, tmp_path).argv
    assert start is not None
    run_dir = tmp_path / "night"
    run_dir.mkdir()
    record = {"name": "night", "command": " ".join(["cockpit", *start]), "status": "interrupted"}
    (run_dir / "run.toml").write_text(_minimal_run_toml(record))
    step = pod_step(argv, tmp_path)
    # The plan and the name are fleet.db's now: a resume given either again refuses it (exit 2).
    assert step.argv == ["fleet", "--resume", str(run_dir), "--rate", "1.89", "--jobs", "2", "--no-tensorboard",
                         "--headless", "--typed", json.dumps(["cockpit", *start])]  # fmt: skip
    assert step.note == f"cockpit-pod: resuming the run in {run_dir} (interrupted when it stopped)"


@pytest.mark.slow
def test_a_pod_killed_mid_fleet_resumes_the_fleet_from_its_checkpoints_when_started_again(tmp_path: Path) -> None:
    env = {**os.environ, "COCKPIT_RUNS": str(tmp_path / "runs")}
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.replace("timesteps = 2048", "timesteps = 24000"))
    argv = [POD, "fleet", str(plan), "--no-tensorboard"]
    run_dir = tmp_path / "runs" / "night"  # the plan's name
    jobs = run_dir / "jobs"
    kill_pod_once_checkpointed(argv, env, [jobs / a for a in ("a0000", "a0001")])
    saved = {a: of_kind(read_events(jobs / a / "events.jsonl"), CheckpointEvent)[-1].step for a in ("a0000", "a0001")}
    assert read(run_dir).status is RunStatus.RUNNING  # what a killed pod leaves
    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"cockpit-pod: resuming the run in {run_dir} (running when it stopped)" in again.stderr
    record = read(run_dir)
    started_as = ["cockpit", *argv[1:], "--run-dir", str(run_dir), "--headless"]
    assert record.status is RunStatus.DONE and record.command == " ".join(started_as)
    assert all(0 < steps < 24000 for steps in saved.values()), saved
    for agent, steps in saved.items():
        started = of_kind(read_events(jobs / agent / "events.jsonl"), StartedEvent)
        assert started[-1].resumed_from_step == steps  # each agent went on from its newest checkpoint
    third = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert third.returncode == 0 and "already ended (done): nothing to do" in third.stderr


def test_a_resume_says_the_recorded_on_done_first_and_refuses_a_directory_others_may_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "--preset", "cartpole", "--timesteps", "9000", "--jobs", "2", "--seed", "5"]
    start = pod_step(argv, tmp_path).argv
    assert start is not None
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    # A pod killed mid-run, then an --on-done added to its run.toml by hand: the pod resumes by itself.
    record = {"name": None, "command": " ".join(["cockpit", *start]), "status": "running"}
    text = _minimal_run_toml(record).replace("max_restarts = 3\n", 'max_restarts = 3\non_done = "id > /tmp/x"\n')
    (run_dir / "run.toml").write_text(text)
    step = pod_step(argv, tmp_path)
    assert step.argv is not None and step.argv[:3] == ["run", "--resume", str(run_dir)]
    assert step.note.splitlines()[1:] == [f"cockpit-pod: resuming {run_dir}: --on-done from run.toml: 'id > /tmp/x'"]
    os.chmod(run_dir, 0o777)
    with pytest.raises(ConfigError, match=rf"^{run_dir} is writable by its group or by others \(mode 777\): "):
        pod_step(argv, tmp_path)
    os.environ["COCKPIT_RUNS"] = str(tmp_path)
    try:
        assert pod_main(argv) == 2  # before its exec: nothing of the run is started
    finally:
        del os.environ["COCKPIT_RUNS"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"cockpit-pod: error: {run_dir} is writable by its group")
