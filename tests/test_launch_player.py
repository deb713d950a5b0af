"""`cockpit.core.launch.player.start_player`: where a player runs beside training."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from cockpit.contract.play import PlayRequest
from cockpit.core.launch.local import WORKER_NICE
from cockpit.core.launch.player import start_player


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
