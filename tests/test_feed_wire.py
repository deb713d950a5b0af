"""The JSON codec of the control socket: exact round trips, and bad input named by its key."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from cockpit.contract.advice import Advice
from cockpit.contract.controls import (
    AddJob,
    ApplyAdvice,
    Control,
    KillJob,
    RestartJob,
    SetMps,
    SetPreset,
    SetSlots,
    StopAll,
    StopJob,
)
from cockpit.contract.controls import decode as decode_command
from cockpit.contract.controls import encode as encode_command
from cockpit.contract.ray_reports import NodeSample
from cockpit.contract.states import RunStatus
from cockpit.core.feed.snapshot import JobView, RunState
from cockpit.core.feed.wire import decode_sample, decode_state, encode_sample, encode_state
from cockpit.core.machine.gpu_types import GpuInfo, GpuSample
from cockpit.core.telemetry.sampler import JobUsage, Sample


def job_view(job_id: str, **overrides: Any) -> JobView:
    values: dict[str, Any] = {
        "id": job_id, "seed": 7, "state": "running", "phase": "rollout", "phase_since": 1_800_000_000.25,
        "steps": 4096, "target": 100_000, "sps": 1234.5, "mean_sps": 1100.0, "ep_rew_mean": None,
        "restarts": 1, "checkpoints": 2, "last_checkpoint_step": 2048, "error": None, "exit_reason": None,
        "pid": 4242, "device": "cuda:0", "cpu_percent": 97.5, "rss_bytes": 1 << 30, "gpu_mem_bytes": None,
        "peak_gpu_mem_bytes": None, "started_at": 1_799_999_990.0, "ended_at": None,
    }  # fmt: skip
    values.update(overrides)
    return JobView(**values)


def sample(t: float, *, gpu: bool) -> Sample:
    return Sample(
        t=t,
        cpu_percent=(12.5, 99.0),
        ram_used_bytes=8 << 30,
        ram_total_bytes=64 << 30,
        gpu=GpuSample(
            util_percent=63.5,
            util_peak_percent=98.0,
            mem_used_bytes=3 << 30,
            mem_total_bytes=24 << 30,
            power_w=None,
            temperature_c=61.0,
            sm_clock_mhz=2520,
            throttle_reasons=("sw_power_cap", "sw_thermal"),
        )
        if gpu
        else None,
        jobs={"000": JobUsage(97.5, 1 << 30, 512 << 20, 40.0), "001": JobUsage(3.0, 1 << 20)},
        cost_s=0.0021,
        util_samples=((t - 0.1, 50.0), (t, 98.0)) if gpu else (),
    )


def run_state(*, gpu: bool) -> RunState:
    return RunState(
        run_dir="/runs/r1",
        preset="cartpole",
        env="CartPole-v1",
        status=RunStatus.STOPPING,
        started_at=1_799_999_000.0,
        now=1_800_000_000.5,
        slots=2,
        jobs=(
            job_view("000", eta_s=77.5, rollout_sps=9000.0),
            job_view(
                "001",
                state="queued",
                phase=None,
                phase_since=None,
                pid=None,
                preset="cartpole",
                overrides=(("learning_rate", "0.001"), ("n_epochs", "5")),
            ),
        ),
        sample=sample(1_800_000_000.4, gpu=gpu),
        gpu=GpuInfo(0, "NVIDIA GeForce RTX 4090", 24 << 30, "555.42") if gpu else None,
        gpu_status="" if gpu else "no GPU telemetry: no NVML library",
        warnings=("job 001: slow start",),
        advice=("auto: add (1 -> 2 jobs): 4,842 SPS with 1 job(s)",),
        suggestions=(Advice("jobs", "2", "4", "overlap", "GPU 25 %", {"gpu_util_mean": 25.0, "gpu": "x"}),),
        eta_s=321.5,
    )


def through_json(data: dict[str, Any]) -> Any:
    return json.loads(json.dumps(data))


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu-only"])
def test_a_state_round_trips_exactly_through_json(gpu: bool) -> None:
    state = run_state(gpu=gpu)
    back = decode_state(through_json(encode_state(state)))
    assert back == state
    assert back.status is RunStatus.STOPPING and isinstance(back.jobs, tuple) and isinstance(back.warnings, tuple)
    assert isinstance(back.suggestions[0], Advice) and isinstance(back.advice, tuple)
    assert back.jobs[1].overrides == (("learning_rate", "0.001"), ("n_epochs", "5"))  # pairs again, not lists
    assert back.sample is not None and isinstance(back.sample.cpu_percent, tuple)
    assert isinstance(back.sample.jobs["001"], JobUsage)
    if gpu:
        assert back.sample.gpu is not None and isinstance(back.sample.gpu.throttle_reasons, tuple)
        assert all(isinstance(point, tuple) for point in back.sample.util_samples)


def test_a_state_before_any_sample_round_trips() -> None:
    state = RunState(
        run_dir="r", preset="p", env="e", status=RunStatus.RUNNING, started_at=1.0, now=2.0, slots=1,
        jobs=(), sample=None, gpu=None, gpu_status="", warnings=(),
    )  # fmt: skip
    assert decode_state(through_json(encode_state(state))) == state


def test_the_etas_and_rollout_sps_round_trip_and_default_to_unknown_from_an_older_cockpit() -> None:
    state = run_state(gpu=False)
    back = decode_state(through_json(encode_state(state)))
    assert (back.eta_s, back.jobs[0].eta_s, back.jobs[0].rollout_sps) == (321.5, 77.5, 9000.0)
    older = through_json(encode_state(state))
    del older["eta_s"], older["jobs"][0]["eta_s"], older["jobs"][0]["rollout_sps"]
    back = decode_state(older)
    assert (back.eta_s, back.jobs[0].eta_s, back.jobs[0].rollout_sps) == (None, None, None)
    assert back.jobs[0].sps == 1234.5


def test_a_sample_round_trips_on_its_own() -> None:
    one = sample(5.0, gpu=True)
    assert decode_sample(through_json(encode_sample(one))) == one


def test_several_gpus_cluster_nodes_and_each_jobs_gpu_and_node_round_trip() -> None:
    """An attached viewer of a 2-GPU machine on a Ray cluster sees what the run sees: every GPU's
    counters and NVML readings, every node's sample, and which GPU and node each job is on."""
    t = 1_800_000_000.4

    def gpu(index: int, util: float) -> GpuSample:
        return GpuSample(util, util + 10, (index + 1) << 30, 24 << 30, 250.0, 60.0 + index, 2100, (), index=index,
                         util_samples=((t - 0.1, util - 5), (t, util + 5)))  # fmt: skip

    gpus = (gpu(0, 40.0), gpu(2, 80.0))
    nodes = (NodeSample("10.0.0.1", t, (50.0, 75.0), 4 << 30, 16 << 30, 40.0, 1 << 30, 24 << 30),
             NodeSample("10.0.0.2", t - 0.5, (100.0,), 2 << 30, 8 << 30))  # fmt: skip
    two = dataclasses.replace(sample(t, gpu=False), gpu=gpus[0], util_samples=gpus[0].util_samples, gpus=gpus,
                              nodes=nodes)  # fmt: skip
    infos = (GpuInfo(0, "NVIDIA A100", 40 << 30, "555.42"), GpuInfo(2, "NVIDIA A100", 80 << 30, "555.42"))
    state = dataclasses.replace(
        run_state(gpu=True), sample=two, gpu=infos[0], gpus=infos,
        jobs=(job_view("000", gpu=0, node="10.0.0.1"), job_view("001", gpu=2, node="10.0.0.2")),
    )  # fmt: skip
    back = decode_state(through_json(encode_state(state)))
    assert back == state
    assert back.sample is not None and [g.index for g in back.sample.gpus] == [0, 2]
    assert back.sample.gpu_util()[2] == gpus[1].util_samples and back.sample.nodes == nodes
    assert [(j.gpu, j.node) for j in back.jobs] == [(0, "10.0.0.1"), (2, "10.0.0.2")]
    assert [g.index for g in back.gpus] == [0, 2]


def test_a_missing_or_malformed_key_is_named() -> None:
    encoded = through_json(encode_state(run_state(gpu=True)))
    del encoded["now"]
    with pytest.raises(ValueError, match="'now'"):
        decode_state(encoded)
    encoded = through_json(encode_state(run_state(gpu=True)))
    encoded["status"] = "exploded"
    with pytest.raises(ValueError, match="'status'"):
        decode_state(encoded)
    encoded = through_json(encode_state(run_state(gpu=True)))
    del encoded["sample"]["gpu"]["mem_used_bytes"]
    with pytest.raises(ValueError, match="'mem_used_bytes'"):
        decode_state(encoded)
    with pytest.raises(ValueError, match="expected an object"):
        decode_state([1, 2])


def test_unknown_keys_from_a_newer_cockpit_are_ignored() -> None:
    state = run_state(gpu=False)
    encoded = through_json(encode_state(state))
    encoded["from_the_future"] = 1
    encoded["jobs"][0]["also_new"] = "x"
    assert decode_state(encoded) == state


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        (AddJob(), "add"),
        (AddJob(12), "add"),
        (StopJob("003"), "stop"),
        (RestartJob("000"), "restart"),
        (KillJob("001"), "kill"),
        (StopAll(), "stop_all"),
        (SetSlots(3), "set_slots"),
        (SetPreset("/runs/r1/preset-1.toml"), "set_preset"),
        (SetMps(True), "set_mps"),
        (SetMps(False), "set_mps"),
        (ApplyAdvice("n_envs", "16"), "apply_advice"),
        (ApplyAdvice("mps", "on"), "apply_advice"),
    ],
)
def test_commands_round_trip(command: Control, kind: str) -> None:
    encoded = through_json(encode_command(command))
    assert encoded["kind"] == kind
    assert decode_command(encoded) == command


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"job_id": "000"}, "'kind'"),
        ({"kind": "explode"}, "'kind'"),
        ({"kind": "stop"}, "'job_id'"),
        ({"kind": "kill", "job_id": 3}, "'job_id'"),
        ({"kind": "add", "seed": "7"}, "'seed'"),
        ({"kind": "add", "seed": True}, "'seed'"),
        ("stop", "expected an object"),
        ({"kind": "set_slots", "slots": 0}, "'slots'"),
        ({"kind": "set_mps", "on": 1}, "'on'"),
        ({"kind": "set_mps"}, "'on'"),
    ],
)
def test_a_bad_command_raises_value_error_naming_the_key(data: Any, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        decode_command(data)
