"""The guards around the Ray instance `cockpit run --ray` starts for itself (docs/ray.md, "Who can
reach the Ray cockpit starts"): its token never reaches the disk, token auth cannot be turned off
for it, and an instance that listens beyond the loopback is shut down."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cockpit.core.launch.ray_launcher import _beyond_loopback
from tests.cockpitproc import small_preset

POLL_S = 0.1
# As another user would: try to read the token every POLL_S, and say so on the first success (a shell:
# that user may not reach this interpreter).
OTHER_USER_POLL = 'while :; do if head -c 8 -- "$1" >/dev/null 2>&1; then echo read; exit 0; fi; sleep 0.1; done'
NO_LOOPBACK_LAUNCHER = """
import contextlib
from cockpit.core.launch import ray_launcher
ray_launcher._loopback_only = contextlib.nullcontext  # as an upgraded Ray that binds every interface would
try:
    ray_launcher.RayLauncher(None)
except ray_launcher.ClusterError as exc:
    print(exc)
    raise SystemExit(2)
print("started")
"""


def clean_env(home: Path) -> dict[str, str]:
    """The environment of a user with `home`: no RAY_AUTH_* or RAY_ADDRESS of this one's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    return env


@pytest.fixture
def open_home() -> Iterator[Path]:
    """A home directory as many systems make them, 0755 under a 0755 parent, so that any user can
    look into it (pytest's own tmp_path is under a 0700 directory)."""
    home = Path(tempfile.mkdtemp(prefix="cockpit-home-"))
    home.chmod(0o755)
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def other_user() -> int | None:
    """The uid of `nobody` when this test may run a process as it (as root), else None."""
    if os.getuid() != 0:
        return None
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return None


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.xdist_group("ray_cluster")
def test_a_cockpit_run_ray_start_never_writes_a_token_file(open_home: Path, tmp_path: Path) -> None:
    token = open_home / ".ray" / "auth_token"
    seen: list[tuple[float, int]] = []  # (seconds into the run, mode) of each poll that found the file
    polls = 0
    done = threading.Event()

    def poll() -> None:
        nonlocal polls
        while not done.is_set():
            polls += 1
            with contextlib.suppress(FileNotFoundError):
                seen.append((time.monotonic() - started, token.lstat().st_mode))
            done.wait(POLL_S)

    uid = other_user()
    reader = None
    if uid is not None:
        reader = subprocess.Popen(["/bin/sh", "-c", OTHER_USER_POLL, "poll", str(token)], stdout=subprocess.PIPE,
                                  text=True, user=uid, group=uid, extra_groups=[], cwd="/")  # fmt: skip
    preset = small_preset(tmp_path, checkpoint_every=1024, timesteps=1024)
    started = time.monotonic()
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "cockpit", "run", "--ray", "--headless", "--preset", str(preset),
             "--jobs", "1", "--run-dir", str(tmp_path / "run")],
            capture_output=True, text=True, timeout=300, env=clean_env(open_home),
        )  # fmt: skip
    finally:
        done.set()
        poller.join()
        if reader is not None:
            reader.kill()
    other = reader.communicate()[0] if reader is not None else "(not run: not root)"
    print(f"token poll: {polls} polls every {POLL_S} s over {time.monotonic() - started:.1f} s; "
          f"file seen {len(seen)} times; as nobody: {other.strip() or 'never read'}")  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert polls > 10, polls
    assert not seen, f"{token} appeared: {[(round(t, 1), oct(mode & 0o777)) for t, mode in seen[:5]]}"
    assert not other.startswith("read"), f"another user read {token}: {other}"


@pytest.mark.ray
def test_cockpits_own_ray_refuses_token_auth_turned_off(tmp_path: Path) -> None:
    env = {**clean_env(tmp_path), "RAY_AUTH_MODE": "disabled"}
    preset = small_preset(tmp_path, checkpoint_every=1024, timesteps=1024)  # a short run, were it not refused
    command = ["run", "--ray", "--headless", "--preset", str(preset), "--jobs", "1", "--run-dir", str(tmp_path / "run")]
    result = subprocess.run(
        [sys.executable, "-m", "cockpit", *command], capture_output=True, text=True, timeout=120, env=env
    )
    print(result.stderr, end="")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "RAY_AUTH_MODE=disabled would start cockpit's own Ray without its token" in result.stderr
    assert not (tmp_path / ".ray").exists()


@pytest.mark.parametrize(
    ("addresses", "beyond"),
    [
        (["127.0.0.1:6379", "[::1]:8076", "::ffff:127.0.0.1:4000", "127.0.0.5:1"], []),
        (["127.0.0.1:6379", "0.0.0.0:8076"], ["0.0.0.0:8076"]),
        (["[::]:8076", "192.0.2.2:6379", "192.0.2.2:6379"], ["[::]:8076", "192.0.2.2:6379"]),
        (["localhost:6379"], ["localhost:6379"]),  # a name is not known to be the loopback
    ],
)
def test_beyond_loopback_names_every_address_off_the_loopback(addresses: list[str], beyond: list[str]) -> None:
    assert _beyond_loopback(addresses) == beyond


def routable_ipv4() -> str | None:
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family.name == "AF_INET" and not address.address.startswith("127."):
                return str(address.address)
    return None


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.xdist_group("ray_cluster")
def test_cockpits_own_ray_beyond_the_loopback_is_shut_down(tmp_path: Path) -> None:
    if routable_ipv4() is None:
        pytest.skip("this machine has no address but the loopback, where a Ray would listen anyway")
    result = subprocess.run([sys.executable, "-c", NO_LOOPBACK_LAUNCHER], capture_output=True, text=True,
                            timeout=120, env=clean_env(tmp_path))  # fmt: skip
    print(result.stdout, end="")
    assert result.returncode == 2, result.stdout + result.stderr[-2000:]
    assert result.stdout.count("\n") == 1, result.stdout
    assert "--ray: cockpit's own Ray listened beyond the loopback (" in result.stdout
    assert "so it was shut down" in result.stdout
    gone = [p for p in psutil.process_iter(["name", "environ"]) if p.info["name"] in ("gcs_server", "raylet")
            and (p.info["environ"] or {}).get("HOME") == str(tmp_path)]  # fmt: skip
    _, alive = psutil.wait_procs(gone, timeout=30)
    assert not alive, f"Ray outlived its refusal: {alive}"
