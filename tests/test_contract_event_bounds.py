"""Bounds on a job's event file: a line over 1 MiB (a worker gone wrong, a file that is not a
worker's) is skipped with one notice and never read twice, and a reader following a live file
reads at most `MAX_READ_BYTES` of it at one call."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.contract import events as events_module
from cockpit.contract.events import MAX_LINE_BYTES, MAX_READ_BYTES, EventReader, EventWriter, ProgressEvent

HUGE = 3 * MAX_LINE_BYTES


class CountingOpen:
    """Counts the bytes `EventReader` reads from files (every read goes through `Path.open`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes = 0
        real_open = Path.open
        counter = self

        class Counted:
            def __init__(self, fh: object) -> None:
                self._fh = fh

            def __enter__(self) -> Counted:
                return self

            def __exit__(self, *exc: object) -> None:
                self._fh.close()  # type: ignore[attr-defined]

            def __getattr__(self, name: str) -> object:
                return getattr(self._fh, name)

            def read(self, size: int = -1) -> bytes:
                data: bytes = self._fh.read(size)  # type: ignore[attr-defined]
                counter.bytes += len(data)
                return data

        monkeypatch.setattr(Path, "open", lambda path, *a, **k: Counted(real_open(path, *a, **k)))


def progress(path: Path, steps: int) -> None:
    EventWriter(path).progress(num_timesteps=steps, t=1.0)


def test_a_huge_line_without_its_end_is_skipped_once_and_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 200 MB line with no newline was re-read at every 0.2 s tick, forever."""
    path = tmp_path / "events.jsonl"
    progress(path, 1)
    start = path.stat().st_size
    with path.open("ab") as fh:
        fh.write(b'{"kind": "progress", "junk": "' + b"x" * HUGE)  # no end yet
    reader = EventReader(path)
    counted = CountingOpen(monkeypatch)
    assert [e.num_timesteps for e in reader.read_new() if isinstance(e, ProgressEvent)] == [1]
    assert reader.notices == [
        f"{path}: an event line over {MAX_LINE_BYTES:,} bytes at byte {start:,} "
        f"skipped: no event is longer than {MAX_LINE_BYTES:,} bytes"
    ]
    first = counted.bytes
    assert first <= MAX_READ_BYTES
    for _ in range(50):  # ticks with nothing new: nothing is read again
        assert reader.read_new() == []
    assert counted.bytes == first
    with path.open("ab") as fh:  # the line's end, then events again
        fh.write(b"y" * 1000 + b'"}\n')
    progress(path, 2)
    assert [e.num_timesteps for e in reader.read_new() if isinstance(e, ProgressEvent)] == [2]
    assert len(reader.notices) == 1 and reader.skipped == 1  # one notice for the one line
    assert counted.bytes - first < 2000  # only what came since


def test_a_complete_line_over_the_bound_is_skipped_with_a_notice_giving_its_size(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    progress(path, 1)
    long = b'{"kind": "progress", "t": 1, "num_timesteps": 5, "pad": "' + b"x" * MAX_LINE_BYTES + b'"}'
    with path.open("ab") as fh:
        fh.write(long + b"\n")
    progress(path, 2)
    reader = EventReader(path)
    assert [e.num_timesteps for e in reader.read_all() if isinstance(e, ProgressEvent)] == [1, 2]
    assert len(reader.notices) == 1 and f"line of {len(long):,} bytes" in reader.notices[0]
    streamed = EventReader(path)  # the streaming reader (a report, a replay) bounds it the same way
    assert [e.num_timesteps for e in streamed if isinstance(e, ProgressEvent)] == [1, 2]
    assert streamed.notices == reader.notices and streamed.offset == reader.offset == path.stat().st_size


def test_one_read_takes_at_most_a_bounded_share_of_a_backlog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path)
    for step in range(120_000):  # about 10 MiB of events written while nobody read them
        writer.progress(num_timesteps=step, t=1.0)
    assert path.stat().st_size > 2 * MAX_READ_BYTES
    reader = EventReader(path)
    counted = CountingOpen(monkeypatch)
    first = reader.read_new()
    assert counted.bytes <= MAX_READ_BYTES and reader.more and 0 < len(first) < 120_000
    rest = reader.read_all()
    steps = [e.num_timesteps for e in [*first, *rest] if isinstance(e, ProgressEvent)]
    assert steps == list(range(120_000)) and not reader.more and reader.notices == []


def test_the_bounds_hold_for_increments_brought_from_another_machine(tmp_path: Path) -> None:
    """A Ray actor sends at most 1 MiB of the file at a time (`ray_reports.MAX_EVENT_BYTES`): a line
    longer than that is skipped across increments, as a local read skips it."""
    path = tmp_path / "events.jsonl"
    progress(path, 1)
    with path.open("ab") as fh:
        fh.write(b"z" * HUGE + b"\n")
    progress(path, 2)
    data = path.read_bytes()
    reader = EventReader(tmp_path / "elsewhere.jsonl")
    unread, seen = b"", []
    for at in range(0, len(data), events_module.MAX_LINE_BYTES):
        unread += data[at : at + MAX_LINE_BYTES]
        before = reader.offset
        seen += reader.consume(unread)
        unread = unread[reader.offset - before :]
    assert [e.num_timesteps for e in seen if isinstance(e, ProgressEvent)] == [1, 2]
    assert reader.offset == len(data) and len(reader.notices) == 1
