"""`job_view`, the one builder of a `JobView`: what it derives from the figures its source gives,
the same for the live supervisor and a replay (tests/test_record_replay.py holds the two side by side)."""

from __future__ import annotations

import inspect
from dataclasses import MISSING, fields
from typing import Any

import pytest

from cockpit.contract.states import JobState
from cockpit.core.feed.snapshot import (
    JobLife,
    JobProgress,
    JobSetup,
    JobTelemetry,
    JobView,
    MemoryFigures,
    job_view,
    override_pairs,
    preset_label,
)
from cockpit.core.telemetry.memwatch import Growth, MemoryVerdict
from cockpit.core.telemetry.sampler import JobUsage
from cockpit.core.telemetry.throughput import job_eta

MIB = 1024 * 1024
# What `job_view` works out itself, from `usage`, `memory`, the figures behind the ETA and the
# exit reason (`no_events`).
DERIVED = {"cpu_percent", "rss_bytes", "gpu_mem_bytes", "gpu_sm_percent", "eta_s", "memory", "memory_growth_mib_h",
           "gpu_memory_growth_mib_h", "no_events"}  # fmt: skip
# The parts a source hands `job_view`, by its parameter names.
PARTS = {"job": JobSetup, "life": JobLife, "progress": JobProgress, "telemetry": JobTelemetry}


def known(**changes: Any) -> dict[str, Any]:
    """What a source knows of a running job, half-way to its target."""
    figures: dict[str, Any] = dict(
        id="000", seed=3, state=JobState.RUNNING, phase="rollout", phase_since=100.0, steps=5_000, target=10_000,
        sps=250.0, mean_sps=240.0, ep_rew_mean=12.5, restarts=1, checkpoints=2, last_checkpoint_step=4_096,
        error=None, exit_reason=None, pid=4242, device="cuda:0", usage=None, peak_gpu_mem_bytes=700 * MIB,
        started_at=50.0, ended_at=None, rollout_sps=900.0, env=None, preset=None, overrides=(), memory=None,
        target_episodes=None, episodes=40, ep_len_mean=125.0, episodes_per_h=7_200.0, gpu=0, node=None,
        scored=3, to_score=10,
    )  # fmt: skip
    figures.update(changes)
    return figures


def parts(**changes: Any) -> dict[str, Any]:
    """`known(**changes)` as the four parts `job_view` takes, each figure in the part that names it."""
    figures = known(**changes)
    return {name: part(**{f.name: figures[f.name] for f in fields(part)}) for name, part in PARTS.items()}


def test_every_figure_is_asked_for_by_name_and_every_field_is_built() -> None:
    # A source that cannot know a figure says None for it where it calls: nothing defaults.
    parameters = inspect.signature(job_view).parameters.values()
    assert all(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in parameters)
    assert {p.name: p.annotation for p in parameters} == {name: part.__name__ for name, part in PARTS.items()}
    every = [f for part in PARTS.values() for f in fields(part)]
    assert all(f.kw_only and f.default is MISSING and f.default_factory is MISSING for f in every)
    # Each field of JobView is a figure passed through or one derived here, so a new field must be
    # added to a part too (JobView's own defaults would otherwise hide it); no figure is in two parts.
    passed = [f.name for f in every if f.name not in ("usage", "memory")]
    assert len(passed) == len(set(passed)) and set(known()) == {f.name for f in every}
    assert set(passed) | DERIVED == {f.name for f in fields(JobView)} and not set(passed) & DERIVED
    assert all(f.kw_only for f in fields(JobView))  # and a JobView is made by keyword only


def test_the_figures_given_are_shown_as_given() -> None:
    view = job_view(**parts())
    for name, value in known().items():
        if name not in ("usage", "memory"):
            assert getattr(view, name) == value, name


def test_usage_is_the_jobs_reading_and_none_without_one() -> None:
    usage = JobUsage(cpu_percent=187.5, rss_bytes=900 * MIB, gpu_mem_bytes=512 * MIB, gpu_sm_percent=40.0, pid=7)
    view = job_view(**parts(usage=usage))
    assert (view.cpu_percent, view.rss_bytes, view.gpu_mem_bytes, view.gpu_sm_percent) == (
        187.5,
        900 * MIB,
        512 * MIB,
        40.0,
    )
    view = job_view(**parts(usage=JobUsage(cpu_percent=0.0, rss_bytes=0)))  # a reading of zeros is a reading
    assert (view.cpu_percent, view.rss_bytes, view.gpu_mem_bytes) == (0.0, 0, None)
    view = job_view(**parts())
    assert (view.cpu_percent, view.rss_bytes, view.gpu_mem_bytes) == (None, None, None)


def test_the_eta_is_worked_out_from_the_figures_given() -> None:
    assert job_view(**parts()).eta_s == pytest.approx(5_000 / 250.0)
    assert job_view(**parts(state=JobState.DONE, sps=None)).eta_s == 0.0
    assert job_view(**parts(state=JobState.BACKOFF)).eta_s is None
    assert job_view(**parts(sps=None)).eta_s is None
    by_episodes = known(target=0, target_episodes=100)
    assert job_view(**parts(**by_episodes)).eta_s == pytest.approx(60 * 125.0 / 250.0)
    assert job_view(**parts(**by_episodes)).eta_s == job_eta(JobState.RUNNING, 5_000, 0, 250.0, target_episodes=100,
                                                     episodes=40, ep_len_mean=125.0)  # fmt: skip


def test_a_memory_verdict_shows_as_its_line_and_flagged_rates() -> None:
    leaking = MemoryVerdict(Growth("growing", 120.0, 900.0), Growth("flat", 3.0, 900.0))
    view = job_view(**parts(memory=leaking))
    assert (view.memory, view.memory_growth_mib_h, view.gpu_memory_growth_mib_h) == (
        "memory growing: +120 MiB/h", 120.0, None)  # fmt: skip
    assert view.memory_growing
    young = MemoryVerdict(Growth("measuring", watched_s=120.0))
    view = job_view(**parts(memory=young))
    assert (view.memory, view.memory_growth_mib_h, view.gpu_memory_growth_mib_h) == (
        "not judged: 2 of 13 min watched", None, None)  # fmt: skip
    view = job_view(**parts())
    assert (view.memory, view.memory_growth_mib_h, view.gpu_memory_growth_mib_h) == (None, None, None)


def test_recorded_memory_figures_show_as_recorded_and_as_their_verdict_would() -> None:
    # run.toml records a verdict's figures (`MemoryFigures.of`); a replay at the run's end shows
    # those figures as they are, which is what the verdict itself showed live.
    verdict = MemoryVerdict(Growth("growing", 80.0, 900.0), Growth("growing", 64.0, 900.0))
    recorded = MemoryFigures.of(verdict)
    assert recorded == MemoryFigures("memory growing: +80 MiB/h; GPU memory growing: +64 MiB/h", 80.0, 64.0)
    assert job_view(**parts(memory=recorded)) == job_view(**parts(memory=verdict))
    assert MemoryFigures.of(None) == MemoryFigures(None, None, None)


def test_a_preset_is_labelled_by_the_name_given_and_its_overrides_as_typed() -> None:
    overrides = override_pairs({"n_epochs": 5, "learning_rate": 1e-3, "activation": "tanh"})
    assert overrides == (("activation", "'tanh'"), ("learning_rate", "0.001"), ("n_epochs", "5"))  # key order
    assert preset_label("cartpole", overrides) == "cartpole activation='tanh' learning_rate=0.001 n_epochs=5"
    assert preset_label("cartpole", override_pairs({})) == "cartpole"  # a plain run's: the name alone
    # A drawn value reads in 4 significant digits; what a user typed reads as typed.
    assert override_pairs({"learning_rate": 0.0012520653814999472, "gamma": 0.98}) == (
        ("gamma", "0.98"), ("learning_rate", "0.001252"))  # fmt: skip
