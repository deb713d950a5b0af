"""`cockpit tune`: a time-boxed search for the fastest jobs x n_envs (x batch) on this machine.

It starts at `recommend`'s static pick, sized by this machine's measured costs (`cockpit.core.sizing.cost_probe`),
and climbs (see `cockpit.core.sizing.hill_climb`), measuring each configuration with real workers
(`cockpit.core.sizing.trials`). It stops when the climb ends or the next trial would overrun the budget.
It prints every trial and writes the winner as a preset file.
"""

from __future__ import annotations

import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from cockpit.commands.console import output_console, say
from cockpit.contract.costs import Costs
from cockpit.contract.files import write_atomic
from cockpit.contract.presets import Preset, PresetError, load
from cockpit.contract.runspec import ConfigError
from cockpit.core.machine.visibility import open_first_gpu
from cockpit.core.sizing.advisor import Machine
from cockpit.core.sizing.hill_climb import Config, HillClimb, Space
from cockpit.core.sizing.starting_point import costs_for, resolve_preset, static_pick, this_machine
from cockpit.core.sizing.trials import Trial, preset_toml, run_trial

STARTUP_S = 5.0  # a trial's worker start-up, before measuring (the first trial learns the real figure)
CONFIRM = 2  # the leaders measured a second time before the pick: one short trial is noisy
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}


def parse_budget(text: str) -> float:
    """'90', '90s', '5m' or '1h' in seconds; ConfigError naming --budget otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise ConfigError(f"--budget {text!r}: give a duration like 90s, 5m or 1h")
    return float(match.group(1)) * UNITS[match.group(2)]


def search_space(preset: Preset, physical_cores: int) -> Space:
    """Up to twice as many jobs as cores, a quarter to four times the preset's envs."""
    return Space(max_jobs=max(2, 2 * physical_cores), max_envs=preset.n_envs * 4, n_steps=preset.n_steps,
                 batch_cap=preset.batch_size, min_envs=max(1, preset.n_envs // 4))  # fmt: skip


def measure_seconds(budget_s: float) -> float:
    """How long each trial measures: about a tenth of the budget, 5 to 60 s."""
    return max(5.0, min(60.0, budget_s / 10 - STARTUP_S))


@dataclass(frozen=True)
class TuneResult:
    """Every trial in order, and the winner."""

    trials: tuple[Trial, ...]
    best: Config
    seconds: float


def start_config(preset: Preset, machine: Machine, costs: Costs | None = None) -> Config:
    """Recommend's static pick (with the probe's `costs` when given), brought inside the
    search space's bounds: where the climb starts."""
    space = search_space(preset, machine.physical_cores)
    jobs, n_envs = static_pick(machine, preset, costs=costs)
    config = space.config(min(jobs, space.max_jobs), min(max(n_envs, space.min_envs), space.max_envs))
    assert config is not None
    return config


def climb(preset: Preset, machine: Machine, budget_s: float, *, workdir: Path, console: Console | None = None,
          start: Config | None = None, costs: Costs | None = None) -> TuneResult:  # fmt: skip
    """Run the hill climb within `budget_s` seconds (trials in `workdir`), from `start` or else
    from recommend's static pick (with the probe's `costs` when given)."""
    space = search_space(preset, machine.physical_cores)
    start = start or start_config(preset, machine, costs)
    measure_s = measure_seconds(budget_s)
    search = HillClimb(space, start)
    gpu = open_first_gpu()
    began, trials, durations = time.monotonic(), [], [measure_s + STARTUP_S]

    def fits(trials_ahead: int) -> bool:
        return time.monotonic() - began + trials_ahead * max(durations) <= budget_s

    def measure(config: Config) -> None:
        trial = run_trial(preset, config, workdir=workdir / f"trial-{len(trials)}", measure_s=measure_s,
                          physical_cores=machine.physical_cores, gpu=gpu)  # fmt: skip
        trials.append(trial)
        durations.append(trial.seconds)
        search.measured(config, trial.sps)
        if console is not None:
            console.print(f"[{time.monotonic() - began:5.0f} s] {config.label():<28} {trial.sps:>9,.0f} SPS  "
                          f"CPU {trial.cpu_percent:3.0f} %", highlight=False)  # fmt: skip

    try:
        # Climb while a trial fits and still leaves room to measure the two leaders again.
        while (config := search.next()) is not None and fits(1 + CONFIRM):
            measure(config)
        for config in search.leaders(CONFIRM) if len(search.results) > 1 else []:
            if fits(1):
                measure(config)
    finally:
        if gpu is not None:
            gpu.close()
    if search.best is None:
        raise ConfigError(f"--budget: {max(0.0, budget_s):.0f} s left for trials is too short for one "
                          f"(about {durations[0]:.0f} s here)")  # fmt: skip
    return TuneResult(tuple(trials), search.best, time.monotonic() - began)


def trials_table(result: TuneResult) -> Table:
    """Every trial, the winner marked."""
    table = Table(title="cockpit tune", title_justify="left", box=box.SIMPLE_HEAD)
    for name, justify in (("jobs", "right"), ("n_envs", "right"), ("batch", "right"), ("SPS", "right"),
                          ("CPU %", "right"), ("GPU busy %", "right"), ("", "left")):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for t in result.trials:
        gpu = f"{t.gpu_util:.0f}" if t.gpu_util is not None else "-"
        mark = "<- best (mean of its trials)" if t.config == result.best else ""
        table.add_row(str(t.config.jobs), str(t.config.n_envs), str(t.config.batch_size), f"{t.sps:,.0f}",
                      f"{t.cpu_percent:.0f}", gpu, mark)  # fmt: skip
    return table


def tune(console: Console, *, preset: str | None, env: str | None, budget: str, out: Path | None,
         machine: Machine) -> Path:  # fmt: skip
    """`cockpit tune`: search, print, write the winner; returns the preset file written."""
    budget_s = parse_budget(budget)
    # Known before any probe: a first trial, and the leaders measured again, must fit.
    first_s = measure_seconds(budget_s) + STARTUP_S
    if (1 + CONFIRM) * first_s > budget_s:
        raise ConfigError(f"--budget {budget}: {budget_s:.0f} s is too short for one trial (about {first_s:.0f} s, "
                          f"measured {1 + CONFIRM} times); give at least {(1 + CONFIRM) * first_s:.0f}s")  # fmt: skip
    resolved = resolve_preset(preset, env, machine)
    out = out or Path(f"tuned-{resolved.name}-{resolved.env.replace('/', '-')}.toml")
    if out.exists() and not out.is_file():
        raise ConfigError(f"--out {out}: not a file")
    console.print(f"tuning {resolved.name} on {resolved.env} for {budget_s:.0f} s "
                  f"({measure_seconds(budget_s):.0f} s per trial after start-up)", highlight=False)  # fmt: skip
    began = time.monotonic()
    costs = costs_for(say(console), machine, resolved)  # a first-time probe spends some of the budget
    with tempfile.TemporaryDirectory(prefix="cockpit-tune-") as tmp:
        result = climb(resolved, machine, budget_s - (time.monotonic() - began), workdir=Path(tmp), console=console,
                       costs=costs)  # fmt: skip
    console.print(trials_table(result))
    best_sps = statistics.fmean(t.sps for t in result.trials if t.config == result.best)
    note = (f"tuned by cockpit tune for {resolved.env}: {best_sps:,.0f} SPS with {result.best.jobs} parallel job(s); "
            f"run it with: cockpit run --preset {out} --jobs {result.best.jobs}")  # fmt: skip
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
