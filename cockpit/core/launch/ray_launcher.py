"""`RayLauncher`: the supervisor's jobs on a Ray cluster (`cockpit run|fleet --ray [ADDRESS]`).

cockpit grows no cluster of its own: past one machine its jobs run on Ray. Each job attempt is one
Ray actor (`ray_actors.JobKeeper`) holding the job's thread budget as `num_cpus` and a fraction of a
GPU as `num_gpus` (Ray admits on fractions only; what a job may put in GPU memory stays cockpit's
sizing), placed with Ray's SPREAD strategy. The actor starts the worker in its own session, tied
to the actor's life, and answers the cockpit's calls: the events the worker appended since an
offset and its state come back in increments (`contract.ray_reports.JobReport`), one call in flight
per job, so no method here waits on the network. `terminate` is SIGTERM to the worker; `kill` is
SIGKILL to its process group, then the actor.

Ray's own restarts stay off (`max_restarts=0`): when a node is lost its actors die, `poll` reports
the job killed with the node's loss as its error, and the supervisor's restart policy requeues
it; the next attempt is a new actor on a live node, and the worker resumes from the job's newest
checkpoint in its job dir, on the storage every node shares (`--storage`, see docs/ray.md). With
more than one node and no storage, or a storage a node does not see, the launcher refuses to start
(`ClusterError`, one line).

Telemetry: the job reports carry each worker tree's CPU and memory, and a `ray_actors.NodeSampler`
on every node reads its cores, memory and GPU (`usage()`, which the session's sampler thread
calls once a second). Ray's workers log to files on their nodes, never to the cockpit's terminal
(`log_to_driver=False`). ray is imported here only, when a launcher is made: `import cockpit`
works without it.

The Ray instance cockpit starts for itself (no address) is reachable from this machine only: its
sockets listen on the loopback (`_loopback_only`), which is checked once it is up (`_beyond_loopback`:
an address elsewhere shuts it down, ClusterError), and it runs with token auth on a fresh token that
never touches the disk (`_fresh_token`). A cluster it joins is the user's to protect (docs/ray.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
import math
import os
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from cockpit.contract.events import Event, EventReader
from cockpit.contract.ray_reports import JobReport, NodeSample, Placement
from cockpit.contract.rundir import JobDir
from cockpit.contract.runspec import LOCAL_RAY, RAY_INSTALL_HINT, ConfigError
from cockpit.core.launch.local import WORKER_NICE
from cockpit.core.launch.protocol import EventSource, LaunchRequest, WorkerHandle
from cockpit.core.launch.ray_actors import JobKeeper, NodeSampler
from cockpit.core.telemetry.sampler import JobUsage

NODES_EVERY_S = 2.0  # how often the cluster's membership is asked for (new nodes, dead ones)
SAMPLE_WAIT_S = 0.5  # a node sampler slower than this to answer is left out of that reading
KILL_WAIT_S = 5.0  # how long `kill` waits for the actor to kill the worker's group before ending it
AUTH_MODE = "RAY_AUTH_MODE"  # Ray's switch for token auth: unset, "token" or "disabled" (Ray 2.60)
AUTH_TOKEN = "RAY_AUTH_TOKEN"  # the token itself; Ray reads it before any token file


class RayUnavailable(ConfigError):
    """The ray package is not installed (the message says how to get it)."""


class ClusterError(ConfigError):
    """The cluster cannot run this run as asked (one line, naming the flag)."""


def import_ray() -> Any:
    """The ray module; RayUnavailable when it is not installed."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable(f"--ray needs Ray, which is not installed: {RAY_INSTALL_HINT}") from None
    return ray


@dataclass(eq=False)
class _Attempt:
    """`WorkerHandle.process` of a job attempt on Ray: its actor and what it last reported."""

    actor: Any
    events: _RemoteEvents
    placed: Any  # the start() call's ObjectRef until its Placement has come
    placement: Placement | None = None
    pending: Any = None  # the report() call in flight
    code: int | None = None
    tail: str = ""
    stopped: bool = False
    usage: JobUsage | None = None
    killed: bool = False


class _RemoteEvents(EventReader):
    """One job's events: from its live attempt's actor (increments appended to `_unread`), else
    from the job dir as the cockpit sees it (a resumed run's earlier events; on a cluster, the
    job dir is on the shared storage). `offset` counts the bytes of `events.jsonl` consumed."""

    def __init__(self, launcher: RayLauncher, path: Path) -> None:
        super().__init__(path)
        self._launcher = launcher
        self.attempt: _Attempt | None = None
        self._unread = b""

    @property
    def fetched(self) -> int:
        """Where the next increment starts: the bytes consumed and those read but not yet consumed."""
        return self.offset + len(self._unread)

    def receive(self, data: bytes) -> None:
        """An increment from the actor, to be consumed by the next `read_new`."""
        self._unread += data

    def restart_at_offset(self) -> None:
        """Drop what was fetched but not consumed (a torn line of a dead attempt, a new offset)."""
        self._unread = b""

    def read_new(self) -> list[Event]:
        """The complete events since the previous call (see the class docstring)."""
        self.more = False  # an actor's increments are all consumed here; the file's read says its own
        if self.attempt is None:
            return super().read_new()
        self._launcher.refresh(self.attempt)
        before = self.offset
        events = self.consume(self._unread)
        self._unread = self._unread[self.offset - before :]
        if self.attempt.code is not None:
            # The attempt is over (its actor is gone): what no report carried, such as events a
            # worker wrote after its node was lost, is read from the job's file where this machine
            # sees it (the shared storage), from the last byte consumed.
            self._unread = b""
            events += super().read_new()
        return events


class RayLauncher:
    """Jobs as Ray actors (see the module docstring): joins the cluster at `address`, or starts a
    local Ray instance sized to this machine without one (and shuts it down on `close()`).

    `storage` is the directory every node mounts at the same path, where the run's job dirs live;
    required with more than one node. `slots` sizes each job's GPU fraction. `resources_for(job_id,
    attempt)` adds custom Ray resources to an attempt's actor (tests place a job on a chosen node
    with it). Raises RayUnavailable without the ray package, ClusterError when the cluster cannot
    run the run (one line). The owner calls `close()` (or uses it as a context manager)."""

    def __init__(
        self,
        address: str | None = None,
        *,
        storage: Path | None = None,
        slots: int = 1,
        nice: int = WORKER_NICE,
        resources_for: Callable[[str, int], Mapping[str, float]] | None = None,
    ) -> None:
        ray = self._ray = import_ray()
        self.address = address
        self.nice = nice
        self.resources_for = resources_for
        self.workdir = os.getcwd()
        self._events: dict[str, _RemoteEvents] = {}
        self._attempts: dict[str, int] = {}
        self._samplers: dict[str, Any] = {}  # node id -> its NodeSampler actor
        self._node_samples: dict[str, NodeSample] = {}  # node id -> its latest sample
        self._dead: set[str] = set()  # ids of the nodes Ray reported dead
        self._sampling: dict[Any, str] = {}  # each node sampler's call in flight -> its node
        self._names: dict[str, str] = {}  # node id -> the name the views show
        self._node_cpus = 0.0  # the most CPUs a node has had: no actor may ask for more
        self._nodes_at = 0.0
        self._lock = threading.Lock()  # the sampler thread's usage() beside the supervisor's calls
        self._actor_cls = ray.remote(JobKeeper)
        self._sampler_cls = ray.remote(NodeSampler)
        self._env_before: dict[str, str | None] | None = None  # RAY_AUTH_* as they were, while ours are set
        if address is None:
            self._env_before = _fresh_token()
        try:
            # "local", not None: None joins RAY_ADDRESS or a cluster `ray start` left on this machine,
            # and the instance cockpit starts for itself must be its own (to bind it to the loopback).
            with _loopback_only() if address is None else contextlib.nullcontext():
                ray.init(
                    address=address or "local",
                    log_to_driver=False,
                    include_dashboard=False,
                    logging_level=logging.ERROR,
                    configure_logging=True,
                )
        except (ConnectionError, RuntimeError, ValueError) as exc:  # no cluster there, or not one we may join
            self._restore_env()
            raise ClusterError(f"--ray {address or LOCAL_RAY}: cannot start or join Ray: {_first_line(exc)}") from exc
        try:
            if address is None:
                public = _beyond_loopback(_cluster_addresses(ray))
                if public:
                    raise ClusterError(
                        f"--ray: cockpit's own Ray listened beyond the loopback ({', '.join(public[:4])}), "
                        "so it was shut down; see docs/ray.md, 'Who can reach the Ray cockpit starts'"
                    )
            nodes = self._alive_nodes()
            if len(nodes) > 1 and storage is None:
                raise ClusterError(
                    f"--ray {address}: the cluster has {len(nodes)} nodes; give --storage DIR, a directory "
                    "every node mounts at the same path, for the run's job dirs and checkpoints"
                )
            gpus = float(ray.cluster_resources().get("GPU", 0.0))
            # Each job gets an equal share of a GPU, so that `slots` jobs fit on the cluster's GPUs.
            self.gpus_per_job = 1.0 / math.ceil(slots / gpus) if gpus >= 1 else 0.0
            self._start_samplers(nodes)
            if storage is not None:
                self._check_storage(storage)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> RayLauncher:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ----- the cluster -----

    def _alive_nodes(self) -> dict[str, str]:
        """Node id -> name (`NodeSample.node`) of the nodes Ray reports alive; the others are
        remembered as dead."""
        nodes = self._ray.nodes()
        ips = [node["NodeManagerAddress"] for node in nodes]
        alive = {}
        for node in nodes:
            node_id, ip = node["NodeID"], node["NodeManagerAddress"]
            self._names[node_id] = ip if ips.count(ip) == 1 else f"{ip}#{node_id[:6]}"
            if node.get("Alive"):
                alive[node_id] = self._names[node_id]
                self._node_cpus = max(self._node_cpus, float(node.get("Resources", {}).get("CPU", 0.0)))
            else:
                self._dead.add(node_id)
        return alive

    def _start_samplers(self, nodes: Mapping[str, str]) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        for node_id in nodes.keys() - self._samplers.keys():
            strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
            self._samplers[node_id] = self._sampler_cls.options(
                num_cpus=0, max_restarts=0, scheduling_strategy=strategy
            ).remote(nodes[node_id])
        for node_id in self._samplers.keys() - nodes.keys():
            with contextlib.suppress(Exception):
                self._ray.kill(self._samplers.pop(node_id))
            self._node_samples.pop(node_id, None)

    def _check_storage(self, storage: Path) -> None:
        """Every node sees a file made in `storage` (the job dirs and checkpoints go there)."""
        storage = storage.resolve()
        probe = storage / f".cockpit-probe-{uuid.uuid4().hex}"
        try:
            probe.touch()
        except OSError as exc:
            raise ClusterError(f"--storage {storage}: cannot write there ({exc.strerror or exc})") from exc
        try:
            answers = {node: sampler.sees.remote(str(probe)) for node, sampler in self._samplers.items()}
            blind = [node for node, ref in answers.items() if not self._ray.get(ref, timeout=60)]
        except self._ray.exceptions.RayError as exc:  # a node that does not answer cannot be trusted with it
            raise ClusterError(
                f"--storage {storage}: a node did not answer whether it sees it ({_first_line(exc)})"
            ) from exc
        finally:
            probe.unlink(missing_ok=True)
        if blind:
            raise ClusterError(
                f"--storage {storage}: {len(blind)} of {len(answers)} nodes do not see it; "
                "it must be one directory every node mounts at the same path"
            )

    # ----- Launcher -----

    def events(self, job_id: str, job_dir: Path) -> EventSource:
        """The job's events (`_RemoteEvents`), brought back by its live attempt's actor."""
        source = self._events[job_id] = _RemoteEvents(self, JobDir(job_dir.resolve()).events)
        return source

    def launch(self, request: LaunchRequest) -> WorkerHandle:
        """Create the attempt's actor and ask it to start the worker; returns at once, with pid 0
        until the actor has been placed and started it (then the worker's pid on its node)."""
        args = dataclasses.replace(request.args, job_dir=request.job_dir.resolve())
        attempt_no = self._attempts[request.job_id] = self._attempts.get(request.job_id, 0) + 1
        extra = dict(self.resources_for(request.job_id, attempt_no)) if self.resources_for else {}
        actor = self._actor_cls.options(
            # The thread budget comes from this machine's cores; a job asking more CPUs than any
            # node has would wait forever, so it asks at most a whole node.
            num_cpus=min(args.threads or 1, self._node_cpus or float("inf")),
            num_gpus=self.gpus_per_job,
            resources=extra or None,
            max_restarts=0,
            max_task_retries=0,
            scheduling_strategy="SPREAD",
        ).remote()
        source = self._events.get(request.job_id)
        if source is None:
            source = self._events[request.job_id] = _RemoteEvents(self, JobDir(args.job_dir).events)
        source.restart_at_offset()
        attempt = _Attempt(actor, source, actor.start.remote(args, self.workdir, self.nice))
        source.attempt = attempt
        return WorkerHandle(request.job_id, 0, request.job_dir, attempt)

    def refresh(self, attempt: _Attempt) -> None:
        """Take the attempt's answers that have come (its placement, its latest report) and ask for
        the next report; never waits. An actor that died (its node lost, or killed) ends the
        attempt with code -SIGKILL."""
        if attempt.code is not None:
            return
        ray = self._ray
        try:
            if attempt.placement is None:
                if not _ready(ray, attempt.placed):
                    return
                attempt.placement = ray.get(attempt.placed)
            if attempt.pending is not None:
                if not _ready(ray, attempt.pending):
                    return
                report: JobReport = ray.get(attempt.pending)
                attempt.pending = None
                self._take(attempt, report)
                if attempt.code is not None:
                    return
            if attempt.placement.node_id in self._dead:
                self._lost(attempt, "its node was reported dead")
                return
            attempt.pending = attempt.actor.report.remote(attempt.events.fetched)
        except ray.exceptions.ActorUnavailableError:
            attempt.pending = None  # unreachable for now: asked again at the next call
        except ray.exceptions.RayActorError as exc:
            self._lost(attempt, _first_line(exc))
        except ray.exceptions.RayError as exc:  # the actor's own call failed (a job dir it cannot make)
            # A RayTaskError's own first line is Ray's colored header naming the task; what went
            # wrong on the node is its `cause`.
            cause = getattr(exc, "cause", None) or exc
            attempt.code, attempt.tail = 1, f"ray: the job's actor failed: {type(cause).__name__}: {_first_line(cause)}"
            self._end(attempt)

    def _take(self, attempt: _Attempt, report: JobReport) -> None:
        attempt.events.receive(report.events)
        attempt.stopped = report.stopped
        if report.cpu_percent is not None and report.rss_bytes is not None and attempt.placement is not None:
            attempt.usage = JobUsage(report.cpu_percent, report.rss_bytes, pid=attempt.placement.pid)
        if report.code is not None:
            attempt.code, attempt.tail = report.code, report.stderr_tail
            self._end(attempt)

    def _lost(self, attempt: _Attempt, why: str) -> None:
        placement = attempt.placement
        node = self._names.get(placement.node_id, placement.node_ip) if placement is not None else "none yet"
        attempt.code = -9
        attempt.tail = "" if attempt.killed else f"ray: the job's actor is gone with its node {node} ({why})"
        attempt.events.restart_at_offset()  # a torn line of the dead worker is read again from the file
        self._end(attempt)

    def _end(self, attempt: _Attempt) -> None:
        """Release the attempt's actor (and its CPUs and GPU share) once its worker has exited."""
        attempt.pending = None
        attempt.usage = None
        with contextlib.suppress(Exception):
            self._ray.kill(attempt.actor, no_restart=True)

    def poll(self, handle: WorkerHandle) -> int | None:
        """The worker's exit code once a report has said it exited (or -SIGKILL once its actor
        is gone), else None. Once the worker is placed, the handle's `pid` is its pid on its node
        and `node` that node's IP."""
        attempt = _attempt(handle)
        self.refresh(attempt)
        if attempt.placement is not None:
            handle.pid = attempt.placement.pid
            handle.node = self._names.get(attempt.placement.node_id, attempt.placement.node_ip)
        return attempt.code

    def terminate(self, handle: WorkerHandle) -> None:
        """SIGTERM to the worker (queued behind the actor's start, if it has not started yet)."""
        attempt = _attempt(handle)
        if attempt.code is None:
            with contextlib.suppress(Exception):
                attempt.actor.terminate.remote()

    def kill(self, handle: WorkerHandle) -> None:
        """SIGKILL to the worker's process group, by the actor, then the actor itself."""
        attempt = _attempt(handle)
        if attempt.code is not None:
            return
        attempt.killed = True
        if attempt.placement is not None or _ready(self._ray, attempt.placed):
            with contextlib.suppress(Exception):
                self._ray.get(attempt.actor.kill.remote(), timeout=KILL_WAIT_S)
        with contextlib.suppress(Exception):
            self._ray.kill(attempt.actor, no_restart=True)

    def stderr_tail(self, handle: WorkerHandle, lines: int = 5) -> str:
        """The last lines of the worker's stderr, as its final report brought them (or why its
        actor is gone)."""
        return "\n".join(_attempt(handle).tail.splitlines()[-lines:])

    def stopped(self, handle: WorkerHandle) -> bool:
        """The worker was in state T at its latest report."""
        attempt = _attempt(handle)
        return attempt.code is None and attempt.stopped

    # ----- telemetry (the sampler's thread) -----

    def usage(self) -> tuple[dict[str, JobUsage], tuple[NodeSample, ...]]:
        """Each live job's worker tree (by job id) as last reported, and every node's latest
        sample. Called from the sampler's thread, once a second: it also notices nodes that
        joined (a sampler is started there) or died (their jobs are lost at their next poll)."""
        ray = self._ray
        with self._lock:
            now = time.monotonic()
            if now - self._nodes_at >= NODES_EVERY_S:
                self._nodes_at = now
                with contextlib.suppress(Exception):
                    self._start_samplers(self._alive_nodes())
            samplers = dict(self._samplers)
        # One call in flight per node: a sampler that hangs (NVML stuck) is not asked again and again.
        for node, sampler in samplers.items():
            if node not in self._sampling.values():
                with contextlib.suppress(Exception):
                    self._sampling[sampler.sample.remote()] = node
        with contextlib.suppress(Exception):
            ready, _ = ray.wait(list(self._sampling), num_returns=len(self._sampling), timeout=SAMPLE_WAIT_S)
            for ref in ready:
                node = self._sampling.pop(ref)
                with contextlib.suppress(Exception):
                    self._node_samples[node] = ray.get(ref)
        jobs = {
            job_id: source.attempt.usage
            for job_id, source in list(self._events.items())
            if source.attempt is not None and source.attempt.usage is not None
        }
        return jobs, tuple(sorted(self._node_samples.values(), key=lambda sample: sample.node))

    def close(self) -> None:
        """Kill every attempt still running, end the node samplers, and leave the cluster (shutting
        down the local instance, when this launcher started one)."""
        ray = self._ray
        for source in self._events.values():
            if source.attempt is not None and source.attempt.code is None:
                handle = WorkerHandle("", 0, Path(), source.attempt)
                self.kill(handle)
        for sampler in self._samplers.values():
            with contextlib.suppress(Exception):
                ray.kill(sampler)
        self._samplers.clear()
        ray.shutdown()
        self._restore_env()

    def _restore_env(self) -> None:
        """Put RAY_AUTH_* back as they were before `_fresh_token` (once the local Ray is gone)."""
        if self._env_before is None:
            return
        for name, value in self._env_before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._env_before = None
        _reload_token()


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """While in the block, a Ray instance that `ray.init` starts takes 127.0.0.1 (or ::1) for its node
    address, so that every socket it opens listens on the loopback only; restored on leaving.

    Ray 2.60 has no public option for it: `ray.init(_node_ip_address="127.0.0.1")` is turned back into
    the machine's routable address (`ray/_private/worker.py`, `services.resolve_ip_for_localhost`). The
    one switch is `ray_constants.ENABLE_RAY_CLUSTER` (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`, read once at
    import): off, `services.get_node_ip_address` answers the loopback address, and every process is
    given it as `--node-ip-address`. The C++ gRPC servers (GCS, raylet node and object managers, each
    worker's and the driver's core worker) then listen on 127.0.0.1 rather than on every interface, and
    the runtime env agent binds that address itself (`ray/_private/runtime_env/agent/main.py`)."""
    from ray._private import ray_constants

    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before


def _fresh_token() -> dict[str, str | None]:
    """Give the Ray instance about to start here token auth, on a new token in `RAY_AUTH_TOKEN`;
    returns RAY_AUTH_MODE and RAY_AUTH_TOKEN as they were, for `close()` to put back. ClusterError
    (one line) when `RAY_AUTH_MODE` asks for anything but token auth.

    Ray 2.60 turns token auth on by itself for a local `ray.init()` with `RAY_AUTH_MODE` unset and,
    with no token found, writes a new one to `~/.ray/auth_token` with a plain `open(path, "w")`
    (`generate_and_save_token` in `ray/_private/authentication/authentication_token_setup.py`): the
    umask's mode, 0644 by default, inside a 0755 `~/.ray`, readable by every local user for the
    seconds Ray takes to start, and left there for later instances to reuse. Ray looks for the token
    in `RAY_AUTH_TOKEN` before any file (`AuthenticationTokenLoader`), so with one there it writes
    none; the GCS, the raylet and every worker inherit it with the environment, which only this user
    (and root) can read. The token is new for each instance, so none outlives it."""
    mode = os.environ.get(AUTH_MODE)
    if mode is not None and mode.lower() != "token":
        raise ClusterError(
            f"--ray: {AUTH_MODE}={mode} would start cockpit's own Ray without its token; "
            f"unset {AUTH_MODE} or set it to token (cockpit gives its Ray a fresh token)"
        )
    before = {name: os.environ.get(name) for name in (AUTH_MODE, AUTH_TOKEN)}
    os.environ[AUTH_MODE] = "token"
    os.environ[AUTH_TOKEN] = secrets.token_hex(32)  # 256 bits, as Ray's own generator makes
    _reload_token()
    return before


def _reload_token() -> None:
    """Make this process's Ray read `RAY_AUTH_MODE` and its token again: its config and its C++
    token loader keep what they first read (Ray's own `_enable_token_auth` does the same)."""
    # ray/_raylet.pyi leaves both out; they are in the compiled module (`ray/includes/*.pxi`).
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _cluster_addresses(ray: Any) -> list[str]:
    """Every `host:port` the local Ray instance serves on, as Ray reports them (the GCS, each node's
    node and object managers) and as the kernel does (the TCP sockets this process and its children,
    the Ray processes it started, listen on; `psutil.net_connections`)."""
    found = [str(ray.get_runtime_context().gcs_address)]
    for node in ray.nodes():
        host = node.get("NodeManagerAddress", "")
        found += [f"{host}:{node[key]}" for key in ("NodeManagerPort", "ObjectManagerPort") if key in node]
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            found += [f"{c.laddr.ip}:{c.laddr.port}" for c in proc.net_connections(kind="inet")
                      if c.status == psutil.CONN_LISTEN]  # fmt: skip
    return found


def _beyond_loopback(addresses: list[str]) -> list[str]:
    """Those of `addresses` (`host:port`, `[v6]:port` too) whose host is not a loopback address: a
    wildcard (`0.0.0.0`, `::`), a routable address, a name. An IPv4 loopback mapped into IPv6
    (`::ffff:127.0.0.1`, gRPC's dual-stack sockets) is the loopback."""
    beyond = []
    for address in addresses:
        host = address.rsplit(":", 1)[0].strip("[]")
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            beyond.append(address)
            continue
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        if not (ip.is_loopback or (mapped is not None and mapped.is_loopback)):
            beyond.append(address)
    return list(dict.fromkeys(beyond))


def _ready(ray: Any, ref: Any) -> bool:
    ready, _ = ray.wait([ref], timeout=0)
    return bool(ready)


def _attempt(handle: WorkerHandle) -> _Attempt:
    assert isinstance(handle.process, _Attempt), "not a RayLauncher's handle"
    return handle.process


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
