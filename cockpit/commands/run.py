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

from cockpit.commands.console import interactive
from cockpit.contract.files import private_files
from cockpit.contract.runspec import ConfigError, RunSpec, build_spec, handed, on_cluster
from cockpit.contract.settings import RunSettings, declared, fixed_given, resumed_with
from cockpit.contract.trust import recorded_commands, untrusted
from cockpit.core.machine.nvml import GpuReader
from cockpit.core.session.compute_modes import default_jobs
from cockpit.core.session.front_ends import FrontEnds
from cockpit.core.session.start import Asked, Here, start_run


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
        raise ConfigError(
            "--auto: sizes the run to this machine's cores and GPU; with --ray the jobs run on the "
            "cluster's: give --jobs instead"
        )
    spec = _local_spec(args, gpus, command_line, visible_by)
    given = args.run_dir is not None or args.resume is not None or args.spec is not None
    spec = on_cluster(spec, args.ray, args.storage, run_dir_given=given)
    if spec.loaded_preset is not None and args.typed is None:  # with --typed, the cockpit that started this run checked
        from cockpit.core.launch.preflight import check_trainable

        source = f"preset {spec.loaded_preset.source}: env"
        if args.env or args.resume:
            source = "--env" if args.env else f"--resume {args.resume}: run.toml's env"
        check_trainable(dataclasses.replace(spec.loaded_preset, env=spec.env), source)
    return spec


def _local_spec(
    args: argparse.Namespace, gpus: Sequence[GpuReader] | None, command_line: tuple[str, ...], visible_by: str = ""
) -> RunSpec:
    """The validated run on this machine (`--gpus` checked against `gpus`, the GPUs it may use,
    which `visible_by` chose when set; None and no `visible_by`: no GPU); ConfigError (one line)
    on bad input. With `--spec` (a background run), the settings the cockpit that started it
    validated, checked again here."""
    from cockpit.contract.runrecord import RunRecordError, read

    here = Here(list(gpus or ()), visible_by, command_line).indices
    problem = untrusted(args.resume) if args.resume is not None else None
    if problem is not None:  # before its run.toml is even read: a run directory is code (contract.trust)
        raise ConfigError(f"--resume {problem}")
    if args.spec is not None:
        return build_spec(
            handed(args.spec),
            command_line=command_line,
            resuming=args.resume is not None,
            gpus_here=here,
            visible_by=visible_by,
        )
    if getattr(args, "script", None) is not None:
        if args.resume is not None:
            raise ConfigError(f"--resume {args.resume}: continues the run's own command; drop the one after --")
        worker_only = [each.flag for _, each in declared() if each.worker and getattr(args, each.dest) is not None]
        worker_only += ["--auto"] if args.auto else []
        if worker_only:
            raise ConfigError(
                f"{', '.join(map(str, worker_only))}: cockpit's own worker's settings; a command after "
                "-- trains its own way (give it its own flags)"
            )
    if args.resume is None:
        preset = args.preset or ("heavy" if gpus else "cartpole")
        jobs = args.jobs or (
            len(args.devices) if args.devices else 1 if args.auto else default_jobs(gpus or (), args.gpus, args.mps)
        )
        return build_spec(
            RunSettings.from_args(args, jobs=jobs, preset=preset),
            command_line=command_line,
            gpus_here=here,
            visible_by=visible_by,
        )
    fixed = fixed_given(args)
    if fixed:
        raise ConfigError(f"--resume continues a run with its recorded settings; drop {', '.join(fixed)}")
    try:
        record = read(args.resume)
    except RunRecordError as exc:
        raise ConfigError(f"--resume {args.resume}: no usable run.toml there ({exc})") from exc
    for line in recorded_commands(record.config):
        print(f"cockpit run: resuming {args.resume}: {line}", file=sys.stderr, flush=True)
    return build_spec(
        resumed_with(args, record.config, record.name, args.resume),  # as each setting's declaration says
        command_line=command_line,
        resuming=True,
        gpus_here=here,
        visible_by=visible_by,
    )


def main(args: argparse.Namespace, front: FrontEnds) -> int:
    """`cockpit run`, its run directory and every file in it made for its user alone (0700 and
    0600: `files.private_files`); returns the exit code as `_main` does."""
    with private_files():
        return _main(args, front)


def _main(args: argparse.Namespace, front: FrontEnds) -> int:
    """Carry out `cockpit run` as parsed; returns the exit code (0 done, 1 failed, 2 bad input,
    3 run directory lost, 128 + the signal when interrupted)."""
    asked = Asked(
        "cockpit run",
        args.typed,
        sys.argv[1:] if args.argv is None else args.argv,
        headless=args.headless or not interactive(),
        resume=args.resume is not None,
    )
    return start_run(
        lambda here: _spec(args, here.readers, here.command_line, here.visible_by),
        front,
        asked,
        auto_window_s=args.auto_window if args.auto else None,
    )
