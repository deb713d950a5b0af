"""A CPU job trains on its whole core budget, and the probe, the overlap model and the advisor count it.

Before, a worker got one torch thread whatever its budget: a lone Pong job on 2 cores spent 155 s
in each train phase with one thread where two took 96 s, while the other core idled. Now torch gets
the job's `--threads` budget on the CPU (one on a GPU); the probe times a train epoch on every
core against one thread (`train_speedup`), the overlap model fits Amdahl's law to it, and a preset
whose small network trains no faster on more threads (CartPole's) keeps one.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path

import pytest

from cockpit.contract.costs import Costs
from cockpit.contract.events import read_events
from cockpit.contract.presets import load
from cockpit.contract.workerargs import WorkerArgs
from cockpit.core.machine.host import thread_budget
from cockpit.core.sizing.advisor import Machine, advise
from cockpit.core.sizing.overlap import speed_of
from cockpit.core.supervise.supervisor import JobTemplate, Supervisor
from cockpit_training.device import torch_threads_for
from cockpit_training.probe import MEDIAN_OF, _train_speedup
from cockpit_training.worker import resolve_config
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher
from tests.workerproc import kinds, run_worker

GIB = 1024**3
# A Pong-like CPU job: 8 envs, 2 epochs; a train sample costs 1,000 us on one thread and one
# epoch ran 1.6x faster on 2 threads.
PONG = replace(load("cartpole"), env="Pong-v5", n_envs=8, n_steps=64, batch_size=256, n_epochs=2)
MEASURED = Costs("cpu", step_overhead_us=800, env_policy_us=100, env_step_us=60, train_sample_us=1000,
                 train_threads=2, train_speedup=1.6)  # fmt: skip


def test_torch_gets_the_budget_on_the_cpu_and_one_thread_on_a_gpu() -> None:
    assert torch_threads_for("cpu", 3) == 3
    assert torch_threads_for("cuda", 8) == 1
    assert torch_threads_for("cpu", None) == len(os.sched_getaffinity(0))


def test_the_worker_resolves_its_torch_threads_from_its_budget(tmp_path: Path) -> None:
    args = WorkerArgs(tmp_path / "job", preset="cartpole", device="cpu", threads=2)
    assert resolve_config(args).torch_threads == 2
    assert resolve_config(replace(args, torch_threads=1)).torch_threads == 1  # --torch-threads wins
    assert WorkerArgs.parse(list(args.to_argv())) == args and "--torch-threads" not in args.to_argv()


def test_a_real_worker_trains_on_its_budget_of_torch_threads(tmp_path: Path) -> None:
    job = tmp_path / "job"
    done = run_worker("--job-dir", str(job), "--preset", "cartpole", "--timesteps", "256", "--device", "cpu",
                      "--threads", "2", "--no-tensorboard")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (started,) = kinds(read_events(job / "events.jsonl"), "started")
    assert started.torch_threads == 2  # torch.get_num_threads() in the worker, after it set them


def test_the_supervisor_leaves_torch_the_budget_unless_the_preset_gains_nothing(tmp_path: Path) -> None:
    for one, expected in ((False, None), (True, 1)):
        launcher = FakeLauncher()
        sup = Supervisor(run_dir=tmp_path / str(one), template=JobTemplate("cartpole", "CartPole-v1", 1000,
                         one_torch_thread=one), seeds=range(1), slots=1, launcher=launcher,
                         budget=thread_budget(1, 2), clock=FakeClock())  # fmt: skip
        sup.tick()
        (process,) = launcher.processes
        assert process.request.args.threads == 2 and process.request.args.torch_threads == expected


def test_a_run_with_measured_costs_keeps_one_thread_where_more_do_not_pay() -> None:
    from cockpit.contract.runspec import build_spec
    from cockpit.contract.settings import RunSettings
    from cockpit.core.session.startup import _template

    spec = build_spec(
        RunSettings(
            jobs=1,
            preset="cartpole",
            timesteps=None,
            run_dir=Path("r"),
        ),
        command_line=(),
    )
    assert _template(spec, replace(MEASURED, train_speedup=0.94)).one_torch_thread
    assert not _template(spec, MEASURED).one_torch_thread
    assert not _template(spec, None).one_torch_thread  # nothing measured: the budget


def test_amdahls_law_through_the_measured_speedup_by_hand() -> None:
    # S = 1.6 at K = 2: serial share s = (1/1.6 - 1/2) / (1 - 1/2) = 0.25
    assert MEASURED.train_factor(2) == pytest.approx(1 / 1.6)
    assert MEASURED.train_factor(4) == pytest.approx(0.25 + 0.75 / 4)  # 0.4375
    assert MEASURED.train_factor(1) == 1.0
    # under MIN_TRAIN_SPEEDUP the job keeps one thread, and the model credits no threads
    assert replace(MEASURED, train_speedup=1.03).train_factor(2) == 1.0
    assert replace(MEASURED, train_speedup=1.03).one_torch_thread
    assert replace(MEASURED, train_threads=1, train_speedup=1.0).train_factor(2) == 1.0  # not measured
    assert replace(MEASURED, device="cuda").train_factor(2) == 1.0  # the GPU trains


def test_the_overlap_model_counts_the_train_threads_by_hand() -> None:
    # 1 job on 2 cores: 2 envpool threads (each env's 60 us step halves: 100 - 30 = 70 us a sample)
    # and 2 torch threads (1,000 us x 0.625): 800 / 8 + 70 + 2 x 625 = 1,420 us a sample
    assert speed_of(PONG, MEASURED, 1, 2).sps == pytest.approx(1e6 / 1420)
    # one thread each for 2 jobs on 2 cores: 100 + 100 + 2 x 1,000 = 2,200 us, times 2 jobs
    assert speed_of(PONG, MEASURED, 2, 2).fleet_sps == pytest.approx(2 * 1e6 / 2200)
    # the same job measured on a GPU: no torch thread credit (its train phase is on the GPU)
    gpu = replace(MEASURED, device="cuda", train_threads=1, train_speedup=1.0)
    assert speed_of(PONG, gpu, 1, 2).sps == pytest.approx(1e6 / (100 + 70 + 2 * 1000))


def test_a_job_per_core_is_advised_only_where_the_model_finds_it_faster() -> None:
    two_cores = Machine(physical_cores=2, logical_cores=2, ram_bytes=24 * GIB)
    # 2 jobs: 909 SPS against one job's 704 on both cores: advised, +29 %
    (item,) = [a for a in advise(two_cores, PONG, 1, costs=MEASURED) if a.setting == "jobs"]
    assert (item.current, item.suggested) == ("1", "2") and "1,420" not in item.effect
    assert "704 -> 909" in item.effect
    # side by side the jobs cost each other 30 % more a sample: 2 x 1e6 / 2,860 = 699 < 704
    contended = replace(MEASURED, busy_factor=1.3)
    assert not [a for a in advise(two_cores, PONG, 1, costs=contended) if a.setting == "jobs"]


def test_the_probe_times_a_train_epoch_on_more_threads_on_the_cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import cockpit_training.probe

    counts: list[int] = []
    monkeypatch.setattr(cockpit_training.probe, "apply_torch_threads", counts.append)  # torch's own stays as is
    cartpole = load("cartpole")
    speedup = _train_speedup(cartpole, "cpu", 2)
    # A measurement (its value is the machine's: on a loaded one two threads can crawl), timed at
    # 1 and 2 threads in turns, after a warm-up at each, and torch left at 1 after.
    assert math.isfinite(speedup) and speedup > 0
    assert counts[:2] == [1, 2] and counts[-1] == 1 and counts.count(2) >= 1 + MEDIAN_OF
    assert counts[2:4] == [1, 2] and counts[4:6] == [2, 1]  # the order swaps each round
    counts.clear()
    assert _train_speedup(cartpole, "cuda", 2) == 1.0 and _train_speedup(cartpole, "cpu", 1) == 1.0
    assert counts == []  # nothing timed there
