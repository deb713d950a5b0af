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

The launcher makes the GPU a job is given (its `GpuRef`) the only one its worker sees: by UUID
(`GPU-...` or `MIG-...`) when known, else by NVML index (`workerargs.gpu_environment`); the worker
sees it as `cuda:0`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cockpit.core.machine.nvml import GpuInfo


@dataclass(frozen=True)
class GpuRoom:
    """One GPU (or MIG slice) a job may be placed on, as it is now: its index (`GpuInfo.index`),
    UUID ("" when unknown), and its total and free memory in bytes."""

    index: int
    uuid: str
    total_bytes: int
    free_bytes: int


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
    return [GpuRoom(g.index, g.uuid, g.memory_total_bytes or 0,
                    g.memory_total_bytes - (used.get(g.index) or 0) if g.memory_total_bytes is not None else 0)
            for g in placeable(gpus)]  # fmt: skip


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
) -> GpuRoom | None:
    """The GPU for a job (see the module docstring): its `previous` one while present, with room
    for `peak_bytes` (the job's known peak GPU memory; None: unknown) and not crowded, else the one
    with the fewest jobs (`jobs_on`: NVML index -> the other jobs placed there now), then the most
    free memory, then the lowest index. None when there is no GPU."""
    if not gpus:
        return None
    before = find(gpus, previous) if previous is not None else None
    if before is not None:
        least = min(jobs_on.get(g.index, 0) for g in gpus)
        roomy = peak_bytes is None or before.free_bytes >= peak_bytes
        if roomy and jobs_on.get(before.index, 0) + 1 <= least + 1:
            return before
    return min(gpus, key=lambda g: (jobs_on.get(g.index, 0), -g.free_bytes, g.index))


def fit_jobs(gpus: Sequence[GpuRoom], peak_bytes: int, budget: float) -> int:
    """How many jobs of `peak_bytes` GPU memory each `place` puts on `gpus` before one of them
    would hold more than `budget` (a share) of its GPU's memory: placing fills the GPUs evenly,
    so a small GPU among large ones caps the count. At least 1 (one job per GPU may still fit)."""
    if not gpus or peak_bytes <= 0:
        return 1
    jobs_on: dict[int, int] = {}
    rooms = list(gpus)
    while True:
        chosen = place(rooms, jobs_on)
        assert chosen is not None
        held = (jobs_on.get(chosen.index, 0) + 1) * peak_bytes
        if held > budget * chosen.total_bytes:
            return max(1, sum(jobs_on.values()))
        jobs_on[chosen.index] = jobs_on.get(chosen.index, 0) + 1
        rooms = [g if g is not chosen else GpuRoom(g.index, g.uuid, g.total_bytes, g.free_bytes - peak_bytes)
                 for g in rooms]  # fmt: skip
