"""The run's trend (aggregate SPS and best return over time): the recorder's cadence and bound, the
supervisor's points against its own snapshots, the socket codec, and a replay's rebuilt points."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cockpit.contract.events import Event, ProgressEvent
from cockpit.contract.states import JobState
from cockpit.core.feed.control import AttachSource, ControlServer
from cockpit.core.feed.wire import decode_state, encode_state
from cockpit.core.machine.host import thread_budget
from cockpit.core.record.replay import open_replay
from cockpit.core.supervise.supervisor import JobTemplate, Supervisor
from cockpit.core.telemetry.trend import (
    NO_TREND,
    TREND_EVERY_S,
    TREND_SPAN_S,
    Trend,
    TrendRecorder,
    best_return,
    increment,
    merge,
)
from tests.cycles import script
from tests.fakeclock import FakeClock
from tests.test_feed_control import FakeProvider, Raw, state_at, wait_for
from tests.test_feed_wire import run_state
from tests.test_record_replay import T0, _build_run
from tests.test_supervise_supervisor import FakeLauncher, events


def test_the_recorder_keeps_one_point_a_second_however_often_it_is_offered_figures() -> None:
    recorder, clock = TrendRecorder(), FakeClock()
    start = clock.t
    for tick in range(50):  # the session's 5 Hz loop for 10 s
        clock.t = start + tick * 0.2
        recorder.observe(clock.monotonic(), clock.time(), lambda tick=tick: (100.0 + tick, None))
    trend = recorder.trend
    assert trend.t == tuple(start + k * TREND_EVERY_S for k in range(10))
    assert trend.sps == tuple(100.0 + 5 * k for k in range(10))  # the figures of the tick each point was due at
    assert trend.best_return == (None,) * 10


def test_after_a_stall_the_next_point_is_a_whole_step_later() -> None:
    recorder = TrendRecorder()
    for at in (0.0, 1.0, 7.25, 7.5, 8.0, 8.25, 9.25):
        recorder.observe(at, 1000.0 + at, lambda at=at: (at, None))
    assert recorder.trend.t == (1000.0, 1001.0, 1007.25, 1008.25, 1009.25)


def test_the_recorder_is_bounded_to_its_span_by_age_and_by_count() -> None:
    recorder = TrendRecorder()
    for second in range(3 * int(TREND_SPAN_S)):
        trend = recorder.observe(float(second), 1000.0 + second, lambda: (1.0, 2.0))
    assert len(trend) == int(TREND_SPAN_S / TREND_EVERY_S) + 1
    assert trend.t[0] == trend.t[-1] - TREND_SPAN_S
    # Points spaced by several seconds (a busy machine) go by age, not by count.
    sparse = TrendRecorder()
    for k in range(200):
        trend = sparse.observe(10.0 * k, 1000.0 + 10.0 * k, lambda: (1.0, 2.0))
    assert len(trend) == 61 and trend.t[0] == trend.t[-1] - TREND_SPAN_S


def test_a_wall_clock_that_goes_back_starts_the_trend_again() -> None:
    recorder = TrendRecorder()
    for at in range(5):
        recorder.observe(float(at), 2000.0 + at, lambda: (1.0, 1.0))
    trend = recorder.observe(5.0, 1500.0, lambda: (3.0, 4.0))  # NTP stepped the clock back by 500 s
    assert trend.t == (1500.0,) and trend.sps == (3.0,) and trend.best_return == (4.0,)


def test_best_return_is_the_highest_known_figure() -> None:
    assert best_return([None, -120.5, 12.0, -0.5, None]) == 12.0
    assert best_return([None, None]) is None and best_return([]) is None
    assert best_return([math.nan, -3.0, math.inf]) == -3.0


def test_a_trend_summarizes_its_range_and_refuses_columns_of_different_lengths() -> None:
    trend = Trend((1.0, 2.0, 3.0), (None, 40.0, 25.0), (None, -7.0, 3.5))
    assert trend.sps_max == 40.0 and trend.return_range == (-7.0, 3.5)
    assert NO_TREND.sps_max is None and NO_TREND.return_range is None
    with pytest.raises(ValueError, match="different lengths"):
        Trend((1.0, 2.0), (None,), (None, None))


def _returns(run_events: tuple[Event, ...], rise: float) -> list[Event]:
    """The scripted worker's events, its progress events reporting a return rising `rise` per second."""
    t0 = run_events[0].t
    return [replace(e, ep_rew_mean=rise * (e.t - t0)) if isinstance(e, ProgressEvent) else e for e in run_events]


def test_the_supervisor_samples_its_own_snapshots_and_an_ended_jobs_return_stays_in_the_best(tmp_path: Path) -> None:
    clock, launcher = FakeClock(), FakeLauncher()
    start = clock.t
    # Job 000 trains all along; job 001 learns faster and is done after 3 cycles.
    long = script(start + 20, cycles=12, rollout_s=5, train_s=5, steps_per_cycle=1000, startup_s=10)
    short = script(start + 20, cycles=3, rollout_s=4, train_s=2, steps_per_cycle=800, startup_s=10)
    sup = Supervisor(run_dir=tmp_path, template=JobTemplate("cartpole", "CartPole-v1", long.target), seeds=range(2),
                     slots=2, launcher=launcher, budget=thread_budget(2, 2), clock=clock)  # fmt: skip
    sup.view_limit = 0  # as in a fleet: an ended job leaves the snapshot's jobs, not the best return
    sup.tick()
    pending = {"000": _returns(long.events[:-1], 1.0), "001": _returns(short.events, 3.0)}
    writers = {job_id: events(sup, job_id) for job_id in pending}
    points, carried, best_of_001 = 0, 0, None
    for tick in range(int((long.end - start) / 0.2)):
        clock.t = start + tick * 0.2
        for job_id, queue in pending.items():
            while queue and queue[0].t <= clock.t:
                event = queue.pop(0)
                writers[job_id].emit(event)
                if job_id == "001" and isinstance(event, ProgressEvent):
                    best_of_001 = event.ep_rew_mean
        if pending["001"] == [] and launcher.processes[1].exit_code is None:
            launcher.processes[1].exit_code = 0
        sup.tick()
        before = sup.trend.trend
        state = sup.snapshot()
        if state.trend is not before:  # a point was due: it holds this snapshot's own figures
            points += 1
            assert state.trend.t[-1] == state.now
            assert state.trend.sps[-1] == state.sps
            shown = [job.ep_rew_mean for job in state.jobs]
            if sup.jobs["001"].state is JobState.DONE:
                assert [job.id for job in state.jobs] == ["000"]
                assert state.trend.best_return[-1] == best_return([*shown, best_of_001])
                carried += state.trend.best_return[-1] != best_return(shown)
            else:
                assert state.trend.best_return[-1] == best_return(shown)
    trend = sup.snapshot().trend
    assert points == len(trend) and len(trend) >= (long.end - start) - 1
    assert all(b - a == pytest.approx(TREND_EVERY_S) for a, b in zip(trend.t, trend.t[1:], strict=False))
    # Nothing is known before the first whole cycle; then the SPS and the best return are.
    assert trend.sps[0] is None and trend.best_return[0] is None
    assert trend.sps[-1] == pytest.approx(long.whole_cycle_rate, rel=0.1)
    # Job 001's final return (75, at 3 a second) stayed the best, though it was no longer shown,
    # until job 000 (1 a second) passed it some 45 s later.
    assert sup.jobs["001"].state is JobState.DONE and best_of_001 == 75.0
    assert carried >= 40
    assert trend.best_return[-1] == sup.jobs["000"].ep_rew_mean == 124.0


def test_the_trend_crosses_the_socket_typed_and_an_older_cockpits_state_has_none() -> None:
    trend = Trend((1.0, 2.0, 3.0), (None, 1234.5, 1300.0), (None, None, -12.25))
    state = replace(run_state(gpu=False), trend=trend)
    encoded = json.loads(json.dumps(encode_state(state)))
    columns = {"t": [1.0, 2.0, 3.0], "sps": [None, 1234.5, 1300.0], "best_return": [None, None, -12.25]}
    assert encoded["trend"] == columns
    back = decode_state(encoded)
    assert back == state and isinstance(back.trend, Trend) and isinstance(back.trend.sps, tuple)
    del encoded["trend"]
    assert decode_state(encoded).trend == NO_TREND
    encoded["trend"] = {"t": [1.0], "sps": [], "best_return": [None]}
    with pytest.raises(ValueError, match="'trend'"):
        decode_state(encoded)


def test_a_replay_rebuilds_the_trend_its_own_states_show(tmp_path: Path) -> None:
    run_dir = _build_run(tmp_path / "run")
    replay = open_replay(run_dir)
    trend = replay.frame().state.trend
    # A point each whole second from the run's first sample to its last.
    assert trend.t == tuple(T0 + k for k in range(101))
    for t, sps, best in zip(trend.t, trend.sps, trend.best_return, strict=True):
        replay.seek(t)
        state = replay.frame().state
        assert sps == state.sps
        assert best == best_return(job.ep_rew_mean for job in state.jobs)
    # Job 000's second rollout start (T0+13) makes its first whole cycle; its return of 10 counts
    # from T0+12.5 until a progress event without one (T0+30).
    known = [t - T0 for t, sps in zip(trend.t, trend.sps, strict=True) if sps is not None]
    assert known[0] == 13 and known[-1] == 59
    assert {t - T0 for t, best in zip(trend.t, trend.best_return, strict=True) if best == 10.0} == set(range(13, 30))


def test_a_replay_seeking_back_keeps_the_same_trend_as_one_opened_there(tmp_path: Path) -> None:
    run_dir = _build_run(tmp_path / "run")
    scrubbed = open_replay(run_dir)
    for t in (T0 + 100, T0 + 55, T0 + 50.5, T0 + 20):
        scrubbed.seek(t)
        fresh = open_replay(run_dir)
        fresh.seek(t)
        assert scrubbed.frame().state.trend == fresh.frame().state.trend
        assert scrubbed.frame().state.trend.t[-1] == math.floor(t)


def _seconds(first: int, last: int) -> Trend:
    """A point each second from `first` to `last` (inclusive), its SPS the second and no return."""
    ts = tuple(float(k) for k in range(first, last + 1))
    return Trend(ts, ts, (None,) * len(ts))


def test_a_viewer_is_sent_only_the_points_it_lacks_and_merges_them_into_the_whole_trend() -> None:
    trend = _seconds(1000, 1010)
    assert increment(trend, None) == trend  # a first frame: all of it
    assert increment(trend, 1008.0) == _seconds(1009, 1010)
    assert len(increment(trend, 1010.0)) == 0  # nothing new since
    assert increment(trend, 1200.0) == trend  # not one of its moments (the trend started again): all of it
    held = _seconds(1000, 1008)
    assert merge(held, increment(trend, 1008.0), now=1010.0) == trend
    assert merge(held, NO_TREND, now=1010.0) is held
    assert merge(held, trend, now=1010.0) is trend  # a whole trend sent again replaces what is held
    # What falls out of the span goes, as it does from the run's own trend.
    assert merge(held, _seconds(1009, 1010), now=1000.0 + TREND_SPAN_S + 5) == _seconds(1005, 1010)


def test_an_attached_viewer_gets_the_trend_in_increments_and_shows_it_whole(tmp_path: Path) -> None:
    provider = FakeProvider()
    provider.state = replace(state_at(1300.0), trend=_seconds(1000, 1300))
    server = ControlServer(tmp_path, provider)
    server.start()
    raw = Raw(server.path) if server.path is not None else None
    source = AttachSource.connect(tmp_path, hz=50)
    try:
        assert raw is not None
        frame = source.frame()
        assert frame is not None and frame.state.trend == _seconds(1000, 1300)
        # On the wire: the whole trend for a viewer that holds none, then only the new points.
        assert len(raw.ask(op="frame", since=0)["state"]["trend"]["t"]) == 301
        assert raw.ask(op="frame", since=0, trend_since=1298.0)["state"]["trend"]["t"] == [1299.0, 1300.0]
        # The viewer's own requests ask only for what it lacks: the trend after the last point it holds.
        asked: list[dict[str, Any]] = []
        link = source._link
        real_request = link.request

        def recording(request: dict[str, Any], timeout: float) -> dict[str, Any]:
            asked.append(dict(request))
            return real_request(request, timeout)

        link.request = recording  # type: ignore[method-assign]
        provider.state = replace(state_at(1302.0), trend=_seconds(1000, 1302))
        frame = wait_for(lambda: (f := source.frame()) is not None and f.state.now == 1302.0 and f)
        assert frame.state.trend == _seconds(1000, 1302)
        wait_for(lambda: any(r.get("trend_since") == 1302.0 for r in asked))
        assert {r.get("trend_since") for r in asked} <= {1300.0, 1302.0}, asked
    finally:
        source.close()
        if raw is not None:
            raw.close()
        server.stop()
