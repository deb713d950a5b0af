"""Nothing outlives a killed cockpit: seconds from a kill -9 of `cockpit run` until its last worker is gone.

Two cases, each a fresh `cockpit run --headless --jobs N` on a CartPole preset that checkpoints
every 2048 steps:
- importing: the machine is loaded with one busy process per CPU (at the workers' own priority),
  and the cockpit is killed once each of its N workers has begun to load torch (a torch library
  in its memory map) and none has started its job;
- stopped: the workers train (each has reported progress), one of them is stopped with SIGSTOP,
  then the cockpit is killed.

"Gone" counts every process the cockpit had started below it (workers and anything they
started), polled every 10 ms; a zombie counts as gone. Each case prints one line: the seconds until
the last one was gone, and how many there were. A case where one is still running after
`--deadline` seconds says so and kills what is left.

Run from the repo root (about a minute on 2 cores):
    .venv/bin/python -m benchmarks.orphans
    .venv/bin/python -m benchmarks.orphans --jobs 4 --deadline 120
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from benchmarks.common import REPO_ROOT, load_average, small_preset_text, usable_cpus
from cockpit.contract.events import read_events

PRESET = small_preset_text(checkpoint_every=2048, timesteps=100_000_000)
POLL_S = 0.01


def _burn() -> None:
    os.nice(10)  # the workers' own priority (WORKER_NICE): the load competes with them, not the cockpit
    while True:
        pass


@contextlib.contextmanager
def load(cpus: int) -> Iterator[None]:
    """One busy process per CPU while inside."""
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(cpus)]
    for burner in burners:
        burner.start()
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.join()


def start(root: Path, jobs: int) -> subprocess.Popen[bytes]:
    preset = root / "orphans.toml"
    preset.write_text(PRESET)
    cmd = [sys.executable, "-m", "cockpit", "run", "--headless", "--jobs", str(jobs), "--preset", str(preset),
           "--run-dir", str(root / "run")]  # fmt: skip
    return subprocess.Popen(cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip


def descendants(pid: int) -> list[psutil.Process]:
    """Every live process below `pid` (zombies left out)."""
    try:
        found = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in found if _running(p)]


def _running(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def kill_and_time(cockpit: subprocess.Popen[bytes], deadline_s: float) -> tuple[float | None, int]:
    """kill -9 of `cockpit`; the seconds until every process below it had ended (None: some still
    ran after `deadline_s`, and were killed), and how many there were."""
    below = descendants(cockpit.pid)
    killed_at = time.monotonic()
    cockpit.kill()
    cockpit.wait()
    while any(_running(p) for p in below):
        if time.monotonic() - killed_at > deadline_s:
            for proc in below:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            return None, len(below)
        time.sleep(POLL_S)
    return time.monotonic() - killed_at, len(below)


def workers(cockpit: subprocess.Popen[bytes]) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(cockpit.pid).children() if _running(p)]
    except psutil.Error:
        return []


def training(run_dir: Path, jobs: int) -> bool:
    """Every job has reported progress."""
    for i in range(jobs):
        events = run_dir / "jobs" / f"{i:03d}" / "events.jsonl"
        if not events.exists() or not any(e.kind == "progress" for e in read_events(events)):
            return False
    return True


def loading_torch(proc: psutil.Process) -> bool:
    """`proc` has mapped one of torch's libraries: it is importing torch, or has imported it."""
    try:
        return any(f"{os.sep}torch{os.sep}" in m.path for m in proc.memory_maps(grouped=True))
    except psutil.Error:
        return False


def started(run_dir: Path) -> bool:
    """Some job has reported `started`: its worker is past its imports."""
    return any(e.kind == "started" for path in run_dir.glob("jobs/*/events.jsonl") for e in read_events(path))


def importing_case(root: Path, jobs: int, deadline_s: float) -> tuple[float | None, int]:
    with load(usable_cpus()):
        cockpit = start(root, jobs)
        wait(lambda: len(workers(cockpit)) >= jobs and all(map(loading_torch, workers(cockpit))), 300, "torch")
        if started(root / "run"):
            raise RuntimeError("a worker finished importing before all had begun: run again, or with fewer --jobs")
        return kill_and_time(cockpit, deadline_s)


def stopped_case(root: Path, jobs: int, deadline_s: float) -> tuple[float | None, int]:
    cockpit = start(root, jobs)
    wait(lambda: training(root / "run", jobs), 300, "every job to train")
    os.kill(workers(cockpit)[0].pid, signal.SIGSTOP)
    return kill_and_time(cockpit, deadline_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.orphans", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="workers at once (default: 2)")
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds to wait for the last one (default: 60)")
    args = parser.parse_args(argv)
    print(f"kill -9 of `cockpit run --jobs {args.jobs}`, {usable_cpus()} CPUs, load average {load_average():.1f}")
    for name, case in (("importing under load", importing_case), ("one worker SIGSTOPped", stopped_case)):
        with tempfile.TemporaryDirectory(prefix="orphans-") as tmp:
            seconds, count = case(Path(tmp), args.jobs, args.deadline)
        gone = f"last gone after {seconds:.2f} s" if seconds is not None else f"STILL RUNNING after {args.deadline} s"
        print(f"{name:>22}: {count} processes below the cockpit, {gone}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
