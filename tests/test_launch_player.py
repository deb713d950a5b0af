"""`cockpit.core.launch.player.start_player`: where a player runs beside training."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from cockpit.contract.play import PlayRequest
from cockpit.core.launch.local import WORKER_NICE
from cockpit.core.launch.player import PLAYER_NICE, start_player


def test_a_player_runs_at_the_lowest_priority_below_the_workers(tmp_path: Path) -> None:
    """A clip recorded beside running jobs takes the cycles they leave: the player is at nice 19,
    below workers at WORKER_NICE, so the kernel's scheduler gives training the larger share."""
    stand_in = tmp_path / "python"  # stands in for the interpreter: lives until killed, plays nothing
    stand_in.write_text("#!/bin/sh\nexec sleep 60\n")
    stand_in.chmod(0o755)
    request = PlayRequest(model=tmp_path / "m.zip", env="CartPole-v1", result=tmp_path / "r.json")
    proc = start_player(request, python=str(stand_in), stdout=None, stderr=None)
    try:
        own = os.getpriority(os.PRIO_PROCESS, 0)
        player = os.getpriority(os.PRIO_PROCESS, proc.pid)
        assert player == 19
        assert player > min(19, own + WORKER_NICE) or own + WORKER_NICE >= 19
        assert os.getpgid(proc.pid) == proc.pid  # its own session, so its group can be killed whole
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_docs_give_the_players_priority_as_it_is() -> None:
    """Each page that says where a clip's player runs says nice PLAYER_NICE, below the workers at
    WORKER_NICE; none says a worker's priority (what the player ran at before it was lowered)."""
    docs = Path(__file__).resolve().parent.parent / "docs"
    for page in ("run.md", "fleets.md", "tui.md", "play.md"):
        text = " ".join((docs / page).read_text().split())  # sentences wrap across lines
        assert f"nice {PLAYER_NICE}, below the workers" in text, page
    for page in docs.glob("*.md"):
        assert "a worker's priority" not in " ".join(page.read_text().split()), page.name
