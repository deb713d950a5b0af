"""One reading of a job's events (`telemetry.job_events`), live and in a replay.

The same events go to the live supervisor (a fake launcher and a fake clock, the events written to
each job's file as its worker would) and, once the run is over, to a replay of the directory they
left. At every tick of the run the replay, seeked to that moment, shows each job as the live
snapshot did, in every field the job's events say: a crash and its restart, a score phase with
its heartbeats, checkpoints, and a worker that reports no episode counts included.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cockpit.contract import presets
from cockpit.contract.events import (
    CheckpointEvent,
    ErrorEvent,
    EvaluatedEvent,
    Event,
    FinishedEvent,
    HeartbeatEvent,
    PhaseEvent,
    ProgressEvent,
    StartedEvent,
)
from cockpit.contract.runrecord import write
from cockpit.contract.runspec import RunSpec
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.feed.snapshot import JobView, RunState
from cockpit.core.machine.host import HostInfo, thread_budget
from cockpit.core.record.replay import open_replay
from cockpit.core.record.runlog import MIB, Recorder, phase_accounting, record
from cockpit.core.supervise.supervisor import JobTemplate, Supervisor
from cockpit.core.telemetry.sampler import JobUsage, Sample
from tests.cycles import script
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher, events

T0 = 1_800_000_000.0

# What a job's events say, shown in each state the job has events in.
DERIVED = ("steps", "episodes", "ep_rew_mean", "ep_len_mean", "rollout_sps", "checkpoints", "last_checkpoint_step",
           "scored", "to_score", "phase", "phase_since")  # fmt: skip
# And while it trains (or is done): its device and its live rates.
RUNNING = ("device", "target_episodes")
RATES = ("sps", "episodes_per_h", "eta_s")


def _scored(t: float, steps: int, k: int) -> list[Event]:
    """A score phase of 3 episodes after training, its heartbeats, the score and the finish."""
    return [PhaseEvent(t, "score", k, steps), HeartbeatEvent(t + 1, "score", steps, scored=1, to_score=3),
            HeartbeatEvent(t + 2, "score", steps, scored=2, to_score=3),
            EvaluatedEvent(t + 3, steps, 21.5, 1.5, 3, 0), FinishedEvent(t + 3.5, "done", steps)]  # fmt: skip


def _attempts(tmp_path: Path) -> dict[str, list[tuple[list[Event], int]]]:
    """Each job's worker attempts: its events in time order and its exit code."""
    # 000 trains with episode counts and returns, checkpoints, then scores its model and is done.
    long = script(T0 + 8, cycles=5, rollout_s=4, train_s=3, steps_per_cycle=800, startup_s=6, finish=False)
    trained = [replace(e, episodes=int(e.t - T0), ep_rew_mean=e.t - T0, ep_len_mean=9.5)
               if isinstance(e, ProgressEvent) else e for e in long.events]  # fmt: skip
    checkpoint = CheckpointEvent(long.cycle_starts[3], str(tmp_path / "000"), 2400)
    job0 = sorted([*trained, checkpoint], key=lambda e: e.t) + _scored(long.end, long.target, 5)
    # 001 reports no episodes; it checkpoints, crashes, and its restart resumes from the checkpoint.
    first = script(T0 + 6, cycles=3, rollout_s=3, train_s=2, steps_per_cycle=600, startup_s=4, finish=False)
    crash = [*first.events, CheckpointEvent(first.cycle_starts[2] + 0.5, str(tmp_path / "001"), 1200),
             ErrorEvent(first.end - 1, "RuntimeError", "segfault in env")]  # fmt: skip
    again = script(first.end + 6, cycles=3, rollout_s=3, train_s=2, steps_per_cycle=600, start_steps=1200,
                   startup_s=3)  # fmt: skip
    return {"000": [(job0, 0)], "001": [(sorted(crash, key=lambda e: e.t), 1), (list(again.events), 0)]}


def test_a_replay_shows_every_job_as_the_live_supervisor_did(tmp_path: Path) -> None:
    clock, launcher = FakeClock(T0), FakeLauncher()
    run_dir = tmp_path / "run"
    sup = Supervisor(run_dir=run_dir, template=JobTemplate("cartpole", "CartPole-v1", 4000), seeds=range(2),
                     slots=2, launcher=launcher, budget=thread_budget(2, 2), clock=clock)  # fmt: skip
    attempts = _attempts(tmp_path)
    total = {job_id: len(queue) for job_id, queue in attempts.items()}
    writers = {job_id: events(sup, job_id) for job_id in attempts}
    recorder = Recorder(run_dir)
    live: list[RunState] = []
    sup.tick()
    for tick in range(400):
        clock.t = T0 + tick * 0.25  # exact in binary, as the CSVs' times read back
        for job_id, queue in attempts.items():
            procs = [p for p in launcher.processes if p.request.job_id == job_id]
            if not queue or len(procs) <= total[job_id] - len(queue):
                continue  # done, or its next attempt not launched yet
            pending, code = queue[0]
            while pending and pending[0].t <= clock.t:
                event = pending.pop(0)
                writers[job_id].emit(replace(event, pid=procs[-1].pid) if isinstance(event, StartedEvent) else event)
            if not pending:
                procs[-1].exit_code = code
                queue.pop(0)
        sup.tick()
        usage = {p.request.job_id: JobUsage(cpu_percent=50.0, rss_bytes=100 * MIB, gpu_mem_bytes=None, pid=p.pid)
                 for p in launcher.processes if p.exit_code is None}  # fmt: skip
        sample = Sample(t=clock.t, cpu_percent=(60.0,), ram_used_bytes=2**30, ram_total_bytes=2**34, gpu=None,
                        jobs=usage, cost_s=0.0)  # fmt: skip
        recorder(sample)
        live.append(sup.snapshot(sample, all_jobs=True))
        if sup.finished:
            break
    recorder.close()
    assert sup.finished and live[-1].status is RunStatus.DONE
    spec = RunSpec(jobs=2, agents=2, loaded_preset=presets.load("cartpole"), preset="cartpole", env="CartPole-v1",
                   timesteps=4000, seed=0, run_dir=run_dir, pin=False,
                   command_line=("cockpit", "run"))  # fmt: skip
    host = HostInfo("box", "Test CPU", 4, 4, 16 * 1024**3, "Linux")
    write(run_dir, record(spec, live[-1], host, phase_accounting({}, recorder, clock.t, final=True), recorder))

    replay = open_replay(run_dir)
    seen: set[JobState] = set()
    scoring = backoff = 0
    for state in live:
        replay.seek(state.now)
        shown = {job.id: job for job in replay.frame().state.jobs}
        for job in state.jobs:
            if job.state is JobState.QUEUED or (job.state is JobState.STARTING and not job.restarts):
                continue  # launched, no event yet: the files hold no launch
            seen.add(job.state)
            scoring += job.scored is not None
            backoff += job.state is JobState.BACKOFF
            replayed: JobView = shown[job.id]
            where = (state.now - T0, job.id, job.state.value)
            for name in DERIVED:
                assert getattr(replayed, name) == getattr(job, name), (*where, name)
            if job.state in (JobState.RUNNING, JobState.DONE):
                for name in RUNNING:
                    assert getattr(replayed, name) == getattr(job, name), (*where, name)
                for name in RATES:
                    expected = getattr(job, name)
                    assert getattr(replayed, name) == (None if expected is None else pytest.approx(expected)), (
                        *where, name)  # fmt: skip
    assert {JobState.RUNNING, JobState.BACKOFF, JobState.STARTING, JobState.DONE} <= seen
    assert scoring >= 8 and backoff >= 4  # the score phase and the back-off were both compared, tick by tick
    assert live[-1].jobs[1].restarts == 1 and live[-1].jobs[1].episodes == 0 and live[-1].jobs[0].checkpoints == 1
