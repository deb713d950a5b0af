"""Long work's progress: the probe's step lines, the time expected (`StepTimer`), the plain renderer
and tune's trials. The real probe's steps are checked in test_commands_recommend (the suite's one full probe)."""

from __future__ import annotations

from pathlib import Path

from cockpit.commands.console import PlainSteps
from cockpit.contract.presets import load
from cockpit.contract.progress import PROBE_STEPS, Step, parse_probe_line, probe_line
from cockpit.core.sizing.advisor import Machine
from cockpit.core.sizing.progress import StepTimer
from cockpit.core.sizing.trials import Trial
from tests.fakeclock import FakeClock


def test_the_probes_step_lines_read_back_and_other_lines_are_left_alone() -> None:
    assert [parse_probe_line(probe_line(i) + "\n") for i in range(len(PROBE_STEPS))] == list(range(len(PROBE_STEPS)))
    for other in ("Traceback (most recent call last):", "cockpit-progress: 99", "cockpit-progress: x", ""):
        assert parse_probe_line(other) is None


def test_the_time_expected_is_the_guesses_then_scaled_by_the_steps_done() -> None:
    clock = FakeClock(100.0)
    told: list[Step] = []
    timer = StepTimer("measuring", [("a", 10.0), ("b", 10.0), ("c", 20.0)], told.append, clock.monotonic)
    timer.begin(0)
    clock.t += 20.0  # the first step took twice its guess: the rest will too
    timer.begin(1)
    clock.t += 5.0
    timer.begin(2, "c, round 1")
    assert [(s.what, s.index, s.count) for s in told] == [("a", 1, 3), ("b", 2, 3), ("c, round 1", 3, 3)]
    assert [s.elapsed_s for s in told] == [0.0, 20.0, 25.0]
    assert told[0].expected_s == 40.0  # the guesses
    assert told[1].expected_s == 20.0 + 2 * 10.0 + 2 * 20.0
    # a, b took 25 s against 20 guessed: c is expected at 1.25 x its 20 s
    assert told[2].expected_s == 25.0 + 1.25 * 20.0
    assert timer.expected(clock.t + 60.0) == 25.0 + 60.0  # a step over its guess: never under the time spent


def test_the_plain_renderer_says_each_step_and_a_line_per_interval_within_one() -> None:
    clock = FakeClock(0.0)
    lines: list[str] = []
    shown = PlainSteps(lines.append, clock.monotonic, interval_s=5.0)
    shown.tick()
    assert lines == []  # nothing told yet: nothing said
    shown(Step("measuring CartPole-v1", "timing 2 and 16 envs", 2, 10, 4.0, 30.0))
    for _ in range(24):  # 12 s in half-second ticks
        clock.t += 0.5
        shown.tick()
    shown(Step("measuring CartPole-v1", "timing the preset's own shape", 3, 10, 16.5, 31.0))
    shown(Step("measuring CartPole-v1", "timing the preset's own shape", 3, 10, 17.0, 17.0, done=True))
    clock.t += 10.0
    shown.tick()  # done: no more lines
    assert lines == [
        "measuring CartPole-v1: step 2/10 timing 2 and 16 envs, 4 s of about 30 s",
        "measuring CartPole-v1: step 2/10 timing 2 and 16 envs, 9 s of about 30 s",
        "measuring CartPole-v1: step 2/10 timing 2 and 16 envs, 14 s of about 30 s",
        "measuring CartPole-v1: step 3/10 timing the preset's own shape, 16 s of about 31 s",
        "measuring CartPole-v1: done in 17 s",
    ]


def test_tune_tells_each_trial_its_number_and_the_time_against_the_budget(tmp_path: Path) -> None:
    from cockpit.core.sizing.tune_search import climb

    told: list[Step] = []

    def trial(preset: object, config: object, **_: object) -> Trial:
        return Trial(config, 1000.0, 100.0, None, 10.0)  # type: ignore[arg-type]

    result = climb(load("cartpole"), Machine(2, 2, 24 * 1024**3), 100.0, workdir=tmp_path, trial=trial,
                   progress=told.append)  # fmt: skip
    *told, done = told
    assert done.done and done.index == done.count == len(result.trials)
    assert [s.index for s in told] == list(range(1, len(result.trials) + 1))
    assert all(s.task == "tuning CartPole-v1" and s.expected_s == 100.0 and s.count >= s.index for s in told)
    # The first guess of a trial is 10 s: after a moment spent, the 100 s hold 9 of them.
    assert told[0].what.startswith("trial of ") and told[0].count == 9
