"""The soak's pieces (benchmarks/soak.py) without a soak: the steps redone from a job's events, the
summary line, and how it finds a fleet's training workers among the machine's processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil

from benchmarks.soak import MARKER_ENV, Tally, steps_redone, summary_line, training
from cockpit.contract.events import (
    CheckpointEvent,
    EvaluatedEvent,
    Event,
    FinishedEvent,
    ProgressEvent,
    StartedEvent,
    to_json,
)


def test_steps_redone_is_what_each_restart_trains_again_from_the_highest_step_reached_before() -> None:
    events: list[Event] = [
        StartedEvent(t=0, target_steps=4096),
        ProgressEvent(t=1, num_timesteps=1024), CheckpointEvent(t=1, path="c1", step=1024),
        ProgressEvent(t=2, num_timesteps=1536),  # kill -9 here: 512 steps past the checkpoint
        StartedEvent(t=3, target_steps=4096, resumed_from_step=1024),
        ProgressEvent(t=4, num_timesteps=1280), CheckpointEvent(t=4, path="c2", step=2048),
        FinishedEvent(t=5, status="done", steps=4096),
        StartedEvent(t=6, target_steps=8192, resumed_from_step=4096),  # the next tier: nothing redone
        EvaluatedEvent(t=7, step=8192, mean_reward=9.0, std_reward=1.0, episodes=10, seed=0),
        ProgressEvent(t=8, num_timesteps=5120),  # a corrupt newest checkpoint: back to the one before
        StartedEvent(t=9, target_steps=8192, resumed_from_step=3072),
        ProgressEvent(t=10, num_timesteps=3328),
        StartedEvent(t=11, target_steps=8192),  # no checkpoint left: from the start
    ]  # fmt: skip
    assert steps_redone(events) == [512, 0, 2048, 5120]
    assert steps_redone(events[:4]) == []  # one start: no restart


def test_the_summary_is_one_line_of_faults_by_kind_and_the_counts() -> None:
    tally = Tally(faults=Counter({"kill9": 12, "sigstop": 8, "corrupt": 6, "disk": 5, "cockpit-kill9": 4,
                                  "sighup": 3, "sigint": 3}),
                  fleets=7, fleets_done=7, redone=[2048, 0, 16384])  # fmt: skip
    assert summary_line(30, tally) == (
        "soak 30 min, 7 fleets: faults 41 (kill9 12, sigstop 8, corrupt 6, disk 5, cockpit-kill9 4, sighup 3, "
        "sigint 3); resumes by hand 0; workers left 0; models failing checksum 0; steps redone worst 16,384, "
        "total 18,432"
    )
    bad = Tally(faults=Counter({"sigstop": 1}), fleets=2, fleets_done=1, hand_resumes=2, workers_left=3,
                workers_left_after_kill9=2, models_failing=1)  # fmt: skip
    assert summary_line(4.5, bad) == (
        "soak 4.5 min, 2 fleets (1 done): faults 1 (sigstop 1); resumes by hand 2; workers left 3 (2 after a "
        "cockpit kill -9); models failing checksum 1; steps redone worst 0, total 0"
    )


def test_the_faults_hit_only_a_live_running_worker_of_the_fleet_training_a_job(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # A stand-in worker: a process whose command line names the worker package, under the fleet's marker.
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "cockpit_training"],
                              env={**os.environ, MARKER_ENV: str(run_dir)})  # fmt: skip
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "cockpit_training"],
                             env={**os.environ, MARKER_ENV: str(tmp_path / "another")})  # fmt: skip
    try:
        jobs = {"a0000": [StartedEvent(t=0, pid=worker.pid)],
                "a0001": [StartedEvent(t=0, pid=worker.pid), FinishedEvent(t=1, status="done", steps=8)],
                "a0002": [StartedEvent(t=0, pid=other.pid)]}  # fmt: skip
        for job, events in jobs.items():
            (run_dir / "jobs" / job).mkdir(parents=True)
            lines = "".join(json.dumps(to_json(e)) + "\n" for e in events)
            (run_dir / "jobs" / job / "events.jsonl").write_text(lines)
        assert [(t.job_dir.name, t.pid) for t in training(run_dir)] == [("a0000", worker.pid)]
        os.kill(worker.pid, signal.SIGSTOP)  # stopped: no longer a worker to hit
        deadline = time.monotonic() + 10
        while psutil.Process(worker.pid).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.05)
        assert training(run_dir) == []
    finally:
        for proc in (worker, other):
            proc.kill()
            proc.wait()


def test_a_fleet_takes_the_stall_timeout_the_soak_gives_it(tmp_path: Path) -> None:
    from cockpit.commands import fleet
    from tests.test_fleet_background import GPUS_HERE, PLAN, fleet_args

    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN)
    args = fleet_args(str(plan_file), "--run-dir", str(tmp_path / "run"), "--stall-timeout", "20")
    plan, _ = fleet._plan(args)
    assert fleet._spec(args, plan, GPUS_HERE, "", ("cockpit", "fleet")).restart.stall_timeout_s == 20.0
