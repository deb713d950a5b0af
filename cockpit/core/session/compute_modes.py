"""How the compute modes of the GPUs a run may use bound its jobs, before the run starts.

A GPU in EXCLUSIVE_PROCESS compute mode runs one CUDA process: a second job fails at start. Unless
the jobs are MPS clients (`--mps`: the MPS server is that one process), a run or fleet puts one job
on such a GPU, and none on a PROHIBITED one (`cockpit.core.machine.placement.job_limit`). These
helpers tell `run` and `fleet` what that means for the jobs they were asked for: a refusal in one
line when the GPU jobs cannot all start, the lines that say which GPUs bound them, and how many
jobs the GPUs take (the cap `run --auto` grows to).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.contract.runspec import RunSpec
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.nvml import GpuReader
from cockpit.core.machine.placement import capacity_refusal, job_capacity, mode_lines, rooms_of
from cockpit.core.machine.visibility import with_slices


@dataclass(frozen=True)
class ModeBounds:
    """What the GPUs' compute modes make of a run: `refusal` (one line; None: its jobs can start),
    `notes` (one line per GPU whose mode bounds its jobs, for the run's warnings) and `capacity`
    (the jobs the GPUs take at once; None: no bound)."""

    refusal: str | None = None
    notes: tuple[str, ...] = ()
    capacity: int | None = None


def usable_gpus(gpus: Sequence[GpuReader], named: Sequence[int] | None) -> list[GpuInfo]:
    """The GPUs of `gpus` a run may place jobs on: those `--gpus` (`named`; None: every one) names,
    with the MIG slices of a GPU it names."""
    infos = [r.info for r in gpus]
    indices = with_slices(named, infos) if named is not None else None
    return [g for g in infos if indices is None or g.index in indices]


def default_jobs(gpus: Sequence[GpuReader], named: Sequence[int] | None, mps: bool) -> int:
    """The parallel jobs of a run not told how many: 2, or 1 where the GPUs it may use take one job
    only by their compute modes (one EXCLUSIVE_PROCESS GPU without `--mps`)."""
    return 1 if job_capacity(rooms_of(usable_gpus(gpus, named)), mps) == 1 else 2


def mode_bounds(spec: RunSpec, gpus: Sequence[GpuReader], flag: str) -> ModeBounds:
    """How the compute modes of the GPUs `spec` may use (`usable_gpus`) bound its jobs
    (`ModeBounds`); `flag` names how the jobs were asked for ("--jobs 4") in the refusal. Nothing
    on Ray, which places the jobs itself, nor without a GPU."""
    usable = usable_gpus(gpus, spec.gpus)
    if spec.cluster is not None or not usable:
        return ModeBounds()
    cuda_jobs = spec.devices.count("cuda") if spec.devices else spec.slots
    return ModeBounds(
        capacity_refusal(usable, spec.slots, cuda_jobs, spec.mps, flag),
        tuple(mode_lines(usable, spec.mps)),
        job_capacity(rooms_of(usable), spec.mps),
    )
