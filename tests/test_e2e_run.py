"""`cockpit run` end to end with real workers: restarts, failures, interrupts, resume, queueing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from cockpit.contract.rundir import RunDir
from cockpit.contract.states import RunStatus
from tests.cockpitproc import PLAIN_RUN, Cockpit, Tmux, last_steps, run_cockpit, small_preset, start_cockpit
from tests.test_training_tensorboard import assert_curves_go_on_in_the_same_runs


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--jobs", "0"], "argument --jobs: expected a positive integer, got '0'"),
        (["--timesteps", "-5"], "argument --timesteps: expected a positive integer, got '-5'"),
        (["--preset", "huge"], "preset 'huge': no such preset"),
        (["--run-dir", "/sys/cockpit-run"], "--run-dir /sys/cockpit-run: cannot write in /sys"),
        (["--env", "CartPol-v1"], "--env 'CartPol-v1': neither envpool nor gymnasium has this environment; "
                                  "did you mean CartPole-v1"),
        (["--typed", "[1, 2]"], "--typed: give the command line as a JSON list of strings"),
        (["--storage", "/tmp"], "--storage /tmp: only with --ray, where it is the directory the nodes share"),
        (["--ray", "plan.toml"], "--ray plan.toml: expected a Ray head's HOST:PORT, ray://HOST:PORT or auto"),
        (["--ray", "--storage", "/nonexistent"], "--storage /nonexistent: no such directory"),
        (["--pin", "--ray"], "--pin: places jobs on this machine's GPUs or cores; with --ray the cluster places them"),
        (["--auto", "--ray"], "--auto: sizes the run to this machine's cores and GPU; with --ray the jobs run on"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2_and_starts_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    run_dir = tmp_path / "run"
    result = run_cockpit("run", *(["--run-dir", str(run_dir)] if "--run-dir" not in args else []), *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not run_dir.exists() and result.stdout == ""


def test_a_malformed_preset_file_is_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('env = "CartPole-v1"\nn_envs = [8\n')
    result = run_cockpit("run", "--preset", str(bad), "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and f"{bad}: invalid TOML" in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "run").exists()


def test_a_preset_files_unknown_env_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "typo.toml"
    bad.write_text('env = "Pong-v9"\nn_envs = 8\nn_steps = 64\nbatch_size = 256\nn_epochs = 2\n')
    for command in (("run", "--run-dir", str(tmp_path / "run")), ("recommend",), ("tune", "--budget", "1m")):
        result = run_cockpit(*command, "--preset", str(bad))
        assert result.returncode == 2, (command, result.stderr)
        assert f"preset {bad}: env 'Pong-v9': neither envpool nor gymnasium" in result.stderr, command
        assert result.stderr.count("\n") == 1 and result.stdout == "", (command, result.stdout)
    assert not (tmp_path / "run").exists()


def test_a_run_dir_holding_a_run_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.toml").write_text("schema_version = 1\n")
    result = run_cockpit("run", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and "already holds a run; continue it with --resume" in result.stderr


@PLAIN_RUN
@pytest.mark.slow
def test_plain_cockpit_run_trains_two_cartpole_jobs_to_the_end(plain_cartpole_run: Cockpit) -> None:
    cockpit = plain_cartpole_run  # `cockpit run --run-dir DIR`, nothing else (conftest.py)
    assert cockpit.proc.returncode == 0, cockpit.text()
    log = cockpit.run_log()
    assert log.status == "done" and log.config.preset == "cartpole" and log.config.jobs == 2
    assert [(j.status, j.steps) for j in log.jobs] == [("done", 100_000), ("done", 100_000)]
    assert all(j.final_ep_rew_mean >= 475 for j in log.jobs)
    assert log.gpu.present is False and log.gpu.telemetry.startswith("no GPU telemetry")
    assert log.utilization.train_share > 0
    assert log.jobs[0].phases["rollout"].seconds > 0 and log.jobs[0].cpu_percent_mean > 0
    out = cockpit.text()
    assert "[job 000] starting -> running" in out and "run done: 2 done" in out
    report = run_cockpit("report", str(cockpit.run_dir))
    assert report.returncode == 0 and "time with at least one job training" in report.stdout


@pytest.mark.slow
def test_a_killed_worker_restarts_from_its_checkpoint_and_the_run_completes(tmp_path: Path) -> None:
    preset = small_preset(tmp_path, checkpoint_every=2048, timesteps=10_000)
    cockpit = start_cockpit(tmp_path / "run", "--preset", str(preset), "--jobs", "2")
    cockpit.wait_for(lambda: any(e.kind == "checkpoint" for e in cockpit.events("000")))
    events = cockpit.events("000")
    (started,) = [e for e in events if e.kind == "started"]
    killed_at = last_steps(events)
    os.kill(started.pid, signal.SIGKILL)
    assert cockpit.finish() == 0, cockpit.text()
    events = cockpit.events("000")
    restarted = [e for e in events if e.kind == "started"][1]
    # At most one checkpoint interval (plus the rollout it ends in) is lost.
    assert killed_at - restarted.resumed_from_step <= 2048 + 256
    log = cockpit.run_log()
    job = log.jobs[0]
    assert job.restarts == 1 and job.status == "done" and job.steps == 10_000
    assert "killed by SIGKILL" in cockpit.text()


@pytest.mark.slow
def test_a_job_that_fails_every_start_is_marked_failed_and_the_others_finish(tmp_path: Path) -> None:
    preset = small_preset(tmp_path, checkpoint_every=512, timesteps=10_000)
    run_dir = tmp_path / "run"
    # Job 001 can never write a checkpoint: its checkpoints "directory" is a file.
    (run_dir / "jobs" / "001").mkdir(parents=True)
    (run_dir / "jobs" / "001" / "checkpoints").write_text("in the way")
    cockpit = start_cockpit(run_dir, "--preset", str(preset), "--jobs", "2", "--max-restarts", "2")
    assert cockpit.finish() == 1, cockpit.text()
    log = cockpit.run_log()
    good, bad = log.jobs
    assert good.status == "done" and good.steps == 10_000
    assert bad.status == "failed" and bad.restarts == 2 and bad.exit_reason == "failed after 2 restarts"
    assert bad.error.startswith("FileExistsError")
    out = cockpit.text()
    assert "run failed: 1 done, 1 failed" in out
    assert "job 001 (seed 1) failed" in out and "FileExistsError" in out


@pytest.mark.slow
def test_sigint_checkpoints_every_job_and_resume_finishes_them(tmp_path: Path) -> None:
    # A target far enough past the 2,000 steps waited for that neither job can reach it before the
    # interrupt, even when one worker starts seconds before the other.
    preset = small_preset(tmp_path, checkpoint_every=100_000, timesteps=16_000)
    run_dir = tmp_path / "run"
    cockpit = start_cockpit(run_dir, "--preset", str(preset), "--jobs", "2", "--agents", "3")
    cockpit.wait_for(lambda: all(last_steps(cockpit.events(j)) > 2000 for j in ("000", "001")))
    sent = time.monotonic()
    cockpit.proc.send_signal(signal.SIGINT)
    assert cockpit.finish(timeout=20) == 130
    assert time.monotonic() - sent < 15
    log = cockpit.run_log()
    assert log.status == "interrupted"
    stopped = {j.id: j.steps for j in log.jobs}
    for job_id in ("000", "001"):
        kinds = [e.kind for e in cockpit.events(job_id)]
        assert kinds[-2:] == ["checkpoint", "finished"]
    assert [j.status for j in log.jobs] == ["stopped", "stopped", "stopped"]
    assert 0 < stopped["000"] < 16_000 and 0 < stopped["001"] < 16_000 and stopped["002"] == 0

    resumed = subprocess.run(
        [*cockpit.proc.args[:3], "run", "--resume", str(run_dir)], capture_output=True, text=True, timeout=240
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = cockpit.run_log()
    assert log.status == "done" and [j.steps for j in log.jobs] == [16_000, 16_000, 16_000]
    for job_id in ("000", "001"):
        starts = [e for e in cockpit.events(job_id) if e.kind == "started"]
        assert starts[-1].resumed_from_step == stopped[job_id]
    # TensorBoard's curves went on across the stop, in the same runs (the tensorboard extra is a dev dependency).
    assert_curves_go_on_in_the_same_runs(RunDir(run_dir).job("000"), stopped["000"], 16_000,
                                         cockpit.text() + resumed.stdout + resumed.stderr)  # fmt: skip


@pytest.mark.slow
def test_no_worker_or_env_process_outlives_a_killed_cockpit(tmp_path: Path) -> None:
    # Taxi-v4 is not in envpool: the gymnasium fallback steps it, here in SubprocVecEnv processes
    # (forced: its cheap step alone would pick DummyVecEnv), the workers' own children (through the
    # forkserver), which must end with them.
    preset = tmp_path / "taxi.toml"
    preset.write_text(
        'env = "Taxi-v4"\nn_envs = 2\nn_steps = 64\nbatch_size = 64\nn_epochs = 1\ntimesteps = 1_000_000\n'
        'vec_env = "subproc"\n'
    )
    cockpit = start_cockpit(tmp_path / "run", "--preset", str(preset), "--jobs", "2")
    cockpit.wait_for(lambda: all(any(e.kind == "phase" for e in cockpit.events(j)) for j in ("000", "001")))
    workers = cockpit.workers()
    assert len(workers) == 2
    everyone = psutil.Process(cockpit.proc.pid).children(recursive=True)  # taken before the kill
    env_procs = [p for w in workers for p in w.children(recursive=True)]
    assert len(env_procs) >= 2 * 2, env_procs  # each worker's 2 env processes at least
    cockpit.proc.kill()
    cockpit.finish()
    deadline = time.monotonic() + 10
    alive = everyone
    while alive and time.monotonic() < deadline:
        alive = [p for p in everyone if _alive(p)]
        time.sleep(0.1)
    assert alive == [], [(p.pid, p.name(), p.cmdline()) for p in alive if _alive(p)]


def _alive(proc: psutil.Process) -> bool:
    """Whether the process still runs (a zombie has ended; the same pid reused is another process)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_five_agents_through_two_slots(tmp_path: Path) -> None:
    preset = small_preset(tmp_path, timesteps=2048)
    cockpit = start_cockpit(tmp_path / "run", "--preset", str(preset), "--jobs", "2", "--agents", "5")
    most = 0
    while cockpit.proc.poll() is None:
        most = max(most, len(cockpit.workers()))
        time.sleep(0.05)
    assert cockpit.proc.returncode == 0, cockpit.text()
    assert most == 2
    log = cockpit.run_log()
    assert [j.seed for j in log.jobs] == [0, 1, 2, 3, 4]
    assert all(j.status == "done" and j.steps == 2048 for j in log.jobs)


@pytest.mark.slow
def test_more_env_threads_than_cores_is_a_warning_with_the_numbers(tmp_path: Path) -> None:
    cores = psutil.cpu_count(logical=False) or 1
    jobs = cores + 1  # one env thread more than cores: the least that must warn (each job is a worker to start)
    preset = small_preset(tmp_path, timesteps=512)
    cockpit = start_cockpit(tmp_path / "run", "--preset", str(preset), "--jobs", str(jobs))
    assert cockpit.finish() == 0, cockpit.text()
    expected = f"{jobs} parallel jobs x 1 env thread(s) = {jobs} env threads on {cores} physical cores"
    assert expected in cockpit.text()
    assert expected in cockpit.run_log().warnings[0]


@pytest.mark.slow
def test_the_live_table_works_in_a_real_terminal_under_tmux(tmp_path: Path) -> None:
    preset = small_preset(tmp_path, timesteps=1_000_000)
    command = f"{cockpit_command()} run --headless --run-dir {tmp_path / 'run'} --preset {preset}; sleep 30"
    term = Tmux("cockpit-test", command, (150, 30))
    try:
        screen = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            screen = term.screen()
            if " rollout " in screen or " train " in screen:  # a job's phase column, so jobs are live
                break
            time.sleep(0.5)
        assert "status" in screen and "SPS" in screen and "ep_rew" in screen and "…" not in screen, screen
        assert "running" in screen and "no GPU telemetry" in screen, screen
        while term.screen() == screen and time.monotonic() < deadline + 30:  # redrawn at least once more
            time.sleep(0.5)
        # The pane alone always fits its 30 rows; a table printed anew at each update instead of
        # redrawn in place leaves its earlier copies in the scrollback.
        history = term.scrollback()
        assert history.count("ep_rew") == 1, f"a live table redraws in place; it must not scroll:\n{history}"
    finally:
        term.close()


def cockpit_command() -> str:
    import sys

    return f"{sys.executable} -m cockpit"


def test_resume_refuses_flags_that_would_change_the_run(tmp_path: Path) -> None:
    result = run_cockpit("run", "--resume", str(tmp_path), "--preset", "heavy", "--timesteps", "5")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "cockpit run: error: --resume continues a run with its recorded settings; drop --preset, --timesteps"
    )


def test_resume_of_a_directory_without_a_run_is_one_line(tmp_path: Path) -> None:
    result = run_cockpit("run", "--resume", str(tmp_path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert f"--resume {tmp_path}: no usable run.toml there" in result.stderr


def test_interrupt_exit_codes_follow_the_signal() -> None:
    from cockpit.core.session.run_session import exit_code
    from tests.test_views_headless import T0, state

    interrupted = state(T0, RunStatus.INTERRUPTED)
    assert exit_code(interrupted, signal.SIGINT) == 130 and exit_code(interrupted, signal.SIGTERM) == 143
    assert exit_code(state(T0, RunStatus.DONE)) == 0 and exit_code(state(T0, RunStatus.FAILED)) == 1


@pytest.mark.slow
def test_auto_adds_jobs_by_measuring_and_logs_each_change(tmp_path: Path) -> None:
    # Long enough that an agent finishing (and its successor starting) cannot end every window
    # before the second decision on a loaded machine. Once that decision has been made (and shown
    # live), the rest of the run would only train: it is interrupted there, and its run log read.
    preset = small_preset(tmp_path, timesteps=150_000)
    cockpit = start_cockpit(tmp_path / "run", "--auto", "--auto-window", "6", "--agents", "3", "--preset", str(preset))
    decision = re.compile(r"\[cockpit\] auto: (keep|remove|stop) ")
    cockpit.wait_for(lambda: decision.search(cockpit.text()) is not None, timeout=180)
    cockpit.proc.send_signal(signal.SIGINT)
    assert cockpit.finish(timeout=60) == 130, cockpit.text()
    log = cockpit.run_log()
    assert log.status == "interrupted" and all(j.steps < 150_000 for j in log.jobs)  # it stopped early
    advice = log.advice
    first = advice[0]
    assert (first.action, first.jobs_before, first.jobs_after) == ("add", 1, 2), advice
    assert first.sps_before > 0 and first.at.endswith("Z")
    decided = [a for a in advice if a.action in ("keep", "remove", "stop")]
    assert decided and all(a.sps_after is not None or a.action == "stop" for a in decided), advice
    assert "[cockpit] auto: add (1 -> 2 jobs)" in cockpit.text()  # shown live too
