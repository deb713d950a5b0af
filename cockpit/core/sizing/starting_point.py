"""Where a sizing decision starts: this machine, the preset asked for, what a job of it costs
here, and the pick the advisor makes from those alone. `recommend` and `tune` both start here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from cockpit.contract.advice import AdviceSetting
from cockpit.contract.costs import Costs, MpsGain
from cockpit.contract.presets import Preset, PresetError, load
from cockpit.contract.progress import ProgressFn
from cockpit.contract.runspec import ConfigError, checked_env
from cockpit.core.launch.preflight import check_trainable
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.host import host_info
from cockpit.core.machine.mps_daemon import refusal
from cockpit.core.machine.visibility import open_first_gpu
from cockpit.core.sizing.advisor import Machine, advise, machine_of
from cockpit.core.sizing.cost_probe import measured_costs
from cockpit.core.sizing.mps_gains import cached_mps_gain


def this_machine() -> Machine:
    """Cores, RAM and GPU (through NVML, if it answers) of the machine we run on: the first device
    its `CUDA_VISIBLE_DEVICES` leaves it (`open_first_gpu`)."""
    gpu = open_first_gpu()
    info = gpu.info if gpu is not None else None
    if gpu is not None:
        gpu.close()
    return machine_of(host_info(), info, (info,) if info is not None else ())


def resolve_preset(preset: str | None, env: str | None, machine: Machine) -> Preset:
    """The preset asked for (heavy with a GPU, cartpole without), on `env` if given; ConfigError
    (one line) for an unknown or invalid preset or env, or one stable-baselines3 cannot train."""
    try:
        resolved = load(preset or ("heavy" if machine.gpu_name else "cartpole"))
    except PresetError as exc:
        raise ConfigError(str(exc)) from exc
    checked = dataclasses.replace(resolved, env=checked_env(resolved, env))
    check_trainable(checked, "--env" if env else f"preset {resolved.source}: env")
    return checked


def costs_for(
    say: Callable[[str], None], machine: Machine, preset: Preset, progress: ProgressFn | None = None
) -> Costs | None:
    """This machine's measured costs for `preset` (a probe the first time, which `say` announces
    and `progress` follows step by step); None, after saying why, when the probe fails: the advice
    then comes from the tables."""
    try:
        return measured_costs(preset, machine.gpu_name, on_probe=say, progress=progress)
    except ConfigError as exc:
        say(f"{exc}; sizing from the tables instead")
        return None


def cpu_costs_for(
    say: Callable[[str], None], machine: Machine, preset: Preset, progress: ProgressFn | None = None
) -> Costs | None:
    """With a GPU here, what a job of `preset` costs on the CPU too (the probe on `--device cpu`,
    followed by `progress`), for the advisor's mix of CUDA and CPU jobs; None without a GPU (the
    costs are the CPU's already), or, after saying why, when the probe fails."""
    if machine.gpu_name is None:
        return None
    try:
        return measured_costs(preset, machine.gpu_name, on_probe=say, cpu=True, progress=progress)
    except ConfigError as exc:
        say(f"{exc}; no CUDA and CPU mix is advised")
        return None


def mps_outlook(machine: Machine, preset: Preset) -> tuple[MpsGain | None, str | None]:
    """What MPS was measured to do for `preset` on this machine's GPU (None: nobody measured it,
    `mps_gains`), and why `--mps` cannot be used here (None: it can; `mps_daemon.refusal`)."""
    return cached_mps_gain(preset, machine.gpu_name), refusal(machine_gpus(machine))


def machine_gpus(machine: Machine) -> tuple[GpuInfo, ...]:
    """The GPUs `machine` holds (its first one alone where it lists none: compute capability unknown)."""
    if not machine.gpus and machine.gpu_name is not None:
        return (GpuInfo(0, machine.gpu_name, machine.gpu_memory_bytes or 0, ""),)
    return machine.gpus


def static_pick(machine: Machine, preset: Preset, jobs: int = 2, costs: Costs | None = None) -> tuple[int, int]:
    """(jobs, n_envs) after applying the advice that needs no run (hardware facts and the
    probe's `costs`): `recommend`'s pick before any run."""
    changes = {a.setting: a.suggested for a in advise(machine, preset, jobs, costs=costs)}
    return int(changes.get(AdviceSetting.JOBS, jobs)), int(changes.get(AdviceSetting.N_ENVS, preset.n_envs))
