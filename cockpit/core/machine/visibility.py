"""Which of the GPUs NVML lists the cockpit may use, by its own `CUDA_VISIBLE_DEVICES`.

`visible` reads the setting (pure); `visible_gpus` keeps the open readers it leaves, and
`open_first_gpu` opens the first of them for the tools that measure on one GPU (recommend, tune).

A scheduler (Slurm, Kubernetes' device plugin, RunPod) or the user hands a process its GPUs by
setting `CUDA_VISIBLE_DEVICES`; NVML ignores the variable and lists every GPU of the machine, so
the cockpit reads it itself, with CUDA's meaning (CUDA C Programming Guide, "CUDA Environment
Variables"):

- unset: every GPU;
- set but empty: no GPU; the jobs train on the CPU, and a warning says why;
- a comma list of integer indices and UUIDs (`GPU-...`, `MIG-...`, or enough of a UUID's start
  to name one device alone): those devices. The first entry that names no device ends the list
  (CUDA: "only the devices whose index precedes the invalid index are visible"); the entries after
  it are ignored, and a warning says so.

An integer is CUDA's index, which follows `CUDA_DEVICE_ORDER`: with `PCI_BUS_ID` it is NVML's
index; under CUDA's default, `FASTEST_FIRST`, nothing the cockpit can read tells CUDA's order, so
NVML's is taken, and a warning says so when the GPUs are of different models (of one model the
two orders agree as far as anything can tell them apart).

A GPU cut into MIG slices runs CUDA work only in its slices: naming it by index or `GPU-` UUID
makes its slices visible (and itself, sampled for the whole GPU, never placed on:
`placement.placeable`); naming a slice (`MIG-...`) makes that slice visible alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cockpit.contract.workerargs import CUDA_DEVICE_ORDER_ENV, CUDA_VISIBLE_DEVICES_ENV
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.nvml import GpuReader, close_gpus, keep_gpus, open_gpus


@dataclass(frozen=True)
class Visibility:
    """The GPUs the cockpit may use: `indices` (`GpuInfo.index`, sorted) of the `listed` devices
    NVML listed; `setting` is the variable's value (None: unset, every GPU); `warnings` are lines
    for the run's warnings."""

    indices: tuple[int, ...]
    listed: int = 0
    setting: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def described(self) -> str:
        """How the run's messages name the setting: `CUDA_VISIBLE_DEVICES=1`, or "" when unset."""
        return "" if self.setting is None else f"{CUDA_VISIBLE_DEVICES_ENV}={self.setting!r}"


def _named(entry: str, gpus: Sequence[GpuInfo]) -> list[GpuInfo]:
    """The devices one entry names (with a whole GPU's slices), or [] when it names none."""
    if entry.isdigit():
        # A GPU in MIG mode may be listed through its slices alone (`nvml.open_gpus`).
        return [g for g in gpus if (not g.is_mig and g.index == int(entry)) or g.parent_index == int(entry)]
    if not entry.startswith(("GPU-", "MIG-")):
        return []
    start = entry.lower()
    named = {g.uuid for g in gpus if g.uuid and g.uuid.lower().startswith(start)}
    named |= {g.parent_uuid for g in gpus if g.parent_uuid and g.parent_uuid.lower().startswith(start)}
    if len(named) != 1:  # a prefix of two UUIDs names neither
        return []
    uuid = named.pop()
    return [g for g in gpus if uuid in (g.uuid, g.parent_uuid)]


def visible(setting: str | None, gpus: Sequence[GpuInfo], order: str | None = None) -> Visibility:
    """The GPUs of `gpus` (every device NVML lists) that `CUDA_VISIBLE_DEVICES` = `setting` (None:
    unset) leaves the cockpit, under `CUDA_DEVICE_ORDER` = `order` (see the module docstring)."""
    if setting is None:
        return Visibility(tuple(sorted(g.index for g in gpus)), len(gpus))
    shown = f"{CUDA_VISIBLE_DEVICES_ENV}={setting!r}"
    if not setting.strip():
        empty = f"{shown} (set but empty): CUDA sees no GPU, so the jobs train on the CPU"
        return Visibility((), len(gpus), setting, (empty,))
    chosen: dict[int, GpuInfo] = {}
    warnings: list[str] = []
    entries = [e.strip() for e in setting.split(",")]
    for position, entry in enumerate(entries):
        named = _named(entry, gpus)
        if not named:
            ignored = ",".join(entries[position + 1 :])
            tail = f"; CUDA ignores what follows it ({ignored})" if ignored else ""
            warnings.append(f"{shown}: {entry!r} names no GPU here{tail}")
            break
        chosen.update((g.index, g) for g in named)
    by_index = [e for e in entries if e.isdigit()]
    models = {g.name for g in gpus if not g.is_mig}
    if by_index and (order or "FASTEST_FIRST") != "PCI_BUS_ID" and len(models) > 1:
        warnings.append(
            f"{shown} names GPUs by index without {CUDA_DEVICE_ORDER_ENV}=PCI_BUS_ID: CUDA then "
            "numbers the fastest GPU first, which nothing cockpit can read tells; cockpit takes "
            "NVML's order (nvidia-smi's), which may name other GPUs on these mixed models; set "
            f"{CUDA_DEVICE_ORDER_ENV}=PCI_BUS_ID or name the GPUs by UUID"
        )
    return Visibility(tuple(sorted(chosen)), len(gpus), setting, tuple(warnings))


def device_indices(gpus: Sequence[GpuInfo]) -> tuple[int, ...]:
    """The indices `--gpus` may name among `gpus`: each device's, and the NVML index of each GPU
    listed through its MIG slices alone (naming it names its slices: `with_slices`). Sorted."""
    return tuple(sorted({*(g.index for g in gpus), *(g.parent_index for g in gpus if g.parent_index is not None)}))


def with_slices(indices: Sequence[int], gpus: Sequence[GpuInfo]) -> tuple[int, ...]:
    """`indices` (`--gpus`) with the MIG slices of each GPU among them that is cut into slices:
    naming such a GPU names the slices its work runs in. Sorted."""
    return tuple(sorted({*indices, *(g.index for g in gpus if g.parent_index in indices)}))


def visible_gpus(
    gpus: list[GpuReader], status: str, environ: Mapping[str, str] = os.environ
) -> tuple[list[GpuReader], str, Visibility]:
    """Of `gpus` (every device NVML lists, open), those the cockpit's own `CUDA_VISIBLE_DEVICES`
    (in `environ`) leaves the run (`visible`; the others are closed), their
    status line (why there is none, when it leaves none), and what it left (its warnings go to
    the run's, `RunSession.notes`)."""
    seen = visible(environ.get(CUDA_VISIBLE_DEVICES_ENV), [r.info for r in gpus], environ.get(CUDA_DEVICE_ORDER_ENV))
    kept = keep_gpus(gpus, seen.indices)
    if gpus and not kept:
        status = f"no GPU: {seen.described} leaves the run none of the {len(gpus)} NVML sees; training on the CPU"
    return kept, status, seen


def open_first_gpu(environ: Mapping[str, str] = os.environ, nvml: object = None) -> GpuReader | None:
    """A reader of the first device `CUDA_VISIBLE_DEVICES` (in `environ`) leaves this process (the
    device its CUDA work runs on as `cuda:0`: on a GPU in MIG mode, a slice), or None without one.
    The other readers are closed."""
    gpus, _status, _seen = visible_gpus(*open_gpus(nvml), environ)
    close_gpus(gpus[1:])
    return gpus[0] if gpus else None
