"""The front door of a run: `cockpit run`, `cockpit fleet` and `cockpit attach` hand it what they
parsed and a front end, and it does the rest, in one order for all of them.

`start_run` and `start_fleet`:

1. take the command line (`--typed` from the cockpit that started a background run, else argv);
2. open the GPUs and keep those the cockpit's `CUDA_VISIBLE_DEVICES` leaves it;
3. have the command build its validated spec against them (`Here`);
4. refuse, in one line and exit 2, what cannot start: bad input, `--mps` where MPS cannot run,
   more GPU jobs than the GPUs' compute modes take. Nothing has started yet: no run directory,
   no daemon;
5. on a terminal, start the run in the background and open the cockpit on it (`front.watch`);
6. else run it here: the GPUs the sampler reads, the MPS daemons around the session, the
   launcher (this machine's, or a Ray cluster's), the session (`startup.start_session`) and the
   headless view (`front.headless`), to the run's exit code.

`front_ends.watch_run` opens the cockpit on a live or finished run. Each line these print starts
with the command's name (`who`).
"""

from __future__ import annotations

import dataclasses
import sqlite3
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cockpit.contract.costs import Costs
from cockpit.contract.fleetplan import FleetPlan, PlanError, parse_plan
from cockpit.contract.runspec import ConfigError, RunSpec
from cockpit.contract.toml import tomllib
from cockpit.core.fleet.run import FleetRun
from cockpit.core.launch.local import LocalLauncher
from cockpit.core.launch.pooled import PooledLauncher
from cockpit.core.machine.nvml import GpuReader, close_gpus, open_gpus
from cockpit.core.machine.placement import placeable
from cockpit.core.machine.visibility import device_indices, visible_gpus
from cockpit.core.session import background
from cockpit.core.session.compute_modes import ModeBounds, mode_bounds
from cockpit.core.session.front_ends import FrontEnds, refuse
from cockpit.core.session.mps_session import auto_mps, mps_refusal, with_mps
from cockpit.core.session.run_session import run_on_launcher, sampled_gpus
from cockpit.core.session.startup import start_session
from cockpit.core.sizing.autotune import AutoTuner
from cockpit.core.supervise.supervisor import Supervisor
from cockpit.core.telemetry.sampler import Sampler


@dataclass(frozen=True)
class Here:
    """What a run's spec is checked against: the GPUs it may use, open (`readers`), the cockpit's
    `CUDA_VISIBLE_DEVICES` that chose them (`visible_by`, as messages name it; "" when unset), and
    the command line the user typed, for run.toml."""

    readers: list[GpuReader]
    visible_by: str
    command_line: tuple[str, ...]

    @property
    def indices(self) -> tuple[int, ...] | None:
        """The indices `--gpus` is checked against; None (no GPU, unless `CUDA_VISIBLE_DEVICES`
        left none): nothing to check against, and a warning says so."""
        return device_indices([r.info for r in self.readers]) if self.readers or self.visible_by else None


@dataclass(frozen=True)
class Asked:
    """How a command asks for its run, beside its spec: `who` names it in every line (`cockpit
    run`); `typed` and `argv` are what the user typed (`--typed`, else the arguments); `headless`
    runs it here (`--headless`, or no terminal), else in the background under the cockpit;
    `resume` continues a run. `jobs_from` and `mps_from` name where the jobs count and `mps`
    came from when not from `--jobs` and `--mps` (a fleet plan), for the refusals."""

    who: str
    typed: str | None
    argv: Sequence[str]
    headless: bool
    resume: bool
    jobs_from: str | None = None
    mps_from: str | None = None


@dataclass(frozen=True)
class _Opened:
    """A run past its refusals, to be run here: its spec, the GPUs its sampler reads and their
    status line, the compute modes' bounds, and the lines its warnings begin with."""

    spec: RunSpec
    gpus: list[GpuReader]
    gpu_status: str
    bounds: ModeBounds
    notes: tuple[str, ...]


def start_run(spec: Callable[[Here], RunSpec], front: FrontEnds, asked: Asked, *, auto_window_s: int | None) -> int:
    """`cockpit run`: the run `spec(here)` validates, in the background or here (the module's
    steps); `auto_window_s` is `--auto`'s window (None without `--auto`). Returns the exit code
    (0 done, 1 failed, 2 bad input, 3 run directory lost, 128 + the signal when interrupted)."""

    def in_background(run: RunSpec) -> int:
        argv = background.headless_argv(run, resume=asked.resume, auto_window_s=auto_window_s)
        return run_in_background(argv, run, front, asked.who, what=f"{run.agents} job(s) ")

    def here(opened: _Opened) -> int:
        return _run_here(opened, front, asked, auto_window_s)

    return _start(spec, asked, in_background, here)


def start_fleet(
    spec: Callable[[Here], RunSpec],
    front: FrontEnds,
    asked: Asked,
    *,
    fleet: Callable[[Supervisor], FleetRun],
    background_args: Callable[[RunSpec], list[str]],
) -> int:
    """`cockpit fleet`: the fleet `spec(here)` validates, on a terminal started in the background as
    `cockpit fleet --headless` with `background_args(spec)` (its plan and rate) and the spec as
    data, else here, its `FleetRun` made by `fleet` from the supervisor (`fleet_of`). Returns the
    exit code, as `start_run`'s."""

    def in_background(run: RunSpec) -> int:
        argv = [*background_args(run), *background.spec_argv(run)]
        return run_in_background(argv, run, front, asked.who, verb="fleet")

    def here(opened: _Opened) -> int:
        run, gpus = opened.spec, opened.gpus
        # Served workers run agent after agent: a fleet's many short tiers pay the worker's start-up
        # (torch, SB3, envpool imports) once per process instead of once per agent and tier. On Ray
        # (--ray) each agent's attempt is an actor of its own.
        return with_mps(
            run,
            gpus,
            asked.who,
            lambda notes, mps: run_on_launcher(
                run,
                PooledLauncher,
                lambda launcher: start_session(
                    run,
                    Sampler(gpus=gpus, gpu_status=opened.gpu_status),
                    launcher,
                    resume=asked.resume,
                    fleet=fleet,
                    notes=(*opened.notes, *notes),
                    mps=mps,
                ),
                front.headless(),
                asked.who,
            ),
        )

    return _start(spec, asked, in_background, here)


def fleet_of(plan: FleetPlan, plan_text: str, *, resume: bool, rate: float | None) -> Callable[[Supervisor], FleetRun]:
    """What makes a fleet's `FleetRun` from its supervisor: the plan's new fleet, or with `resume`
    the one its fleet.db records; `rate` (USD per hour) prices it."""

    def fleet(supervisor: Supervisor) -> FleetRun:
        if resume:
            return FleetRun.resume(supervisor, rate_usd_per_h=rate)
        return FleetRun.new(plan, plan_text, supervisor, rate_usd_per_h=rate)

    return fleet


def recorded_plan(run_dir: Path) -> tuple[FleetPlan, str]:
    """The plan a fleet in `run_dir` recorded in its fleet.db, and its TOML text; ConfigError (one
    line, naming `--resume`) when there is no fleet there, it records no plan, or a row the resume
    reads is damaged (the plan's TOML, an agent's overrides, a draw's or a PBT copy's values: each
    named by its table and row), before anything starts."""
    from cockpit.core.fleet.store import FleetStore, FleetStoreError

    try:
        store = FleetStore.in_run_dir(run_dir, read_only=True)
        text, source = store.meta("plan"), store.meta("plan_source")
    except FleetStoreError as exc:
        raise ConfigError(f"--resume {run_dir}: no fleet there ({exc})") from None
    try:
        if text is not None and source is not None:
            store.agents(), store.draws(), store.lineage()  # each JSON column parsed once, here
    except FleetStoreError as exc:
        raise ConfigError(f"--resume {run_dir}: {exc}") from None
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"--resume {run_dir}: {store.path}: not a readable fleet database ({exc})") from None
    finally:
        store.close()
    if text is None or source is None:
        raise ConfigError(f"--resume {run_dir}: its fleet.db records no plan")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--resume {run_dir}: {store.path}: table meta, row 'plan': not TOML ({exc})") from None
    return parse_plan(raw, source), text


def replay_plan(agent: str, run_dir: Path) -> tuple[FleetPlan, str]:
    """The one-agent plan that trains `agent`'s schedule in the pbt fleet in `run_dir` again from
    scratch, and its TOML text (`cockpit.core.fleet.schedule.replay_text`); ConfigError (one line,
    naming `--replay`) when there is no such fleet, agent or schedule."""
    from cockpit.core.fleet.schedule import ReplayError, replay_text

    try:
        return replay_text(run_dir, agent)
    except ReplayError as exc:
        raise ConfigError(str(exc)) from None


def check_plan(plan: FleetPlan) -> None:
    """PlanError naming the plan and `agents.env` for an env of it stable-baselines3's PPO cannot
    train (`preflight.unfit_envs`: one check for all the plan's envs, each with its env_kwargs)."""
    from cockpit.core.launch.preflight import unfit_envs

    presets = list({(a.env, repr(sorted(a.preset.env_kwargs.items()))): a.preset for a in plan.agents}.values())
    for preset, unfit in zip(presets, unfit_envs(presets), strict=True):
        if unfit is not None:
            raise PlanError(f"{plan.source}: {unfit.message(preset.env, repr('agents.env'))}")


def search_missing(plan: FleetPlan) -> str | None:
    """Why the plan's `[search]` cannot draw here (optuna missing: `search.missing`), in one line;
    None when it can, or it searches nothing."""
    from cockpit.core.fleet.search import missing

    return missing(plan.source, plan.search.sampler) if plan.search is not None else None


def run_in_background(
    argv: list[str], spec: RunSpec, front: FrontEnds, who: str, *, verb: str = "run", what: str = ""
) -> int:
    """Start `cockpit VERB --headless ARGV` in its own session (`background.spawn`), say so in one
    line (`what` says what starts: "2 job(s) "), and open the cockpit on it until the user quits."""
    run = background.spawn(argv, spec.run_dir, verb=verb)
    print(f"{who}: starting {what}in {spec.run_dir} (log: {run.log})", file=sys.stderr)
    return background.watch_to_exit(run, lambda source: front.watch(source, who=who), who)


def _start(
    spec: Callable[[Here], RunSpec],
    asked: Asked,
    in_background: Callable[[RunSpec], int],
    here: Callable[[_Opened], int],
) -> int:
    """Steps 1 to 5 of the module's; `here(opened)` runs a run that passed them here."""
    command_line = background.typed_command_line(asked.typed, asked.argv)
    if command_line is None:
        return refuse(asked.who, "--typed: give the command line as a JSON list of strings")
    gpus, gpu_status = open_gpus()
    gpus, gpu_status, visibility = visible_gpus(gpus, gpu_status)
    try:
        run = spec(Here(gpus, visibility.described if visibility.listed else "", command_line))
        problem = mps_refusal(run, gpus, gpu_status)
        jobs = f"--jobs {run.jobs}" if asked.jobs_from is None else f"jobs = {run.jobs} ({asked.jobs_from})"
        bounds = mode_bounds(run, gpus, jobs)
    except ConfigError as exc:
        close_gpus(gpus)
        return refuse(asked.who, str(exc))
    if problem is not None and asked.mps_from is not None:
        problem += f" (the plan {asked.mps_from} says mps = true)"
    problem = problem or bounds.refusal
    if problem is not None:  # before anything starts: no run directory, no daemon
        close_gpus(gpus)
        return refuse(asked.who, problem)
    if not asked.headless:
        close_gpus(gpus)
        return in_background(run)
    gpus, gpu_status = sampled_gpus(run, gpus, gpu_status)
    return here(_Opened(run, gpus, gpu_status, bounds, (*visibility.warnings, *bounds.notes)))


def _run_here(opened: _Opened, front: FrontEnds, asked: Asked, auto_window_s: int | None) -> int:
    """A `cockpit run` here, inside its MPS daemons, on its launcher, to its exit code."""
    spec, gpus, bounds = opened.spec, opened.gpus, opened.bounds
    # The first GPU a job can run on: a MIG slice rather than the GPU it is cut from.
    gpu = next((r for r in gpus if r.info in placeable([g.info for g in gpus])), None)
    costs = _cached_costs(spec, gpu)
    auto = auto_window_s is not None
    # --auto measures MPS where a daemon can be started: one stands ready, the jobs not its clients.
    standby, why_not = auto_mps(spec, gpus, opened.gpu_status) if auto else (False, None)
    if standby and bounds.capacity is not None:  # one job per exclusive GPU: no two share one to measure MPS on
        standby, why_not = False, f"--auto: MPS not measured: {bounds.notes[0]}"
    return with_mps(
        spec,
        gpus,
        asked.who,
        lambda notes, mps: run_on_launcher(
            spec,
            LocalLauncher,
            lambda launcher: start_session(
                spec,
                Sampler(gpus=gpus, gpu_status=opened.gpu_status),
                launcher,
                resume=asked.resume,
                costs=costs,
                auto=_auto_tuner(
                    spec, gpu, auto_window_s, standby and mps is not None, bounds.capacity, "; ".join(bounds.notes)
                )
                if auto_window_s is not None
                else None,
                notes=(*opened.notes, *notes, *([why_not] if why_not else [])),
                mps=mps,
            ),
            front.headless(),
            asked.who,
        ),
        standby=standby,
    )


def _cached_costs(spec: RunSpec, gpu: GpuReader | None) -> Costs | None:
    """The costs `recommend` or `tune` measured for this run's preset on this machine, if any:
    a run never waits for a probe."""
    from cockpit.core.sizing.cost_probe import cached_costs

    if spec.loaded_preset is None:
        return None
    return cached_costs(
        dataclasses.replace(spec.loaded_preset, env=spec.env), gpu.info.name if gpu is not None else None
    )


def _auto_tuner(
    spec: RunSpec,
    gpu: GpuReader | None,
    window_s: float,
    mps: bool = False,
    gpu_job_cap: int | None = None,
    gpu_job_cap_why: str = "",
) -> AutoTuner:
    """The --auto loop for this machine: capped by the cores the preset's envs need and by the
    jobs the GPUs' compute modes take (`gpu_job_cap`, which `gpu_job_cap_why` explains); with
    `mps` (a daemon stands ready) it measures MPS last."""
    from cockpit.core.machine.clock import SystemClock
    from cockpit.core.machine.host import host_info
    from cockpit.core.sizing.advisor import envs_per_core, max_jobs_for_cores

    assert spec.loaded_preset is not None  # --auto with a script is refused up front
    preset = dataclasses.replace(spec.loaded_preset, env=spec.env)
    cores = host_info().physical_cores
    return AutoTuner(
        SystemClock(),
        max_slots=max_jobs_for_cores(preset, cores),
        n_envs=preset.n_envs,
        env_capacity=envs_per_core(spec.env) * cores,
        gpu_memory_bytes=gpu.info.memory_total_bytes if gpu is not None else None,
        window_s=window_s,
        settle_s=window_s / 3,
        mps=mps,
        gpu_job_cap=gpu_job_cap,
        gpu_job_cap_why=gpu_job_cap_why,
    )
