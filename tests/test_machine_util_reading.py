"""What NVML's utilization is called ("busy": any kernel, not SM occupancy), how it was read and
at what sample spacing, and each job's own SM %: in the TUI, the headless line, run.toml, a replay
and the reports."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cockpit.commands.htmlreport import _jobs, _summary
from cockpit.contract.runrecord import GpuUseRecord, parse, read, render, write
from cockpit.core.machine.gpu_types import UTIL_BUFFER, UTIL_NONE_MIG, UTIL_POLL, GpuSample
from cockpit.core.machine.util_reading import gpu_read_lines, util_read
from cockpit.core.record.replay import open_replay
from cockpit.core.record.runlog import MIB, Recorder
from cockpit.core.telemetry.sampler import JobUsage, Sample
from cockpit.views.headless import job_line, jobs_table, system_line
from cockpit.views.tui.app import make_app
from cockpit.views.tui.gpu_panel import GpuPanel
from tests.test_record_replay import _build_run
from tests.tui_fakes import ScriptedSource, frame


def _gpu(mode: str = UTIL_BUFFER, period_s: float | None = 0.1667) -> GpuSample:
    return GpuSample(47.0, 80.0, 1000 * MIB, 8192 * MIB, 120.0, 60.0, 1800, (), util_mode=mode,
                     sample_period_s=period_s)  # fmt: skip


def test_util_read_names_the_way_and_the_measured_spacing_and_nothing_it_does_not_know() -> None:
    assert util_read(UTIL_BUFFER, 0.1667) == "buffer, 167 ms samples"
    assert util_read(UTIL_BUFFER, None) == "buffer, sample spacing -"
    assert util_read(UTIL_POLL, None) == "1 Hz poll"
    assert util_read(UTIL_NONE_MIG, None) == "not per MIG slice"
    assert util_read("", None) == ""


def test_the_headless_line_says_busy_and_how_it_was_read_and_each_job_its_sm() -> None:
    base = frame(jobs=2)
    sample = replace(base.state.sample, gpu=_gpu(), gpus=())
    jobs = (replace(base.state.jobs[0], gpu_mem_bytes=900 * MIB, gpu_sm_percent=35.0),
            replace(base.state.jobs[1], gpu_mem_bytes=800 * MIB, gpu_sm_percent=None))  # fmt: skip
    state = replace(base.state, sample=sample, jobs=jobs)
    line = system_line(state)
    assert line.startswith("GPU busy 47% (peak 80%, buffer, 167 ms samples)  mem 1,000/8,192 MiB")
    assert "gpu 900 MiB sm 35%" in job_line(jobs[0]) and "gpu 800 MiB sm -" in job_line(jobs[1])
    table = jobs_table(state, width=160)
    assert [c.header for c in table.columns][-2:] == ["GPU mem", "SM%"]
    assert list(table.columns[-1].cells) == ["35", "-"]
    old = replace(state, sample=replace(sample, gpu=_gpu(mode="")))  # a reader that has not said: nothing made up
    assert system_line(old).startswith("GPU busy 47% (peak 80%)  mem")


async def test_the_gpu_panel_heads_with_busy_and_how_utilization_is_read() -> None:
    base = frame(jobs=2)
    sample = replace(base.state.sample, gpu=_gpu(UTIL_POLL), gpus=())
    scripted = replace(base, state=replace(base.state, sample=sample))
    app = make_app(ScriptedSource(scripted))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        lines = [line.plain for line in app.screen.query_one(GpuPanel).lines()]
    assert "busy 47%" in lines[0] and "1 Hz poll" in lines[0]
    assert lines[1].startswith("busy ")


def _sample(t: float, mode: str, period_s: float | None, sm: float | None, *, fresh: bool = True) -> Sample:
    usage = {"000": JobUsage(cpu_percent=50.0, rss_bytes=100 * MIB, gpu_mem_bytes=500 * MIB, gpu_sm_percent=sm)}
    return Sample(t=t, cpu_percent=(50.0,), ram_used_bytes=MIB, ram_total_bytes=2 * MIB, gpu=_gpu(mode, period_s),
                  jobs=usage, cost_s=0.001, usage_t=None if fresh else t - 0.2)  # fmt: skip


def test_run_toml_records_the_way_of_reading_its_spacing_its_shares_when_it_changed_and_each_jobs_sm(
    tmp_path: Path,
) -> None:
    recorder = Recorder(tmp_path)
    for i in range(31):  # 30 s on the buffer, its spacing measured from the second sample on
        recorder(_sample(1000.0 + i, UTIL_BUFFER, 0.1667 if i else None, 40.0))
    recorder(_sample(1030.5, UTIL_BUFFER, None, 90.0, fresh=False))  # a carried-over reading counts once
    for i in range(1, 11):  # then 10 s of polling
        recorder(_sample(1031.0 + i, UTIL_POLL, None, None if i % 2 else 20.0))
    recorder.close()
    mode, period, shares = recorder.util_read(0)
    assert (mode, period) == (UTIL_POLL, 0.1667)  # the newest way, the newest spacing measured
    assert shares == {UTIL_BUFFER: 30.5 / 41, UTIL_POLL: 10.5 / 41}  # each sample counts the time since the one before
    assert recorder.sm_mean("000") == (31 * 40.0 + 5 * 20.0) / 36
    shares = {m: round(s, 4) for m, s in shares.items()}
    record = GpuUseRecord(index=0, name="Test GPU", memory_total_mib=8192, util_read=mode,
                          util_sample_period_ms=166.7, util_read_shares=shares)  # fmt: skip
    assert gpu_read_lines([record]) == [
        "GPU 0 busy read by 1 Hz poll (the way of reading changed during the run: buffer 74%, poll 26% of the time)"
    ]
    steady = Recorder(tmp_path / "steady")
    (tmp_path / "steady").mkdir()
    for i in range(5):
        steady(_sample(1000.0 + i, UTIL_BUFFER, 0.1667, None))
    assert steady.util_read(0) == (UTIL_BUFFER, 0.1667, {})
    assert steady.sm_mean("000") is None
    steady.close()


def test_a_replay_and_the_reports_show_what_run_toml_recorded_and_older_files_stay_valid(tmp_path: Path) -> None:
    run_dir = _build_run(tmp_path / "run")
    old = read(run_dir)
    assert old.gpus and old.gpus[0].util_read is None  # samples that did not say: no key
    assert "util_read" not in render(old) and "gpu_sm_percent_mean" not in render(old)
    assert parse(render(old), "run.toml") == old
    assert gpu_read_lines(old.gpus) == []
    recorded = replace(
        old,
        gpus=(replace(old.gpus[0], util_read=UTIL_BUFFER, util_sample_period_ms=166.7),),
        jobs=(replace(old.jobs[0], gpu_sm_percent_mean=42.0), *old.jobs[1:]),
    )
    assert parse(render(recorded), "run.toml") == recorded
    write(run_dir, recorded)
    replay = open_replay(run_dir)
    gpu = replay.frame().state.sample.gpu
    assert gpu is not None and (gpu.util_mode, gpu.sample_period_s) == (UTIL_BUFFER, 0.1667)
    assert "GPU 0 busy read by buffer, 167 ms samples: bursts shorter than the sample spacing" in _summary(recorded)
    assert "busy: the share of time in which any kernel ran" in _summary(recorded)
    assert "<th>SM % mean</th>" in _jobs(recorded) and "<td>42</td>" in _jobs(recorded)


async def test_a_unified_memory_gpu_shows_its_memory_unknown_not_0_and_no_view_fails() -> None:
    # GB10 / Jetson Thor: nvmlDeviceGetMemoryInfo answers NOT_SUPPORTED, so the reader's figures are None.
    base = frame(jobs=2)
    gpu = replace(_gpu(), mem_used_bytes=None, mem_total_bytes=None)
    info = replace(base.state.gpu, memory_total_bytes=None)
    state = replace(base.state, sample=replace(base.state.sample, gpu=gpu, gpus=()), gpu=info, gpus=(info,))
    assert "mem -/- MiB" in system_line(state)
    app = make_app(ScriptedSource(replace(base, state=state)))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        lines = [line.plain for line in app.screen.query_one(GpuPanel).lines()]
    assert "-/- GiB" in lines[0]
    assert any(line.startswith("mem") and "no memory figures" in line for line in lines)


async def test_a_narrow_gpu_panel_keeps_the_name_whole_with_busy_at_100_percent() -> None:
    # Beside the trend panel at 100 columns the head is tight: "busy 100%" and the memory must not
    # cut the GPU's name (the widest figures are the test; "busy 5%" fitted where 90% did not).
    base = frame(jobs=2)
    gpu = replace(_gpu(), util_percent=100.0, util_peak_percent=100.0, mem_used_bytes=3 * 1024 * MIB,
                  mem_total_bytes=24 * 1024 * MIB)  # fmt: skip
    info = replace(base.state.gpu, name="NVIDIA GeForce RTX 4090 (fake)", memory_total_bytes=24 * 1024 * MIB)
    state = replace(base.state, gpu=info, gpus=(info,), sample=replace(base.state.sample, gpu=gpu, gpus=()))
    scripted = replace(base, state=state)
    app = make_app(ScriptedSource(scripted))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        head = app.screen.query_one(GpuPanel).lines()[0].plain
    name = "RTX 4090 (fake)"
    assert head.startswith(name) and "busy 100%" in head and "GiB" in head, head
