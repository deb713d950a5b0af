"""The "same error at each start" rule (`exit_policy.ExitPolicy._input_error`) and what it leaves out:
a job that fails the same way twice before a single step is failed at once as its input's error, but
not when either attempt was killed by the stall watch (the cockpit's doing, not the job's) or ran past
`healthy_uptime_s` (a long set-up that failed once is a passing fault, restarted with back-off)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.contract.runspec import RestartPolicy
from cockpit.contract.states import JobState
from cockpit.core.supervise.exit_policy import INPUT_ERROR_EXIT, STALL_GRACE_S
from cockpit.core.supervise.supervisor import Supervisor
from tests.test_supervise_stall import wait
from tests.test_supervise_supervisor import FakeLauncher, crash, events, make

HEALTHY_S = 600.0


def started(sup: Supervisor, launcher: FakeLauncher, job_id: str = "000") -> None:
    """The worker's `started` event, and the tick that reads it: it got as far as its set-up."""
    events(sup, job_id).started(config={}, pid=launcher.live(job_id).pid, device="cpu", versions={})
    sup.tick()


def test_two_stalls_in_a_row_before_a_step_are_restarted_not_taken_for_input(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=RestartPolicy(max_restarts=3, stall_timeout_s=60))
    sup.tick()
    job = sup.jobs["000"]
    for attempt in (1, 2):
        started(sup, launcher)
        proc = launcher.live("000")
        wait(sup, clock, 60 + STALL_GRACE_S)  # silent from its start: not a single step
        assert proc.signals == ["KILL"] and job.steps == 0
        # Its own exit raced the watch's SIGKILL (a pooled worker's status line read first): an
        # exit code, not a signal, so only the stall itself keeps this from counting as input.
        proc.exit_code = 1
        sup.tick()
        assert job.error == "stalled: no events for 70 s"  # the same reason both times
        assert job.state is JobState.BACKOFF and job.restarts == attempt, job.exit_reason
        wait(sup, clock, job.restart_at - clock.monotonic())
        assert job.state is JobState.STARTING
    assert job.exit_reason != INPUT_ERROR_EXIT and "before a single step" not in (job.error or "")


@pytest.mark.parametrize("healthy", ["the first attempt", "the second attempt"])
def test_an_attempt_past_healthy_uptime_is_not_counted_toward_the_same_error_at_each_start(
    tmp_path: Path, healthy: str
) -> None:
    policy = RestartPolicy(max_restarts=3, healthy_uptime_s=HEALTHY_S)
    sup, launcher, clock = make(tmp_path, agents=1, slots=1, restart=policy)
    sup.tick()
    job = sup.jobs["000"]
    for attempt, uptime in enumerate((HEALTHY_S, 2.0) if healthy == "the first attempt" else (2.0, HEALTHY_S), 1):
        started(sup, launcher)
        clock.t += uptime  # a set-up that long, and still not a single step
        crash(sup, launcher, "000", message="connection reset while downloading the env's assets", trained=0)
        sup.tick()
        assert job.state is JobState.BACKOFF and job.restarts == attempt, job.exit_reason
        assert job.steps == 0 and "before a single step" not in (job.error or "")
        clock.t += job.restart_at - clock.monotonic()
        sup.tick()
        assert job.state is JobState.STARTING
    # Both crashes short: the rule applies, as the supervisor's own test shows for its first case.
    started(sup, launcher)
    clock.t += 2.0
    crash(sup, launcher, "000", message="connection reset while downloading the env's assets", trained=0)
    sup.tick()
    if healthy == "the first attempt":  # attempts 2 and 3 were short and failed alike: its input
        assert job.state is JobState.FAILED and job.exit_reason == INPUT_ERROR_EXIT
    else:  # attempt 2 was healthy, so attempt 3 has no short predecessor to repeat
        assert job.state is JobState.BACKOFF and job.restarts == 3
