"""The control socket's commands are bounded (docs/attach.md, "What the socket takes"): a seed, the
slots and jobs a run is asked for, the characters of a client's value repeated back, and the
connections served at once; and a burst of viewers connecting finds room in the listen backlog.
Each bound answers one line, printed here (`-s`) as a client sees it."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cockpit.contract.advice import AdviceSetting
from cockpit.contract.controls import AddJob, ApplyAdvice, SetSlots, StopJob, decode
from cockpit.core.feed import control
from cockpit.core.feed.control import MAX_CONNECTIONS, AttachSource, ControlServer
from cockpit.core.feed.source import SourceError
from cockpit.core.machine.host import HostInfo
from cockpit.core.session.run_session import RunSession
from tests.fakeclock import FakeClock
from tests.test_feed_control import FakeProvider, Raw, scripted_session, wait_for

# 4 logical CPUs would hold 4 x 32 jobs, but 4 GiB of memory holds only 16 of 256 MiB.
HOST = HostInfo("box", "Test CPU", 2, 4, 4 * 1024**3, "Linux")
LIMIT = 16
AT_MOST = (
    "this run runs at most 16 jobs at once (32 a logical CPU, one a 256 MiB of memory: 4 CPUs and 4.0 GiB here; "
    "--jobs 2)"
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ControlServer, FakeProvider]]:
    provider = FakeProvider()
    served = ControlServer(tmp_path, provider)
    served.start()
    yield served, provider
    served.stop()


def session(tmp_path: Path) -> RunSession:
    """Two queued agents, `--jobs 2`, on HOST."""
    return scripted_session(tmp_path / "run", jobs=2, host=HOST, clock=FakeClock())


def refusal(run: RunSession, command: Any) -> str:
    with pytest.raises(ValueError) as caught:
        run.submit(command)
    line = str(caught.value)
    print(line)
    assert "\n" not in line
    return line


def test_an_add_job_seed_past_2_31_minus_1_is_refused_in_one_line(server: tuple[ControlServer, FakeProvider]) -> None:
    served, provider = server
    assert served.path is not None
    client = Raw(served.path)
    try:
        reply = client.ask(op="command", command={"kind": "add", "seed": 2**40})
        assert reply == {
            "ok": False,
            "error": "command 'add': key 'seed' must be an integer from 0 to 2147483647 or null, got 1099511627776",
        }
        print(reply["error"])
        past = client.ask(op="command", command={"kind": "add", "seed": 2**31})
        assert past == {"ok": False, "error": reply["error"].replace("1099511627776", "2147483648")}
        assert client.ask(op="command", command={"kind": "add", "seed": 2**31 - 1}) == {"ok": True}
    finally:
        client.close()
    assert provider.commands == [AddJob(2**31 - 1)]


def test_slots_past_what_the_machine_holds_are_refused_in_one_line(tmp_path: Path) -> None:
    run = session(tmp_path)
    assert refusal(run, SetSlots(LIMIT + 1)) == f"set_slots 17: {AT_MOST}"
    run.submit(SetSlots(LIMIT))  # the machine's own count is taken


def test_jobs_added_past_those_the_machine_runs_at_once_are_refused_in_one_line(tmp_path: Path) -> None:
    run = session(tmp_path)  # its two agents wait for their slots: fourteen more may be added
    for _ in range(LIMIT - 2):
        run.submit(AddJob())
    assert refusal(run, AddJob()) == f"add: 16 jobs already wait for a slot, and {AT_MOST}"
    run.supervisor.tick()
    assert len(run.supervisor.jobs) == LIMIT


def test_advice_adding_jobs_past_what_the_machine_holds_is_refused_in_one_line(tmp_path: Path) -> None:
    run = session(tmp_path)
    line = refusal(run, ApplyAdvice(AdviceSetting.JOBS, "1000000"))
    assert line == f"advice jobs -> 1000000: {AT_MOST}"
    assert run.supervisor.waiting() == 2  # nothing was queued


def test_an_unknown_job_id_is_repeated_cut_to_64_characters(tmp_path: Path) -> None:
    run = session(tmp_path)
    run.submit(StopJob("x" * 500_000))
    run.supervisor.tick()
    (warning,) = run.supervisor.warnings
    print(warning)
    assert warning == "no job '" + "x" * 60 + "..."
    with pytest.raises(ValueError) as caught:
        decode({"kind": "kill", "job_id": ["y" * 500_000]})
    assert str(caught.value) == "command 'kill': key 'job_id' must be a job id string, got ['" + "y" * 59 + "..."


def hello(path: Path | None) -> Raw | None:
    """A client that said hello and was answered, or None when it was refused."""
    assert path is not None
    client = Raw(path)
    try:
        if (client.ask(op="hello") or {}).get("ok"):
            return client
    except OSError:
        pass
    client.close()
    return None


def test_a_connection_past_the_cap_is_told_so_in_one_line_and_closed(
    server: tuple[ControlServer, FakeProvider], tmp_path: Path
) -> None:
    served, _ = server
    assert served.path is not None
    clients = [Raw(served.path) for _ in range(MAX_CONNECTIONS)]
    try:
        for client in clients:
            assert client.ask(op="hello")["ok"]  # type: ignore[index]
        extra = Raw(served.path)
        line = extra.reader.readline()
        print(line.decode(), end="")
        assert json.loads(line) == {
            "ok": False,
            "error": f"too many connections: the run serves at most {MAX_CONNECTIONS} at once; close a viewer",
        }
        assert extra.reader.readline() == b""  # closed
        extra.close()
        with pytest.raises(SourceError) as caught:  # a viewer says why it is not let in
            AttachSource.connect(tmp_path)
        assert str(caught.value) == f"the run in {tmp_path} refused the connection: {json.loads(line)['error']}"
        clients.pop().close()
        clients.append(wait_for(lambda: hello(served.path)))  # once the server has seen that one go
    finally:
        for client in clients:
            client.close()


def test_a_burst_of_viewers_connecting_while_the_accept_thread_is_busy_all_get_in(
    server: tuple[ControlServer, FakeProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    served, _ = server
    assert served.path is not None
    busy, release = threading.Event(), threading.Event()
    real = control.peer_uid

    def slow_peer_uid(conn: socket.socket) -> int:
        busy.set()
        release.wait(10)
        return real(conn)

    monkeypatch.setattr(control, "peer_uid", slow_peer_uid)
    burst: list[socket.socket] = []
    try:
        first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        first.connect(str(served.path))
        burst.append(first)
        assert busy.wait(5)  # the accept thread holds the first; the rest wait in the backlog
        for _ in range(MAX_CONNECTIONS - 4):
            viewer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            burst.append(viewer)
            viewer.settimeout(control.COMMAND_TIMEOUT_S)  # as a viewer connects (`_Link`): EAGAIN on a full backlog
            viewer.connect(str(served.path))
        release.set()
        for viewer in burst:
            viewer.settimeout(5)
            viewer.sendall(b'{"op": "hello"}\n')
            assert json.loads(viewer.makefile("rb").readline())["ok"]
    finally:
        release.set()
        for viewer in burst:
            viewer.close()
