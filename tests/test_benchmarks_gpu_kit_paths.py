"""The GPU kit's GPU-only paths (benchmarks/gpu), end to end on a GPU machine's stand-ins: the kit,
cockpit and its workers run as the subprocesses they are on a GPU, with NVML, `nvidia-smi` (dmon,
pmon, the queries), torch's CUDA queries and the CUDA worker scripted by `tests.gpu_standin`, and
`nvidia-cuda-mps-control` by `tests.mps_standin`. A check that only a GPU reaches (the host check's
NVML reading, the run's reading and per-process checks, the sweep, MPS, the worker on CUDA, CUDA
out of memory, and the probe check's real probe, overlap model and `cockpit tune` with its MPS
trial) runs here as it would there, so an error in it fails the suite rather than the one GPU
session. The fleet check has no GPU-only path (a smoke plans fewer agents, nothing else), and
tests/test_benchmarks_gpu_kit.py's CPU smoke runs it."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import gpu_standin
from tests.mps_standin import StandIn

REPO = Path(__file__).resolve().parents[1]


def figures_of(out: Path) -> dict[tuple[str, str, str], str]:
    """figures.csv as (check, subject, metric) -> value."""
    with (out / "figures.csv").open(encoding="utf-8", newline="") as fh:
        return {(r["check"], r["subject"], r["metric"]): r["value"] for r in csv.DictReader(fh)}


def failures(report: str) -> list[str]:
    """Each failed check's title and error line, from report.md."""
    lines = report.splitlines()
    return [f"{lines[i - 2]}: {line}" for i, line in enumerate(lines) if line.startswith("**failed**")]


@pytest.mark.slow
def test_the_kits_gpu_checks_run_end_to_end_on_stand_ins(tmp_path: Path, standin: StandIn) -> None:
    out, root = tmp_path / "out", tmp_path / "gpu"
    env = {**os.environ, **gpu_standin.install(root), "PYTHONUNBUFFERED": "1"}
    env.pop("OUT", None)
    argv = [sys.executable, "-m", "benchmarks.gpu.check", "--checks", "host,run,sweep,mps,worker,oom",
            "--out", str(out), "--run-seconds", "25", "--sweep-jobs", "1,2", "--sweep-window", "2",
            "--deadline", "400"]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    report = (out / "report.md").read_text(encoding="utf-8")
    assert done.returncode == 0, "\n".join(failures(report)) or done.stdout[-4000:] + done.stderr[-2000:]
    assert "6 passed, 0 failed, 0 skipped of 6" in report
    assert "**Mode:** GPU" in report and gpu_standin.GPU_NAME in report
    figures = figures_of(out)

    # host: cockpit's NVML reader read the buffer, at the driver's period.
    assert figures[("host", "nvml", "buffered_samples")] == "True"
    assert float(figures[("host", "nvml", "sample_period")]) == pytest.approx(1000 / 6, abs=1)
    assert "NVML utilization: the sample buffer" in report

    # run: the per-second comparison with dmon, and the reading checks, the one-off sample error
    # of the stand-in's NVML (one tick polled) within its bound and its share reported.
    assert int(figures[("run", "util", "seconds_compared")]) >= 10
    assert float(figures[("run", "util", "mad_vs_dmon")]) >= 0.0
    polled = float(figures[("run", "util", "util_read_poll_share")])
    assert 0.0 < polled <= 0.02
    assert f"polled {polled * 100:.1f} %" in report
    # Per process: NVML's memory against the allocator's; SM % against pmon's on the seconds both
    # sampled, the seconds pmon printed "-" for left out and counted.
    jobs = sorted({subject for check, subject, metric in figures if check == "run" and metric == "sm_seconds_compared"})
    assert len(jobs) == 4
    for job in jobs:
        assert float(figures[("run", job, "gpu_mem_peak_nvml_process")]) == gpu_standin.WORKER_PEAK_MIB + 400
        assert float(figures[("run", job, "cuda_peak_reserved_worker")]) == gpu_standin.WORKER_PEAK_MIB
        assert int(figures[("run", job, "sm_seconds_compared")]) >= 5
        assert int(figures[("run", job, "sm_seconds_without_pmon_sample")]) >= 5
        assert float(figures[("run", job, "sm_percent_mean")]) < gpu_standin.WORKER_SM - 15  # its zeros
        assert float(figures[("run", job, "sm_percent_mean_pmon")]) == gpu_standin.WORKER_SM
    assert "seconds compared" in report

    # sweep and mps: every point measured, the MPS runs as MPS clients of the stand-in's daemon.
    for jobs_n in (1, 2):
        assert float(figures[("sweep", f"{jobs_n} jobs", "aggregate_sps")]) > 0
    assert float(figures[("mps", "2 jobs", "sps_with")]) > 0
    assert ("mps", "1 jobs", "sps_with") not in figures  # a lone job shares the GPU with nobody
    assert any(call["argv"] == ["-d"] for call in standin.calls())

    # oom: a batch twice the free memory fails with cuda_oom, and recommend halves it.
    assert figures[("oom", "job", "error")].startswith("cuda_oom: OutOfMemoryError: CUDA out of memory")
    current, suggested = figures[("oom", "advice", "batch_size")].split(" -> ")
    assert int(suggested) <= int(current) // 2

    # worker: each preset on CUDA with TF32, its peak memory by its pid.
    for preset in ("heavy", "beast"):
        assert figures[("worker", preset, "device")] == "cuda:0" and figures[("worker", preset, "tf32")] == "True"
        assert float(figures[("worker", preset, "peak_gpu_mem")]) == gpu_standin.WORKER_PEAK_MIB + 400


@pytest.mark.slow
def test_the_kits_probe_check_probes_tunes_and_models_the_sweep_on_a_gpu_machine(
    tmp_path: Path, standin: StandIn
) -> None:
    # The real torch here: recommend's probe trains for real (on the CPU: the stand-in has no
    # CUDA for torch), and tune's trials run the stand-in's CUDA worker, its last under MPS.
    out, root = tmp_path / "out", tmp_path / "gpu"
    env = {**os.environ, **gpu_standin.install(root, fake_torch=False), "PYTHONUNBUFFERED": "1"}
    env.pop("OUT", None)
    argv = [sys.executable, "-m", "benchmarks.gpu.check", "--checks", "sweep,probe", "--preset", "cartpole",
            "--out", str(out), "--sweep-jobs", "1,2", "--sweep-window", "2", "--deadline", "400"]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    report = (out / "report.md").read_text(encoding="utf-8")
    assert done.returncode == 0, "\n".join(failures(report)) or done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 passed, 0 failed, 0 skipped of 2" in report
    figures = figures_of(out)
    assert float(figures[("probe", "costs", "step_overhead_us")]) > 0  # the probe ran, not --no-probe
    for jobs in (1, 2):
        assert float(figures[("probe", f"{jobs} jobs", "predicted_sps")]) > 0  # the overlap model, per sweep point
    assert float(figures[("probe", "tune", "sps")]) > 0
    assert float(figures[("probe", "tune", "vs_sweep_best")]) > 0
    assert "tune's pick" in report and "best of the sweep" in report
    assert any(call["argv"] == ["-d"] for call in standin.calls())  # tune's MPS trial: the sweep runs none
