"""Frozen run data and a scripted source for the TUI's Pilot and snapshot tests.

The data is made up on purpose and only ever reaches a test: four jobs whose train phases (2 s
every 8 s, staggered) line up with GPU utilization bursts, so a snapshot shows what the lanes are
for. Everything is a pure function of its arguments, so snapshots are stable."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from cockpit.contract.controls import Control
from cockpit.contract.events import CheckpointEvent, StartedEvent
from cockpit.contract.states import RunStatus
from cockpit.core.feed.snapshot import FleetView, JobView, LeaderView, RunState, TierView
from cockpit.core.feed.source import WINDOW_S, Checkpoint, Frame, JobDetail, SourceError
from cockpit.core.machine.gpu_types import GpuInfo, GpuSample
from cockpit.core.telemetry.sampler import JobUsage, Sample
from cockpit.core.telemetry.trend import Trend

NOW = 1_790_000_000.0
GIB = 1024**3
CYCLE_S, TRAIN_S = 8.0, 2.0


def _phase_at(job: int, t: float) -> str:
    offset = (t - NOW + 1000 * CYCLE_S + job * 1.3) % CYCLE_S
    return "train" if offset < TRAIN_S else "rollout"


def transitions(job: int, now: float = NOW) -> tuple[tuple[float, str | None], ...]:
    """The job's phase changes over the window (every 0.5 s is fine enough for fixtures)."""
    out: list[tuple[float, str | None]] = []
    t = now - WINDOW_S - CYCLE_S
    while t <= now:
        phase = _phase_at(job, t)
        if not out or out[-1][1] != phase:
            out.append((round(t, 3), phase))
        t += 0.5
    return tuple(out)


def job_view(i: int, *, gpu: bool, now: float = NOW, state: str = "running", **changes: object) -> JobView:
    """Job `i` (id 00i) mid-run."""
    view = JobView(
        id=f"{i:03d}", seed=i, state=state, phase=_phase_at(i, now) if state == "running" else None,
        phase_since=now - 1.0, steps=50_000 * (i + 1), target=1_000_000, sps=1500.0 + 100 * i, mean_sps=1450.0,
        ep_rew_mean=-120.5 + 40 * i, restarts=i % 2, checkpoints=i, last_checkpoint_step=40_000 * i or None,
        error=None, exit_reason=None, pid=4000 + i, device="cuda" if gpu else "cpu", cpu_percent=95.0 + i,
        rss_bytes=900 * 1024**2, gpu_mem_bytes=(1 + i) * 512 * 1024**2 if gpu else None,
        peak_gpu_mem_bytes=(1 + i) * 600 * 1024**2 if gpu else None, started_at=now - 600, ended_at=None,
        eta_s=(1_000_000 - 50_000 * (i + 1)) / (1500.0 + 100 * i), rollout_sps=9000.0 + 100 * i,
    )  # fmt: skip
    return replace(view, **changes)  # type: ignore[arg-type]


def sample(t: float, *, gpu: bool, jobs: int = 4, cores: int = 8) -> Sample:
    """The telemetry at `t`: utilization high when any job trains."""
    training = sum(1 for j in range(jobs) if _phase_at(j, t) == "train")
    util = min(100.0, 8.0 + 45.0 * training)
    g = GpuSample(util, util, (3 + training) * GIB, 12 * GIB, 90.0 + 2 * util, 61.0, 2500, ()) if gpu else None
    cpu = tuple(min(100.0, 40.0 + 7.0 * ((k * 3 + int(t)) % 9)) for k in range(cores))
    usage = {
        f"{j:03d}": JobUsage(95.0 + j, 900 * 1024**2, (1 + j) * 512 * 1024**2 if gpu else None) for j in range(jobs)
    }
    return Sample(t, cpu, 11 * GIB, 24 * GIB, g, usage, 0.001, ((t, util),) if gpu else ())


def rising_trend(now: float = NOW, *, seconds: int = 600, sps: float = 6600.0, best: float = -0.5) -> Trend:
    """A point a second over the last `seconds`: the SPS rising, with a wobble, to `sps` and the best
    return rising to `best` (the four jobs' figures together and at best), neither known at first."""
    t, rates, returns = [], [], []
    for k in range(seconds + 1):
        x = k / seconds
        t.append(now - seconds + k)
        rates.append(None if k < 40 else sps * (0.55 + 0.45 * x) - 150.0 * math.sin(k / 17.0) * (1 - x))
        returns.append(None if k < 60 else best - 200.0 * (1 - x) ** 2)
    return Trend(tuple(t), tuple(rates), tuple(returns))


def frame(*, gpu: bool = True, jobs: int = 4, now: float = NOW, status: RunStatus = RunStatus.RUNNING,
          warnings: tuple[str, ...] = (), trend: Trend | None = None, **job_changes: object) -> Frame:  # fmt: skip
    """A frozen frame of a run with `jobs` running jobs (and, unless given, a `rising_trend`)."""
    samples = tuple(sample(now - WINDOW_S + k * 0.2, gpu=gpu, jobs=jobs) for k in range(1, int(WINDOW_S * 5) + 1))
    state = RunState(
        run_dir="runs/20261122T010000Z-heavy-LunarLander-v3", preset="heavy", env="LunarLander-v3", status=status,
        started_at=now - 620, now=now, slots=jobs,
        jobs=tuple(job_view(i, gpu=gpu, now=now, **job_changes) for i in range(jobs)), sample=samples[-1],
        gpu=GpuInfo(0, "NVIDIA GeForce RTX 4070", 12 * GIB, "560.35") if gpu else None,
        gpu_status="" if gpu else "no NVIDIA driver (NVML library not found)", warnings=warnings,
        threads_per_job=2, physical_cores=8, eta_s=(1_000_000 - 50_000) / 1500.0,
        trend=rising_trend(now, sps=sum(1500.0 + 100 * i for i in range(jobs)), best=-120.5 + 40 * (jobs - 1))
        if trend is None else trend,
    )  # fmt: skip
    return Frame(state, samples, {f"{i:03d}": transitions(i, now) for i in range(jobs)})


@dataclass
class ScriptedSource:
    """A RunSource whose frames a test sets; every command it receives is kept in `commands`."""

    current: Frame | None
    read_only: bool = False
    commands: list[Control] = field(default_factory=list)
    refuse: str | None = None  # when set, submit raises SourceError with this text
    closed: bool = False

    def frame(self) -> Frame | None:
        return self.current

    def submit(self, command: Control) -> None:
        if self.refuse:
            raise SourceError(self.refuse)
        self.commands.append(command)

    def detail(self, job_id: str) -> JobDetail:
        return JobDetail(
            job_id=job_id, job_dir=f"runs/x/jobs/{job_id}", config={"env": "LunarLander-v3", "preset": {"n_envs": 16}},
            events=(StartedEvent(NOW - 600, pid=1, device="cuda"), CheckpointEvent(NOW - 300, path="cp", step=40_000)),
            stderr_tail=("UserWarning: something mild",),
            curve=tuple((k * 10_000, -200.0 + 10 * k) for k in range(20)),
            sps=tuple((NOW - 600 + k * 30, 1400.0 + k) for k in range(20)),
            checkpoints=(Checkpoint(40_000, f"runs/x/jobs/{job_id}/checkpoints/step-40000-1", NOW - 300),),
        )  # fmt: skip

    def close(self) -> None:
        self.closed = True


@dataclass
class ScriptedReplay(ScriptedSource):
    """A read-only source with a span, for the replay bar."""

    read_only: bool = True
    at: float = NOW
    seeks: list[float] = field(default_factory=list)

    @property
    def span(self) -> tuple[float, float]:
        return (NOW - 600, NOW)

    def seek(self, t: float) -> None:
        self.seeks.append(t)
        self.at = t
        self.current = frame(now=t, status=RunStatus.DONE if t >= NOW else RunStatus.RUNNING)


# ----- fleets -----


def agent_id(index: int) -> str:
    """A fleet's agent id, as `cockpit.contract.fleetplan` names them."""
    return f"a{index:04d}"


def fleet_view(agents: int = 500, *, finished: int = 120, rate: float | None = 1.99) -> FleetView:
    """A sync fleet of `agents` in three tiers, `finished` of them scored in the first (4 running)."""
    promoted = finished // 4
    t0_failed = 2
    t0_done = finished + t0_failed >= agents
    tiers = (
        TierView(0, 500_000, agents, agents, 4 if not t0_done else 0, finished, promoted,
                 finished - promoted if t0_done else 0, t0_failed, 60.0 * (agents - finished)),
        TierView(1, 2_000_000, agents // 4, promoted, 0, 0, 0, 0, 0, 60.0 * (agents - finished) + 3600.0),
        TierView(2, 5_000_000, agents // 20, 0, 0, 0, 0, 0, 0, 60.0 * (agents - finished) + 7200.0),
    )  # fmt: skip
    leaders = tuple(
        LeaderView(agent_id(k * 7 % agents), "CartPole-v1" if k % 2 else "Acrobot-v1", "cartpole",
                   "learning_rate=0.0003" if k % 2 else "", k * 7 % agents, 0, 500_000,
                   480.0 - 3.5 * k + finished / 100)
        for k in range(min(10, finished))
    )  # fmt: skip
    eta_s = tiers[-1].eta_s
    spent = 620 / 3600 * rate if rate else None
    projected = spent + eta_s / 3600 * rate if spent is not None and rate and eta_s is not None else None
    notices = tuple(f"tier 0: {agent_id(k * 7 % agents)} finished, score {480.0 - 3.5 * k:.1f}" for k in range(5))
    return FleetView("screen", "sync", agents, tiers, leaders, eta_s, rate, spent, projected,
                     (*notices, f"{finished} of {agents} agents scored in tier 0"), finished + 1)  # fmt: skip


def agent_preset(k: int) -> dict[str, Any]:
    """Fleet agent k's own preset and overrides (`JobView.preset`, `JobView.overrides`)."""
    return {"preset": "cartpole", "overrides": (("learning_rate", "0.0003" if k % 2 else "0.001"),)}


def fleet_frame(agents: int = 500, *, finished: int = 120, slots: int = 4, now: float = NOW,
                rate: float | None = 1.99) -> Frame:  # fmt: skip
    """A frame of a fleet mid-way through its first tier: its `slots` running agents and the
    `2 * slots` latest ended ones, as the supervisor's `view_limit` gives them, not all `agents`.
    Each agent has the plan's preset and an override, as `FleetRun` hands them to the supervisor:
    agent k's `learning_rate` is 0.001 for an even k, 0.0003 for an odd one."""
    base = frame(jobs=slots, now=now)
    ended = [
        replace(job_view(k % slots, gpu=True, now=now, state="done"), id=agent_id(k), seed=k, steps=500_000,
                target=500_000, sps=None, eta_s=0.0, ended_at=now - (finished - k) * 5.0, pid=None,
                cpu_percent=None, rss_bytes=None, gpu_mem_bytes=None, **agent_preset(k))
        for k in range(max(0, finished - 2 * slots), finished)
    ]  # fmt: skip
    running = [
        replace(job_view(i, gpu=True, now=now), id=agent_id(finished + i), seed=finished + i, target=500_000,
                **agent_preset(finished + i))
        for i in range(slots)
    ]  # fmt: skip
    state = replace(base.state, preset="fleet", env="screen", jobs=(*ended, *running),
                    fleet=fleet_view(agents, finished=finished, rate=rate))  # fmt: skip
    return Frame(state, base.samples, {agent_id(finished + i): transitions(i, now) for i in range(slots)})
