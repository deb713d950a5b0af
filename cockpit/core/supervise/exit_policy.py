"""What a job's exit means: done, stopped, paused, restarted with back-off, or failed; and when a
silent worker is taken for hung (`ExitPolicy`, the supervisor's rules for its jobs' ends).

A crashed job restarts from its checkpoint as its `RestartPolicy` says: the n-th restart in a row
waits `backoff_s · 2^(n-1)` s (1 s, 2 s, 4 s … by default), at most `backoff_max_s`; the crash
after `max_restarts` restarts in a row marks it failed. An attempt that ran `healthy_uptime_s`
(from its launch, on the supervisor's clock) before crashing starts the count again, so a job
that trains for days and crashes now and then is never failed for it, while one that cannot get
going fails within seconds. One that fails with the same error on two starts in a row, each
before a single step and by its own error (not a signal, a stall or a full disk), is failed at
once: that error is its input (`INPUT_ERROR_EXIT`), and a restart would only repeat it. A worker
that ran out of disk space (a `disk_full` error, or exit code `DISK_FULL_EXIT`) is not a crash:
its job is paused, with the free space in its error, until there is room for its checkpoints
again (`disk_wait`, within `--disk-wait`), a restart command or `run --resume`.

A running worker that writes no event for its stall timeout (`RestartPolicy.stall_timeout`: the
`--stall-timeout`, else 3x the job's longest silence so far, at least 60 s) is hung: its job turns
`stalled`, and once it has shown as stalled for `STALL_GRACE_S` too, the worker is killed, process
group and all, and restarted from its checkpoint as a crash that counts against the policy, with
`stalled: no events for N s` as its error. A worker stopped by a signal (state T) is shown stalled
at once (at the first tick in which it wrote nothing: only then is its process state asked for),
and killed on the same timeout. Events that resume before the kill make it running again.

A script run (`cockpit run -- python train.py ...`: `JobTemplate.script`) launches each job as the
user's command under the guard (`ScriptArgs`). Such a job is running once launched, and is done
when the command exits 0; any other exit is a crash. Its events, if its script reports through
`CockpitCallback`, are followed like a worker's (a `started` event's `target_steps` becomes the
job's target); until the first one it shows `NO_EVENTS_NOTE`, and the stall watch leaves it
alone: a script may be silent all its life.

Under MPS (`workload.Placement.mps`: `--mps`), each worker placed on a GPU is a client of that
GPU's MPS daemon. A fatal fault in one MPS client ends every client on that GPU, so crashes of
several jobs of one GPU within `MPS_FAULT_WINDOW_S` of each other are one event, not one each: the
first crash is counted against its job's policy as any crash is; the others on that GPU within the
window are that same fault, restarted from their checkpoints with the first (at the same moment)
without counting against their own policies or being taken for their input's error, and one warning
names MPS and every job it ended. The server refuses new clients until every client of the fault
has exited, so none of them restarts while another job of that GPU still has a worker: a crash
under MPS waits for the others of its GPU while it may still be the first of a fault
(`MPS_FAULT_WINDOW_S`), and a fault's jobs wait until they are all gone. Jobs of other GPUs are
never held: each GPU has its own daemon. The same holds without `--mps` where a daemon found
running serves every CUDA process (`MpsServers.external`). An error of MPS itself
(`mps_daemon.mps_error`: the server not ready, the client unable to connect) is never taken for the
job's input: it restarts with back-off as any GPU fault does.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass

from cockpit.contract.events import FinishedEvent
from cockpit.contract.files import free_space
from cockpit.contract.runspec import RestartPolicy
from cockpit.contract.states import JobState
from cockpit.contract.workerargs import DISK_FULL_ERROR, DISK_FULL_EXIT
from cockpit.core.launch.protocol import Launcher, WorkerHandle
from cockpit.core.machine.clock import Clock
from cockpit.core.machine.mps_daemon import mps_error
from cockpit.core.supervise.disk_wait import PAUSED_FOR_DISK
from cockpit.core.supervise.jobs import Job
from cockpit.core.supervise.workload import Placer

# A stalled job is shown as such at least this long before it is killed: a viewer sees why, and a
# worker that was only slow gets one more chance to report.
STALL_GRACE_S = 10.0
# Under MPS, crashes of jobs of one GPU this close together are one client fault that ended them
# all: the driver ends every client within moments, and their workers exit as their next CUDA call
# fails, which a job in its rollout makes only once the rollout ends (seconds).
MPS_FAULT_WINDOW_S = 10.0


@dataclass
class MpsFault:
    """One MPS client fault on a GPU: when its first crash was (supervisor clock), the jobs it
    ended in order, when they all restart, the index of its warning in `Supervisor.warnings`, and
    the workers of the GPU's other jobs at its first crash (`clients`: the server's clients then,
    which must all be gone before it takes new ones)."""

    gpu: int
    at: float
    jobs: list[str]
    restart_at: float | None
    warning: int
    clients: tuple[WorkerHandle, ...] = ()


# A job's exit reason when it failed the same way, before a single step, on two starts in a row.
INPUT_ERROR_EXIT = "failed: the same error at each start"


def exit_reason(code: int) -> str:
    """How a worker that exited with `code` ended, in words (a negative code: the signal)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class ExitPolicy:
    """The supervisor's rules for how its jobs end (the module docstring): `exited` takes in a
    worker's exit, `held` says whether a job due to restart waits for its MPS server, `watch` is
    the stall watch. It changes the jobs in `jobs` and adds to `warnings` (the supervisor's)."""

    def __init__(
        self,
        restart: RestartPolicy,
        clock: Clock,
        launcher: Launcher,
        placer: Placer,
        jobs: Mapping[str, Job],
        warnings: list[str],
        script: tuple[str, ...] | None,
    ) -> None:
        self.restart = restart
        self.clock = clock
        self.launcher = launcher
        self.placer = placer
        self.jobs = jobs
        self.warnings = warnings
        self.script = script is not None  # the jobs run the user's command (`JobTemplate.script`)
        self.mps_faults: list[MpsFault] = []

    def exited(self, job: Job, code: int, *, interrupted: bool) -> bool:
        """Take in the exit of `job`'s worker with `code` (`interrupted`: the run is stopping) and
        move the job on: done, stopped, paused, in back-off, or failed. True when it is to be
        queued again now (a `RestartJob` or fewer slots stopped it to restart)."""
        now = self.clock.time()
        handle, job.handle = job.handle, None
        if job.attempt_started_at is not None:
            job.active_seconds += now - job.attempt_started_at
        job.end_attempt(now)
        finished = job.attempt_finished
        if self.script:  # a script is done when it exits 0, whatever it reported
            finished = FinishedEvent(now, "done", job.steps) if code == 0 and not job.stop_requested else None
        if finished is not None and finished.status == "done":
            job.change_state(JobState.DONE, now)
            job.exit_reason, job.ended_at, job.slot = "done", now, None
            return False
        if job.stop_requested or finished is not None:
            restart = job.exit_reason == "restart" and not interrupted
            job.change_state(JobState.STOPPED, now)
            job.ended_at, job.slot = now, None
            job.exit_reason = "stopped" if finished is not None else exit_reason(code)
            return restart
        if self._pause_if_disk_full(job, code, now):
            return False
        if job.stall_reason is not None:  # killed by the stall watch: its SIGKILL says nothing
            reason = job.stall_reason
        elif job.attempt_error is not None:
            reason = job.attempt_error.reason
        else:
            tail = self.launcher.stderr_tail(handle, 1)
            reason = exit_reason(code) + (f": {tail}" if tail else "")
        job.error = reason
        if interrupted:
            job.change_state(JobState.STOPPED, now)
            job.exit_reason, job.ended_at, job.slot = exit_reason(code), now, None
            return False
        policy = self.restart
        if self._mps_collateral(job, code):
            return False
        healthy = job.attempt_started_at is not None and now - job.attempt_started_at >= policy.healthy_uptime_s
        # The server's error, not the job's: its worker's last words may come before a traceback's tail.
        server_fault = mps_error(reason) or (handle is not None and mps_error(self.launcher.stderr_tail(handle, 20)))
        if self._input_error(job, code, reason, healthy, server_fault=server_fault):
            job.error = (
                f"{reason} (the same error on 2 starts in a row, each before a single step: the "
                "job's input, its env, preset or command, not a passing fault; fix it and resume the run)"
            )
            job.change_state(JobState.FAILED, now)
            job.exit_reason, job.ended_at, job.slot = INPUT_ERROR_EXIT, now, None
            return False
        if healthy:
            job.restarts_in_a_row = 0  # this attempt was healthy: its crash is not part of a crash loop
        if job.restarts_in_a_row < policy.max_restarts:
            job.restarts_in_a_row += 1
            job.restarts += 1
            delay = min(policy.backoff_max_s, policy.backoff_s * 2 ** (job.restarts_in_a_row - 1))
            job.restart_at = self.clock.monotonic() + delay
            job.change_state(JobState.BACKOFF, now)
            job.exit_reason = job.stall_reason or exit_reason(code)
        else:
            job.change_state(JobState.FAILED, now)
            job.exit_reason, job.ended_at, job.slot = f"failed after {job.restarts_in_a_row} restarts", now, None
        return False

    def _mps_collateral(self, job: Job, code: int) -> bool:
        """Under MPS, whether this crash is part of an MPS client fault already counted: another job
        of the same GPU crashed less than `MPS_FAULT_WINDOW_S` ago. Such a job goes to back-off
        with the fault's first job, to restart from its checkpoint when that one does, without
        counting against its own policy; the fault's warning then names it too. A first crash
        opens a possible fault and is counted as usual (returns False). A kill by the stall watch
        is the cockpit's doing, not a client fault."""
        if not self.placer.mps_served or job.gpu is None or job.stall_reason is not None:
            return False
        now_mono, now = self.clock.monotonic(), self.clock.time()
        index = job.gpu.index
        fault = next(
            (f for f in reversed(self.mps_faults) if f.gpu == index and now_mono - f.at <= MPS_FAULT_WINDOW_S), None
        )
        if fault is None:
            # Its restart time is set by the caller's count; the fault learns it on its second job.
            # A fault is kept while it may grow, and while its jobs wait for the others of its GPU.
            waiting = {j.id for j in self.jobs.values() if j.state is JobState.BACKOFF}
            self.mps_faults = [
                f for f in self.mps_faults if now_mono - f.at <= MPS_FAULT_WINDOW_S or waiting.intersection(f.jobs)
            ]
            clients = tuple(
                o.handle
                for o in self.jobs.values()
                if o.handle is not None and o.gpu is not None and o.gpu.index == index
            )
            self.mps_faults.append(MpsFault(index, now_mono, [job.id], restart_at=None, warning=-1, clients=clients))
            return False
        first = self.jobs.get(fault.jobs[0])
        if fault.restart_at is None:
            fault.restart_at = first.restart_at if first is not None and first.state is JobState.BACKOFF else now_mono
        fault.jobs.append(job.id)
        job.restarts += 1  # it did restart: shown, but not part of any crash loop of its own
        job.prestep_error = None
        job.restart_at = fault.restart_at
        job.change_state(JobState.BACKOFF, now)
        job.exit_reason = f"MPS client fault on GPU {index}: {exit_reason(code)}"
        line = (
            f"MPS: a client fault on GPU {index} ended {len(fault.jobs)} jobs at once ({', '.join(fault.jobs)}); "
            "each restarts from its checkpoint, counted as one crash"
        )
        if fault.warning < 0:
            fault.warning = len(self.warnings)
            self.warnings.append(line)
        else:
            self.warnings[fault.warning] = line
        return True

    def held(self, job: Job) -> bool:
        """Whether `job`, due to restart, waits for the other clients of its GPU's MPS server to go
        (module docstring): it crashed in an MPS fault (or in what may still become one, within
        `MPS_FAULT_WINDOW_S`) and another job of that GPU still has a worker. The server refuses new
        clients until all those of the fault exited; a job of another GPU never holds it."""
        if not self.placer.mps_served or job.gpu is None:
            return False
        fault = next((f for f in reversed(self.mps_faults) if job.id in f.jobs), None)
        if fault is None:
            return False
        if len(fault.jobs) < 2 and self.clock.monotonic() - fault.at > MPS_FAULT_WINDOW_S:
            return False  # a crash of its own: no other client of its GPU went with it
        # The server's clients at the fault that are not yet reaped (a worker launched since is
        # no client of it, and the fault's own jobs restart together).
        return any(self.jobs[h.job_id].handle is h for h in fault.clients if h.job_id in self.jobs)

    @staticmethod
    def _input_error(job: Job, code: int, reason: str, healthy: bool, *, server_fault: bool = False) -> bool:
        """Whether this crash repeats the previous attempt's: the same error, from the job itself (an
        exit code, not a signal, a stall, a full disk or an error of the MPS server, `server_fault`),
        before a single step, twice in a row. A restart would only repeat it. Remembers this
        attempt's error for the next one's question."""
        stepped = job.attempt_started_seen and job.steps > job.attempt_from_step
        own = code >= 0 and job.stall_reason is None and not server_fault
        previous, job.prestep_error = job.prestep_error, None if stepped or healthy or not own else reason
        return job.prestep_error is not None and previous == reason

    def stall_timeout(self, job: Job) -> float:
        """Seconds without an event after which `job`'s running worker is stalled (the policy's
        `--stall-timeout`, else derived from the job's longest silence so far)."""
        return self.restart.stall_timeout(job.longest_silence_s)

    def watch(self, job: Job, now: float, *, reported: bool = False) -> None:
        """The stall watch for a job that has started training (see the module docstring): mark it
        stalled when its worker is silent past the timeout or stopped by a signal, and kill it once
        it is silent past the timeout and has been stalled for `STALL_GRACE_S`. Its exit, at a
        later tick, restarts it through `exited` with `stall_reason` as its error.

        `reported`: the worker wrote events since the previous tick. Its process state is then not
        asked for (`Launcher.stopped` reads /proc, at every tick the costliest part of following a
        busy worker): it ran a moment ago, and a stopped worker writes nothing, so a stop still
        shows at the next tick."""
        if job.state not in (JobState.RUNNING, JobState.STALLED) or job.handle is None or job.stall_reason:
            return
        if self.script and not job.attempt_started_seen:
            return  # a script without CockpitCallback writes no events: its silence is no stall
        silent, timeout = now - job.last_event_at, self.stall_timeout(job)
        stopped = not reported and self.launcher.stopped(job.handle)
        if job.state is JobState.RUNNING:
            if silent >= timeout or stopped:
                job.change_state(JobState.STALLED, self.clock.time())
                # Why it is where it is, until it is killed or reports again (then the old reason).
                job.stalled_at, job.reason_before_stall = now, job.exit_reason
                why = "process stopped by a signal" if stopped else f"no events for {silent:.0f} s"
                job.exit_reason = f"stalled: {why}; killed after {timeout:.0f} s without events"
            return
        assert job.stalled_at is not None  # set with the state
        if silent >= timeout and now - job.stalled_at >= STALL_GRACE_S:
            signal_note = " (process stopped by a signal)" if stopped else ""
            job.stall_reason = f"stalled: no events for {silent:.0f} s{signal_note}"
            self.launcher.kill(job.handle)

    def _pause_if_disk_full(self, job: Job, code: int, now: float) -> bool:
        """Pause a job whose worker ran out of disk space (its `disk_full` error event, or its exit
        code alone when not even that event fit) and return True. A restart would fill the same
        disk again and burn the restart policy in a loop; `disk_wait` hands it back to the queue
        once there is room (or `RestartJob`, or `run --resume`), to go on from its last checkpoint."""
        error = job.attempt_error
        if error is not None and error.type == DISK_FULL_ERROR:
            detail = error.message
        elif code == DISK_FULL_EXIT and not self.script:  # a user's script means its own by 3
            detail = f"{free_space(job.job_dir)} free on {job.job_dir}"
        else:
            return False
        job.error = f"disk full: {detail}"
        job.change_state(JobState.PAUSED, now)
        job.exit_reason, job.ended_at, job.slot = PAUSED_FOR_DISK, now, None
        return True
