"""The advisor: from hardware facts, the preset and what a run measured, what to change and why.

Pure: no I/O, no clock. `advise()` takes plain data and returns `Advice` items, each naming the
setting, its current and suggested value, the expected effect, and the reason with the numbers it
was computed from. The seeds did these by hand: one job left the GPU idle through its rollouts,
four jobs overlapped their phases (4 x 25 % -> 70-90 %), beast wanted about 16 cores, and the
batch and env count were scaled up once an A100 was detected.

On a machine of several GPUs, jobs and GPU memory are counted per GPU: each job holds memory on its
own GPU (`JobMeasure.gpu`), and how many jobs fit is how many `cockpit.core.machine.placement` would put on
the GPUs (evenly, so a small GPU among large ones caps the count) before one of them is over
`GPU_MEM_BUDGET`; an added job goes where placement would put it.

A GPU's compute mode bounds the jobs on it as placement does (`placement.job_limit`: one job on a
GPU in EXCLUSIVE_PROCESS unless the jobs are MPS clients, none in PROHIBITED): no item suggests more
jobs than the GPUs take, and a run asking for more is told to run fewer, with the mode's line as
the reason (`_compute_modes`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from cockpit.contract.advice import Advice, AdviceSetting
from cockpit.contract.costs import MIN_MPS_GAIN, Costs, MpsGain
from cockpit.contract.presets import Preset, largest_divisor_at_most
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.host import HostInfo
from cockpit.core.machine.placement import GpuRoom, fit_jobs, job_capacity, mode_lines, place, rooms_of
from cockpit.core.sizing.devices import Mix, mix_sps, mixes
from cockpit.core.sizing.overlap import Station, overlap_sps, speed_of

GIB = 1024**3
ENVS_PER_CORE = 4  # the seeds: heavy (32 envs) needs ~8 cores, beast (64 envs) ~16
# Classic-control envs step in microseconds: one core keeps many of them fed.
CHEAP_ENVS = ("CartPole", "Acrobot", "MountainCar", "Pendulum")
CHEAP_ENVS_PER_CORE = 32
GPU_MEM_BUDGET = 0.90  # jobs x per-job peak must stay at or under this share of GPU memory
TARGET_GPU_UTIL = 85.0  # what overlapping jobs aim for: the seeds saw 70-90 %
LOW_GPU_UTIL = 60.0
BUSY_TRAIN_UTIL = 50.0
CPU_SATURATED = 90.0
CPU_HEADROOM = 80.0
IDLE_GPU_UTIL = 30.0
CPU_NET_MAX_UNITS = 256  # on the CPU, wider layers cost more than they teach an MLP policy
STEP_OVERHEAD_SHARE = 0.10  # more envs per job until a rollout step's fixed cost is at most this share
MAX_MIX_JOBS = 16  # the most jobs a device mix is predicted for (each mix is an MVA of its jobs)
MIN_IDLE_GAIN = 1.05  # a job per core is advised where the overlap model puts it at least this much faster
MAX_ENVS_SCALE = 4  # never more than this times the preset's envs: the rollout's length shapes learning


@dataclass(frozen=True)
class GpuModel:
    """Defaults for a GPU family, from runs users reported on such GPUs."""

    match: str
    preset: str
    jobs: int
    note: str


# Longest match first: "RTX 4070 Ti" must not read as a plain 4070.
GPU_TABLE = (
    GpuModel("A100", "beast", 8, "8 parallel agents have run on an A100 80GB at 8.7 % of its memory"),
    GpuModel("A40", "heavy", 4, "4 parallel agents are a usual plan for an A40 48GB"),
    GpuModel("4090", "heavy", 4, "24 GB: four heavy jobs overlap their train bursts"),
    GpuModel("4070", "heavy", 4, "on an RTX 4070, 4 heavy jobs took the GPU from 25 % to 70-90 %"),
    GpuModel("3070", "fast", 2, "8 GB: one job has used ~4 GB on an RTX 3070"),
)


@dataclass(frozen=True)
class Machine:
    """The hardware the advice is for: its cores and RAM, its (first) GPU's name and memory, and
    every GPU the run uses (`gpus`; empty: at most the one GPU named, at NVML index 0)."""

    physical_cores: int
    logical_cores: int
    ram_bytes: int
    gpu_name: str | None = None  # None: no GPU
    gpu_memory_bytes: int | None = None
    gpus: tuple[GpuInfo, ...] = ()

    def gpu_rooms(self) -> list[GpuRoom]:
        """Each GPU (or MIG slice: `placement.rooms_of`) with all its memory free: what placement sees
        of an empty machine."""
        gpus = self.gpus
        if not gpus and self.gpu_name is not None and self.gpu_memory_bytes:
            gpus = (GpuInfo(0, self.gpu_name, self.gpu_memory_bytes, ""),)
        return rooms_of(gpus)

    def gpu_job_cap(self, mps: bool = False) -> int | None:
        """How many jobs the GPUs take at once by their compute modes (`placement.job_capacity`;
        `mps`: as MPS clients); None without a GPU or without such a limit."""
        rooms = self.gpu_rooms()
        return job_capacity(rooms, mps) if rooms else None


@dataclass(frozen=True)
class JobMeasure:
    """What one job of a run measured (None where it was not measured)."""

    job_id: str
    sps: float | None = None
    train_share: float | None = None  # of its running time, 0..1
    gpu_util_rollout: float | None = None
    gpu_util_train: float | None = None
    gpu_mem_peak_bytes: int | None = None
    cpu_percent: float | None = None  # of one core
    cuda_oom: bool = False
    # The leak watch's flagged growth rates (`cockpit.core.telemetry.memwatch`): None unless it keeps growing.
    memory_growth_mib_h: float | None = None
    gpu_memory_growth_mib_h: float | None = None
    gpu: int | None = None  # the NVML index of the GPU it runs on (None: none, or not known)


@dataclass(frozen=True)
class Measurements:
    """A run's measurements: its parallel jobs, the GPU's mean utilization and the CPU's."""

    jobs: tuple[JobMeasure, ...] = ()
    gpu_util_mean: float | None = None
    gpu_util_while_training: float | None = None
    cpu_percent_mean: float | None = None  # mean over cores, 0..100

    @property
    def peak_gpu_mem_bytes(self) -> int | None:
        """The largest per-job GPU memory peak."""
        peaks = [j.gpu_mem_peak_bytes for j in self.jobs if j.gpu_mem_peak_bytes is not None]
        return max(peaks) if peaks else None

    @property
    def aggregate_sps(self) -> float | None:
        """The jobs' SPS together."""
        rates = [j.sps for j in self.jobs if j.sps is not None]
        return sum(rates) if rates else None


class PhaseFigures(Protocol):
    """A job's time in one phase and the GPU meanwhile: a live run's `PhaseStats` or a recorded
    run's `PhaseRecord`."""

    @property
    def seconds(self) -> float:
        """Time spent in the phase."""
        ...

    @property
    def gpu_util_mean(self) -> float | None:
        """The GPU's mean utilization meanwhile, % (None without GPU telemetry)."""
        ...


def job_measure(
    job_id: str,
    *,
    sps: float | None,
    phases: Mapping[str, PhaseFigures],
    gpu_mem_peak_bytes: int | None,
    cpu_percent: float | None,
    error: str | None,
    memory_growth_mib_h: float | None = None,
    gpu_memory_growth_mib_h: float | None = None,
    gpu: int | None = None,
) -> JobMeasure:
    """What one job measured, for a live run and a recorded one alike: its SPS, CPU % and GPU
    memory peak as given, its train share of rollout + train time and the GPU % in each (from
    `phases`, by phase name), whether its error was a CUDA out-of-memory, the growth rates the
    leak watch flagged, and its GPU."""
    train, rollout = phases.get("train"), phases.get("rollout")
    train_s = train.seconds if train is not None else 0.0
    total = train_s + (rollout.seconds if rollout is not None else 0.0)
    return JobMeasure(
        job_id,
        sps,
        train_s / total if total else None,
        rollout.gpu_util_mean if rollout is not None else None,
        train.gpu_util_mean if train is not None else None,
        gpu_mem_peak_bytes,
        cpu_percent,
        "cuda_oom" in (error or ""),
        memory_growth_mib_h,
        gpu_memory_growth_mib_h,
        gpu,
    )


def machine_of(host: HostInfo, gpu: GpuInfo | None, gpus: Sequence[GpuInfo] = ()) -> Machine:
    """The advisor's view of a host, its (first) GPU (None: no GPU) and every GPU the run uses."""
    return Machine(
        host.physical_cores,
        host.logical_cores,
        host.ram_bytes,
        gpu.name if gpu else None,
        gpu.memory_total_bytes if gpu else None,
        tuple(gpus),
    )


def gpu_model(name: str | None) -> GpuModel | None:
    """The table's row for a GPU name, if any."""
    if name is None:
        return None
    return next((row for row in GPU_TABLE if row.match in name), None)


def envs_per_core(env: str) -> int:
    """How many of an env's copies one physical core keeps stepping."""
    return CHEAP_ENVS_PER_CORE if env.startswith(CHEAP_ENVS) else ENVS_PER_CORE


def cores_needed(preset: Preset, jobs: int, costs: Costs | None = None) -> float:
    """Physical cores `jobs` jobs of `preset` keep busy: measured when `costs` are given, else
    their envs at the table's `envs_per_core`."""
    if costs is not None:
        return jobs * costs.cores_per_job(preset)
    return jobs * preset.n_envs / envs_per_core(preset.env)


def max_jobs_for_cores(preset: Preset, physical_cores: int, costs: Costs | None = None) -> int:
    """The most parallel jobs the cores can keep going (at least 1)."""
    return max(1, math.floor(physical_cores / cores_needed(preset, 1, costs) + 1e-9))


def max_jobs_for_gpu_memory(peak_bytes: int, total_bytes: int) -> int:
    """The most jobs whose peaks fit in GPU_MEM_BUDGET of the GPU's memory (at least 1)."""
    return max(1, math.floor(GPU_MEM_BUDGET * total_bytes / peak_bytes))


def _pct(value: float) -> str:
    return f"{value:.0f} %"


def _compute_modes(host: Machine, preset: Preset, jobs: int, costs: Costs | None, mps: bool) -> list[Advice]:
    """More jobs than the GPUs' compute modes take (`Machine.gpu_job_cap`): as many as they take
    (and the cores fit), the modes' lines the reason; where no GPU takes a job, every job on the CPU."""
    cap = host.gpu_job_cap(mps)
    if cap is None or jobs <= cap:
        return []
    why = "; ".join(mode_lines(host.gpus, mps))
    if cap == 0:
        return [
            Advice(
                AdviceSetting.DEVICES,
                f"{jobs}:cuda",
                f"{jobs}:cpu",
                "the jobs start: no GPU here takes one",
                why,
                {"jobs": jobs, "gpu_jobs_fit": 0},
            )
        ]
    cores = max_jobs_for_cores(preset, host.physical_cores, costs)
    fit = min(cap, cores)
    if fit < cap:
        why += f"; {host.physical_cores} physical cores fit {fit}"
    return [
        Advice(
            AdviceSetting.JOBS,
            str(jobs),
            str(fit),
            "every job starts: a second CUDA process on an exclusive GPU fails at start",
            why,
            {"jobs": jobs, "gpu_jobs_fit": cap},
        )
    ]


def _cores(host: Machine, preset: Preset, jobs: int, costs: Costs | None) -> list[Advice]:
    need = cores_needed(preset, jobs, costs)
    if need <= host.physical_cores:
        return []
    fit_jobs = max_jobs_for_cores(preset, host.physical_cores, costs)
    numbers: dict[str, float | int | str] = {
        "jobs": jobs,
        "n_envs": preset.n_envs,
        "cores_needed": need,
        "physical_cores": host.physical_cores,
    }
    if costs is not None:  # measured: fewer envs would not make a job's loop any lighter
        reason = (
            f"{jobs} job(s) keep ~{need:.1f} cores busy, measured here: {costs.describe()}; "
            f"this machine has {host.physical_cores} physical"
        )
        return [Advice(AdviceSetting.JOBS, str(jobs), str(fit_jobs), "jobs stop contending for cores", reason, numbers)]
    per_core = envs_per_core(preset.env)
    per_job_envs = max(1, host.physical_cores * per_core // jobs)
    out = []
    reason = (
        f"{jobs} job(s) x {preset.n_envs} {preset.env} envs need ~{need:.0f} cores at {per_core} per core; "
        f"this machine has {host.physical_cores} physical"
    )
    if fit_jobs < jobs:
        effect = "envs stop contending for cores" + (
            " (or lower n_envs, below)" if per_job_envs < preset.n_envs else ""
        )
        out.append(Advice(AdviceSetting.JOBS, str(jobs), str(fit_jobs), effect, reason, numbers))
    if per_job_envs < preset.n_envs:
        envs = 1 << (per_job_envs.bit_length() - 1)  # a power of two keeps batch divisors easy
        effect = f"or keep {jobs} job(s): they fit the cores with batch_size {_batch_for(preset, envs)}"
        out.append(Advice(AdviceSetting.N_ENVS, str(preset.n_envs), str(envs), effect, reason, numbers))
    return out


def _idle_cores(host: Machine, preset: Preset, jobs: int, costs: Costs | None) -> list[Advice]:
    """Without a GPU, measured costs: one job per core, where that is faster. Fewer jobs each get
    more of the cores (`cores // jobs` envpool and torch threads), but a job's Python loop runs on
    one core, so a job per core is usually faster; the probe's measured thread speedups decide,
    through the fleet's overlap model (`cockpit.core.sizing.overlap.speed_of`), as `cockpit fleet`
    projects it. Advised only for a gain of `MIN_IDLE_GAIN` or more."""
    if costs is None or host.gpu_name is not None or costs.device != "cpu" or jobs >= host.physical_cores:
        return []
    now, fit = (speed_of(preset, costs, n, host.physical_cores).fleet_sps for n in (jobs, host.physical_cores))
    if fit < now * MIN_IDLE_GAIN:
        return []
    threads = max(1, host.physical_cores // max(1, jobs))
    reason = (
        f"no GPU: each job's Python loop runs on one core, and {jobs} job(s) on {host.physical_cores} "
        f"physical cores leave the loops {host.physical_cores - jobs} idle core(s), which {threads} env "
        "and torch thread(s) a job fill only in part"
    )
    return [
        Advice(
            AdviceSetting.JOBS,
            str(jobs),
            str(host.physical_cores),
            f"~{fit / now:.1f}x the SPS ({now:,.0f} -> {fit:,.0f} together, by the fleet's overlap model)",
            reason,
            {"jobs": jobs, "physical_cores": host.physical_cores, "sps": now, "suggested_sps": fit},
        )
    ]


def _amortize(host: Machine, preset: Preset, jobs: int, costs: Costs | None, max_envs: int | None) -> list[Advice]:
    """More envs per job while a rollout step's fixed cost is over `STEP_OVERHEAD_SHARE` of it:
    each step then carries more samples for the same overhead."""
    if costs is None:
        return []

    def overhead_share(n: int) -> float:
        return costs.step_overhead_us / n / costs.sample_us(preset, n)

    n, cap = preset.n_envs, max_envs or preset.n_envs * MAX_ENVS_SCALE
    while n * 2 <= cap and overhead_share(n) > STEP_OVERHEAD_SHARE:
        bigger = dataclasses.replace(preset, n_envs=n * 2)
        if cores_needed(bigger, jobs, costs) > host.physical_cores:
            break
        n *= 2
    if n == preset.n_envs:
        return []
    gain = costs.sample_us(preset, preset.n_envs) / costs.sample_us(preset, n) - 1
    effect = (
        f"~{gain:+.0%} SPS per job: the step overhead falls from {overhead_share(preset.n_envs):.0%} to "
        f"{overhead_share(n):.0%} of a sample's cost; batch_size {_batch_for(preset, n)}"
    )
    reason = f"measured here: {costs.describe()}; {preset.n_epochs} epoch(s)"
    numbers: dict[str, float | int | str] = {
        "step_overhead_us": costs.step_overhead_us,
        "env_policy_us": costs.env_policy_us,
        "train_sample_us": costs.train_sample_us,
        "train_epoch_us": costs.train_epoch_us,
    }
    return [Advice(AdviceSetting.N_ENVS, str(preset.n_envs), str(n), effect, reason, numbers)]


def _batch_for(preset: Preset, n_envs: int, cap: int | None = None) -> int:
    """The batch size to use with `n_envs`: the largest divisor of the new rollout at or under
    the current batch size (or `cap`)."""
    total = n_envs * preset.n_steps
    return largest_divisor_at_most(total, cap if cap is not None else preset.batch_size)


def _divisor(preset: Preset) -> list[Advice]:
    total = preset.total_batch
    if total % preset.batch_size == 0:
        return []
    fixed = largest_divisor_at_most(total, preset.batch_size)
    return [
        Advice(
            AdviceSetting.BATCH_SIZE,
            str(preset.batch_size),
            str(fixed),
            "every minibatch the same size",
            f"batch_size must divide n_envs x n_steps = {total}",
            {"total_batch": total},
        )
    ]


def _oom(preset: Preset, measured: Measurements) -> list[Advice]:
    hit = [j.job_id for j in measured.jobs if j.cuda_oom]
    if not hit:
        return []
    half = largest_divisor_at_most(preset.total_batch, max(1, preset.batch_size // 2))
    return [
        Advice(
            AdviceSetting.BATCH_SIZE,
            str(preset.batch_size),
            str(half),
            "half the activation memory per minibatch",
            f"CUDA out of memory in job(s) {', '.join(hit)}; {half} still divides {preset.total_batch}",
            {"batch_size": preset.batch_size},
        )
    ]


def _gpu_memory(host: Machine, jobs: int, measured: Measurements) -> list[Advice]:
    """Jobs whose GPU memory peaks add up to more than `GPU_MEM_BUDGET` of a GPU: all of them on
    one GPU, or on several GPUs those placed on each one."""
    rooms = host.gpu_rooms()
    if len(rooms) > 1:
        return _gpus_memory(rooms, jobs, measured)
    # One place: a MIG slice's memory is the slice's, not the GPU's it is cut from.
    peak, total = measured.peak_gpu_mem_bytes, rooms[0].total_bytes if rooms else host.gpu_memory_bytes
    if peak is None or not total or jobs * peak <= GPU_MEM_BUDGET * total:
        return []
    fit = max_jobs_for_gpu_memory(peak, total)
    reason = (
        f"{jobs} jobs x {peak / GIB:.1f} GiB peak = {jobs * peak / GIB:.1f} GiB, over "
        f"{GPU_MEM_BUDGET:.0%} of {total / GIB:.0f} GiB"
    )
    return [
        Advice(
            AdviceSetting.JOBS,
            str(jobs),
            str(fit),
            "no job runs out of GPU memory",
            reason,
            {"peak_gib": peak / GIB, "total_gib": total / GIB},
        )
    ]


def _gpus_memory(rooms: Sequence[GpuRoom], jobs: int, measured: Measurements) -> list[Advice]:
    """`_gpu_memory` on several GPUs: each GPU's own jobs against its own memory; the jobs that
    fit are those placement spreads over the GPUs before one is over budget."""
    peak = measured.peak_gpu_mem_bytes
    if peak is None:
        return []
    over = []
    for room in rooms:
        peaks = [j.gpu_mem_peak_bytes for j in measured.jobs if j.gpu == room.index and j.gpu_mem_peak_bytes]
        if peaks and len(peaks) * max(peaks) > GPU_MEM_BUDGET * room.total_bytes:
            over.append((room, len(peaks), max(peaks)))
    fit = fit_jobs(rooms, peak, GPU_MEM_BUDGET)
    if not over or fit >= jobs:
        return []
    room, on_it, worst = over[0]
    reason = (
        f"GPU {room.index}: {on_it} jobs x {worst / GIB:.1f} GiB peak = {on_it * worst / GIB:.1f} GiB, over "
        f"{GPU_MEM_BUDGET:.0%} of its {room.total_bytes / GIB:.0f} GiB; spread evenly over GPUs "
        f"{', '.join(str(r.index) for r in rooms)}, {fit} jobs of {peak / GIB:.1f} GiB fit"
    )
    return [
        Advice(
            AdviceSetting.JOBS,
            str(jobs),
            str(fit),
            "no job runs out of GPU memory",
            reason,
            {"peak_gib": peak / GIB, "total_gib": room.total_bytes / GIB, "gpu": room.index},
        )
    ]


def _overlap(
    host: Machine, preset: Preset, jobs: int, measured: Measurements, costs: Costs | None, mps: bool = False
) -> list[Advice]:
    """Low mean GPU use but busy train bursts, with room to spare: more jobs fill the gaps, as many
    as the cores, the GPU memory and the GPUs' compute modes allow."""
    mean, burst, cpu = measured.gpu_util_mean, measured.gpu_util_while_training, measured.cpu_percent_mean
    if host.gpu_name is None or mean is None or burst is None or cpu is None:
        return []
    if mean >= LOW_GPU_UTIL or burst < BUSY_TRAIN_UTIL or cpu >= CPU_HEADROOM:
        return []
    wanted = math.ceil(jobs * TARGET_GPU_UTIL / max(mean, 1.0))
    caps = {"cores": max_jobs_for_cores(preset, host.physical_cores, costs)}
    peak = measured.peak_gpu_mem_bytes
    rooms = host.gpu_rooms()
    if peak is not None and rooms:
        caps["GPU memory"] = fit_jobs(rooms, peak, GPU_MEM_BUDGET, mps=mps)
    mode_cap = host.gpu_job_cap(mps)
    if mode_cap is not None:
        caps["the GPUs' compute modes"] = mode_cap
    suggested = min(wanted, *caps.values())
    if suggested <= jobs:
        return []
    limit = min(caps, key=lambda k: caps[k])
    capped = f"; {limit} cap it at {caps[limit]}" if caps[limit] < wanted else ""
    reason = (
        f"GPU busy {_pct(mean)} on average but {_pct(burst)} while a job trains, CPU {_pct(cpu)}: "
        f"{jobs} job(s) leave the GPU idle between train bursts{capped}{_next_gpu(rooms, measured)}"
    )
    # The fleet's overlap model: each job keeps a GPU busy for its share of the time, and the
    # train bursts of `suggested` jobs queue for the GPUs rather than add up (4 x 25 % -> 79 % on one).
    gpus = max(1, len(rooms))
    share = min(1.0, mean / 100 * gpus / jobs)
    network = (Station("cores", 1.0 - share, host.physical_cores), Station("gpu", share, gpus))
    expected = overlap_sps(network, suggested) / 1e6 * share * 100 / gpus
    return [
        Advice(
            AdviceSetting.JOBS,
            str(jobs),
            str(suggested),
            f"train phases overlap: ~{expected:.0f} % GPU busy expected (the fleet's overlap model)",
            reason,
            {"gpu_util_mean": mean, "gpu_util_train": burst, "cpu_percent": cpu, "gpu_util_expected": expected},
        )
    ]


def _next_gpu(rooms: Sequence[GpuRoom], measured: Measurements) -> str:
    """Where placement would put one more job, on a machine of several GPUs ("" on one)."""
    if len(rooms) <= 1:
        return ""
    jobs_on: dict[int, int] = {}
    for job in measured.jobs:
        if job.gpu is not None:
            jobs_on[job.gpu] = jobs_on.get(job.gpu, 0) + 1
    chosen = place(rooms, jobs_on)
    assert chosen is not None
    return f"; the next job goes to GPU {chosen.index}, which runs {jobs_on.get(chosen.index, 0)}"


RSS_GROWTH_CAUSES = (
    "its RSS kept growing after the warm-up: something keeps what every step or episode makes: a "
    "replay buffer filling up, a list of every episode (a callback or wrapper appending infos, returns or "
    "frames), or a leak in a custom env (rendered frames, unclosed files or sockets). Compare its RSS "
    "across a few checkpoints, step the env alone in a loop under tracemalloc, and bound what callbacks "
    "keep (a deque with maxlen)"
)
GPU_GROWTH_CAUSES = (
    "its GPU memory kept growing: tensors kept across iterations (losses or values appended to a list "
    "without .item() or .detach()) or a cache that fragments; torch.cuda.memory_summary() in the job says "
    "what holds it"
)


def memory_advice(measured: Measurements) -> list[Advice]:
    """Jobs whose memory keeps growing (the leak watch, `cockpit.core.telemetry.memwatch`): how fast, what
    could cause it and what to do. The item changes no setting (`AdviceSetting.MEMORY`): it
    explains the `memory growing` flag."""
    rss = {j.job_id: j.memory_growth_mib_h for j in measured.jobs if j.memory_growth_mib_h is not None}
    gpu = {j.job_id: j.gpu_memory_growth_mib_h for j in measured.jobs if j.gpu_memory_growth_mib_h is not None}
    if not rss and not gpu:
        return []
    current, reasons = [], []
    numbers: dict[str, float | int | str] = {}
    for what, rates, causes in (("RSS", rss, RSS_GROWTH_CAUSES), ("GPU memory", gpu, GPU_GROWTH_CAUSES)):
        if rates:
            worst = max(rates.values())
            jobs = ", ".join(sorted(rates))
            current.append(f"{what} of job{'s' if len(rates) > 1 else ''} {jobs} +{worst:,.0f} MiB/h")
            reasons.append(causes)
            numbers[f"{'rss' if what == 'RSS' else 'gpu'}_growth_mib_h"] = worst
    worst = max([*rss.values(), *gpu.values()])
    effect = (
        f"at +{worst:,.0f} MiB/h a job holds {worst * 24 / 1024:,.1f} GiB more a day: find what grows "
        "before the machine runs out of memory"
    )
    return [Advice(AdviceSetting.MEMORY, "; ".join(current), "no growth", effect, "; ".join(reasons), numbers)]


def _cpu_bound(host: Machine, preset: Preset, jobs: int, measured: Measurements) -> list[Advice]:
    cpu, gpu = measured.cpu_percent_mean, measured.gpu_util_mean
    # Without a GPU the cores are the only thing to keep busy: saturating them is the goal.
    if host.gpu_name is None or gpu is None or cpu is None or cpu < CPU_SATURATED or gpu >= IDLE_GPU_UTIL:
        return []
    reason = (
        f"CPU {_pct(cpu)} across {host.logical_cores} logical cores, GPU busy {_pct(gpu)}: the envs are the bottleneck"
    )
    if jobs > 1:
        return [
            Advice(
                AdviceSetting.JOBS,
                str(jobs),
                str(jobs - 1),
                "less contention; each job steps faster",
                reason,
                {"cpu_percent": cpu},
            )
        ]
    if preset.n_envs > 1:
        envs = max(1, preset.n_envs // 2)
        effect = f"less contention; batch_size {_batch_for(preset, envs)}"
        return [Advice(AdviceSetting.N_ENVS, str(preset.n_envs), str(envs), effect, reason, {"cpu_percent": cpu})]
    return []


def _no_gpu(host: Machine, preset: Preset) -> list[Advice]:
    if host.gpu_name is not None:
        return []
    widest = max(preset.net_arch) if preset.net_arch else 0
    if widest <= CPU_NET_MAX_UNITS:
        return []
    net = ",".join(str(min(units, CPU_NET_MAX_UNITS // 4)) for units in preset.net_arch[:2])
    reason = (
        f"no GPU: the policy trains on {host.physical_cores} CPU cores, and a "
        f"{','.join(map(str, preset.net_arch))} MLP makes every train phase long"
    )
    return [
        Advice(
            AdviceSetting.NET_ARCH,
            ",".join(map(str, preset.net_arch)),
            net,
            "MLP policy on the CPU: shorter train phases, more steps per second (try --preset cartpole)",
            reason,
            {"widest_layer": widest},
        )
    ]


def _gpu_defaults(host: Machine, preset: Preset, jobs: int, costs: Costs | None, mps: bool = False) -> list[Advice]:
    model = gpu_model(host.gpu_name)
    if model is None:
        return []
    out = []
    memory = f", {host.gpu_memory_bytes / GIB:.0f} GB" if host.gpu_memory_bytes else ""
    note = f"{host.gpu_name}{memory} detected; {model.note}"
    if model.preset != preset.name and preset.name in ("fast", "heavy", "beast"):
        out.append(
            Advice(
                AdviceSetting.PRESET,
                preset.name,
                model.preset,
                f"the usual work per rollout for a {model.match}",
                note,
                {"gpu": host.gpu_name or ""},
            )
        )
    # Each GPU takes its own row's jobs (one the table lacks, the first GPU's): jobs are counted per GPU.
    rows = [gpu_model(g.name) or model for g in host.gpus] or [model]
    table_jobs = sum(row.jobs for row in rows)
    if len(rows) > 1:
        note += f"; {len(rows)} GPUs: {' + '.join(str(row.jobs) for row in rows)} jobs"
    fit = min(table_jobs, max_jobs_for_cores(preset, host.physical_cores, costs))
    capped = "" if fit == table_jobs else f"; {host.physical_cores} physical cores fit {fit} of {table_jobs}"
    mode_cap = host.gpu_job_cap(mps)
    if mode_cap is not None and mode_cap < fit:
        fit, capped = mode_cap, f"; {'; '.join(mode_lines(host.gpus, mps))}: {mode_cap} of {table_jobs} fit"
    if fit != jobs and fit > 0:
        out.append(
            Advice(
                AdviceSetting.JOBS,
                str(jobs),
                str(fit),
                "enough parallel jobs to keep the GPU busy",
                note + capped,
                {"gpu": host.gpu_name or ""},
            )
        )
    return out


def mix_jobs(host: Machine, jobs: int) -> int:
    """The most jobs a device mix is predicted for: `jobs`, or up to two per core (a CUDA job keeps
    only its rollout's share of a core busy), at most `MAX_MIX_JOBS`."""
    return max(jobs, min(MAX_MIX_JOBS, 2 * host.physical_cores))


def _devices(
    host: Machine, preset: Preset, jobs: int, costs: Costs | None, cpu_costs: Costs | None, mps: bool = False
) -> list[Advice]:
    """With a GPU and the preset's costs measured on both devices: the mix of CUDA and CPU jobs the
    overlap model finds fastest (`devices.mixes`, up to `mix_jobs` jobs, no more on CUDA than the
    GPUs' compute modes take), where some of it is on the CPU and it beats the best all-CUDA count
    by `MIN_IDLE_GAIN`."""
    if costs is None or cpu_costs is None or host.gpu_name is None:
        return []
    if (costs.device, cpu_costs.device) != ("cuda", "cpu"):
        return []
    cap = host.gpu_job_cap(mps)
    if cap == 0:
        return []
    every = [
        m
        for m in mixes(preset, costs, cpu_costs, host.physical_cores, mix_jobs(host, jobs))
        if cap is None or m.cuda <= cap
    ]
    best = every[0]
    all_cuda = next(m for m in every if m.cpu == 0)
    all_cpu = next((m for m in every if m.cuda == 0), None)
    current = Mix(jobs, 0, mix_sps(preset, costs, cpu_costs, jobs, 0, host.physical_cores))
    if best.cpu == 0 or best.sps < all_cuda.sps * MIN_IDLE_GAIN:
        return []
    fastest = f"the fastest all on cuda: {all_cuda.describe()}" + (
        f", all on the CPU: {all_cpu.describe()}" if all_cpu else ""
    )
    reason = (
        f"costs measured on both devices here, each of N jobs on {host.physical_cores} // N of the "
        f"{host.physical_cores} cores; {fastest}; predicted by the overlap model (docs/fleets.md)"
    )
    effect = (
        f"~x{best.sps / current.sps:.2f} the SPS ({current.sps:,.0f} -> {best.sps:,.0f} together): "
        f"{best.describe()}; run it with --jobs {best.jobs} --devices {best.devices}"
    )
    return [
        Advice(
            AdviceSetting.DEVICES,
            f"{jobs}:cuda",
            best.devices,
            effect,
            reason,
            {
                "sps": current.sps,
                "suggested_sps": best.sps,
                "all_cuda_sps": all_cuda.sps,
                "all_cpu_sps": all_cpu.sps if all_cpu else 0.0,
            },
        )
    ]


def _mps(host: Machine, preset: Preset, jobs: int, mps_gain: MpsGain | None, mps_usable: bool) -> list[Advice]:
    """MPS for two or more jobs on a GPU: advised only from a measured gain of at least
    `MIN_MPS_GAIN` (`mps_gain`, measured side by side by tune or run --auto); where nobody has
    measured it and MPS can be used here (`mps_usable`), an item that says so and how to measure
    it, which changes nothing; nothing where it was measured and did not help, or cannot be used."""
    if host.gpu_name is None or jobs < 2:
        return []
    if mps_gain is not None:
        if not mps_gain.helps:
            return []
        return [
            Advice(
                AdviceSetting.MPS,
                "off",
                "on",
                f"~x{mps_gain.gain:.2f} the SPS: {mps_gain.describe()}; run with --mps",
                f"under MPS the kernels of the jobs on a GPU run at once instead of taking turns; "
                f"a gain of at least x{MIN_MPS_GAIN:.2f} was measured here. One job's fatal GPU fault "
                f"ends every job on that GPU (they restart from their checkpoints)",
                {
                    "gain": round(mps_gain.gain, 3),
                    "jobs": mps_gain.jobs,
                    "sps_off": mps_gain.sps_off,
                    "sps_on": mps_gain.sps_on,
                },
            )
        ]
    if not mps_usable:
        return []
    return [
        Advice(
            AdviceSetting.MPS,
            "off",
            "measure it",
            "unknown: nobody has measured MPS for this preset on this GPU (NVIDIA reports up to x1.8 for "
            "several small processes on one GPU; memory contention can cost 30 %)",
            f"measure it with: cockpit tune --preset {preset.name} (it measures its pick with MPS too), "
            f"or cockpit run --auto --jobs {jobs} (it tries MPS once the jobs are sized), or the GPU "
            f"kit's mps check; recommend then advises from what was measured",
        )
    ]


def advise(
    host: Machine,
    preset: Preset,
    jobs: int,
    measured: Measurements | None = None,
    costs: Costs | None = None,
    *,
    max_envs: int | None = None,
    cpu_costs: Costs | None = None,
    mps_gain: MpsGain | None = None,
    mps_usable: bool = False,
    mps: bool = False,
) -> list[Advice]:
    """What to change for `jobs` parallel jobs of `preset` on `host`, most pressing first.

    Without measurements the advice comes from the hardware alone (core budget, GPU table, no
    GPU, batch divisibility). With a run's measurements it also covers an out-of-memory event,
    GPU memory per job, memory that keeps growing, idle gaps between train bursts, and a CPU-bound run. With a probe's
    `costs` the core budget is measured rather than taken from a table, and it sizes n_envs so
    that a rollout step's fixed cost stays small, up to `max_envs` (default `MAX_ENVS_SCALE`
    times the preset's; a live run passes the cap of the preset it started with, so that applied
    advice cannot compound). With a GPU and `cpu_costs` too (the preset measured on the CPU), it
    names the fastest mix of CUDA and CPU jobs where that is not all on CUDA (`_devices`). MPS is
    advised from a measured gain only (`mps_gain`); unmeasured where it can be used here
    (`mps_usable`), an item says how to measure it (`_mps`). No item suggests more jobs than the
    GPUs' compute modes take (`_compute_modes`; `mps`: the jobs run as MPS clients, `--mps`). At most
    one item per setting is returned: the first rule that fires wins (a hard limit before a
    nicety).
    """
    items = [
        *_divisor(preset),
        *_compute_modes(host, preset, jobs, costs, mps),
        *_cores(host, preset, jobs, costs),
        *_idle_cores(host, preset, jobs, costs),
    ]
    if measured is not None:
        items += _oom(preset, measured) + _gpu_memory(host, jobs, measured) + memory_advice(measured)
        items += _cpu_bound(host, preset, jobs, measured) + _overlap(host, preset, jobs, measured, costs, mps)
    items += [*_amortize(host, preset, jobs, costs, max_envs), *_no_gpu(host, preset)]
    items += _gpu_defaults(host, preset, jobs, costs, mps) + _devices(host, preset, jobs, costs, cpu_costs, mps)
    planned = next((int(a.suggested) for a in items if a.setting is AdviceSetting.JOBS), jobs)
    items += _mps(host, preset, planned, mps_gain, mps_usable)
    seen: set[str] = set()
    out = []
    for item in items:
        if item.setting not in seen:
            seen.add(item.setting)
            out.append(item)
    return out
