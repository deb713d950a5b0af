"""The run log's samples and the thread budget (run.toml itself: tests/test_contract_runrecord.py)."""

from __future__ import annotations

import csv
from pathlib import Path

from cockpit.core.machine.host import pin_sets, thread_budget
from cockpit.core.record.runlog import Recorder, phase_accounting
from cockpit.core.telemetry.sampler import JobUsage, Sample


def test_thread_budget_splits_physical_cores_and_warns_with_numbers() -> None:
    assert thread_budget(2, 16).threads_per_job == 8 and thread_budget(2, 16).warning() is None
    budget = thread_budget(4, 2)
    assert budget.threads_per_job == 1 and budget.oversubscribed
    assert budget.warning().startswith("warning: 4 parallel jobs x 1 env thread(s) = 4 env threads on 2 physical cores")


def test_pinning_gives_each_slot_its_own_cpus() -> None:
    assert pin_sets(2, [0, 1, 2, 3, 4, 5, 6, 7]) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert pin_sets(3, [0, 1, 2, 3, 4, 5, 6]) == [[0, 1], [2, 3], [4, 5]]
    assert pin_sets(3, [0, 1]) == [[0], [1], [0]]  # more slots than CPUs: round-robin


def test_samples_csv_appends_per_core_cpu_after_the_existing_columns(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path)
    recorder(Sample(t=100.0, cpu_percent=(12.34, 0.0, 100.0), ram_used_bytes=2**30, ram_total_bytes=2**32,
                    gpu=None, jobs={"000": JobUsage(50.0, 2**20)}, cost_s=0.001))  # fmt: skip
    recorder.close()
    with (tmp_path / "samples.csv").open(newline="") as fh:
        header, row = list(csv.reader(fh))
    assert header == ["t", "gpu_util", "gpu_util_peak", "gpu_mem_used_mib", "gpu_power_w", "gpu_temp_c",
                      "gpu_sm_mhz", "cpu_percent", "ram_used_mib", "cost_ms", "cpu_cores"]  # fmt: skip
    assert row[0] == "100.000" and row[7] == "37.4" and row[-1] == "12.3 0.0 100.0"


def test_a_reading_carried_over_to_later_ticks_is_written_with_each_but_counted_once(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path)

    def sample(t: float, cpu: float, read_at: float) -> Sample:
        return Sample(t=t, cpu_percent=(cpu,), ram_used_bytes=2**30, ram_total_bytes=2**32, gpu=None,
                      jobs={"000": JobUsage(cpu, 2**20)}, cost_s=0.0, usage_t=read_at)  # fmt: skip

    # Read at 100 (50 %, the rollout's), carried by the ticks at 100.6 and 100.8 (in the train
    # phase, which that reading does not describe), then read again at 101 (100 %, the train's).
    for s in (sample(100.0, 50.0, 100.0), sample(100.6, 50.0, 100.0), sample(100.8, 50.0, 100.0),
              sample(101.0, 100.0, 101.0)):  # fmt: skip
        recorder(s)
    assert recorder.cpu_mean("000") == 75.0  # two readings, not four rows
    phases = {"000": [(99.0, "rollout"), (100.5, "train")]}
    stats = phase_accounting(phases, recorder, 102.0, final=True).jobs["000"]
    assert stats["rollout"].cpu_percent_mean == 50.0 and stats["train"].cpu_percent_mean == 100.0
    recorder.close()
    with (tmp_path / "job_samples.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["t"], r["cpu_percent"]) for r in rows] == [("100.000", "50.0"), ("100.600", "50.0"),
                                                          ("100.800", "50.0"), ("101.000", "100.0")]  # fmt: skip
