"""`cockpit tune`: a time-boxed search for the fastest jobs x n_envs (x batch) on this machine.

The search is `cockpit.core.sizing.tune_search`'s: it starts at `recommend`'s static pick, sized by
this machine's measured costs, climbs, measuring each configuration with real workers, and stops
when the climb ends or the next trial would overrun the budget. This command parses the budget,
prints every trial and writes the winner as a preset file.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from cockpit.commands.console import output_console, say, step_display
from cockpit.contract.costs import MIN_MPS_GAIN
from cockpit.contract.files import write_atomic
from cockpit.contract.presets import PresetError, load
from cockpit.contract.runspec import ConfigError
from cockpit.core.machine.placement import mode_lines
from cockpit.core.sizing.advisor import Machine
from cockpit.core.sizing.starting_point import resolve_preset, this_machine
from cockpit.core.sizing.trials import preset_toml
from cockpit.core.sizing.tune_search import CONFIRM, STARTUP_S, TuneResult, measure_seconds, search

UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_budget(text: str) -> float:
    """'90', '90s', '5m' or '1h' in seconds; ConfigError naming --budget otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"--budget {text!r}: give a duration like 90s, 5m or 1h")
    return float(match.group(1)) * UNITS[match.group(2)]


def trials_table(result: TuneResult) -> Table:
    """Every trial, the winner marked."""
    table = Table(title="cockpit tune", title_justify="left", box=box.SIMPLE_HEAD)
    for name, justify in (
        ("jobs", "right"),
        ("n_envs", "right"),
        ("batch", "right"),
        ("devices, MPS", "left"),
        ("SPS", "right"),
        ("CPU %", "right"),
        ("GPU busy %", "right"),
        ("", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for t in result.trials:
        gpu = f"{t.gpu_util:.0f}" if t.gpu_util is not None else "-"
        mark = "<- best (mean of its trials)" if result.won(t) else ""
        table.add_row(
            str(t.config.jobs),
            str(t.config.n_envs),
            str(t.config.batch_size),
            t.setting() or "-",
            f"{t.sps:,.0f}",
            f"{t.cpu_percent:.0f}",
            gpu,
            mark,
        )
    return table


def mps_summary(result: TuneResult) -> str:
    """One line on MPS: what it measured on the winner, or why it was not measured."""
    if result.mps is None:
        return f"MPS: not measured ({result.mps_why_not})"
    verdict = "run with --mps" if result.mps_on else f"under x{MIN_MPS_GAIN:.2f}: run without it"
    return f"MPS: {result.mps.describe()}: {verdict}"


def tune(
    console: Console, *, preset: str | None, env: str | None, budget: str, out: Path | None, machine: Machine
) -> Path:
    """`cockpit tune`: search, print, write the winner; returns the preset file written."""
    budget_s = parse_budget(budget)
    # Known before any probe: a first trial, and the leaders measured again, must fit.
    first_s = measure_seconds(budget_s) + STARTUP_S
    if (1 + CONFIRM) * first_s > budget_s:
        raise ConfigError(
            f"--budget {budget}: {budget_s:.0f} s is too short for one trial (about {first_s:.0f} s, "
            f"measured {1 + CONFIRM} times); give at least {(1 + CONFIRM) * first_s:.0f}s"
        )
    resolved = resolve_preset(preset, env, machine)
    bounded = "; ".join(mode_lines(machine.gpus))
    if machine.gpu_job_cap() == 0:
        raise ConfigError(f"{bounded}: tune's trials cannot start on it; name another GPU in CUDA_VISIBLE_DEVICES")
    out = out or Path(f"tuned-{resolved.name}-{resolved.env.replace('/', '-')}.toml")
    if out.exists() and not out.is_file():
        raise ConfigError(f"--out {out}: not a file")
    console.print(
        f"tuning {resolved.name} on {resolved.env} for {budget_s:.0f} s "
        f"({measure_seconds(budget_s):.0f} s per trial after start-up)",
        highlight=False,
    )
    if bounded:  # the trials run as many jobs as the GPU takes: say why the climb stops there
        console.print(f"{bounded}: trials of at most {machine.gpu_job_cap()} job(s)", highlight=False)
    with step_display(console) as progress:
        result = search(
            resolved,
            machine,
            budget_s,
            say=say(console),
            progress=progress,
            report=lambda line: console.print(line, highlight=False),
        )
    console.print(trials_table(result))
    if machine.gpu_name is not None:
        console.print(mps_summary(result), highlight=False)
    won = [t.sps for t in result.trials if result.won(t)]
    note = (
        f"tuned by cockpit tune for {resolved.env}: {statistics.fmean(won):,.0f} SPS with {result.best.jobs} "
        f"parallel job(s); run it with: cockpit run --preset {out} {result.run_flags()}"
    )
    try:
        write_atomic(out, preset_toml(resolved, result.best, note))
        load(str(out))  # what was written must load as a preset
    except (OSError, PresetError) as exc:
        raise ConfigError(f"--out {out}: {exc}") from exc
    console.print(f"wrote {out} ({len(result.trials)} trials in {result.seconds:.0f} s). {note}", highlight=False)
    return out


def main(*, preset: str | None, env: str | None, budget: str, out: Path | None) -> int:
    """`cockpit tune` on stdout; returns the exit code (2 on bad input, 130 when interrupted)."""
    try:
        tune(output_console(), preset=preset, env=env, budget=budget, out=out, machine=this_machine())
    except ConfigError as exc:
        print(f"cockpit tune: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the trial's workers are already gone (run_trial kills them)
        print("cockpit tune: interrupted; nothing written", file=sys.stderr)
        return 130
    return 0
