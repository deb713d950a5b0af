"""The image's safe defaults, read from the files the image is built from (Dockerfile, container/,
docs/cloud.md), and the two programs it carries run for real: the HEALTHCHECK's script against a
real control socket, and the lock's checker against the repository's lock and a spoiled copy.

The build itself, with each of these in effect (UID 10001, the HEALTHCHECK on a live fleet, no index
URL in the history, the CUDA variant said), is the `container` test (test_e2e_container.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cockpit.core.feed.control import ControlServer
from tests.test_e2e_container import SCRIPT, cuda_line
from tests.test_feed_control import FakeProvider

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
HEALTHCHECK = ROOT / "container" / "healthcheck.py"
LOCK_SCRIPT = ROOT / "benchmarks" / "container" / "lock.py"
LOCK = ROOT / "container" / "requirements.txt"


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined, comments
    dropped (the Dockerfile reference's parsing rules)."""
    joined, out = "", []
    for line in path.read_text().splitlines():
        if not joined and line.lstrip().startswith("#"):
            continue
        if line.endswith("\\"):
            joined += line[:-1] + " "
            continue
        text = (joined + line).strip()
        joined = ""
        if text and not text.startswith("#"):
            keyword, _, rest = text.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def arg_default(name: str) -> str:
    """The default of the Dockerfile's `ARG name=...`."""
    found = [rest.split("=", 1)[1] for kw, rest in instructions() if kw == "ARG" and rest.startswith(f"{name}=")]
    assert found, f"no ARG {name}= in the Dockerfile"
    return found[0]


def test_the_image_runs_as_uid_10001() -> None:
    users = [rest for kw, rest in instructions() if kw == "USER"]
    assert users == ["cockpit"], users
    assert arg_default("UID") == "10001"
    useradd = [rest for kw, rest in instructions() if kw == "RUN" and "useradd" in rest]
    assert useradd and '--uid "${UID}"' in useradd[0] and " cockpit" in useradd[0]


def test_the_base_from_a_registry_is_pinned_by_digest() -> None:
    base = arg_default("BASE")
    assert re.fullmatch(r"[a-z0-9.-]+\.[a-z]+/[a-z0-9/._-]+:[\w.-]+@sha256:[0-9a-f]{64}", base), base
    assert [rest for kw, rest in instructions() if kw == "FROM"] == ["${BASE}"]


def test_no_index_url_is_a_build_argument_and_pip_reads_it_from_a_secret() -> None:
    args = [rest.split("=", 1)[0] for kw, rest in instructions() if kw == "ARG"]
    assert not [a for a in args if "INDEX_URL" in a], args
    pip_runs = [rest for kw, rest in instructions() if kw == "RUN" and re.search(r"\bpip install\b", rest)]
    fetching = [r for r in pip_runs if "--no-index" not in r]
    assert fetching, pip_runs
    for run in fetching:
        assert "--mount=type=secret,id=pip_index_url" in run, run
        assert "--mount=type=secret,id=pip_extra_index_url" in run, run
        assert ". /opt/cockpit/pip-env" in run, run
    env = (ROOT / "container" / "pip-env.sh").read_text()
    assert "/run/secrets/$s" in env and "pip_index_url pip_extra_index_url" in env


def test_cockpits_dependencies_are_installed_by_hash_from_the_lock() -> None:
    pip_runs = [rest for kw, rest in instructions() if kw == "RUN" and re.search(r"\bpip install\b", rest)]
    locked = [r for r in pip_runs if "--require-hashes" in r]
    assert locked and "-r /tmp/cockpit-requirements.txt" in locked[0], pip_runs
    copies = [rest for kw, rest in instructions() if kw == "COPY"]
    assert "container/requirements.txt /tmp/cockpit-requirements.txt" in copies
    # cockpit itself: nothing fetched beside the lock (the only other pip installs are torch's layer)
    own = [r for r in pip_runs if "/tmp/cockpit-src" in r]
    assert own and "--no-deps" in own[0] and "--no-index" in own[0] and "--no-build-isolation" in own[0]


def test_the_healthcheck_runs_the_hello_script() -> None:
    checks = [rest for kw, rest in instructions() if kw == "HEALTHCHECK"]
    assert len(checks) == 1 and checks[0].endswith('CMD ["python", "/opt/cockpit/healthcheck.py"]'), checks
    assert "container/healthcheck.py /opt/cockpit/healthcheck.py" in [
        rest for kw, rest in instructions() if kw == "COPY"
    ]


def default_run_line(doc: Path = ROOT / "docs" / "cloud.md") -> str:
    """The first `docker run` command of docs/cloud.md's "Running it", continuation lines joined."""
    text = doc.read_text().split("### Running it", 1)[1]
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return block.replace("\\\n", " ")


def test_the_documented_docker_run_shares_no_host_namespace() -> None:
    line = default_run_line()
    assert line.startswith("docker run "), line
    assert "--pid=host" not in line and "--ipc=host" not in line, line
    assert re.search(r"--shm-size[= ]\d+[gm]\b", line), line
    doc = (ROOT / "docs" / "cloud.md").read_text()
    # what each flag would buy and cost, said where the default line is
    for said in ("--pid=host", "--ipc=host", "command line", "signal", "/dev/shm", "MPS"):
        assert said in doc.split("### Running it", 1)[1].split("### From an SSH session", 1)[0], said


@pytest.fixture
def live_run(tmp_path: Path) -> Iterator[Path]:
    """A runs directory holding an older run and a newer one whose control socket is served."""
    runs = tmp_path / "runs"
    (runs / "old").mkdir(parents=True)
    (runs / "old" / "run.toml").write_text("")
    live = runs / "live"
    live.mkdir()
    (live / "run.toml").write_text("")
    served = ControlServer(live, FakeProvider())
    served.start()
    yield runs
    served.stop()


def healthcheck(runs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HEALTHCHECK), str(runs)], capture_output=True, text=True, timeout=60)


def test_the_healthcheck_is_healthy_while_the_newest_run_answers_hello(live_run: Path) -> None:
    done = healthcheck(live_run)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"healthy: {live_run / 'live'} answers"), done.stdout


def test_the_healthcheck_is_unhealthy_when_the_newest_run_is_not_served(live_run: Path) -> None:
    newer = live_run / "ended"
    newer.mkdir()
    (newer / "run.toml").write_text("")
    done = healthcheck(live_run)
    assert done.returncode == 1 and done.stdout.startswith("unhealthy: "), done.stdout
    assert "cockpit.sock" in done.stdout


def test_the_healthcheck_is_unhealthy_with_no_run(tmp_path: Path) -> None:
    done = healthcheck(tmp_path)
    assert done.returncode == 1 and done.stdout == f"unhealthy: no run under {tmp_path}\n"


def lock_check(lock: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LOCK_SCRIPT), "--check", "--lock", str(lock)], capture_output=True, text=True, timeout=60
    )


def test_the_lock_fits_pyproject() -> None:
    done = lock_check(LOCK)
    assert done.returncode == 0, done.stderr
    text = LOCK.read_text()
    assert "\ntorch==" not in text  # torch's layer, by TORCH_INDEX
    assert re.search(r"^stable-baselines3==\S+ \\\n    --hash=sha256:[0-9a-f]{64}", text, re.M)


@pytest.mark.parametrize(
    ("spoil", "said"),
    [
        (
            lambda t: re.sub(r"\nnumpy==\S+ \\\n(    --hash=\S+( \\)?\n)+", "\n", t),
            "numpy (pyproject: numpy>=1.24) is not locked",
        ),
        (lambda t: t.replace("\nnumpy==", "\nnumpy>=", 1), "not `name==version --hash=sha256:...`: numpy>="),
        (
            lambda t: re.sub(r"\nrich==\S+", "\nrich==13.0.0", t, count=1),
            "rich==13.0.0 is outside pyproject's rich>=13.7",
        ),
        (
            lambda t: re.sub(r"# inputs: \w+", "# inputs: 0000000000000000", t),
            "is stale: pyproject's dependencies changed",
        ),
    ],
    ids=["missing", "unpinned", "out-of-range", "stale"],
)
def test_the_lock_check_refuses_a_spoiled_lock(tmp_path: Path, spoil, said: str) -> None:  # type: ignore[no-untyped-def]
    lock = tmp_path / "requirements.txt"
    shutil.copyfile(LOCK, lock)
    lock.write_text(spoil(lock.read_text()))
    done = lock_check(lock)
    assert done.returncode == 1 and said in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1


# podman 4.3.1's `pull` where no registry resolves, as it printed it on the development machine
# (exit 125, podman-pull(1)); `image exists` exits 1 for an image it does not have (podman-image-
# exists(1)); a `run` (the check's probe) starts.
PULL_ERROR = (
    "Error: initializing source docker://nvidia/cuda@sha256:f8ef: pinging container registry registry-1.docker.io: "
    'Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host'
)
NO_REGISTRY_PODMAN = f"""#!/bin/sh
while [ "${{1#--}}" != "$1" ]; do shift 2; done
case "$1 $2" in
  "image exists") exit 1 ;;
  pull*) echo '{PULL_ERROR}' >&2; exit 125 ;;
esac
exit 0
"""


def test_the_check_says_when_the_cuda_variant_cannot_be_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "podman").write_text(NO_REGISTRY_PODMAN)
    (bin_dir / "podman").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("WORK", str(tmp_path / "work"))
    done = subprocess.run(["bash", str(SCRIPT), "--cuda"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    line = cuda_line(done.stdout)
    assert line.startswith("[container] CUDA variant: NOT BUILT: its base docker.io/nvidia/cuda:"), line
    assert line.endswith(f"cannot be had on this machine: {PULL_ERROR}"), line
