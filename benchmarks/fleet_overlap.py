"""The fleet model against measured concurrent jobs: `python -m benchmarks.fleet overlap`.

What it measures: for CartPole (the `cartpole` preset on CartPole-v1) and Pong (the `fast` preset
on Pong-v5, with a shorter rollout and fewer epochs by default, see below), one job's costs are
taken the way the product takes them (`cockpit.core.sizing.starting_point.costs_for`: the probe, once, cached in
`~/.cache/cockpit/costs.toml`; with `--fresh-probe`, probed anew once the machine is quiet, into a
throwaway cache), and the model (`cockpit.core.sizing.overlap.speed_of`) predicts the aggregate SPS of
N = 1, 2, 3 and 4 slots on this machine's physical cores. Then N real workers (`python -m
cockpit_training.worker`, started by cockpit's `LocalLauncher` with the env threads cockpit's
`thread_budget` gives each of N slots, but not niced: the figure is the workers' own) run at once,
and the aggregate SPS is measured in their steady state:

- a job's cycle runs from one `phase: rollout` event to the next (whole cycles only: a rollout
  steps fast and a train phase not at all, so a window cut mid-phase would measure the phase);
- only cycles that start after every job has finished its first cycle (imports, env creation and
  torch's first calls are over) and `--warmup` seconds after the launch count;
- and only clean ones: the machine's CPU time (/proc/stat) minus the workers' and this process's is
  sampled every half second, and a cycle counts only if other processes used at most
  `--max-foreign` cores in every sample it overlaps (on a shared machine a build or a test suite
  next door would otherwise pass for the model's error);
- the jobs run until each has `--seconds` of clean cycles (or `--timeout` has passed: then every
  cycle counts, and the table says how busy the others were); a job's SPS is its clean cycles'
  steps over their time, and the aggregate is the N jobs' sum: all N run all along.

The table gives, per preset and N, the predicted and the measured aggregate SPS and their ratio
(the goal: within 10 %), the clean seconds per job, and the CPU other processes used meanwhile.

Pong's cycle: the `fast` preset's 4,096-sample rollout and 15 epochs take minutes per cycle on a
CPU, so by default the Pong jobs run it with `n_steps` 128 and `n_epochs` 2 (2,048 samples a
rollout, one minibatch of 2,048 an epoch). Nothing the probe measures changes (same env, network
and batch size, so the same cached costs); the model's per-sample cost follows the epochs.
`--pong-n-steps 256 --pong-epochs 15` runs the preset unchanged (and takes about an hour).

Run from the repo root (about 5 minutes on 2 quiet cores; longer while others use them):
    .venv/bin/python -m benchmarks.fleet overlap
    .venv/bin/python -m benchmarks.fleet overlap --fresh-probe --seconds 10
    .venv/bin/python -m benchmarks.fleet overlap --only cartpole --slots 1,2
    .venv/bin/python -m benchmarks.fleet overlap --fresh-probe --seconds 10 --rounds 2 --only cartpole

`--rounds R` repeats the probe and the N measurements R times, one round after another, and adds
each N's mean predicted and mean measured SPS: on a shared or virtual machine one job's speed
drifts by about 10 % over minutes, as much as the goal, so one round's ratio is partly luck.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import dataclasses
import itertools
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from benchmarks.common import (
    REPO_ROOT,
    BenchmarkError,
    fmt_ratio,
    fmt_sps,
    load_caption,
    log,
    print_table,
    warn_if_busy,
)
from cockpit.contract.costs import Costs
from cockpit.contract.events import ErrorEvent, EventReader, FinishedEvent, PhaseEvent
from cockpit.contract.presets import Preset, load, to_toml
from cockpit.contract.rundir import JobDir
from cockpit.contract.workerargs import WorkerArgs
from cockpit.core.launch.local import LocalLauncher
from cockpit.core.launch.protocol import LaunchRequest, WorkerHandle
from cockpit.core.machine.host import thread_budget
from cockpit.core.sizing.advisor import Machine
from cockpit.core.sizing.cost_probe import cache_path
from cockpit.core.sizing.overlap import speed_of
from cockpit.core.sizing.starting_point import costs_for, this_machine

POLL_S = 0.5
STOP_WAIT_S = 10.0
ENOUGH_STEPS = 10**9  # the workers' target: far beyond any window; the benchmark stops them
CLOCK_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def busy_cpu_s() -> float:
    """CPU seconds this machine has spent busy (or stolen by the hypervisor) since boot, all cores."""
    with open("/proc/stat", encoding="ascii") as fh:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fh.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) * CLOCK_TICK_S


def cpu_s_of(pids: list[int]) -> float:
    """CPU seconds the processes `pids` (every thread of each) have used; a gone one counts 0."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


@dataclass(frozen=True)
class CpuSample:
    """At `t`: the machine's busy CPU seconds and ours (the workers' and this process's)."""

    t: float
    busy_s: float
    ours_s: float

    @classmethod
    def now(cls, pids: list[int]) -> CpuSample:
        """A sample of the machine and of `pids` plus this process and its children that have exited
        (the probe)."""
        own = os.times()
        return cls(time.time(), busy_cpu_s(),
                   cpu_s_of(pids) + own.user + own.system + own.children_user + own.children_system)  # fmt: skip


def foreign_cores(first: CpuSample, last: CpuSample) -> float:
    """Cores' worth of CPU that other processes used between two samples."""
    seconds = last.t - first.t
    return max(0.0, (last.busy_s - first.busy_s) - (last.ours_s - first.ours_s)) / seconds if seconds > 0 else 0.0


@dataclass(frozen=True)
class Interval:
    """Between two samples: when, and the cores other processes used."""

    t0: float
    t1: float
    foreign: float


def wait_for_quiet(limit_s: float, max_foreign: float) -> float:
    """Wait (up to `limit_s`) until other processes use at most `max_foreign` cores over 3 s;
    returns what they used over the last 3 s."""
    deadline = time.time() + limit_s
    while True:
        first = CpuSample.now([])
        time.sleep(3.0)
        used = foreign_cores(first, CpuSample.now([]))
        if used <= max_foreign or time.time() >= deadline:
            return used


@dataclass(frozen=True)
class Workload:
    """One row group of the table: a label, the preset the workers run, and its file."""

    label: str
    preset: Preset
    spec: str  # what `--preset` gets: a built-in name or a .toml path


@dataclass(frozen=True)
class Cycle:
    """One rollout + train cycle of a job, and the most CPU other processes used during it."""

    t0: float
    t1: float
    steps: int
    foreign: float


@dataclass
class JobTrace:
    """One worker's rollout starts (time, steps), followed from its events."""

    handle: WorkerHandle
    reader: EventReader
    starts: list[tuple[float, int]] = dataclasses.field(default_factory=list)

    def follow(self) -> None:
        """Read the new events; raise BenchmarkError if the worker reported an error or ended."""
        for event in self.reader.read_new():
            if isinstance(event, PhaseEvent) and event.phase == "rollout":
                self.starts.append((event.t, event.num_timesteps))
            elif isinstance(event, (ErrorEvent, FinishedEvent)):
                raise BenchmarkError(f"job {self.handle.job_id} ended early: {event}")

    def cycles(self, since: float, intervals: list[Interval]) -> list[Cycle]:
        """The whole cycles that start at or after `since` and end within the sampled `intervals`
        (in time order, end to end)."""
        ends = [i.t1 for i in intervals]
        out = []
        for (t0, s0), (t1, s1) in itertools.pairwise(self.starts):
            if t0 < since or not intervals or t1 > ends[-1]:
                continue
            overlapping = intervals[bisect.bisect_right(ends, t0) : bisect.bisect_left(ends, t1) + 1]
            out.append(Cycle(t0, t1, s1 - s0, max((i.foreign for i in overlapping), default=0.0)))
        return out


@dataclass(frozen=True)
class Measured:
    """N concurrent jobs' aggregate SPS, the fewest seconds of cycles any job counted, and the
    mean CPU other processes used over the counted cycles."""

    sps: float
    seconds: float
    foreign_cores: float
    clean: bool  # False: the timeout passed first, and every cycle counted


def workloads(only: str | None, pong_n_steps: int, pong_epochs: int, tmp: Path) -> list[Workload]:
    """CartPole's and Pong's presets (Pong's written to a file under `tmp`)."""
    out = []
    if only in (None, "cartpole"):
        out.append(Workload("cartpole / CartPole-v1", dataclasses.replace(load("cartpole"), env="CartPole-v1"),
                            "cartpole"))  # fmt: skip
    if only in (None, "pong"):
        fast = load("fast")
        pong = dataclasses.replace(fast, env="Pong-v5", n_steps=pong_n_steps, n_epochs=pong_epochs)
        if pong.total_batch % pong.batch_size:
            raise SystemExit(f"--pong-n-steps {pong_n_steps}: {pong.n_envs} x it must be a multiple of batch_size "
                             f"{pong.batch_size}")  # fmt: skip
        path = tmp / "fast.toml"  # named fast: the file's stem is the preset's name
        path.write_text(to_toml(pong), encoding="utf-8")
        loaded = load(str(path))
        changed = "" if (pong_n_steps, pong_epochs) == (fast.n_steps, fast.n_epochs) else \
            f", n_steps {pong_n_steps}, n_epochs {pong_epochs}"  # fmt: skip
        out.append(Workload(f"fast / Pong-v5{changed}", loaded, str(path)))
    return out


def measure(workload: Workload, slots: int, args: argparse.Namespace, root: Path, *,
            threads: int | None = None) -> Measured:  # fmt: skip
    """Run `slots` workers of `workload` at once and measure their aggregate SPS (module docstring);
    each with `threads` env threads, else what cockpit's `thread_budget` gives each of `slots`."""
    threads = threads or thread_budget(slots, this_machine().physical_cores).threads_per_job
    launcher = LocalLauncher(cwd=REPO_ROOT, nice=0)
    traces: list[JobTrace] = []
    launched = time.time()
    try:
        for i in range(slots):
            job_dir = root / f"{workload.preset.env}-{slots}-{i}"
            worker = WorkerArgs(job_dir, preset=workload.spec, env=workload.preset.env, timesteps=ENOUGH_STEPS,
                                seed=i, threads=threads)  # fmt: skip
            handle = launcher.launch(LaunchRequest(f"{i:03d}", worker))
            traces.append(JobTrace(handle, EventReader(JobDir(job_dir).events)))
        pids = [trace.handle.pid for trace in traces]
        last, intervals = CpuSample.now(pids), []
        since: float | None = None
        while True:
            time.sleep(POLL_S)
            sample = CpuSample.now(pids)
            intervals.append(Interval(last.t, sample.t, foreign_cores(last, sample)))
            last = sample
            for trace in traces:
                if launcher.poll(trace.handle) is not None:
                    raise BenchmarkError(f"job {trace.handle.job_id} exited: {launcher.stderr_tail(trace.handle)}")
                trace.follow()
            if since is None:
                if all(len(trace.starts) >= 2 for trace in traces):  # every job closed its first cycle
                    since = max(launched + args.warmup, *(trace.starts[1][0] for trace in traces))
                continue
            cycles = [trace.cycles(since, intervals) for trace in traces]
            clean = [[c for c in job if c.foreign <= args.max_foreign] for job in cycles]
            if all(sum(c.t1 - c.t0 for c in job) >= args.seconds for job in clean):
                return _aggregate(clean, clean=True)
            if sample.t - since >= args.timeout and all(cycles):
                log(f"  {args.timeout:.0f} s without {args.seconds:.0f} s of clean cycles per job: counting all")
                return _aggregate(cycles, clean=False)
    finally:
        for trace in traces:
            launcher.kill(trace.handle)
        deadline = time.time() + STOP_WAIT_S
        while any(launcher.poll(trace.handle) is None for trace in traces) and time.time() < deadline:
            time.sleep(0.1)


def _aggregate(jobs: list[list[Cycle]], *, clean: bool) -> Measured:
    """Each job's SPS over its cycles, summed; the fewest seconds a job counted; the mean foreign
    CPU over all counted cycles, weighted by their time."""
    seconds = [sum(c.t1 - c.t0 for c in job) for job in jobs]
    sps = sum(sum(c.steps for c in job) / s for job, s in zip(jobs, seconds, strict=True))
    cycles = [c for job in jobs for c in job]
    foreign = sum(c.foreign * (c.t1 - c.t0) for c in cycles) / sum(seconds)
    return Measured(sps, min(seconds), foreign, clean)


def fresh_costs(machine: Machine, workload: Workload, args: argparse.Namespace) -> tuple[Costs | None, str]:
    """The product's probe (`costs_for`, into the throwaway cache `main` set), run once the machine
    is quiet, again while other processes used over `--max-foreign` cores meanwhile (3 tries at
    most; the quietest is kept), and a note on how quiet it was."""
    cache = cache_path()
    tries: list[tuple[float, Costs | None]] = []
    for _ in range(3):
        cache.unlink(missing_ok=True)
        wait_for_quiet(120.0, args.max_foreign)
        first = CpuSample.now([])
        costs = costs_for(log, machine, workload.preset)
        tries.append((foreign_cores(first, CpuSample.now([])), costs))
        log(f"  others used {tries[-1][0]:.2f} cores while it probed")
        if tries[-1][0] <= args.max_foreign:
            break
    foreign, costs = min(tries, key=lambda t: t[0])
    return costs, f" (probed afresh; others used {foreign:.2f} cores meanwhile)"


def predicted(workload: Workload, costs: Costs, slots: int, machine: Machine) -> float:
    """The model's aggregate SPS of `slots` jobs: what `cockpit fleet` and `recommend` use."""
    return speed_of(workload.preset, costs, slots, machine.physical_cores).fleet_sps


def main(argv: list[str] | None = None) -> int:
    """Measure, then print the table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet overlap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, metavar="S",
                        help="seconds of clean cycles each job measures (default: 20)")  # fmt: skip
    parser.add_argument("--warmup", type=float, default=5.0, metavar="S",
                        help="seconds after the launch before which no cycle counts (default: 5)")  # fmt: skip
    parser.add_argument("--slots", default="1,2,3,4", metavar="N,N,...", help="slot counts (default: 1,2,3,4)")
    parser.add_argument("--only", choices=("cartpole", "pong"), help="one workload only")
    parser.add_argument("--pong-n-steps", type=int, default=128, metavar="K", help="Pong's n_steps (default: 128)")
    parser.add_argument("--pong-epochs", type=int, default=2, metavar="K", help="Pong's n_epochs (default: 2)")
    parser.add_argument("--max-foreign", type=float, default=0.15, metavar="CORES",
                        help="the most CPU, in cores, other processes may use during a clean cycle "
                             "(default: 0.15)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=240.0, metavar="S",
                        help="seconds after the warm-up to stop waiting for clean cycles (default: 240)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, metavar="R",
                        help="probe (with --fresh-probe) and measure every N this many times in turn, then print "
                             "the means too: a machine's speed drifts over minutes (default: 1)")  # fmt: skip
    parser.add_argument("--fresh-probe", action="store_true",
                        help="probe each preset anew once the machine is quiet, into a throwaway cache, instead "
                             "of using ~/.cache/cockpit/costs.toml (whose figures may have been measured while "
                             "other processes ran)")  # fmt: skip
    args = parser.parse_args(argv)
    slot_counts = [int(n) for n in args.slots.split(",")]
    machine = this_machine()
    before = warn_if_busy()
    rows, notes = [], []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-overlap-") as tmp:
        if args.fresh_probe:  # costs_for then finds no figures, probes, and keeps them here
            os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        for workload in workloads(args.only, args.pong_n_steps, args.pong_epochs, Path(tmp)):
            totals: dict[int, list[float]] = {slots: [0.0, 0.0] for slots in slot_counts}
            for round_ in range(1, args.rounds + 1):
                costs, probed = fresh_costs(machine, workload, args) if args.fresh_probe else (None, "")
                costs = costs or costs_for(log, machine, workload.preset)
                if costs is None:
                    raise SystemExit(f"{workload.label}: no measured costs, so no prediction")
                one = speed_of(workload.preset, costs, 1, machine.physical_cores).sps
                label = workload.label + (f" (round {round_})" if args.rounds > 1 else "")
                notes.append(f"{label}: {costs.describe()}{probed}; one job {fmt_sps(one)} SPS by the model")
                for slots in slot_counts:
                    quiet = wait_for_quiet(60.0, args.max_foreign)
                    log(f"{label}: {slots} job(s) (others used {quiet:.2f} cores just before) ...")
                    got = measure(workload, slots, args, Path(tmp) / f"jobs-{round_}-{slots}")
                    want = predicted(workload, costs, slots, machine)
                    totals[slots][0] += want / args.rounds
                    totals[slots][1] += got.sps / args.rounds
                    threads = thread_budget(slots, machine.physical_cores).threads_per_job
                    rows.append([label, str(slots), str(threads), fmt_sps(want), fmt_sps(got.sps),
                                 fmt_ratio(want / got.sps), f"{got.seconds:.0f} s" + ("" if got.clean else " (all)"),
                                 f"{got.foreign_cores:.2f}"])  # fmt: skip
                    log(f"  predicted {fmt_sps(want)}, measured {fmt_sps(got.sps)}: ratio "
                        f"{fmt_ratio(want / got.sps)}; others used {got.foreign_cores:.2f} cores")  # fmt: skip
            if args.rounds > 1:  # each round probed and measured anew: their means, side by side
                for slots, (want, got_sps) in totals.items():
                    threads = thread_budget(slots, machine.physical_cores).threads_per_job
                    rows.append([f"{workload.label} (mean of {args.rounds})", str(slots), str(threads),
                                 fmt_sps(want), fmt_sps(got_sps), fmt_ratio(want / got_sps), "", ""])  # fmt: skip
    caption = "\n".join([*notes, f"{machine.physical_cores} physical cores, GPU: {machine.gpu_name or 'none'}. "
                         + load_caption(before)])  # fmt: skip
    print_table("fleet model: aggregate SPS of N concurrent jobs, predicted against measured",
                ["preset / env", "N", "env threads", "predicted SPS", "measured SPS", "predicted / measured",
                 "cycles per job", "others' cores"], rows, text_columns=1, caption=caption)  # fmt: skip
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
