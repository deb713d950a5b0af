"""The Ray instance `cockpit run --ray` starts for itself (`RayLauncher(None)`): who can reach it.

A rented pod often has a public address. Every socket of cockpit's own local Ray must listen on
the loopback only, and its token must never be written where others could read it (docs/ray.md,
"Who can reach the Ray cockpit starts"). The launcher runs in a child process with a home of its
own, where Ray would write a token file, and `RAY_AUTH_MODE` unset, as for a user: Ray 2.60 then
turns token auth on by itself."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import psutil
import pytest

# One xdist worker runs the Ray modules one after another: tests/test_e2e_ray.py's cluster ends with
# `ray stop --force`, which would take this module's instance down with it.
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.xdist_group("ray_cluster")]

LAUNCHER = """
import sys
from cockpit.core.launch.ray_launcher import RayLauncher
with RayLauncher(None):
    print("ready", flush=True)
    sys.stdin.readline()
"""
# The processes of a local Ray that serve on TCP besides the driver (psutil's names): the GCS, the
# raylet (node and object managers), the runtime env agent and an actor's worker (the launcher's
# node sampler). The dashboard agent, without ray[default], serves nothing.
SERVERS = ("gcs_server", "raylet", "ray::RuntimeEnvAgent", "ray::NodeSampler")


def loopback(ip: str) -> bool:
    """Whether `ip` is a loopback address, an IPv4 one mapped into IPv6 included (gRPC's dual-stack
    sockets listen on `::ffff:127.0.0.1`, which only the loopback reaches)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:  # `ss` writes every interface as `*`
        return False
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def listening(root: psutil.Process) -> dict[int, tuple[str, list[str]]]:
    """pid -> (name, the `ip:port`s it listens on over TCP) of `root` and its descendants that listen."""
    found = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            ports = [f"{c.laddr.ip}:{c.laddr.port}" for c in proc.net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN]  # fmt: skip
            if ports:
                found[proc.pid] = (proc.name(), sorted(ports))
        except psutil.NoSuchProcess:
            continue
    return found


def ss_listening(pids: set[int]) -> dict[int, list[str]]:
    """pid -> the `ip:port`s `ss -ltnp` shows it listening on, for the processes in `pids`."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True, timeout=30).stdout
    found: dict[int, list[str]] = {}
    for line in out.splitlines():
        local = line.split()[3]  # State Recv-Q Send-Q Local:Port Peer:Port Process
        ip, port = local.rsplit(":", 1)
        for pid in map(int, re.findall(r"pid=(\d+),", line)):
            if pid in pids:
                found.setdefault(pid, []).append(f"{ip.strip('[]')}:{port}")
    return {pid: sorted(ports) for pid, ports in found.items()}


def test_cockpits_own_ray_listens_on_the_loopback_only_and_writes_no_token_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == "ready\n", proc.communicate(timeout=60)
        driver = psutil.Process(proc.pid)
        deadline = time.monotonic() + 60
        while not (
            set(SERVERS) <= {name for name, _ in listening(driver).values()} and driver.pid in listening(driver)
        ):
            assert time.monotonic() < deadline, f"not every Ray server came up: {listening(driver)}"
            time.sleep(0.2)
        servers = listening(driver)
        public = [port for _, ports in servers.values() for port in ports if not loopback(port.rsplit(":", 1)[0])]
        assert not public, f"listening beyond the loopback: {servers}"
        assert not (home / ".ray").exists(), list((home / ".ray").iterdir())  # the token went in RAY_AUTH_TOKEN
        if shutil.which("ss") is not None:  # the same sockets as `ss`, the tool a user checks with, sees them
            shown = ss_listening(set(servers))
            assert all(loopback(p.rsplit(":", 1)[0]) for ports in shown.values() for p in ports), shown
            assert shown == {pid: ports for pid, (_, ports) in servers.items()}, (shown, servers)
        elif os.environ.get("CI"):
            pytest.fail("ss is missing: .ci/run installs iproute2")
        else:
            warnings.warn("ss (iproute2) is not installed: the sockets were checked with psutil only", stacklevel=1)
        ray = driver.children(recursive=True)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        _, alive = psutil.wait_procs(ray, timeout=10)
        assert not alive, f"a process of cockpit's Ray outlived it: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
