"""The run log: `run.toml` (the run record) from the live run, and the timestamped samples beside it.

`record()` turns the live run into a `RunRecord`; the contract (`cockpit.contract.runrecord`)
renders it and writes it atomically, so a crash, a kill or a full disk leaves the previous complete
file, never a torn one. Samples are appended to CSV files (`samples.csv` per tick,
`job_samples.csv` per job and tick, `gpu_util.csv` for every NVML utilization sample of every GPU,
with its NVML index) for plots and replay; a torn last line there is skipped by readers. The GPU
columns of `samples.csv` are the first sampled GPU's. Columns are only ever appended
(`samples.csv`'s last, `cpu_cores`, is each core's CPU % separated by spaces), so readers go by
header name and older files simply lack the newer columns.
"""

from __future__ import annotations

import contextlib
import csv
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TextIO

from cockpit.contract.rundir import GPU_UTIL_CSV, JOB_SAMPLES_CSV, SAMPLES_CSV
from cockpit.contract.runrecord import (
    AdviceRecord,
    ConfigRecord,
    GpuRecord,
    GpuUseRecord,
    HostRecord,
    JobRecord,
    PhaseRecord,
    RunRecord,
    UtilizationFigures,
    UtilizationRecord,
    iso,
)
from cockpit.contract.runspec import RunSpec
from cockpit.contract.settings import recorded_values
from cockpit.core.feed.snapshot import JobView, MemoryFigures, RunState
from cockpit.core.machine.gpu_types import GpuInfo, GpuSample
from cockpit.core.machine.host import HostInfo
from cockpit.core.telemetry.memwatch import MemWatch
from cockpit.core.telemetry.phases import Accounting, GpuFigures, PhaseAccountant, PhaseStats
from cockpit.core.telemetry.sampler import Sample

__all__ = ["MIB", "PHASE_EVENT_LAG_S", "Recorder", "phase_accounting", "record"]

PHASE_EVENT_LAG_S = 5.0
MIB = 1024 * 1024


@dataclass
class Recorder:
    """Receives each telemetry sample: appends it to the CSV files, keeps the series that phase
    accounting needs, and feeds each job's memory to the leak watch (`memory`). Called from the
    sampler thread; `cpu_mean()`, `sm_mean()`, `util_read()`, `sampler_cost()` and
    `memory.verdict()` from any thread."""

    run_dir: Path
    _files: dict[str, TextIO] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    accountant: PhaseAccountant = field(default_factory=PhaseAccountant)
    _cpu_sums: dict[str, tuple[float, int]] = field(default_factory=dict)
    _rss_peaks: dict[str, int] = field(default_factory=dict)  # bytes, the most each job held
    _sm_sums: dict[str, tuple[float, int]] = field(default_factory=dict)
    # Per GPU index: seconds sampled in each way of reading utilization, the newest way and the
    # newest measured sample spacing, and the time of its previous sample.
    _read_seconds: dict[int, dict[str, float]] = field(default_factory=dict)
    _read_now: dict[int, tuple[str, float | None]] = field(default_factory=dict)
    _read_t: dict[int, float] = field(default_factory=dict)
    memory: MemWatch = field(default_factory=MemWatch)
    _cost_s: float = 0.0
    _ticks: int = 0
    failed: str | None = None
    closed: bool = False

    _HEADERS: ClassVar[dict[str, list[str]]] = {
        SAMPLES_CSV: [
            "t",
            "gpu_util",
            "gpu_util_peak",
            "gpu_mem_used_mib",
            "gpu_power_w",
            "gpu_temp_c",
            "gpu_sm_mhz",
            "cpu_percent",
            "ram_used_mib",
            "cost_ms",
            "cpu_cores",
        ],
        JOB_SAMPLES_CSV: ["t", "job", "cpu_percent", "rss_mib", "gpu_mem_mib", "gpu_sm_percent"],
        GPU_UTIL_CSV: ["t", "util", "gpu"],
    }

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
        """Record one sample (the sampler's `on_sample`). Every sample gets its CSV rows, with the
        figures it carries; the jobs' CPU % counts towards their means and phases only in the
        sample that read it (`Sample.usage_fresh`), at the time it was read: a reading carried
        over to later ticks is one measurement, not several, and it describes the time before
        it was taken, not the ticks after."""
        for gpu, util in sample.gpu_util().items():
            self.accountant.add_util(util, gpu)
        fresh = sample.usage_fresh
        if fresh:
            for job, usage in sample.jobs.items():
                self.accountant.add_cpu(sample.t, job, usage.cpu_percent)
        with self._lock:
            for job, usage in sample.jobs.items() if fresh else ():
                total, n = self._cpu_sums.get(job, (0.0, 0))
                self._cpu_sums[job] = (total + usage.cpu_percent, n + 1)
                self._rss_peaks[job] = max(self._rss_peaks.get(job, 0), usage.rss_bytes)
                if usage.gpu_sm_percent is not None:
                    total, n = self._sm_sums.get(job, (0.0, 0))
                    self._sm_sums[job] = (total + usage.gpu_sm_percent, n + 1)
            for g in sample.gpus:
                self._note_read(sample.t, g)
            self._cost_s += sample.cost_s
            self._ticks += 1
        if fresh:  # a reading carried over to later ticks is one reading, for the leak watch too
            for job, usage in sample.jobs.items():
                if usage.rss_bytes > 0:  # 0: the worker's process tree was not walked yet
                    self.memory.add(sample.t, job, usage.pid, usage.rss_bytes, usage.gpu_mem_bytes)
            self.memory.keep(sample.jobs)
        if self.failed or self.closed:
            return
        try:
            self._write(sample)
        except OSError as exc:  # a full disk must not stop training; run.toml says what happened
            self.failed = f"samples not written after {iso(sample.t)}: {exc.strerror or exc}"

    def _write(self, sample: Sample) -> None:
        g = sample.gpu
        self._writer(SAMPLES_CSV).writerow(
            [
                f"{sample.t:.3f}",
                _fmt(g.util_percent if g else None),
                _fmt(g.util_peak_percent if g else None),
                _fmt(_mib_of(g.mem_used_bytes) if g else None),
                _fmt(g.power_w if g else None),
                _fmt(g.temperature_c if g else None),
                g.sm_clock_mhz if g and g.sm_clock_mhz is not None else "",
                _fmt(sample.cpu_total_percent),
                _fmt(sample.ram_used_bytes / MIB),
                _fmt(sample.cost_s * 1000, 3),
                " ".join(f"{c:.1f}" for c in sample.cpu_percent),  # per core, space-separated, for replay
            ]
        )
        jobs = self._writer(JOB_SAMPLES_CSV)
        for job, u in sample.jobs.items():
            gpu_mem = u.gpu_mem_bytes / MIB if u.gpu_mem_bytes is not None else None
            jobs.writerow(
                [
                    f"{sample.t:.3f}",
                    job,
                    _fmt(u.cpu_percent),
                    _fmt(u.rss_bytes / MIB),
                    _fmt(gpu_mem),
                    _fmt(u.gpu_sm_percent),
                ]
            )
        util = self._writer(GPU_UTIL_CSV)
        for gpu, samples in sample.gpu_util().items():
            for t, value in samples:
                util.writerow([f"{t:.6f}", _fmt(value), gpu])
        for fh in self._files.values():
            fh.flush()

    def _note_read(self, t: float, g: GpuSample) -> None:
        # The time since a GPU's previous sample counts towards the way this sample was read.
        if g.util_mode:
            seconds = self._read_seconds.setdefault(g.index, {})
            seconds[g.util_mode] = seconds.get(g.util_mode, 0.0) + max(0.0, t - self._read_t.get(g.index, t))
            _, period = self._read_now.get(g.index, ("", None))
            self._read_now[g.index] = (g.util_mode, g.sample_period_s if g.sample_period_s is not None else period)
        self._read_t[g.index] = t

    def util_read(self, gpu: int) -> tuple[str | None, float | None, dict[str, float]]:
        """How GPU `gpu`'s utilization was read: the newest way (None before any sample said), the
        newest measured sample spacing in seconds (None until measured), and each way's share of
        the time sampled, only when there was more than one (else empty)."""
        with self._lock:
            mode, period = self._read_now.get(gpu, (None, None))
            seconds = dict(self._read_seconds.get(gpu, {}))
        total = sum(seconds.values())
        shares = {m: s / total for m, s in seconds.items()} if len(seconds) > 1 and total > 0 else {}
        return mode, period, shares

    def sm_mean(self, job: str) -> float | None:
        """The job's mean SM % over NVML's per-process readings of it (None when there were none)."""
        with self._lock:
            total, n = self._sm_sums.get(job, (0.0, 0))
        return total / n if n else None

    def cpu_mean(self, job: str) -> float | None:
        """The job's mean CPU % over the readings taken while it was running."""
        with self._lock:
            total, n = self._cpu_sums.get(job, (0.0, 0))
        return total / n if n else None

    def rss_peak_mib(self, job: str) -> float | None:
        """The most memory (RSS) the job's process tree held in any reading."""
        with self._lock:
            peak = self._rss_peaks.get(job)
        return round(peak / MIB, 1) if peak else None

    def sampler_cost(self) -> tuple[float, int]:
        """Total CPU seconds the sampler spent in its ticks, and how many ticks."""
        with self._lock:
            return self._cost_s, self._ticks

    def close(self) -> None:
        """Close the CSV files; samples arriving later (a slow last tick) are not written."""
        self.closed = True
        for fh in self._files.values():
            with contextlib.suppress(OSError):  # the last flush of a file on a full disk, or in a deleted dir
                fh.close()
        self._files.clear()


def _mib(value: int | None) -> int | None:
    """Bytes in whole MiB; None (memory the driver does not report) stays None."""
    return value // MIB if value is not None else None


def _mib_of(value: int | None) -> float | None:
    """Bytes in MiB; None (memory the driver does not report) stays None."""
    return value / MIB if value is not None else None


def _fmt(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _phases(stats: Mapping[str, PhaseStats]) -> dict[str, PhaseRecord]:
    return {
        phase: PhaseRecord(
            seconds=round(s.seconds, 3),
            gpu_util_mean=_round(s.gpu_util_mean, 3),
            cpu_percent_mean=_round(s.cpu_percent_mean, 3),
        )
        for phase, s in stats.items()
    }


def record(
    spec: RunSpec,
    state: RunState,
    host: HostInfo,
    accounting: Accounting,
    recorder: Recorder,
    *,
    advice: Sequence[AdviceRecord] = (),
) -> RunRecord:
    """The run record for `state`: what run.toml says about the run now."""
    ended = state.now if not state.status.live else None
    gpu = GpuRecord(present=state.gpu is not None, telemetry=state.gpu_status or "ok")
    if state.gpu is not None:
        gpu = GpuRecord(
            present=True,
            telemetry=gpu.telemetry,
            name=state.gpu.name,
            memory_total_mib=_mib(state.gpu.memory_total_bytes),
            driver=state.gpu.driver,
        )
    cost_s, ticks = recorder.sampler_cost()
    uuids = {info.index: info.uuid for info in state.gpus}
    return RunRecord(
        name=spec.name,
        command=" ".join(spec.command_line),
        status=state.status,
        started_at=iso(state.started_at) or "",
        ended_at=iso(ended),
        updated_at=iso(state.now) or "",
        duration_s=round(state.now - state.started_at, 3),
        eta_s=_round(state.eta_s, 1) if state.status.live else None,
        disk_wait=state.disk_wait,
        # The settings as declared (`settings.recorded_values`); the jobs there are and MPS as the run used it.
        config=ConfigRecord(
            **{**recorded_values(spec), "agents": len(state.jobs), "mps": state.mps, "mps_external": state.mps_external}
        ),
        host=HostRecord(
            hostname=host.hostname,
            cpu_model=host.cpu_model,
            physical_cores=host.physical_cores,
            logical_cores=host.logical_cores,
            ram_gib=round(host.ram_bytes / 1024**3, 1),
            os=host.os,
        ),
        gpu=gpu,
        preset=spec.loaded_preset,
        jobs=tuple(_job_record(j, state.now, recorder, accounting, uuids) for j in state.jobs),
        utilization=UtilizationRecord(
            **_figures(accounting),
            sampler_ticks=ticks,
            sampler_cost_ms_mean=round(cost_s / ticks * 1000, 3) if ticks else None,
        ),
        gpus=tuple(_gpu_record(info, state, recorder, accounting) for info in state.gpus),
        warnings=(*state.warnings, *[w for w in [recorder.failed] if w and w not in state.warnings]),
        advice=tuple(advice),
    )


def _gpu_record(info: GpuInfo, state: RunState, recorder: Recorder, accounting: Accounting) -> GpuUseRecord:
    """`[[gpus]]`'s record of one GPU now: its jobs, how its utilization was read, and its figures."""
    mode, period_s, shares = recorder.util_read(info.index)
    return GpuUseRecord(
        index=info.index,
        uuid=info.uuid or None,
        name=info.name,
        memory_total_mib=_mib(info.memory_total_bytes),
        jobs=tuple(j.id for j in state.jobs if j.gpu == info.index),
        util_read=mode,
        util_sample_period_ms=_round(period_s * 1000, 1) if period_s is not None else None,
        util_read_shares={m: round(share, 4) for m, share in shares.items()},
        utilization=UtilizationFigures(**_figures(accounting.gpus[info.index]))
        if info.index in accounting.gpus
        else None,
        compute_mode=info.compute_mode,
    )


def _job_record(
    j: JobView, now: float, recorder: Recorder, accounting: Accounting, uuids: Mapping[int, str]
) -> JobRecord:
    """`[[jobs]]`'s record of a job now. Its memory is the leak watch's verdict as the recorder has
    it at this writing (`MemoryFigures`, as `JobView` shows it), which the view may not carry: a
    state built without the watch's verdicts still records them."""
    memory = MemoryFigures.of(recorder.memory.verdict(j.id))
    return JobRecord(
        id=j.id,
        seed=j.seed,
        status=j.state,
        exit_reason=j.exit_reason,
        error=j.error,
        steps=j.steps,
        target=j.target,
        duration_s=round((j.ended_at or now) - j.started_at, 3) if j.started_at else None,
        mean_sps=round(j.mean_sps, 1) if j.mean_sps is not None else None,
        # The live figures as they are now, for a job still training.
        sps_window=_round(j.sps, 1) if j.state.stepping else None,
        eta_s=_round(j.eta_s, 1) if j.state.stepping else None,
        final_ep_rew_mean=j.ep_rew_mean,
        restarts=j.restarts,
        checkpoints=j.checkpoints,
        last_checkpoint_step=j.last_checkpoint_step,
        peak_gpu_mem_mib=j.peak_gpu_mem_bytes // MIB if j.peak_gpu_mem_bytes is not None else None,
        gpu_sm_percent_mean=_round(recorder.sm_mean(j.id), 1),
        cpu_percent_mean=_round(recorder.cpu_mean(j.id)),
        peak_rss_mib=recorder.rss_peak_mib(j.id),
        memory=memory.memory,
        memory_growth_mib_h=memory.memory_growth_mib_h,
        gpu_memory_growth_mib_h=memory.gpu_memory_growth_mib_h,
        target_episodes=j.target_episodes,
        episodes=j.episodes,
        episodes_per_h=_round(j.episodes_per_h, 1) if j.state.stepping else None,
        phases=_phases(accounting.jobs.get(j.id, {})),
        gpu=j.gpu,
        gpu_uuid=uuids.get(j.gpu) or None if j.gpu is not None else None,
        preset=j.preset,
        overrides=dict(j.overrides),
    )


def _figures(figures: GpuFigures) -> dict[str, float | None]:
    """Utilization figures as run.toml rounds them (`[utilization]` and each of `[[gpus]]`)."""
    return {
        "gpu_util_mean": _round(figures.gpu_util_mean),
        "gpu_util_p50": _round(figures.gpu_util_p50),
        "gpu_util_p95": _round(figures.gpu_util_p95),
        "train_share": _round(figures.train_share, 4),
        "gpu_util_while_training": _round(figures.gpu_util_while_training),
        "gpu_util_while_not_training": _round(figures.gpu_util_while_not_training),
    }


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def phase_accounting(
    phases: Mapping[str, list[tuple[float, str | None]]],
    recorder: Recorder,
    end: float,
    *,
    final: bool = False,
    placement: Mapping[str, int] | None = None,
) -> Accounting:
    """Phase accounting so far, each job's phases against its GPU's samples (`placement`: job ->
    NVML index). Until the run is over (`final`), samples of the last `PHASE_EVENT_LAG_S` wait: the
    phase events that say where they belong may not be read yet."""
    return recorder.accountant.result(
        phases, end, settle_until=end if final else end - PHASE_EVENT_LAG_S, placement=placement
    )
