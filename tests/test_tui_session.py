"""The cockpit app on a real supervisor session: fake workers (a scripted launcher) and a scripted
GPU (the fake pynvml), served over the control socket. Every key goes through the same path as
`cockpit attach` and must change what the supervisor does."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from cockpit.contract.controls import ApplyAdvice, RestartJob, SetPreset, StopAll
from cockpit.contract.presets import load
from cockpit.contract.runrecord import read
from cockpit.contract.runspec import build_spec
from cockpit.contract.settings import RunSettings
from cockpit.contract.states import RunStatus
from cockpit.core.feed.control import AttachSource
from cockpit.core.feed.snapshot import RunState
from cockpit.core.feed.source import SourceError
from cockpit.core.machine.nvml import open_gpu
from cockpit.core.session.startup import start_session
from cockpit.core.telemetry.sampler import Sampler
from cockpit.views.tui.advice_panel import AdvicePanel
from cockpit.views.tui.app import make_app
from cockpit.views.tui.gpu_panel import GpuPanel
from cockpit.views.tui.jobs_table import JobsTable
from tests.fake_pynvml import FakeGpu, FakeNvml
from tests.test_feed_control import FakeWorkers, QuietView, scripted_session

FAKE_GPU_NAME = "RTX 4090 (fake)"  # the GPU panel drops the "NVIDIA GeForce" prefix


def _connect(run_dir: Path, timeout: float = 10.0) -> AttachSource:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return AttachSource.connect(run_dir, hz=20)
        except SourceError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


async def _until(pilot, condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.05)


async def test_keys_drive_a_real_supervisor_and_stop_all_ends_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    spec = build_spec(
        RunSettings(
            jobs=2,
            agents=3,
            preset="cartpole",
            timesteps=None,
            run_dir=run_dir,
            max_restarts=0,
        ),
        command_line=("cockpit", "run"),
    )
    gpu, status = open_gpu(nvml=FakeNvml(FakeGpu(util_at=lambda t: 90.0 if int(t * 2) % 2 else 5.0, clock=time.time)))
    assert gpu is not None, status
    workers = FakeWorkers()
    session = start_session(spec, Sampler(gpu=gpu, gpu_status=status, hz=20), launcher=workers)
    final: list[RunState] = []
    runner = threading.Thread(target=lambda: final.append(session.run(QuietView(), handle_signals=False)))
    runner.start()
    try:
        source = _connect(run_dir)
        app = make_app(source)
        async with app.run_test(size=(100, 30)) as pilot:
            table = app.screen.query_one(JobsTable)
            await _until(pilot, lambda: table.row_count == 3 and table.cell("001", "status") == "running")
            assert table.cell("002", "status") == "queued"
            gpu_text = "\n".join(line.plain for line in app.screen.query_one(GpuPanel).lines())
            assert FAKE_GPU_NAME in gpu_text and "busy" in gpu_text and "No GPU" not in gpu_text
            await pilot.press("down", "s")  # stop job 001: its slot goes to the queued 002
            await _until(pilot, lambda: table.cell("001", "status") == "stopped")
            await _until(pilot, lambda: table.cell("002", "status") == "running")
            await pilot.press("a")  # a fourth agent, next seed
            await _until(pilot, lambda: table.row_count == 4)
            assert table.cell("003", "status") == "queued"
            # the advisor read the fake RTX 4090 and this machine's cores: more parallel jobs
            await _until(pilot, lambda: any(a.setting == "jobs" for a in source.frame().state.suggestions))
            (jobs_advice,) = [a for a in source.frame().state.suggestions if a.setting == "jobs"]
            assert jobs_advice.current == "2" and "4090" in jobs_advice.reason
            while source.frame().state.suggestions[app.screen.query_one(AdvicePanel).selected].setting != "jobs":
                await pilot.press("v")
            await pilot.press("A")
            wanted = int(jobs_advice.suggested)
            await _until(pilot, lambda: source.frame().state.slots == wanted)
            await _until(pilot, lambda: source.frame().state.count("running") == wanted)
            await pilot.press("q", "s")  # quit, stopping every job
            await _until(pilot, lambda: not app.is_running)
        assert app.return_value is not None and app.return_value.state.status is RunStatus.INTERRUPTED
    finally:
        if runner.is_alive():  # a failed assertion must not leave the session running
            session.submit(StopAll())
        runner.join(timeout=20)
    assert final and final[0].status is RunStatus.INTERRUPTED
    assert {job.state for job in final[0].jobs} == {"stopped"}
    assert any(entry.action == "apply" for entry in read(run_dir).advice)


def test_applying_n_envs_writes_a_preset_and_restarts_live_jobs_under_it(tmp_path: Path) -> None:
    session = scripted_session(tmp_path / "run")
    session.supervisor.tick()
    session.supervisor.tick()  # the fake workers wrote `started`: both jobs run
    session._latest = session.snapshot()
    session.submit(ApplyAdvice("n_envs", "16"))
    commands = [session.supervisor._commands.get_nowait() for _ in range(3)]
    assert isinstance(commands[0], SetPreset) and commands[1:] == [RestartJob("000"), RestartJob("001")]
    written = load(commands[0].preset_arg)
    assert (written.n_envs, written.batch_size, written.env) == (16, 256, "CartPole-v1")  # 16 x 32 = 512: 256 divides
    with pytest.raises(ValueError, match="net_arch cannot change under running jobs"):
        session.submit(ApplyAdvice("net_arch", "64,64"))


def test_the_frame_window_forgets_agents_the_state_no_longer_shows() -> None:
    from dataclasses import replace

    from cockpit.core.feed.source import FrameWindow
    from tests.tui_fakes import NOW, frame

    window = FrameWindow(window_s=60.0)
    first = frame(gpu=False, jobs=3, now=NOW)
    window.add(first.state, phases={job: [(NOW - 5.0, "rollout")] for job in ("000", "001", "002")})
    # Job 002 has ended and left the view; job 001 too, but its last change is still in the window.
    later = replace(first.state, now=NOW + 30.0, jobs=first.state.jobs[:1])
    got = window.add(later, phases={"001": [(NOW + 20.0, "train")]})
    assert set(got.phases) == {"000", "001", "002"}  # 002's transition at NOW - 5 is still in the window
    gone = window.add(replace(later, now=NOW + 70.0))
    assert set(gone.phases) == {"000", "001"}  # 002 left the window; 001 changed at NOW + 20, still inside
    assert gone.phases["000"] == ((NOW - 5.0, "rollout"),)  # a listed job keeps its last phase, however old
    assert set(window.add(replace(later, now=NOW + 90.0)).phases) == {"000"}
