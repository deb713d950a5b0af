"""`cockpit fleet PLAN.toml --dry-run`: a fleet's agents, tiers, steps, wall time and cost, projected
before anything trains, from what this machine measured (`cockpit.core.fleet`).

Running the tiers themselves (promotion by evaluation score, durable state, resume) is not built
yet: this command projects a plan and checks it, and says so when asked to run one.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from rich import box
from rich.table import Table

from cockpit.commands.console import output_console, say
from cockpit.contract.fleetplan import PlanError, load_plan
from cockpit.contract.presets import Preset
from cockpit.core.fleet import Projection, Speed, Stage, project, speed_of
from cockpit.core.sizing import costs_for, this_machine


def main(plan_path: Path, *, jobs: int | None, rate: float | None, dry_run: bool) -> int:
    """Check the plan and print its projection; exit 2 with one line for a bad plan."""
    try:
        plan = load_plan(plan_path)
    except PlanError as exc:
        print(f"cockpit fleet: error: {exc}", file=sys.stderr)
        return 2
    if not dry_run:
        print("cockpit fleet: error: running a fleet's tiers is not built yet; --dry-run checks the plan and "
              "projects its time and cost", file=sys.stderr)  # fmt: skip
        return 2
    console = output_console()
    slots = jobs or plan.jobs
    rate = rate if rate is not None else plan.rate_usd_per_h
    machine = this_machine()
    speeds: dict[Preset, Speed | None] = {}

    def speed(preset: Preset) -> Speed | None:
        if preset not in speeds:  # one measurement per distinct preset, from the cache or a probe
            costs = costs_for(say(console), machine, preset)
            speeds[preset] = speed_of(preset, costs, slots, machine.physical_cores) if costs else None
        return speeds[preset]

    projection = project(dataclasses.replace(plan, jobs=slots, rate_usd_per_h=rate), speed)
    console.print(f"[bold]{plan.name}[/] ({plan.source}): {len(plan.agents)} agents, {slots} slot(s), "
                  f"{plan.promotion} promotion, {len(plan.tiers)} tier(s)")  # fmt: skip
    console.print(projection_table(projection, rate))
    console.print(f"the tiers train {projection.total.steps:,} steps instead of {projection.all_to_last.steps:,}: "
                  f"{projection.saving:.0%} saved", highlight=False)  # fmt: skip
    said = set()
    for preset, measured in speeds.items():
        if measured is None:
            line = f"{preset.name} on {preset.env}: no measured speed, so no time or cost"
        else:
            line = (f"{preset.name} on {preset.env}: {measured.sps:,.0f} SPS for one job (this machine's probe), "
                    f"{measured.parallel:.1f} jobs' worth at once on {machine.physical_cores} cores")  # fmt: skip
        if line not in said:  # presets that differ only in what the probe does not measure read the same
            said.add(line)
            console.print(line, highlight=False)
    return 0


def projection_table(projection: Projection, rate: float | None) -> Table:
    """Per tier, the total, and the same agents all trained to the last tier."""
    table = Table(title="projection", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("stage", "agents", "steps each", "steps", "wall time", f"cost at ${rate or 0:g}/h"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    rows: list[Stage] = [*projection.tiers, projection.total, projection.all_to_last]
    for i, stage in enumerate(rows):
        if i == len(projection.tiers):
            table.add_section()
        each = f"{stage.steps_per_agent:,}" if stage.steps_per_agent else ""
        table.add_row(stage.label, f"{stage.agents:,}", each, f"{stage.steps:,}", _duration(stage.seconds),
                      "-" if stage.cost_usd is None else f"${stage.cost_usd:,.2f}")  # fmt: skip
    return table


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
