"""The run's control socket: a live run serves frames and takes commands; viewers attach to it.

`cockpit run` starts a `ControlServer` on an AF_UNIX socket next to its run (`control_path`), and
any number of viewers (`cockpit attach`, the TUI of the run itself) connect with `AttachSource`.
The protocol is newline-delimited JSON, one response line per request line:

    {"op": "hello"}  ->  {"ok": true, "run_dir": ..., "pid": ..., "version": 1}
    {"op": "frame", "since": t, "phase_since": {job: t}, "trend_since": t | null}
        ->  {"ok": true, "state": {...} | null, "samples": [...], "phases": {job: [[t, phase], ...]}}
    {"op": "command", "command": {...}}  ->  {"ok": true} | {"ok": false, "error": "..."}

A frame answer carries only what is new since the asker's `since` times, and never more than the
last `WINDOW_S` seconds. Its state's trend likewise holds only the points after `trend_since` (the
asker's newest, `trend.increment`; the whole trend without the key, or with null). The socket is
private: mode 0600, and every peer's uid is checked. It serves at most `MAX_CONNECTIONS` at once: one
past them is answered `{"ok": false, "error": "too many connections..."}` and closed. Its listen
backlog is the system's most (`socket.SOMAXCONN`), so a burst of connects waits to be accepted
rather than failing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from cockpit.contract.controls import Control
from cockpit.contract.controls import decode as decode_command
from cockpit.contract.controls import encode as encode_command
from cockpit.contract.rundir import RunDir
from cockpit.core.feed.detail import JobDetailReaders
from cockpit.core.feed.snapshot import RunState
from cockpit.core.feed.source import WINDOW_S, Frame, FrameWindow, JobDetail, SourceError, Transition
from cockpit.core.feed.wire import decode_sample, decode_state, encode_sample, encode_state, encode_trend
from cockpit.core.machine.tempdirs import private_dir
from cockpit.core.telemetry.sampler import Sample
from cockpit.core.telemetry.trend import increment

PROTOCOL_VERSION = 1
# sun_path holds 108 bytes on Linux and 104 on macOS, terminator included; stay clear of both.
MAX_SOCKET_PATH = 100
PRIVATE_TMP = Path("/tmp")  # where the fallback directory goes without XDG_RUNTIME_DIR
MAX_REQUEST_BYTES = 1 << 20
ACCEPT_WAKE_S = 0.25  # how often the accept thread checks for stop()
POLL_HZ = 5.0
POLL_TIMEOUT_S = 5.0  # generous: the run's process may be busy, and a timeout ends the link
COMMAND_TIMEOUT_S = 2.0
# Viewers attached at once: each is a thread here. A run has a few (its TUI, an attach or two, each
# command's short connection); 64 leaves room for scripts without a thread per idle client.
MAX_CONNECTIONS = 64
REFUSAL_TIMEOUT_S = 1.0  # the most a refused client may hold up the accept thread


class ControlError(RuntimeError):
    """The control socket cannot be set up safely (a foreign fallback directory, a non-socket in
    the way)."""


def control_path(run_dir: Path) -> Path:
    """Where the control socket of the run in `run_dir` lives; the server and clients agree on it.

    `<run_dir>/cockpit.sock` when that absolute path fits an AF_UNIX address; otherwise
    `cockpit-<hash of the run dir>.sock` in `$XDG_RUNTIME_DIR`, or in a private `/tmp/cockpit-<uid>`
    (created 0700; ControlError if it exists but belongs to someone else or is not 0700).
    """
    run_dir = run_dir.resolve()
    direct = RunDir(run_dir).socket
    if len(os.fsencode(direct)) <= MAX_SOCKET_PATH:
        return direct
    name = f"cockpit-{hashlib.sha256(os.fsencode(run_dir)).hexdigest()[:16]}.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    # The XDG spec says to ignore a relative value; a huge one would not fit either.
    if os.path.isabs(runtime) and len(os.fsencode(Path(runtime) / name)) <= MAX_SOCKET_PATH:
        return Path(runtime) / name
    return _private_tmp() / name


def _private_tmp() -> Path:
    """`/tmp/cockpit-<uid>`, created 0700 if missing and refused unless it is ours and 0700
    (another user could otherwise plant a socket where our viewers would connect)."""
    try:
        return private_dir(PRIVATE_TMP / f"cockpit-{os.getuid()}")
    except PermissionError as exc:
        raise ControlError(f"{exc} or set XDG_RUNTIME_DIR") from None


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a connected AF_UNIX socket (Linux SO_PEERCRED)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlProvider(Protocol):
    """What the server asks the run for; every method is called from server threads."""

    def latest_state(self) -> RunState | None:
        """The newest RunState, or None before the first tick."""
        ...

    def samples_since(self, t: float) -> list[Sample]:
        """The kept telemetry samples newer than `t`, oldest first."""
        ...

    def phases_since(self, since: Mapping[str, float]) -> dict[str, list[Transition]]:
        """For each job in `since`: its transitions after that time, preceded by the last one at or
        before it (`phases.phases_since`). Unknown jobs are left out."""
        ...

    def submit(self, command: Control) -> None:
        """Hand a command to the supervisor."""
        ...


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"key {key!r} must be a number, got {value!r}")
    return float(value)


class ControlServer:
    """Serves one run's frames and takes its commands on the control socket.

    One thread accepts connections and one daemon thread serves each, so several viewers can be
    attached at once. `stop()` keeps serving for up to `linger_s` until every polling viewer has
    fetched a frame (so each sees the run's final state), then closes every connection and
    removes the socket.
    """

    def __init__(self, run_dir: Path, provider: ControlProvider, *, linger_s: float = 0.0) -> None:
        self.run_dir = run_dir.resolve()
        self.provider = provider
        self.linger_s = linger_s
        self.uid = os.getuid()  # the only peer uid let in
        self.path: Path | None = None
        self._listener: socket.socket | None = None
        self._accepter: threading.Thread | None = None
        self._stopping = threading.Event()
        self._cond = threading.Condition()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._pollers: set[socket.socket] = set()  # connections that have asked for frames
        self._unseen: set[socket.socket] = set()  # pollers yet to fetch a frame after stop() began
        self._closing = False
        self._encoded: tuple[RunState, dict[str, Any]] | None = None

    def start(self) -> None:
        """Bind the socket (replacing a stale one) and start accepting; raises ControlError or
        OSError if it cannot. The caller holds the run's lock, so no other server uses the path."""
        path = control_path(self.run_dir)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISSOCK(info.st_mode):
                raise ControlError(f"{path}: exists and is not a socket; remove it")
            os.unlink(path)  # left by a run that died without cleaning up
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # The umask is process-wide, but the session binds before any of its threads start.
            previous = os.umask(0o177)
            try:
                listener.bind(os.fsencode(path))
            finally:
                os.umask(previous)
            os.chmod(path, 0o600)
            listener.listen(socket.SOMAXCONN)
            listener.settimeout(ACCEPT_WAKE_S)
        except BaseException:
            listener.close()
            raise
        self.path, self._listener = path, listener
        self._accepter = threading.Thread(target=self._accept, name="cockpit-control", daemon=True)
        self._accepter.start()

    def stop(self) -> None:
        """Linger (see the class), then close every connection and unlink the socket. Idempotent."""
        if self._listener is None or self._stopping.is_set():
            return
        with self._cond:
            self._closing = True
            self._unseen = set(self._pollers)
            self._cond.wait_for(lambda: not self._unseen, timeout=self.linger_s)
        self._stopping.set()
        if self.path is not None:
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
                wake.connect(os.fsencode(self.path))  # the accept thread wakes now, not at its next timeout
        if self._accepter is not None:
            self._accepter.join(timeout=2 * ACCEPT_WAKE_S + 1)
        self._listener.close()
        if self.path is not None:
            with contextlib.suppress(OSError):  # gone with its run dir, or that dir is now read-only
                os.unlink(self.path)
        with self._cond:
            conns = dict(self._conns)
        for conn, thread in conns.items():
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked reading it
            thread.join(timeout=1)

    # ----- server threads -----

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._stopping.is_set():
                conn.close()
                return
            try:
                allowed = peer_uid(conn) == self.uid
            except OSError:
                allowed = False
            if not allowed:
                conn.close()
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), name="cockpit-control-conn", daemon=True)
            with self._cond:
                full = len(self._conns) >= MAX_CONNECTIONS
                if not full:
                    self._conns[conn] = thread
            if full:
                self._refuse(conn)
                continue
            conn.settimeout(None)
            thread.start()

    @staticmethod
    def _refuse(conn: socket.socket) -> None:
        """Tell a client past `MAX_CONNECTIONS` so, in one line, and close its connection."""
        error = f"too many connections: the run serves at most {MAX_CONNECTIONS} at once; close a viewer"
        with conn, contextlib.suppress(OSError):
            conn.settimeout(REFUSAL_TIMEOUT_S)
            conn.sendall(json.dumps({"ok": False, "error": error}).encode() + b"\n")

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn, conn.makefile("rb") as reader:
                while True:
                    line = reader.readline(MAX_REQUEST_BYTES + 1)
                    if not line:
                        return
                    if len(line) > MAX_REQUEST_BYTES:
                        conn.sendall(b'{"ok": false, "error": "request too long"}\n')
                        return
                    reply, polled = self._answer(line)
                    conn.sendall(json.dumps(reply).encode() + b"\n")
                    if polled:
                        self._polled(conn)
        except OSError:
            pass  # the viewer went away, or stop() shut the connection
        finally:
            with self._cond:
                self._conns.pop(conn, None)
                self._pollers.discard(conn)
                self._unseen.discard(conn)
                self._cond.notify_all()

    def _polled(self, conn: socket.socket) -> None:
        """Note that `conn` has been sent a frame (after it was sent, so stop() cannot cut it)."""
        with self._cond:
            self._pollers.add(conn)
            if self._closing:
                self._unseen.discard(conn)
                self._cond.notify_all()

    def _answer(self, line: bytes) -> tuple[dict[str, Any], bool]:
        """The reply to one request line, and whether it was a frame."""
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("a request must be a JSON object")
            op = request.get("op")
            if op == "hello":
                reply = {"ok": True, "run_dir": str(self.run_dir), "pid": os.getpid(), "version": PROTOCOL_VERSION}
                return reply, False
            if op == "frame":
                return self._frame(request), True
            if op == "command":
                self.provider.submit(decode_command(request.get("command")))
                return {"ok": True}, False
            raise ValueError(f"unknown op {op!r}")
        except ValueError as exc:  # bad JSON, bad fields, bad command
            return {"ok": False, "error": str(exc)}, False
        except Exception as exc:  # a failing provider must cost one answer, not the connection
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, False

    def _frame(self, request: dict[str, Any]) -> dict[str, Any]:
        since = _number(request.get("since", 0.0), "since")
        asked = request.get("phase_since") or {}
        if not isinstance(asked, dict):
            raise ValueError("key 'phase_since' must be an object")
        held = request.get("trend_since")
        trend_since = None if held is None else _number(held, "trend_since")
        state = self.provider.latest_state()
        if state is None:
            return {"ok": True, "state": None, "samples": [], "phases": {}}
        left = state.now - WINDOW_S
        samples = self.provider.samples_since(max(since, left))
        phase_since = {job.id: max(_number(asked.get(job.id, left), "phase_since"), left) for job in state.jobs}
        phases = self.provider.phases_since(phase_since)
        encoded = self._encode(state)
        if trend_since is not None:  # the state as encoded for all, with this asker's part of the trend
            encoded = {**encoded, "trend": encode_trend(increment(state.trend, trend_since))}
        return {
            "ok": True,
            "state": encoded,
            "samples": [encode_sample(sample) for sample in samples],
            "phases": {job_id: [list(tr) for tr in transitions] for job_id, transitions in phases.items()},
        }

    def _encode(self, state: RunState) -> dict[str, Any]:
        """The encoded state, cached: every viewer asks for the same one until the next tick."""
        cached = self._encoded
        if cached is None or cached[0] is not state:
            cached = self._encoded = (state, encode_state(state))
        return cached[1]


class _Link:
    """One client connection: a request line out, a response line back."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(os.fsencode(path))
        except BaseException:
            self.sock.close()
            raise
        self.reader = self.sock.makefile("rb")

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send `message` and return the reply; OSError or ValueError when there is none (after
        which the link is out of step and must be dropped)."""
        self.sock.settimeout(timeout)
        try:
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            # A server that answered as it accepted and closed (a refusal past its connection cap)
            # may be gone before the request is sent: its answer, already here, says why.
            line = self.reader.readline()
            if not line:
                raise
        else:
            line = self.reader.readline()
        if not line:
            raise ConnectionError("the run closed the connection")
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise ValueError(f"unexpected reply {line[:80]!r}")
        return reply

    def shutdown(self) -> None:
        """Cut the connection: a request blocked on its reply fails at once."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.shutdown()
        self.reader.close()
        self.sock.close()


def _why(exc: BaseException, path: Path) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"no control socket at {path}"
    if isinstance(exc, ConnectionRefusedError):
        return f"nothing listens on {path}"
    if isinstance(exc, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
        return "the run closed the connection"
    if isinstance(exc, TimeoutError):
        return "the run stopped answering"
    return str(exc) or type(exc).__name__


class AttachSource:
    """A `RunSource` on a live run's control socket.

    A daemon thread polls at `hz` (the next poll is armed only after an answer, so polls never
    pile up) and merges each answer into a `FrameWindow`; `frame()` only reads it. When the run
    goes away, polling stops and `frame()` keeps returning the last frame with `link_error` set.
    """

    read_only = False

    def __init__(self, run_dir: Path, path: Path, link: _Link, *, hz: float = POLL_HZ) -> None:
        """Use `connect()`."""
        self.run_dir = run_dir
        self._details = JobDetailReaders(run_dir)
        self.path = path
        self._link = link
        self._period = 1.0 / hz
        self._lock = threading.Lock()
        self._window = FrameWindow()
        self._link_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cockpit-attach", daemon=True)

    @classmethod
    def connect(cls, run_dir: Path, *, hz: float = POLL_HZ) -> AttachSource:
        """Attach to the run in `run_dir` and fetch a first frame; SourceError (one line, naming
        the dir) when no live run answers there."""
        try:
            path = control_path(run_dir)
        except (OSError, ControlError) as exc:
            raise SourceError(f"no live cockpit run in {run_dir}: {exc}") from None
        try:
            link = _Link(path, COMMAND_TIMEOUT_S)
        except OSError as exc:
            raise SourceError(f"no live cockpit run in {run_dir}: {_why(exc, path)}") from None
        try:
            hello = link.request({"op": "hello"}, COMMAND_TIMEOUT_S)
            if not hello.get("ok") and hello.get("error"):
                link.close()
                raise SourceError(f"the run in {run_dir} refused the connection: {hello['error']}")
            if not hello.get("ok") or hello.get("version") != PROTOCOL_VERSION:
                raise ValueError(f"it speaks control protocol {hello.get('version')!r}, not {PROTOCOL_VERSION}")
        except (OSError, ValueError) as exc:
            link.close()
            raise SourceError(f"no live cockpit run in {run_dir}: {_why(exc, path)}") from None
        source = cls(Path(str(hello.get("run_dir") or run_dir)), path, link, hz=hz)
        source._poll()
        source._thread.start()
        return source

    @property
    def link_error(self) -> str | None:
        """Why the link to the run is gone, or None while it is live."""
        return self._link_error

    def frame(self) -> Frame | None:
        """The newest frame (no I/O); None before the run's first tick arrived."""
        with self._lock:
            return self._window.frame

    def submit(self, command: Control) -> None:
        """Send a command on a connection of its own (so a poll in flight never delays it);
        SourceError if the run cannot be reached within `COMMAND_TIMEOUT_S` or refuses it."""
        if self._link_error is not None:
            raise SourceError(self._link_error)
        try:
            link = _Link(self.path, COMMAND_TIMEOUT_S)
            try:
                reply = link.request({"op": "command", "command": encode_command(command)}, COMMAND_TIMEOUT_S)
            finally:
                link.close()
        except (OSError, ValueError) as exc:
            raise SourceError(f"could not reach the run in {self.run_dir}: {_why(exc, self.path)}") from None
        if not reply.get("ok"):
            raise SourceError(f"the run refused the command: {reply.get('error')}")

    def detail(self, job_id: str) -> JobDetail:
        """The job's detail, read from its files (the run dir is on this machine)."""
        return self._details(job_id)

    def close(self) -> None:
        """Stop polling and close the connection; the run goes on."""
        self._stop.set()
        self._link.shutdown()
        if self._thread.is_alive():
            self._thread.join(timeout=POLL_TIMEOUT_S)
        self._link.close()

    # ----- the poll thread -----

    def _run(self) -> None:
        while not self._stop.is_set() and self._link_error is None:
            started = time.monotonic()
            if not self._poll():
                return
            self._stop.wait(max(0.0, self._period - (time.monotonic() - started)))

    def _poll(self) -> bool:
        """One frame request merged into the window; False once the link is gone."""
        with self._lock:
            held = self._window.frame.phases if self._window.frame is not None else {}
            request = {
                "op": "frame",
                "since": self._window.last_sample_t,
                "phase_since": {job_id: self._window.last_phase_t(job_id) for job_id in held},
                "trend_since": self._window.last_trend_t,
            }
        try:
            reply = self._link.request(request, POLL_TIMEOUT_S)
            if not reply.get("ok"):
                raise ValueError(f"the run answered: {reply.get('error')}")
            state = None if reply.get("state") is None else decode_state(reply["state"])
            samples = [decode_sample(sample) for sample in reply.get("samples") or ()]
            phases = {
                str(job_id): [(float(t), None if phase is None else str(phase)) for t, phase in transitions]
                for job_id, transitions in (reply.get("phases") or {}).items()
            }
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            if not self._stop.is_set():  # close() cuts the link on purpose
                self._lose(f"lost the run in {self.run_dir}: {_why(exc, self.path)}")
            return False
        if state is not None:
            with self._lock:
                self._window.add(state, samples, phases)
        return True

    def _lose(self, why: str) -> None:
        with self._lock:
            self._link_error = why
            self._window.stale(why)
        self._link.close()
