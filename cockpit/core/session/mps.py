"""`--mps` around a run's session, the same for `cockpit run` and `cockpit fleet`: refuse it before
anything starts where MPS cannot be used, open the daemon before the first job, and stop it (only
if this run started it) once the session has ended. The daemon's rules are
`cockpit.core.machine.mps`'s."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from cockpit.contract.runspec import RunSpec
from cockpit.core.machine.mps import (
    Daemon,
    MpsError,
    close_daemon,
    open_daemon,
    quit_left_behind,
    refusal,
    why_unmeasurable,
)
from cockpit.core.machine.nvml import GpuInfo, GpuReader, close_gpus


def mps_refusal(spec: RunSpec, gpus: Sequence[GpuReader], gpu_status: str) -> str | None:
    """Why `spec`'s `--mps` cannot run here (`mps.refusal` on the GPUs the run may use: `--gpus`'
    among `gpus`), in one line; None without `--mps` or when it can."""
    if not spec.mps:
        return None
    return refusal(_usable(spec, gpus), gpu_status)


def _usable(spec: RunSpec, gpus: Sequence[GpuReader]) -> list[GpuInfo]:
    """The GPUs `spec` may run on, of `gpus`: those `--gpus` names, or all."""
    return [r.info for r in gpus if spec.gpus is None or r.info.index in spec.gpus]


def auto_mps(spec: RunSpec, gpus: Sequence[GpuReader], gpu_status: str) -> tuple[bool, str | None]:
    """Whether `run --auto` should have an MPS daemon stand ready, to measure the jobs as its
    clients once they are sized, and, where it would not on a machine with a GPU, one line why.
    Not under `--mps` (the jobs are clients from the start), nor where MPS cannot be used here
    (`mps.refusal`), nor where a daemon already serves this user: every CUDA job is its client."""
    if spec.mps:
        return False, None
    usable = _usable(spec, gpus)
    if not usable:
        return False, None
    why = why_unmeasurable(usable, gpu_status)
    return why is None, f"--auto: MPS not measured: {why}" if why is not None else None


def open_mps(spec: RunSpec, standby: bool = False) -> tuple[Daemon | None, list[str]]:
    """The daemon `spec`'s jobs are clients of (None without `--mps`, unless `standby`: one for
    `--auto` to measure) and the lines the run should show about it. Either way a daemon a killed
    cockpit left in the run directory is quit first. MpsError (one line) when the daemon cannot be
    started."""
    if spec.mps or standby:
        return open_daemon(spec.run_dir)
    note = quit_left_behind(spec.run_dir)
    return None, [note] if note else []


def close_mps(daemon: Daemon | None, spec: RunSpec, who: str) -> None:
    """Stop the run's daemon if it started it (`mps.close_daemon`); a daemon that would not stop
    is one line on stderr, prefixed with `who`."""
    if daemon is None:
        return
    problem = close_daemon(daemon, spec.run_dir)
    if problem:
        print(f"{who}: {problem}", file=sys.stderr)


def with_mps(spec: RunSpec, gpus: Sequence[GpuReader], who: str,
             session: Callable[[list[str], Path | None], int], *, standby: bool = False) -> int:  # fmt: skip
    """Run `session(notes, pipe_dir)` inside `spec`'s MPS daemon (`open_mps`, then `close_mps`
    whatever the session's end): `notes` are the lines the run shows about the daemon, `pipe_dir`
    its pipe directory for the workers (None without `--mps` or `standby`). A daemon that cannot
    be started is one line on stderr, prefixed with `who`, the run's `gpus` closed and exit code
    2; a `standby` one (for `--auto`) is a note instead, and the run goes on without MPS."""
    try:
        daemon, notes = open_mps(spec, standby)
    except MpsError as exc:
        if not spec.mps:
            return session([f"--auto: MPS not measured: {str(exc).removeprefix('--mps: ')}"], None)
        close_gpus(gpus)
        print(f"{who}: error: {exc}", file=sys.stderr)
        return 2
    try:
        return session(notes, daemon.pipe_dir if daemon is not None else None)
    finally:
        close_mps(daemon, spec, who)
