"""The control socket with real sockets: a fake provider behind a ControlServer, AttachSource and raw
clients in front of it, and one real RunSession (fake workers) serving while it runs."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from cockpit.contract.controls import Control, StopAll, StopJob
from cockpit.contract.events import EVENTS_FILE, EventWriter
from cockpit.contract.runspec import build_spec
from cockpit.contract.settings import RunSettings
from cockpit.contract.states import RunStatus
from cockpit.core.feed import control
from cockpit.core.feed.control import AttachSource, ControlError, ControlServer, control_path, peer_uid
from cockpit.core.feed.snapshot import JobView, RunState
from cockpit.core.feed.source import Frame, SourceError, Transition
from cockpit.core.launch.local import LocalJobFiles
from cockpit.core.launch.protocol import LaunchRequest, WorkerHandle
from cockpit.core.session.run_session import TICK_S, UNWATCHED_STATE_S, RunSession
from cockpit.core.session.startup import start_session
from cockpit.core.telemetry.phases import phases_since
from cockpit.core.telemetry.sampler import Sample, Sampler
from tests.fakeclock import FakeClock
from tests.specs import cartpole_spec

T0 = 1_800_000_000.0


def job_view(job_id: str) -> JobView:
    return JobView(
        id=job_id, seed=0, state="running", phase="rollout", phase_since=T0, steps=0, target=1000, sps=None,
        mean_sps=None, ep_rew_mean=None, restarts=0, checkpoints=0, last_checkpoint_step=None, error=None,
        exit_reason=None, pid=None, device=None, cpu_percent=None, rss_bytes=None, gpu_mem_bytes=None,
        peak_gpu_mem_bytes=None, started_at=None, ended_at=None,
    )  # fmt: skip


def state_at(now: float, status: RunStatus = RunStatus.RUNNING) -> RunState:
    return RunState(
        run_dir="run", preset="cartpole", env="CartPole-v1", status=status, started_at=T0 - 1000, now=now,
        slots=1, jobs=(job_view("000"),), sample=None, gpu=None, gpu_status="no GPU telemetry: test", warnings=(),
    )  # fmt: skip


def sample_at(t: float) -> Sample:
    return Sample(t=t, cpu_percent=(1.0,), ram_used_bytes=1, ram_total_bytes=2, gpu=None, jobs={}, cost_s=0.0)


class FakeProvider:
    """A run the test scripts: it sets the state, samples and phases, and reads the commands."""

    def __init__(self) -> None:
        self.state: RunState | None = None
        self.samples: list[Sample] = []
        self.phases: dict[str, list[Transition]] = {}
        self.commands: list[Control] = []
        self.fail: Exception | None = None

    def latest_state(self) -> RunState | None:
        if self.fail is not None:
            raise self.fail
        return self.state

    def samples_since(self, t: float) -> list[Sample]:
        return [s for s in self.samples if s.t > t]

    def phases_since(self, since: Mapping[str, float]) -> dict[str, list[Transition]]:
        return {job: phases_since(list(self.phases[job]), t) for job, t in since.items() if job in self.phases}

    def submit(self, command: Control) -> None:
        self.commands.append(command)


class Raw:
    """A bare protocol client: one JSON line out, one back."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(str(path))
        self.reader = self.sock.makefile("rb")

    def send_line(self, line: bytes) -> dict[str, Any] | None:
        self.sock.sendall(line + b"\n")
        reply = self.reader.readline()
        return json.loads(reply) if reply else None

    def ask(self, **request: Any) -> dict[str, Any] | None:
        return self.send_line(json.dumps(request).encode())

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def wait_for(condition: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
    return result


@pytest.fixture
def provider() -> FakeProvider:
    return FakeProvider()


@pytest.fixture
def server(tmp_path: Path, provider: FakeProvider) -> Iterator[ControlServer]:
    served = ControlServer(tmp_path, provider)
    served.start()
    yield served
    served.stop()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (pytest's tmp_path can be too long for the fallback tests)."""
    path = Path(tempfile.mkdtemp(prefix="ck", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def scripted(provider: FakeProvider, now: float) -> None:
    """Samples every 10 s and phases of job 000 from T0 - 100 up to `now`."""
    provider.state = state_at(now)
    provider.samples = [sample_at(T0 - 100 + 10 * i) for i in range(int((now - T0 + 100) / 10) + 1)]
    transitions = int((now - T0 + 100) / 20) + 1
    provider.phases = {"000": [(T0 - 100 + 20 * i, ("rollout", "train")[i % 2]) for i in range(transitions)]}


def test_hello_names_the_run_and_the_protocol(server: ControlServer, tmp_path: Path) -> None:
    raw = Raw(control_path(tmp_path))
    assert raw.ask(op="hello") == {"ok": True, "run_dir": str(tmp_path.resolve()), "pid": os.getpid(), "version": 1}
    raw.close()


def test_the_socket_is_private(server: ControlServer, tmp_path: Path) -> None:
    assert server.path == tmp_path.resolve() / "cockpit.sock"
    info = os.stat(server.path)
    assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600


def test_a_frame_before_the_first_tick_has_no_state(server: ControlServer, tmp_path: Path) -> None:
    raw = Raw(control_path(tmp_path))
    assert raw.ask(op="frame", since=0) == {"ok": True, "state": None, "samples": [], "phases": {}}
    raw.close()


def test_frames_carry_only_what_is_new_and_at_most_the_window(
    server: ControlServer, provider: FakeProvider, tmp_path: Path
) -> None:
    scripted(provider, T0)
    raw = Raw(control_path(tmp_path))
    first = raw.ask(op="frame", since=0)
    assert first is not None and first["ok"] and first["state"]["now"] == T0
    assert [s["t"] for s in first["samples"]] == [T0 - 50 + 10 * i for i in range(6)]  # after T0 - 60 only
    # The transition before the window's left edge comes along: it is the phase at that edge.
    assert first["phases"] == {"000": [[T0 - 60, "rollout"], [T0 - 40, "train"], [T0 - 20, "rollout"], [T0, "train"]]}
    later = raw.ask(op="frame", since=T0 - 20, phase_since={"000": T0 - 20})
    assert later is not None
    assert [s["t"] for s in later["samples"]] == [T0 - 10, T0]
    assert later["phases"]["000"] == [[T0 - 20, "rollout"], [T0, "train"]]
    raw.close()


def test_bad_requests_get_an_answer_and_the_connection_lives_on(
    server: ControlServer, provider: FakeProvider, tmp_path: Path
) -> None:
    raw = Raw(control_path(tmp_path))
    for line in (b"{not json", b"[1, 2]", b'{"op": "dance"}', b'{"op": "frame", "since": "yesterday"}'):
        reply = raw.send_line(line)
        assert reply is not None and reply["ok"] is False and reply["error"]
    reply = raw.ask(op="command", command={"kind": "stop"})
    assert reply is not None and reply["ok"] is False and "'job_id'" in reply["error"]
    provider.fail = RuntimeError("provider broke")
    assert raw.ask(op="frame", since=0) == {"ok": False, "error": "RuntimeError: provider broke"}
    provider.fail = None
    assert raw.ask(op="hello")["ok"] is True  # type: ignore[index]
    assert provider.commands == []
    raw.close()


def test_attach_merges_increments_into_a_trimmed_window(
    server: ControlServer, provider: FakeProvider, tmp_path: Path
) -> None:
    scripted(provider, T0)
    source = AttachSource.connect(tmp_path, hz=50)
    try:
        assert source.read_only is False and source.link_error is None
        frame = source.frame()
        assert frame is not None and frame.state == provider.state
        assert [s.t for s in frame.samples] == [T0 - 50 + 10 * i for i in range(6)]
        scripted(provider, T0 + 30)
        frame = wait_for(lambda: (f := source.frame()) is not None and f.state.now == T0 + 30 and f)
        assert [s.t for s in frame.samples] == [T0 - 30 + 10 * i for i in range(7)]
        assert frame.phases["000"][0] == (T0 - 40, "train") and frame.phases["000"][-1] == (T0 + 20, "rollout")
    finally:
        source.close()


def test_a_command_reaches_the_provider(server: ControlServer, provider: FakeProvider, tmp_path: Path) -> None:
    source = AttachSource.connect(tmp_path)
    try:
        source.submit(StopJob("000"))
        source.submit(StopAll())
        assert provider.commands == [StopJob("000"), StopAll()]
    finally:
        source.close()


def test_two_viewers_at_once(server: ControlServer, provider: FakeProvider, tmp_path: Path) -> None:
    scripted(provider, T0)
    raw = Raw(control_path(tmp_path))  # an idle connection holds nobody up
    first, second = AttachSource.connect(tmp_path, hz=50), AttachSource.connect(tmp_path, hz=50)
    try:
        scripted(provider, T0 + 10)
        for source in (first, second):
            wait_for(lambda s=source: (f := s.frame()) is not None and f.state.now == T0 + 10)
        second.submit(StopJob("000"))
        assert provider.commands == [StopJob("000")]
        assert raw.ask(op="hello")["ok"] is True  # type: ignore[index]
    finally:
        first.close()
        second.close()
        raw.close()


def test_a_stale_socket_file_is_replaced(tmp_path: Path, provider: FakeProvider) -> None:
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(str(tmp_path / "cockpit.sock"))
    left.close()  # the file stays, as after a run that was SIGKILLed
    with pytest.raises(SourceError, match="nothing listens"):
        AttachSource.connect(tmp_path)
    served = ControlServer(tmp_path, provider)
    served.start()
    try:
        source = AttachSource.connect(tmp_path)
        source.close()
    finally:
        served.stop()
    assert not (tmp_path / "cockpit.sock").exists()


def test_a_non_socket_in_the_way_is_refused(tmp_path: Path, provider: FakeProvider) -> None:
    (tmp_path / "cockpit.sock").write_text("mine")
    with pytest.raises(ControlError, match="not a socket"):
        ControlServer(tmp_path, provider).start()
    assert (tmp_path / "cockpit.sock").read_text() == "mine"


def long_run_dir(base: Path) -> Path:
    run_dir = base / ("a-rather-long-directory-name-" * 4) / "run"
    run_dir.mkdir(parents=True)
    assert len(os.fsencode(run_dir / "cockpit.sock")) > control.MAX_SOCKET_PATH
    return run_dir


def test_a_long_run_dir_serves_from_xdg_runtime_dir(
    tmp_path: Path, short_dir: Path, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(short_dir))
    run_dir = long_run_dir(tmp_path)
    path = control_path(run_dir)
    assert path.parent == short_dir and path.name.startswith("cockpit-") and path == control_path(run_dir)
    assert control_path(tmp_path / "other" / "." / "..") != path
    scripted(provider, T0)
    served = ControlServer(run_dir, provider)
    served.start()
    try:
        source = AttachSource.connect(run_dir)
        frame = source.frame()
        assert frame is not None and frame.state.now == T0
        source.close()
    finally:
        served.stop()
    assert not path.exists()


def test_without_xdg_the_fallback_is_a_private_tmp_dir(
    tmp_path: Path, short_dir: Path, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(control, "PRIVATE_TMP", short_dir)
    run_dir = long_run_dir(tmp_path)
    path = control_path(run_dir)
    private = short_dir / f"cockpit-{os.getuid()}"
    assert path.parent == private and stat.S_IMODE(os.stat(private).st_mode) == 0o700
    served = ControlServer(run_dir, provider)
    served.start()
    try:
        AttachSource.connect(run_dir).close()
    finally:
        served.stop()
    os.chmod(private, 0o755)  # someone loosened it: another user could plant a socket there
    with pytest.raises(ControlError, match="not a private directory"):
        control_path(run_dir)
    with pytest.raises(SourceError, match=str(run_dir)):
        AttachSource.connect(run_dir)


def test_peer_uid_reads_the_credentials_of_the_other_end() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert peer_uid(left) == os.getuid()


NOBODY = 65534  # the uid of `nobody` on Linux
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="a client of another uid needs root, to setuid to nobody in a forked child"
)


def as_nobody(path: Path, request: bytes | None = None) -> str:
    """Connect to the AF_UNIX socket at `path` from a forked child running as `nobody`, send
    `request` (a line) if given and return what came of it: 'connected' (nothing sent),
    'answered <reply>', 'closed' (closed without an answer) or 'denied <error>' (could not connect)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only plain system calls, then _exit
        result = "?"
        try:
            os.close(read_end)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(5)
                try:
                    sock.connect(str(path))
                except OSError as exc:
                    result = f"denied {exc!r}"
                else:
                    if request is None:
                        result = "connected"
                        sock.recv(1)  # hold the connection until the parent is done with it
                    else:
                        try:
                            sock.sendall(request + b"\n")
                            reply = sock.makefile("rb").readline()
                            result = f"answered {reply.decode()}" if reply else "closed"
                        except (ConnectionResetError, BrokenPipeError):  # the close raced our request
                            result = "closed"
        except BaseException as exc:  # reported to the parent, never raised in the fork
            result = f"error {exc!r}"
        finally:
            os.write(write_end, result.encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        out = reader.read().decode()
    os.waitpid(pid, 0)
    return out


def open_to_nobody(directory: Path) -> None:
    """Let `nobody` reach sockets in `directory`: the dir searchable, the sockets in it writable."""
    os.chmod(directory, 0o711)
    for sock in directory.glob("*.sock"):
        os.chmod(sock, 0o666)


@needs_root
def test_peer_uid_reads_a_foreign_uid(short_dir: Path) -> None:
    path = short_dir / "peer.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)
        open_to_nobody(short_dir)
        listener.settimeout(10)
        outcome: list[str] = []
        child = threading.Thread(target=lambda: outcome.append(as_nobody(path)))
        child.start()
        conn, _ = listener.accept()
        with conn:
            assert peer_uid(conn) == NOBODY
        child.join(timeout=10)
    assert outcome == ["connected"]


@needs_root
def test_a_client_running_as_another_uid_is_refused(short_dir: Path, provider: FakeProvider) -> None:
    served = ControlServer(short_dir, provider)
    served.start()
    try:
        assert served.path is not None
        open_to_nobody(short_dir)  # past the 0600 socket: only the peer-uid check is left to refuse it
        assert as_nobody(served.path, b'{"op": "hello"}') == "closed"
        served.uid = NOBODY  # the same client, now the one uid let in: it reaches the server and is served
        assert as_nobody(served.path, b'{"op": "hello"}').startswith('answered {"ok": true')
    finally:
        served.stop()


def test_the_socket_is_bound_0600_even_under_a_permissive_umask(
    short_dir: Path, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The umask around `bind`: the socket never exists with a looser mode, not even until its chmod."""
    modes_before_chmod: list[int] = []
    real_chmod = os.chmod

    def spying_chmod(path: Any, mode: int, *args: Any, **kwargs: Any) -> None:
        modes_before_chmod.append(stat.S_IMODE(os.lstat(path).st_mode))
        real_chmod(path, mode, *args, **kwargs)

    monkeypatch.setattr(control.os, "chmod", spying_chmod)
    previous = os.umask(0o000)
    try:
        served = ControlServer(short_dir, provider)
        served.start()
        assert os.umask(0o000) == 0o000  # the process's umask is given back after the bind
    finally:
        os.umask(previous)
    try:
        assert served.path is not None
        assert modes_before_chmod == [0o600], [oct(m) for m in modes_before_chmod]  # as bound
        assert stat.S_IMODE(os.stat(served.path).st_mode) == 0o600
    finally:
        served.stop()


def test_a_peer_of_another_uid_is_refused(server: ControlServer, tmp_path: Path) -> None:
    server.uid = os.getuid() + 1  # as if we were someone else: our own connection is now foreign
    raw = Raw(control_path(tmp_path))
    with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # the close may race our request
        assert raw.ask(op="hello") is None  # closed without an answer
    raw.close()
    with pytest.raises(SourceError, match="no live cockpit run"):
        AttachSource.connect(tmp_path)


def test_when_the_run_ends_the_last_frame_stays_with_a_link_error(tmp_path: Path, provider: FakeProvider) -> None:
    served = ControlServer(tmp_path, provider, linger_s=5.0)
    served.start()
    scripted(provider, T0)
    source = AttachSource.connect(tmp_path, hz=50)
    try:
        provider.state = state_at(T0 + 1, RunStatus.DONE)  # the final state, then the server stops
        served.stop()  # lingers until our poller fetched a frame after it began
        error = wait_for(lambda: source.link_error)
        assert str(tmp_path.resolve()) in error
        frame = source.frame()
        assert isinstance(frame, Frame) and frame.link_error == error
        assert frame.state.status is RunStatus.DONE
        with pytest.raises(SourceError):
            source.submit(StopAll())
    finally:
        source.close()
    assert not (tmp_path / "cockpit.sock").exists()


def test_connect_where_nothing_listens_names_the_dir(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no live cockpit run in") as raised:
        AttachSource.connect(tmp_path / "run")
    assert str(tmp_path / "run") in str(raised.value) and "\n" not in str(raised.value)


def test_detail_reads_the_job_files_and_then_only_what_was_appended(server: ControlServer, tmp_path: Path) -> None:
    events = tmp_path / "jobs" / "001" / "events.jsonl"
    events.parent.mkdir(parents=True)
    started = {"t": 1.0, "kind": "started", "config": {"env": "CartPole-v1"}}
    events.write_text(json.dumps(started) + "\n")
    source = AttachSource.connect(tmp_path)
    try:
        first = source.detail("001")
        assert first.config == {"env": "CartPole-v1"} and first.curve == ()
        progress = {"t": 2.0, "kind": "progress", "num_timesteps": 512, "ep_rew_mean": 21.5, "sps": 900.0}
        with events.open("a") as fh:
            fh.write(json.dumps(progress) + "\n")
        second = source.detail("001")
        assert second.curve == ((512, 21.5),) and second.sps == ((2.0, 900.0),)
        assert [e.kind for e in second.events] == ["started"]
        with pytest.raises(SourceError, match="no job '007'"):
            source.detail("007")
    finally:
        source.close()


# ----- a real session -----


class FakeWorkers(LocalJobFiles):
    """A launcher whose 'workers' write a start and a rollout phase at once, and stop on SIGTERM."""

    def __init__(self) -> None:
        self.exit_codes: dict[int, int | None] = {}
        self.writers: dict[int, EventWriter] = {}

    def launch(self, request: LaunchRequest) -> WorkerHandle:
        pid = 5_000_000 + len(self.exit_codes)  # above Linux's pid_max: the sampler follows nobody real
        writer = self.writers[pid] = EventWriter(request.job_dir / EVENTS_FILE)
        writer.started(config={}, pid=pid, device="cpu", versions={})
        writer.phase("rollout", iteration=1, num_timesteps=0)
        self.exit_codes[pid] = None
        return WorkerHandle(request.job_id, pid, request.job_dir)

    def terminate(self, handle: WorkerHandle) -> None:
        self.writers[handle.pid].finished(status="stopped", steps=0, duration=1.0)
        self.exit_codes[handle.pid] = 0

    def kill(self, handle: WorkerHandle) -> None:
        self.exit_codes[handle.pid] = -9

    def poll(self, handle: WorkerHandle) -> int | None:
        return self.exit_codes[handle.pid]

    def stderr_tail(self, handle: WorkerHandle, lines: int = 5) -> str:
        return ""

    def stopped(self, handle: WorkerHandle) -> bool:
        return False


def scripted_session(run_dir: Path, *, jobs: int = 2, **session: Any) -> RunSession:
    """An unserved session of `jobs` cartpole agents on `FakeWorkers`, its run dir made;
    `session` sets the rest of `start_session`'s (clock, host, costs...)."""
    spec = build_spec(
        RunSettings(
            jobs=jobs,
            agents=jobs,
            preset="cartpole",
            timesteps=None,
            run_dir=run_dir,
            max_restarts=0,
        ),
        command_line=("cockpit", "run"),
    )
    run_dir.mkdir(parents=True)
    return start_session(
        spec, Sampler(gpu=None, gpu_status="test", hz=5), launcher=FakeWorkers(), serve=False, **session
    )


class QuietView:
    def update(self, state: RunState) -> None:
        pass

    def close(self, state: RunState) -> None:
        pass


def test_a_running_session_serves_frames_and_takes_commands(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    spec = cartpole_spec(run_dir)
    session = start_session(spec, Sampler(gpu=None, gpu_status="no GPU telemetry: test", hz=20), launcher=FakeWorkers())
    seen: list[Frame] = []
    failures: list[BaseException] = []

    def viewer() -> None:
        # The session must run on the main thread (it installs signal handlers), so the viewer
        # is the thread; whatever happens, it ends the run so the test cannot hang.
        try:
            source = wait_for(lambda: _try_connect(run_dir))
            try:
                seen.append(
                    wait_for(
                        lambda: (
                            (f := source.frame()) is not None
                            and f.samples
                            and [j.state for j in f.state.jobs] == ["running", "running"]
                            and all(tr[-1][1] == "rollout" for tr in f.phases.values())
                            and len(f.phases) == 2
                            and f
                        )
                    )
                )
                source.submit(StopAll())
                wait_for(lambda: source.link_error)
                seen.append(source.frame())  # type: ignore[arg-type]
            finally:
                source.close()
        except BaseException as exc:
            failures.append(exc)
            session.submit(StopAll())

    thread = threading.Thread(target=viewer)
    thread.start()
    final = session.run(QuietView())
    thread.join(timeout=10)
    assert not failures, failures
    live, last = seen
    assert live.state.status is RunStatus.RUNNING and live.link_error is None
    assert final.status is RunStatus.INTERRUPTED
    assert last.state.status is RunStatus.INTERRUPTED and last.link_error is not None  # it saw the final state
    assert not (run_dir / "cockpit.sock").exists()


def _try_connect(run_dir: Path) -> AttachSource | None:
    try:
        return AttachSource.connect(run_dir, hz=20)
    except SourceError:
        return None


def test_an_unwatched_session_builds_its_state_once_a_second_and_a_viewer_gets_every_tick(tmp_path: Path) -> None:
    """Headless with nobody attached, the state (over every job, a fleet's every agent) is built
    once a second while jobs are followed at every tick; a viewer's fetch makes it every tick."""
    clock = FakeClock()
    session = scripted_session(tmp_path / "run", clock=clock)
    built: list[float] = []
    snapshot = session.snapshot
    session.snapshot = lambda **kw: (built.append(clock.monotonic()), snapshot(**kw))[-1]  # type: ignore[method-assign]
    ticks: list[float] = []
    tick = session.supervisor.tick
    session.supervisor.tick = lambda: (ticks.append(clock.monotonic()), tick())[-1]  # type: ignore[method-assign]

    class Watcher(QuietView):
        def update(self, state: RunState) -> None:
            if len(built) == 10:
                session.latest_state()  # an attached viewer's poll: from now on, every tick
            if len(built) == 30:
                session.submit(StopAll())

    session.run(Watcher(), handle_signals=False)
    unwatched = [b for b in built if b <= built[9]]
    assert len(unwatched) == 10 and unwatched[-1] - unwatched[0] == pytest.approx(9 * UNWATCHED_STATE_S)
    assert len([t for t in ticks if t <= built[9]]) == 9 * round(UNWATCHED_STATE_S / TICK_S) + 1
    watched = built[10:30]
    assert [b - a for a, b in itertools.pairwise(watched)] == pytest.approx([TICK_S] * 19)
