"""`cockpit tune`'s search: a time-boxed climb for the fastest jobs x n_envs (x batch) on this machine.

It starts at `recommend`'s static pick, sized by this machine's measured costs (`cost_probe`), and
climbs (`hill_climb`), measuring each configuration with real workers (`trials`). It stops when the
climb ends or the next trial would overrun the budget; then, with a GPU, it measures the advised
device mix and MPS on the winner. `search` is the one entry the command calls; it returns data and
prints nothing of its own: what it has to say goes through the callables it is given.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.contract.advice import AdviceSetting
from cockpit.contract.arguments import device_mix
from cockpit.contract.costs import Costs, MpsGain
from cockpit.contract.presets import Preset
from cockpit.contract.progress import ProgressFn, Step
from cockpit.contract.runspec import ConfigError
from cockpit.core.machine.gpu_types import GpuInfo
from cockpit.core.machine.mps_daemon import Daemon, MpsError, daemon_in, why_unmeasurable
from cockpit.core.machine.tempdirs import owned_tempdir
from cockpit.core.machine.visibility import open_first_gpu
from cockpit.core.sizing.advisor import Machine, advise
from cockpit.core.sizing.hill_climb import MIN_GAIN, Config, HillClimb, Space
from cockpit.core.sizing.mps_gains import record_mps_gain
from cockpit.core.sizing.starting_point import costs_for, cpu_costs_for, machine_gpus, static_pick
from cockpit.core.sizing.trials import Trial, run_trial

STARTUP_S = 5.0  # a trial's worker start-up, before measuring (the first trial learns the real figure)
CONFIRM = 2  # the leaders measured a second time before the pick: one short trial is noisy


def search_space(preset: Preset, physical_cores: int, gpu_job_cap: int | None = None) -> Space:
    """Up to twice as many jobs as cores, and no more than the GPU's compute mode takes
    (`gpu_job_cap`, `Machine.gpu_job_cap`; None: no bound), a quarter to four times the preset's envs."""
    jobs = max(2, 2 * physical_cores)
    return Space(
        max_jobs=jobs if gpu_job_cap is None else max(1, min(jobs, gpu_job_cap)),
        max_envs=preset.n_envs * 4,
        n_steps=preset.n_steps,
        batch_cap=preset.batch_size,
        min_envs=max(1, preset.n_envs // 4),
    )


def measure_seconds(budget_s: float) -> float:
    """How long each trial measures: about a tenth of the budget, 5 to 60 s."""
    return max(5.0, min(60.0, budget_s / 10 - STARTUP_S))


@dataclass(frozen=True)
class TuneResult:
    """Every trial in order, and the winner: its jobs x n_envs, and the settings measured on it
    after the climb. `cpu_jobs` of its jobs train on the CPU (`--devices`) where a mix measured
    faster; `mps` is what MPS measured on it (None: not measured), and `mps_on` whether it won."""

    trials: tuple[Trial, ...]
    best: Config
    seconds: float
    cpu_jobs: int = 0
    mps: MpsGain | None = None
    mps_why_not: str = ""  # why MPS was not measured, where it was not

    @property
    def mps_on(self) -> bool:
        """Whether the winner runs under MPS: it measured a gain of at least `MIN_MPS_GAIN`."""
        return self.mps is not None and self.mps.helps

    def run_flags(self) -> str:
        """What `cockpit run` takes, beyond the preset, to run the winner."""
        flags = f"--jobs {self.best.jobs}"
        if self.cpu_jobs:
            flags += f" --devices {self.best.jobs - self.cpu_jobs}:cuda,{self.cpu_jobs}:cpu"
        return flags + (" --mps" if self.mps_on else "")

    def won(self, trial: Trial) -> bool:
        """Whether `trial` measured the winner as picked: its shape, device mix and MPS."""
        return (trial.config, trial.cpu_jobs, trial.mps) == (self.best, self.cpu_jobs, self.mps_on)


@dataclass(frozen=True)
class Extras:
    """What `climb` measures on its winner once the climb is over, where this machine has a GPU:
    the device mix the advisor predicts faster than CUDA alone for it (`mix_for(winner)`: the
    mix's jobs x n_envs and how many of them train on the CPU; None: no mix is advised), and MPS
    where a daemon can be started (`mps_why_not` "" and `open_mps(dir, gpu)`, which yields a
    daemon for that GPU alone and stops it after; MpsError when it cannot start one). Without a GPU there is
    nothing to measure (the default)."""

    mix_for: Callable[[Config], tuple[Config, int] | None] | None = None
    mps_why_not: str = "no GPU"
    open_mps: Callable[[Path, GpuInfo | None], AbstractContextManager[Daemon]] | None = None

    @property
    def trials(self) -> int:
        """How many trials they may take."""
        return (self.mix_for is not None) + (self.mps_why_not == "" and self.open_mps is not None)


def start_config(preset: Preset, machine: Machine, costs: Costs | None = None) -> Config:
    """Recommend's static pick (with the probe's `costs` when given), brought inside the
    search space's bounds: where the climb starts."""
    space = search_space(preset, machine.physical_cores, machine.gpu_job_cap())
    jobs, n_envs = static_pick(machine, preset, costs=costs)
    config = space.config(min(jobs, space.max_jobs), min(max(n_envs, space.min_envs), space.max_envs))
    assert config is not None
    return config


def climb(
    preset: Preset,
    machine: Machine,
    budget_s: float,
    *,
    workdir: Path,
    report: Callable[[str], None] | None = None,
    start: Config | None = None,
    costs: Costs | None = None,
    extras: Extras | None = None,
    trial: Callable[..., Trial] = run_trial,
    progress: ProgressFn | None = None,
) -> TuneResult:
    """Run the hill climb within `budget_s` seconds (trials in `workdir`, each by `trial`), from
    `start` or else from recommend's static pick (with the probe's `costs` when given); then, with a
    GPU, the `extras` on its winner: the advised device mix, then MPS (`measure_extras`).
    `report` is given one line per trial once it is measured: the time spent, its shape and
    setting, its SPS and CPU. `progress` is told each trial as it begins: its number, of about as
    many as the budget holds at the longest trial's pace so far, and the time spent against the budget."""
    extras = extras or Extras()
    space = search_space(preset, machine.physical_cores, machine.gpu_job_cap())
    start = start or start_config(preset, machine, costs)
    measure_s = measure_seconds(budget_s)
    search = HillClimb(space, start)
    gpu = open_first_gpu()
    began, durations = time.monotonic(), [measure_s + STARTUP_S]
    trials: list[Trial] = []

    def fits(trials_ahead: int) -> bool:
        return time.monotonic() - began + trials_ahead * max(durations) <= budget_s

    def measure(config: Config, **setting: Any) -> Trial:
        if progress is not None:
            spent = time.monotonic() - began
            room = max(1, int((budget_s - spent) // max(durations)))  # this trial and those the budget leaves room for
            what = (
                f"trial of {config.label()}"
                + (" with a device mix" if setting.get("cpu_jobs") else "")
                + (" under MPS" if setting.get("mps_pipe_dir") else "")
            )
            progress(Step(f"tuning {preset.env}", what, len(trials) + 1, len(trials) + room, spent, budget_s))
        done = trial(
            preset,
            config,
            workdir=workdir / f"trial-{len(trials)}",
            measure_s=measure_s,
            physical_cores=machine.physical_cores,
            gpu=gpu,
            **setting,
        )
        trials.append(done)
        durations.append(done.seconds)
        if not setting:
            search.measured(config, done.sps)
        if report is not None:
            where = f" ({done.setting()})" if done.setting() else ""
            report(
                f"[{time.monotonic() - began:5.0f} s] {config.label() + where:<28} {done.sps:>9,.0f} SPS  "
                f"CPU {done.cpu_percent:3.0f} %"
            )
        return done

    try:
        # Climb while a trial fits and still leaves room to measure the two leaders again, and the extras.
        # The first trial needs room for itself alone: without it there is nothing to confirm or to
        # measure the extras on, and `tune` already refused a budget without room for it and its
        # confirmations. Asking room for all of them first failed `--budget 30s`, tune's own minimum,
        # on every machine with a GPU (its extras) and, by the time spent to get here, on the rest.
        while (config := search.next()) is not None and fits(1 + (CONFIRM + extras.trials if search.results else 0)):
            measure(config)
        for config in search.leaders(CONFIRM) if len(search.results) > 1 else []:
            if fits(1 + extras.trials):
                measure(config)
        if search.best is None:
            raise ConfigError(
                f"--budget: {max(0.0, budget_s):.0f} s left for trials is too short for one "
                f"(about {durations[0]:.0f} s here)"
            )
        best, cpu_jobs, mps, why = measure_extras(
            search, extras, measure, fits, workdir, gpu.info if gpu is not None else None
        )
    finally:
        if gpu is not None:
            gpu.close()
    spent = time.monotonic() - began
    if progress is not None:
        progress(Step(f"tuning {preset.env}", "trials", len(trials), len(trials), spent, spent, done=True))
    return TuneResult(tuple(trials), best, spent, cpu_jobs, mps, why)


def measure_extras(
    search: HillClimb,
    extras: Extras,
    measure: Callable[..., Trial],
    fits: Callable[[int], bool],
    workdir: Path,
    gpu: GpuInfo | None = None,
) -> tuple[Config, int, MpsGain | None, str]:
    """After the climb: the advised device mix, which wins when it beats the climb's best mean by
    `hill_climb.MIN_GAIN`; then MPS on the winner where two or more of its jobs share the GPU, side
    by side with the winner's mean without it. Returns the winner, its jobs on the CPU, what MPS
    measured (None: not measured) and why not. MPS is measured under a daemon for `gpu` alone, the
    GPU the trials run on."""
    assert search.best is not None
    best, cpu_jobs, sps = search.best, 0, search.results[search.best]
    advised = extras.mix_for(best) if extras.mix_for is not None else None
    if advised is not None and fits(1):
        mix, mix_cpu_jobs = advised
        done = measure(mix, cpu_jobs=mix_cpu_jobs)
        if done.sps > sps * (1 + MIN_GAIN):
            best, cpu_jobs, sps = mix, mix_cpu_jobs, done.sps
    why = extras.mps_why_not
    if why or extras.open_mps is None:
        return best, cpu_jobs, None, why or "no MPS daemon can be started here"
    if best.jobs - cpu_jobs < 2:
        return best, cpu_jobs, None, "the pick has one job on the GPU: MPS shares a GPU between jobs"
    if not fits(1):
        return best, cpu_jobs, None, "the budget ran out before MPS could be measured"
    try:
        with extras.open_mps(workdir / "mps", gpu) as daemon:
            done = measure(best, cpu_jobs=cpu_jobs, mps_pipe_dir=daemon.pipe_dir, mps_log_dir=daemon.log_dir)
    except MpsError as exc:
        return best, cpu_jobs, None, str(exc).removeprefix("--mps: ")
    gain = MpsGain(best.jobs, sps, done.sps, "cockpit tune", time.strftime("%Y-%m-%dT%H:%M:%S"))
    return best, cpu_jobs, gain, ""


def tune_extras(
    say: Callable[[str], None],
    machine: Machine,
    preset: Preset,
    costs: Costs | None,
    progress: ProgressFn | None = None,
) -> Extras:
    """With a GPU here: the device mix to try on the winner (the preset measured on the CPU too,
    `cpu_costs_for`, announced by `say`, and the advisor's `devices` item for the winner's shape), and
    MPS where a daemon can be started and none already serves this user (the trials would all be its
    clients). Nothing without a GPU."""
    if machine.gpu_name is None:
        return Extras()
    why = why_unmeasurable(machine_gpus(machine)) or ""
    cpu_costs = cpu_costs_for(say, machine, preset, progress) if costs is not None else None

    def mix_for(best: Config) -> tuple[Config, int] | None:
        shaped = dataclasses.replace(preset, n_envs=best.n_envs, batch_size=best.batch_size)
        items = advise(machine, shaped, best.jobs, costs=costs, cpu_costs=cpu_costs)
        item = next((a for a in items if a.setting is AdviceSetting.DEVICES), None)
        if item is None:
            return None
        slots = device_mix(item.suggested)
        return Config(len(slots), best.n_envs, best.batch_size), slots.count("cpu")

    return Extras(mix_for if cpu_costs is not None else None, why, daemon_in)


def search(
    preset: Preset,
    machine: Machine,
    budget_s: float,
    *,
    say: Callable[[str], None],
    report: Callable[[str], None] | None = None,
    progress: ProgressFn | None = None,
) -> TuneResult:
    """`cockpit tune`'s whole search of `preset` on `machine` within `budget_s` seconds, counted from
    this call: this machine's costs (a first-time probe, announced by `say`, is paid from the
    budget), the extras a GPU here allows, the climb in a temporary directory of its own (each trial
    given to `report` as a line, each step to `progress`), and, where MPS was measured, the gain
    remembered (`mps_gains`). ConfigError when too little is left for one trial."""
    began = time.monotonic()
    costs = costs_for(say, machine, preset, progress)
    extras = tune_extras(say, machine, preset, costs, progress)
    with owned_tempdir("tune") as tmp:
        result = climb(
            preset,
            machine,
            budget_s - (time.monotonic() - began),
            workdir=tmp,
            report=report,
            costs=costs,
            extras=extras,
            progress=progress,
        )
    if machine.gpu_name is not None and result.mps is not None:
        record_mps_gain(preset, machine.gpu_name, result.mps)
    return result
