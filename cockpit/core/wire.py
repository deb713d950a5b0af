"""The JSON form of run states, samples and commands, as they cross the control socket.

Encoding gives plain dicts that `json.dumps` accepts; decoding rebuilds the exact frozen
dataclasses (tuples as tuples, `RunStatus` as the enum, None kept). Decoding is strict about what
it needs and lenient about what it does not know: a missing key or a value of the wrong shape
raises ValueError naming the key, and an unknown key (from a newer cockpit) is ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, fields
from typing import Any, TypeVar

from cockpit.core.advisor import Advice
from cockpit.core.nvml import GpuInfo, GpuSample
from cockpit.core.state import JobView, RunState, RunStatus
from cockpit.core.supervisor import (
    AddJob,
    ApplyAdvice,
    Command,
    KillJob,
    RestartJob,
    SetPreset,
    SetSlots,
    StopAll,
    StopJob,
)
from cockpit.core.telemetry import JobUsage, Sample

T = TypeVar("T")

COMMAND_KINDS: dict[type, str] = {
    AddJob: "add",
    StopJob: "stop",
    RestartJob: "restart",
    KillJob: "kill",
    StopAll: "stop_all",
    SetSlots: "set_slots",
    SetPreset: "set_preset",
    ApplyAdvice: "apply_advice",
}
_JOB_COMMANDS: dict[str, type[StopJob | RestartJob | KillJob]] = {
    "stop": StopJob,
    "restart": RestartJob,
    "kill": KillJob,
}


def _object(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{what}: expected an object, got {type(data).__name__}")
    return data


def _build(cls: type[T], data: Any, what: str, **convert: Callable[[Any], Any]) -> T:
    """`cls` from the keys of `data` that name its fields, each passed through `convert[name]` if
    given. ValueError names a missing key or one whose value `convert` rejects."""
    values = _object(data, what)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in values:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ValueError(f"{what}: missing key {f.name!r}")
            continue
        value = values[f.name]
        if f.name in convert:
            try:
                value = convert[f.name](value)
            except (TypeError, ValueError, AttributeError) as exc:
                raise ValueError(f"{what}: bad value for key {f.name!r}: {exc}") from None
        kwargs[f.name] = value
    return cls(**kwargs)


def _optional(decode: Callable[[Any], T]) -> Callable[[Any], T | None]:
    return lambda value: None if value is None else decode(value)


def _tuple(value: Any) -> tuple[Any, ...]:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return tuple(value)


# ----- samples -----


def encode_sample(sample: Sample) -> dict[str, Any]:
    """A telemetry sample as plain JSON-able data."""
    return {
        "t": sample.t,
        "cpu_percent": list(sample.cpu_percent),
        "ram_used_bytes": sample.ram_used_bytes,
        "ram_total_bytes": sample.ram_total_bytes,
        "gpu": asdict(sample.gpu) if sample.gpu is not None else None,
        "jobs": {job_id: asdict(usage) for job_id, usage in sample.jobs.items()},
        "cost_s": sample.cost_s,
        "util_samples": [list(point) for point in sample.util_samples],
    }


def _gpu_sample(data: Any) -> GpuSample:
    return _build(GpuSample, data, "gpu sample", throttle_reasons=_tuple)


def _job_usages(data: Any) -> dict[str, JobUsage]:
    jobs = _object(data, "sample jobs")
    return {str(job_id): _build(JobUsage, usage, f"job usage {job_id}") for job_id, usage in jobs.items()}


def decode_sample(data: Any) -> Sample:
    """The Sample that `encode_sample` encoded; ValueError names a missing or malformed key."""
    return _build(
        Sample,
        data,
        "sample",
        cpu_percent=_tuple,
        gpu=_optional(_gpu_sample),
        jobs=_job_usages,
        util_samples=lambda points: tuple(_tuple(point) for point in _tuple(points)),
    )


# ----- run state -----


def encode_state(state: RunState) -> dict[str, Any]:
    """A run state as plain JSON-able data (the status as its string value)."""
    # Field by field rather than asdict(state): the sample needs encode_sample's care.
    encoded = {f.name: getattr(state, f.name) for f in fields(state)}
    encoded.update(
        status=state.status.value,
        jobs=[asdict(job) for job in state.jobs],
        sample=encode_sample(state.sample) if state.sample is not None else None,
        gpu=asdict(state.gpu) if state.gpu is not None else None,
        warnings=list(state.warnings),
        advice=list(state.advice),
        suggestions=[asdict(item) for item in state.suggestions],
    )
    return encoded


def decode_state(data: Any) -> RunState:
    """The RunState that `encode_state` encoded; ValueError names a missing or malformed key."""
    return _build(
        RunState,
        data,
        "state",
        status=RunStatus,
        jobs=lambda jobs: tuple(_build(JobView, job, "job") for job in _tuple(jobs)),
        sample=_optional(decode_sample),
        gpu=_optional(lambda gpu: _build(GpuInfo, gpu, "gpu")),
        warnings=_tuple,
        advice=_tuple,
        suggestions=lambda items: tuple(_build(Advice, item, "suggestion") for item in _tuple(items)),
    )


# ----- commands -----


def encode_command(command: Command) -> dict[str, Any]:
    """`{"kind": "add"|"stop"|"restart"|"kill"|"stop_all", ...the command's fields}`."""
    return {"kind": COMMAND_KINDS[type(command)], **asdict(command)}


def decode_command(data: Any) -> Command:
    """The Command that `encode_command` encoded; ValueError names the missing or bad key."""
    values: Mapping[str, Any] = _object(data, "command")
    if "kind" not in values:
        raise ValueError("command: missing key 'kind'")
    kind = values["kind"]
    if kind == "stop_all":
        return StopAll()
    if kind == "set_preset":
        preset_arg = values.get("preset_arg")
        if not isinstance(preset_arg, str) or not preset_arg:
            raise ValueError(f"command 'set_preset': key 'preset_arg' must name a preset, got {preset_arg!r}")
        return SetPreset(preset_arg)
    if kind == "apply_advice":
        setting, suggested = values.get("setting"), values.get("suggested")
        if not isinstance(setting, str) or not isinstance(suggested, str):
            raise ValueError("command 'apply_advice': keys 'setting' and 'suggested' must be strings")
        return ApplyAdvice(setting, suggested)
    if kind == "set_slots":
        slots = values.get("slots")
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
            raise ValueError(f"command 'set_slots': key 'slots' must be a positive integer, got {slots!r}")
        return SetSlots(slots)
    if kind == "add":
        seed = values.get("seed")
        # bool is an int in Python, but `true` is not a seed.
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
            raise ValueError(f"command 'add': key 'seed' must be a non-negative integer or null, got {seed!r}")
        return AddJob(seed)
    if kind in _JOB_COMMANDS:
        job_id = values.get("job_id")
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"command {kind!r}: key 'job_id' must be a job id string, got {job_id!r}")
        return _JOB_COMMANDS[kind](job_id)
    raise ValueError(f"command: key 'kind' must be one of {', '.join(COMMAND_KINDS.values())}, got {kind!r}")
