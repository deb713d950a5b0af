"""Running the real worker as a subprocess and waiting on its events, for end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.contract.events import Event, read_events

CARTPOLE_PRESET = """
env = "CartPole-v1"
n_envs = 8
n_steps = 32
batch_size = 256
n_epochs = {n_epochs}
net_arch = {net_arch}
checkpoint_every = {checkpoint_every}
"""


def write_preset(
    directory: Path, *, checkpoint_every: int = 2048, n_epochs: int = 4, net_arch: tuple[int, ...] = (64, 64)
) -> Path:
    """A small CartPole preset file with frequent checkpoints."""
    path = directory / "test-preset.toml"
    text = CARTPOLE_PRESET.format(checkpoint_every=checkpoint_every, n_epochs=n_epochs, net_arch=list(net_arch))
    path.write_text(text)
    return path


@dataclass
class Worker:
    """A running worker process and its job dir."""

    proc: subprocess.Popen
    job_dir: Path

    def events(self) -> list[Event]:
        return read_events(self.job_dir / "events.jsonl")

    def wait_for(self, condition: Callable[[list[Event]], bool], timeout: float = 60.0) -> list[Event]:
        """Poll the events until `condition` holds; fail if the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = self.events()
            if condition(events):
                return events
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited {self.proc.returncode} first; stderr:\n{self.stderr()}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting on events: {[e['kind'] for e in self.events()]}")

    def finish(self, timeout: float = 120.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stderr(self) -> str:
        path = self.job_dir.parent / f"{self.job_dir.name}.stderr"
        return path.read_text() if path.exists() else ""


def start_worker(job_dir: Path, *args: str) -> Worker:
    """Start `python -m cockpit_training.worker --job-dir job_dir *args` with output beside the job dir."""
    job_dir.parent.mkdir(parents=True, exist_ok=True)
    out = (job_dir.parent / f"{job_dir.name}.stdout").open("ab")
    err = (job_dir.parent / f"{job_dir.name}.stderr").open("ab")
    cmd = [sys.executable, "-m", "cockpit_training.worker", "--job-dir", str(job_dir), "--threads", "1", *args]
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return Worker(proc, job_dir)


def run_worker(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run the worker to completion and capture its output."""
    cmd = [sys.executable, "-m", "cockpit_training.worker", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def kinds(events: list[Event], kind: str) -> list[Any]:
    """The events of one kind."""
    return [e for e in events if e.kind == kind]
