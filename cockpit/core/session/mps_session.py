"""`--mps` around a run's session, the same for `cockpit run` and `cockpit fleet`: refuse it before
anything starts where MPS cannot be used, open the daemons (one per GPU the run may place jobs on)
before the first job, and stop them (only those this run started) once the session has ended.
Without `--mps`, a daemon found serving makes the jobs its clients all the same: the run says so.
The daemons' rules are `cockpit.core.machine.mps_daemon`'s."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from cockpit.contract.runspec import RunSpec
from cockpit.contract.workerargs import MpsServers
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.mps_daemon import (
    Daemon,
    MpsError,
    close_daemons,
    open_daemons,
    quit_left_behind,
    refusal,
    servers,
    serving,
    started_by,
    why_unmeasurable,
)
from cockpit.core.machine.nvml import GpuReader, close_gpus


def mps_refusal(spec: RunSpec, gpus: Sequence[GpuReader], gpu_status: str) -> str | None:
    """Why `spec`'s `--mps` cannot run here (`mps_daemon.refusal` on the GPUs the run may use: `--gpus`'
    among `gpus`), in one line; None without `--mps` or when it can."""
    if not spec.mps:
        return None
    return refusal(_usable(spec, gpus), gpu_status)


def _usable(spec: RunSpec, gpus: Sequence[GpuReader]) -> list[GpuInfo]:
    """The GPUs `spec` may run on, of `gpus`: those `--gpus` names, or all."""
    return [r.info for r in gpus if spec.gpus is None or r.info.index in spec.gpus]


def auto_mps(spec: RunSpec, gpus: Sequence[GpuReader], gpu_status: str) -> tuple[bool, str | None]:
    """Whether `run --auto` should have MPS daemons stand ready, to measure the jobs as their
    clients once they are sized, and, where it would not on a machine with a GPU, one line why.
    Not under `--mps` (the jobs are clients from the start), nor where MPS cannot be used here
    (`mps_daemon.refusal`), nor where a daemon already serves, whoever started it: every CUDA job is its
    client, and MPS would be compared with MPS."""
    if spec.mps:
        return False, None
    usable = _usable(spec, gpus)
    if not usable:
        return False, None
    why = why_unmeasurable(usable, gpu_status)
    return why is None, f"--auto: MPS not measured: {why}" if why is not None else None


def open_mps(spec: RunSpec, gpus: Sequence[GpuInfo], standby: bool = False) -> tuple[list[Daemon], list[str]]:
    """The daemons `spec`'s jobs on `gpus` are clients of, and the lines the run should show about
    them: under `--mps`, or `standby` (for `--auto` to measure), those `mps_daemon.open_daemons` opens;
    without either, a daemon found serving (the jobs are its clients anyway), else none. Either way
    daemons a killed cockpit left in the run directory are quit first. MpsError (one line) when a
    daemon cannot be started."""
    if spec.mps or standby:
        return open_daemons(spec.run_dir, gpus)
    notes = quit_left_behind(spec.run_dir)
    found = serving()
    if found is None:
        return [], notes
    notes.append(
        f"MPS: the daemon at {found.pipe_dir}{started_by(found.pipe_dir)} serves every CUDA process here: "
        "the jobs are its clients without --mps"
    )
    return [found], notes


def close_mps(daemons: Sequence[Daemon], spec: RunSpec, who: str) -> None:
    """Stop the run's daemons that it started (`mps_daemon.close_daemons`); one that would not stop is
    one line on stderr, prefixed with `who`."""
    problem = close_daemons(daemons, spec.run_dir)
    if problem:
        print(f"{who}: {problem}", file=sys.stderr)


def with_mps(
    spec: RunSpec,
    gpus: Sequence[GpuReader],
    who: str,
    session: Callable[[list[str], MpsServers | None], int],
    *,
    standby: bool = False,
) -> int:
    """Run `session(notes, mps)` inside `spec`'s MPS daemons (`open_mps`, then `close_mps`
    whatever the session's end): `notes` are the lines the run shows about them, `mps` where the
    workers on each GPU meet theirs (None: no daemon; `MpsServers.external`: one found serving,
    whose clients the jobs are with or without `--mps`). A daemon that cannot be started is one
    line on stderr, prefixed with `who`, the run's `gpus` closed and exit code 2; a `standby` one
    (for `--auto`) is a note instead, and the run goes on without MPS."""
    try:
        daemons, notes = open_mps(spec, _usable(spec, gpus), standby)
    except MpsError as exc:
        if not spec.mps:
            return session([f"--auto: MPS not measured: {str(exc).removeprefix('--mps: ')}"], None)
        close_gpus(gpus)
        print(f"{who}: error: {exc}", file=sys.stderr)
        return 2
    try:
        return session(notes, servers(daemons) if daemons else None)
    finally:
        close_mps(daemons, spec, who)
