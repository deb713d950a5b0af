"""Which GPU a job's worker runs on: pure, no I/O.

The contract, for a job about to be launched on a machine with several GPUs:

- The GPUs are those the run may use (`visibility`: the cockpit's own `CUDA_VISIBLE_DEVICES`, then
  `--gpus`), as `placeable` leaves them: a MIG slice is a GPU of its own (its UUID, its memory),
  and a GPU cut into slices is placed on only through them.
- A job keeps the GPU it ran on before (its previous attempt, or an earlier session of the run)
  while that GPU is present, has room and is not crowded; its checkpoint, CUDA caches and share of
  the GPU's memory then stay put. Present: the GPU with the same UUID, wherever NVML lists it now
  (NVML's order may change across reboots, nvmlDeviceGetHandleByIndex: "the order in which NVML
  enumerates devices has no guarantees of consistency between reboots"); the NVML index counts
  only where neither the job's record nor the GPU knows a UUID. Room: its free memory is at least
  the job's known peak (when one is known). Not crowded: with the job back on it, it carries at
  most one job more than the least loaded GPU (so a fleet's promoted agents, each sticky, do not
  pile up on the GPU they started on).
- Otherwise (a new job, or its GPU is gone, full or crowded) it goes to the GPU with the fewest
  jobs on it, then the one with the most free memory, then the lowest index.
- With no GPU there is no placement (None): nothing is set and the worker runs as it would have.
- A GPU's compute mode (`GpuInfo.compute_mode`, NVML's `nvmlDeviceGetComputeMode`) bounds the jobs
  on it (`job_limit`): in EXCLUSIVE_PROCESS (and the older EXCLUSIVE_THREAD) one process may hold a
  context on it, so a second job would fail at start: one job, unless the jobs are MPS clients
  (`mps`), where the MPS server is that one process (NVIDIA's MPS documentation: "Exclusive-mode
  restrictions are applied to the MPS server, not MPS clients"); in PROHIBITED none. A GPU at its
  limit is not placed on; with every GPU at its limit there is no placement (None). An unknown
  mode counts as the default: no limit.

The launcher makes the GPU a job is given (its `GpuRef`) the only one its worker sees: by UUID
(`GPU-...` or `MIG-...`) when known, else by NVML index (`workerargs.gpu_environment`); the worker
sees it as `cuda:0`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cockpit.core.machine.gpu_types import (
    COMPUTE_EXCLUSIVE_PROCESS,
    COMPUTE_EXCLUSIVE_THREAD,
    COMPUTE_PROHIBITED,
    GpuInfo,
)


@dataclass(frozen=True)
class GpuRoom:
    """One GPU (or MIG slice) a job may be placed on, as it is now: its index (`GpuInfo.index`),
    UUID ("" when unknown), its total and free memory in bytes, and its compute mode
    (`GpuInfo.compute_mode`; None: unknown)."""

    index: int
    uuid: str
    total_bytes: int
    free_bytes: int
    compute_mode: str | None = None


@dataclass(frozen=True)
class GpuRef:
    """The GPU (or MIG slice) a job runs or ran on: its index (`GpuInfo.index`) and UUID (""
    when unknown). The launcher hands it to the worker (`LaunchRequest.gpu`)."""

    index: int
    uuid: str = ""


def placeable(gpus: Sequence[GpuInfo]) -> list[GpuInfo]:
    """The devices of `gpus` a worker can run on: each whole GPU and MIG slice, but not a GPU whose
    slices are among `gpus` (with MIG on, CUDA work runs only in the slices)."""
    parents = {g.parent_index for g in gpus if g.is_mig}
    return [g for g in gpus if g.is_mig or g.index not in parents]


def rooms_of(gpus: Sequence[GpuInfo], used: Mapping[int, int | None] | None = None) -> list[GpuRoom]:
    """A room for each `placeable` device of `gpus`, with `used` bytes (by index; none or None:
    empty) taken from its memory (a slice's memory is the slice's). A device whose memory NVML does
    not report (unified memory: GB10, Jetson Thor) counts no room, so jobs go to it by count alone."""
    used = used or {}
    return [
        GpuRoom(
            g.index,
            g.uuid,
            g.memory_total_bytes or 0,
            g.memory_total_bytes - (used.get(g.index) or 0) if g.memory_total_bytes is not None else 0,
            g.compute_mode,
        )
        for g in placeable(gpus)
    ]


def job_limit(mode: str | None, mps: bool = False) -> int | None:
    """How many jobs a GPU in compute mode `mode` can run at once (see the module docstring): 0 in
    PROHIBITED, 1 in an exclusive mode unless the jobs are MPS clients (`mps`), else None: no limit."""
    if mode == COMPUTE_PROHIBITED:
        return 0
    if mode in (COMPUTE_EXCLUSIVE_PROCESS, COMPUTE_EXCLUSIVE_THREAD) and not mps:
        return 1
    return None


def mode_line(index: int, mode: str | None, mps: bool = False) -> str | None:
    """One line saying how GPU `index`'s compute mode bounds its jobs (`job_limit`), or None when
    it does not."""
    limit = job_limit(mode, mps)
    if limit is None or mode is None:
        return None
    said = f"GPU {index} is in {mode.upper()} compute mode"
    return f"{said}: no job on it" if limit == 0 else f"{said}: one job on it (without --mps)"


def mode_lines(gpus: Sequence[GpuInfo], mps: bool = False) -> list[str]:
    """`mode_line` for each `placeable` device of `gpus` whose compute mode bounds its jobs."""
    lines = (mode_line(g.index, g.compute_mode, mps) for g in placeable(gpus))
    return [line for line in lines if line is not None]


def job_capacity(gpus: Sequence[GpuRoom], mps: bool = False) -> int | None:
    """How many jobs `gpus` can run at once by their compute modes (`job_limit`), None when one of
    them has no limit."""
    limits = [job_limit(g.compute_mode, mps) for g in gpus]
    return None if any(limit is None for limit in limits) else sum(limit or 0 for limit in limits)


def capacity_refusal(gpus: Sequence[GpuInfo], jobs: int, cuda_jobs: int, mps: bool, flag: str) -> str | None:
    """Why `cuda_jobs` of `jobs` parallel jobs, those that train on a GPU, cannot all run on `gpus`
    by their compute modes (`flag`: how the user asked for them, "--jobs 4"), in one line that says
    what would; None when they can, and without a GPU (the jobs train on the CPU)."""
    rooms = rooms_of(gpus)
    capacity = job_capacity(rooms, mps)
    if not rooms or capacity is None or cuda_jobs <= capacity:
        return None
    why = "; ".join(mode_lines(gpus, mps))
    if capacity == 0:
        return f"{flag}: {why}: no GPU here takes a job; train on the CPU (--devices {jobs}:cpu)"
    fewer = f"give --jobs {capacity}, " if cuda_jobs == jobs else ""
    bounded = any(job_limit(g.compute_mode) == 1 for g in rooms)
    return (
        f"{flag}: {why}: the GPUs here take {capacity} job(s); {fewer}{'add --mps, ' if bounded else ''}"
        f"or train the others on the CPU (--devices {capacity}:cuda,{jobs - capacity}:cpu)"
    )


def find(gpus: Sequence[GpuRoom], ref: GpuRef) -> GpuRoom | None:
    """The GPU of `gpus` that `ref` names: the one with its UUID; by index only where neither
    `ref` nor the GPU at that index knows a UUID. None when it is not among them."""
    if ref.uuid:
        return next((g for g in gpus if g.uuid == ref.uuid), None)
    return next((g for g in gpus if g.index == ref.index and not g.uuid), None)


def present(gpus: Sequence[GpuRoom], ref: GpuRef) -> bool:
    """True when the GPU `ref` names is among `gpus` (`find`)."""
    return find(gpus, ref) is not None


def place(
    gpus: Sequence[GpuRoom],
    jobs_on: Mapping[int, int],
    previous: GpuRef | None = None,
    peak_bytes: int | None = None,
    *,
    mps: bool = False,
) -> GpuRoom | None:
    """The GPU for a job (see the module docstring): its `previous` one while present, with room
    for `peak_bytes` (the job's known peak GPU memory; None: unknown) and not crowded, else the one
    with the fewest jobs (`jobs_on`: NVML index -> the other jobs placed there now), then the most
    free memory, then the lowest index. Only GPUs whose compute mode takes one more job count
    (`job_limit`; `mps`: the jobs are MPS clients). None when no GPU does (or there is none)."""
    gpus = [g for g in gpus if (limit := job_limit(g.compute_mode, mps)) is None or jobs_on.get(g.index, 0) < limit]
    if not gpus:
        return None
    before = find(gpus, previous) if previous is not None else None
    if before is not None:
        least = min(jobs_on.get(g.index, 0) for g in gpus)
        roomy = peak_bytes is None or before.free_bytes >= peak_bytes
        if roomy and jobs_on.get(before.index, 0) + 1 <= least + 1:
            return before
    return min(gpus, key=lambda g: (jobs_on.get(g.index, 0), -g.free_bytes, g.index))


def fit_jobs(gpus: Sequence[GpuRoom], peak_bytes: int, budget: float, *, mps: bool = False) -> int:
    """How many jobs of `peak_bytes` GPU memory each `place` puts on `gpus` before one of them
    would hold more than `budget` (a share) of its GPU's memory, or none takes one more by its
    compute mode (`mps`: as MPS clients): placing fills the GPUs evenly, so a small GPU among
    large ones caps the count. At least 1 (one job per GPU may still fit)."""
    if not gpus or peak_bytes <= 0:
        return 1
    jobs_on: dict[int, int] = {}
    rooms = list(gpus)
    while True:
        chosen = place(rooms, jobs_on, mps=mps)
        if chosen is None:
            return max(1, sum(jobs_on.values()))
        held = (jobs_on.get(chosen.index, 0) + 1) * peak_bytes
        if held > budget * chosen.total_bytes:
            return max(1, sum(jobs_on.values()))
        jobs_on[chosen.index] = jobs_on.get(chosen.index, 0) + 1
        rooms = [g if g is not chosen else dataclasses.replace(g, free_bytes=g.free_bytes - peak_bytes) for g in rooms]
