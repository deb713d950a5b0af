"""Which GPU a job's worker runs on: pure, no I/O.

The contract, for a job about to be launched on a machine with several GPUs:

- A job keeps the GPU it ran on before (its previous attempt, or an earlier session of the run)
  while that GPU is present: the same NVML index among the GPUs in use, with the same UUID when
  both are known. Its checkpoint, its CUDA caches and its share of the GPU's memory stay put.
- Otherwise (a new job, or its GPU is gone: the index is missing, or another GPU now sits at it)
  it goes to the GPU with the fewest jobs on it, then the one with the most free memory, then the
  lowest index.
- With no GPU there is no placement (None): nothing is set and the worker runs as it would have.

The GPU a job is given is its NVML index; the launcher makes it the only GPU the worker sees
(`CUDA_VISIBLE_DEVICES`), where it is `cuda:0`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuRoom:
    """One GPU a job may be placed on, as it is now: its NVML index, UUID ("" when unknown), and
    its total and free memory in bytes."""

    index: int
    uuid: str
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class GpuRef:
    """The GPU a job ran on: its NVML index and UUID ("" when unknown)."""

    index: int
    uuid: str = ""


def present(gpus: Sequence[GpuRoom], ref: GpuRef) -> bool:
    """True when the GPU `ref` names is among `gpus`: its index is there, and its UUID is the same
    where both are known."""
    return any(g.index == ref.index and (not g.uuid or not ref.uuid or g.uuid == ref.uuid) for g in gpus)


def place(gpus: Sequence[GpuRoom], jobs_on: Mapping[int, int], previous: GpuRef | None = None) -> GpuRoom | None:
    """The GPU for a job (see the module docstring): its `previous` one while present, else the one
    with the fewest jobs (`jobs_on`: NVML index -> jobs placed there now), then the most free
    memory, then the lowest index. None when there is no GPU."""
    if previous is not None and present(gpus, previous):
        return next(g for g in gpus if g.index == previous.index)
    if not gpus:
        return None
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
