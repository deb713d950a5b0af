"""`--mps` without a GPU: the MPS control daemon's life cycle against a stand-in
`nvidia-cuda-mps-control` on PATH (tests/mps_standin.py), the refusals, and the worker's environment."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cockpit.cli import main
from cockpit.contract.controls import ApplyAdvice, RestartJob, SetMps
from cockpit.contract.fleetplan import PlanError, load_plan
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import read
from cockpit.contract.runspec import RunSpec, build_spec
from cockpit.contract.settings import RunSettings
from cockpit.contract.workerargs import MpsDaemonDirs, MpsServers, WorkerArgs, mps_memory_limit_mib
from cockpit.core.launch.local import LocalLauncher
from cockpit.core.launch.pooled import PooledLauncher
from cockpit.core.launch.protocol import LaunchRequest
from cockpit.core.machine import mps_daemon
from cockpit.core.machine import nvml as nvml_module
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.mps_daemon import MpsError, close_daemons, open_daemons, quit_left_behind, refusal
from cockpit.core.machine.nvml import close_gpus, open_gpus
from cockpit.core.machine.placement import GpuRef
from cockpit.core.session.mps_session import auto_mps, with_mps
from tests import mps_standin
from tests.fake_pynvml import FakeGpu, FakeNvml
from tests.fakeclock import FakeClock
from tests.mps_standin import StandIn

GIB = 1024**3
VOLTA_GPU = GpuInfo(0, "NVIDIA GeForce RTX 4090 (fake)", 24 * GIB, "555.42", "GPU-fake-0", compute_capability=(8, 9))
PASCAL_GPU = GpuInfo(1, "NVIDIA GeForce GTX 1080 (fake)", 8 * GIB, "555.42", "GPU-fake-1", compute_capability=(6, 1))
SECOND_GPU = GpuInfo(1, "NVIDIA GeForce RTX 4090 (fake)", 24 * GIB, "555.42", "GPU-fake-1", compute_capability=(8, 9))


def _wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while mps_standin.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not mps_standin.alive(pid)


# ----- the daemon's life cycle -----


def test_a_run_starts_its_own_daemon_in_its_run_dir_records_it_and_stops_it_at_the_end(standin: StandIn) -> None:
    run_dir = standin.root / "run"
    daemons, notes = open_daemons(run_dir, [VOLTA_GPU])
    [daemon] = daemons
    files = RunDir(run_dir)
    assert daemon.owned and daemon.gpu == 0
    assert daemon.pipe_dir == files.mps_gpu_pipe(0).resolve() and daemon.log_dir == files.mps_gpu_log(0)
    start = standin.calls()[-1]
    assert start["argv"] == ["-d"] and start["visible"] == "GPU-fake-0"
    assert start["pipe_dir"] == str(daemon.pipe_dir) and start["log_dir"] == str(files.mps_gpu_log(0))
    assert daemon.pid is not None and mps_standin.alive(daemon.pid)
    record = json.loads(files.mps_record.read_text())
    assert record == {"cockpit_pid": os.getpid(), "daemons": [{"gpu": 0, "daemon_pid": daemon.pid,
                      "pipe_dir": str(daemon.pipe_dir), "log_dir": str(files.mps_gpu_log(0))}]}  # fmt: skip
    started = (f"MPS: started a control daemon (pid {daemon.pid}) for GPU 0 at {daemon.pipe_dir}; it stops when "
               "the run ends")  # fmt: skip
    assert notes == [started]

    assert close_daemons(daemons, run_dir) is None
    stop = standin.calls()[-1]
    assert stop["argv"] == [] and stop["stdin"] == "quit\n" and stop["pipe_dir"] == str(daemon.pipe_dir)
    assert _wait_gone(daemon.pid)
    assert not files.mps_record.exists()


def test_a_long_run_dir_gets_its_pipes_in_a_short_private_directory(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = standin.root / ("r" * 80)
    [daemon], _ = open_daemons(run_dir, [VOLTA_GPU])
    try:
        assert len(str(daemon.pipe_dir)) <= mps_daemon.MAX_PIPE_DIR
        assert daemon.pipe_dir.name.startswith(f"cockpit-mps-{os.getuid()}-")
        assert daemon.log_dir == RunDir(run_dir).mps_gpu_log(0)  # logs have no such limit: they stay with the run
    finally:
        close_daemons([daemon], run_dir)
    assert not daemon.pipe_dir.exists()  # removed with its daemon: /tmp keeps nothing of the run
    assert RunDir(run_dir).mps_gpu_log(0).exists()
    monkeypatch.setenv("MPS_STANDIN_FAIL", "1")
    with pytest.raises(MpsError):
        open_daemons(run_dir, [VOLTA_GPU])
    assert not daemon.pipe_dir.exists()  # nor of a daemon that failed to start


def test_a_daemon_already_serving_the_user_is_used_and_never_stopped(standin: StandIn) -> None:
    pid = standin.start_daemon_by_hand()
    run_dir = standin.root / "run"
    daemons, notes = open_daemons(run_dir, [VOLTA_GPU, SECOND_GPU])
    [daemon] = daemons  # one daemon for both GPUs: it serves every CUDA process here
    assert not daemon.owned and daemon.pipe_dir == standin.system_pipe and daemon.pid == pid and daemon.gpu is None
    assert notes == [
        f"MPS: using the daemon already running at {standin.system_pipe} for every GPU; it is left running"
    ]
    assert len(standin.calls()) == 1  # the user's own -d: cockpit started nothing
    assert not RunDir(run_dir).mps_record.exists()
    served = mps_daemon.servers(daemons)
    assert served.external and served.for_gpu(0) == served.for_gpu(1) == MpsDaemonDirs(str(standin.system_pipe))

    assert close_daemons(daemons, run_dir) is None
    assert len(standin.calls()) == 1  # no quit sent
    time.sleep(0.1)
    assert mps_standin.alive(pid)


def test_a_control_pipe_whose_daemon_died_is_no_daemon(standin: StandIn) -> None:
    pid = standin.start_daemon_by_hand()
    os.kill(pid, signal.SIGKILL)  # died without cleaning up: its pipe and pid file stay
    assert _wait_gone(pid)
    assert (standin.system_pipe / "control").exists()
    daemons, _ = open_daemons(standin.root / "run", [VOLTA_GPU])
    try:
        assert daemons[0].owned and daemons[0].pipe_dir != standin.system_pipe
    finally:
        close_daemons(daemons, standin.root / "run")


_COCKPIT = """
import sys, time
from pathlib import Path
from cockpit.core.machine.mps_daemon import open_daemons
from cockpit.core.machine.gpu_types import GpuInfo
gpus = [GpuInfo(i, "fake", 0, "", f"GPU-fake-{i}") for i in range(int(sys.argv[2]))]
daemons, _ = open_daemons(Path(sys.argv[1]), gpus)
print(" ".join(str(d.pid) for d in daemons), flush=True)
time.sleep(600)
"""


def test_a_daemon_left_by_a_cockpit_killed_with_sigkill_is_quit_by_the_next_start_in_its_run_dir(
    standin: StandIn,
) -> None:
    run_dir = standin.root / "run"
    cockpit = subprocess.Popen([sys.executable, "-c", _COCKPIT, str(run_dir), "2"], stdout=subprocess.PIPE, text=True)
    assert cockpit.stdout is not None
    left = [int(pid) for pid in cockpit.stdout.readline().split()]
    cockpit.send_signal(signal.SIGKILL)
    cockpit.wait()
    time.sleep(0.1)
    assert len(left) == 2 and all(mps_standin.alive(pid) for pid in left)  # the cockpit had no chance to stop them
    assert RunDir(run_dir).mps_record.exists()

    daemons, notes = open_daemons(run_dir, [VOLTA_GPU])  # `run --resume` of that run dir
    try:
        pipes = [RunDir(run_dir).mps_gpu_pipe(i).resolve() for i in (0, 1)]
        assert notes[:2] == [f"MPS: quit the daemon (pid {pid}) a killed cockpit left running at {pipe}"
                             for pid, pipe in zip(left, pipes, strict=True)]  # fmt: skip
        assert all(_wait_gone(pid) for pid in left)
        quits = [c for c in standin.calls() if c["stdin"] == "quit\n"]
        assert len(quits) == 2
        assert daemons[0].owned and daemons[0].pid not in left and mps_standin.alive(daemons[0].pid or 0)
    finally:
        close_daemons(daemons, run_dir)


def test_the_daemon_of_a_cockpit_still_running_the_run_is_left_alone(standin: StandIn) -> None:
    run_dir = standin.root / "run"
    owner = subprocess.Popen(["sleep", "600"])  # the live cockpit that wrote the record
    try:
        daemons, _ = open_daemons(run_dir, [VOLTA_GPU])
        record = json.loads(RunDir(run_dir).mps_record.read_text())
        record["cockpit_pid"] = owner.pid
        RunDir(run_dir).mps_record.write_text(json.dumps(record))
        assert quit_left_behind(run_dir) == []
        with pytest.raises(MpsError, match=r"^--mps: the run in .* is live"):
            open_daemons(run_dir, [VOLTA_GPU])
        assert not [c for c in standin.calls() if c["stdin"] == "quit\n"]
        assert mps_standin.alive(daemons[0].pid or 0)
    finally:
        owner.kill()
        owner.wait()
        close_daemons(daemons, run_dir)


def test_a_daemon_that_fails_to_start_is_one_line_naming_mps(standin: StandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPS_STANDIN_FAIL", "1")
    with pytest.raises(MpsError) as raised:
        open_daemons(standin.root / "run", [VOLTA_GPU])
    message = str(raised.value)
    assert message.startswith("--mps: nvidia-cuda-mps-control -d failed with code 1: An instance of this daemon")
    assert "\n" not in message


# ----- refusals -----


def test_refusals_name_mps_and_what_would_do(standin: StandIn, tmp_path: Path) -> None:
    assert refusal([VOLTA_GPU]) is None
    assert refusal([VOLTA_GPU], which=lambda _name: None) == (
        "--mps: nvidia-cuda-mps-control is not on PATH (it comes with the NVIDIA driver's compute utilities); "
        "install them, or run without --mps"
    )
    assert refusal([], "no GPU telemetry: the NVIDIA driver is not loaded") == (
        "--mps: shares a GPU between jobs, and this run has none (the NVIDIA driver is not loaded); run without --mps"
    )
    assert refusal([VOLTA_GPU, PASCAL_GPU]) == (
        "--mps: GPU 1 (NVIDIA GeForce GTX 1080 (fake)) has compute capability 6.1; MPS needs 7.0 (Volta) or "
        "newer: give --gpus 0 (Volta or newer), or run without --mps"
    )
    assert refusal([PASCAL_GPU]) is not None and "--gpus" not in (refusal([PASCAL_GPU]) or "")
    standin.start_daemon_by_hand()
    assert refusal([VOLTA_GPU]) is None  # our own daemon: used


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(argv)
    return code, capsys.readouterr().err.strip().splitlines()


def test_run_with_mps_where_it_cannot_be_used_is_one_line_exit_2_and_nothing_started(
    standin: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    argv = ["run", "--headless", "--mps", "--run-dir", str(run_dir), "--preset", "cartpole"]
    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: None)
    code, lines = _run(argv, capsys)  # no GPU
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("cockpit run: error: --mps: shares a GPU between jobs, and this run has none")

    clock = FakeClock()
    pascal = FakeNvml(FakeGpu(util_at=lambda t: 0.0, clock=clock.time, compute_capability=(6, 0)))
    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: pascal)
    code, lines = _run(argv, capsys)
    assert code == 2 and len(lines) == 1
    assert "--mps: GPU 0 (NVIDIA GeForce RTX 4090 (fake)) has compute capability 6.0" in lines[0]

    monkeypatch.setenv("PATH", "/nonexistent")
    code, lines = _run([*argv, "--no-tensorboard"], capsys)
    assert code == 2 and len(lines) == 1 and "nvidia-cuda-mps-control is not on PATH" in lines[0]
    assert not run_dir.exists()
    assert standin.calls() == []


def test_the_gpu_kit_reads_each_gpus_compute_capability() -> None:
    clock = FakeClock()
    readers, _ = open_gpus(FakeNvml([FakeGpu(util_at=lambda t: 0.0, clock=clock.time, compute_capability=(7, 0))]))
    try:
        assert readers[0].info.compute_capability == (7, 0)
    finally:
        close_gpus(readers)
    readers, _ = open_gpus(FakeNvml(FakeGpu(util_at=lambda t: 0.0, clock=clock.time),
                                    missing=("nvmlDeviceGetCudaComputeCapability",)))  # fmt: skip
    try:
        assert readers[0].info.compute_capability is None  # old bindings: unknown, not a failure
    finally:
        close_gpus(readers)


# ----- the worker's environment -----


def test_the_memory_cap_is_the_known_peak_with_headroom_and_none_when_unknown() -> None:
    assert mps_memory_limit_mib(None) is None
    assert mps_memory_limit_mib(0) is None
    assert mps_memory_limit_mib(1 * GIB) == 1024 * 5 // 4 + 256  # 1.25 x 1024 MiB + 256 MiB
    assert mps_memory_limit_mib(1000 * 1024 * 1024 + 1) == 1250 + 1 + 256  # rounded up


_ENV_DUMP = """#!/bin/sh
env > "$(dirname "$0")/env.txt"
"""


def test_a_worker_on_a_gpu_under_mps_gets_the_daemons_pipes_and_its_memory_cap(tmp_path: Path) -> None:
    python = tmp_path / "python"  # stands in for the interpreter: records the environment it was given
    python.write_text(_ENV_DUMP)
    python.chmod(0o755)
    launcher = LocalLauncher(python=str(python), nice=0)

    def env_of(request: LaunchRequest) -> dict[str, str]:
        handle = launcher.launch(request)
        while launcher.poll(handle) is None:
            time.sleep(0.01)
        lines = (tmp_path / "env.txt").read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    args = WorkerArgs(tmp_path / "job")
    gpu = GpuRef(0, "GPU-fake-0")
    env = env_of(LaunchRequest("000", args, gpu=gpu, mps_pipe_dir="/run/mps", mps_mem_limit_mib=1536))
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/mps"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=1536M"  # device 0: its one GPU, as it sees it
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-fake-0"

    env = env_of(LaunchRequest("000", args, gpu=gpu, mps_pipe_dir="/run/mps"))
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/mps" and "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env

    env = env_of(LaunchRequest("000", args, gpu=None, mps_pipe_dir="/run/mps", mps_mem_limit_mib=1536))
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env and "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env


# ----- fleets -----

_PLAN = """
name = "screen"
jobs = 2
{mps}
[agents]
env = ["CartPole-v1"]
preset = ["cartpole"]
seeds = 2

[[tiers]]
timesteps = 4_000
"""


def test_a_fleet_plans_mps_key_is_a_bool_and_refused_where_mps_cannot_run(
    standin: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(_PLAN.format(mps=""))
    assert load_plan(plan).mps is False
    plan.write_text(_PLAN.format(mps='mps = "yes"'))
    with pytest.raises(PlanError, match=r"'mps' must be true or false, got 'yes'"):
        load_plan(plan)
    plan.write_text(_PLAN.format(mps="mps = true"))
    assert load_plan(plan).mps is True

    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: None)  # no GPU here
    run_dir = tmp_path / "fleet"
    code, lines = _run(["fleet", str(plan), "--headless", "--run-dir", str(run_dir)], capsys)
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("cockpit fleet: error: --mps: shares a GPU between jobs, and this run has none")
    assert lines[0].endswith(f"(the plan {plan} says mps = true)")
    assert not run_dir.exists() and standin.calls() == []


# ----- a whole run -----

_SEES = (
    "import os, sys; "
    "open(os.path.join(sys.argv[1], 'mps.txt'), 'w').write(os.environ.get('CUDA_MPS_PIPE_DIRECTORY', '') + ' ' "
    "+ os.environ.get('CUDA_MPS_LOG_DIRECTORY', ''))"
)


def test_a_run_with_mps_starts_its_daemon_gives_it_to_each_job_records_it_and_stops_it(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu = FakeNvml(FakeGpu(util_at=lambda t: 0.0, clock=time.time))
    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: gpu)
    run_dir = standin.root / "run"
    code = main(["run", "--headless", "--mps", "--jobs", "2", "--run-dir", str(run_dir), "--no-tensorboard",
                 "--", sys.executable, "-c", _SEES, "{job_dir}"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    start, stop = standin.calls()
    pipe_dir, log_dir = str(RunDir(run_dir).mps_gpu_pipe(0).resolve()), str(RunDir(run_dir).mps_gpu_log(0))
    assert start["argv"] == ["-d"] and start["pipe_dir"] == pipe_dir
    seen = [(RunDir(run_dir).job(j).path / "mps.txt").read_text() for j in ("000", "001")]
    assert seen == [f"{pipe_dir} {log_dir}"] * 2  # each job: its GPU's daemon's pipes and logs
    assert stop["stdin"] == "quit\n" and stop["pipe_dir"] == pipe_dir  # after the jobs: the run ended
    assert not RunDir(run_dir).mps_record.exists()
    assert read(run_dir).config.mps is True


_SERVED_ENV_DUMP = """#!/bin/sh
env > "$(dirname "$0")/env.txt"
exec cat > /dev/null
"""


def test_a_served_fleet_worker_under_mps_gets_the_pipe_dir_and_no_cap(tmp_path: Path) -> None:
    python = tmp_path / "python"  # a served worker that records its environment and waits for EOF
    python.write_text(_SERVED_ENV_DUMP)
    python.chmod(0o755)
    launcher = PooledLauncher(python=str(python), nice=0)
    request = LaunchRequest("a0000", WorkerArgs(tmp_path / "job"), gpu=GpuRef(0, "GPU-fake-0"),
                            mps_pipe_dir="/run/mps", mps_mem_limit_mib=1536, mps_log_dir="/run/mps-log")  # fmt: skip
    handle = launcher.launch(request)
    try:
        deadline = time.monotonic() + 10
        while not (tmp_path / "env.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)  # env writes the file whole before the shell moves on
        lines = (tmp_path / "env.txt").read_text().splitlines()
        env = dict(line.split("=", 1) for line in lines if "=" in line)
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/mps" and env["CUDA_VISIBLE_DEVICES"] == "GPU-fake-0"
        assert env["CUDA_MPS_LOG_DIRECTORY"] == "/run/mps-log"
        assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env  # one process, many agents: no one agent's cap
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(handle.pid, signal.SIGKILL)
        launcher.close()


# ----- run --auto: a daemon standing ready -----


def _readers(monkeypatch: pytest.MonkeyPatch) -> list[nvml_module.GpuReader]:
    gpu = FakeNvml(FakeGpu(util_at=lambda t: 0.0, clock=time.time))
    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: gpu)
    readers, _status = open_gpus()
    return readers


def _spec(run_dir: Path, *, mps: bool = False) -> RunSpec:
    return build_spec(
        RunSettings(
            jobs=2,
            preset="cartpole",
            timesteps=1000,
            run_dir=run_dir,
            mps=mps,
        ),
        command_line=("run", "--auto"),
    )


def test_auto_has_a_daemon_stand_ready_only_where_mps_can_be_measured(
    standin: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readers = _readers(monkeypatch)
    try:
        assert auto_mps(_spec(tmp_path / "a"), readers, "") == (True, None)
        assert auto_mps(_spec(tmp_path / "b", mps=True), readers, "") == (False, None)  # clients from the start
        assert auto_mps(_spec(tmp_path / "c"), [], "no GPU telemetry: no NVIDIA GPU found") == (False, None)
        standin.start_daemon_by_hand()  # every CUDA job of this user is its client: nothing to compare
        ready, why = auto_mps(_spec(tmp_path / "d"), readers, "")
        assert (
            not ready
            and why == f"--auto: MPS not measured: the daemon at {standin.system_pipe} already serves every job"
        )
        monkeypatch.setenv("PATH", "/usr/bin:/bin")
        ready, why = auto_mps(_spec(tmp_path / "e"), readers, "")
        assert not ready and (why or "").startswith("--auto: MPS not measured: nvidia-cuda-mps-control is not on PATH")
    finally:
        close_gpus(readers)


def test_a_standby_daemon_that_cannot_start_is_a_note_and_the_run_goes_on(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[list[str], MpsServers | None]] = []
    session = lambda notes, mps: seen.append((notes, mps)) or 0  # noqa: E731
    readers = _readers(monkeypatch)
    try:
        assert with_mps(_spec(standin.root / "ok"), readers, "cockpit run", session, standby=True) == 0
        notes, served = seen[-1]
        assert served is not None and served.for_gpu(0) is not None
        assert notes[0].startswith("MPS: started a control daemon")
        assert [c["argv"] for c in standin.calls()] == [["-d"], []]  # started, then quit at the end
        monkeypatch.setenv("MPS_STANDIN_FAIL", "1")
        assert with_mps(_spec(standin.root / "fail"), readers, "cockpit run", session, standby=True) == 0
        notes, served = seen[-1]
        assert served is None and notes[0].startswith("--auto: MPS not measured: nvidia-cuda-mps-control -d failed")
    finally:
        close_gpus(readers)


def test_mps_advice_applies_only_where_the_run_has_a_daemon(tmp_path: Path) -> None:
    from tests.test_tui_session import scripted_session

    session = scripted_session(tmp_path / "run")
    session.supervisor.tick()
    session.supervisor.tick()
    session._latest = session.snapshot()
    with pytest.raises(ValueError, match="without an MPS daemon: start a new run with --mps"):
        session.submit(ApplyAdvice("mps", "on"))
    session.mps = MpsServers(shared=MpsDaemonDirs("/tmp/nvidia-mps"), external=True)  # the jobs are clients anyway
    with pytest.raises(ValueError, match="the daemon at /tmp/nvidia-mps serves every CUDA process here"):
        session.submit(ApplyAdvice("mps", "off"))
    session.mps = MpsServers(by_gpu=((0, MpsDaemonDirs(str(tmp_path / "pipe"))),))
    with pytest.raises(ValueError, match="turned on or off"):
        session.submit(ApplyAdvice("mps", "measure it"))
    session.submit(ApplyAdvice("mps", "on"))
    commands = [session.supervisor._commands.get_nowait() for _ in range(3)]
    assert commands == [SetMps(True), RestartJob("000"), RestartJob("001")]


def test_what_auto_measured_of_mps_is_kept_for_recommend_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cockpit.core.sizing.autotune import AutoTuner
    from cockpit.core.sizing.mps_gains import cached_mps_gain, mps_cache_path
    from tests.test_tui_session import scripted_session

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    readers = _readers(monkeypatch)
    try:
        auto = AutoTuner(FakeClock(), max_slots=4, mps=True)
        session = scripted_session(tmp_path / "run", auto=auto)
        session.sampler.gpus = readers
        session._keep_mps_gain()
        assert not mps_cache_path().exists()  # nothing measured yet
        auto.mps_measured = (4, 10_000.0, 11_500.0)
        session._keep_mps_gain()
        preset = session._preset
        assert preset is not None
        kept = cached_mps_gain(preset, readers[0].info.name)
        assert kept is not None and (kept.jobs, kept.gain, kept.by) == (4, pytest.approx(1.15), "cockpit run --auto")
        mps_cache_path().unlink()
        session._keep_mps_gain()
        assert not mps_cache_path().exists()  # once
    finally:
        close_gpus(readers)


# ----- one daemon per GPU -----


def test_a_run_on_two_gpus_starts_a_daemon_per_gpu_each_seeing_that_gpu_alone(standin: StandIn) -> None:
    run_dir = standin.root / "run"
    daemons, notes = open_daemons(run_dir, [VOLTA_GPU, SECOND_GPU])
    try:
        starts = [c for c in standin.calls() if c["argv"] == ["-d"]]
        files = RunDir(run_dir)
        assert [(c["visible"], c["pipe_dir"], c["log_dir"]) for c in starts] == [
            (f"GPU-fake-{i}", str(files.mps_gpu_pipe(i).resolve()), str(files.mps_gpu_log(i))) for i in (0, 1)
        ]
        assert [d.gpu for d in daemons] == [0, 1] and len({d.pid for d in daemons}) == 2 and len(notes) == 2
        record = json.loads(files.mps_record.read_text())
        assert [(e["gpu"], e["daemon_pid"]) for e in record["daemons"]] == [(0, daemons[0].pid), (1, daemons[1].pid)]
        served = mps_daemon.servers(daemons)
        assert not served.external and served.for_gpu(1) == MpsDaemonDirs(str(daemons[1].pipe_dir),
                                                                          str(daemons[1].log_dir))  # fmt: skip
    finally:
        close_daemons(daemons, run_dir)
    assert all(_wait_gone(d.pid or 0) for d in daemons)  # each one quit
    assert sorted(str(c["pipe_dir"]) for c in standin.calls() if c["stdin"] == "quit\n") == sorted(
        str(d.pipe_dir) for d in daemons
    )


def test_a_daemon_that_fails_on_the_second_gpu_stops_the_first_and_is_one_line(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = standin.root / "run"
    real = mps_daemon._start

    def second_fails(run_dir: Path, gpu: GpuInfo, env: dict[str, str]) -> mps_daemon.Daemon:
        if gpu.index == 1:
            raise MpsError("--mps: nvidia-cuda-mps-control -d failed with code 1 (GPU 1)")
        return real(run_dir, gpu, env)

    monkeypatch.setattr(mps_daemon, "_start", second_fails)
    with pytest.raises(MpsError, match=r"\(GPU 1\)$"):
        open_daemons(run_dir, [VOLTA_GPU, SECOND_GPU])
    [first] = [c for c in standin.calls() if c["argv"] == ["-d"]]
    assert [c["pipe_dir"] for c in standin.calls() if c["stdin"] == "quit\n"] == [first["pipe_dir"]]
    assert not RunDir(run_dir).mps_record.exists()


# ----- a daemon that is not yours -----


def test_another_users_daemon_is_no_refusal_and_is_used_for_every_gpu(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid = standin.start_daemon_by_hand()
    other = mps_standin.as_another_user(standin.system_pipe, monkeypatch)
    assert refusal([VOLTA_GPU]) is None  # a root daemon starts a server for each user that asks
    found = mps_daemon.serving()
    assert found is not None and found.pid == pid and not found.owned
    daemons, notes = open_daemons(standin.root / "run", [VOLTA_GPU, SECOND_GPU])
    assert daemons == [found] and len(standin.calls()) == 1
    assert notes == [f"MPS: using the daemon already running at {standin.system_pipe} (started by uid {other}) for "
                     "every GPU; it is left running"]  # fmt: skip


def test_auto_does_not_compare_mps_with_mps_under_another_users_daemon(
    standin: StandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readers = _readers(monkeypatch)
    try:
        assert auto_mps(_spec(tmp_path / "a"), readers, "") == (True, None)
        standin.start_daemon_by_hand()
        other = mps_standin.as_another_user(standin.system_pipe, monkeypatch)
        ready, why = auto_mps(_spec(tmp_path / "b"), readers, "")
        assert not ready and why == (f"--auto: MPS not measured: the daemon at {standin.system_pipe} (started by uid "
                                     f"{other}) already serves every job")  # fmt: skip
    finally:
        close_gpus(readers)


def test_without_mps_a_run_under_a_daemon_found_running_says_its_jobs_are_clients_anyway(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu = FakeNvml(FakeGpu(util_at=lambda t: 0.0, clock=time.time))
    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: gpu)
    standin.start_daemon_by_hand()
    run_dir = standin.root / "run"
    code = main(["run", "--headless", "--jobs", "1", "--run-dir", str(run_dir), "--no-tensorboard",
                 "--", sys.executable, "-c", _SEES, "{job_dir}"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    said = (f"[cockpit] MPS: the daemon at {standin.system_pipe} serves every CUDA process here: the jobs are its "
            "clients without --mps")  # fmt: skip
    assert said in out.splitlines()
    config = read(run_dir).config
    assert config.mps is False and config.mps_external == str(standin.system_pipe)
    assert len(standin.calls()) == 1  # nothing started, nothing stopped


# ----- the clients' environment, stale pid files, the /tmp fallback -----


def test_a_worker_under_mps_gets_its_daemons_log_directory_too(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text(_ENV_DUMP)
    python.chmod(0o755)
    launcher = LocalLauncher(python=str(python), nice=0)
    request = LaunchRequest("000", WorkerArgs(tmp_path / "job"), gpu=GpuRef(0, "GPU-fake-0"),
                            mps_pipe_dir="/run/mps/gpu0/pipe", mps_log_dir="/run/mps/gpu0/log")  # fmt: skip
    handle = launcher.launch(request)
    while launcher.poll(handle) is None:
        time.sleep(0.01)
    env = dict(line.split("=", 1) for line in (tmp_path / "env.txt").read_text().splitlines() if "=" in line)
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/mps/gpu0/pipe"
    assert env["CUDA_MPS_LOG_DIRECTORY"] == "/run/mps/gpu0/log"


def test_a_pid_file_naming_a_live_process_that_is_no_daemon_is_stale(standin: StandIn) -> None:
    pid = standin.start_daemon_by_hand()
    os.kill(pid, signal.SIGKILL)
    assert _wait_gone(pid)
    squatter = subprocess.Popen(["sleep", "600"])  # the pid file's number, since reused by another program
    try:
        (standin.system_pipe / "nvidia-cuda-mps-control.pid").write_text(f"{squatter.pid}\n")
        assert mps_daemon.serving() is None
        daemons, _ = open_daemons(standin.root / "run", [VOLTA_GPU])
        try:
            assert daemons[0].owned and daemons[0].pipe_dir != standin.system_pipe
        finally:
            close_daemons(daemons, standin.root / "run")
    finally:
        squatter.kill()
        squatter.wait()


def test_the_tmp_fallback_for_a_long_pipe_path_must_be_ours_and_0700(standin: StandIn) -> None:
    run_dir = standin.root / ("r" * 80)
    [daemon], _ = open_daemons(run_dir, [VOLTA_GPU])
    fallback = daemon.pipe_dir
    try:
        info = fallback.stat()
        assert info.st_mode & 0o777 == 0o700 and info.st_uid == os.getuid()
    finally:
        close_daemons([daemon], run_dir)
    try:
        fallback.mkdir()  # made first, open to all, before the next start
        fallback.chmod(0o755)
        calls = len(standin.calls())
        with pytest.raises(MpsError) as raised:
            open_daemons(run_dir, [VOLTA_GPU])
        assert str(raised.value) == pipe_refusal(fallback, os.getuid(), "755")
        assert len(standin.calls()) == calls  # no daemon started on pipes another user could reach
    finally:
        shutil.rmtree(fallback, ignore_errors=True)


NOBODY = 65534  # the uid of `nobody` on Linux


def pipe_refusal(pipe_dir: Path, owner: int, mode: str) -> str:
    """The one line that refuses GPU 0's pipe directory `pipe_dir`, owned by `owner` with `mode`."""
    return (f"--mps: no pipe directory for GPU 0's daemon: {pipe_dir}: not a private directory of uid "
            f"{os.getuid()} (owner {owner}, mode {mode}); remove it")  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0, reason="a directory owned by another uid needs root to make")
def test_a_0777_pipe_directory_another_user_made_first_is_refused_in_one_line(standin: StandIn) -> None:
    run_dir = standin.root / ("r" * 80)  # too long for the sockets: the pipes go under the temp directory
    [daemon], _ = open_daemons(run_dir, [VOLTA_GPU])
    fallback = daemon.pipe_dir
    close_daemons([daemon], run_dir)
    short = standin.root / "run"
    try:
        fallback.mkdir()  # made first by `nobody`, open to all: it could swap the pipes the jobs connect to
        fallback.chmod(0o777)
        os.chown(fallback, NOBODY, -1)
        calls = len(standin.calls())
        with pytest.raises(MpsError) as raised:
            open_daemons(run_dir, [VOLTA_GPU])
        assert str(raised.value) == pipe_refusal(fallback, NOBODY, "777")
        # Inside a run directory too: the pipes of a run whose --run-dir someone else prepared.
        planted = RunDir(short.resolve()).mps_gpu_pipe(0)
        planted.mkdir(parents=True)
        planted.chmod(0o777)
        os.chown(planted, NOBODY, -1)
        with pytest.raises(MpsError) as raised:
            open_daemons(short, [VOLTA_GPU])
        assert str(raised.value) == pipe_refusal(planted, NOBODY, "777")
        assert len(standin.calls()) == calls  # no daemon started on pipes another user could reach
    finally:
        shutil.rmtree(fallback, ignore_errors=True)


def test_each_mig_slice_gets_a_daemon_of_its_own_seeing_that_slice_alone_by_its_uuid(
    standin: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fake_pynvml import FakeSlice

    gpu = FakeGpu(util_at=lambda t: 0.0, clock=time.time)
    gpu.mig_slices = (FakeSlice(slot=0, uuid="MIG-a", mem_total=10 * GIB), FakeSlice(slot=1, uuid="MIG-b"))
    monkeypatch.setattr(nvml_module, "_import_pynvml", lambda: FakeNvml(gpu))
    readers, _ = open_gpus()
    try:
        seen: list[MpsServers | None] = []
        spec = build_spec(
            RunSettings(
                jobs=2,
                preset="cartpole",
                timesteps=1000,
                run_dir=standin.root / "run",
                mps=True,
            ),
            command_line=("run", "--mps"),
        )
        assert with_mps(spec, readers, "cockpit run", lambda notes, mps: seen.append(mps) or 0) == 0
    finally:
        close_gpus(readers)
    assert [c["visible"] for c in standin.calls() if c["argv"] == ["-d"]] == ["MIG-a", "MIG-b"]
    assert seen[0] is not None and [gpu for gpu, _ in seen[0].by_gpu] == [1, 2]  # the slices, after the GPU
