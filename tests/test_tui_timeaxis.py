"""The drawing arithmetic under the time-aligned panels."""

from __future__ import annotations

import math
import random

from cockpit.views.tui.timeaxis import LaneCells, bar_rows, bucket_max, dominant_phases, hbar


def test_bucket_max_keeps_the_peak_of_each_bucket() -> None:
    points = [(0.1, 10.0), (0.5, 90.0), (0.9, 20.0), (2.5, 40.0), (5.0, 99.0)]
    assert bucket_max(points, 0.0, 4.0, 4) == [90.0, None, 40.0, None]


def test_dominant_phase_is_the_one_with_most_time_in_the_bucket() -> None:
    transitions = [(0.0, "rollout"), (0.7, "train"), (1.2, "rollout"), (2.0, None)]
    assert dominant_phases(transitions, 0.0, 4.0, 4, end=4.0) == ["rollout", "rollout", None, None]
    # a job that has not ended has its last phase up to `end`, and nothing after it
    assert dominant_phases([(0.0, "train")], 0.0, 4.0, 4, end=2.0) == ["train", "train", None, None]


def test_lane_cells_match_a_full_recount_as_the_window_slides() -> None:
    rng = random.Random(7)
    transitions: list[tuple[float, str | None]] = []
    t = 0.0
    while t < 200:
        transitions.append((t, rng.choice(["rollout", "train"])))
        t += rng.uniform(0.01, 3.0)
    width, window = 60, 60.0
    step = window / width
    lane = LaneCells()
    now = 70.0
    while now < 190:
        right = (math.floor(now / step) + 1) * step
        known = [tr for tr in transitions if tr[0] <= now]
        expected = dominant_phases(known, right - window, right, width, end=now)
        assert lane.cells(known, right - window, right, width, end=now, settled=now - 2) == expected
        now += 0.2


def test_bars_fill_in_eighths() -> None:
    assert bar_rows([0.0, 50.0, 100.0, None], 2, 100.0) == ["  █ ", " ██ "]
    assert hbar(0.5, 4) == "██  "
    assert hbar(2.0, 3) == "███"
