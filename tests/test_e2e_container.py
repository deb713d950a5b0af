"""The image a rented GPU runs (Dockerfile, docs/cloud.md), built and run for real with podman:
benchmarks/container/check.sh builds a Debian base and the image with the CPU torch, runs a 2-job
CartPole run in it to done, and a fleet it SIGKILLs mid-tier and starts again, which must resume,
finish with every model verified and run --on-done once. On the way it holds the image to its safe
defaults: UID 10001, a HEALTHCHECK that is healthy on the live fleet, no index URL in its history;
and it builds the CUDA variant where its base can be had, or says it could not, which this test
repeats as a warning in its report.

Marked `container`: the default pytest run deselects it (pyproject's addopts); `.ci/run` installs
podman and runs it as its own step (`pytest -m container`). Skipped, with podman's own words and
even under CI=1, only where podman cannot start any container on this machine's kernel; a broken
option of the check fails it (`probe_verdict`, tested with a scripted podman in
test_benchmarks_container_probe.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.cockpitproc import unavailable

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "container" / "check.sh"

pytestmark = [pytest.mark.slow, pytest.mark.container]


def probe_verdict(script: Path = SCRIPT, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """What the container check's probe (`check.sh --probe`) says of this machine: ("run", "") where
    podman starts the check's containers; ("skip", podman's own error) only where podman cannot start
    any container here, CI or not; ("fail", the probe's output) for anything else: the check's own
    options at fault (exit 3), or a probe that exits otherwise (a cleanup trap's 125 once passed in
    CI as a skip)."""
    probe = subprocess.run(["bash", str(script), "--probe"], capture_output=True, text=True, timeout=120, env=env)
    if probe.returncode == 0:
        return "run", ""
    lines = probe.stderr.strip().splitlines()
    if probe.returncode == 1 and lines and lines[-1].startswith("podman cannot run a container here"):
        return "skip", lines[-1]
    return "fail", f"the probe exited {probe.returncode}: {probe.stdout}{probe.stderr}"


def test_the_image_builds_runs_a_run_and_resumes_a_killed_fleet() -> None:
    if shutil.which("podman") is None or shutil.which("mmdebstrap") is None:
        unavailable(
            "podman or mmdebstrap is not installed, and .ci/run installs them",
            "podman or mmdebstrap is not installed: apt-get install podman runc mmdebstrap uidmap",
        )
    verdict, said = probe_verdict()
    if verdict == "skip":  # podman's own words: "podman cannot run a container here (runtime runc): Error: ..."
        pytest.skip(said)
    assert verdict == "run", said
    done = subprocess.run(
        ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=3000,  # a loaded 2-core machine builds the image in minutes; the runs take 2-3
        env={**os.environ, "PYTHON": sys.executable},
    )
    output = done.stdout + done.stderr
    print(output)
    assert done.returncode == 0, output[-4000:]
    assert "[container] PASS" in output
    cuda = cuda_line(output)
    if "NOT BUILT" in cuda:  # said in the test's report too, never a silent pass
        warnings.warn(cuda, stacklevel=1)


def cuda_line(output: str) -> str:
    """The check's one line on the CUDA variant: built (with torch's CUDA version) or not built and
    why. AssertionError where the check said neither: its absence may not go unsaid."""
    said = [line for line in output.splitlines() if line.startswith("[container] CUDA variant: ") and "BUILT" in line]
    assert said, "the container check says nothing of the CUDA variant"
    return said[-1]
