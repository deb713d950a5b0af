"""`cockpit fleet`: many agents in tiers, promoted by evaluation score, durable, projected.

`cockpit fleet PLAN.toml` runs the plan under the same supervisor, telemetry, TUI, attach, report
and run log as `cockpit run` (`cockpit.core.fleet.run` drives the tiers); `--resume RUN_DIR`
continues one from its `fleet.db`; `--dry-run` checks the plan and projects its steps, wall time
and cost from what this machine measured (`cockpit.core.fleet.projection`) and starts no training.

Exit codes are `cockpit run`'s: 0 every agent done, 1 some failed or were stopped, 2 bad input
(one line, nothing started), 3 the run directory was lost, 128 + the signal when interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from rich import box
from rich.table import Table

from cockpit.commands.console import interactive, output_console, say, step_display
from cockpit.contract.files import private_files
from cockpit.contract.fleetplan import FleetPlan, PlanError, load_plan, pbt_notes
from cockpit.contract.presets import Preset
from cockpit.contract.rundir import stamped
from cockpit.contract.runrecord import RunRecord
from cockpit.contract.runspec import ConfigError, RunSpec, build_spec, checked_name, handed, on_cluster
from cockpit.contract.settings import RunSettings, fixed_given, resumed_with
from cockpit.contract.trust import recorded_commands, untrusted
from cockpit.core.fleet.projection import Projection, Stage, episode_steps_from_record, project, speed_from_record
from cockpit.core.session.front_ends import FrontEnds
from cockpit.core.session.start import (
    Asked,
    check_plan,
    fleet_of,
    recorded_plan,
    replay_plan,
    search_missing,
    start_fleet,
)
from cockpit.core.sizing.overlap import Speed, speed_of
from cockpit.core.sizing.starting_point import costs_for, this_machine
from cockpit.formatting import money


def main(args: argparse.Namespace, front: FrontEnds) -> int:
    """`cockpit fleet`, its run directory and every file in it made for its user alone (0700 and
    0600: `files.private_files`); returns the exit code as `_main` does."""
    with private_files():
        return _main(args, front)


def _main(args: argparse.Namespace, front: FrontEnds) -> int:
    """Carry out `cockpit fleet` as parsed; returns the exit code."""
    problem = untrusted(args.resume) if args.resume is not None else None
    if problem is not None:  # before fleet.db or run.toml is read: a run directory is code (contract.trust)
        print(f"cockpit fleet: error: --resume {problem}", file=sys.stderr)
        return 2
    problem = untrusted(Path(args.replay[1])) if args.replay is not None else None
    if problem is not None:  # its recorded plan names the preset files the replay trains with
        print(f"cockpit fleet: error: --replay {problem}", file=sys.stderr)
        return 2
    try:
        plan, plan_text = _plan(args)
        if args.typed is None:  # with --typed, the cockpit that started this fleet checked
            check_plan(plan)
    except (PlanError, ConfigError) as exc:
        print(f"cockpit fleet: error: {exc}", file=sys.stderr)
        return 2
    record = _record(args.resume) if args.resume is not None and args.spec is None else None
    for line in recorded_commands(record.config) if record is not None else ():
        print(f"cockpit fleet: resuming {args.resume}: {line}", file=sys.stderr, flush=True)
    if args.run_from is not None and not args.dry_run:
        print(
            "cockpit fleet: error: --from costs a --dry-run with a finished run's speeds; add --dry-run",
            file=sys.stderr,
        )
        return 2
    no_optuna = search_missing(plan)
    if no_optuna is not None and not args.dry_run:  # before anything starts: no run directory, no study
        print(f"cockpit fleet: error: {no_optuna}", file=sys.stderr)
        return 2
    if args.dry_run:
        if no_optuna is not None:  # the projection draws nothing: it measures each key's midpoint
            print(f"cockpit fleet: note: {no_optuna}", file=sys.stderr)
        record = None
        if args.run_from is not None:
            from cockpit.contract.runrecord import RunRecordError, read

            try:
                record = read(args.run_from)
            except RunRecordError as exc:
                print(f"cockpit fleet: error: --from {exc}", file=sys.stderr)
                return 2
        return dry_run(plan, jobs=args.jobs, rate=args.rate, record=record, record_dir=args.run_from)
    return _run(args, plan, plan_text, front)


def _plan(args: argparse.Namespace) -> tuple[FleetPlan, str]:
    """The plan to run and its TOML text: the file given, the one a resumed fleet recorded, or the
    one that replays a pbt agent's schedule (`--replay AGENT RUN_DIR`)."""
    replay = args.replay
    if sum(given is not None for given in (args.plan, args.resume, replay)) != 1:
        raise ConfigError(
            "give a PLAN.toml, or --resume RUN_DIR to continue a fleet, or --replay AGENT RUN_DIR to train a pbt "
            "agent's schedule again (one of the three)"
        )
    if replay is not None:
        return replay_plan(replay[0], Path(replay[1]))
    if args.resume is None:
        plan = load_plan(args.plan)
        return plan, args.plan.read_text(encoding="utf-8")
    given = [
        flag
        for flag, value in (("--dry-run", args.dry_run or None), ("--run-dir", args.run_dir), ("--name", args.name))
        if value is not None
    ]
    if given:
        raise ConfigError(f"--resume continues a fleet with its recorded plan and name; drop {', '.join(given)}")
    return recorded_plan(args.resume)


def _spec(
    args: argparse.Namespace,
    plan: FleetPlan,
    gpus_here: Sequence[int] | None = None,
    visible_by: str = "",
    command_line: tuple[str, ...] = ("cockpit", "fleet"),
) -> RunSpec:
    """The run the fleet is: its slots, run dir, name, restart policy and GPUs (`--gpus`, checked
    against `gpus_here`, the indices of the GPUs it may use: NVML's, or those `visible_by`, the
    cockpit's `CUDA_VISIBLE_DEVICES`, leaves it); the first agent's preset and env stand for the
    run in its header.

    The fleet's run name is `--name`, else the plan's `name` (both follow `rundir.check_run_name`);
    a resumed fleet keeps the name and the settings its run.toml recorded, as each setting's
    declaration says (`settings.resumed`). Its directory is `--run-dir`, else `runs/<UTC time>-NAME`
    with `--name`, else `runs/<UTC time>-fleet-<plan name>` as before names. `command_line` is what
    run.toml records (the front door's `Here.command_line`: what the user typed)."""
    resuming = args.resume is not None
    if args.spec is not None:  # a background fleet: the settings the cockpit that started it validated
        spec = build_spec(
            handed(args.spec), command_line=command_line, resuming=resuming, gpus_here=gpus_here, visible_by=visible_by
        )
        return on_cluster(spec, args.ray, args.storage, run_dir_given=True)
    first = plan.agents[0]
    given = RunSettings.from_args(args, name=checked_name(args.name))
    fixed = fixed_given(args) if resuming else []
    if fixed:
        raise ConfigError(f"--resume continues a fleet with its recorded settings; drop {', '.join(fixed)}")
    record = _record(args.resume) if resuming else None
    if record is not None:  # the fleet's recorded settings, as each declaration says
        given = resumed_with(args, record.config, record.name, args.resume, "fleet")
    run_dir = args.resume or args.run_dir or stamped(args.name if args.name is not None else f"fleet-{plan.name}")
    # The plan decides what `cockpit run` takes as flags: the agents, their preset, env and target.
    settings = dataclasses.replace(
        given,
        jobs=given.jobs or plan.jobs,
        agents=len(plan.agents),
        preset=first.preset_name,
        env=first.env,
        timesteps=plan.tiers[-1].timesteps,
        episodes=plan.tiers[-1].episodes,
        run_dir=run_dir,
        name=given.name or plan.name,
        mps=given.mps or plan.mps,
    )
    spec = build_spec(
        settings, command_line=command_line, resuming=resuming, gpus_here=gpus_here, visible_by=visible_by
    )
    return on_cluster(spec, args.ray, args.storage, run_dir_given=args.resume is not None or args.run_dir is not None)


def _record(run_dir: Path) -> RunRecord | None:
    """The fleet's run.toml; None when it cannot be read (the plan's name and settings then)."""
    from cockpit.contract.runrecord import RunRecordError, read

    try:
        return read(run_dir)
    except RunRecordError:
        return None


def _run(args: argparse.Namespace, plan: FleetPlan, plan_text: str, front: FrontEnds) -> int:
    """Run the fleet: in the background under the cockpit on a terminal, else here."""
    source = str(plan.source)  # where the jobs and mps come from when no flag gave them
    asked = Asked(
        "cockpit fleet",
        args.typed,
        sys.argv[1:] if args.argv is None else args.argv,
        headless=args.headless or not interactive(),
        resume=args.resume is not None,
        jobs_from=None if args.jobs else source,
        mps_from=None if args.mps else source,
    )
    return start_fleet(
        lambda here: _spec(args, plan, here.indices, here.visible_by, here.command_line),
        front,
        asked,
        fleet=fleet_of(plan, plan_text, resume=args.resume is not None, rate=args.rate),
        background_args=lambda spec: _background_args(args, spec),
    )


def _background_args(args: argparse.Namespace, spec: RunSpec) -> list[str]:
    """What a background `cockpit fleet` takes besides the spec: the plan (or the fleet's own
    record, with `--resume`) and the machine's rate."""
    replay = args.replay
    where = [str(args.plan)] if args.resume is None else ["--resume", str(spec.run_dir)]
    where = ["--replay", *replay] if replay is not None else where
    return [*where, *(["--rate", repr(args.rate)] if args.rate is not None else [])]


def dry_run(
    plan: FleetPlan,
    *,
    jobs: int | None,
    rate: float | None,
    record: RunRecord | None = None,
    record_dir: Path | None = None,
) -> int:
    """Print the plan's projection: per tier, in total, and all agents to the last tier; from this
    machine's measured costs, or with `record` from that finished run's measured speeds."""
    console = output_console()
    slots = jobs or plan.jobs
    rate = rate if rate is not None else plan.rate_usd_per_h
    machine = this_machine()
    speeds: dict[Preset, Speed | None] = {}

    def speed(preset: Preset) -> Speed | None:
        if preset not in speeds:  # one measurement per distinct preset: the record's, the cache's or a probe's
            if record is not None:
                speeds[preset] = speed_from_record(preset, record, slots)
            else:
                with step_display(console) as progress:
                    costs = costs_for(say(console), machine, preset, progress)
                speeds[preset] = (
                    speed_of(preset, costs, slots, machine.physical_cores, score_episodes=plan.score_episodes)
                    if costs
                    else None
                )
        return speeds[preset]

    def episode_steps(env: str) -> float | None:
        return episode_steps_from_record(env, record) if record is not None else None

    projection = project(dataclasses.replace(plan, jobs=slots, rate_usd_per_h=rate), speed, episode_steps)
    console.print(
        f"[bold]{plan.name}[/] ({plan.source}): {len(plan.agents)} agents, {slots} slot(s), "
        f"{plan.promotion} promotion, {len(plan.tiers)} tier(s)"
    )
    if plan.search is not None:
        per_draw = len(plan.agents) // plan.search.samples
        console.print(
            f"searching {', '.join(plan.search.keys)}: {plan.search.samples} draws by {plan.search.sampler} "
            f"(seed {plan.search.seed}), each crossed with {per_draw} agent(s); projected at each key's "
            "midpoint",
            highlight=False,
        )
    console.print(projection_table(projection, rate))
    unit = "episodes" if projection.unit == "episodes" else "steps"
    if plan.pbt is not None and plan.pbt.schedule:  # a replay: nobody copies anybody
        console.print(
            f"a replayed pbt schedule: {projection.total.amount:,} {unit}, each tier with its schedule's values",
            highlight=False,
        )
    elif plan.promotion == "pbt":  # nobody is culled: the tiers are where the bottom share copies the top
        console.print(
            f"pbt trains every agent through every tier: {projection.total.amount:,} {unit}, the bottom "
            "share copying the top share's checkpoints at each tier's end",
            highlight=False,
        )
        for note in pbt_notes(plan):
            console.print(note, highlight=False)
    else:
        console.print(
            f"the tiers train {projection.total.amount:,} {unit} instead of "
            f"{projection.all_to_last.amount:,}: {projection.saving:.0%} saved",
            highlight=False,
        )
    if plan.unit == "episodes":
        for env in dict.fromkeys(agent.env for agent in plan.agents):
            length = episode_steps(env)
            if length is not None:
                line = f"{env}: {length:,.0f} steps per episode, as {record_dir} measured them over its training"
            elif record is not None:
                line = f"{env}: {record_dir} measured no episodes of it, so no steps, time or cost"
            else:
                line = (
                    f"{env}: no measured episode length, so no steps, time or cost (give --from RUN_DIR, a run "
                    "that trained it: its steps per episode)"
                )
            console.print(line, highlight=False)
    said = set()
    for preset, measured in speeds.items():
        if measured is None and record is not None:
            line = f"{preset.name} on {preset.env}: {record_dir} measured no run of it, so no time or cost"
        elif measured is None:
            line = f"{preset.name} on {preset.env}: no measured speed, so no time or cost"
        elif record is not None:
            line = (
                f"{preset.name} on {preset.env}: {measured.sps:,.0f} SPS per job, {measured.parallel:g} at once, "
                f"as {record_dir} measured them (its run.toml); start-ups and scoring not costed: "
                "a run record does not measure them"
            )
        else:
            line = (
                f"{preset.name} on {preset.env}: {measured.sps:,.0f} SPS for one job (this machine's probe), "
                f"{measured.parallel:.1f} jobs' worth at once on {machine.physical_cores} cores; each agent "
                f"and tier also {measured.setup_s:.1f} s to build its env and model and at most "
                f"{measured.score_s:.1f} s to score {plan.score_episodes} episode(s), each worker "
                f"{measured.start_s:.1f} s to start"
            )
        if line not in said:  # presets that differ only in what the probe does not measure read the same
            said.add(line)
            console.print(line, highlight=False)
    return 0


def projection_table(projection: Projection, rate: float | None) -> Table:
    """Per tier, the total, and the same agents all trained to the last tier."""
    table = Table(title="projection", title_justify="left", box=box.SIMPLE_HEAD)
    in_episodes = projection.unit == "episodes"
    columns = ("episodes each", "episodes", "steps") if in_episodes else ("steps each", "steps")
    for column in ("stage", "agents", *columns, "wall time", f"cost at ${rate or 0:g}/h"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    rows: list[Stage] = [*projection.tiers, projection.total, projection.all_to_last]
    for i, stage in enumerate(rows):
        if i == len(projection.tiers):
            table.add_section()
        amounts = [f"{stage.each:,}" if stage.each else "", f"{stage.amount:,}"]
        if in_episodes:  # the steps those episodes take at the measured length: "unknown" without one
            amounts.append("unknown" if stage.steps is None else f"{stage.steps:,.0f}")
        table.add_row(
            stage.label,
            f"{stage.agents:,}",
            *amounts,
            _duration(stage.seconds),
            money(stage.cost_usd),
        )
    return table


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
