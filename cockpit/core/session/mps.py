"""`--mps` around a run's session, the same for `cockpit run` and `cockpit fleet`: refuse it before
anything starts where MPS cannot be used, open the daemon before the first job, and stop it (only
if this run started it) once the session has ended. The daemon's rules are
`cockpit.core.machine.mps`'s."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from cockpit.contract.runspec import RunSpec
from cockpit.core.machine.mps import Daemon, MpsError, close_daemon, open_daemon, quit_left_behind, refusal
from cockpit.core.machine.nvml import GpuReader, close_gpus


def mps_refusal(spec: RunSpec, gpus: Sequence[GpuReader], gpu_status: str) -> str | None:
    """Why `spec`'s `--mps` cannot run here (`mps.refusal` on the GPUs the run may use: `--gpus`'
    among `gpus`), in one line; None without `--mps` or when it can."""
    if not spec.mps:
        return None
    usable = [r.info for r in gpus if spec.gpus is None or r.info.index in spec.gpus]
    return refusal(usable, gpu_status)


def open_mps(spec: RunSpec) -> tuple[Daemon | None, list[str]]:
    """The daemon `spec`'s jobs are clients of (None without `--mps`) and the lines the run
    should show about it. Either way a daemon a killed cockpit left in the run directory is quit
    first. MpsError (one line) when the daemon cannot be started."""
    if spec.mps:
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
             session: Callable[[list[str], Path | None], int]) -> int:  # fmt: skip
    """Run `session(notes, pipe_dir)` inside `spec`'s MPS daemon (`open_mps`, then `close_mps`
    whatever the session's end): `notes` are the lines the run shows about the daemon, `pipe_dir`
    its pipe directory for the workers (None without `--mps`). A daemon that cannot be started
    is one line on stderr, prefixed with `who`, the run's `gpus` closed and exit code 2."""
    try:
        daemon, notes = open_mps(spec)
    except MpsError as exc:
        close_gpus(gpus)
        print(f"{who}: error: {exc}", file=sys.stderr)
        return 2
    try:
        return session(notes, daemon.pipe_dir if daemon is not None else None)
    finally:
        close_mps(daemon, spec, who)
