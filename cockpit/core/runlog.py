"""The run log: `RUN_DIR/run.toml` (written atomically) and the timestamped samples beside it.

`run.toml` is rewritten whole every ~10 s and at exit: tomli-w renders it into a temp file in the
same directory, which is fsynced and renamed over the old one, so a crash, a kill or a full disk
leaves the previous complete file, never a torn one. Samples are appended to CSV files
(`samples.csv` per tick, `job_samples.csv` per job and tick, `gpu_util.csv` for every NVML
utilization sample) for plots and replay; a torn last line there is skipped by readers. Columns are
only ever appended (`samples.csv`'s last, `cpu_cores`, is each core's CPU % separated by spaces), so
readers go by header name and older files simply lack the newer columns.
"""

from __future__ import annotations

import csv
import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TextIO

import tomli_w

from cockpit.contract.runspec import RUN_LOG, RunSpec
from cockpit.core.host import HostInfo
from cockpit.core.phases import Accounting, PhaseAccountant
from cockpit.core.state import RunState
from cockpit.core.telemetry import Sample

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCHEMA_VERSION = 1
PHASE_EVENT_LAG_S = 5.0
MIB = 1024 * 1024


def iso(t: float | None) -> str | None:
    """Unix time as an ISO-8601 UTC string (None stays None)."""
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _prune(value: Any) -> Any:
    """TOML has no null: drop None values (recursively) so absent facts are absent keys."""
    if isinstance(value, Mapping):
        return {k: _prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_prune(v) for v in value if v is not None]
    return value


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically (temp file, fsync, rename); raises OSError on failure."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_run_log(run_dir: Path) -> dict[str, Any]:
    """The parsed `run.toml` of `run_dir`; raises OSError or ValueError (tomllib's) on failure."""
    with (run_dir / RUN_LOG).open("rb") as fh:
        return tomllib.load(fh)


def open_run_log(run_dir: Path) -> dict[str, Any]:
    """Like `read_run_log`, for a directory a user named: ValueError with one line that says
    whether it is no run directory at all or holds an unreadable run log."""
    if not (run_dir / RUN_LOG).is_file():
        raise ValueError(f"{run_dir}: not a run directory (no {RUN_LOG}; runs live in runs/<time>-<preset>-<env>)")
    try:
        return read_run_log(run_dir)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{run_dir}: unreadable {RUN_LOG}: {' '.join(str(exc).split())}") from exc


@dataclass
class Recorder:
    """Receives each telemetry sample: appends it to the CSV files and keeps the series that
    phase accounting needs. Called from the sampler thread; `series()` from any thread."""

    run_dir: Path
    _files: dict[str, TextIO] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    accountant: PhaseAccountant = field(default_factory=PhaseAccountant)
    _cpu_sums: dict[str, tuple[float, int]] = field(default_factory=dict)
    _cost_s: float = 0.0
    _ticks: int = 0
    failed: str | None = None
    closed: bool = False

    _HEADERS: ClassVar[dict[str, list[str]]] = {
        "samples.csv": ["t", "gpu_util", "gpu_util_peak", "gpu_mem_used_mib", "gpu_power_w", "gpu_temp_c",
                        "gpu_sm_mhz", "cpu_percent", "ram_used_mib", "cost_ms", "cpu_cores"],
        "job_samples.csv": ["t", "job", "cpu_percent", "rss_mib", "gpu_mem_mib", "gpu_sm_percent"],
        "gpu_util.csv": ["t", "util"],
    }  # fmt: skip

    def _writer(self, name: str) -> Any:
        fh = self._files.get(name)
        if fh is None:
            path = self.run_dir / name
            new = not path.exists()
            fh = self._files[name] = path.open("a", encoding="utf-8", newline="")
            if new:
                csv.writer(fh).writerow(self._HEADERS[name])
        return csv.writer(fh)

    def __call__(self, sample: Sample) -> None:
        """Record one sample (the sampler's `on_sample`)."""
        self.accountant.add_util(sample.util_samples)
        for job, usage in sample.jobs.items():
            self.accountant.add_cpu(sample.t, job, usage.cpu_percent)
        with self._lock:
            for job, usage in sample.jobs.items():
                total, n = self._cpu_sums.get(job, (0.0, 0))
                self._cpu_sums[job] = (total + usage.cpu_percent, n + 1)
            self._cost_s += sample.cost_s
            self._ticks += 1
        if self.failed or self.closed:
            return
        try:
            self._write(sample)
        except OSError as exc:  # a full disk must not stop training; run.toml says what happened
            self.failed = f"samples not written after {iso(sample.t)}: {exc.strerror or exc}"

    def _write(self, sample: Sample) -> None:
        g = sample.gpu
        self._writer("samples.csv").writerow([
            f"{sample.t:.3f}",
            _fmt(g.util_percent if g else None), _fmt(g.util_peak_percent if g else None),
            _fmt(g.mem_used_bytes / MIB if g else None), _fmt(g.power_w if g else None),
            _fmt(g.temperature_c if g else None), g.sm_clock_mhz if g and g.sm_clock_mhz is not None else "",
            _fmt(sample.cpu_total_percent), _fmt(sample.ram_used_bytes / MIB), _fmt(sample.cost_s * 1000, 3),
            " ".join(f"{c:.1f}" for c in sample.cpu_percent),  # per core, space-separated, for replay
        ])  # fmt: skip
        jobs = self._writer("job_samples.csv")
        for job, u in sample.jobs.items():
            gpu_mem = u.gpu_mem_bytes / MIB if u.gpu_mem_bytes is not None else None
            jobs.writerow([f"{sample.t:.3f}", job, _fmt(u.cpu_percent), _fmt(u.rss_bytes / MIB),
                           _fmt(gpu_mem), _fmt(u.gpu_sm_percent)])  # fmt: skip
        util = self._writer("gpu_util.csv")
        for t, value in sample.util_samples:
            util.writerow([f"{t:.6f}", _fmt(value)])
        for fh in self._files.values():
            fh.flush()

    def cpu_mean(self, job: str) -> float | None:
        """The job's mean CPU % over the samples taken while it was running."""
        with self._lock:
            total, n = self._cpu_sums.get(job, (0.0, 0))
        return total / n if n else None

    def sampler_cost(self) -> tuple[float, int]:
        """Total seconds the sampler spent in its ticks, and how many ticks."""
        with self._lock:
            return self._cost_s, self._ticks

    def close(self) -> None:
        """Close the CSV files; samples arriving later (a slow last tick) are not written."""
        self.closed = True
        for fh in self._files.values():
            fh.close()
        self._files.clear()


def _fmt(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _phase_table(stats: Mapping[str, Any]) -> dict[str, Any]:
    return {phase: {k: _round(v, 3) for k, v in asdict(s).items()} for phase, s in stats.items()}


def render(
    spec: RunSpec,
    state: RunState,
    host: HostInfo,
    accounting: Accounting,
    recorder: Recorder,
    *,
    advice: list[dict[str, Any]] | None = None,
) -> str:
    """The whole run.toml text for `state`."""
    ended = state.now if not state.status.live else None
    gpu: dict[str, Any] = {"present": state.gpu is not None, "telemetry": state.gpu_status or "ok"}
    if state.gpu is not None:
        gpu.update(name=state.gpu.name, memory_total_mib=state.gpu.memory_total_bytes // MIB, driver=state.gpu.driver)
    cost_s, ticks = recorder.sampler_cost()
    doc = {
        "schema_version": SCHEMA_VERSION,
        "command": " ".join(spec.command_line),
        "status": state.status.value,
        "started_at": iso(state.started_at),
        "ended_at": iso(ended),
        "updated_at": iso(state.now),
        "duration_s": round(state.now - state.started_at, 3),
        "config": {
            "jobs": spec.jobs, "agents": len(state.jobs), "preset": spec.preset_arg, "env": spec.env,
            "timesteps": spec.timesteps, "seed": spec.seed, "max_restarts": spec.restart.max_restarts, "pin": spec.pin,
        },
        "host": {
            "hostname": host.hostname, "cpu_model": host.cpu_model, "physical_cores": host.physical_cores,
            "logical_cores": host.logical_cores, "ram_gib": round(host.ram_bytes / 1024**3, 1), "os": host.os,
        },
        "gpu": gpu,
        "preset": spec.preset.as_dict(),
        "jobs": [
            {
                "id": j.id, "seed": j.seed, "status": j.state, "exit_reason": j.exit_reason, "error": j.error,
                "steps": j.steps, "target": j.target,
                "duration_s": round((j.ended_at or state.now) - j.started_at, 3) if j.started_at else None,
                "mean_sps": round(j.mean_sps, 1) if j.mean_sps is not None else None,
                "final_ep_rew_mean": j.ep_rew_mean, "restarts": j.restarts, "checkpoints": j.checkpoints,
                "last_checkpoint_step": j.last_checkpoint_step,
                "peak_gpu_mem_mib": j.peak_gpu_mem_bytes // MIB if j.peak_gpu_mem_bytes is not None else None,
                "cpu_percent_mean": _round(recorder.cpu_mean(j.id)),
                "phases": _phase_table(accounting.jobs.get(j.id, {})),
            }
            for j in state.jobs
        ],
        "utilization": {
            "gpu_util_mean": _round(accounting.gpu_util_mean), "gpu_util_p50": _round(accounting.gpu_util_p50),
            "gpu_util_p95": _round(accounting.gpu_util_p95), "train_share": _round(accounting.train_share, 4),
            "gpu_util_while_training": _round(accounting.gpu_util_while_training),
            "gpu_util_while_not_training": _round(accounting.gpu_util_while_not_training),
            "sampler_ticks": ticks, "sampler_cost_ms_mean": round(cost_s / ticks * 1000, 3) if ticks else None,
        },
        "warnings": list(state.warnings) + ([recorder.failed] if recorder.failed else []),
        "advice": advice or [],
    }  # fmt: skip
    return tomli_w.dumps(_prune(doc))


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def phase_accounting(
    phases: Mapping[str, list[tuple[float, str | None]]], recorder: Recorder, end: float, *, final: bool = False
) -> Accounting:
    """Phase accounting so far. Until the run is over (`final`), samples of the last
    `PHASE_EVENT_LAG_S` wait: the phase events that say where they belong may not be read yet."""
    return recorder.accountant.result(phases, end, settle_until=end if final else end - PHASE_EVENT_LAG_S)
