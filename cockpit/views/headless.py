"""The headless front end: a live rich table on a terminal, plain timestamped lines otherwise.

On a TTY (a local terminal, tmux, ssh -t) it redraws one table in place: a row per job with its
status, phase, progress, SPS, ETA, return, restarts, CPU and GPU memory, and one GPU and CPU
summary line. Without a TTY (nohup, a pipe, CI) it prints a line for each job state change as it
happens and a progress line per live job every `every_s` seconds, each prefixed with the UTC time
and the job id, so logs stay greppable, then a `[run]` line with the run's SPS and ETA once known.

SPS is a job's throughput over its recent whole rollout + train cycles (`cockpit.core.telemetry.throughput`),
never the rollout rate the worker reports; ETA is the steps left at that rate.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from pathlib import Path

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from cockpit.contract.rundir import RunDir
from cockpit.contract.states import JobState
from cockpit.core.feed.snapshot import FleetView, JobView, RunState, preset_label
from cockpit.core.machine.gpu_types import GpuSample
from cockpit.core.machine.util_reading import BUSY, util_read
from cockpit.core.telemetry.memwatch import NO_GROWTH
from cockpit.core.telemetry.sampler import STATUS_SEP
from cockpit.formatting import (
    compute_mode,
    episodes_of,
    eta,
    mib,
    money,
    num,
    scoring_of,
    si,
    steps_of,
    target_of,
    tier_target,
    used_of,
)


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _read(g: GpuSample, before: str, after: str = "") -> str:
    """How `g`'s utilization is read (`util_read`) between `before` and `after`; "" when its
    reader has not said."""
    read = util_read(g.util_mode, g.sample_period_s)
    return f"{before}{read}{after}" if read else ""


def _gpus_part(state: RunState) -> str:
    """Several GPUs, each by its index: utilization ("busy", `BUSY_LEGEND`) and how it is read,
    memory now, how many jobs it runs, and a compute mode that bounds them (`formatting.compute_mode`)."""
    parts = []
    for info in state.gpus:
        g = state.sample.gpu_of(info.index) if state.sample is not None else None
        jobs = sum(1 for job in state.jobs_on(info.index) if job.state.live)
        figures = "no sample"
        if g is not None:
            mem = used_of(g.mem_used_bytes, g.mem_total_bytes)
            figures = f"{BUSY} {num(g.util_percent)}%{_read(g, ' (', ')')} {mem}"
        mode = compute_mode(info.compute_mode)
        parts.append(f"GPU{info.index} {figures} {jobs} job{'s' if jobs != 1 else ''}{f' ({mode})' if mode else ''}")
    return "  ".join(parts)


def _condition(line: str) -> str:
    """A status line without its figures: the same condition whatever its seconds or counts."""
    return re.sub(r"\d+", "#", line)


def system_line(state: RunState) -> str:
    """One line: GPU utilization ("busy", `BUSY_LEGEND`: the share of time any kernel ran) with
    its peak and how it is read (`util_read`), memory, power, temperature, and a compute mode that
    bounds the jobs (`formatting.compute_mode`), or why there is no GPU, and CPU; on a machine of
    several GPUs, each one's utilization, memory, jobs and compute mode."""
    s = state.sample
    if len(state.gpus) > 1:
        gpu = _gpus_part(state)
    elif state.gpu is None:
        gpu = state.gpu_status or "no GPU telemetry"
    elif s is None or s.gpu is None:
        gpu = f"GPU {state.gpu.name}: waiting for the first sample"
    else:
        g = s.gpu
        throttle = f" throttled: {','.join(g.throttle_reasons)}" if g.throttle_reasons else ""
        gpu = (
            f"GPU {BUSY} {num(g.util_percent)}% (peak {num(g.util_peak_percent)}%{_read(g, ', ')})  "
            f"mem {used_of(g.mem_used_bytes, g.mem_total_bytes)}  "
            f"{num(g.power_w)} W  {num(g.temperature_c)} C  {num(g.sm_clock_mhz)} MHz{throttle}"
        )
        mode = compute_mode(state.gpu.compute_mode)
        gpu += f"  {mode}" if mode else ""
    if s is None:
        return gpu
    cores = " ".join(f"{c:.0f}" for c in s.cpu_percent)
    ram = f"{s.ram_used_bytes / 1024**3:.1f}/{s.ram_total_bytes / 1024**3:.1f} GiB"
    # On a cluster, each node's CPU after this machine's (the cockpit's own, where no job runs).
    nodes = "".join(
        f"  |  {n.node} CPU {n.cpu_total_percent:.0f}% [{' '.join(f'{c:.0f}' for c in n.cpu_percent)}]" for n in s.nodes
    )
    return f"{gpu}  |  CPU {s.cpu_total_percent:.0f}% [{cores}]  RAM {ram}{nodes}"


def job_line(job: JobView, *, with_state: bool = True, now: float | None = None) -> str:
    """A job's state and progress in one line (for plain output and summaries); a job with its own
    preset (a fleet's agent) names it as the user did, with its overrides. In a score phase, the
    episodes scored, and (given `now`) the time spent against the time expected."""
    parts = [f"{job.state:<8}"] if with_state else []
    if job.phase == "score" and job.scored is not None and job.to_score is not None:
        parts.append(scoring_of(job.scored, job.to_score, since=job.phase_since, now=now))
    elif job.phase:
        parts.append(f"{job.phase:<7}")
    if job.preset is not None:
        parts.append(preset_label(job.preset, job.overrides))
    if job.target_episodes is not None:
        parts.append(f"{episodes_of(job.episodes, job.target_episodes)} ({job.fraction:.0%})  {job.steps:,} steps")
    else:
        parts.append(f"{steps_of(job.steps, job.target)} ({job.fraction:.0%})" if job.target else f"{job.steps:,}")
    if job.sps is not None and job.state.stepping:
        parts.append(f"{job.sps:,.0f} sps")
    if job.episodes_per_h is not None and job.state.stepping:
        parts.append(f"{job.episodes_per_h:,.0f} ep/h")
    if job.eta_s is not None and job.state.stepping:
        parts.append(f"eta {eta(job.eta_s)}")
    if job.ep_rew_mean is not None:
        parts.append(f"rew {job.ep_rew_mean:.1f}")
    if job.restarts:
        parts.append(f"restarts {job.restarts}")
    if job.cpu_percent is not None:
        parts.append(f"cpu {job.cpu_percent:.0f}%")
    if job.gpu_mem_bytes is not None:
        parts.append(f"gpu {mib(job.gpu_mem_bytes)} sm {num(job.gpu_sm_percent, '{:.0f}%')}")
    if job.state in ("failed", "backoff", "paused") and job.error:
        parts.append(f"error: {job.error}")
    elif job.state in (JobState.STALLED, JobState.RUNNING) and job.exit_reason:  # why, or what is missing
        parts.append(job.exit_reason)
    return "  ".join(parts)


WIDE = 120


def jobs_table(state: RunState, width: int = WIDE) -> Table:
    """The live table: one row per job. Under `WIDE` columns it drops the seed and the SM % and
    compacts the step counts so an 80-column terminal shows every figure whole; GPU memory (and,
    wide, each job's SM %, "-" when unknown) only with a GPU."""
    wide = width >= WIDE
    columns = [
        ("job", "left"),
        ("seed", "right"),
        ("status", "left"),
        ("phase", "left"),
        ("progress", "left"),
        ("steps", "right"),
        ("SPS", "right"),
        ("ep/h", "right"),
        ("ETA", "right"),
        ("ep_rew", "right"),
        ("rst", "right"),
        ("CPU%", "right"),
        ("GPU mem", "right"),
        ("SM%", "right"),
    ]
    keep = {name for name, _ in columns}
    if not wide:
        keep.discard("seed")
        keep.discard("SM%")  # 80 columns keep GPU memory; its SM % only where there is room
    if state.gpu is None:
        keep.discard("GPU mem")
        keep.discard("SM%")
    if all(job.episodes is None for job in state.jobs):  # no episode counts reported (older files)
        keep.discard("ep/h")
    elif not wide:
        # 80 columns hold one more figure: ep/h where the target is in episodes (its steps cell
        # says how far in episodes, so the bar goes), else the bar.
        keep.discard("progress" if any(job.target_episodes is not None for job in state.jobs) else "ep/h")
    # Narrow, adjacent cells share their padding: one space between columns leaves room for the ETA.
    table = Table(
        expand=False, pad_edge=False, box=box.SIMPLE_HEAD if not wide else box.HEAVY_HEAD, collapse_padding=not wide
    )
    for name, justify in columns:
        if name in keep:
            table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for job in state.jobs:
        status = Text(
            job.state,
            style={
                "failed": "bold red",
                "done": "green",
                "backoff": "yellow",
                "paused": "yellow",
                "stalled": "bold red",
            }.get(job.state, ""),
        )
        steps = target_of(job.steps, job.target, job.target_episodes, job.episodes, wide=wide)
        if job.phase == "score" and job.scored is not None and job.to_score is not None:
            steps = scoring_of(job.scored, job.to_score).replace("score", "scored", 1)
        cells = {
            "job": job.id,
            "seed": str(job.seed),
            "status": status,
            "phase": job.phase or "",
            "progress": ProgressBar(total=max(job.target, 1), completed=job.steps, width=20 if wide else 8)
            if job.target_episodes is None
            else ProgressBar(total=job.target_episodes, completed=job.episodes or 0, width=20 if wide else 8),
            "steps": steps,
            "SPS": (num(job.sps) if wide else si(job.sps)) if job.sps is not None and job.state.stepping else "-",
            "ep/h": (num(job.episodes_per_h) if wide else si(job.episodes_per_h))
            if job.episodes_per_h is not None and job.state.stepping
            else "-",
            "ETA": eta(job.eta_s) if job.state.stepping else "-",
            "ep_rew": num(job.ep_rew_mean, "{:.1f}"),
            "rst": str(job.restarts),
            "CPU%": num(job.cpu_percent),
            "GPU mem": mib(job.gpu_mem_bytes),
            "SM%": num(job.gpu_sm_percent),
        }
        table.add_row(*(cells[name] for name, _ in columns if name in keep))
    return table


def run_line(state: RunState) -> str | None:
    """The run's live throughput and ETA in one line; None while neither is known."""
    sps, eta_s = state.sps, state.eta_s
    if sps is None and eta_s is None:
        return None
    # The run's episodes per hour beside its SPS: the sum over its training jobs, as report --json's.
    rates = [j.episodes_per_h for j in state.jobs if j.episodes_per_h is not None and j.state.stepping]
    episodes = f"  {sum(rates):,.0f} ep/h" if rates else ""
    return f"{num(sps)} sps{episodes}  eta {eta(eta_s)}"


def fleet_line(fleet: FleetView) -> str:
    """A fleet's tiers in one line: per tier finished/entered of planned, running, promoted,
    culled and failed; then the ETA and the cost so far and projected."""
    tiers = []
    for t in fleet.tiers:
        parts = [
            f"tier {t.tier} ({tier_target(t.timesteps, t.episodes)}): {t.finished}/{max(t.planned, t.entered)} done"
        ]
        parts += [
            f"{n} {what}"
            for n, what in (
                (t.running, "running"),
                (t.promoted, "promoted"),
                (t.culled, "culled"),
                (t.failed, "failed"),
            )
            if n
        ]
        tiers.append(", ".join(parts))
    cost = f"  {money(fleet.spent_usd)} spent, {money(fleet.projected_usd)} projected" if fleet.rate_usd_per_h else ""
    search = fleet.search
    best = ""
    if search is not None:
        best = f"  {search.drawn}/{search.samples} drawn"
        if search.best_score is not None:
            best += f", best so far {search.best_score:.1f} ({search.best_agent})"
    return f"{fleet.name}: " + " | ".join(tiers) + f"  eta {eta(fleet.eta_s)}{cost}{best}"


def leaderboard_lines(fleet: FleetView, top: int = 5) -> list[str]:
    """The best agents, one line each."""
    return [
        f"  {i}. {r.agent} score {r.score:.1f} (tier {r.tier}, {r.steps:,} steps) {r.env} {r.preset} seed {r.seed}"
        + (f" {r.overrides}" if r.overrides else "")
        + (f" (copied {r.lineage})" if r.lineage else "")
        for i, r in enumerate(fleet.leaders[:top], 1)
    ]


def memory_lines(state: RunState) -> list[str]:
    """The leak watch's word on the run: each job whose memory keeps growing, else "no growth" when
    jobs were watched long enough to judge (the seeds' "Memory leaks: none detected"); nothing when
    no job was."""
    growing = [f"  job {job.id}: {job.memory}" for job in state.jobs if job.memory_growing]
    if growing:
        return ["memory:", *growing]
    judged = sum(1 for job in state.jobs if job.memory == NO_GROWTH)
    return (
        [f"memory: no growth ({judged} job{'s' if judged > 1 else ''} watched long enough to judge)"] if judged else []
    )


def summary_lines(state: RunState, run_log: str) -> list[str]:
    """What the run ended with and why, for the last lines on screen."""
    shown = (JobState.DONE, JobState.FAILED, JobState.STOPPED, JobState.PAUSED, JobState.QUEUED)
    counts = ", ".join(f"{state.count(s)} {s}" for s in shown if state.count(s))
    lines = [f"run {state.status.value}: {counts} ({len(state.jobs)} jobs, {state.now - state.started_at:,.0f} s)"]
    for job in state.jobs:
        if job.state is not JobState.DONE:
            why = job.error or job.exit_reason or "not started"
            lines.append(f"  job {job.id} (seed {job.seed}) {job.state} at {job.steps:,}/{job.target:,} steps: {why}")
    lines += memory_lines(state)
    if state.fleet is not None:
        lines.append(f"fleet {fleet_line(state.fleet)}")
        lines += ["leaderboard:", *leaderboard_lines(state.fleet)] if state.fleet.leaders else []
    lines.append(f"run log: {run_log}")
    return lines


class HeadlessView:
    """Renders RunState snapshots to a console, live on a TTY and as plain lines otherwise."""

    def __init__(self, console: Console | None = None, every_s: float = 10.0) -> None:
        self.console = console or Console()
        self.every_s = every_s
        self.live: Live | None = None
        self._states: dict[str, str] = {}
        self._last_plain = 0.0
        self._warned: set[str] = set()
        self._advised: dict[str, str] = {}  # setting -> the suggestion last printed for it
        self._notices_seen = 0  # a fleet's notices printed so far
        self._growing: dict[str, str] = {}  # job -> its memory flag, printed when it turned on
        self._gpu_conditions: set[str] = set()  # the sampler's status lines shown, by `_condition`
        self._disk_wait: str | None = None  # the wait for disk space last seen (a line when one begins)

    def _print_warnings(self, warnings: Iterable[str]) -> None:
        for warning in warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                self._emit(f"[cockpit] {warning}")

    def _print_advice(self, state: RunState) -> None:
        # Reasons quote live measurements that change at every look; print an item again only
        # when what it suggests changes.
        for item in state.suggestions:
            if self._advised.get(item.setting) != item.suggested:
                self._advised[item.setting] = item.suggested
                self._emit(f"[cockpit] advice: {item.line()}")

    def _emit(self, line: str) -> None:
        if self.live is not None:
            self.live.console.print(line, markup=False, highlight=False)
        else:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def _renderable(self, state: RunState) -> Group:
        figures = f"  {line}" if state.status.live and (line := run_line(state)) else ""
        named = f"{state.name}: " if state.name is not None else ""
        waiting = f"  {state.disk_wait}" if state.disk_wait else ""
        header = Text(
            f"cockpit  {named}{state.preset} on {state.env}  {state.status.value}{waiting}{figures}  {state.run_dir}",
            style="bold",
        )
        fleet = [Text(fleet_line(state.fleet))] if state.fleet is not None else []
        # With a GPU, the sampler's conditions under the system line (without one, it is the line).
        status = [Text(state.gpu_status)] if state.gpu is not None and state.gpu_status else []
        return Group(header, *fleet, jobs_table(state, self.console.width), Text(system_line(state)), *status)

    def _print_memory(self, state: RunState) -> None:
        # Once when a job's flag turns on (its rate changes at every look: not on every line), and
        # again only after it cleared.
        for job in state.jobs:
            if not job.memory_growing:
                self._growing.pop(job.id, None)
            elif job.id not in self._growing and job.memory is not None:
                self._growing[job.id] = job.memory
                self._emit(f"{_stamp(state.now)} [job {job.id}] {job.memory}")

    def _print_gpu_status(self, state: RunState) -> None:
        # With a GPU, the sampler's status lines (stale figures, hidden processes, a lost GPU) are
        # not in the system line: each is printed when its condition appears, and again only after
        # it cleared; its figures (seconds, counts) change at every look.
        if state.gpu is None:
            return
        lines = state.gpu_status.split(STATUS_SEP) if state.gpu_status else []
        now = {_condition(line): line for line in lines}
        for key, line in now.items():
            if key not in self._gpu_conditions:
                self._emit(f"{_stamp(state.now)} [gpu] {line}")
        self._gpu_conditions = set(now)

    def _print_notices(self, state: RunState) -> None:
        fleet = state.fleet
        if fleet is None or fleet.notice_count <= self._notices_seen:
            return
        new = fleet.notice_count - self._notices_seen
        for line in fleet.notices[-new:]:  # more than the view keeps arrived at once: the newest
            self._emit(f"{_stamp(state.now)} [fleet] {line}")
        self._notices_seen = fleet.notice_count

    def update(self, state: RunState) -> None:
        """Redraw the table (TTY), or print state changes and periodic progress lines."""
        self._print_warnings(state.warnings + state.advice)
        self._print_advice(state)
        self._print_notices(state)
        self._print_memory(state)
        self._print_gpu_status(state)
        if self.console.is_terminal:
            if self.live is None:
                self.live = Live(self._renderable(state), console=self.console, refresh_per_second=4)
                self.live.start()
            else:
                self.live.update(self._renderable(state))
            return
        now = state.now
        if state.disk_wait is not None and self._disk_wait is None:  # at once, then with each progress line
            self._emit(f"{_stamp(now)} [run] {state.disk_wait}")
        self._disk_wait = state.disk_wait
        for job in state.jobs:
            before = self._states.get(job.id)
            if before != job.state:
                self._states[job.id] = job.state
                change = f"{before} -> {job.state}" if before else job.state
                self._emit(f"{_stamp(now)} [job {job.id}] {change}  {job_line(job, with_state=False)}")
        if now - self._last_plain >= self.every_s:
            self._last_plain = now
            for job in state.jobs:
                if job.state.stepping:
                    self._emit(f"{_stamp(now)} [job {job.id}] {job_line(job, now=now)}")
            if state.status.live and (line := run_line(state)):
                self._emit(f"{_stamp(now)} [run] {line}")
            if state.disk_wait is not None:
                self._emit(f"{_stamp(now)} [run] {state.disk_wait}")
            if state.fleet is not None:
                self._emit(f"{_stamp(now)} [fleet] {fleet_line(state.fleet)}")
            self._emit(f"{_stamp(now)} [system] {system_line(state)}")

    def close(self, state: RunState) -> None:
        """Stop the live display and print the summary."""
        self.update(state)
        if self.live is not None:
            self.live.stop()
            self.live = None
        for line in summary_lines(state, str(RunDir(Path(state.run_dir)).run_toml)):
            self._emit(line)
