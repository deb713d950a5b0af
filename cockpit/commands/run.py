"""`cockpit run`: validate a run, then supervise it here (headless) or in the background under
the cockpit.

On a terminal the run is started as `cockpit run --headless` in its own session and the TUI
attaches to it, so quitting the viewer leaves the jobs training. Piped, under nohup or with
`--headless`, this process is the run.

Exit codes: 0 every job done; 1 some failed, were stopped or were paused (a full disk); 2 bad
input (one line, nothing started); 3 the run directory was deleted, moved away or stayed
unwritable mid-run: the workers were killed at once (nothing left to checkpoint into) and one
line says so; 128 + the signal when interrupted (130 for Ctrl-C).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cockpit.commands.console import interactive
from cockpit.commands.frontends import FrontEnds
from cockpit.contract.runspec import ConfigError, RunSpec, build_spec, handed, on_cluster
from cockpit.contract.settings import RunSettings, declared
from cockpit.core.machine.nvml import GpuReader
from cockpit.core.machine.visibility import device_indices
from cockpit.core.session.compute_modes import default_jobs, mode_bounds
from cockpit.core.session.mps_session import auto_mps, mps_refusal, with_mps

if TYPE_CHECKING:
    from cockpit.contract.costs import Costs
    from cockpit.core.sizing.autotune import AutoTuner


def _typed(args: argparse.Namespace) -> tuple[str, ...] | None:
    """What the user typed: `--typed` when a terminal `cockpit run` started this one, else argv;
    None when `--typed` is not a JSON list of strings."""
    from cockpit.core.session.background import typed_command_line

    return typed_command_line(args.typed, sys.argv[1:] if args.argv is None else args.argv)


def _spec(
    args: argparse.Namespace, gpus: Sequence[GpuReader] | None, command_line: tuple[str, ...], visible_by: str = ""
) -> RunSpec:
    """The validated run the flags ask for, on Ray with `--ray`, on the GPUs `gpus` (those the
    cockpit's `CUDA_VISIBLE_DEVICES`, `visible_by`, leaves it: `visibility.visible_gpus`); ConfigError
    (one line) on bad input, an env stable-baselines3 cannot train among it (`check_trainable`)."""
    if args.devices is not None and (args.auto or args.ray is not None):
        flag = "--auto" if args.auto else "--ray"
        raise ConfigError(f"--devices: {flag} chooses where jobs run; give one or the other")
    if args.ray is not None and args.auto:
        raise ConfigError("--auto: sizes the run to this machine's cores and GPU; with --ray the jobs run on the "
                          "cluster's: give --jobs instead")  # fmt: skip
    spec = _local_spec(args, gpus, command_line, visible_by)
    given = args.run_dir is not None or args.resume is not None or args.spec is not None
    spec = on_cluster(spec, args.ray, args.storage, run_dir_given=given)
    if spec.preset is not None and args.typed is None:  # with --typed, the cockpit that started this run checked
        from cockpit.core.launch.preflight import check_trainable

        source = f"preset {spec.preset.source}: env"
        if args.env or args.resume:
            source = "--env" if args.env else f"--resume {args.resume}: run.toml's env"
        check_trainable(dataclasses.replace(spec.preset, env=spec.env), source)
    return spec


def _local_spec(
    args: argparse.Namespace, gpus: Sequence[GpuReader] | None, command_line: tuple[str, ...], visible_by: str = ""
) -> RunSpec:
    """The validated run on this machine (`--gpus` checked against `gpus`, the GPUs it may use,
    which `visible_by` chose when set; None and no `visible_by`: no GPU); ConfigError (one line)
    on bad input. With `--spec` (a background run), the settings the cockpit that started it
    validated, checked again here."""
    from cockpit.contract.runrecord import RunRecordError, read
    from cockpit.core.session.loop import resume_settings

    # No GPU, unless CUDA_VISIBLE_DEVICES left none: --gpus has nothing to be checked against, and a warning says so.
    here = device_indices([r.info for r in gpus or ()]) if gpus or visible_by else None
    if args.spec is not None:
        return build_spec(handed(args.spec), command_line=command_line, resuming=args.resume is not None,
                          gpus_here=here, visible_by=visible_by)  # fmt: skip
    if getattr(args, "script", None) is not None:
        if args.resume is not None:
            raise ConfigError(f"--resume {args.resume}: continues the run's own command; drop the one after --")
        worker_only = [each.flag for _, each in declared() if each.worker and getattr(args, each.dest) is not None]
        worker_only += ["--auto"] if args.auto else []
        if worker_only:
            raise ConfigError(f"{', '.join(map(str, worker_only))}: cockpit's own worker's settings; a command after "
                              "-- trains its own way (give it its own flags)")  # fmt: skip
    if args.resume is None:
        preset = args.preset or ("heavy" if gpus else "cartpole")
        jobs = args.jobs or (
            len(args.devices) if args.devices else 1 if args.auto else default_jobs(gpus or (), args.gpus, args.mps)
        )
        return build_spec(RunSettings.from_args(args, jobs=jobs, preset=preset), command_line=command_line,
                          gpus_here=here, visible_by=visible_by)  # fmt: skip
    fixed = [str(each.flag) for _, each, _ in RunSettings.given_again(args, "fixed")]
    if fixed:
        raise ConfigError(f"--resume continues a run with its recorded settings; drop {', '.join(fixed)}")
    try:
        recorded = resume_settings(args.resume, read(args.resume))
    except RunRecordError as exc:
        raise ConfigError(f"--resume {args.resume}: no usable run.toml there ({exc})") from exc
    # A kept setting given again replaces the recorded one; a fresh one is taken as given, each session.
    given = RunSettings.from_args(args)
    again = {name: value for name, _, value in RunSettings.given_again(args, "kept")}
    fresh = {name: getattr(given, name) for name, each in declared() if each.resume == "fresh"}
    return build_spec(dataclasses.replace(recorded, **again, **fresh), command_line=command_line, resuming=True,
                      gpus_here=here, visible_by=visible_by)  # fmt: skip


def main(args: argparse.Namespace, front: FrontEnds) -> int:
    """Carry out `cockpit run` as parsed; returns the exit code (0 done, 1 failed, 2 bad input,
    3 run directory lost, 128 + the signal when interrupted)."""
    from cockpit.core.launch.local import LocalLauncher
    from cockpit.core.machine.nvml import close_gpus, open_gpus
    from cockpit.core.machine.placement import placeable
    from cockpit.core.machine.visibility import visible_gpus
    from cockpit.core.session.loop import RunSession, run_on_launcher, sampled_gpus
    from cockpit.core.telemetry.sampler import Sampler

    command_line = _typed(args)
    if command_line is None:
        print("cockpit run: error: --typed: give the command line as a JSON list of strings", file=sys.stderr)
        return 2
    headless = args.headless or not interactive()
    gpus, gpu_status = open_gpus()
    gpus, gpu_status, visibility = visible_gpus(gpus, gpu_status)
    try:
        spec = _spec(args, gpus, command_line, visibility.described if visibility.listed else "")
        problem = mps_refusal(spec, gpus, gpu_status)
        bounds = mode_bounds(spec, gpus, f"--jobs {spec.jobs}")
        problem = problem or bounds.refusal
    except ConfigError as exc:
        close_gpus(gpus)
        print(f"cockpit run: error: {exc}", file=sys.stderr)
        return 2
    if problem is not None:  # before anything starts: no run directory, no daemon
        close_gpus(gpus)
        print(f"cockpit run: error: {problem}", file=sys.stderr)
        return 2
    if not headless:
        close_gpus(gpus)
        return _run_in_background(spec, args, front)
    gpus, gpu_status = sampled_gpus(spec, gpus, gpu_status)
    # The first GPU a job can run on: a MIG slice rather than the GPU it is cut from.
    gpu = next((r for r in gpus if r.info in placeable([g.info for g in gpus])), None)
    costs = _cached_costs(spec, gpu)
    # --auto measures MPS where a daemon can be started: one stands ready, the jobs not its clients.
    standby, why_not = auto_mps(spec, gpus, gpu_status) if args.auto else (False, None)
    if standby and bounds.capacity is not None:  # one job per exclusive GPU: no two share one to measure MPS on
        standby, why_not = False, f"--auto: MPS not measured: {bounds.notes[0]}"
    return with_mps(spec, gpus, "cockpit run", lambda notes, mps: run_on_launcher(
        spec, LocalLauncher,
        lambda launcher: RunSession(spec, Sampler(gpus=gpus, gpu_status=gpu_status), launcher=launcher,
                                    resume=args.resume is not None, costs=costs,
                                    auto=_auto_tuner(spec, gpu, args.auto_window, standby and mps is not None,
                                                     bounds.capacity, "; ".join(bounds.notes))
                                    if args.auto else None,
                                    notes=(*visibility.warnings, *bounds.notes, *notes,
                                           *([why_not] if why_not else [])),
                                    mps=mps, mps_clients=spec.mps),
        front.headless(), "cockpit run",
    ), standby=standby)  # fmt: skip


def _cached_costs(spec: RunSpec, gpu: GpuReader | None) -> Costs | None:
    """The costs `recommend` or `tune` measured for this run's preset on this machine, if any:
    a run never waits for a probe."""
    from cockpit.core.sizing.cost_probe import cached_costs

    if spec.preset is None:
        return None
    return cached_costs(dataclasses.replace(spec.preset, env=spec.env), gpu.info.name if gpu is not None else None)


def _auto_tuner(spec: RunSpec, gpu: GpuReader | None, window_s: float, mps: bool = False,
                gpu_job_cap: int | None = None, gpu_job_cap_why: str = "") -> AutoTuner:  # fmt: skip
    """The --auto loop for this machine: capped by the cores the preset's envs need and by the
    jobs the GPUs' compute modes take (`gpu_job_cap`, which `gpu_job_cap_why` explains); with
    `mps` (a daemon stands ready) it measures MPS last."""
    from cockpit.core.machine.clock import SystemClock
    from cockpit.core.machine.host import host_info
    from cockpit.core.sizing.advisor import envs_per_core, max_jobs_for_cores
    from cockpit.core.sizing.autotune import AutoTuner

    assert spec.preset is not None  # --auto with a script is refused up front
    preset = dataclasses.replace(spec.preset, env=spec.env)
    cores = host_info().physical_cores
    return AutoTuner(SystemClock(), max_slots=max_jobs_for_cores(preset, cores), n_envs=preset.n_envs,
                     env_capacity=envs_per_core(spec.env) * cores,
                     gpu_memory_bytes=gpu.info.memory_total_bytes if gpu is not None else None,
                     window_s=window_s, settle_s=window_s / 3, mps=mps, gpu_job_cap=gpu_job_cap,
                     gpu_job_cap_why=gpu_job_cap_why)  # fmt: skip


def _run_in_background(spec: RunSpec, args: argparse.Namespace, front: FrontEnds) -> int:
    """Start the validated run in the background and open the cockpit on it."""
    from cockpit.core.session.background import headless_argv, spawn, watch_to_exit

    argv = headless_argv(spec, resume=args.resume is not None, auto_window_s=args.auto_window if args.auto else None)
    run = spawn(argv, spec.run_dir)
    print(f"cockpit run: starting {spec.agents} job(s) in {spec.run_dir} (log: {run.log})", file=sys.stderr)
    return watch_to_exit(run, lambda source: front.watch(source, who="cockpit run"), "cockpit run")
