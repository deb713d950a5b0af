"""The GPU verification kit's checks: `python -m benchmarks.gpu.check [--cpu-smoke] [--out DIR]`.

Run from the repository root, usually through `benchmarks/gpu/check.sh`, which first installs the
wheels `prepare.sh` gathered. Every check runs real cockpit commands and workers as subprocesses
and reads back what cockpit itself recorded (run.toml, gpu_util.csv, job_samples.csv, events,
costs.toml); the references it is held against come from `nvidia-smi` (`benchmarks.gpu.nvsmi`).

The checks, in order of what only a GPU can tell (docs/gpu.md says what each one measures):
  host    the GPU, driver, torch's CUDA, the wheels, and cockpit's NVML reader (buffered samples,
          throttle reasons, per-process memory)
  run     `cockpit run --jobs 4 --preset heavy --headless` beside `nvidia-smi dmon -s um`:
          cockpit's per-second utilization against dmon's, per-job memory against
          `--query-compute-apps`, utilization by phase, the train share, the sampler's cost
  sweep   1, 2, 4 and 8 heavy jobs: aggregate SPS and GPU utilization
  mps     the sweep's job counts above one again with `cockpit run --mps`: aggregate SPS and GPU
          utilization with MPS beside the sweep's without it, and their ratio
  worker  the worker on cuda with heavy and beast: SPS, peak GPU memory, TF32 on
  oom     a batch too big for the card's free memory: the `cuda_oom` error, then the advice to
          halve the batch
  probe   `cockpit recommend` (the probe's CUDA costs, the pick) and a short `cockpit tune`,
          against the best of the sweep
  fleet   a small `cockpit fleet` on the GPU

Contract:
- A check that fails is reported as failed, with its error, and the next one runs; a check that
  does not apply here is skipped with its reason. Nothing is invented: a figure nobody measured
  is "-" with the reason beside it.
- `--out DIR` (default `$OUT`) receives at most 8 files, no folders (the device tool's limits):
  report.md (rewritten after every check, so a kill leaves what was done), figures.csv (every
  figure: check, subject, metric, value, unit), util_per_second.csv, gpu_memory.csv, sweep.csv,
  kit.log (these progress lines) and raw.tar.gz (run.toml, the run's CSVs, events and logs, dmon's
  output, recommend's and tune's output).
- The default plan, with check.sh's wheel install, ends within 420 s (`check.sh --plan` prints it
  and starts nothing): `--deadline` (seconds from the start) is the plan's; a check starts only
  when its planned seconds fit before it, and each command a check starts gets at most what is
  left.
- `--cpu-smoke` runs the same checks on the CPU at tiny sizes (the cartpole preset, a few seconds
  each): what needs a GPU or nvidia-smi is skipped with the reason. It proves the kit end to end
  before a GPU session.
- Exit code: 0 when no check failed, 1 when one did, 2 for bad input (one line naming the flag).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import importlib.metadata
import importlib.util
import itertools
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from benchmarks.gpu import measure, nvsmi
from benchmarks.gpu.kit import (
    FOREVER,
    REPO_ROOT,
    WHEELS,
    CockpitRun,
    Kit,
    KitError,
    Section,
    Skipped,
    estimate,
    fmt,
    job_errors,
    last_started,
    mps_counts,
    parse_args,
    plan_lines,
    plan_seconds,
    py,
    running,
    source_digest,
    start_seconds,
    sweep_point,
    table,
    tail,
    write_report,
)
from cockpit.contract.events import ErrorEvent, Event, FinishedEvent, PhaseEvent, ProgressEvent, of_kind, read_events
from cockpit.contract.presets import Preset, load
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import RunRecord, UtilizationRecord
from cockpit.contract.toml import tomllib
from cockpit.core.machine.gpu_types import UTIL_BUFFER

CLAIM = (70.0, 90.0)  # the seeds: "4 x 25 % = 70-90 %" GPU utilization with 4 heavy jobs

# ----- host -----


TORCH_FACTS = """
import json, torch
facts = {"torch": torch.__version__, "torch_cuda": str(torch.version.cuda), "cuda_available": torch.cuda.is_available()}
if facts["cuda_available"]:
    p = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info()
    facts.update(device=p.name, capability=f"{p.major}.{p.minor}", multiprocessors=p.multi_processor_count,
                 free_mib=free // 2**20, total_mib=total // 2**20)
print(json.dumps(facts))
"""

VERSIONED = ("cockpit", "torch", "numpy", "stable-baselines3", "envpool", "gymnasium", "textual", "rich",
             "nvidia-ml-py", "psutil", "tomli-w")  # fmt: skip


def check_host(kit: Kit, sec: Section) -> None:
    """The machine: GPU and driver (nvidia-smi), torch's CUDA, the wheels and versions in use, and
    cockpit's NVML reader reading the idle GPU for 2 s (buffered samples, throttle reasons,
    per-process memory)."""
    facts = nvsmi.gpu_facts()
    rows: list[tuple[str, object]] = []
    if facts is None:
        rows.append(("nvidia-smi", "absent" if nvsmi.binary() is None else "failed"))
    else:
        kit.facts.update(gpu=facts["name"], driver=facts["driver_version"], memory_mib=facts["memory.total"])
        kit.gpu_free_mib = nvsmi._number(facts["memory.free"])
        rows += [("GPU", facts["name"]), ("driver", facts["driver_version"]),
                 ("memory", f"{facts['memory.total']} MiB, {facts['memory.free']} MiB free")]  # fmt: skip
    log = kit.work / "torch.log"
    done = subprocess.run([*py(), "-c", TORCH_FACTS], capture_output=True, text=True, timeout=kit.timeout(120),
                          cwd=REPO_ROOT, env=kit.env, check=False)  # fmt: skip
    log.write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0:
        raise KitError(f"torch does not import: {tail(log)}")
    torch_facts = json.loads(done.stdout.strip().splitlines()[-1])
    kit.facts.update(torch=torch_facts["torch"], torch_cuda=torch_facts["torch_cuda"])
    rows += [("torch", f"{torch_facts['torch']} (CUDA {torch_facts['torch_cuda']})"),
             ("CUDA available", torch_facts["cuda_available"])]  # fmt: skip
    if torch_facts["cuda_available"]:
        rows.append(("torch sees", f"{torch_facts['device']}, compute capability {torch_facts['capability']}, "
                     f"{torch_facts['multiprocessors']} SMs, {torch_facts['free_mib']:,} of "
                     f"{torch_facts['total_mib']:,} MiB free"))  # fmt: skip
        kit.gpu_free_mib = float(torch_facts["free_mib"])
    rows += [("python", platform.python_version()), ("CPUs", f"{os.cpu_count()} logical")]
    for name in VERSIONED:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        rows.append((name, version))
        kit.figure("host", name, "version", version)
    spec = importlib.util.find_spec("cockpit_training")
    rows.append(("cockpit_training from", spec.origin if spec else "not importable"))
    rows.append(("cockpit wheel", wheel_state()))
    reader_rows, problems = nvml_reading(kit)
    rows += reader_rows
    sec.lines += table(["what", "value"], rows)
    if not kit.s.smoke:
        if not torch_facts["cuda_available"]:
            problems.append("torch sees no CUDA device")
        if facts is None:
            problems.append("nvidia-smi gave no GPU facts")
    if problems:
        raise KitError("; ".join(problems))


def wheel_state() -> str:
    """Whether the cockpit wheel check.sh installed was built from this tree (prepare.sh wrote its
    source digest to SOURCE beside the wheels)."""
    folder = REPO_ROOT / os.environ.get(WHEELS, ".whl")
    recorded = folder / "SOURCE"
    if not recorded.exists():
        return f"no {folder.name}/SOURCE: the installed cockpit is used as it is"
    if recorded.read_text(encoding="utf-8").strip() == source_digest():
        return "built from this tree"
    return "BUILT FROM ANOTHER TREE: run benchmarks/gpu/prepare.sh again before the next GPU session"


def nvml_reading(kit: Kit) -> tuple[list[tuple[str, object]], list[str]]:
    """cockpit's own NVML reader (`cockpit.core.machine.nvml`) on the idle GPU for 2 s: the report rows and
    what is wrong with them (on a GPU machine)."""
    from cockpit.core.machine.nvml import open_gpu

    reader, reason = open_gpu()
    if reader is None:
        kit.figure("host", "nvml", "status", reason)
        return [("cockpit NVML", reason)], ([] if kit.s.smoke else [reason])
    try:
        samples: list[tuple[float, float]] = []
        reasons: set[str] = set()
        clocks: list[int] = []
        modes: list[str] = []
        began = time.monotonic()
        while time.monotonic() - began < 2.0:
            sample, util = reader.read()
            samples += util
            modes.append(sample.util_mode)
            reasons.update(sample.throttle_reasons)
            if sample.sm_clock_mhz is not None:
                clocks.append(sample.sm_clock_mhz)
            time.sleep(0.2)
        processes = reader.processes()
        period = reader.sample_period_s
    finally:
        reader.close()
    # The reader falls back to polling (one reading a tick) on a GPU without the sample buffer;
    # which path it took is the point of this reading: the buffer when most reads came from it.
    buffered = modes.count(UTIL_BUFFER) * 2 > len(modes)
    rate = len(samples) / 2.0
    kit.figure("host", "nvml", "buffered_samples", buffered)
    kit.figure("host", "nvml", "util_samples_per_s", rate, "Hz")
    kit.figure("host", "nvml", "sample_period", round(period * 1000, 1) if period else None, "ms")
    kit.figure("host", "nvml", "throttle_reasons_idle", " ".join(sorted(reasons)))
    rows: list[tuple[str, object]] = [
        ("cockpit NVML", f"{reader.info.name}, driver {reader.info.driver}"),
        ("utilization samples", f"{'NVML sample buffer' if buffered else 'polled (no sample buffer)'}, "
                                f"{rate:.1f} per s at idle, spaced {fmt(period * 1000 if period else None, 0, ' ms')}"),
        ("throttle reasons at idle", ", ".join(sorted(reasons)) or "none (gpu_idle is not counted)"),
        ("SM clock at idle", f"{min(clocks)}-{max(clocks)} MHz" if clocks else "-"),
        ("compute processes", f"{len(processes)} listed"),
    ]  # fmt: skip
    # No sample buffer is a finding about this GPU, not a failure: cockpit polls instead, by design.
    kit.headline.append(f"NVML utilization: {'the sample buffer' if buffered else 'no sample buffer, polled'} "
                        f"({rate:.1f} samples per s at idle) on {reader.info.name}")  # fmt: skip
    return rows, []


# ----- worker -----


@dataclass(frozen=True)
class WorkerResult:
    """One worker run's figures."""

    preset: str
    device: str | None
    tf32: bool | None
    startup_s: float | None
    sps: float | None
    rollout_sps: float | None
    train_s: float | None
    cycles: int
    peak_mib: float | None


def worker_figures(preset: str, events: Sequence[Event], peak_mib: float | None) -> WorkerResult:
    """A worker run's figures from its events: throughput over its whole cycles after the first
    (its warm-up), the rollout phases' rate and the train phases' mean length after the first."""
    started = last_started(events)
    starts = measure.rollout_starts(events)
    rate = measure.job_rate(events, starts[1][0], starts[-1][0]) if len(starts) >= 3 else measure.JobRate(0, None)
    phases = of_kind(events, PhaseEvent)
    rollouts, trains = [], []
    for a, b in itertools.pairwise(phases):
        if a.iteration == (0 if a.phase == "rollout" else 1):
            continue  # the first update (rollout 0, train 1) carries CUDA's and the allocator's start
        if a.phase == "rollout" and b.phase == "train" and b.t > a.t:
            rollouts.append((b.num_timesteps - a.num_timesteps) / (b.t - a.t))
        elif a.phase == "train" and b.phase == "rollout":
            trains.append(b.t - a.t)
    return WorkerResult(preset, started.device if started else None, started.tf32 if started else None,
                        started.startup_s if started else None, rate.sps,
                        statistics.fmean(rollouts) if rollouts else None,
                        statistics.fmean(trains) if trains else None, rate.cycles, peak_mib)  # fmt: skip


def check_worker(kit: Kit, sec: Section) -> None:
    """`python -m cockpit_training.worker --device cuda` with each preset for a few updates: SPS
    over the updates after the first, peak GPU memory (nvidia-smi, by the worker's pid), TF32."""
    results, problems = [], []
    for name in kit.s.presets:
        preset = load(name)
        job_dir = kit.work / f"worker-{name}"
        argv = [*py(), "-m", "cockpit_training.worker", "--preset", name, "--job-dir", str(job_dir),
                "--timesteps", str(kit.s.updates * preset.total_batch), "--device", kit.s.device]  # fmt: skip
        log = kit.work / f"worker-{name}.log"
        kit.keep_raw(log, f"worker/{name}.log")
        kit.keep_raw(job_dir / "events.jsonl", f"worker/{name}-events.jsonl")
        with nvsmi.ComputeApps(interval=0.5) as apps:
            try:
                code: int | str = kit.call(argv, log, timeout=kit.timeout(240.0))
            except KitError as exc:  # a hung preset is reported; the next one still runs
                code = str(exc)
        events = read_events(job_dir / "events.jsonl")
        started = last_started(events)
        result = worker_figures(name, events, apps.peak_mib(started.pid) if started and started.pid else None)
        results.append(result)
        finished = of_kind(events, FinishedEvent)
        if code != 0 or not finished or finished[-1].status != "done":
            problems.append(f"{name}: exit {code}, {'; '.join(job_errors({name: events})) or tail(log)}")
        if not kit.s.smoke and not (result.device or "").startswith("cuda"):
            problems.append(f"{name}: trained on {result.device}, not cuda")
        if not kit.s.smoke and result.tf32 is not True:
            problems.append(f"{name}: TF32 {'off' if result.tf32 is False else 'not reported'} on CUDA")
        for metric, value, unit in (("sps", result.sps, "steps/s"), ("rollout_sps", result.rollout_sps, "steps/s"),
                                    ("train_s", result.train_s, "s"), ("peak_gpu_mem", result.peak_mib, "MiB"),
                                    ("startup_s", result.startup_s, "s"), ("tf32", result.tf32, ""),
                                    ("device", result.device, "")):  # fmt: skip
            kit.figure("worker", name, metric, value, unit)
        kit.log(f"worker {name}: {fmt(result.sps, 0)} SPS, peak {fmt(result.peak_mib, 0)} MiB, TF32 {result.tf32}")
    sec.lines += table(
        ["preset", "device", "TF32", "SPS (whole cycles)", "cycles", "rollout SPS", "train s / update",
         "peak GPU MiB", "start-up s"],
        [(r.preset, r.device, r.tf32, fmt(r.sps, 0), r.cycles, fmt(r.rollout_sps, 0), fmt(r.train_s, 2),
          fmt(r.peak_mib, 0), fmt(r.startup_s, 1)) for r in results],
    )  # fmt: skip
    sec.lines.append("")
    sec.lines.append(f"{kit.s.updates} updates each; SPS counts the whole cycles after the first update, which "
                     "carries CUDA's start. Peak GPU memory is the worker process's, as `nvidia-smi "
                     "--query-compute-apps` listed it every 0.5 s"
                     + (" (skipped: no nvidia-smi)." if nvsmi.binary() is None else "."))  # fmt: skip
    shown = ", ".join(f"{r.preset} {fmt(r.sps, 0)} SPS" for r in results)
    tf32 = {r.tf32 for r in results}
    state = "on" if tf32 == {True} else "off" if tf32 == {False} else "not on in every worker"
    kit.headline.append(f"the worker on {kit.s.device}: {shown}; TF32 {state}")
    if problems:
        raise KitError("; ".join(problems))


# ----- run -----


class ThrottleWatch:
    """cockpit's NVML reader polled every 2 s beside a run for what samples.csv does not keep:
    throttle reasons, SM clock and power under load. Utilization is not read here; that is the
    run's own sampler's, which the check reads from gpu_util.csv."""

    def __init__(self) -> None:
        from cockpit.core.machine.nvml import open_gpu

        self.reader, _ = open_gpu()
        self.reasons: dict[str, int] = {}
        self.clocks: list[int] = []
        self.power: list[float] = []
        self.readings = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="throttle-watch", daemon=True)

    def __enter__(self) -> ThrottleWatch:
        if self.reader is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.reader is not None:
            self._thread.join(timeout=5)
            self.reader.close()

    def _poll(self) -> None:
        assert self.reader is not None
        while not self._stop.wait(2.0):
            try:
                sample = self.reader.read()[0]
            except Exception:  # a lost GPU shows in the run's own telemetry; this is only a side view
                return
            self.readings += 1
            for reason in sample.throttle_reasons:
                self.reasons[reason] = self.reasons.get(reason, 0) + 1
            if sample.sm_clock_mhz is not None:
                self.clocks.append(sample.sm_clock_mhz)
            if sample.power_w is not None:
                self.power.append(sample.power_w)


def read_job_memory(run_dir: Path) -> list[tuple[float, str, float | None, float | None]]:
    """job_samples.csv's (t, job, GPU memory MiB, SM %) rows."""
    path = RunDir(run_dir).job_samples
    rows: list[tuple[float, str, float | None, float | None]] = []
    if not path.exists():
        return rows
    with path.open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            with contextlib.suppress(KeyError, ValueError):
                mem = float(row["gpu_mem_mib"]) if row.get("gpu_mem_mib") else None
                sm = float(row["gpu_sm_percent"]) if row.get("gpu_sm_percent") else None
                rows.append((float(row["t"]), row["job"], mem, sm))
    return rows


CLOCK_SKEW_S = 5.0  # a utilization sample stamped further than this from time.time() is on another clock
BUFFER_HOLD_S = 60.0  # the buffered way of reading must hold this long under load
CONTEXT_OVERHEAD_MIB = 1536.0  # NVML's per-process figure adds the CUDA context to the allocator's
PMON_SM_POINTS = 15.0  # cockpit's per-job SM % mean against pmon's, in points
POLL_SHARE_MAX = 0.02  # the share of a run's time its utilization may be polled rather than buffered


def clock_problem(samples: Sequence[tuple[float, float]], now: float, stopped: float) -> str | None:
    """Check 1: gpu_util.csv's newest timestamp lies within `CLOCK_SKEW_S` of `time.time()` at the
    run's stop, and none is after `now` by more: the driver's microsecond stamps are Unix time.
    None when they are; the broken bound otherwise; "no samples" without any."""
    if not samples:
        return "no utilization samples in gpu_util.csv"
    newest = max(t for t, _ in samples)
    if newest > now + CLOCK_SKEW_S:
        return f"a utilization sample stamped {newest - now:.1f} s in the future (bound {CLOCK_SKEW_S:.0f} s)"
    if abs(stopped - newest) > CLOCK_SKEW_S:
        return (f"the newest utilization sample is {stopped - newest:.1f} s from time.time() at the run's stop "
                f"(bound {CLOCK_SKEW_S:.0f} s)")  # fmt: skip
    return None


def median_spacing(samples: Sequence[tuple[float, float]]) -> float | None:
    """Check 5: the median spacing of consecutive utilization samples, s (None under two)."""
    ts = sorted(t for t, _ in samples)
    gaps = [b - a for a, b in itertools.pairwise(ts) if b > a]
    return statistics.median(gaps) if gaps else None


def poll_share(util_read: str | None, shares: Mapping[str, float]) -> float | None:
    """The share of a run's sampled time whose utilization was not read from NVML's buffer (polled
    ticks: a GPU without the buffer, or a one-off error of `nvmlDeviceGetSamples` that costs that
    tick), from run.toml's `[[gpus]]`: `util_read_shares` when the way changed, else all the time
    in `util_read`. None when no way was recorded."""
    if shares:
        return max(0.0, 1.0 - shares.get(UTIL_BUFFER, 0.0))
    if util_read is None:
        return None
    return 0.0 if util_read == UTIL_BUFFER else 1.0


def buffer_problem(util_read: str | None, shares: Mapping[str, float], seconds: float) -> str | None:
    """Check 2: run.toml's `[[gpus]]` says utilization was read from NVML's sample buffer for the
    run of `seconds` under load, but for at most `POLL_SHARE_MAX` of its time (one-off sample-buffer
    errors, each costing one tick, not the check). None when it was; the broken bound otherwise."""
    share = poll_share(util_read, shares)
    if share is None:
        return f"utilization was read by no recorded way after {seconds:.0f} s"
    if share >= 1.0:
        return f"utilization was read by {util_read}, not NVML's buffer, after {seconds:.0f} s"
    if share > POLL_SHARE_MAX:
        kept = ", ".join(f"{m} {v:.1%}" for m, v in shares.items())
        return (f"the way of reading changed during the {seconds:.0f} s run: {kept}; not from the buffer "
                f"{share:.1%} of the time (bound {POLL_SHARE_MAX:.0%})")  # fmt: skip
    return None


def cuda_memory_problem(peak_reserved_mib: float | None, nvml_peak_mib: float | None) -> str | None:
    """Check 3: NVML's per-process peak against the worker's own allocator peak
    (`torch.cuda.max_memory_reserved()`): NVML's at least the allocator's (the context adds to it)
    and at most `CONTEXT_OVERHEAD_MIB` more. None when both hold or a figure is missing."""
    if peak_reserved_mib is None or nvml_peak_mib is None:
        return None
    if nvml_peak_mib < peak_reserved_mib:
        return f"NVML's {nvml_peak_mib:,.0f} MiB is under the allocator's {peak_reserved_mib:,.0f} MiB"
    if nvml_peak_mib - peak_reserved_mib > CONTEXT_OVERHEAD_MIB:
        return (f"NVML's {nvml_peak_mib:,.0f} MiB is {nvml_peak_mib - peak_reserved_mib:,.0f} MiB over the allocator's "
                f"{peak_reserved_mib:,.0f} MiB (bound {CONTEXT_OVERHEAD_MIB:,.0f} MiB of CUDA context)")  # fmt: skip
    return None


def cuda_peaks(events: Sequence[Event]) -> tuple[float | None, float | None]:
    """A job's newest allocator figures from its progress events, MiB: reserved now and the peak."""
    progress = [e for e in events if isinstance(e, ProgressEvent)]
    last = next((e for e in reversed(progress) if e.cuda_peak_bytes is not None), None)
    if last is None:
        return None, None
    reserved = last.cuda_reserved_bytes / 2**20 if last.cuda_reserved_bytes is not None else None
    return reserved, (last.cuda_peak_bytes or 0) / 2**20


@dataclass(frozen=True)
class SmComparison:
    """A job's SM % against pmon's over the seconds both have a sample of it: `seconds` compared,
    and each side's mean over them (None with no second compared). Left out: `no_pmon`, the
    seconds pmon printed "-" for (no sample of the process), and `no_cockpit`, those where cockpit
    read none (it counts a second without a sample as 0)."""

    seconds: int
    cockpit: float | None
    pmon: float | None
    no_pmon: int
    no_cockpit: int = 0

    @property
    def left_out(self) -> int:
        """The seconds of pmon's rows not compared."""
        return self.no_pmon + self.no_cockpit


def compare_sm(cockpit: Sequence[tuple[float, float]], pmon: Sequence[nvsmi.PmonRow]) -> SmComparison:
    """Check 4's pairing: each pmon row of the job's pid stamped T (a second, as dmon's) against
    cockpit's readings of the job (`(t, SM %)`, job_samples.csv) in [T-1, T), as `compare_util`
    pairs dmon's. A row without a figure ("-") is left out, and so is a second in which cockpit has
    no reading above 0: cockpit counts a second without a sample as 0, and its readings are taken
    once a second and carried by the ticks after, so its zeros may trail pmon's "-" by a second."""
    bins: dict[int, list[float]] = {}
    for t, sm in cockpit:
        if sm > 0:
            bins.setdefault(int(t // 1), []).append(sm)
    mine, theirs, no_pmon, no_cockpit = [], [], 0, 0
    for row in pmon:
        if row.sm is None:
            no_pmon += 1
            continue
        values = bins.get(int(row.t) - 1)
        if not values:
            no_cockpit += 1
            continue
        mine.append(statistics.fmean(values))
        theirs.append(row.sm)
    if not mine:
        return SmComparison(0, None, None, no_pmon, no_cockpit)
    return SmComparison(len(mine), statistics.fmean(mine), statistics.fmean(theirs), no_pmon, no_cockpit)


def sm_problem(cockpit_sm: float | None, pmon_sm: float | None) -> str | None:
    """Check 4: cockpit's mean SM % of a job within `PMON_SM_POINTS` of `nvidia-smi pmon`'s, over
    the seconds both have a sample (`compare_sm`)."""
    if cockpit_sm is None or pmon_sm is None:
        return None
    if abs(cockpit_sm - pmon_sm) > PMON_SM_POINTS:
        return f"cockpit's SM % mean {cockpit_sm:.1f} against pmon's {pmon_sm:.1f} (bound {PMON_SM_POINTS:.0f} points)"
    return None


def measured(kit: Kit, run: CockpitRun) -> bool:
    """Whether `run` has a measurement: every job past its first whole cycle (warm), then
    `--sweep-window` s and at least one more whole cycle of each."""
    events = run.events()
    warm = measure.warm_from(events)
    if warm is None:
        return False
    now = time.time()
    return now - warm >= kit.s.sweep_window and measure.aggregate(events, warm, now).min_cycles >= 1


def settle(kit: Kit, run: CockpitRun, budget: float) -> None:
    """Let `run` go on until it has a measurement (`measured`), `budget` s at most."""
    run.wait(max(0.0, budget), functools.partial(measured, kit, run))


def check_run(kit: Kit, sec: Section) -> None:
    """`cockpit run --jobs 4 --preset heavy --headless` for `--run-seconds` beside `nvidia-smi dmon
    -s um`: per-second utilization against dmon's, per-job memory against `--query-compute-apps`,
    utilization by phase, the train share, the sampler's and the cockpit process's cost, and the
    4-job point of the sweep."""
    import psutil

    seconds = min(kit.s.run_seconds, max(10.0, kit.left() - start_seconds(kit.s) - 5.0))
    jobs = kit.s.run_jobs
    run = CockpitRun(kit, f"run-{jobs}", ["--jobs", str(jobs), "--preset", kit.s.preset, "--timesteps",
                                          str(FOREVER), "--max-restarts", "0"])  # fmt: skip
    # Rows for the run's length and a little more: they are line-buffered, so stopping them loses none.
    dmon = nvsmi.Dmon(kit.work / "dmon.txt", int(seconds) + 2)
    pmon = nvsmi.Pmon(kit.work / "pmon.txt", int(seconds) + 2)
    kit.keep_raw(dmon.path, "run/dmon.txt")
    kit.keep_raw(pmon.path, "run/pmon.txt")
    with nvsmi.ComputeApps(interval=1.0) as apps, ThrottleWatch() as watch, dmon, pmon, running(run):
        has_dmon = dmon.start()
        has_pmon = pmon.start()
        assert run.proc is not None
        cockpit = psutil.Process(run.proc.pid)
        t_started = time.time()
        run.wait(min(15.0, seconds / 3))  # start-up: imports, CUDA, the first rollouts
        cpu0, t0 = sum(cockpit.cpu_times()[:2]), time.monotonic()
        run.wait(seconds - min(15.0, seconds / 3))
        settle(kit, run, min(kit.s.sweep_max, max(0.0, kit.left() - 10.0)))  # a short run may not be warm yet
        cpu1, t1 = sum(cockpit.cpu_times()[:2]), time.monotonic()
        code = run.stop()
        dmon_rows = dmon.finish(timeout=min(5.0, max(1.0, kit.left()))) if has_dmon else []
        pmon_rows = pmon.rows(timeout=min(5.0, max(1.0, kit.left()))) if has_pmon else []
    ran_s = (run.stopped_at or time.time()) - t_started
    run.keep_events()
    record = run.record()
    events = run.events()
    if code not in (0, 130):
        raise KitError(f"cockpit run exited with {code}: {tail(run.log)}")
    failed = [f"{j.id}: {j.error}" for j in record.jobs if j.error]
    if failed:
        raise KitError("jobs failed: " + "; ".join(failed))
    samples = measure.read_util_samples(RunDir(run.run_dir).gpu_util)
    stopped = run.stopped_at or time.time()
    lines, problems = sec.lines, []
    main = measure.Agreement(0, ())

    # Utilization, second by second, against dmon.
    lines.append("**Utilization, cockpit against `nvidia-smi dmon`, per second**")
    lines.append("")
    if not has_dmon:
        telemetry = record.gpu.telemetry if record.gpu else "-"
        seen = f" (cockpit read {len(samples)} NVML samples)" if samples else f"; cockpit's telemetry: {telemetry}"
        lines.append("skipped: no nvidia-smi" + seen)
        kit.figure("run", "util", "mad_vs_dmon", None, "points")
    else:
        ends = (samples[0][0], stopped) if samples else (None, None)
        by_lag = {lag: measure.compare_util(samples, dmon_rows, lag=lag, start=ends[0], end=ends[1])
                  for lag in (-2, -1, 0, 1, 2)}  # fmt: skip
        main = by_lag[0]
        kit.per_second = list(main.pairs)
        best = min((a for a in by_lag.values() if a.mad is not None), key=lambda a: a.mad or 0.0, default=None)
        lines += table(["shift (s)", "seconds", "mean abs diff (points)", "bias cockpit - dmon"],
                       [(a.lag, a.seconds, fmt(a.mad, 2), fmt(a.bias, 2)) for a in by_lag.values()])  # fmt: skip
        lines.append("")
        lines.append(f"Shift 0 is the definition: dmon's row stamped T against cockpit's NVML samples in [T-1, T). "
                     f"dmon gave {len(dmon_rows)} rows; cockpit {len(samples)} samples "
                     f"({len(samples) / max(1.0, stopped - samples[0][0]) if samples else 0:.1f} per s).")  # fmt: skip
        kit.figure("run", "util", "mad_vs_dmon", main.mad, "points")
        kit.figure("run", "util", "bias_vs_dmon", main.bias, "points")
        kit.figure("run", "util", "seconds_compared", main.seconds, "s")
        if best is not None:
            kit.figure("run", "util", "best_shift", best.lag, "s")
    if has_dmon and main.mad is None:  # reported after the rest of the run's figures
        problems.append(f"no second seen by both cockpit ({len(samples)} samples) and dmon ({len(dmon_rows)} rows)")
    elif has_dmon and main.mad is not None:
        kit.headline.append(
            f"cockpit's per-second GPU utilization against `nvidia-smi dmon`: mean absolute "
            f"difference {main.mad:.2f} points over {main.seconds} s ({jobs} {kit.s.preset} jobs)"
        )
    lines.append("")

    # Per-job GPU memory against nvidia-smi.
    lines.append("**GPU memory per job, cockpit (job_samples.csv, run.toml) against `--query-compute-apps`**")
    lines.append("")
    pids = {job: (s.pid if (s := last_started(evs)) else None) for job, evs in events.items()}
    memory = read_job_memory(run.run_dir)
    mem_rows = []
    for job_record in record.jobs:
        pid = pids.get(job_record.id)
        mine = [(t, m) for t, j, m, _ in memory if j == job_record.id and m is not None]
        sm = [s for _, j, _, s in memory if j == job_record.id and s is not None]
        theirs = [r for r in apps.rows if r.pid == pid and r.mib is not None]
        diffs = []
        for t, m in mine:
            near = min(theirs, key=lambda r: abs(r.t - t), default=None)
            if near is not None and abs(near.t - t) <= 1.0 and near.mib is not None:
                diffs.append(abs(m - near.mib))
        for t, m in mine:
            kit.memory_rows.append(("cockpit", run.name, job_record.id, pid, m, t))
        for r in theirs:
            kit.memory_rows.append(("nvidia-smi", run.name, job_record.id, pid, r.mib, r.t))
        peak_smi = apps.peak_mib(pid) if pid else None
        mem_rows.append((job_record.id, pid, job_record.peak_gpu_mem_mib, fmt(peak_smi, 0),
                         fmt(statistics.fmean(diffs) if diffs else None, 1), len(diffs),
                         fmt(statistics.fmean(sm) if sm else None, 1)))  # fmt: skip
        kit.figure("run", job_record.id, "peak_gpu_mem_cockpit", job_record.peak_gpu_mem_mib, "MiB")
        kit.figure("run", job_record.id, "peak_gpu_mem_nvidia_smi", peak_smi, "MiB")
        kit.figure("run", job_record.id, "gpu_mem_mean_abs_diff", statistics.fmean(diffs) if diffs else None, "MiB")
        kit.figure("run", job_record.id, "sm_percent_mean", statistics.fmean(sm) if sm else None, "%")
    lines += table(["job", "pid", "cockpit peak MiB", "nvidia-smi peak MiB", "mean abs diff MiB", "readings matched",
                    "cockpit SM % mean"], mem_rows)  # fmt: skip
    if not apps.available:
        lines.append("")
        lines.append("nvidia-smi columns skipped: no nvidia-smi.")
    lines.append("")

    problems += reading_checks(kit, sec, record, samples, stopped, ran_s)
    problems += per_process_checks(kit, sec, record, events, apps, pmon_rows, memory, pids)

    # Utilization by phase, the train share, the sampler's cost.
    util = record.utilization
    lines.append("**Utilization by phase, train share, and what the telemetry costs**")
    lines.append("")
    phase_rows = []
    for job_record in record.jobs:
        for phase in ("rollout", "train"):
            ph = job_record.phases.get(phase)
            phase_rows.append((job_record.id, phase, fmt(ph.seconds if ph else None, 1),
                               fmt(ph.gpu_util_mean if ph else None, 1),
                               fmt(ph.cpu_percent_mean if ph else None, 1)))  # fmt: skip
    lines += table(["job", "phase", "seconds", "GPU % mean", "job CPU % mean"], phase_rows)
    lines.append("")
    cpu_per_min = (cpu1 - cpu0) / max(1e-9, t1 - t0) * 60
    u = util or UtilizationRecord(sampler_ticks=0)
    share = u.train_share * 100 if u.train_share is not None else None
    clocks = f"{min(watch.clocks)}-{max(watch.clocks)} MHz" if watch.clocks else "- MHz"
    reasons = ", ".join(f"{k} x{v}" for k, v in sorted(watch.reasons.items()))
    summary = [
        ("GPU % mean, p50, p95", f"{fmt(u.gpu_util_mean)}, {fmt(u.gpu_util_p50)}, {fmt(u.gpu_util_p95)}"),
        ("GPU % while some job trains / while none does",
         f"{fmt(u.gpu_util_while_training)} / {fmt(u.gpu_util_while_not_training)}"),
        ("train share (time with a job training)", fmt(share, 1, " %")),
        ("sampler tick, mean CPU time", f"{fmt(u.sampler_cost_ms_mean, 3, ' ms')} over {u.sampler_ticks} ticks"),
        ("cockpit process CPU", f"{cpu_per_min:.2f} CPU-s per minute ({cpu_per_min / 60 * 100:.2f} % of a core)"),
        ("throttle reasons under load (cockpit's reader, every 2 s)",
         reasons or ("none" if watch.readings else "- (no NVML)")),
        ("SM clock / power under load", f"{clocks}, {fmt(max(watch.power) if watch.power else None, 0, ' W')} peak"),
    ]  # fmt: skip
    lines += table(["what", "value"], summary)
    for metric, value, unit in (
        ("gpu_util_mean", util.gpu_util_mean if util else None, "%"),
        ("gpu_util_while_training", util.gpu_util_while_training if util else None, "%"),
        ("gpu_util_while_not_training", util.gpu_util_while_not_training if util else None, "%"),
        ("train_share", util.train_share if util else None, ""),
        ("sampler_cost_ms_mean", util.sampler_cost_ms_mean if util else None, "ms"),
        ("cockpit_cpu_s_per_min", cpu_per_min, "CPU-s/min"),
    ):
        kit.figure("run", "run", metric, value, unit)

    # The run's throughput: the sweep's point for this many jobs.
    warm = measure.warm_from(events)
    agg = measure.aggregate(events, warm, stopped) if warm is not None else None
    window_util = measure.util_between(samples, warm, stopped) if warm is not None else None
    lines.append("")
    lines.append(f"Aggregate throughput over whole cycles after every job's first: {fmt(agg.sps if agg else None, 0)} "
                 f"SPS ({jobs} jobs, {agg.min_cycles if agg else 0}+ cycles each, "
                 f"{fmt(stopped - warm if warm else None, 0)} s); GPU {fmt(window_util)} % meanwhile.")  # fmt: skip
    kit.figure("run", "run", "aggregate_sps", agg.sps if agg else None, "steps/s")
    kit.sweep[jobs] = (agg.sps if agg else None, window_util)
    kit.sweep_rows.append(sweep_row(jobs, kit.s.preset, agg, window_util, "run"))
    if problems:
        raise KitError("; ".join(problems))


def reading_checks(kit: Kit, sec: Section, record: RunRecord, samples: Sequence[tuple[float, float]], stopped: float,
                   ran_s: float) -> list[str]:  # fmt: skip
    """Checks 1, 2 and 5 of the run: the samples' clock, the buffered way of reading holding under
    load, and the sample spacing; their lines and figures, and the bounds broken (none in a smoke,
    where they are skipped with the reason)."""
    lines = sec.lines
    problems: list[str] = []
    lines.append("**How utilization was read: the samples' clock, the buffer under load, the sample spacing**")
    lines.append("")
    gpu = record.gpus[0] if record.gpus else None
    spacing = median_spacing(samples)
    kit.figure("run", "util", "sample_spacing_median", round(spacing * 1000, 1) if spacing else None, "ms")
    kit.figure("run", "util", "sample_period_recorded", gpu.util_sample_period_ms if gpu else None, "ms")
    kit.figure("run", "util", "util_read", gpu.util_read if gpu else None, "")
    share = poll_share(gpu.util_read, gpu.util_read_shares) if gpu else None
    # Rounded once, so the report's line and figures.csv show the same share.
    polled = round(share, 4) if share is not None else None
    kit.figure("run", "util", "util_read_poll_share", polled, "")
    newest = max((t for t, _ in samples), default=None)
    kit.figure("run", "util", "newest_sample_to_stop", round(stopped - newest, 3) if newest else None, "s")
    if kit.s.smoke:
        lines.append("skipped in a CPU smoke: no GPU, so no NVML samples to hold to a clock, a buffer or a spacing.")
        lines.append("")
        return problems
    hold = min(BUFFER_HOLD_S, ran_s)
    shortened = ""
    if hold < BUFFER_HOLD_S:
        shortened = f" (shortened from {BUFFER_HOLD_S:.0f} s to the run's length under --deadline)"
    checks = [
        (f"samples within {CLOCK_SKEW_S:.0f} s of time.time()", clock_problem(samples, time.time(), stopped)),
        (f"buffer held {hold:.0f} s under load{shortened}, polled at most {POLL_SHARE_MAX:.0%} of the time "
         f"(polled {fmt(polled * 100 if polled is not None else None, 1, ' %')})",
         buffer_problem(gpu.util_read if gpu else None, dict(gpu.util_read_shares) if gpu else {}, ran_s)),
        ("sample spacing measured", None if spacing is not None else "fewer than two samples"),
    ]  # fmt: skip
    lines += table(["check", "result"], [(name, why or "ok") for name, why in checks])
    lines.append("")
    lines.append(f"Median spacing of gpu_util.csv's samples {fmt(spacing * 1000 if spacing else None, 1, ' ms')}; "
                 f"run.toml says {fmt(gpu.util_sample_period_ms if gpu else None, 1, ' ms')} "
                 f"({gpu.util_read if gpu and gpu.util_read else '-'}).")  # fmt: skip
    lines.append("")
    return [why for _, why in checks if why]


JobMemoryRows = Sequence[tuple[float, str, float | None, float | None]]


def per_process_checks(kit: Kit, sec: Section, record: RunRecord, events: dict[str, list[Event]],
                       apps: nvsmi.ComputeApps, pmon_rows: Sequence[nvsmi.PmonRow], memory: JobMemoryRows,
                       pids: dict[str, int | None]) -> list[str]:  # fmt: skip
    """Checks 3 and 4 of the run: each worker's own CUDA memory against NVML's per-process figure,
    and cockpit's per-job SM % against `nvidia-smi pmon`; their table and figures, and the bounds
    broken (none in a smoke, where they are skipped with the reason)."""
    lines, problems, rows = sec.lines, [], []
    lines.append("**Per process: the worker's own CUDA memory against NVML's, cockpit's SM % against pmon's**")
    lines.append("")
    for job in record.jobs:
        pid = pids.get(job.id)
        reserved, peak = cuda_peaks(events.get(job.id, []))
        nvml_peak = apps.peak_mib(pid) if pid else None
        sm = [(t, s) for t, j, _, s in memory if j == job.id and s is not None]
        theirs = [r for r in pmon_rows if r.pid == pid]
        both = compare_sm(sm, theirs)
        mine, pmon_sm = both.cockpit, both.pmon
        kit.figure("run", job.id, "cuda_reserved_worker", reserved, "MiB")
        kit.figure("run", job.id, "cuda_peak_reserved_worker", peak, "MiB")
        kit.figure("run", job.id, "gpu_mem_peak_nvml_process", nvml_peak, "MiB")
        kit.figure("run", job.id, "sm_percent_mean_pmon", pmon_sm, "%")
        kit.figure("run", job.id, "sm_seconds_compared", both.seconds, "s")
        kit.figure("run", job.id, "sm_seconds_without_pmon_sample", both.no_pmon, "s")
        kit.figure("run", job.id, "sm_seconds_without_cockpit_sample", both.no_cockpit, "s")
        found = [why for why in (cuda_memory_problem(peak, nvml_peak), sm_problem(mine, pmon_sm)) if why]
        if not kit.s.smoke:
            if peak is None:
                found.append("no cuda_peak_bytes in its progress events")
            if not theirs and pmon_rows:
                found.append("pmon never saw its pid")
            elif theirs and not both.seconds:
                found.append(f"no second with a sample of it in both cockpit and pmon ({both.no_pmon} without pmon's, "
                             f"{both.no_cockpit} without cockpit's)")  # fmt: skip
        problems += [f"job {job.id}: {why}" for why in found]
        rows.append((job.id, pid, fmt(peak, 0), fmt(nvml_peak, 0), fmt(mine, 1), fmt(pmon_sm, 1),
                     both.seconds, both.no_pmon, both.no_cockpit, "; ".join(found) or "ok"))  # fmt: skip
    lines += table(["job", "pid", "allocator peak MiB", "NVML peak MiB", "cockpit SM %", "pmon SM %",
                    "seconds compared", "left out: pmon \"-\"", "left out: cockpit 0", "result"], rows)  # fmt: skip
    lines.append("")
    if kit.s.smoke:
        lines.append("skipped in a CPU smoke: no CUDA memory, no NVML processes, no pmon.")
        lines.append("")
        return []
    lines.append(f"Bounds: NVML's peak at least the allocator's and at most {CONTEXT_OVERHEAD_MIB:,.0f} MiB more (the "
                 f"CUDA context); SM % within {PMON_SM_POINTS:.0f} points of pmon's, both means over the seconds where "
                 "both have a sample of the job (pmon prints \"-\" for a second without one, which cockpit counts "
                 "as 0: those seconds are left out, and counted).")  # fmt: skip
    lines.append("")
    return problems


# ----- sweep -----


def sweep_row(
    jobs: int, preset: str, agg: measure.Aggregate | None, util: float | None, source: str, mps: bool = False
) -> dict[str, object]:
    """One sweep.csv row: `source` is the check that measured it, `mps` whether its jobs were MPS
    clients."""
    per_job = " ".join(f"{r.sps:.0f}" if r.sps is not None else "-" for r in agg.jobs.values()) if agg else ""
    return {"jobs": jobs, "preset": preset, "mps": mps, "source": source,
            "window_s": round(agg.end - agg.start, 1) if agg else "", "min_cycles": agg.min_cycles if agg else "",
            "aggregate_sps": round(agg.sps, 1) if agg and agg.sps is not None else "",
            "per_job_sps": per_job, "gpu_util_mean": round(util, 2) if util is not None else ""}  # fmt: skip


@dataclass(frozen=True)
class Point:
    """One measured point of the sweep or the mps check: the run, its exit code, its aggregate
    throughput and GPU utilization over the window (None where not measured), and what went
    wrong (empty when nothing did)."""

    run: CockpitRun
    code: int
    agg: measure.Aggregate | None
    util: float | None
    problems: tuple[str, ...]

    @property
    def sps(self) -> float | None:
        """The aggregate SPS, or None."""
        return self.agg.sps if self.agg else None


def point_run(kit: Kit, name: str, jobs: int, *extra: str) -> CockpitRun:
    """The run of one point: `cockpit run --jobs N --preset P --timesteps FOREVER --max-restarts 0`
    and `extra`, in the work folder as `name`."""
    return CockpitRun(kit, name, ["--jobs", str(jobs), "--preset", kit.s.preset, "--timesteps", str(FOREVER),
                                  "--max-restarts", "0", *extra])  # fmt: skip


def measure_point(kit: Kit, run: CockpitRun, jobs: int) -> Point:
    """One point, the sweep's and the mps check's alike: `run` (of `jobs` jobs, `point_run`) until
    it has a measurement (`settle`; at most `sweep_max` s, and 20 s short of the deadline), then
    stopped: aggregate SPS over whole cycles once every job has finished its first, and GPU
    utilization meanwhile. KitError when the run exits by itself before it is stopped (its log's
    last lines)."""
    budget = min(kit.s.sweep_max, max(0.0, kit.left() - 5.0))  # 5 s: the stop
    with running(run):
        settle(kit, run, budget)
        code = run.stop()
    run.keep_events()
    events = run.events()
    errors = job_errors(events)
    problems = []
    if code not in (0, 130) or errors:
        problems.append(f"{jobs} job(s): exit {code}; {'; '.join(errors) or tail(run.log)}")
    warm = measure.warm_from(events)
    stopped = run.stopped_at or time.time()
    agg = measure.aggregate(events, warm, stopped) if warm is not None else None
    samples = measure.read_util_samples(RunDir(run.run_dir).gpu_util)
    util = measure.util_between(samples, warm, stopped) if warm is not None else None
    if agg is None or agg.sps is None:
        problems.append(f"{jobs} job(s): no whole cycle of every job in {budget:.0f} s (raise --sweep-window)")
    return Point(run, code, agg, util, tuple(problems))


def check_sweep(kit: Kit, sec: Section) -> None:
    """Runs of 1, 2, 4 and 8 heavy jobs (the run check's point reused): aggregate SPS over whole
    cycles once every job has finished its first, and GPU utilization meanwhile; then the seeds'
    claim that 4 jobs keep the GPU 70-90 % busy."""
    problems: list[str] = []
    not_run = []
    for jobs in kit.s.sweep_jobs:
        if jobs in kit.sweep and any(r["jobs"] == jobs and r["source"] == "run" for r in kit.sweep_rows):
            continue  # measured by the run check, longer than a sweep point
        if kit.left() < sweep_point(kit.s):
            not_run.append(jobs)  # the plan ran long: a gap in the figures, not a fault of cockpit's
            continue
        point = measure_point(kit, point_run(kit, f"sweep-{jobs}", jobs), jobs)
        problems += point.problems
        kit.sweep[jobs] = (point.sps, point.util)
        kit.sweep_rows.append(sweep_row(jobs, kit.s.preset, point.agg, point.util, "sweep"))
        kit.log(f"sweep {jobs} job(s): {fmt(point.sps, 0)} SPS, GPU {fmt(point.util)} %")
    rows = []
    one = kit.sweep.get(1, (None, None))[0]
    for jobs in sorted(kit.sweep):
        sps, util = kit.sweep[jobs]
        # The newest row without MPS: an mps check run earlier may have measured this count too.
        row = next((r for r in reversed(kit.sweep_rows) if r["jobs"] == jobs and not r["mps"]), {})
        rows.append((jobs, fmt(sps, 0), fmt(sps / one if sps and one else None, 2, "x"), fmt(util),
                     row.get("window_s", "-"), row.get("min_cycles", "-"), row.get("source", "-")))  # fmt: skip
        kit.figure("sweep", f"{jobs} jobs", "aggregate_sps", sps, "steps/s")
        kit.figure("sweep", f"{jobs} jobs", "gpu_util_mean", util, "%")
    sec.lines += table(["jobs", "aggregate SPS", "vs 1 job", "GPU % mean", "window s", "cycles (fewest)",
                        "measured in"], rows)  # fmt: skip
    sec.lines.append("")
    if not_run:
        sec.lines += [f"Not run, too near --deadline: {', '.join(map(str, not_run))} job(s).", ""]
    four = kit.sweep.get(4, (None, None))[1]
    if kit.s.smoke:
        sec.lines.append("The seeds' claim (4 heavy jobs keep the GPU 70-90 % busy): skipped, no GPU in a CPU smoke.")
    elif kit.s.preset != "heavy":
        sec.lines.append(f"The seeds' claim is about heavy jobs; this sweep ran {kit.s.preset}: not judged.")
    elif four is None:
        sec.lines.append("The seeds' claim (4 heavy jobs keep the GPU 70-90 % busy): no 4-job utilization measured.")
    else:
        verdict = "within" if CLAIM[0] <= four <= CLAIM[1] else ("below" if four < CLAIM[0] else "above")
        single = kit.sweep.get(1, (None, None))[1]
        sec.lines.append(f"The seeds' claim, \"4 x 25 % = 70-90 %\": 1 heavy job kept the GPU {fmt(single)} % busy, "
                         f"4 jobs {four:.1f} %: {verdict} the claimed range.")  # fmt: skip
        kit.figure("sweep", "claim", "four_jobs_util_vs_70_90", verdict)
        kit.headline.append(f"4 heavy jobs: GPU {four:.1f} % busy (the seeds claimed 70-90 %: {verdict})")
    if problems:
        raise KitError("; ".join(problems))


# ----- mps -----


@dataclass(frozen=True)
class MpsRow:
    """One job count of the mps check: aggregate SPS and GPU % without MPS and with it (None where
    not measured)."""

    jobs: int
    sps_without: float | None
    sps_with: float | None
    util_without: float | None
    util_with: float | None

    @property
    def ratio(self) -> float | None:
        """SPS with MPS / SPS without; None unless both were measured and without's is above 0."""
        if self.sps_with is None or not self.sps_without:
            return None
        return self.sps_with / self.sps_without


Figures = dict[int, tuple[float | None, float | None]]  # jobs -> (aggregate SPS, GPU %), as `Kit.sweep`


def mps_summary(counts: Sequence[int], without: Figures, with_mps: Figures) -> tuple[list[MpsRow], MpsRow | None]:
    """The mps check's table, a pure function of the figures: one row per job count in `counts`
    (each once, in their order), without MPS from `without` and with it from `with_mps`; and the
    row with the best ratio (the fewest jobs among equals), None when no count has one."""
    rows = []
    for jobs in dict.fromkeys(counts):
        sps_without, util_without = without.get(jobs, (None, None))
        sps_with, util_with = with_mps.get(jobs, (None, None))
        rows.append(MpsRow(jobs, sps_without, sps_with, util_without, util_with))
    rated = [r for r in rows if r.ratio is not None]
    best = max(rated, key=lambda r: r.ratio or 0.0, default=None)  # max keeps the first of equals
    return rows, best


# Every refusal of `--mps` (`cockpit.core.machine.mps_daemon.refusal`) ends so; a daemon that would not
# start ends otherwise, and is a failure rather than a machine that cannot use MPS.
MPS_REFUSED = "run without --mps"


def mps_refusal_line(run: CockpitRun) -> str | None:
    """cockpit's own one line refusing `--mps` (exit 2, `cockpit run: error: --mps: ... run without
    --mps`), or None when the run did not exit so."""
    if run.proc is None or run.proc.poll() != 2 or not run.log.exists():
        return None
    lines = run.log.read_text(encoding="utf-8", errors="replace").splitlines()
    return next((line.strip() for line in reversed(lines)
                 if "error: --mps:" in line and line.strip().endswith(MPS_REFUSED)), None)  # fmt: skip


def mps_record_problem(record: RunRecord) -> str | None:
    """What is wrong with an `--mps` run's run.toml: None when its `[config]` says `mps = true`."""
    return None if record.config.mps else "run.toml's [config] does not say mps = true"


def check_mps(kit: Kit, sec: Section) -> None:
    """Each job count of the sweep as the sweep runs it, with `--mps`: aggregate SPS and GPU
    utilization with MPS beside the sweep's without it (measured here where no earlier check of
    this kit run did, so that both sides come from one run on one machine); run.toml of each MPS
    run must say so. A machine that cannot use MPS is skipped with cockpit's own refusal."""
    if kit.s.smoke:
        raise Skipped("no GPU; MPS needs one")
    with_mps: Figures = {}
    problems: list[str] = []
    not_run = []
    for jobs in dict.fromkeys(mps_counts(kit.s)):
        if kit.left() < sweep_point(kit.s):
            not_run.append(jobs)  # the plan ran long: a gap in the figures, not a fault of cockpit's
            continue
        # With MPS first: a machine that refuses it costs no run without it.
        run = point_run(kit, f"mps-{jobs}", jobs, "--mps")
        try:
            point = measure_point(kit, run, jobs)
        except KitError as exc:
            refused = mps_refusal_line(run)
            if refused is not None:
                raise Skipped(refused) from exc
            raise
        problems += [f"with --mps, {why}" for why in point.problems]
        try:
            why = mps_record_problem(run.record())
        except KitError as exc:
            why = str(exc)
        if why:
            problems.append(f"{jobs} job(s) with --mps: {why}")
        with_mps[jobs] = (point.sps, point.util)
        kit.sweep_rows.append(sweep_row(jobs, kit.s.preset, point.agg, point.util, "mps", mps=True))
        kit.log(f"mps {jobs} job(s): {fmt(point.sps, 0)} SPS, GPU {fmt(point.util)} %")
        if jobs not in kit.sweep and kit.left() >= sweep_point(kit.s):
            plain = measure_point(kit, point_run(kit, f"mps-{jobs}-without", jobs), jobs)
            problems += [f"without --mps, {why}" for why in plain.problems]
            kit.sweep[jobs] = (plain.sps, plain.util)
            kit.sweep_rows.append(sweep_row(jobs, kit.s.preset, plain.agg, plain.util, "mps"))
            kit.log(f"mps {jobs} job(s) without it: {fmt(plain.sps, 0)} SPS, GPU {fmt(plain.util)} %")
    rows, best = mps_summary(mps_counts(kit.s), kit.sweep, with_mps)
    table_rows = []
    for r in rows:
        source = next((x["source"] for x in reversed(kit.sweep_rows) if x["jobs"] == r.jobs and not x["mps"]), None)
        table_rows.append((r.jobs, fmt(r.sps_without, 0), fmt(r.sps_with, 0), fmt(r.ratio, 2, "x"),
                           fmt(r.util_without), fmt(r.util_with), source))  # fmt: skip
        for metric, value, unit in (("sps_without", r.sps_without, "steps/s"), ("sps_with", r.sps_with, "steps/s"),
                                    ("with_vs_without", r.ratio, "x"), ("gpu_util_without", r.util_without, "%"),
                                    ("gpu_util_with", r.util_with, "%")):  # fmt: skip
            kit.figure("mps", f"{r.jobs} jobs", metric, value, unit)
    sec.lines += table(["jobs", "SPS without MPS", "SPS with MPS", "with / without", "GPU % without",
                        "GPU % with", "without measured in"], table_rows)  # fmt: skip
    sec.lines.append("")
    sec.lines.append(f"With MPS, each count is a sweep point (`--sweep-window` {kit.s.sweep_window:.0f} s after every "
                     "job's first whole cycle). Without it is the figure of the check named beside it, in this kit "
                     "run on this GPU: the sweep's, the run check's (a longer window), or this check's own sweep "
                     "point where no earlier check measured that count.")  # fmt: skip
    if not_run:
        sec.lines += ["", f"Not run, too near --deadline: {', '.join(map(str, not_run))} job(s)."]
    if best is not None and best.ratio is not None:
        kit.figure("mps", "best", "with_vs_without", best.ratio, "x")
        kit.figure("mps", "best", "jobs", best.jobs)
        kit.headline.append(f"MPS: at best {best.ratio:.2f}x the aggregate SPS without it, at {best.jobs} "
                            f"{kit.s.preset} job(s) ({fmt(best.sps_with, 0)} against {fmt(best.sps_without, 0)} "
                            "SPS)")  # fmt: skip
    if problems:
        raise KitError("; ".join(problems))


# ----- oom -----


OOM_WIDTH, OOM_DEPTH, OOM_ENVS = 4096, 16, 256


def oom_preset(free_mib: float) -> dict[str, Any]:
    """A preset whose one minibatch (the whole rollout) needs about twice `free_mib` of GPU memory
    for its activations, while its network (16 x 4096 wide, ~1 GiB a net) fits any card: the
    batch, not the model, runs out of memory, in the first train phase.

    Activation bound: the policy and value nets each keep one width-wide float32 tensor per layer
    and sample for the backward pass, 2 x 16 x 4096 x 4 bytes = 512 KiB a sample."""
    per_sample = 2 * OOM_DEPTH * OOM_WIDTH * 4
    samples = 2 * free_mib * 2**20 / per_sample
    n_steps = max(8, -(-int(samples) // OOM_ENVS))
    return {"description": "benchmarks/gpu: a batch too big for the card", "env": "LunarLander-v3",
            "n_envs": OOM_ENVS, "n_steps": n_steps, "batch_size": OOM_ENVS * n_steps, "n_epochs": 1,
            "net_arch": [OOM_WIDTH] * OOM_DEPTH, "checkpoint_every": 100_000_000}  # fmt: skip


def halving_advice(run_dir: Path) -> tuple[str, str, str] | None:
    """The advisor's batch-size change for a run whose jobs hit CUDA out-of-memory, as `cockpit
    recommend --from RUN_DIR` gives it: (current, suggested, reason), or None without one."""
    from cockpit.commands.recommend import measurements_from_run
    from cockpit.contract.advice import AdviceSetting
    from cockpit.core.sizing.advisor import advise
    from cockpit.core.sizing.starting_point import resolve_preset, this_machine

    recorded, measured = measurements_from_run(run_dir)
    machine = this_machine()
    preset = resolve_preset(recorded.config.preset, recorded.config.env, machine)
    for item in advise(machine, preset, recorded.config.jobs, measured, None):
        if item.setting == AdviceSetting.BATCH_SIZE and "out of memory" in item.reason:
            return item.current, item.suggested, item.reason
    return None


def check_oom(kit: Kit, sec: Section) -> None:
    """A job whose batch needs twice the card's free memory: it must fail with `cuda_oom`, and
    `cockpit recommend --from` its run must advise half the batch."""
    if kit.s.smoke:
        raise Skipped("no GPU memory to exhaust on the CPU")
    # Free now, as nvidia-smi says; else as torch said in the host check.
    free = nvsmi._number((nvsmi.gpu_facts() or {}).get("memory.free", "-")) or kit.gpu_free_mib
    if free is None:
        raise KitError("the card's free memory is unknown (no nvidia-smi, no torch reading)")
    raw = oom_preset(free)
    preset_file = kit.work / "oom.toml"
    preset_file.write_text(tomli_w.dumps(raw), encoding="utf-8")
    kit.keep_raw(preset_file, "oom/oom.toml")
    run = CockpitRun(kit, "oom", ["--jobs", "1", "--preset", str(preset_file), "--timesteps",
                                  str(raw["batch_size"]), "--max-restarts", "0"])  # fmt: skip
    with running(run):
        code = run.wait_exit(kit.timeout(240.0))
    run.keep_events()
    record = run.record()
    (job,) = record.jobs
    estimate_gib = raw["batch_size"] * 2 * OOM_DEPTH * OOM_WIDTH * 4 / 2**30
    sec.lines += table(["what", "value"], [
        ("free GPU memory before", f"{free:,.0f} MiB"),
        ("batch (one minibatch = the rollout)", f"{raw['batch_size']:,} samples, net {OOM_DEPTH} x {OOM_WIDTH}"),
        ("activations needed (lower bound)", f"{estimate_gib:,.0f} GiB"),
        ("job status", f"{job.status.value}: {job.error or '-'}"),
        ("cockpit run exit", code),
    ])  # fmt: skip
    kit.figure("oom", "job", "error", job.error)
    types = [e.type for evs in run.events().values() for e in of_kind(evs, ErrorEvent)]
    if "cuda_oom" not in types:
        raise KitError(f"expected a cuda_oom error event, got {types or 'none'}; the job {job.status.value}: "
                       f"{job.error or 'no error'}")  # fmt: skip
    out = kit.work / "oom-recommend.txt"
    kit.keep_raw(out, "oom/recommend.txt")
    code = kit.call([*py(), "-m", "cockpit", "recommend", "--from", str(run.run_dir), "--no-probe"], out,
                    timeout=kit.timeout(120.0))  # fmt: skip
    advice = halving_advice(run.run_dir)
    sec.lines.append("")
    sec.lines.append(f"`cockpit recommend --from` the run (exit {code}): " + (
        f"batch_size {advice[0]} -> {advice[1]} ({advice[2]})" if advice else "no batch-size advice"))  # fmt: skip
    kit.figure("oom", "advice", "batch_size", f"{advice[0]} -> {advice[1]}" if advice else None)
    if code != 0 or advice is None:
        raise KitError(f"recommend --from the OOM run: exit {code}, advice {advice}")
    if int(advice[1]) > int(advice[0]) // 2:
        raise KitError(f"the advice does not halve the batch: {advice[0]} -> {advice[1]}")


# ----- probe: recommend and tune -----


TUNE_NOTE = re.compile(r"([\d,]+) SPS with (\d+) parallel job")


def tune_pick(path: Path) -> tuple[float, int, Preset]:
    """The SPS, jobs and preset `cockpit tune --out PATH` wrote (the note in its description);
    KitError when the file says neither."""
    preset = load(str(path))
    match = TUNE_NOTE.search(preset.description)
    if match is None:
        raise KitError(f"{path.name}: no 'N SPS with J parallel job(s)' in its description {preset.description!r}")
    return float(match.group(1).replace(",", "")), int(match.group(2)), preset


def probe_record(kit: Kit) -> dict[str, Any] | None:
    """The probe's record in the kit's own cache (costs.toml), or None when none was written."""
    path = kit.work / "cache" / "cockpit" / "costs.toml"
    if not path.exists():
        return None
    entries = list(tomllib.loads(path.read_text(encoding="utf-8")).values())
    return entries[-1] if entries and isinstance(entries[-1], dict) else None


PROBE_FIGURES = ("device", "step_overhead_us", "env_policy_us", "env_step_us", "train_sample_us", "train_epoch_us",
                 "setup_s", "import_s", "busy_factor", "shared_factor", "processes_timed")  # fmt: skip


def check_probe(kit: Kit, sec: Section) -> None:
    """`cockpit recommend` with a fresh cache (so its probe runs, on CUDA here): the probe's costs,
    its time and recommend's pick; then a short `cockpit tune --budget` on those costs (its default
    36 s is one trial, of recommend's pick: the pick's SPS), against the best of the sweep, and the
    overlap model's predictions against the sweep."""
    rows: list[tuple[str, object]] = []
    try:
        probe_and_tune(kit, rows)
    finally:  # what was measured before a failure is reported with it
        sec.lines += table(["what", "value"], rows)


def probe_and_tune(kit: Kit, rows: list[tuple[str, object]]) -> None:
    """`check_probe`'s work, its report rows appended to `rows` as they are known."""
    from cockpit.core.sizing.cost_probe import cached_costs
    from cockpit.core.sizing.overlap import speed_of
    from cockpit.core.sizing.starting_point import resolve_preset, static_pick, this_machine

    out = kit.work / "recommend.txt"
    kit.keep_raw(out, "probe/recommend.txt")
    argv = [*py(), "-m", "cockpit", "recommend", "--preset", kit.s.preset, *(["--no-probe"] if kit.s.smoke else [])]
    began = time.monotonic()
    code = kit.call(argv, out, timeout=kit.timeout(300.0))
    took = time.monotonic() - began
    if code != 0:
        raise KitError(f"cockpit recommend exited {code}: {tail(out)}")
    machine = this_machine()
    preset = resolve_preset(kit.s.preset, None, machine)
    rows.append(("recommend", f"{took:.1f} s" + (" (--no-probe)" if kit.s.smoke else ", its first probe included")))
    kit.figure("probe", "recommend", "seconds", took, "s")
    record = probe_record(kit)
    kit.keep_raw(kit.work / "cache" / "cockpit" / "costs.toml", "probe/costs.toml")
    costs = None
    if kit.s.smoke:
        rows.append(("probe", "skipped in a CPU smoke: it takes 20-40 s on 2 cores"))
    elif record is None:
        raise KitError(f"recommend left no measured costs: {tail(out)}")
    else:
        for key in PROBE_FIGURES:
            rows.append((f"probe {key}", record.get(key, "-")))
            kit.figure("probe", "costs", key, record.get(key))
        costs = cached_costs(preset, machine.gpu_name)
    jobs, n_envs = static_pick(machine, preset, costs=costs)
    rows.append(("recommend's pick", f"{jobs} job(s) x {n_envs} envs of {preset.name}"))
    kit.figure("probe", "recommend", "pick_jobs", jobs)
    kit.figure("probe", "recommend", "pick_n_envs", n_envs)
    best = max(((n, v[0]) for n, v in kit.sweep.items() if v[0] is not None), key=lambda nv: nv[1], default=None)
    if costs is not None and kit.sweep:
        model = {n: speed_of(preset, costs, n, machine.physical_cores).fleet_sps for n in sorted(kit.sweep)}
        rows.append(("overlap model vs sweep", ", ".join(
            f"{n} job(s) {model[n]:,.0f} predicted / {fmt(kit.sweep[n][0], 0)} measured" for n in model)))  # fmt: skip
        for n, predicted in model.items():
            kit.figure("probe", f"{n} jobs", "predicted_sps", predicted, "steps/s")
    if kit.s.smoke:
        rows.append(
            ("cockpit tune", "skipped in a CPU smoke: it needs the probe's costs (tests/test_sizing_tune.py runs it)")
        )
        return
    tuned = kit.work / "tuned.toml"
    tune_log = kit.work / "tune.txt"
    kit.keep_raw(tune_log, "probe/tune.txt")
    kit.keep_raw(tuned, "probe/tuned.toml")
    budget = min(kit.s.tune_budget, max(30, int(kit.left() - 10)))  # 30 s: tune's one trial
    began = time.monotonic()
    code = kit.call([*py(), "-m", "cockpit", "tune", "--preset", kit.s.preset, "--budget", f"{budget}s", "--out",
                     str(tuned)], tune_log, timeout=kit.timeout(budget + 60.0))  # fmt: skip
    took = time.monotonic() - began
    rows.append(("tune", f"{budget} s budget, took {took:.0f} s, exit {code}"))
    if code != 0:
        raise KitError(f"cockpit tune exited {code}: {tail(tune_log)}")
    sps, tune_jobs, tuned_preset = tune_pick(tuned)
    rows += [("tune's pick", f"{tune_jobs} job(s) x {tuned_preset.n_envs} envs, batch {tuned_preset.batch_size}: "
                             f"{sps:,.0f} SPS"),
             ("best of the sweep", f"{best[0]} job(s): {best[1]:,.0f} SPS" if best else "-"),
             ("tune's pick / best of the sweep", fmt(sps / best[1] if best else None, 2, "x"))]  # fmt: skip
    kit.figure("probe", "tune", "sps", sps, "steps/s")
    kit.figure("probe", "tune", "jobs", tune_jobs)
    kit.figure("probe", "tune", "n_envs", tuned_preset.n_envs)
    kit.figure("probe", "tune", "vs_sweep_best", sps / best[1] if best else None, "x")
    if best:
        kit.headline.append(
            f"tune's pick ({tune_jobs} job(s) x {tuned_preset.n_envs} envs): {sps:,.0f} SPS, "
            f"{sps / best[1]:.2f}x the best of the sweep ({best[0]} job(s), {best[1]:,.0f} SPS)"
        )


# ----- fleet -----


def fleet_plan(preset: Preset, smoke: bool) -> str:
    """A small plan: 4 agents (2 in a smoke) to 2 rollouts, the best half on to 4."""
    rollout = preset.total_batch
    agents = 2 if smoke else 4
    return (f'name = "gpucheck"\njobs = {agents}\n\n[agents]\nenv = "{preset.env}"\npreset = ["{preset.name}"]\n'
            f"seeds = {agents}\n\n"
            f"[[tiers]]\ntimesteps = {2 * rollout}\npromote = {agents // 2}\n\n[[tiers]]\ntimesteps = {4 * rollout}\n\n"
            "[score]\nepisodes = 2\n")  # fmt: skip


def check_fleet(kit: Kit, sec: Section) -> None:
    """`cockpit fleet` on a small plan to its end, then `cockpit report --json`: tiers, promotions,
    the models verified, its wall time and the GPU meanwhile."""
    plan = kit.work / "fleet.toml"
    plan.write_text(fleet_plan(load(kit.s.preset), kit.s.smoke), encoding="utf-8")
    run_dir = kit.work / "fleet"
    log = kit.work / "fleet.log"
    kit.keep_raw(plan, "fleet/plan.toml")
    kit.keep_raw(log, "fleet/headless.log")
    kit.keep_raw(run_dir / "run.toml", "fleet/run.toml")
    began = time.monotonic()
    code = kit.call([*py(), "-m", "cockpit", "fleet", str(plan), "--headless", "--run-dir", str(run_dir)], log,
                    timeout=kit.timeout(300.0))  # fmt: skip
    took = time.monotonic() - began
    report_log = kit.work / "fleet-report.json"
    kit.keep_raw(report_log, "fleet/report.json")
    done = subprocess.run([*py(), "-m", "cockpit", "report", str(run_dir), "--json"], capture_output=True, text=True,
                          cwd=REPO_ROOT, env=kit.env, timeout=kit.timeout(60.0), check=False)  # fmt: skip
    report_log.write_text(done.stdout + done.stderr, encoding="utf-8")
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise KitError(f"cockpit fleet exited {code}; report --json gave no JSON: {tail(report_log)}") from None
    fleet = report.get("fleet") or {}
    tiers = fleet.get("tiers", [])
    models = fleet.get("models", {})
    steps = sum(int(a.get("steps") or 0) for a in fleet.get("agents", []))
    util = measure.read_util_samples(RunDir(run_dir).gpu_util)
    columns = ["tier", "timesteps", "planned", "finished", "promoted", "culled", "failed"]
    sec.lines += table(columns, [[t[c] for c in columns] for t in tiers])
    sec.lines.append("")
    sec.lines += table(["what", "value"], [
        ("exit", code), ("wall time", f"{took:.0f} s"), ("agents", json.dumps(fleet.get("counts", {}))),
        ("steps trained", f"{steps:,} ({steps / took:,.0f} per wall second)" if took else steps),
        ("models verified", f"{models.get('verified')} ({len(models.get('collected', []))} collected)"),
        ("GPU % mean (cockpit)", fmt(statistics.fmean(u for _, u in util) if util else None)),
    ])  # fmt: skip
    kit.figure("fleet", "fleet", "seconds", took, "s")
    kit.figure("fleet", "fleet", "steps_per_wall_s", steps / took if took else None, "steps/s")
    kit.figure("fleet", "fleet", "models_verified", models.get("verified"))
    if code != 0 or not models.get("verified") or not tiers or any(t["failed"] for t in tiers):
        raise KitError(f"cockpit fleet exited {code}; models verified {models.get('verified')}; "
                       f"{'; '.join(models.get('problems', [])) or tail(log)}")  # fmt: skip


# ----- the report -----


# Each check's title, filled in with the settings (a smoke's worker trains cartpole on the cpu).
CHECK_FUNCTIONS: dict[str, tuple[str, Callable[[Kit, Section], None]]] = {
    "host": ("The machine, and cockpit's NVML reader", check_host),
    "worker": ("The worker on {device}: {presets}", check_worker),
    "run": ("`cockpit run --jobs {jobs} --preset {preset} --headless` beside `nvidia-smi dmon`", check_run),
    "sweep": ("{counts} {preset} jobs", check_sweep),
    "mps": ("{counts} {preset} jobs with and without MPS", check_mps),
    "oom": ("CUDA out of memory: the error and the advice", check_oom),
    "probe": ("`cockpit recommend` and `cockpit tune` on the {where}", check_probe),
    "fleet": ("A small fleet", check_fleet),
}


def run_check(kit: Kit, name: str) -> Section:
    """Run one check into its section: passed, failed (with its error) or skipped (with why)."""
    title, fn = CHECK_FUNCTIONS[name]
    s = kit.s
    *most, last = map(str, s.sweep_jobs)
    counts = f"{', '.join(most)} and {last}" if most else last
    sec = Section(name, title.format(device=s.device, presets=", ".join(s.presets), jobs=s.run_jobs,
                                     preset=s.preset, counts=counts, where="CPU" if s.smoke else "GPU"))  # fmt: skip
    kit.sections.append(sec)
    need = estimate(name, kit.s)
    began = time.monotonic()
    kit.log(f"check {name}: start (planned {need:.0f} s, {kit.left():.0f} s to the deadline)")
    try:
        if kit.left() < need:  # its whole plan must fit: the deadline is the command's, not the check's
            raise Skipped(f"not enough time left: planned {need:.0f} s, {max(0.0, kit.left()):.0f} s before "
                          f"--deadline {kit.s.deadline:.0f}")  # fmt: skip
        fn(kit, sec)
        sec.status = "passed"
    except Skipped as exc:
        sec.status, sec.error = "skipped", str(exc)
    except KitError as exc:
        sec.status, sec.error = "failed", str(exc)
    except Exception as exc:  # a bug in a check must not cost the other checks
        sec.status, sec.error = "failed", f"{type(exc).__name__}: {exc}"
        kit.log(traceback.format_exc().rstrip())
    sec.seconds = time.monotonic() - began
    kit.log(f"check {name}: {sec.status} in {sec.seconds:.0f} s" + (f": {sec.error}" if sec.error else ""))
    return sec


def main(argv: Sequence[str] | None = None) -> int:
    """Run the kit; 0 when no check failed, 1 when one did, 2 for bad input."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--print-source-digest"]:  # prepare.sh records which tree the cockpit wheel is built from
        print(source_digest())
        return 0
    settings = parse_args(args)
    if settings.plan:  # nothing is started, nothing written
        print("\n".join(plan_lines(settings)))
        return 0
    settings.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-", dir=settings.keep))
    kit = Kit(settings, work)
    kit.log(f"{'CPU smoke' if settings.smoke else 'GPU'} checks: {', '.join(settings.checks)}; work in {work}")
    kit.log("plan: " + ", ".join(f"{c} {estimate(c, settings):.0f} s" for c in settings.checks)
            + f"; {plan_seconds(settings):.0f} s in all, deadline {settings.deadline:.0f} s")  # fmt: skip
    try:
        for name in settings.checks:
            run_check(kit, name)
            write_report(kit)
    except KeyboardInterrupt:
        kit.log("interrupted: writing the report so far")
        write_report(kit)
        return 130
    finally:
        if settings.keep is None:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    failed = [x.name for x in kit.sections if x.status == "failed"]
    outcome = f"failed: {', '.join(failed)}" if failed else "no check failed"
    kit.log(f"report: {settings.out / 'report.md'}; {outcome}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
