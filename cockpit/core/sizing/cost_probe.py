"""What a preset's job costs on this machine: run `cockpit_training.probe` once, then remember it.

The advisor sizes n_envs and the number of jobs from these costs (`advisor.Costs`) instead of a
table of envs per core. A probe takes 20-40 s (one job, then two side by side: `contention`), so
each result is kept in `$XDG_CACHE_HOME/cockpit/costs.toml` (default `~/.cache`), keyed by
everything that changes it: the CPU model, the device, the env, the network and the batch size.
The cache is written atomically; an unreadable one is ignored and rewritten.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomli_w

from cockpit.contract.costs import Costs
from cockpit.contract.files import cache_dir, write_atomic
from cockpit.contract.presets import Preset, to_toml
from cockpit.contract.progress import PROBE_STEPS, ProgressFn, parse_probe_line
from cockpit.contract.runspec import ConfigError
from cockpit.contract.toml import read_cache_table
from cockpit.contract.workerargs import PARENT_PID_ENV
from cockpit.core.machine.host import cpu_model
from cockpit.core.machine.tempdirs import owned_tempdir
from cockpit.core.sizing import contention
from cockpit.core.sizing.progress import StepTimer

PROBE_TIMEOUT_S = 300.0
CACHE_FILE = "costs.toml"


def cache_path() -> Path:
    """Where measured costs are kept."""
    return cache_dir() / CACHE_FILE


@functools.cache  # installed versions do not change under a running process
def _torch_version() -> str:
    try:  # from the installed metadata: importing torch would cost seconds
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def cache_key(preset: Preset, gpu_name: str | None) -> str:
    """What a measurement depends on, as one string. A preset's env_kwargs (a grid's size, an
    Atari env's options) change what a step costs, so they are part of it when there are any
    (sorted, as JSON); without them the key is what it always was, so earlier entries still count."""
    net = "x".join(map(str, preset.net_arch))
    gpu = gpu_name or "no GPU"
    kwargs = f" {json.dumps(preset.env_kwargs, sort_keys=True)}" if preset.env_kwargs else ""
    return (
        f"{cpu_model()} | {gpu} | torch {_torch_version()} | {preset.env}{kwargs} | net {net} "
        f"{preset.activation} | batch {preset.batch_size}"
    )


def _costs(record: dict[str, Any]) -> Costs:
    """The advisor's `Costs` from a probe's record; ValueError for one that is incomplete or
    not a measurement (a negative or non-finite time, no per-sample cost)."""
    try:
        costs = Costs(
            str(record["device"]),
            float(record["step_overhead_us"]),
            float(record["env_policy_us"]),
            float(record["env_step_us"]),
            float(record["train_sample_us"]),
            float(record["train_epoch_us"]),
            float(record["setup_s"]),
            float(record["import_s"]),
            int(record["episode_steps_max"]),
            float(record["busy_factor"]),
            float(record["shared_factor"]),
            int(record["train_threads"]),
            float(record["train_speedup"]),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"incomplete record: {exc}") from exc
    times = (
        costs.step_overhead_us,
        costs.env_policy_us,
        costs.env_step_us,
        costs.train_sample_us,
        costs.train_epoch_us,
        costs.setup_s,
        costs.import_s,
        costs.episode_steps_max,
    )
    if not all(math.isfinite(t) and t >= 0 for t in times) or costs.env_policy_us + costs.train_sample_us <= 0:
        raise ValueError(f"not a measurement: {record}")
    if costs.train_threads < 1 or not all(
        math.isfinite(f) and f > 0 for f in (costs.busy_factor, costs.shared_factor, costs.train_speedup)
    ):
        raise ValueError(f"not a measurement: {record}")
    return costs


# Each step's seconds on the 2-core machine cockpit is built on, for a CartPole job: what a first
# estimate of the probe's time is made of (`progress.StepTimer` scales them by the steps timed so far).
PROBE_START_S = 5.0  # the probe process's imports: Python, torch, SB3, the env's library
PROBE_STEP_S = (5.0, 3.0, 1.0, 2.0)  # each of `PROBE_STEPS`
PARTNERS_START_S, ROUND_S = 7.0, 4.0  # `contention.measure`'s partners starting, then each of its rounds


def probe_steps() -> list[tuple[str, float]]:
    """A probe's steps, in order, with their guessed seconds: the probe process starting, its
    own `PROBE_STEPS`, then `contention.measure`'s."""
    return [
        ("starting the probe", PROBE_START_S),
        *zip(PROBE_STEPS, PROBE_STEP_S, strict=True),
        ("starting two jobs side by side", PARTNERS_START_S),
        *(
            (f"two jobs side by side, round {r} of {contention.ROUNDS}", ROUND_S)
            for r in range(1, contention.ROUNDS + 1)
        ),
    ]


def run_probe(
    preset: Preset, workdir: Path, device: str = "auto", progress: ProgressFn | None = None
) -> dict[str, Any]:
    """Run `python -m cockpit_training.probe` on `preset`, on `device` (auto: the one a worker would
    pick), then two of its jobs side by side (`contention.measure`), and return the probe's JSON
    with the contention factors; ConfigError if either fails. `progress` is told each of
    `probe_steps()` as it begins, the probe's own as the probe announces them on stderr."""
    timer = StepTimer(f"measuring {preset.env}", probe_steps(), progress)
    preset_file = workdir / "probe-preset.toml"
    preset_file.write_text(to_toml(preset), encoding="utf-8")
    argv = [sys.executable, "-m", "cockpit_training.probe", "--preset", str(preset_file), "--device", device]
    timer.begin(0)
    stdout, stderr, returncode = _follow_probe(argv, lambda index: timer.begin(1 + index))
    if returncode is None:
        raise ConfigError(f"measuring {preset.env}: the probe took over {PROBE_TIMEOUT_S:.0f} s")
    if returncode != 0:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"measuring {preset.env}: the probe failed: {last}")
    try:
        record = json.loads((stdout.strip().splitlines() or [""])[-1])
    except json.JSONDecodeError as exc:
        raise ConfigError(f"measuring {preset.env}: the probe printed no result ({exc})") from exc
    if not isinstance(record, dict):
        raise ConfigError(f"measuring {preset.env}: the probe printed {record!r}, not a record")
    try:
        iteration_s = float(record["iteration_s"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"measuring {preset.env}: the probe's record has no iteration time ({exc})") from exc
    after_probe = 1 + len(PROBE_STEPS)
    side_by_side = contention.measure(
        preset, iteration_s, workdir, device, on_step=lambda index: timer.begin(after_probe + index)
    )
    timer.finish()
    record = {
        **record,
        "busy_factor": round(side_by_side.busy_factor, 4),
        "shared_factor": round(side_by_side.shared_factor, 4),
    }
    return _three_processes(preset, record, iteration_s, side_by_side.alone_sps)


def _follow_probe(argv: list[str], on_step: Callable[[int], None]) -> tuple[str, str, int | None]:
    """Run the probe's `argv`, telling `on_step` each step it announces on stderr while it runs;
    its stdout, its other stderr lines and its exit code (None: killed after `PROBE_TIMEOUT_S`)."""
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, PARENT_PID_ENV: str(os.getpid())},
    )
    assert proc.stdout is not None and proc.stderr is not None
    out: list[str] = []
    # stdout is read apart: a probe blocked on a full stdout pipe would never reach EOF on stderr.
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read() if proc.stdout else ""), daemon=True)
    reader.start()
    timed_out = threading.Event()

    def give_up() -> None:
        timed_out.set()
        proc.kill()

    killer = threading.Timer(PROBE_TIMEOUT_S, give_up)
    killer.start()
    said: list[str] = []
    try:
        for line in proc.stderr:
            index = parse_probe_line(line)
            if index is None:
                said.append(line)
            else:
                on_step(index)
        proc.wait()
        reader.join()
    finally:
        killer.cancel()
        if proc.poll() is None:  # the caller gave up (Ctrl-C, a failing progress display): so does the probe
            proc.kill()
            proc.wait()
    return "".join(out), "".join(said), None if timed_out.is_set() else proc.returncode


# The probe's figures that scale with a job's speed (env_step_us, an env stepped without the
# policy, only picks DummyVecEnv or SubprocVecEnv and is left as measured).
SPEED_FIGURES = ("step_overhead_us", "env_policy_us", "train_sample_us", "train_epoch_us")


def _three_processes(preset: Preset, record: dict[str, Any], iteration_s: float, partners_sps: float) -> dict[str, Any]:
    """`record` (whose own-shape iteration took `iteration_s`) with its one-job speed the mean of
    the probe's and the two partners' (who trained the same shape alone, `partners_sps` their
    mean). On the machines cockpit was measured on, one process ran 10-20 % faster or slower than
    the next for its whole life, so one process's figure is one draw. Kept as measured where the
    partners trained another shape than the probe timed."""
    same_shape = record.get("own_epochs") == preset.n_epochs and contention.partner_shape(preset, iteration_s) == preset
    if not same_shape or iteration_s <= 0 or partners_sps <= 0:
        return record
    probe_sps = preset.total_batch / iteration_s
    scale = probe_sps / ((probe_sps + 2 * partners_sps) / 3)
    return {**record, **{key: round(float(record[key]) * scale, 2) for key in SPEED_FIGURES}, "processes_timed": 3}


def cached_costs(preset: Preset, gpu_name: str | None) -> Costs | None:
    """The costs measured earlier for `preset` on this machine, or None; never probes."""
    record = read_cache_table(cache_path()).get(cache_key(preset, gpu_name))
    try:
        return _costs(record) if isinstance(record, dict) else None
    except ValueError:
        return None  # a record from another version, or a broken one: measure again


def measured_costs(
    preset: Preset,
    gpu_name: str | None,
    *,
    on_probe: Callable[[str], None] | None = None,
    probe: Callable[[Preset, Path], dict[str, Any]] | None = None,
    cpu: bool = False,
    progress: ProgressFn | None = None,
) -> Costs:
    """The costs of one job of `preset` on this machine (whose GPU is `gpu_name`, None for none),
    from the cache or, the first time, from a probe (`on_probe` is told before it starts, since it
    takes seconds, and `progress` each of its steps, where `probe` is the real one). With `cpu`, on
    the CPU whatever the GPU: kept as a machine without one keeps them (the GPU changes nothing of
    them). ConfigError if the probe fails."""
    probe = probe or functools.partial(run_probe, device="cpu" if cpu else "auto", progress=progress)
    if cpu:
        gpu_name = None
    cached = cached_costs(preset, gpu_name)
    if cached is not None:
        return cached
    path, key = cache_path(), cache_key(preset, gpu_name)
    if on_probe is not None:
        where = " on the CPU" if cpu else ""
        on_probe(f"measuring what a {preset.env} job costs on this machine{where} (once; kept in {path})")
    with owned_tempdir("probe") as tmp:
        record = {**probe(preset, tmp), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        costs = _costs(record)
    except ValueError as exc:
        raise ConfigError(f"measuring {preset.env}: {exc}") from exc
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, tomli_w.dumps({**read_cache_table(path), key: record}))
    except OSError:
        pass  # an unwritable cache costs a probe next time, nothing more
    return costs
