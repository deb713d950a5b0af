"""A job's detail comes from its directory alone: config, notable events, curves, stderr, checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.contract.events import EVENTS_FILE, EventWriter
from cockpit.core.feed.detail import MAX_EVENTS, MAX_POINTS, job_detail
from cockpit.core.feed.source import SourceError
from cockpit.core.telemetry.bounded_series import Thinned

T0 = 1_800_000_000.0


def _job(run_dir: Path, job_id: str = "000") -> tuple[Path, EventWriter]:
    job_dir = run_dir / "jobs" / job_id
    return job_dir, EventWriter(job_dir / EVENTS_FILE)


def _checkpoint_dir(job_dir: Path, step: int, ns: int) -> Path:
    path = job_dir / "checkpoints" / f"step-{step:012d}-{ns}"
    path.mkdir(parents=True)
    return path


def test_detail_reads_config_curves_checkpoints_and_stderr(tmp_path: Path) -> None:
    job_dir, events = _job(tmp_path)
    events.started(t=T0, config={"env": "CartPole-v1", "seed": 0}, pid=11, device="cpu", versions={})
    events.phase(t=T0, phase="rollout", iteration=0, num_timesteps=0)
    for i in range(1, 4):
        events.checkpoint(t=T0 + 10 * i, path=f"runs/x/jobs/000/checkpoints/step-{i * 100:012d}-{i}", step=i * 100)
    events.progress(t=T0 + 1, num_timesteps=64, sps=None, ep_rew_mean=None)  # nothing to plot yet
    events.progress(t=T0 + 2, num_timesteps=128, sps=500.0, ep_rew_mean=None)
    events.progress(t=T0 + 3, num_timesteps=192, sps=600.0, ep_rew_mean=12.5)
    events.error(t=T0 + 40, type="cuda_oom", message="out of memory")
    events.started(t=T0 + 41, config={"env": "CartPole-v1", "seed": 0, "resumed": True}, pid=12, device="cpu",
                   versions={})  # fmt: skip
    events.finished(t=T0 + 50, status="done", steps=300, duration=9.0)
    events.close()
    # Pruning removed step 100; a half-written and a corrupt checkpoint are not checkpoints.
    _checkpoint_dir(job_dir, 300, 3)
    _checkpoint_dir(job_dir, 200, 2)
    (job_dir / "checkpoints" / ".tmp-step-000000000400-4").mkdir()
    (job_dir / "checkpoints" / "corrupt").mkdir()
    (job_dir / "stderr.log").write_text("".join(f"line {i}\n" for i in range(30)))

    detail = job_detail(tmp_path, "000")

    assert detail.job_id == "000" and detail.job_dir == str(job_dir)
    assert detail.config == {"env": "CartPole-v1", "seed": 0, "resumed": True}  # the newest start
    assert [e.kind for e in detail.events] == [
        "started", "checkpoint", "checkpoint", "checkpoint", "error", "started", "finished",
    ]  # fmt: skip
    assert detail.curve == ((192, 12.5),)
    assert detail.sps == ((T0 + 2, 500.0), (T0 + 3, 600.0))
    assert [(c.step, c.t) for c in detail.checkpoints] == [(200, T0 + 20), (300, T0 + 30)]
    assert detail.checkpoints[0].path == str(job_dir / "checkpoints" / "step-000000000200-2")
    assert detail.stderr_tail == tuple(f"line {i}" for i in range(10, 30))


def test_detail_keeps_the_newest_notable_events_and_thins_long_curves(tmp_path: Path) -> None:
    _, events = _job(tmp_path)
    events.started(t=T0, config={"n": 0}, pid=1, device="cpu", versions={})
    for i in range(5000):
        events.phase(t=T0 + i, phase="rollout", iteration=i, num_timesteps=i)
        events.progress(t=T0 + i, num_timesteps=i, sps=float(i), ep_rew_mean=float(-i))
    for i in range(MAX_EVENTS + 10):
        events.checkpoint(t=T0 + 6000 + i, path=f"ckpt-{i}", step=i)
    events.close()

    detail = job_detail(tmp_path, "000")

    assert len(detail.events) == MAX_EVENTS
    assert detail.events[0].path == "ckpt-10" and detail.events[-1].path == f"ckpt-{MAX_EVENTS + 9}"
    assert detail.config == {"n": 0}  # its started event is long gone from `events`, not from `config`
    for series in (detail.curve, detail.sps):
        assert 2 <= len(series) <= MAX_POINTS
    assert detail.curve[0] == (0, 0.0) and detail.curve[-1] == (4999, -4999.0)
    assert detail.sps[0] == (T0, 0.0) and detail.sps[-1] == (T0 + 4999, 4999.0)
    assert list(detail.curve) == sorted(detail.curve)
    assert detail.checkpoints == () and detail.stderr_tail == ()


@pytest.mark.parametrize("n", [0, 1, 2, 499, 500, 501, 999, 1000, 1001, 1002, 4097])
def test_thinned_series_are_bounded_and_keep_both_ends(n: int) -> None:
    series: Thinned[int] = Thinned(limit=500)
    for i in range(n):
        series.add(i)
    points = series.points()
    assert len(points) == min(n, 500)
    assert list(points) == sorted(set(points))
    if n:
        assert points[0] == 0 and points[-1] == n - 1


def test_a_job_that_has_not_started_has_an_empty_detail(tmp_path: Path) -> None:
    (tmp_path / "jobs" / "003").mkdir(parents=True)
    detail = job_detail(tmp_path, "003")
    assert detail.config == {} and detail.events == () and detail.curve == () and detail.checkpoints == ()


@pytest.mark.parametrize("job_id", ["007", "..", ""])
def test_an_unknown_job_is_a_source_error_naming_job_and_dir(tmp_path: Path, job_id: str) -> None:
    (tmp_path / "jobs" / "000").mkdir(parents=True)
    with pytest.raises(SourceError, match=f"no job '{job_id}' in {tmp_path}"):
        job_detail(tmp_path, job_id)
