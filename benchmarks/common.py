"""Shared helpers for the hand-run benchmarks: fresh processes, worker runs, events, and tables.

Every measurement runs in a fresh Python process, so thread pools, envpool threads and torch's
lazy initialisation from one measurement never leak into the next:

- `run_isolated("module:function", kwargs)` calls a function in a child process
  (`python -m benchmarks.common module:function KWARGS_JSON RESULT_PATH`) and returns its
  JSON-serialisable result;
- `run_worker(...)` runs the real `python -m cockpit_training.worker` and returns its parsed events.

This module imports nothing heavy (no numpy, torch or envpool) at import time, so a child
process decides itself when those load, exactly as the worker does.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.contract.events import Event

REPO_ROOT = Path(__file__).resolve().parents[1]
OUTPUT_TAIL_CHARS = 4000
# A quick CartPole preset (seconds per few thousand steps on one core), for the benchmarks and tests
# that train for real: `small_preset_text(checkpoint_every=..., timesteps=...)`.
SMALL_PRESET = """
env = "CartPole-v1"
n_envs = 8
n_steps = 32
batch_size = 256
n_epochs = 4
checkpoint_every = {checkpoint_every}
timesteps = {timesteps}
"""


def small_preset_text(*, checkpoint_every: int = 2048, timesteps: int = 20_000) -> str:
    """The TOML of `SMALL_PRESET` with its checkpoint interval and step target."""
    return SMALL_PRESET.format(checkpoint_every=checkpoint_every, timesteps=timesteps)


BUSY_LOAD = 0.5  # a 1-minute load average above this before a benchmark starts gets a warning


class BenchmarkError(RuntimeError):
    """A child process or worker run failed; the message carries the tail of its output."""


# --- processes -------------------------------------------------------------------------------


def usable_cpus() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0))


def default_threads(n_envs: int) -> int:
    """envpool threads the worker picks when `--threads` is not given: min(n_envs, usable CPUs)."""
    return max(1, min(n_envs, usable_cpus()))


def _run(cmd: list[str], *, timeout: float | None, what: str) -> str:
    """Run `cmd` from the repo root, capturing its output; raise `BenchmarkError` if it fails."""
    try:
        proc = subprocess.run(
            cmd,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchmarkError(f"{what} timed out after {timeout} s") from exc
    if proc.returncode != 0:
        tail = proc.stdout[-OUTPUT_TAIL_CHARS:]
        raise BenchmarkError(f"{what} exited with {proc.returncode}:\n{tail}")
    return proc.stdout


def run_isolated(target: str, kwargs: dict[str, Any], *, timeout: float | None = None) -> Any:
    """Call `target` ("package.module:function") with `kwargs` in a fresh Python process.

    The function's return value must be JSON-serialisable; it is returned here.
    """
    with tempfile.TemporaryDirectory(prefix="bench-child-") as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "benchmarks.common", target, json.dumps(kwargs), str(result_path)]
        _run(cmd, timeout=timeout, what=f"child process {target}")
        return json.loads(result_path.read_text(encoding="utf-8"))


def _child_main(argv: Sequence[str]) -> int:
    """Entry point of a `run_isolated` child: import the target, call it, write its result."""
    target, kwargs_json, result_path = argv
    module_name, _, func_name = target.partition(":")
    func = getattr(importlib.import_module(module_name), func_name)
    result = func(**json.loads(kwargs_json))
    Path(result_path).write_text(json.dumps(result), encoding="utf-8")
    return 0


# --- machine load ----------------------------------------------------------------------------


def load_average() -> float:
    """The 1-minute load average (other processes running here distort every figure)."""
    return os.getloadavg()[0]


def warn_if_busy() -> float:
    """Log a warning when the machine is already busy; returns the 1-minute load average."""
    load = load_average()
    if load > BUSY_LOAD:
        log(f"warning: 1-min load average is {load:.2f} on {usable_cpus()} CPUs before starting; figures will be noisy")
    return load


def load_caption(before: float) -> str:
    """A table caption recording the load average before and after the benchmark."""
    return f"1-min load average: {before:.2f} before, {load_average():.2f} after, on {usable_cpus()} usable CPUs."


# --- the worker and its events ---------------------------------------------------------------


def whole_rollouts(preset: str, timesteps: int) -> int:
    """`timesteps` rounded up to a whole number of rollouts (n_envs × n_steps) of `preset`.

    With whole rollouts the worker (which stops exactly at its target) and a bare `learn(T)`
    (which always finishes its last rollout) collect and train on exactly the same data.
    """
    from cockpit.contract.presets import load

    rollout = load(preset).total_batch
    return max(1, math.ceil(timesteps / rollout)) * rollout


def worker_argv(
    preset: str, timesteps: int, job_dir: Path | str, *, seed: int, threads: int | None, torch_threads: int, device: str
) -> list[str]:
    """The `cockpit_training.worker` command-line arguments for one run (shared by worker and bare runs)."""
    from cockpit.contract.workerargs import DEVICES, WorkerArgs

    if device not in DEVICES:
        raise BenchmarkError(f"--device {device}: expected one of {', '.join(DEVICES)}")
    args = WorkerArgs(Path(job_dir), preset=preset, timesteps=timesteps, seed=seed, device=device,
                      threads=threads, torch_threads=torch_threads)  # fmt: skip
    return list(args.to_argv())


def run_worker(
    preset: str,
    timesteps: int,
    *,
    seed: int,
    threads: int | None,
    torch_threads: int = 1,
    device: str = "auto",
    job_root: Path | None = None,
    timeout: float | None = None,
) -> list[Event]:
    """Run `python -m cockpit_training.worker` to completion in a fresh job dir and return its events.

    The job dir (with its checkpoints) is made under `job_root` (default: the system temp dir)
    and deleted afterwards. Raises `BenchmarkError` unless the run ends with `finished: done`.
    """
    from cockpit.contract.events import EVENTS_FILE, FinishedEvent, of_kind, read_events

    if job_root is not None:
        job_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-worker-", dir=job_root) as tmp:
        job_dir = Path(tmp) / "job"
        argv = worker_argv(
            preset, timesteps, job_dir, seed=seed, threads=threads, torch_threads=torch_threads, device=device
        )
        output = _run(
            [sys.executable, "-m", "cockpit_training.worker", *argv], timeout=timeout, what="cockpit_training.worker"
        )
        events = read_events(job_dir / EVENTS_FILE)
    finished = of_kind(events, FinishedEvent)
    if not finished or finished[-1].status != "done":
        raise BenchmarkError(f"cockpit_training.worker did not finish its run:\n{output[-OUTPUT_TAIL_CHARS:]}")
    return events


@dataclass(frozen=True)
class Throughput:
    """Steps over seconds; `sps` is their ratio."""

    steps: int
    seconds: float

    @property
    def sps(self) -> float:
        """Steps per second."""
        return self.steps / self.seconds if self.seconds > 0 else 0.0


def worker_throughput(events: list[Event]) -> Throughput:
    """The whole run's throughput: `finished.steps` over `finished.t - started.t`."""
    from cockpit.contract.events import FinishedEvent, StartedEvent, of_kind

    started = of_kind(events, StartedEvent)[0]
    finished = of_kind(events, FinishedEvent)[-1]
    return Throughput(finished.steps, finished.t - started.t)


def checkpoint_seconds(events: list[Event]) -> float:
    """Time the worker spent writing checkpoints, estimated from its events.

    The callback emits a `progress` event right before each periodic checkpoint, as does the
    worker before its final one, so each `checkpoint` event's distance from the event before it
    is (to within a write) the time that checkpoint took.
    """
    return sum(cur.t - prev.t for prev, cur in itertools.pairwise(events) if cur.kind == "checkpoint")


def rollout_throughput(events: list[Event], *, skip: int = 0) -> Throughput:
    """Rollout-phase throughput: steps collected over time spent, summed over rollout phases.

    A rollout phase runs from its `phase: rollout` event to the next `phase: train` event; its
    steps are the difference of their `num_timesteps`. A rollout not closed by a train phase
    (cut short by the target or a stop) is left out, as are the first `skip` rollouts (warm-up).
    """
    from cockpit.contract.events import PhaseEvent, of_kind

    steps, seconds, seen = 0, 0.0, 0
    for start, end in itertools.pairwise(of_kind(events, PhaseEvent)):
        if start.phase != "rollout" or end.phase != "train":
            continue
        seen += 1
        if seen <= skip:
            continue
        steps += end.num_timesteps - start.num_timesteps
        seconds += end.t - start.t
    return Throughput(steps, seconds)


# --- stepping --------------------------------------------------------------------------------


def action_sampler(action_space: Any, num_envs: int, seed: int) -> Any:
    """A function returning a fresh batch of `num_envs` random valid actions on each call."""
    import numpy as np
    from gymnasium import spaces

    rng = np.random.default_rng(seed)
    if isinstance(action_space, spaces.Discrete):
        first, end = int(action_space.start), int(action_space.start + action_space.n)
        return lambda: rng.integers(first, end, size=num_envs)
    if isinstance(action_space, spaces.Box):
        low = np.broadcast_to(action_space.low, action_space.shape)
        high = np.broadcast_to(action_space.high, action_space.shape)
        shape = (num_envs, *action_space.shape)
        return lambda: rng.uniform(low, high, size=shape).astype(action_space.dtype)
    raise TypeError(f"unsupported action space {action_space!r}")


def timed_steps(step: Any, sample: Any, *, steps: int, warmup: int) -> float:
    """Call `step(sample())` `warmup` times untimed, then `steps` times; return the timed seconds."""
    for _ in range(warmup):
        step(sample())
    t0 = time.perf_counter()
    for _ in range(steps):
        step(sample())
    return time.perf_counter() - t0


def stepping_throughput(
    step: Any, reset: Any, action_space: Any, n_envs: int, *, seed: int, steps: int, warmup: int
) -> dict[str, float]:
    """Reset, then time `steps` vector steps with random valid actions (after `warmup` untimed ones).

    Returns `{"steps": env steps, "seconds": elapsed}`, the shape `run_isolated` children send back.
    """
    reset()
    seconds = timed_steps(step, action_sampler(action_space, n_envs, seed), steps=steps, warmup=warmup)
    return {"steps": n_envs * steps, "seconds": seconds}


# --- statistics and output -------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """Median, minimum and maximum of repeated measurements."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        """The median value."""
        return statistics.median(self.values)

    @property
    def cell(self) -> str:
        """The median SPS, followed by `(min–max)` when there was more than one measurement."""
        if len(self.values) == 1:
            return fmt_sps(self.median)
        return f"{fmt_sps(self.median)} ({fmt_sps(min(self.values))}–{fmt_sps(max(self.values))})"


def side_by_side(repeats: int, sides: dict[str, Callable[[Path], float]], prefix: str) -> dict[str, list[float]]:
    """Each side's SPS, measured `repeats` times; the sides take turns going first, each in a
    fresh temporary directory (its argument), so a drift of the machine's speed hits both alike."""
    results: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    width = max(len(name) for name in names)
    for i in range(repeats):
        for name in names if i % 2 == 0 else names[::-1]:
            with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
                results[name].append(sides[name](Path(tmp)))
            log(f"repeat {i + 1}/{repeats}: {name:<{width}} {fmt_sps(results[name][-1])} SPS")
    return results


def fmt_sps(value: float) -> str:
    """Steps per second with thousands separators."""
    return f"{value:,.0f}"


def fmt_ratio(value: float) -> str:
    """A ratio to three decimals."""
    return f"{value:.3f}"


def log(message: str) -> None:
    """A progress line on stderr, so the tables on stdout stay clean."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def print_table(
    title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], *, text_columns: int = 1, caption: str = ""
) -> None:
    """Print one table with rich: the first `text_columns` columns left-aligned, the figures right-aligned."""
    from rich.table import Table

    from cockpit.commands.console import output_console

    table = Table(title=title, caption=caption or None, caption_justify="left")
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i < text_columns else "right")
    for row in rows:
        table.add_row(*row)
    output_console().print(table)


def add_common_args(parser: argparse.ArgumentParser, *, repeats: int, threads: bool = True) -> None:
    """Add --repeats and --seed, which every benchmark takes, and --threads unless `threads` is
    False (a benchmark that runs `cockpit run`, which leaves the envpool threads to the worker)."""
    parser.add_argument(
        "--repeats", type=int, default=repeats, metavar="N", help=f"measurements per figure (default: {repeats})"
    )
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed for every run (default: 0)")
    if not threads:
        return
    parser.add_argument(
        "--threads",
        type=int,
        metavar="K",
        help="envpool threads for every run (default: the worker's own choice, min(n_envs, usable CPUs))",
    )


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
