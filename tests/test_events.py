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
