"""Served workers through `PooledLauncher`: one process runs job after job, each as a fresh worker would."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from cockpit.contract.events import Event, read_events
from cockpit.contract.workerargs import WorkerArgs
from cockpit.core.launch.pooled import PooledLauncher
from cockpit.core.launch.protocol import LaunchRequest, WorkerHandle
from cockpit.core.machine.placement import GpuRef
from tests.workerproc import kinds, write_preset

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def launcher() -> Iterator[PooledLauncher]:
    # nice 0: the tests wait on these processes, and the machine may be busy.
    pool = PooledLauncher(cwd=REPO, nice=0)
    yield pool
    pool.close()


def job(
    tmp_path: Path, name: str, timesteps: int = 512, preset: str | None = None, cpus: tuple[int, ...] | None = None
) -> LaunchRequest:
    """A small CartPole job (8 envs, 256 steps a rollout) in tmp_path/name."""
    args = WorkerArgs(tmp_path / name, preset=preset or str(write_preset(tmp_path)), timesteps=timesteps, threads=1)
    return LaunchRequest(name, args, cpus)


def thread_affinities(pid: int) -> set[frozenset[int]]:
    """The CPU sets of every thread of `pid` (those that end meanwhile left out)."""
    found = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            found.add(frozenset(os.sched_getaffinity(int(tid))))
    return found


def wait_exit(launcher: PooledLauncher, handle: WorkerHandle, timeout: float = 120.0) -> int:
    """Poll until the job has ended; its exit code."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = launcher.poll(handle)
        if code is not None:
            return code
        time.sleep(0.05)
    raise AssertionError(f"job {handle.job_id} still running after {timeout} s: {launcher.stderr_tail(handle)}")


def wait_events(
    launcher: PooledLauncher, handle: WorkerHandle, condition: Callable[[list[Event]], bool], timeout: float = 120.0
) -> list[Event]:
    """Poll the job's events until `condition` holds; fail if the job ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = read_events(handle.job_dir / "events.jsonl")
        if condition(events):
            return events
        if launcher.poll(handle) is not None:
            raise AssertionError(f"job ended first: {launcher.stderr_tail(handle)}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting on events of job {handle.job_id}")


def lock_is_free(job_dir: Path) -> bool:
    """Whether another worker could take the job dir's lock now."""
    fd = os.open(job_dir / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def assert_done(events: list[Event], target: int, pid: int) -> None:
    """One complete attempt: started (by `pid`), phases, a checkpoint, finished done at `target`."""
    assert events[0].kind == "started" and events[-1].kind == "finished"
    (started,) = kinds(events, "started")
    assert started.pid == pid and started.target_steps == target and started.resumed_from_step is None
    assert kinds(events, "phase") and kinds(events, "checkpoint")[-1].step == target
    (finished,) = kinds(events, "finished")
    assert finished.status == "done" and finished.steps == target


def test_two_jobs_in_a_row_run_in_one_process(tmp_path: Path, launcher: PooledLauncher) -> None:
    ours = frozenset(os.sched_getaffinity(0))
    pinned = (min(ours),)
    first = launcher.launch(job(tmp_path, "a", cpus=pinned))
    assert os.getsid(first.pid) == first.pid  # its own session, as a fresh worker's
    wait_events(launcher, first, lambda ev: bool(kinds(ev, "started")))
    assert not lock_is_free(first.job_dir)  # held while the job runs
    assert thread_affinities(first.pid) == {frozenset(pinned)}
    assert wait_exit(launcher, first) == 0
    assert lock_is_free(first.job_dir)  # released at the job's end, while the process lives on
    second = launcher.launch(job(tmp_path, "b"))  # unpinned: every thread gets our CPUs back
    assert second.pid == first.pid and psutil.pid_exists(first.pid)
    assert thread_affinities(second.pid) == {ours}
    assert wait_exit(launcher, second) == 0
    assert lock_is_free(second.job_dir)

    events_a, events_b = (read_events(h.job_dir / "events.jsonl") for h in (first, second))
    assert_done(events_a, 512, first.pid)
    assert_done(events_b, 512, first.pid)
    # Each job's output went to its own logs.
    for handle in (first, second):
        assert "[worker] finished: {'status': 'done', 'steps': 512" in (handle.job_dir / "stdout.log").read_text()
    # The first job's start-up includes the process's (imports); the reused process's does not.
    startup = [kinds(events, "started")[0].startup_s for events in (events_a, events_b)]
    print(f"startup_s: fresh process {startup[0]}, reused process {startup[1]}")
    assert 0 < startup[1] < startup[0]

    launcher.close()  # EOF on the idle process's stdin: it exits 0
    assert first.process.served.proc.wait(timeout=10) == 0


@pytest.mark.slow
def test_a_terminated_job_checkpoints_and_stops_and_the_process_serves_the_next(
    tmp_path: Path, launcher: PooledLauncher
) -> None:
    long = launcher.launch(job(tmp_path, "long", timesteps=1_000_000))
    wait_events(launcher, long, lambda ev: len(kinds(ev, "phase")) >= 4)
    launcher.terminate(long)
    sent = time.monotonic()
    assert wait_exit(launcher, long, timeout=10) == 0
    assert time.monotonic() - sent < 10
    events = read_events(long.job_dir / "events.jsonl")
    (finished,) = kinds(events, "finished")
    (checkpoint,) = kinds(events, "checkpoint")
    assert finished.status == "stopped" and 0 < finished.steps == checkpoint.step < 1_000_000
    launcher.terminate(long)  # the job is over: nothing is sent to the process
    launcher.kill(long)

    after = launcher.launch(job(tmp_path, "after"))
    assert after.pid == long.pid
    assert wait_exit(launcher, after) == 0
    assert_done(read_events(after.job_dir / "events.jsonl"), 512, long.pid)  # a fresh stop flag

    os.kill(long.pid, signal.SIGTERM)  # between jobs: the process exits
    assert long.process.served.proc.wait(timeout=10) == -signal.SIGTERM
    replacement = launcher.launch(job(tmp_path, "bad", preset="huge"))  # a new process takes it
    assert replacement.pid != long.pid
    assert wait_exit(launcher, replacement) == 2


@pytest.mark.slow
def test_a_killed_process_leaves_the_pool(tmp_path: Path, launcher: PooledLauncher) -> None:
    doomed = launcher.launch(job(tmp_path, "doomed", timesteps=1_000_000))
    wait_events(launcher, doomed, lambda ev: bool(kinds(ev, "phase")))
    launcher.kill(doomed)
    assert wait_exit(launcher, doomed, timeout=10) == -signal.SIGKILL
    assert not psutil.pid_exists(doomed.pid)
    assert lock_is_free(doomed.job_dir)

    next_job = launcher.launch(job(tmp_path, "next"))
    assert next_job.pid != doomed.pid
    assert wait_exit(launcher, next_job) == 0
    assert_done(read_events(next_job.job_dir / "events.jsonl"), 512, next_job.pid)


@pytest.mark.slow
def test_bad_input_exits_2_and_the_process_serves_the_next_job_until_it_retires(tmp_path: Path) -> None:
    with PooledLauncher(cwd=REPO, nice=0, max_jobs=3) as launcher:
        bad_preset = launcher.launch(job(tmp_path, "preset", preset="huge"))
        assert wait_exit(launcher, bad_preset) == 2
        (error,) = kinds(read_events(bad_preset.job_dir / "events.jsonl"), "error")
        assert error.type == "invalid_config" and "preset 'huge': no such preset" in error.message
        assert "python -m cockpit_training.worker: error: preset 'huge'" in launcher.stderr_tail(bad_preset, 1)

        bad_flag = launcher.launch(job(tmp_path, "flag", timesteps=-5))  # argparse's exit 2
        assert bad_flag.pid == bad_preset.pid
        assert wait_exit(launcher, bad_flag) == 2
        assert "argument --timesteps: expected a positive integer, got '-5'" in launcher.stderr_tail(bad_flag, 1)

        good = launcher.launch(job(tmp_path, "good"))
        assert good.pid == bad_preset.pid
        assert wait_exit(launcher, good) == 0
        assert_done(read_events(good.job_dir / "events.jsonl"), 512, good.pid)
        # Its third job was its last (max_jobs): it exits, and the next job gets a new process.
        assert good.process.served.proc.wait(timeout=10) == 0
        fourth = launcher.launch(job(tmp_path, "fourth", preset="huge"))
        assert fourth.pid != good.pid
        assert wait_exit(launcher, fourth) == 2


COCKPIT = """
import sys, time
from pathlib import Path
from cockpit.contract.workerargs import WorkerArgs
from cockpit.core.launch.pooled import PooledLauncher
from cockpit.core.launch.protocol import LaunchRequest
launcher = PooledLauncher(nice=0)
handle = launcher.launch(LaunchRequest("0", WorkerArgs(Path(sys.argv[1]), preset=sys.argv[2], timesteps=1_000_000,
                                                       threads=1)))
print(handle.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_served_worker_stops_its_job_and_exits_when_its_cockpit_dies(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    cockpit = subprocess.Popen(
        [sys.executable, "-c", COCKPIT, str(job_dir), str(write_preset(tmp_path))],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert cockpit.stdout is not None
        worker = psutil.Process(int(cockpit.stdout.readline()))
        deadline = time.monotonic() + 120
        while not kinds(read_events(job_dir / "events.jsonl") if job_dir.joinpath("events.jsonl").exists() else [],
                        "phase"):  # fmt: skip
            assert time.monotonic() < deadline and worker.is_running()
            time.sleep(0.05)
    finally:
        cockpit.kill()
        cockpit.wait()
    worker.wait(timeout=15)  # SIGTERM from the kernel: the job stops, then the process exits
    events = read_events(job_dir / "events.jsonl")
    (finished,) = kinds(events, "finished")
    assert finished.status == "stopped" and kinds(events, "checkpoint")[-1].step == finished.steps
    assert lock_is_free(job_dir)


def wait_idle(pid: int, timeout: float = 120.0) -> None:
    """Until process `pid` stops using CPU (a served worker done importing, waiting for a job)."""
    deadline = time.monotonic() + timeout
    proc, last = psutil.Process(pid), -1.0
    while time.monotonic() < deadline:
        times = proc.cpu_times()
        if times.user + times.system == last:
            return
        last = times.user + times.system
        time.sleep(0.5)
    raise AssertionError(f"process {pid} still busy after {timeout} s")


@pytest.mark.slow
def test_a_process_handed_its_last_job_gets_a_spare_that_imports_meanwhile(tmp_path: Path) -> None:
    with PooledLauncher(cwd=REPO, nice=0, max_jobs=1) as launcher:
        first = launcher.launch(job(tmp_path, "a"))
        spares = [s for s in launcher._processes if s.proc.pid != first.pid]
        assert len(spares) == 1  # started with the (here only) last job, not after it
        spare = spares[0].proc.pid
        assert wait_exit(launcher, first) == 0
        assert first.process.served.proc.wait(timeout=10) == 0  # retired after its one job
        wait_idle(spare)
        second = launcher.launch(job(tmp_path, "b"))
        assert second.pid == spare
        assert wait_exit(launcher, second) == 0
    fresh, spared = (kinds(read_events(h.job_dir / "events.jsonl"), "started")[0].startup_s for h in (first, second))
    assert fresh is not None and spared is not None
    print(f"startup_s: fresh process {fresh}, spare {spared}")
    assert 0 < spared < fresh  # the spare's imports were paid before its job was sent
    assert "[worker] finished: {'status': 'done', 'steps': 512" in (second.job_dir / "stdout.log").read_text()


def test_a_request_carries_its_flags_and_send_time_and_a_malformed_one_is_refused(tmp_path: Path) -> None:
    from cockpit.contract.workerargs import decode_request, encode_request

    args = WorkerArgs(tmp_path / "j", preset="cartpole", timesteps=512, threads=1)
    line = encode_request(args, sent_at=1234.5)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_request(line) == (list(args.to_argv()), 1234.5)
    for bad in (b'["--preset", "cartpole"]', b'{"argv": ["--x"]}', b'{"argv": [1], "sent_at": 1}',
                b'{"argv": [], "sent_at": "now"}', b'{"argv": [], "sent_at": true}'):  # fmt: skip
        with pytest.raises(ValueError):
            decode_request(bad)


# A served worker that trains nothing: it speaks the real protocol (a request a line on stdin, a
# status line per job) and, for each job, writes into its job dir the pid and GPU environment of
# the process that ran it.
ENV_REPORTING_WORKER = """
import json, os, sys
from cockpit.contract.workerargs import ServeArgs, WorkerArgs, decode_request, status_line

serve = ServeArgs.parse(sys.argv[3:])  # after `-m cockpit_training.worker`
for line in sys.stdin.buffer:
    argv, _ = decode_request(line)
    job_dir = WorkerArgs.parse(argv).job_dir
    seen = {"pid": os.getpid(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "order": os.environ.get("CUDA_DEVICE_ORDER")}
    (job_dir / "served_by.json").write_text(json.dumps(seen))
    os.write(serve.status_fd, status_line(0))
"""


def env_reporting_python(tmp_path: Path) -> Path:
    """An executable that `PooledLauncher` starts as its `python`: `ENV_REPORTING_WORKER` under our
    interpreter. A script of its own, not a shell that execs one: /proc/<pid>/environ reads empty
    while a process is between images."""
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}{ENV_REPORTING_WORKER}")
    python.chmod(0o755)
    return python


def served_by(handle: WorkerHandle) -> tuple[int, str | None]:
    """The pid of the process that ran the job, and the CUDA_VISIBLE_DEVICES it ran under."""
    seen = json.loads((handle.job_dir / "served_by.json").read_text())
    assert seen["order"] == "PCI_BUS_ID"
    return seen["pid"], seen["visible"]


def process_visible_devices(pid: int, wait_s: float = 10.0) -> str | None:
    """CUDA_VISIBLE_DEVICES in the environment process `pid` was started with (its /proc environ).
    Until its exec, a just-forked child shows its parent's environ, without it (a loaded CI machine
    caught one there): it is read again until it says, for at most `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            name, _, value = entry.partition(b"=")
            if name == b"CUDA_VISIBLE_DEVICES":
                return value.decode()
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def test_a_job_runs_in_a_process_of_its_own_gpu_and_never_in_another_gpus(tmp_path: Path) -> None:
    first, second = GpuRef(0, "GPU-aaaa"), GpuRef(1)  # by UUID, and by index where the UUID is unknown
    wanted = {first: "GPU-aaaa", second: "1"}

    def on(gpu: GpuRef, name: str) -> LaunchRequest:
        return LaunchRequest(name, WorkerArgs(tmp_path / name, preset="cartpole", timesteps=512), gpu=gpu)

    with PooledLauncher(python=str(env_reporting_python(tmp_path)), cwd=REPO, nice=0) as launcher:
        a, b = launcher.launch(on(first, "a")), launcher.launch(on(second, "b"))
        assert a.pid != b.pid
        for handle, gpu in ((a, first), (b, second)):
            assert process_visible_devices(handle.pid) == wanted[gpu]
        assert wait_exit(launcher, a) == 0 and wait_exit(launcher, b) == 0  # b's process is the later idle
        assert served_by(a) == (a.pid, "GPU-aaaa") and served_by(b) == (b.pid, "1")
        # Both wait idle, the other GPU's the more recently: each job goes to its own GPU's process.
        c = launcher.launch(on(first, "c"))
        assert c.pid == a.pid
        # The first GPU's process is busy and the second's idle: a new process starts for the first GPU.
        d = launcher.launch(on(first, "d"))
        assert d.pid not in (a.pid, b.pid)
        assert process_visible_devices(d.pid) == "GPU-aaaa"
        e = launcher.launch(on(second, "e"))
        assert e.pid == b.pid
        for handle in (c, d, e):
            assert wait_exit(launcher, handle) == 0
        assert [served_by(h) for h in (c, d, e)] == [(a.pid, "GPU-aaaa"), (d.pid, "GPU-aaaa"), (b.pid, "1")]
