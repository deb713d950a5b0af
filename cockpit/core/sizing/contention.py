"""What jobs running side by side cost each other on this machine, measured with two real jobs.

One job's probe (`cockpit_training.probe`) times it alone, with the other cores idle. A fleet's jobs are
never alone, and on the machines cockpit was measured on that changes a job's speed both ways:

- with every core running a job, a CartPole job stepped about 15 % *faster* than alone on the
  2-core machine cockpit is built on (alone, the kernel moves it and its env thread between idle
  cores; busy neighbours keep it put);
- two CartPole jobs time-sharing one core (more slots than cores) got about 30 % less done
  together than one job alone on it (each switch evicts the other's caches); Pong lost less.

Neither follows from one job's costs, so both are measured: two partner processes (`python -m
cockpit_training.probe --partner`, training the preset until killed and printing each iteration's start,
end and samples) run in three phases, each until both have finished `MIN_ITERATIONS` iterations
inside it and `WINDOW_S` has passed, and the three run in turn `ROUNDS` times (on a shared or
virtual machine a core's speed drifts by 10-20 % over seconds: interleaving spreads the drift over
the phases rather than into one of them):

1. *alone*: one partner is stopped (SIGSTOP), the other runs unpinned, as a lone job does (the
   partners take turns from round to round);
2. *busy*: both run, pinned to different CPUs, as jobs with a core each do;
3. *shared*: both run pinned to one CPU, as two jobs sharing a core do.

`busy_factor` is a sample's cost in phase 2 over phase 1 (each the mean of the partners' rates);
`shared_factor` is a sample's cost on the shared core (the two partners' rates together) over
phase 1; each rate is a partner's samples over its iterations' seconds in all rounds of a phase.
The fleet's overlap model (`cockpit.core.fleet.projection`) scales one job's probed cost by them.
The partners train the preset's own shape; a preset whose iteration takes over `ITERATION_S`
(Pong's thousands of samples) trains one epoch of fewer rollout steps instead, so the phases take
seconds, not minutes: the factors are ratios of the same work, and the work's mix is alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from cockpit.contract.presets import Preset, largest_divisor_at_most, to_toml
from cockpit.contract.runspec import ConfigError
from cockpit.contract.workerargs import PARENT_PID_ENV
from cockpit.core.launch.local import pin_threads

ROUNDS = 4  # the phases run in turn this many times: the machine's speed drifts over seconds
WINDOW_S = 1.0  # each phase lasts at least this long
MIN_ITERATIONS = 1  # and until each running partner has finished this many iterations inside it
PHASE_LIMIT_S = 60.0  # a phase that has not got its iterations by then fails the measurement
START_LIMIT_S = 180.0  # a partner's imports and first iteration (several seconds, minutes at worst)
ITERATION_S = 0.5  # the longest partner iteration wanted: longer presets train a shorter shape
MIN_STEPS = 8
STEPS = 1 + ROUNDS  # what `measure` reports: the partners' start, then each round


@dataclass(frozen=True)
class Contention:
    """A sample's cost with jobs side by side, over its cost for a job alone (module docstring)."""

    busy_factor: float  # each job on a core of its own, every core busy (1.0 on a one-CPU machine)
    shared_factor: float  # two jobs time-sharing one core, for their samples together
    alone_sps: float  # what a partner did alone, the mean of the two (the factors' reference)


@dataclass(frozen=True)
class Iteration:
    """One partner iteration, on the monotonic clock (the same in every process)."""

    start: float
    end: float
    samples: int


def rate(iterations: list[Iteration]) -> float:
    """Samples per second over `iterations` (each lasted more than no time)."""
    return sum(it.samples for it in iterations) / sum(it.end - it.start for it in iterations)


def factors(alone: list[float], busy: list[float], shared: list[float]) -> Contention:
    """The factors from the partners' rates: each one's alone, each one's with a core each (empty
    on a one-CPU machine), and each one's on the shared core."""
    alone_rate = statistics.fmean(alone)
    busy_rate = statistics.fmean(busy) if busy else alone_rate
    return Contention(alone_rate / busy_rate, alone_rate / sum(shared), alone_rate)


def partner_shape(preset: Preset, iteration_s: float) -> Preset:
    """What the partners train: `preset` as the probe timed it (`iteration_s` a run), or, when
    that takes over `ITERATION_S`, one epoch of a rollout short enough to."""
    if iteration_s <= ITERATION_S:
        return preset
    n_steps = max(MIN_STEPS, math.floor(preset.n_steps * ITERATION_S / iteration_s))
    batch = largest_divisor_at_most(preset.n_envs * n_steps, preset.batch_size)
    return dataclasses.replace(preset, n_steps=n_steps, batch_size=batch, n_epochs=1)


class _Partner:
    """A partner process and the iterations it has reported so far."""

    def __init__(self, preset_file: Path, stderr: IO[str], device: str = "auto") -> None:
        argv = [
            sys.executable,
            "-m",
            "cockpit_training.probe",
            "--preset",
            str(preset_file),
            "--partner",
            "--device",
            device,
        ]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, PARENT_PID_ENV: str(os.getpid())},
        )
        self.iterations: list[Iteration] = []
        threading.Thread(target=self._read, daemon=True, name="partner-reader").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError, TypeError):
                start, end, samples = json.loads(line)
                self.iterations.append(Iteration(float(start), float(end), int(samples)))

    def since(self, t: float) -> list[Iteration]:
        """The iterations reported so far that started at or after `t`."""
        return [it for it in list(self.iterations) if it.start >= t]

    def pin(self, cpus: tuple[int, ...]) -> None:
        pin_threads(self.proc.pid, cpus)

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signum)


def measure(
    preset: Preset,
    iteration_s: float,
    workdir: Path,
    device: str = "auto",
    on_step: Callable[[int], None] | None = None,
) -> Contention:
    """Run the three phases (module docstring) `ROUNDS` times with two partners training `preset`
    (whose own iteration the probe timed at `iteration_s`) on `device` (auto: the one a worker
    would pick); ConfigError if a partner fails or stalls. `on_step` is told 0 as the partners
    start, then each round's number (1 to `ROUNDS`) as it begins: its `STEPS` in all."""
    step = on_step or (lambda _: None)
    preset_file = workdir / "partner-preset.toml"
    preset_file.write_text(to_toml(partner_shape(preset, iteration_s)), encoding="utf-8")
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    with (workdir / "partners.err").open("w+", encoding="utf-8") as stderr:
        partners = [_Partner(preset_file, stderr, device) for _ in range(2)]
        alone: list[list[Iteration]] = [[], []]
        busy: list[list[Iteration]] = [[], []]
        shared: list[list[Iteration]] = [[], []]
        try:
            step(0)
            _wait(partners, -math.inf, 1, stderr, "start", START_LIMIT_S)
            for round_ in range(ROUNDS):
                step(round_ + 1)
                # Each round one of them runs alone, in turn: a process's speed varies too.
                first, second = partners if round_ % 2 == 0 else partners[::-1]
                second.signal(signal.SIGSTOP)
                first.pin(cpus)
                alone[partners.index(first)] += _phase([first], stderr, "alone")[0]
                second.signal(signal.SIGCONT)
                if len(cpus) >= 2:
                    partners[0].pin(cpus[:1])
                    partners[1].pin(cpus[1:2])
                    for mine, got in zip(busy, _phase(partners, stderr, "a core each"), strict=True):
                        mine += got
                for each in partners:
                    each.pin(cpus[:1])
                for mine, got in zip(shared, _phase(partners, stderr, "one core shared"), strict=True):
                    mine += got
        finally:
            for each in partners:
                each.signal(signal.SIGCONT)
                each.proc.kill()
                each.proc.wait()
    return factors(
        [rate(its) for its in alone if its], [rate(its) for its in busy if its], [rate(its) for its in shared]
    )


def _phase(partners: list[_Partner], stderr: IO[str], name: str) -> list[list[Iteration]]:
    """Each partner's iterations over one phase that starts now."""
    since = time.monotonic()
    time.sleep(WINDOW_S)
    _wait(partners, since, MIN_ITERATIONS, stderr, name, PHASE_LIMIT_S)
    return [each.since(since) for each in partners]


def _wait(partners: list[_Partner], since: float, iterations: int, stderr: IO[str], name: str, limit: float) -> None:
    """Until every partner has finished `iterations` iterations that started after `since`;
    ConfigError naming phase `name` after `limit` seconds, or as soon as a partner exits."""
    deadline = time.monotonic() + limit
    while any(len(each.since(since)) < iterations for each in partners):
        for each in partners:
            if each.proc.poll() is not None:
                stderr.seek(0)
                last = (stderr.read().strip().splitlines() or ["no output"])[-1]
                raise ConfigError(f"measuring jobs side by side: a partner exited ({last})")
        if time.monotonic() > deadline:
            raise ConfigError(f"measuring jobs side by side: no iterations in {limit:.0f} s ({name})")
        time.sleep(0.05)
