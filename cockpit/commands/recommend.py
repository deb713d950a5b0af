"""`cockpit recommend`: the advisor's output for this machine, from its hardware alone or from a
finished run's measurements, with every number it used. For an env the gymnasium fallback runs (a
custom `module:EnvId` one among them) it also says which VecEnv the workers will step it in, and
why: the probe's measured step cost against `envids.SUBPROC_MIN_STEP_US`, on each job's cores."""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from cockpit.commands.console import output_console, say, step_display
from cockpit.contract.advice import Advice, AdviceSetting
from cockpit.contract.costs import MIN_MPS_GAIN, Costs, MpsGain
from cockpit.contract.envids import SUBPROC_MIN_STEP_US, backend_for, pick_vec_env
from cockpit.contract.presets import Preset
from cockpit.contract.rundir import RunDir
from cockpit.contract.runrecord import RunRecord, RunRecordError, read
from cockpit.contract.runspec import ConfigError
from cockpit.core.machine.host import thread_budget
from cockpit.core.sizing.advisor import (
    Machine,
    Measurements,
    advise,
    cores_needed,
    envs_per_core,
    job_measure,
    mix_jobs,
)
from cockpit.core.sizing.devices import Mix, mix_sps, mixes
from cockpit.core.sizing.overlap import speed_of
from cockpit.core.sizing.starting_point import costs_for, cpu_costs_for, mps_outlook, resolve_preset, this_machine

MIB = 1024 * 1024


def _cpu_mean(run_dir: Path) -> float | None:
    try:
        with RunDir(run_dir).samples.open(encoding="utf-8", newline="") as fh:
            values = [float(row["cpu_percent"]) for row in csv.DictReader(fh) if row.get("cpu_percent")]
    except (OSError, ValueError, KeyError):
        return None
    return statistics.fmean(values) if values else None


def measurements_from_run(run_dir: Path) -> tuple[RunRecord, Measurements]:
    """A finished (or live) run's record and what it measured: each job's mean SPS and CPU %,
    the GPU over the run, and the CPU's mean over samples.csv. ConfigError (one line) when the
    run's run.toml cannot be read."""
    try:
        recorded = read(run_dir)
    except RunRecordError as exc:
        raise ConfigError(f"--from {exc}") from exc
    jobs = tuple(
        job_measure(
            job.id,
            sps=job.mean_sps,
            phases=job.phases,
            cpu_percent=job.cpu_percent_mean,
            error=job.error,
            gpu_mem_peak_bytes=job.peak_gpu_mem_mib * MIB if job.peak_gpu_mem_mib is not None else None,
            memory_growth_mib_h=job.memory_growth_mib_h,
            gpu_memory_growth_mib_h=job.gpu_memory_growth_mib_h,
        )
        for job in recorded.jobs
    )
    util = recorded.utilization
    measured = Measurements(
        jobs, util.gpu_util_mean if util else None, util.gpu_util_while_training if util else None, _cpu_mean(run_dir)
    )
    return recorded, measured


def predicted_sps(machine: Machine, preset: Preset, costs: Costs, counts: list[int]) -> str:
    """The aggregate SPS of each number of jobs in `counts`, by the fleet's overlap model (the same
    figures `cockpit fleet` projects with)."""
    speeds = {n: speed_of(preset, costs, n, machine.physical_cores) for n in counts}
    figures = ", ".join(f"{n} job(s) {speed.fleet_sps:,.0f} SPS together" for n, speed in speeds.items())
    alone = next(iter(speeds.values())).sps
    return f"{figures} (one alone {alone:,.0f}; the overlap model of docs/fleets.md)"


def mixes_line(machine: Machine, preset: Preset, cuda_costs: Costs, cpu_costs: Costs, jobs: int) -> str:
    """The three fastest mixes of CUDA and CPU jobs, and all of `jobs` on each device, by the
    overlap model (`devices.mixes`)."""
    every = mixes(preset, cuda_costs, cpu_costs, machine.physical_cores, mix_jobs(machine, jobs))
    shown = [m.describe() for m in every[:3]]
    for mix in (Mix(jobs, 0, 0.0), Mix(0, jobs, 0.0)):
        if mix.cpu <= machine.physical_cores:
            sps = mix_sps(preset, cuda_costs, cpu_costs, mix.cuda, mix.cpu, machine.physical_cores)
            shown.append(Mix(mix.cuda, mix.cpu, sps).describe())
    return "; ".join(dict.fromkeys(shown)) + " (predicted, fastest first)"


def mps_line(gain: MpsGain | None, refused: str | None) -> str:
    """What is known of MPS here: the measured gain, or that nobody measured it, and whether
    `--mps` can be used on this machine at all (`refused`: why not)."""
    known = gain.describe() if gain is not None else "not measured for this preset on this GPU"
    if gain is not None and not gain.helps:
        known += f": under x{MIN_MPS_GAIN:.2f}, not advised"
    return known + (f"; {refused.removeprefix('--mps: ')}" if refused else "")


def vec_env_line(machine: Machine, preset: Preset, jobs: int, costs: Costs | None) -> str | None:
    """Which VecEnv the workers of `jobs` parallel jobs step `preset`'s envs in, and why (the rule
    the worker applies, `envids.pick_vec_env`, on each job's share of the cores); None for an
    envpool env, which has no choice to make."""
    if backend_for(preset.env) == "envpool":
        return None
    cores = thread_budget(jobs, machine.physical_cores).threads_per_job
    if preset.vec_env != "auto":
        kind = "DummyVecEnv" if preset.vec_env == "dummy" else "SubprocVecEnv"
        return f"{kind}: the preset's vec_env says so (gymnasium fallback)"
    if costs is None and preset.n_envs >= 2 and cores >= 2:
        return (
            f"chosen by each worker from a step it measures at start (no probe here): SubprocVecEnv when a "
            f"step costs {SUBPROC_MIN_STEP_US:,.0f} us or more, else DummyVecEnv (gymnasium fallback)"
        )
    _kind, why = pick_vec_env(costs.env_step_us if costs else None, preset.n_envs, cores)
    return f"{why} ({preset.n_envs} envs per job, {cores} core(s) each; gymnasium fallback)"


def _numbers(
    machine: Machine,
    preset: Preset,
    jobs: int,
    measured: Measurements | None,
    costs: Costs | None,
    suggested_jobs: int | None = None,
) -> Table:
    table = Table(title="numbers used", title_justify="left", box=box.SIMPLE_HEAD, show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    gpu = f"{machine.gpu_name}, {machine.gpu_memory_bytes / 1024**3:.0f} GiB" if machine.gpu_name else "none (CPU only)"
    table.add_row("cores", f"{machine.physical_cores} physical, {machine.logical_cores} logical")
    table.add_row("RAM", f"{machine.ram_bytes / 1024**3:.0f} GiB")
    table.add_row("GPU", gpu)
    table.add_row(
        "preset",
        f"{preset.name}: {preset.env}, n_envs {preset.n_envs}, n_steps {preset.n_steps}, "
        f"batch {preset.batch_size}, net {','.join(map(str, preset.net_arch))}",
    )
    vec_env = vec_env_line(machine, preset, suggested_jobs or jobs, costs)
    if vec_env is not None:
        table.add_row("vec env", vec_env)
    if costs is not None:
        table.add_row("measured costs", costs.describe())
        table.add_row("jobs", f"{jobs} (they keep ~{cores_needed(preset, jobs, costs):.1f} cores busy, measured)")
        table.add_row("predicted", predicted_sps(machine, preset, costs, [jobs, suggested_jobs or jobs]))
    else:
        per_core = envs_per_core(preset.env)
        need = cores_needed(preset, jobs)
        table.add_row("jobs", f"{jobs} (their envs need ~{need:.1f} cores at {per_core} per core)")
    if measured is not None:
        fmt = lambda v, unit="": "-" if v is None else f"{v:,.1f}{unit}"  # noqa: E731
        table.add_row(
            "measured GPU",
            f"{fmt(measured.gpu_util_mean, ' %')} mean, {fmt(measured.gpu_util_while_training, ' %')} while training",
        )
        table.add_row("measured CPU", f"{fmt(measured.cpu_percent_mean, ' %')} mean over cores")
        peak = measured.peak_gpu_mem_bytes
        table.add_row(
            "measured jobs",
            f"{len(measured.jobs)}, {fmt(measured.aggregate_sps)} SPS together, "
            f"peak GPU memory {fmt(peak / MIB if peak else None, ' MiB')}",
        )
    return table


def advice_table(items: list[Advice]) -> Table:
    """The advice as a table: setting, change, expected effect, reason."""
    table = Table(title="advice", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("setting", "change", "expected effect", "why"):
        table.add_column(column, overflow="fold")
    for item in items:
        table.add_row(item.setting, f"{item.current} -> {item.suggested}", item.effect, item.reason)
    return table


def recommend(
    console: Console,
    *,
    preset: str | None,
    env: str | None,
    jobs: int | None,
    run_dir: Path | None,
    machine: Machine | None = None,
    probe: bool = True,
) -> list[Advice]:
    """Print the numbers and the advice; returns the advice. ConfigError on bad input. With
    `probe`, the core budget and n_envs come from measured costs (`cockpit.core.sizing.cost_probe`)."""
    machine = machine or this_machine()
    measured = None
    if run_dir is not None:
        recorded, measured = measurements_from_run(run_dir)
        preset = preset or recorded.config.preset
        env = env or recorded.config.env
        jobs = jobs or recorded.config.jobs
    resolved = resolve_preset(preset, env, machine)
    jobs = jobs or 2
    with step_display(console) as progress:
        costs = costs_for(say(console), machine, resolved, progress) if probe else None
        cpu_costs = cpu_costs_for(say(console), machine, resolved, progress) if probe and costs is not None else None
    mps_gain, mps_refused = mps_outlook(machine, resolved)
    items = advise(
        machine, resolved, jobs, measured, costs, cpu_costs=cpu_costs, mps_gain=mps_gain, mps_usable=mps_refused is None
    )
    suggested = next((int(a.suggested) for a in items if a.setting == AdviceSetting.JOBS), None)
    table = _numbers(machine, resolved, jobs, measured, costs, suggested)
    if costs is not None and cpu_costs is not None:
        table.add_row("measured on the CPU", cpu_costs.describe())
        table.add_row("device mixes", mixes_line(machine, resolved, costs, cpu_costs, jobs))
    if machine.gpu_name is not None:
        table.add_row("MPS", mps_line(mps_gain, mps_refused))
    console.print(table)
    if items:
        console.print(advice_table(items))
    else:
        console.print(f"Nothing to change: {jobs} job(s) of {resolved.name} on {resolved.env} fit this machine.")
    return items


def main(*, preset: str | None, env: str | None, jobs: int | None, run_dir: Path | None, probe: bool) -> int:
    """`cockpit recommend` on stdout; returns the exit code (2 with one line on bad input)."""
    try:
        recommend(output_console(), preset=preset, env=env, jobs=jobs, run_dir=run_dir, probe=probe)
    except ConfigError as exc:
        print(f"cockpit recommend: error: {exc}", file=sys.stderr)
        return 2
    return 0
