"""The run record: `run.toml`, as typed records with one render and one read.

`cockpit run` rewrites `<run dir>/run.toml` whole every ~10 s and at exit; everything else that
looks at a run afterwards (`report`, replay, `recommend --from`, `run --resume`, the start screen's list
of recent runs) reads it back. This module is the only place that turns a `RunRecord` into TOML
(`render`, `write`) and TOML back into a `RunRecord` (`parse`, `read`); nobody else indexes the file.

The file, top to bottom (absent keys are facts that were not known: TOML has no null):

```
schema_version, name, command, status, started_at, ended_at, updated_at, duration_s, eta_s, disk_wait,
warnings
[config]        the run's settings: what `--resume` starts again with
[host]          the machine
[gpu]           the (first) GPU, or why there is no GPU telemetry
[preset]        the resolved preset (`cockpit.contract.presets.Preset`)
[[jobs]]        one per job, with its GPU and [jobs.phases.<phase>] (time, GPU % and CPU % by phase)
[utilization]   the GPUs over the run (every GPU's samples together), by phase, and what the sampler cost
[[gpus]]        one per GPU sampled: its index, UUID, name, memory, jobs, how its utilization was
                read, its compute mode, and [gpus.utilization]
[[advice]]      `--auto`'s decisions and applied advice, in time order
```

A job's `gpu` is the NVML index of the GPU its worker ran on (the only GPU it saw, as `cuda:0`),
`gpu_uuid` that GPU's UUID; a job's `phases` figures are its GPU's utilization ("busy": the
share of time in which any kernel ran, NVML's `nvmlUtilization_t.gpu`) while it was in
each phase. `[[gpus]]` and the jobs' `gpu` keys were added without a new version: a file without
them is a run of at most one GPU, and an older reader that ignores them reads `[gpu]` as the first
GPU and `[utilization]` as the GPUs' together (on one GPU, that GPU's).

Versioning: `schema_version` is 1. A reader takes a file without one as version 1, ignores keys
it does not know (a newer cockpit may add facts without a new version), and refuses a newer version
with one line that says to upgrade. A change that would mislead an older reader (a key renamed, a
meaning or unit changed, a key made required) needs a new version.

Times are `YYYY-MM-DDTHH:MM:SSZ` strings (UTC); `iso` and `unix` convert.
"""

from __future__ import annotations

import calendar
import dataclasses
import time
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

import tomli_w

from cockpit.contract.files import write_atomic
from cockpit.contract.presets import Preset
from cockpit.contract.rundir import RUN_TOML, RunDir
from cockpit.contract.scriptargs import script_label
from cockpit.contract.settings import RunSettings, declared_recorded, unrecorded
from cockpit.contract.states import JobState, RunStatus
from cockpit.contract.toml import tomllib

SCHEMA_VERSION = 1
ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class RunRecordError(ValueError):
    """A run.toml that cannot be read; the message is one line naming the run and what is wrong
    (no run.toml, not TOML, a key of the wrong type, or a newer schema version)."""


def iso(t: float | None) -> str | None:
    """Unix time as run.toml writes it, `YYYY-MM-DDTHH:MM:SSZ` (None stays None)."""
    return None if t is None else time.strftime(ISO_FORMAT, time.gmtime(t))


def unix(text: str | None) -> float | None:
    """Unix time of a run.toml time string; None when absent or malformed."""
    if text is None:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, ISO_FORMAT)))
    except ValueError:
        return None


# ----- the records -----


@dataclass(frozen=True, kw_only=True)
class ConfigRecord(RunSettings):
    """`[config]`: the run's settings, as `--resume` needs them to start it again.

    Its keys are the settings (`cockpit.contract.settings.RunSettings`) that declare themselves
    `recorded`, under their field names, each read back by its type; a setting declared later is
    absent from older files, and reads as its default. The run writes them from its spec
    (`settings.recorded_values`), as validated: `preset` is what workers got as `--preset` (a
    built-in name or an absolute file path), `env` the env id they trained, `timesteps` the step
    target (0 with an episode target, `episodes`), `agents` the jobs the run had.
    `mps_external` is the pipe directory of an MPS daemon the
    run found running, whoever started it, whose clients its jobs were with or without `--mps`
    (absent: none).
    `script` is a script run's command template (`cockpit run -- COMMAND`); such a run trains no
    preset of cockpit's, so its `preset` and `env` are empty, its `timesteps` 0, and the record
    has no `[preset]` table.
    """

    # The keys every run.toml has, in the order it has always had them. Every other recorded setting
    # follows in declaration order, and only when it is set and not at its default (absent means the
    # default): an older file read and written again is the same text, and a setting declared later
    # leaves the files of runs that do not use it as they were.
    ALWAYS: ClassVar[tuple[str, ...]] = ("jobs", "agents", "preset", "env", "timesteps", "seed", "max_restarts", "pin")

    jobs: int
    agents: int
    preset: str
    env: str
    timesteps: int
    mps_external: str | None = None

    def written(self) -> list[tuple[str, Any]]:
        """The `[config]` keys and values this record writes, in order (see `ALWAYS`)."""
        keys = [*self.ALWAYS, *(name for name, _ in declared_recorded() if name not in self.ALWAYS), "mps_external"]
        defaults = {f.name: f.default for f in dataclasses.fields(RunSettings)}
        return [
            (key, getattr(self, key))
            for key in keys
            if getattr(self, key) is not None and (key in self.ALWAYS or getattr(self, key) != defaults.get(key))
        ]

    def shown(self) -> tuple[str, str]:
        """The preset and env as views show them; a script run's are "script" and its command's
        short name (`scriptargs.script_label`)."""
        return ("script", script_label(self.script)) if self.script is not None else (self.preset, self.env)


@dataclass(frozen=True, kw_only=True)
class HostRecord:
    """`[host]`: the machine the run was on."""

    hostname: str
    cpu_model: str
    physical_cores: int
    logical_cores: int
    ram_gib: float
    os: str


@dataclass(frozen=True, kw_only=True)
class GpuRecord:
    """`[gpu]`: the GPU (`present`), or why there was no GPU telemetry (`telemetry`; "ok" when
    there was). Name, memory and driver are there only with a GPU."""

    present: bool
    telemetry: str
    name: str | None = None
    memory_total_mib: int | None = None
    driver: str | None = None


@dataclass(frozen=True, kw_only=True)
class UtilizationFigures:
    """GPU utilization over the run (mean, p50, p95), the share of time with at least one job
    training, and the GPU while one trained and while none did: the whole run's in `[utilization]`,
    one GPU's (over its own jobs) in `[gpus.utilization]`."""

    gpu_util_mean: float | None = None
    gpu_util_p50: float | None = None
    gpu_util_p95: float | None = None
    train_share: float | None = None
    gpu_util_while_training: float | None = None
    gpu_util_while_not_training: float | None = None


@dataclass(frozen=True, kw_only=True)
class GpuUseRecord:
    """`[[gpus]]`: one GPU the run sampled (by its NVML `index`), the jobs placed on it, and its
    utilization over the run (`[gpus.utilization]`, absent before any job of it was sampled).

    How its utilization was read, as of the newest sample: `util_read` is "buffer" (NVML's sample
    buffer), "poll" (`nvmlDeviceGetUtilizationRates`, the driver's mean over its period) or "not
    per MIG slice" (no utilization at all), and `util_sample_period_ms` the driver's sample spacing
    as measured, which bounds the bursts it can see; both absent when unknown (and in files from
    before they were recorded). `util_read_shares` is the share of the sampled time spent in each
    way of reading, by the same names, written only when the way changed during the run (a GPU
    whose buffer failed and fell back to polling): otherwise absent, all the time in `util_read`.

    `compute_mode` is the GPU's compute mode as NVML read it when the run began ("default",
    "exclusive_process", "prohibited" or "exclusive_thread"): an EXCLUSIVE_PROCESS GPU ran one job
    unless the jobs were MPS clients, a PROHIBITED one none; absent when the driver did not say
    (and in files from before it was recorded)."""

    index: int
    uuid: str | None = None
    name: str
    memory_total_mib: int | None = None  # None: the driver does not say (a unified-memory GPU)
    jobs: tuple[str, ...] = ()
    util_read: str | None = None
    util_sample_period_ms: float | None = None
    util_read_shares: Mapping[str, float] = field(default_factory=dict, metadata={"omit_if_default": True})
    utilization: UtilizationFigures | None = None
    compute_mode: str | None = None


@dataclass(frozen=True, kw_only=True)
class PhaseRecord:
    """`[jobs.phases.<phase>]`: a job's time in one phase and the GPU and CPU % meanwhile."""

    seconds: float
    gpu_util_mean: float | None = None
    cpu_percent_mean: float | None = None


@dataclass(frozen=True, kw_only=True)
class JobRecord:
    """`[[jobs]]`: one job as the run left it (or as it was at `updated_at`, while live).

    `mean_sps` is over the job's running time in its last session; `sps_window` (the live
    throughput over recent whole rollout + train cycles) and `eta_s` (seconds to its target at that
    rate) are as they were when the file was written, absent when unknown or the job was not
    training; `peak_gpu_mem_mib`, `cpu_percent_mean` and `peak_rss_mib` (the job's process tree)
    come from the sampler, and so does `gpu_sm_percent_mean`, the mean of its processes' SM % over
    NVML's per-process readings (absent when NVML gave none: no GPU, or a container without the
    host's PIDs); `phases` is keyed by phase name (rollout, train).

    `memory` is the leak watch's verdict on the job's memory (`cockpit.core.telemetry.memwatch`): "no
    growth", or "memory growing: +N MiB/h" for its RSS and/or "GPU memory growing: +N MiB/h"
    (joined by "; "), or "not judged: M of 13 min watched" for a job whose worker ran too briefly;
    absent in files from before the watch. `memory_growth_mib_h` and `gpu_memory_growth_mib_h`
    are the flagged growth rates, absent unless that memory keeps growing.

    `gpu` is the NVML index of the GPU its worker ran on last and `gpu_uuid` that GPU's UUID,
    both absent without a GPU (or in files from before placement).

    `target_episodes` is the job's episode target (absent for a step target, whose `target` is in
    steps; with an episode target `target` is 0), `episodes` the whole episodes it has finished
    (across restarts, as of its newest report), and `episodes_per_h` its live episode rate over
    the same window as `sps_window` (absent when unknown or not training).

    `preset` is the preset the user named for a job whose own differs from the run's (a fleet's
    agent: the plan's `cartpole`, not the file written for its overrides) and `overrides` what the
    agent changes of it, each value as written (`learning_rate = "0.001"`); both absent for a
    plain run's jobs and in files from before them.
    """

    id: str
    seed: int
    status: JobState
    exit_reason: str | None = None
    error: str | None = None
    steps: int
    target: int
    duration_s: float | None = None
    mean_sps: float | None = None
    sps_window: float | None = None
    eta_s: float | None = None
    final_ep_rew_mean: float | None = None
    restarts: int
    checkpoints: int
    last_checkpoint_step: int | None = None
    peak_gpu_mem_mib: int | None = None
    gpu_sm_percent_mean: float | None = None
    cpu_percent_mean: float | None = None
    peak_rss_mib: float | None = None
    memory: str | None = None
    memory_growth_mib_h: float | None = None
    gpu_memory_growth_mib_h: float | None = None
    target_episodes: int | None = None
    episodes: int | None = None
    episodes_per_h: float | None = None
    gpu: int | None = None
    gpu_uuid: str | None = None
    preset: str | None = field(default=None, metadata={"omit_if_default": True})
    overrides: Mapping[str, str] = field(default_factory=dict, metadata={"omit_if_default": True})
    phases: Mapping[str, PhaseRecord] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class UtilizationRecord(UtilizationFigures):
    """`[utilization]`: the run's `UtilizationFigures` over every GPU's samples, and the sampler's
    own cost."""

    sampler_ticks: int
    sampler_cost_ms_mean: float | None = None


@dataclass(frozen=True, kw_only=True)
class AdviceRecord:
    """`[[advice]]`: one change made to the live run, at `at`.

    `--auto`'s decisions (`action` add, keep, remove, stop) carry the jobs and SPS before and after
    and the reason; applied advice (`action` "apply") carries the setting and its suggested value.
    """

    at: str
    action: str
    jobs_before: int | None = None
    jobs_after: int | None = None
    sps_before: float | None = None
    sps_after: float | None = None
    reason: str | None = None
    setting: str | None = None
    suggested: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """The whole of run.toml. `ended_at` is absent while the run is live; `gpu`, `preset` and
    `utilization` are None only in files that lack those tables. `eta_s` is the seconds until
    every agent, queued ones included, would reach its target, as estimated when the file was
    written (absent when unknown). `gpus` is every GPU sampled (empty without one, and in files
    from before it was recorded). `name` is the run's name (`--name`, or a fleet plan's `name`),
    absent for a run without one and in files written before runs had names."""

    schema_version: int = SCHEMA_VERSION
    name: str | None = None
    command: str
    status: RunStatus
    started_at: str
    ended_at: str | None = None
    updated_at: str
    duration_s: float
    eta_s: float | None = None
    # While live: `waiting for disk: N MiB free, needs M MiB` when jobs paused by a full disk wait
    # for space (`--disk-wait`); absent otherwise.
    disk_wait: str | None = None
    config: ConfigRecord
    host: HostRecord
    gpu: GpuRecord | None = None
    preset: Preset | None = None
    jobs: tuple[JobRecord, ...] = ()
    utilization: UtilizationRecord | None = None
    gpus: tuple[GpuUseRecord, ...] = field(default=(), metadata={"omit_if_default": True})
    warnings: tuple[str, ...] = ()
    advice: tuple[AdviceRecord, ...] = ()


# ----- rendering -----


def _plain(value: Any) -> Any:
    """Records as TOML-ready data in field order; None (an unknown fact) becomes an absent key, and
    so does a field marked `omit_if_default` in its metadata while it holds its default (a key added
    later, such as a preset's env_kwargs, then leaves the files that do not use it as they were)."""
    if isinstance(value, ConfigRecord):
        return {key: _plain(v) for key, v in value.written()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kept = (f for f in _keys(value) if not _at_omitted_default(value, f))
        pairs = ((f.name, getattr(value, f.name)) for f in kept)
        return {name: _plain(v) for name, v in pairs if v is not None}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value if v is not None]
    return value


def _keys(record: Any) -> list[dataclasses.Field[Any]]:
    """The fields of a record (or record class) that the file holds: all but the run settings that
    are not recorded (`ConfigRecord` is a `RunSettings`, whose `run_dir` or `name` has its own place
    or none)."""
    return [f for f in dataclasses.fields(record) if not unrecorded(f)]


def _at_omitted_default(record: Any, f: dataclasses.Field[Any]) -> bool:
    if not f.metadata.get("omit_if_default"):
        return False
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return bool(getattr(record, f.name) == default)


def render(record: RunRecord) -> str:
    """The text of run.toml for `record`: the only place that writes the format."""
    return tomli_w.dumps(_plain(record))


def write(run_dir: Path, record: RunRecord) -> None:
    """Write `record` as `run_dir`'s run.toml atomically (a reader sees the old or the new file,
    never a torn one); OSError when it cannot be written."""
    write_atomic(RunDir(run_dir).run_toml, render(record))


# ----- reading -----


class _Invalid(ValueError):
    """A value of the wrong type; the message names the key."""


R = TypeVar("R")

_KINDS: dict[type, str] = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _decode(cls: type[R], data: Any, where: str) -> R:
    """A record of type `cls` from a TOML table: each field checked against its type hint."""
    if not isinstance(data, Mapping):
        raise _Invalid(f"{where or 'run.toml'}: expected a table, got {data!r}")
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in _keys(cls):
        key = f"{where}.{f.name}" if where else f.name
        if f.name in data:
            values[f.name] = _value(hints[f.name], data[f.name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _Invalid(f"missing key {key}")
    return cls(**values)


def _value(hint: Any, value: Any, key: str) -> Any:
    """`value` checked (and converted: lists to tuples, strings to enums) against `hint`."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:  # free-form TOML data (a preset's env_kwargs): taken as written
        return value
    if origin in (Union, types.UnionType):
        # Only `X | None` occurs, and TOML has no null: the value is an X.
        (inner,) = (arg for arg in args if arg is not type(None))
        return _value(inner, value, key)
    if origin is Literal:
        if value not in args:
            raise _Invalid(f"{key}: expected one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise _Invalid(f"{key}: expected an array, got {value!r}")
        return tuple(_value(args[0], item, f"{key}[{i}]") for i, item in enumerate(value))
    if origin in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise _Invalid(f"{key}: expected a table, got {value!r}")
        return {str(k): _value(args[1], v, f"{key}.{k}") for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _decode(hint, value, key)
    if isinstance(hint, type) and issubclass(hint, Enum):
        try:
            return hint(value)
        except ValueError:
            choices = ", ".join(repr(member.value) for member in hint)
            raise _Invalid(f"{key}: expected one of {choices}, got {value!r}") from None
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Invalid(f"{key}: expected {_KINDS[float]}, got {value!r}")
        return float(value)
    if hint in _KINDS:
        # bool is an int in Python, not in TOML: `jobs = true` is no job count.
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            raise _Invalid(f"{key}: expected {_KINDS[hint]}, got {value!r}")
        return value
    raise TypeError(f"run.toml field {key}: no reader for {hint!r}")  # a record this module cannot read


def _version(doc: Mapping[str, Any], source: str) -> int:
    version = doc.get("schema_version", 1)  # files from before the key existed are version 1
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RunRecordError(
            f"{source}: invalid {RUN_TOML}: schema_version: expected a positive integer, got {version!r}"
        )
    if version > SCHEMA_VERSION:
        raise RunRecordError(
            f"{source}: {RUN_TOML} written by a newer cockpit (schema_version {version}; this cockpit reads "
            f"up to {SCHEMA_VERSION}): upgrade cockpit"
        )
    return version


def parse(text: str, source: str) -> RunRecord:
    """The RunRecord in run.toml's `text`; `source` (the run directory, as the user named it)
    starts every error message. RunRecordError (one line) for text that is not TOML, a newer
    schema version, a missing key or a value of the wrong type (naming the key)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RunRecordError(f"{source}: unreadable {RUN_TOML}: {' '.join(str(exc).split())}") from None
    _version(doc, source)
    try:
        return _decode(RunRecord, {**doc, "schema_version": SCHEMA_VERSION}, "")
    except _Invalid as exc:
        raise RunRecordError(f"{source}: invalid {RUN_TOML}: {' '.join(str(exc).split())}") from None


def read(run_dir: Path) -> RunRecord:
    """The RunRecord of the run in `run_dir`; RunRecordError (one line, starting with `run_dir`)
    when there is no run.toml (not a run directory), it cannot be read, or `parse` refuses it."""
    path = RunDir(run_dir).run_toml
    if not path.is_file():
        raise RunRecordError(f"{run_dir}: not a run directory (no {RUN_TOML}; runs live in runs/<time>-<preset>-<env>)")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RunRecordError(f"{run_dir}: unreadable {RUN_TOML}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise RunRecordError(f"{run_dir}: unreadable {RUN_TOML}: not UTF-8 text ({exc.reason})") from None
    return parse(text, str(run_dir))
