"""A real worker's event stream, read through the one parser (`cockpit.contract.events.parse`)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from cockpit.contract.events import (
    EVENT_TYPES,
    CheckpointEvent,
    ErrorEvent,
    EvaluatedEvent,
    EventReader,
    FinishedEvent,
    HeartbeatEvent,
    PhaseEvent,
    ProgressEvent,
    StartedEvent,
    from_json,
    parse,
    to_json,
)
from tests.workerproc import run_worker, start_worker, write_preset


@pytest.mark.slow
def test_a_stopped_and_resumed_workers_stream_parses_completely_with_every_kind(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    preset = write_preset(tmp_path, checkpoint_every=512)
    first = start_worker(job_dir, "--preset", str(preset), "--timesteps", "1000000")
    first.wait_for(lambda ev: any(isinstance(e, CheckpointEvent) for e in ev))
    first.proc.send_signal(signal.SIGTERM)
    assert first.finish() == 0
    # Resumed to its target and scored there: the `evaluated` event before `finished`.
    resumed = start_worker(job_dir, "--preset", str(preset), "--timesteps", "4096", "--eval-episodes", "3")
    assert resumed.finish() == 0
    # A third start on another env cannot continue the checkpoint: the worker reports an error.
    refused = run_worker("--preset", str(preset), "--env", "Acrobot-v1", "--timesteps", "8192",
                         "--job-dir", str(job_dir))  # fmt: skip
    assert refused.returncode == 2

    lines = (job_dir / "events.jsonl").read_bytes().splitlines()
    reader = EventReader(job_dir / "events.jsonl")
    events = list(reader)
    assert len(events) == len(lines) and reader.skipped == 0  # every line is a valid event
    # Every kind: the heartbeats here are the score phase's (a train phase sends one only 5 s in,
    # tests/test_training_callback.py has one do so).
    assert {e.kind for e in events} == set(EVENT_TYPES)
    for raw, event in zip(lines, events, strict=True):
        assert from_json(json.loads(raw)) == event
        assert parse(json.dumps(to_json(event))) == event  # the writer's form reads back the same

    starts = [e for e in events if isinstance(e, StartedEvent)]
    assert [s.resumed_from_step is None for s in starts] == [True, False]
    finished = [e for e in events if isinstance(e, FinishedEvent)]
    assert [f.status for f in finished] == ["stopped", "done"] and finished[-1].steps == 4096
    assert starts[1].resumed_from_step == finished[0].steps
    assert any(isinstance(e, ProgressEvent) and e.losses for e in events)
    assert {e.phase for e in events if isinstance(e, PhaseEvent)} == {"rollout", "train", "score"}
    # The evaluation is a score phase after the last train phase, its progress in heartbeats.
    last_phase = max(i for i, e in enumerate(events) if isinstance(e, PhaseEvent))
    scored_at = next(i for i, e in enumerate(events) if isinstance(e, EvaluatedEvent))
    assert isinstance(events[last_phase], PhaseEvent) and events[last_phase].phase == "score"
    assert last_phase < scored_at
    beats = [e for e in events[last_phase:scored_at] if isinstance(e, HeartbeatEvent)]
    assert beats and all(b.phase == "score" and b.to_score == 3 and b.num_timesteps == 4096 for b in beats)
    counts = [b.scored for b in beats]
    assert counts[0] == 0 and counts == sorted(counts) and max(counts) in (2, 3)  # type: ignore[type-var]
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.type == "invalid_config" and "another --env?" in error.message


def test_parse_skips_torn_garbled_and_invalid_lines_and_names_what_is_wrong() -> None:
    assert parse(b'{"t": 1.0, "kind": "progress", "num_tim') is None  # torn
    assert parse(b"not json") is None
    assert parse(b'{"t": 1.0, "kind": "telepathy"}') is None  # a kind this version does not know
    assert parse(b'{"t": "soon", "kind": "checkpoint", "path": "c", "step": 1}') is None
    assert parse(b'{"t": 1.0, "kind": "phase", "phase": "dream", "iteration": 0, "num_timesteps": 0}') is None
    assert parse(b'{"t": 1.0, "kind": "checkpoint", "path": "c", "step": 1, "new_field": 3}') == CheckpointEvent(
        1.0, "c", 1
    )  # fields a newer writer adds are ignored
    with pytest.raises(ValueError, match=r"checkpoint\.step: expected an integer"):
        from_json({"t": 1.0, "kind": "checkpoint", "path": "c", "step": "ten"})
    with pytest.raises(ValueError, match="finished"):
        from_json({"t": 1.0, "kind": "finished", "status": "done"})  # no steps


def test_a_reader_follows_appends_and_waits_for_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    reader = EventReader(path)
    assert reader.read_new() == []  # no file yet
    path.write_text('{"t": 1.0, "kind": "checkpoint", "path": "c", "step": 10}\n{"t": 2.0, "kind": "err')
    assert reader.read_new() == [CheckpointEvent(1.0, "c", 10)]
    with path.open("a") as fh:
        fh.write('or", "type": "cuda_oom", "message": "out of memory"}\ngarbage\n')
    assert reader.read_new() == [ErrorEvent(2.0, "cuda_oom", "out of memory")]
    assert reader.skipped == 1
