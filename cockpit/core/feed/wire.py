"""The JSON form of run states and samples, as they cross the control socket (commands have
their codec in `cockpit.contract.controls`).

Encoding gives plain dicts that `json.dumps` accepts; decoding rebuilds the exact frozen
dataclasses (tuples as tuples, `RunStatus` as the enum, None kept). Decoding is strict about what
it needs and lenient about what it does not know: a missing key or a value of the wrong shape
raises ValueError naming the key, and an unknown key (from a newer cockpit) is ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, TypeVar

from cockpit.contract.advice import Advice
from cockpit.contract.ray_reports import NodeSample
from cockpit.contract.states import JobState, RunStatus
from cockpit.core.feed.snapshot import FleetView, JobView, LeaderView, RunState, SearchView, TierView
from cockpit.core.machine.gpu_types import GpuInfo, GpuSample
from cockpit.core.telemetry.sampler import JobUsage, Sample
from cockpit.core.telemetry.trend import Trend

T = TypeVar("T")


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


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _plain(value: Any) -> Any:
    """What `dataclasses.asdict` gives, without its deep copy of every leaf: an attached viewer
    polls 5 times a second, and those copies were most of what it cost the run's process."""
    if is_dataclass(value) and not isinstance(value, type):
        names = _FIELD_NAMES.get(type(value))
        if names is None:
            names = _FIELD_NAMES[type(value)] = tuple(f.name for f in fields(value))
        return {name: _plain(getattr(value, name)) for name in names}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


# ----- samples -----


def encode_sample(sample: Sample) -> dict[str, Any]:
    """A telemetry sample as plain JSON-able data."""
    return {
        "t": sample.t,
        "cpu_percent": list(sample.cpu_percent),
        "ram_used_bytes": sample.ram_used_bytes,
        "ram_total_bytes": sample.ram_total_bytes,
        "gpu": _plain(sample.gpu) if sample.gpu is not None else None,
        "jobs": {job_id: _plain(usage) for job_id, usage in sample.jobs.items()},
        "cost_s": sample.cost_s,
        "util_samples": [list(point) for point in sample.util_samples],
        # Every GPU's counters, the first's again: on a machine of one GPU a few numbers more a tick.
        "gpus": [_plain(gpu) for gpu in sample.gpus] if len(sample.gpus) > 1 else [],
        "nodes": [_plain(node) for node in sample.nodes],
    }


def _points(points: Any) -> tuple[tuple[float, float], ...]:
    return tuple(_tuple(point) for point in _tuple(points))


def _gpu_sample(data: Any) -> GpuSample:
    return _build(GpuSample, data, "gpu sample", throttle_reasons=_tuple, util_samples=_points)


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
        util_samples=_points,
        gpus=lambda gpus: tuple(_gpu_sample(gpu) for gpu in _tuple(gpus)),
        nodes=lambda nodes: tuple(
            _build(NodeSample, node, "node sample", cpu_percent=_tuple) for node in _tuple(nodes)
        ),
    )


# ----- run state -----


def encode_state(state: RunState) -> dict[str, Any]:
    """A run state as plain JSON-able data (the status as its string value)."""
    # Field by field rather than _plain(state): the sample needs encode_sample's care.
    encoded = {f.name: getattr(state, f.name) for f in fields(state)}
    encoded.update(
        status=state.status.value,
        jobs=[_plain(job) for job in state.jobs],
        sample=encode_sample(state.sample) if state.sample is not None else None,
        gpu=_plain(state.gpu) if state.gpu is not None else None,
        gpus=[_plain(gpu) for gpu in state.gpus],
        warnings=list(state.warnings),
        advice=list(state.advice),
        suggestions=[_plain(item) for item in state.suggestions],
        fleet=_plain(state.fleet) if state.fleet is not None else None,
        trend=encode_trend(state.trend),
    )
    return encoded


def encode_trend(trend: Trend) -> dict[str, Any]:
    """A trend as its three columns of plain numbers (and nulls)."""
    # list() of each column rather than _plain: a viewer's first frame carries all 600 points.
    return {"t": list(trend.t), "sps": list(trend.sps), "best_return": list(trend.best_return)}


def decode_trend(data: Any) -> Trend:
    """The Trend that `encode_trend` encoded; ValueError names a missing key or columns of
    different lengths."""
    return _build(Trend, data, "trend", t=_tuple, sps=_tuple, best_return=_tuple)


def _decode_fleet(data: Any) -> FleetView:
    return _build(
        FleetView,
        data,
        "fleet",
        tiers=lambda tiers: tuple(_build(TierView, t, "tier") for t in _tuple(tiers)),
        leaders=lambda rows: tuple(_build(LeaderView, r, "leader") for r in _tuple(rows)),
        notices=_tuple,
        search=_optional(lambda s: _build(SearchView, s, "search", ranges=_tuple)),
    )


def _pairs(value: Any) -> tuple[tuple[str, str], ...]:
    """A job's overrides, (key, value) pairs that JSON carried as lists."""
    return tuple((str(key), str(text)) for key, text in _tuple(value))


def _gpu_info(data: Any) -> GpuInfo:
    return _build(GpuInfo, data, "gpu", compute_capability=_optional(_tuple))


def decode_state(data: Any) -> RunState:
    """The RunState that `encode_state` encoded; ValueError names a missing or malformed key."""
    return _build(
        RunState,
        data,
        "state",
        status=RunStatus,
        jobs=lambda jobs: tuple(_build(JobView, job, "job", state=JobState, overrides=_pairs) for job in _tuple(jobs)),
        sample=_optional(decode_sample),
        gpu=_optional(_gpu_info),
        gpus=lambda gpus: tuple(_gpu_info(gpu) for gpu in _tuple(gpus)),
        warnings=_tuple,
        advice=_tuple,
        suggestions=lambda items: tuple(_build(Advice, item, "suggestion") for item in _tuple(items)),
        fleet=_optional(_decode_fleet),
        trend=decode_trend,
    )
