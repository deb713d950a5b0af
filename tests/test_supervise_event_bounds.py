"""The supervisor tells a job's over-long event line once, as a warning, and follows the job past it."""

from __future__ import annotations

from pathlib import Path

from cockpit.contract.events import MAX_LINE_BYTES
from tests.test_supervise_supervisor import events, make


def test_the_supervisor_warns_once_of_a_huge_line_and_follows_the_job_past_it(tmp_path: Path) -> None:
    sup, launcher, clock = make(tmp_path, agents=1, slots=1)
    sup.tick()
    writer = events(sup, "000")
    writer.started(config={}, pid=launcher.live("000").pid, device="cpu", versions={})
    with (sup.jobs["000"].job_dir / "events.jsonl").open("ab") as fh:
        fh.write(b"x" * 3 * MAX_LINE_BYTES)  # no end: a worker that went wrong
    for _ in range(20):
        clock.sleep(0.2)
        sup.tick()
    with (sup.jobs["000"].job_dir / "events.jsonl").open("ab") as fh:
        fh.write(b"\n")
    writer.progress(num_timesteps=500)
    clock.sleep(0.2)
    sup.tick()
    assert sup.jobs["000"].steps == 500
    notices = [w for w in sup.warnings if "skipped" in w]
    assert len(notices) == 1 and notices[0].startswith("000: ") and "an event line over" in notices[0], notices
