"""A real Ray cluster on this machine, for tests/test_e2e_ray.py and benchmarks/ray_launcher.py: a
head and a second node, each started with `ray start` and its own resources, as docs/ray.md starts
them on real machines.

The second node runs `ray start --block` in a session of its own, so that its loss is one signal:
SIGKILL to that session kills its raylet and agents, and its actors (in sessions of their own)
exit with their raylet. The head's failure detector is shortened (`HEALTH_ENV`) so that the loss
is noticed in about a second and a half rather than Ray's default of many seconds.

Token authentication is off for this private cluster, for the `ray start` processes and for
drivers in this process alike (`RAY_AUTH_MODE`): left unset, whether each turns it on depends on
whether a ~/.ray/auth_token exists (cockpit's own local Ray writes none: it gets its token through
`RAY_AUTH_TOKEN`, but another tool's Ray may have left one).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from cockpit.contract.events import StartedEvent, of_kind, read_events
from cockpit.contract.files import write_atomic
from cockpit.contract.presets import load, to_toml
from cockpit.contract.rundir import RunDir
from cockpit.contract.runspec import RunSpec, build_spec, on_cluster
from cockpit.contract.settings import RunSettings
from cockpit.contract.states import JobState
from cockpit.core.feed.snapshot import RunState
from cockpit.core.launch.ray_launcher import RayLauncher
from cockpit.core.session.startup import start_session
from cockpit.core.telemetry.sampler import Sampler

RAY = str(Path(sys.executable).with_name("ray"))
AUTH_ENV = {"RAY_AUTH_MODE": "disabled"}
HEALTH_ENV = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_initial_delay_ms": "0",
}
NODE2 = "node2"  # the second node's custom resource: a job asking for it runs there


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ray_processes() -> list[psutil.Process]:
    """Every Ray process on this machine (raylets, GCS, agents, Ray workers and actors)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        words = " ".join(proc.info["cmdline"] or [])
        if proc.info["name"] in ("raylet", "gcs_server") or "ray::" in words or "/ray/" in words:
            found.append(proc)
    return found


def keepers() -> list[psutil.Process]:
    """The job actors (`ray::JobKeeper`) alive on this machine."""
    return [p for p in ray_processes() if "JobKeeper" in " ".join(p.info["cmdline"] or [])]


@dataclass
class LocalCluster:
    """A head with `head_cpus` CPUs, and a second node with one CPU and the `node2` resource."""

    address: str = ""
    env: dict[str, str] = field(default_factory=dict)
    node2: subprocess.Popen[bytes] | None = None
    saved_env: dict[str, str | None] = field(default_factory=dict)

    def start(self, head_cpus: int = 1) -> None:
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        self.saved_env = {name: os.environ.get(name) for name in AUTH_ENV}
        os.environ.update(AUTH_ENV)  # this process's drivers (a RayLauncher, the cockpits it starts)
        self.env = {**os.environ, **HEALTH_ENV, "RAY_USAGE_STATS_ENABLED": "0"}
        subprocess.run(
            [RAY, "start", "--head", f"--num-cpus={head_cpus}", "--num-gpus=0", f"--port={port}",
             "--include-dashboard=false", "--disable-usage-stats"],
            check=True, env=self.env, capture_output=True, timeout=120,
        )  # fmt: skip
        self.start_node2()

    def start_node2(self) -> None:
        """`ray start` a second node, and wait until the head counts it."""
        self.node2 = subprocess.Popen(
            [RAY, "start", f"--address={self.address}", "--num-cpus=1", "--num-gpus=0",
             f"--resources={json.dumps({NODE2: 1})}", "--block", "--disable-usage-stats"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while self.alive_nodes() < 2:
            if time.monotonic() > deadline:
                raise AssertionError("the second Ray node did not join")
            time.sleep(0.3)

    def alive_nodes(self) -> int:
        out = subprocess.run(
            [sys.executable, "-c", NODES_SCRIPT, self.address], capture_output=True, text=True, env=self.env, timeout=60
        )
        return int(out.stdout.strip() or 0)

    def node2_processes(self) -> list[psutil.Process]:
        """The second node's `ray start`, raylet and agents, and what they started."""
        if self.node2 is None:
            return []
        try:
            root = psutil.Process(self.node2.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def lose_node2(self) -> list[psutil.Process]:
        """Kill the second node's processes at once (its machine gone); returns what was killed."""
        assert self.node2 is not None
        procs = self.node2_processes()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.node2.pid, signal.SIGKILL)
        self.node2.wait()
        return procs

    def stop(self) -> None:
        if self.node2 is not None and self.node2.poll() is None:
            self.lose_node2()
        subprocess.run([RAY, "stop", "--force"], env=self.env, capture_output=True, timeout=120)
        psutil.wait_procs(ray_processes(), timeout=10)
        for name, value in self.saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Quiet:
    """A view that shows nothing (the session's state is read from its result and run.toml)."""

    def update(self, state: RunState) -> None:
        pass

    def close(self, state: RunState) -> None:
        pass


@dataclass
class NodeLoss:
    """A one-job run whose first attempt ran on the second node, lost mid-run."""

    spec: RunSpec
    state: RunState
    lost_at: float | None  # Unix time of the loss (None: the job never got that far)
    failed_at: float | None  # Unix time of the first tick that showed the job failed after the loss
    node2: list[psutil.Process]  # the second node's processes, as they were before the loss


LOSS_STEPS = 30_000
# How often the first attempt's checkpoint is looked for: a tiny part of its training to its target.
FREEZE_POLL_S = 0.02


def loss_preset(directory: Path, timesteps: int = LOSS_STEPS) -> Path:
    """The cartpole preset in small rollouts, checkpointing every 1,024 steps, to `timesteps`: a
    checkpoint within a second of training, and seconds more to lose a node in."""
    preset = dataclasses.replace(load("cartpole"), name="loss", n_envs=8, n_steps=32, batch_size=256, n_epochs=4,
                                 checkpoint_every=1024, timesteps=timesteps)  # fmt: skip
    path = directory / "loss.toml"
    write_atomic(path, to_toml(preset))
    return path


def checkpointed(directory: Path) -> bool:
    """A complete checkpoint (`step-<step>-<ns>/`, renamed into place once written) is in `directory`."""
    with contextlib.suppress(OSError):
        return any(p.name.startswith("step-") and p.name.count("-") == 2 for p in directory.iterdir())
    return False


def run_through_node_loss(cluster: LocalCluster, storage: Path, preset: Path) -> NodeLoss:
    """Run one job of `preset` on the cluster through `RayLauncher`, its first attempt on the
    second node (its `node2` resource), and kill that node once the job has checkpointed; the run
    goes on to its end under the restart policy.

    The first attempt's worker is stopped (SIGSTOP) as soon as its first checkpoint is in the job's
    directory (this machine sees the storage), by a thread of its own: it cannot then reach its
    target before its node is lost, however late the cockpit sees its events (they come back
    through the node's actor, seconds late on a busy machine) and however slow its ticks. The
    node is lost once the cockpit has seen the job train, and the stopped worker is killed once the
    cockpit has taken the loss in (its machine is gone: a stopped process would never act on its
    death signal)."""
    spec = build_spec(
        RunSettings(
            jobs=1,
            agents=1,
            preset=str(preset),
            timesteps=None,
            run_dir=None,
            max_restarts=2,
            name="lost",
        ),
        command_line=("cockpit", "run", "--ray"),
    )
    spec = on_cluster(spec, cluster.address, storage, run_dir_given=False)
    first = {NODE2: 1.0}
    node2 = cluster.node2_processes()
    job_dir = RunDir(spec.run_dir).job("000")
    lost: list[float] = []
    failed: list[float] = []
    frozen: list[psutil.Process] = []  # psutil checks its identity: a pid reused since is not signalled
    done = threading.Event()

    def freeze() -> None:
        while not frozen and not done.wait(FREEZE_POLL_S):
            pid = _first_pid(job_dir.events) if checkpointed(job_dir.checkpoints) else None
            if pid is not None:
                with contextlib.suppress(psutil.NoSuchProcess):  # gone already: the node is never lost
                    worker = psutil.Process(pid)
                    worker.suspend()  # SIGSTOP
                    frozen.append(worker)

    def on_tick(state: RunState) -> None:
        (job,) = state.jobs
        if not lost and frozen and job.state in (JobState.RUNNING, JobState.STALLED):
            cluster.lose_node2()
            lost.append(time.time())
        elif lost and not failed and job.state is JobState.BACKOFF:
            failed.append(time.time())
            # Only now: killed before the cockpit saw its node go, its exit would be the cause it sees.
            with contextlib.suppress(psutil.NoSuchProcess):
                frozen[0].kill()

    watcher = threading.Thread(target=freeze, name="freeze-first-attempt", daemon=True)
    watcher.start()
    try:
        with RayLauncher(
            cluster.address, storage=storage, resources_for=lambda _job, n: first if n == 1 else {}
        ) as ray:
            session = start_session(spec, Sampler(gpu=None, gpu_status="none"), launcher=ray, serve=False)
            state = session.run(Quiet(), on_tick=on_tick, handle_signals=False)
    finally:
        done.set()
        watcher.join()
        for worker in frozen:  # never left stopped, whatever happened to the run
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
    return NodeLoss(spec, state, lost[0] if lost else None, failed[0] if failed else None, node2)


def _first_pid(events: Path) -> int | None:
    """The pid the job's first `started` event names (its first attempt's worker), None before it."""
    started = of_kind(read_events(events), StartedEvent) if events.exists() else []
    return started[0].pid if started else None


NODES_SCRIPT = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
print(sum(1 for n in ray.nodes() if n["Alive"]))
"""
