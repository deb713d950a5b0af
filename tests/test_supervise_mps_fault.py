"""Under `--mps`, one client's fatal fault ends every job on its GPU: a scripted all-clients fault
is one event (one line naming MPS, the jobs restarted from their checkpoints, counted once), and
`--mps` shows in the header, run.toml, `report --json` and a resumed run's spec."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cockpit.contract.controls import RestartJob, SetMps
from cockpit.contract.runspec import RestartPolicy, build_spec
from cockpit.contract.settings import RunSettings
from cockpit.contract.states import JobState
from cockpit.contract.workerargs import MpsDaemonDirs, MpsServers
from cockpit.core.feed.source import Frame
from cockpit.core.machine.host import thread_budget
from cockpit.core.machine.placement import GpuRoom
from cockpit.core.record.run_report import state_json
from cockpit.core.session.background import headless_argv
from cockpit.core.session.run_session import resume_settings
from cockpit.core.supervise.exit_policy import INPUT_ERROR_EXIT, MPS_FAULT_WINDOW_S
from cockpit.core.supervise.supervisor import JobTemplate, Placement, Supervisor
from cockpit.views.tui.cockpit_screen import header_line
from tests.background_child import child_spec
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher, crash, run_log

GIB = 1024**3
ONE_GPU = (GpuRoom(0, "GPU-fake-0", 24 * GIB, 20 * GIB),)


def make(tmp_path: Path, *, mps: bool, agents: int = 3, peaks: dict[str, int] | None = None, clients: bool = True):
    clock, launcher = FakeClock(), FakeLauncher()
    sup = Supervisor(
        run_dir=tmp_path, template=JobTemplate("cartpole", "CartPole-v1", 1000), seeds=range(agents), slots=agents,
        launcher=launcher, budget=thread_budget(agents, 2), restart=RestartPolicy(max_restarts=3), clock=clock,
        placement=Placement(gpus=lambda: ONE_GPU, peak_gpu_mem=lambda: peaks or {},
            mps=MpsServers(by_gpu=((0, MpsDaemonDirs(str(tmp_path / "mps" / "pipe"), str(tmp_path / "mps" / "log"))),))
            if mps else None, mps_clients=clients),
    )  # fmt: skip
    sup.tick()
    return sup, launcher, clock


def test_a_fault_that_ends_every_client_on_the_gpu_is_one_event_counted_once(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, mps=True)
    assert [p.request.gpu.index for p in launcher.processes if p.request.gpu] == [0, 0, 0]
    for job_id in ("000", "001", "002"):
        crash(sup, launcher, job_id, "CUDA error: an illegal memory access was encountered")
    sup.tick()
    jobs = [sup.jobs[j] for j in ("000", "001", "002")]
    assert [j.state for j in jobs] == [JobState.BACKOFF] * 3
    assert [j.restarts_in_a_row for j in jobs] == [1, 0, 0]  # one crash against the policy, not three
    assert len({j.restart_at for j in jobs}) == 1  # they come back together
    mps_lines = [w for w in sup.warnings if "MPS" in w]
    assert mps_lines == ["MPS: a client fault on GPU 0 ended 3 jobs at once (000, 001, 002); each restarts from "
                         "its checkpoint, counted as one crash"]  # fmt: skip
    assert jobs[1].exit_reason == "MPS client fault on GPU 0: exited with code 1"

    clock.sleep(1.0)
    sup.tick()
    relaunched = launcher.processes[3:]
    assert sorted(p.request.job_id for p in relaunched) == ["000", "001", "002"]
    # From their checkpoints: the same job dirs, where each worker resumes from its newest one.
    assert {p.request.args.job_dir for p in relaunched} == {j.job_dir for j in jobs}
    assert all(p.request.mps_pipe_dir == str(tmp_path / "mps" / "pipe") for p in relaunched)


def test_without_mps_the_same_crashes_are_three_crashes(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path, mps=False)
    for job_id in ("000", "001", "002"):
        crash(sup, launcher, job_id)
    sup.tick()
    assert [sup.jobs[j].restarts_in_a_row for j in ("000", "001", "002")] == [1, 1, 1]
    assert not [w for w in sup.warnings if "MPS" in w]


def test_crashes_further_apart_than_the_window_are_separate_faults(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, mps=True, agents=2)
    crash(sup, launcher, "000")
    sup.tick()
    clock.sleep(MPS_FAULT_WINDOW_S + 1)
    crash(sup, launcher, "001")
    sup.tick()
    assert [sup.jobs[j].restarts_in_a_row for j in ("000", "001")] == [1, 1]
    assert not [w for w in sup.warnings if "MPS" in w]


def test_repeated_faults_count_against_the_first_jobs_policy_only(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, mps=True, agents=2)
    for _ in range(2):
        crash(sup, launcher, "000")
        crash(sup, launcher, "001")
        sup.tick()
        clock.sleep(30.0)  # past every back-off: both restart
        sup.tick()
    assert sup.jobs["000"].restarts_in_a_row == 2 and sup.jobs["001"].restarts_in_a_row == 0
    assert sup.jobs["001"].restarts == 2  # shown as restarted all the same
    assert len([w for w in sup.warnings if w.startswith("MPS: a client fault")]) == 2


def test_the_worker_gets_the_pipe_dir_and_a_cap_from_its_known_peak(tmp_path: Path) -> None:
    _, launcher, _ = make(tmp_path, mps=True, agents=2, peaks={"000": 2 * GIB})
    requests = {p.request.job_id: p.request for p in launcher.processes}
    assert requests["000"].mps_pipe_dir == str(tmp_path / "mps" / "pipe")
    assert requests["000"].mps_mem_limit_mib == 2048 * 5 // 4 + 256
    assert requests["001"].mps_mem_limit_mib is None  # its peak is not known yet: no cap
    _, launcher, _ = make(tmp_path / "plain", mps=False, agents=1, peaks={"000": 2 * GIB})
    assert launcher.processes[0].request.mps_pipe_dir is None
    assert launcher.processes[0].request.mps_mem_limit_mib is None


def test_mps_shows_in_the_header_run_toml_report_json_and_a_resumed_runs_spec(tmp_path: Path) -> None:
    sup, _, _ = make(tmp_path, mps=True, agents=1)
    state = sup.snapshot()
    assert state.mps
    assert " on CartPole-v1  MPS  running" in header_line(Frame(state=state), replay=False)
    assert state_json(state, live=True, command="")["mps"] is True
    spec = build_spec(
        RunSettings(
            jobs=1,
            preset="cartpole",
            timesteps=1000,
            run_dir=tmp_path,
            mps=True,
        ),
        command_line=("run", "--mps"),
        resuming=True,
    )
    recorded = run_log(sup, spec)
    assert recorded.config.mps is True
    assert resume_settings(tmp_path, recorded).mps is True

    plain, _, _ = make(tmp_path / "plain", mps=False, agents=1)
    state = plain.snapshot()
    assert "MPS" not in header_line(Frame(state=state), replay=False)
    assert state_json(state, live=True, command="")["mps"] is False


def test_a_run_started_in_the_background_passes_mps_on_new_and_resumed(tmp_path: Path) -> None:
    spec = build_spec(
        RunSettings(
            jobs=1,
            preset="cartpole",
            timesteps=1000,
            run_dir=tmp_path,
            mps=True,
        ),
        command_line=("run", "--mps"),
    )
    assert child_spec(headless_argv(spec)).mps
    assert child_spec(headless_argv(spec, resume=True)).mps
    assert not child_spec(headless_argv(dataclasses.replace(spec, mps=False))).mps


def test_a_daemon_standing_ready_makes_clients_of_the_jobs_launched_after_set_mps(tmp_path: Path) -> None:
    """`run --auto` starts the jobs beside a daemon they are not clients of, then restarts them as
    clients to measure MPS, and back again when it did not help."""
    sup, launcher, clock = make(tmp_path, mps=True, agents=2, clients=False)
    assert [p.request.mps_pipe_dir for p in launcher.processes] == [None, None]
    assert not sup.snapshot().mps and "MPS" not in header_line(Frame(state=sup.snapshot()), replay=False)
    sup.submit(SetMps(True))
    sup.submit(RestartJob("000"))
    sup.tick()
    finish(launcher, "000", sup, clock)
    relaunched = launcher.processes[2:]
    assert [p.request.job_id for p in relaunched] == ["000"]
    assert relaunched[0].request.mps_pipe_dir == str(tmp_path / "mps" / "pipe") and sup.snapshot().mps
    sup.submit(SetMps(False))
    sup.submit(RestartJob("000"))
    sup.tick()
    finish(launcher, "000", sup, clock)
    assert launcher.processes[-1].request.mps_pipe_dir is None and not sup.snapshot().mps


def test_set_mps_without_a_daemon_changes_nothing_and_says_so(tmp_path: Path) -> None:
    sup, launcher, _ = make(tmp_path, mps=False, agents=1)
    sup.submit(SetMps(True))
    sup.tick()
    assert not sup.mps_clients and any("has no MPS daemon" in w for w in sup.warnings)
    assert [p.request.mps_pipe_dir for p in launcher.processes] == [None]


def finish(launcher: FakeLauncher, job_id: str, sup: Supervisor, clock: FakeClock) -> None:
    """The stopped worker of `job_id` checkpoints and exits; the supervisor queues and relaunches it."""
    launcher.live(job_id).exit_code = 0
    for _ in range(3):
        clock.t += 1.0
        sup.tick()


# ----- one fault domain per GPU -----

TWO_GPUS = (GpuRoom(0, "GPU-fake-0", 24 * GIB, 20 * GIB), GpuRoom(1, "GPU-fake-1", 24 * GIB, 20 * GIB))


def per_gpu(root: Path) -> MpsServers:
    """A daemon per GPU, as `mps_daemon.open_daemons` starts them for a run on the two GPUs."""
    return MpsServers(by_gpu=tuple((i, MpsDaemonDirs(str(root / f"gpu{i}" / "pipe"), str(root / f"gpu{i}" / "log")))
                                   for i in (0, 1)))  # fmt: skip


def make_two(tmp_path: Path, *, agents: int = 4, mps: MpsServers | None = None, clients: bool = True):
    clock, launcher = FakeClock(), FakeLauncher()
    sup = Supervisor(
        run_dir=tmp_path, template=JobTemplate("cartpole", "CartPole-v1", 1000), seeds=range(agents), slots=agents,
        launcher=launcher, budget=thread_budget(agents, 2), restart=RestartPolicy(max_restarts=3), clock=clock,
        placement=Placement(gpus=lambda: TWO_GPUS, mps=mps if mps is not None else per_gpu(tmp_path / "mps"),
                            mps_clients=clients),
    )  # fmt: skip
    sup.tick()
    return sup, launcher, clock


def gpu_of(sup: Supervisor, job_id: str) -> int:
    gpu = sup.jobs[job_id].gpu
    assert gpu is not None
    return gpu.index


def test_each_worker_gets_the_pipes_and_logs_of_its_own_gpus_daemon(tmp_path: Path) -> None:
    _, launcher, _ = make_two(tmp_path)
    seen = {(p.request.gpu.index if p.request.gpu else None, p.request.mps_pipe_dir, p.request.mps_log_dir)
            for p in launcher.processes}  # fmt: skip
    root = tmp_path / "mps"
    assert seen == {(0, str(root / "gpu0" / "pipe"), str(root / "gpu0" / "log")),
                    (1, str(root / "gpu1" / "pipe"), str(root / "gpu1" / "log"))}  # fmt: skip


def test_a_fault_restarts_its_gpus_jobs_once_every_client_there_is_gone_and_never_touches_the_other_gpu(
    tmp_path: Path,
) -> None:
    sup, launcher, clock = make_two(tmp_path, agents=6)
    on = {g: [j for j in sup.jobs if gpu_of(sup, j) == g] for g in (0, 1)}
    assert len(on[0]) == len(on[1]) == 3
    first, second, third = on[0]
    crash(sup, launcher, first, "CUDA error: an illegal memory access was encountered")
    sup.tick()
    clock.sleep(5.0)  # past the first one's back-off (1 s): the other clients of GPU 0 still run
    sup.tick()
    assert sup.jobs[first].state is JobState.BACKOFF  # it waits: the server would refuse it
    crash(sup, launcher, second)
    sup.tick()
    clock.sleep(5.0)
    sup.tick()
    # A fault now (two of GPU 0 within the window): both wait while the third client is reaped.
    assert [sup.jobs[j].state for j in (first, second)] == [JobState.BACKOFF] * 2
    assert len(launcher.processes) == 6
    clock.sleep(30.0)  # however long the last client takes to go, they wait for it
    sup.tick()
    assert len(launcher.processes) == 6
    crash(sup, launcher, third)
    sup.tick()
    clock.sleep(1.0)
    sup.tick()
    relaunched = sorted(p.request.job_id for p in launcher.processes[6:])
    assert relaunched == sorted(on[0])  # every job of GPU 0 at once, from its checkpoint
    # GPU 1's jobs ran through it all: never stopped, never restarted, and they held nothing up.
    assert [sup.jobs[j].state for j in on[1]] == [JobState.STARTING] * 3 and all(
        sup.jobs[j].restarts == 0 for j in on[1]
    )
    assert [p.request.job_id for p in launcher.processes if p.request.job_id in on[1]] == on[1]  # launched once
    assert not [p for p in launcher.processes if p.request.job_id in on[1] and p.signals]


def test_a_crash_of_its_own_under_mps_waits_no_longer_than_the_fault_window(tmp_path: Path) -> None:
    sup, launcher, clock = make_two(tmp_path, agents=4)
    lone = next(j for j in sup.jobs if gpu_of(sup, j) == 0)
    crash(sup, launcher, lone)
    sup.tick()
    clock.sleep(2.0)  # past its back-off, but another client of GPU 0 may yet go with it
    sup.tick()
    assert sup.jobs[lone].state is JobState.BACKOFF
    clock.sleep(MPS_FAULT_WINDOW_S)  # none did: not a fault
    sup.tick()
    assert sup.jobs[lone].state is not JobState.BACKOFF and len(launcher.processes) == 5


# ----- an MPS fault is not the job's input -----

_MPS_ERRORS = (
    "CUDA error: MPS client failed to connect to the MPS control daemon or the MPS server",
    "cudaErrorMpsServerNotReady: the MPS server is not ready to accept new MPS client requests",
    "CUDA driver error: CUDA_ERROR_MPS_RPC_FAILURE",
)


def test_an_mps_error_at_each_start_restarts_with_back_off_and_is_never_the_jobs_input(tmp_path: Path) -> None:
    for n, message in enumerate(_MPS_ERRORS):
        sup, launcher, clock = make(tmp_path / str(n), mps=True, agents=1)
        for attempt in range(3):
            crash(sup, launcher, "000", message, trained=0)  # before a single step, the same error each time
            sup.tick()
            job = sup.jobs["000"]
            assert job.state is JobState.BACKOFF, (message, attempt, job.exit_reason)
            assert job.restarts_in_a_row == attempt + 1  # with back-off, counted as any crash is
            clock.sleep(30.0)
            sup.tick()
    # The same error from the job itself is its input, as before.
    sup, launcher, clock = make(tmp_path / "own", mps=True, agents=1)
    for _ in range(2):
        crash(sup, launcher, "000", "ValueError: no such env", trained=0)
        sup.tick()
        clock.sleep(30.0)
        sup.tick()
    assert sup.jobs["000"].state is JobState.FAILED and sup.jobs["000"].exit_reason == INPUT_ERROR_EXIT


# ----- a daemon found running, without --mps -----


def test_without_mps_a_daemon_found_running_is_named_in_the_header_run_toml_and_its_faults_grouped(
    tmp_path: Path,
) -> None:
    found = MpsServers(shared=MpsDaemonDirs("/tmp/nvidia-mps"), external=True)
    sup, launcher, _ = make_two(tmp_path, agents=2, mps=found, clients=False)
    assert [p.request.mps_pipe_dir for p in launcher.processes] == [None, None]  # they find it by themselves
    state = sup.snapshot()
    assert not state.mps and state.mps_external == "/tmp/nvidia-mps"
    assert "MPS (not --mps: the daemon at /tmp/nvidia-mps)" in header_line(Frame(state=state), replay=False)
    spec = build_spec(
        RunSettings(
            jobs=2,
            preset="cartpole",
            timesteps=1000,
            run_dir=tmp_path,
        ),
        command_line=("run",),
    )
    recorded = run_log(sup, spec)
    assert recorded.config.mps is False and recorded.config.mps_external == "/tmp/nvidia-mps"
    assert resume_settings(tmp_path, recorded).mps is False  # a resume does not turn --mps on

    two = make_two(tmp_path / "fault", agents=4, mps=found, clients=False)
    sup, launcher, _ = two
    on0 = [j for j in sup.jobs if gpu_of(sup, j) == 0]
    for job_id in on0:
        crash(sup, launcher, job_id)
    sup.tick()
    assert [sup.jobs[j].restarts_in_a_row for j in on0] == [1, 0]  # their clients all the same: one fault
