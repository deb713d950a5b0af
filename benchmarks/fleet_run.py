"""A whole fleet end to end, projected first and then measured: `python -m benchmarks.fleet run`.

1. Writes a CartPole plan (default: 64 agents, tiers 10k, 20k, 40k promoting 0.25 then 0.5, sync,
   2 slots) and projects it as `cockpit fleet --dry-run` does (`cockpit.core.fleet.projection.project`, from
   this machine's cached or freshly probed costs; the probe is not timed).
2. Runs it with the real `cockpit fleet --headless` and measures its wall time, the cockpit's own
   CPU time and peak RSS (psutil, once a second), and from the run dir: the steps trained and each
   worker launch's start-up (`started.startup_s`: process start to training).
3. Prints projected against measured wall time as a ratio, the steps (and the time, at the
   fleet's measured rate) the tiers save against training every agent to the last tier, the
   start-up share of the slots' time, and the cockpit's CPU per minute.

`python -m benchmarks.fleet run --scale 5000 --seconds 60` instead plans 5,000 agents and watches
the cockpit supervise the first minute of them on the slots: its CPU per minute and its RSS.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.common import REPO_ROOT
from cockpit.contract.events import (
    CheckpointEvent,
    EvaluatedEvent,
    Event,
    FinishedEvent,
    ProgressEvent,
    StartedEvent,
    of_kind,
    read_events,
)
from cockpit.contract.fleetplan import load_plan
from cockpit.core.fleet.projection import project
from cockpit.core.fleet.store import FleetStore
from cockpit.core.sizing.overlap import speed_of
from cockpit.core.sizing.starting_point import costs_for, this_machine

SETTLE_S = 15.0  # the cockpit's start-up (imports, the fleet's first launches) is over by then

PLAN = """
name = "bench"
jobs = {slots}
promotion = "sync"
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = {agents}
{tiers}
[score]
episodes = 10
"""


def plan_text(agents: int, slots: int, tiers: list[int], promote: list[float]) -> str:
    tables = ""
    for i, steps in enumerate(tiers):
        tables += f"[[tiers]]\ntimesteps = {steps}\n" + (f"promote = {promote[i]}\n" if i < len(promote) else "")
    return PLAN.format(slots=slots, agents=agents, tiers=tables)


@dataclasses.dataclass
class Watched:
    """What the cockpit process cost while it ran."""

    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    exit_code: int | None
    settled_cpu_s: float = 0.0  # the CPU seconds after its first `SETTLE_S` (imports, start-up)
    settled_wall_s: float = 0.0  # the wall seconds after them

    def cpu_lines(self) -> str:
        """Its CPU per minute, in all and once settled (supervising, its start-up over)."""
        whole = per_minute(self.cpu_s, self.wall_s)
        if self.settled_wall_s <= 0:
            return whole
        return f"{whole}, start-up included; after its first {SETTLE_S:.0f} s: " + per_minute(
            self.settled_cpu_s, self.settled_wall_s
        )


def per_minute(cpu_s: float, wall_s: float) -> str:
    """`cpu_s` over `wall_s` as CPU seconds per minute and a share of a core."""
    share = cpu_s / wall_s
    return f"{cpu_s:.1f} CPU s over {wall_s:,.0f} s = {share * 60:.2f} CPU s per minute ({share:.2%} of a core)"


def watch(cmd: list[str], *, log: Path, seconds: float | None = None) -> Watched:
    """Run `cmd`, polling its own CPU time and RSS once a second; after `seconds`, SIGINT it (a
    clean stop) and wait."""
    begin = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    me = psutil.Process(proc.pid)
    cpu, rss = 0.0, 0
    settled: tuple[float, float] | None = None  # (wall, cpu) once SETTLE_S have passed
    while proc.poll() is None:
        try:
            times = me.cpu_times()
            cpu, rss = times.user + times.system, max(rss, me.memory_info().rss)
        except psutil.Error:
            pass
        now = time.monotonic() - begin
        if settled is None and now >= SETTLE_S:
            settled = (now, cpu)
        if seconds is not None and now >= seconds:
            proc.send_signal(signal.SIGINT)  # the figures cover the watched seconds, not the stop
            proc.wait()
            break
        time.sleep(1.0)
    else:
        now = time.monotonic() - begin
    since_wall, since_cpu = settled or (now, cpu)
    return Watched(now, cpu, rss / 2**20, proc.returncode, cpu - since_cpu, now - since_wall)


@dataclasses.dataclass
class SlotTime:
    """Where the slots' seconds went, summed over every worker launch of a run (from events)."""

    startup_s: float = 0.0  # request (or process start) to `started`
    training_s: float = 0.0  # `started` to the last progress at the target
    saving_s: float = 0.0  # that progress to the final checkpoint
    scoring_s: float = 0.0  # the final checkpoint to `evaluated`
    ending_s: float = 0.0  # the rest, to `finished`
    launches: int = 0

    def add(self, events: list[Event]) -> None:
        """Account one job's events: each `started` opens a launch that its `finished` ends."""
        launch: list[Event] = []
        for event in events:
            if isinstance(event, StartedEvent):
                launch = [event]
            elif launch:
                launch.append(event)
                if isinstance(event, FinishedEvent):
                    self._account(launch)
                    launch = []

    def _account(self, launch: list[Event]) -> None:
        started, finished = launch[0], launch[-1]
        assert isinstance(started, StartedEvent)
        self.launches += 1
        self.startup_s += started.startup_s or 0.0
        progress = of_kind(launch, ProgressEvent)
        trained = progress[-1].t if progress else started.t
        saved = max([e.t for e in of_kind(launch, CheckpointEvent) if e.t >= trained], default=trained)
        scored = max([e.t for e in of_kind(launch, EvaluatedEvent)], default=saved)
        self.training_s += trained - started.t
        self.saving_s += saved - trained
        self.scoring_s += scored - saved
        self.ending_s += finished.t - scored

    def lines(self, slot_s: float) -> list[str]:
        """The breakdown as shares of `slot_s`, the slots' seconds (slots x wall time)."""
        parts = [("start-up", self.startup_s), ("training", self.training_s), ("final checkpoint", self.saving_s),
                 ("scoring", self.scoring_s), ("ending", self.ending_s)]  # fmt: skip
        idle = slot_s - sum(seconds for _, seconds in parts)
        return [f"  {name:<17} {seconds:8,.1f} s  {seconds / slot_s:6.1%}" for name, seconds in
                [*parts, ("no job (idle)", idle)]]  # fmt: skip


def run(args: argparse.Namespace) -> int:
    tiers = [int(t) for t in args.tiers.split(",")]
    promote = [float(p) for p in args.promote.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-run-"))
    plan_path = work / "plan.toml"
    plan_path.write_text(plan_text(args.agents, args.slots, tiers, promote))
    plan = load_plan(plan_path)
    machine = this_machine()
    costs = costs_for(print, machine, plan.agents[0].preset)
    if costs is None:
        print("no measured costs for the cartpole preset here; cannot project", file=sys.stderr)
        return 1
    speed = speed_of(plan.agents[0].preset, costs, args.slots, machine.physical_cores,
                     score_episodes=plan.score_episodes)  # fmt: skip
    projection = project(plan, lambda _preset: speed)
    run_dir = work / "run"
    cmd = [sys.executable, "-m", "cockpit", "fleet", str(plan_path), "--headless", "--run-dir", str(run_dir)]
    print(f"plan: {args.agents} agents, tiers {tiers}, promote {promote}, {args.slots} slots; run dir {run_dir}")
    watched = watch(cmd, log=work / "cockpit.log")
    if watched.exit_code != 0:
        print(f"the fleet exited {watched.exit_code}; see {work / 'cockpit.log'}", file=sys.stderr)
        return 1
    store = FleetStore.in_run_dir(run_dir, read_only=True)
    results = store.results()
    store.close()
    trained = sum(max(r.steps for r in results if r.agent == agent) for agent in {r.agent for r in results})
    slot_time = SlotTime()
    for job_dir in (run_dir / "jobs").iterdir():
        slot_time.add(read_events(job_dir / "events.jsonl"))
    projected = projection.total.seconds or 0.0
    rate = trained / watched.wall_s
    all_steps = projection.all_to_last.amount
    print(f"steps trained: {trained:,} (projected {projection.total.amount:,}); all {args.agents} agents to "
          f"{tiers[-1]:,}: {all_steps:,} steps: {1 - trained / all_steps:.1%} of the steps saved")  # fmt: skip
    print(f"wall time: projected {projected:,.0f} s, measured {watched.wall_s:,.0f} s: projected/measured = "
          f"{projected / watched.wall_s:.3f}")  # fmt: skip
    print(f"all agents to the last tier at the fleet's measured {rate:,.0f} steps/s: {all_steps / rate:,.0f} s, "
          f"so the tiers saved {all_steps / rate - watched.wall_s:,.0f} s "
          f"({1 - watched.wall_s / (all_steps / rate):.1%})")  # fmt: skip
    slot_s = args.slots * watched.wall_s
    print(f"worker start-up: {slot_time.launches} launches, {slot_time.startup_s:,.1f} s in all (mean "
          f"{slot_time.startup_s / max(1, slot_time.launches):.2f} s): {slot_time.startup_s / slot_s:.1%} of the "
          "slots' time")  # fmt: skip
    print(f"the slots' {slot_s:,.0f} s (from the jobs' events):", *slot_time.lines(slot_s), sep="\n")
    print(f"cockpit: {watched.cpu_lines()}; peak RSS {watched.peak_rss_mib:,.0f} MiB")
    return 0


def scale(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-scale-"))
    plan_path = work / "plan.toml"
    plan_path.write_text(plan_text(args.scale, args.slots, [10_000, 20_000, 40_000], [0.25, 0.5]))
    begin = time.perf_counter()
    load_plan(plan_path)
    validate_s = time.perf_counter() - begin
    cmd = [sys.executable, "-m", "cockpit", "fleet", str(plan_path), "--headless", "--run-dir", str(work / "run")]
    watched = watch(cmd, log=work / "cockpit.log", seconds=args.seconds)
    print(
        f"{args.scale:,} agents planned, {args.slots} slots: validated in {validate_s:.2f} s; over the first "
        f"{watched.wall_s:,.0f} s the cockpit used {watched.cpu_lines()}; peak RSS {watched.peak_rss_mib:,.0f} MiB"
    )
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--tiers", default="10000,20000,40000", help="each tier's timesteps, comma-separated")
    parser.add_argument("--promote", default="0.25,0.5", help="each tier's promote but the last, comma-separated")
    parser.add_argument("--scale", type=int, metavar="N", help="instead: plan N agents and watch the first --seconds")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    return scale(args) if args.scale else run(args)
