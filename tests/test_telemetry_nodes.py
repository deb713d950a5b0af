"""A Ray run's per-node telemetry, from the launcher's `usage()` to the views: the sampler puts
each node's sample (`NodeSample`) in `Sample.nodes`, the headless system line shows each node's
CPU after this machine's, and the TUI's CPU panel shows each node with the jobs it runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from cockpit.contract.ray_reports import NodeSample
from cockpit.core.feed.snapshot import RunState
from cockpit.core.feed.source import Frame
from cockpit.core.telemetry.sampler import JobUsage, Sample, Sampler
from cockpit.views.headless import system_line
from cockpit.views.tui.app import make_app
from cockpit.views.tui.cpu_panel import CpuPanel
from tests.fakeclock import FakeClock
from tests.tui_fakes import NOW, ScriptedSource, frame

GIB = 1024**3
HEAD = NodeSample("10.0.0.1", NOW, (20.0, 40.0), 3 * GIB, 8 * GIB)
WORKER = NodeSample("10.0.0.2", NOW, (90.0, 70.0, 80.0, 100.0), 5 * GIB, 16 * GIB, 55.0, 2 * GIB, 12 * GIB)


def sampled_on_the_cluster() -> Sample:
    """One tick of a sampler whose remote jobs and nodes are what a Ray launcher's `usage()` says."""
    remote_job = JobUsage(180.0, GIB, pid=4242)

    def usage() -> tuple[Mapping[str, JobUsage], tuple[NodeSample, ...]]:
        return {"001": remote_job}, (HEAD, WORKER)

    sampler = Sampler(remote=usage, clock=FakeClock(NOW))
    try:
        sample = sampler.tick()
    finally:
        sampler.stop()
    assert sample.jobs["001"] == remote_job
    return sample


def cluster_frame() -> Frame:
    """A running two-job frame whose newest sample came from the cluster, job 000 on the head and
    job 001 on the other node."""
    base = frame(gpu=False, jobs=2)
    sample = sampled_on_the_cluster()
    jobs = tuple(replace(job, node=node) for job, node in zip(base.state.jobs, (HEAD.node, WORKER.node), strict=True))
    state: RunState = replace(base.state, sample=sample, jobs=jobs)
    return replace(base, state=state, samples=(*base.samples[:-1], sample))


def test_the_samplers_nodes_reach_the_headless_system_line() -> None:
    sample = sampled_on_the_cluster()
    assert sample.nodes == (HEAD, WORKER)
    line = system_line(cluster_frame().state)
    assert line.endswith("  |  10.0.0.1 CPU 30% [20 40]  |  10.0.0.2 CPU 85% [90 70 80 100]"), line


async def test_the_samplers_nodes_reach_the_tui_cpu_panel_each_with_its_jobs() -> None:
    app = make_app(ScriptedSource(cluster_frame()))
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        lines = [line.plain for line in app.screen.query_one(CpuPanel).lines()]
    head = lines.index("10.0.0.1  CPU 30%  RAM 3.0/8.0 GiB")
    worker = lines.index("10.0.0.2  CPU 85%  RAM 5.0/16.0 GiB  GPU 55%")
    assert head < worker
    # Under each node its cores' strip (one column per core), then the jobs it runs.
    assert lines[head + 1].startswith("cores") and len(lines[head + 1].split()[1]) == len(HEAD.cpu_percent)
    assert lines[worker + 1].startswith("cores") and len(lines[worker + 1].split()[1]) == len(WORKER.cpu_percent)
    assert [line.split()[0] for line in lines[head + 2 : worker]] == ["000"]
    assert [line.split()[0] for line in lines[worker + 2 :]] == ["001"]
