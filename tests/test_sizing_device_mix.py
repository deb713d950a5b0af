"""Which device each job trains on: the overlap model for a mix of CUDA and CPU jobs, by hand.

With a GPU, `recommend` measures the preset on both devices and the advisor names the fastest mix
of CUDA and CPU jobs where some of it belongs on the CPU. Here the GPU is scripted (a `Machine`
naming one) and both costs are measured figures put in the cache, as the probe would have.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import tomli_w
from rich.console import Console

from cockpit.commands.recommend import recommend
from cockpit.contract.arguments import device_mix
from cockpit.contract.costs import Costs
from cockpit.contract.events import read_events
from cockpit.contract.presets import load
from cockpit.contract.runrecord import read
from cockpit.contract.runspec import ConfigError, checked_devices
from cockpit.core.machine.host import thread_budget
from cockpit.core.machine.placement import GpuRef, GpuRoom
from cockpit.core.session.run_session import resume_settings
from cockpit.core.sizing.advisor import Machine, advise, mix_jobs
from cockpit.core.sizing.cost_probe import cache_key, cache_path, measured_costs
from cockpit.core.sizing.devices import Mix, best_mix, mix_sps, mixes
from cockpit.core.sizing.overlap import gpu_stations, overlap_sps
from cockpit.core.supervise.supervisor import JobTemplate, Placement, Supervisor
from tests.fakeclock import FakeClock
from tests.test_supervise_supervisor import FakeLauncher

GIB = 1024**3
COCKPIT = str(Path(sys.executable).parent / "cockpit")
RTX_4070 = "NVIDIA GeForce RTX 4070"
FOUR_CORES = Machine(4, 8, 32 * GIB, RTX_4070, 12 * GIB)
PONG = replace(load("cartpole"), env="Pong-v5", n_envs=8, n_steps=64, batch_size=256, n_epochs=2)
# A sample's rollout costs 800 / 8 + 100 us on either device; training it costs 200 us an epoch on
# the GPU, 1,000 us on one core, 625 us on two (the CPU's train epoch ran 1.6x faster on 2 threads).
CUDA = Costs("cuda", step_overhead_us=800, env_policy_us=100, env_step_us=60, train_sample_us=200)
CPU = Costs("cpu", step_overhead_us=800, env_policy_us=100, env_step_us=60, train_sample_us=1000,
            train_threads=2, train_speedup=1.6)  # fmt: skip


def test_one_cuda_and_one_cpu_job_by_hand() -> None:
    # 2 jobs on 4 cores: 2 threads each. The CPU job: 100 + (100 - 60/2) + 2 x 1,000 / 1.6 = 1,420 us
    # a sample. The CUDA job alone in its network: rollout 100 + 70 = 170 us on the 2 cores left,
    # train 2 x 200 = 400 us on the GPU, one after the other: 570 us a sample.
    expected = 1e6 / 1420 + 1e6 / 570
    assert mix_sps(PONG, CUDA, CPU, 1, 1, 4) == pytest.approx(expected)


def test_two_cuda_jobs_queue_for_the_gpu_by_hand() -> None:
    # Mean value analysis of 2 jobs, cores (170 us, 4 servers) and GPU (400 us, 1 server). With 1
    # job: rate 1/570, the GPU busy 400/570 of the time. With 2: the cores hold no queue (170 us);
    # at the GPU a job waits for the other's burst when it is there: 400 + 400 x 400/570.
    gpu_residence = 400 * (1 - 400 / 570) + 2 * 400 * (400 / 570)
    expected = 2 / (170 + gpu_residence) * 1e6
    assert mix_sps(PONG, CUDA, CPU, 2, 0, 4) == pytest.approx(expected)
    assert mix_sps(PONG, CUDA, CPU, 1, 1, 4) > expected  # a job moved to the CPU beats a second on the GPU


def test_the_cuda_jobs_roll_out_on_the_cores_the_cpu_jobs_leave() -> None:
    # 4 jobs on 2 cores: 1 thread each. The CPU job holds one core (100 + 100 + 2 x 1,000 = 2,200 us
    # a sample); the 3 CUDA jobs' rollouts share the one core left, so they queue there too.
    cpu_part = 1e6 / 2200
    gpu_part = mix_sps(PONG, CUDA, CPU, 3, 1, 2) - cpu_part
    assert gpu_part == pytest.approx(overlap_sps(gpu_stations(PONG, CUDA, 1), 3))
    assert gpu_part < overlap_sps(gpu_stations(PONG, CUDA, 2), 3)  # less than with both cores


def test_cpu_jobs_need_a_core_each_and_the_best_mix_is_the_fastest_listed() -> None:
    assert mix_sps(PONG, CUDA, CPU, 0, 3, 2) == 0.0 and mix_sps(PONG, CUDA, CPU, 0, 0, 2) == 0.0
    # CPU jobs holding every core leave the CUDA jobs' rollouts none: not a mix the cores hold
    assert mix_sps(PONG, CUDA, CPU, 1, 2, 2) == 0.0 and mix_sps(PONG, CUDA, CPU, 0, 2, 2) > 0
    every = mixes(PONG, CUDA, CPU, 4, 4)
    assert len(every) == sum(n + 1 for n in range(1, 5))  # every split of 1 to 4 jobs fits 4 cores
    assert every == sorted(every, key=lambda m: -m.sps) and best_mix(PONG, CUDA, CPU, 4, 4) == every[0]
    assert Mix(2, 1, 0.0).devices == "2:cuda,1:cpu" and Mix(0, 3, 0.0).devices == "3:cpu"


def test_the_advisor_names_the_mix_where_some_of_it_belongs_on_the_cpu() -> None:
    (item,) = [a for a in advise(FOUR_CORES, PONG, 2, costs=CUDA, cpu_costs=CPU) if a.setting == "devices"]
    assert mix_jobs(FOUR_CORES, 2) == 8 and mix_jobs(FOUR_CORES, 12) == 12  # two a core, or --jobs
    best = best_mix(PONG, CUDA, CPU, 4, 8)
    assert best.cpu > 0 and (item.current, item.suggested) == ("2:cuda", best.devices)
    assert item.numbers["suggested_sps"] == pytest.approx(best.sps)
    assert item.numbers["sps"] == pytest.approx(mix_sps(PONG, CUDA, CPU, 2, 0, 4))
    assert f"--devices {best.devices}" in item.effect and "all on cuda" in item.reason
    # A CPU that trains ten times slower: all on CUDA stays the best, and nothing is advised.
    slow = replace(CPU, train_sample_us=10_000)
    assert not [a for a in advise(FOUR_CORES, PONG, 2, costs=CUDA, cpu_costs=slow) if a.setting == "devices"]
    # Without the CPU's costs, or without a GPU, there is no mix to predict.
    assert not [a for a in advise(FOUR_CORES, PONG, 2, costs=CUDA) if a.setting == "devices"]


def test_recommend_with_a_scripted_gpu_and_both_costs_names_the_mix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    preset = load("cartpole")
    figures = {"env": "CartPole-v1", "batch_size": 256, "setup_s": 0.2, "import_s": 4.0, "episode_steps_max": 500,
               "busy_factor": 1.0, "shared_factor": 1.0, "train_epoch_us": 0.0}  # fmt: skip
    records = {
        cache_key(preset, RTX_4070): {**figures, "device": "cuda", "step_overhead_us": 800.0, "env_policy_us": 100.0,
                                      "env_step_us": 60.0, "train_sample_us": 200.0, "train_threads": 1,
                                      "train_speedup": 1.0},
        cache_key(preset, None): {**figures, "device": "cpu", "step_overhead_us": 800.0, "env_policy_us": 100.0,
                                  "env_step_us": 60.0, "train_sample_us": 30.0, "train_threads": 2,
                                  "train_speedup": 1.6},
    }  # fmt: skip
    cache_path().parent.mkdir(parents=True)
    cache_path().write_text(tomli_w.dumps(records))

    def never(*_: object) -> dict[str, object]:
        raise AssertionError("both costs are cached: nothing is probed")

    # The CPU's costs are kept under "no GPU", where a CPU-only machine keeps its own.
    assert measured_costs(preset, RTX_4070, cpu=True, probe=never).device == "cpu"
    console = Console(record=True, width=250)
    items = recommend(console, preset="cartpole", env=None, jobs=2, run_dir=None, machine=FOUR_CORES)
    text = console.export_text()
    (item,) = [a for a in items if a.setting == "devices"]
    cuda, cpu = measured_costs(preset, RTX_4070, probe=never), measured_costs(preset, None, probe=never)
    best = best_mix(preset, cuda, cpu, 4, 8)
    assert item.suggested == best.devices and best.cpu > 0
    assert "measured on the CPU" in text and "device mixes" in text and best.describe() in text


# ----- `run --devices`: a run takes the mix -----


def test_devices_parse_into_one_device_per_slot_and_bad_text_names_the_form() -> None:
    assert device_mix("2:cuda,1:cpu") == ("cuda", "cuda", "cpu")
    assert device_mix("3:cpu") == ("cpu", "cpu", "cpu")
    for bad in ("2:gpu", "cuda", "0:cpu", "x:cpu", "2:cuda,"):
        with pytest.raises(argparse.ArgumentTypeError, match="COUNT:DEVICE pairs such as 2:cuda,1:cpu"):
            device_mix(bad)


def test_the_counts_must_match_the_jobs_and_cuda_needs_a_gpu() -> None:
    assert checked_devices(("cuda", "cpu"), 2, [0]) == ("cuda", "cpu")
    with pytest.raises(ConfigError, match=r"^--devices 2:cuda,1:cpu: names 3 parallel job\(s\) and --jobs is 4;"):
        checked_devices(("cuda", "cuda", "cpu"), 4, [0])
    with pytest.raises(ConfigError, match=r"^--devices 1:cuda,1:cpu: no GPU for the cuda jobs here; use 2:cpu"):
        checked_devices(("cuda", "cpu"), 2, None)
    assert checked_devices(("cpu", "cpu"), 2, None) == ("cpu", "cpu")  # no GPU: the CPU is fine


def test_each_slot_trains_on_its_device_and_a_cpu_slot_takes_no_gpu(tmp_path: Path) -> None:
    rooms = [GpuRoom(0, "GPU-fake-0", 12 * GIB, 11 * GIB)]
    launcher = FakeLauncher()
    sup = Supervisor(run_dir=tmp_path, template=JobTemplate("cartpole", "CartPole-v1", 1000,
                     devices=("cuda", "cuda", "cpu")), seeds=range(3), slots=3, launcher=launcher,
                     budget=thread_budget(3, 4), clock=FakeClock(),
                     placement=Placement(gpus=lambda: rooms))  # fmt: skip
    sup.tick()
    launched = {p.request.job_id: (p.request.args.device, p.request.gpu) for p in launcher.processes}
    assert launched == {"000": ("cuda", GpuRef(0, "GPU-fake-0")), "001": ("cuda", GpuRef(0, "GPU-fake-0")),
                        "002": ("cpu", None)}  # fmt: skip


def test_a_cpu_only_run_of_the_mix_trains_records_it_and_resumes_with_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = subprocess.run([COCKPIT, "run", "--devices", "2:cpu", "--timesteps", "512", "--headless", "--run-dir",
                           str(run_dir)], capture_output=True, text=True, timeout=180, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    recorded = read(run_dir)
    assert recorded.config.devices == ("cpu", "cpu") and recorded.config.jobs == 2
    for job in ("000", "001"):
        (started,) = [e for e in read_events(run_dir / "jobs" / job / "events.jsonl") if e.kind == "started"]
        assert started.device == "cpu"
    assert resume_settings(run_dir, recorded).devices == ("cpu", "cpu")
    refused = subprocess.run([COCKPIT, "run", "--devices", "1:cuda", "--headless", "--run-dir", str(tmp_path / "x")],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 2 and not (tmp_path / "x").exists()
    assert refused.stderr.strip() == ("cockpit run: error: --devices 1:cuda: no GPU for the cuda jobs here; use "
                                      "1:cpu, or leave --devices out")  # fmt: skip
