"""The event stream's file format: strict JSON lines that survive a torn last write."""

from __future__ import annotations

import json
from pathlib import Path

from cockpit.contract.events import EventWriter, read_events


def test_events_are_strict_json_lines_with_time_and_kind(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path)
    writer.phase("rollout", iteration=0, num_timesteps=0)
    writer.progress(num_timesteps=8, sps=float("nan"), ep_rew_mean=float("inf"), losses={"value_loss": 1.5})
    writer.finished(status="done", steps=8, duration=0.5)
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    events = [json.loads(line) for line in lines]
    assert [e["kind"] for e in events] == ["phase", "progress", "finished"]
    assert all(isinstance(e["t"], float) for e in events)
    assert events[1]["sps"] is None and events[1]["ep_rew_mean"] is None
    assert events[1]["losses"] == {"value_loss": 1.5}


def test_reader_skips_a_torn_last_line_and_garbage(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    EventWriter(path).checkpoint(path="c", step=10)
    with path.open("a") as fh:
        fh.write("not json\n")
        fh.write('{"no_kind": 1, "t": 0}\n')
        fh.write('{"t": 1.0, "kind": "progress", "num_tim')
    assert [e.kind for e in read_events(path)] == ["checkpoint"]
    assert read_events(tmp_path / "missing.jsonl") == []


def test_a_second_writer_appends(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    EventWriter(path).error(type="invalid_config", message="bad")
    EventWriter(path).finished(status="stopped", steps=0, duration=0.0)
    assert [e.kind for e in read_events(path)] == ["error", "finished"]


def test_a_new_writer_ends_a_torn_line_so_its_events_survive(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    EventWriter(path).phase("train", iteration=1, num_timesteps=64)
    with path.open("a") as fh:
        fh.write('{"t": 1.0, "kind": "progr')  # the previous worker was killed mid-write
    EventWriter(path).started(config={}, pid=1, device="cpu", versions={})
    assert [e.kind for e in read_events(path)] == ["phase", "started"]


def test_a_heartbeat_round_trips_and_readers_that_do_not_care_pass_over_it(tmp_path: Path) -> None:
    from cockpit.contract.events import HeartbeatEvent, parse
    from cockpit.core.feed.detail import job_detail
    from cockpit.core.record.replay import _JobHistory
    from cockpit.core.record.run_report import live_steps

    job_dir = tmp_path / "jobs" / "000"
    writer = EventWriter(job_dir / "events.jsonl")
    writer.started(config={}, pid=1, device="cpu", versions={}, t=1.0)
    writer.phase("rollout", iteration=0, num_timesteps=0, t=2.0)
    writer.phase("train", iteration=1, num_timesteps=64, t=3.0)
    beat = writer.heartbeat("train", num_timesteps=64, t=8.0)
    writer.progress(num_timesteps=64, sps=10.0, t=9.0)
    writer.heartbeat("train", num_timesteps=99, t=10.0)  # a stray one says nothing about progress
    assert beat == HeartbeatEvent(8.0, "train", 64)
    assert parse(json.dumps({"t": 8.0, "kind": "heartbeat", "phase": "train", "num_timesteps": 64})) == beat
    assert parse(b'{"t": 8.0, "kind": "heartbeat", "phase": "nap", "num_timesteps": 64}') is None
    assert [e.kind for e in read_events(job_dir / "events.jsonl")].count("heartbeat") == 2

    assert live_steps(tmp_path, "000") == 64
    history = _JobHistory(id="000", seed=0, target=128, final=None)
    history.read(job_dir / "events.jsonl")
    assert history.phases == [(2.0, "rollout"), (3.0, "train")]  # the train phase goes on through its heartbeats
    assert list(zip(history.step_ts, history.steps, strict=True)) == [(1.0, 0), (2.0, 0), (3.0, 64), (9.0, 64)]
    assert [e.kind for e in job_detail(tmp_path, "000").events] == ["started"]


def test_started_carries_the_tf32_flag_and_rejects_a_non_boolean(tmp_path: Path) -> None:
    from cockpit.contract.events import StartedEvent, parse

    path = tmp_path / "events.jsonl"
    written = EventWriter(path).emit(StartedEvent(1.0, pid=1, device="cuda:0", tf32=True))
    assert read_events(path) == [written] and written.tf32 is True
    # An older worker's line has no flag: unknown, not off.
    assert parse('{"t": 1.0, "kind": "started"}') == StartedEvent(1.0)
    assert parse('{"t": 1.0, "kind": "started", "tf32": 1}') is None
