"""A validated run: what `cockpit run` will do, checked completely before anything starts."""

from __future__ import annotations

import dataclasses
import importlib.util
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.contract.envids import EnvError, check_env
from cockpit.contract.presets import Preset, PresetError, load
from cockpit.contract.rundir import RunDir, RunNameError, check_run_name, stamped
from cockpit.contract.scriptargs import ScriptError, check_template
from cockpit.contract.settings import RunSettings, decode, spec_values

MAX_SEED = 2**31 - 1
# The default stall timeout (no --stall-timeout): this many times the job's longest silence so far,
# and never less than STALL_MIN_S. A worker reports at least every second in a rollout and every
# few seconds in a train phase (heartbeats), so its silences are short unless it is hung; the
# floor covers a first checkpoint or a slow step before any history exists.
STALL_FACTOR = 3.0
STALL_MIN_S = 60.0


class ConfigError(ValueError):
    """Input that cannot start a run; the message is one line naming the flag, file or key."""


@dataclass(frozen=True)
class RestartPolicy:
    """When a crashed job is started again, as data (supervisord's retries, back-off and startsecs).

    The n-th restart in a row waits `backoff_s · 2^(n-1)` seconds, at most `backoff_max_s`. After
    `max_restarts` restarts in a row the next crash marks the job failed. A job that ran at least
    `healthy_uptime_s` before it crashed starts its count again: a week-long job that crashes now
    and then, each time after hours of healthy training, is never failed for it.

    A running job whose worker has written no event for `stall_timeout_s` seconds is stalled: it is
    killed (process group and all) and restarted like a crash, and that counts against
    `max_restarts`. None (the default) derives the timeout from the job itself: `STALL_FACTOR`
    times its longest silence between two events so far, at least `STALL_MIN_S`, so a job whose
    phases are slow is never called stalled for being slow.

    A job paused because the disk filled up waits for space at most `disk_wait_s` seconds
    (`--disk-wait`; None: no limit, 0: no wait) and goes on by itself once there is room
    (`cockpit.core.supervise.disk_wait`).
    """

    max_restarts: int = RunSettings.max_restarts
    healthy_uptime_s: float = RunSettings.healthy_uptime_s
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    stall_timeout_s: float | None = None
    disk_wait_s: float | None = None

    def stall_timeout(self, longest_silence_s: float) -> float:
        """Seconds without an event after which a job whose longest silence so far was
        `longest_silence_s` is stalled: `stall_timeout_s` when set, else the derived default."""
        if self.stall_timeout_s is not None:
            return self.stall_timeout_s
        return max(STALL_MIN_S, STALL_FACTOR * longest_silence_s)


LOCAL_RAY = "local"  # `--ray` without an address: a Ray instance on this machine, for the run
RAY_INSTALL_HINT = "pip install 'cockpit[ray]'"


@dataclass(frozen=True)
class Cluster:
    """Where a `--ray` run's jobs go: the cluster at `address` (None: a local Ray instance started
    for the run), and `storage`, the directory every node mounts at the same path, which holds
    the run directory (job dirs, checkpoints) when given."""

    address: str | None
    storage: Path | None = None


@dataclass(frozen=True, kw_only=True)
class RunSpec(RunSettings):
    """Everything a run needs, validated: its settings (a `RunSettings`, each declared once in
    `cockpit.contract.settings`, where each one's help says what it does), checked and resolved by
    `build_spec`, and what they resolved to.

    `agents` jobs with seeds `seed … seed + agents - 1` go through a queue, at most `jobs` at once.
    `preset` is what workers get as `--preset` (a built-in name or an absolute file path), and
    `loaded_preset` that preset read (with `env` the env id it trains on, the preset's unless
    `--env` named another).
    `script`, when set, is the user's command template that each job runs instead of cockpit's
    worker (`cockpit.contract.scriptargs`); there is then no `loaded_preset`, `preset` and `env` are
    empty, and `timesteps` is 0 (a script that reports through CockpitCallback gives its own).
    `episodes`, when set, is an episode target per agent (`--episodes`) in place of a step target:
    `timesteps` is then 0, and each job stops after the rollout in which its `episodes`-th whole
    episode ended.
    `run_dir` is where the run goes, defaulted (a stamped `runs/` directory) when not given, and
    `name` the checked `--name` (`rundir.check_run_name`).
    `gpus` (`--gpus 0,2`) are the NVML indices of the GPUs the run samples and places jobs on,
    sorted, among those the cockpit's `CUDA_VISIBLE_DEVICES` leaves it; None: every one it leaves.
    `devices` (`--devices 2:cuda,1:cpu`) is the device each parallel slot's jobs train on, one per
    slot; None: the worker's choice (cuda where there is a GPU).
    `command_line` is the cockpit's own, as run.toml records it, and `cluster`, when set (`--ray`),
    the Ray cluster the jobs run on instead of this machine.
    """

    jobs: int
    agents: int
    preset: str
    env: str
    timesteps: int
    run_dir: Path
    command_line: tuple[str, ...]
    loaded_preset: Preset | None = None
    cluster: Cluster | None = None

    @property
    def restart(self) -> RestartPolicy:
        """When a crashed, stalled or paused job is started again (`--max-restarts`,
        `--healthy-uptime`, `--stall-timeout`, `--disk-wait`)."""
        return RestartPolicy(
            self.max_restarts, self.healthy_uptime_s, stall_timeout_s=self.stall_timeout_s, disk_wait_s=self.disk_wait_s
        )

    @property
    def slots(self) -> int:
        """Workers that can run at the same time."""
        return min(self.jobs, self.agents)

    @property
    def seeds(self) -> list[int]:
        """One seed per agent."""
        return [self.seed + i for i in range(self.agents)]


def default_run_dir(preset: Preset, env: str, now: float | None = None) -> Path:
    """`runs/<UTC time>-<preset>-<env>`; the env id's slashes and a `module:EnvId`'s colon become
    dashes (a colon in a path breaks PATH-like lists and some tools)."""
    return stamped(f"{preset.name}-{env.replace('/', '-').replace(':', '-')}", now)


def script_run_dir(script: tuple[str, ...], now: float | None = None) -> Path:
    """`runs/<UTC time>-script-<name>`: the name of the script a Python command runs
    (`python train.py` gives `train`), else of the program."""
    named = script[1] if len(script) > 1 and script[1].endswith(".py") else script[0]
    return stamped(f"script-{Path(named).stem}", now)


def checked_name(name: str | None) -> str | None:
    """`--name`, checked (`rundir.check_run_name`); ConfigError (one line) for an unsafe one."""
    if name is None:
        return None
    try:
        return check_run_name(name)
    except RunNameError as exc:
        raise ConfigError(str(exc)) from None


def check_writable(run_dir: Path, flag: str = "--run-dir") -> None:
    """Raise ConfigError unless `run_dir` exists as a writable directory or could be created."""
    probe = run_dir
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"{flag} {run_dir}: {probe} is a file, not a directory")
    # Try it rather than trust os.access: root passes access checks on read-only or virtual mounts.
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise ConfigError(
            f"{flag} {run_dir}: cannot write in {probe} ({exc.strerror or exc}); choose a directory you can write to"
        ) from exc


def checked_env(preset: Preset, env: str | None) -> str:
    """The env id to train on (`env`, else the preset's); ConfigError naming where the id came
    from (--env or the preset) when neither envpool nor gymnasium has it, when a `module:EnvId`
    module fails to import or registers no such id, or when the env does not build with the
    preset's env_kwargs (`envids.check_env`: a custom env, or any env with env_kwargs, is built
    once here, in this process, before anything starts)."""
    env_id = env or preset.env
    try:
        check_env(
            env_id,
            preset.env_kwargs,
            source="--env" if env else f"preset {preset.source}: env",
            kwargs_source=f"preset {preset.source}: env_kwargs",
        )
    except EnvError as exc:
        raise ConfigError(str(exc)) from exc
    return env_id


def checked_gpus(
    gpus: tuple[int, ...] | None, here: Sequence[int] | None, visible_by: str = ""
) -> tuple[int, ...] | None:
    """`--gpus`, sorted, checked against `here`, the indices of the GPUs the run may use (None: no
    GPU telemetry, nothing to check against: the run goes on CPU-only and says so): those NVML
    sees, or those `visible_by` (`CUDA_VISIBLE_DEVICES='1'`, "" when unset) leaves the run.
    ConfigError (one line) for an index not among them."""
    if gpus is None:
        return None
    text = ",".join(map(str, gpus))
    missing = [index for index in gpus if here is not None and index not in here]
    if missing and here is not None:
        if visible_by:
            left = f"GPU(s) {','.join(map(str, sorted(here)))}" if here else "no GPU"
            raise ConfigError(
                f"--gpus {text}: GPU {missing[0]} is not visible to this run; {visible_by} leaves it {left}"
            )
        span = f"0-{len(here) - 1}" if list(here) == list(range(len(here))) else ",".join(map(str, sorted(here)))
        raise ConfigError(f"--gpus {text}: no GPU {missing[0]} here; NVML sees {len(here)} GPU(s), indices {span}")
    if len(set(gpus)) != len(gpus):
        raise ConfigError(f"--gpus {text}: name each GPU once")
    return tuple(sorted(gpus))


def checked_devices(devices: tuple[str, ...] | None, jobs: int, here: Sequence[int] | None) -> tuple[str, ...] | None:
    """`--devices`, one device per slot, checked against `jobs` (`--jobs`) and `here`, the GPUs the
    run may use (None or empty: no GPU, so no `cuda` job). ConfigError (one line) otherwise."""
    if devices is None:
        return None
    text = ",".join(f"{devices.count(d)}:{d}" for d in dict.fromkeys(devices))
    if len(devices) != jobs:
        raise ConfigError(
            f"--devices {text}: names {len(devices)} parallel job(s) and --jobs is {jobs}; make the "
            "counts add up to --jobs, or leave --jobs out"
        )
    if "cuda" in devices and not here:
        raise ConfigError(f"--devices {text}: no GPU for the cuda jobs here; use {jobs}:cpu, or leave --devices out")
    return devices


def build_spec(
    settings: RunSettings,
    *,
    command_line: tuple[str, ...],
    resuming: bool = False,
    gpus_here: Sequence[int] | None = None,
    visible_by: str = "",
) -> RunSpec:
    """Validate a run's `settings` into a RunSpec; raises ConfigError (one line). `settings.jobs` and
    `settings.preset` are the command's to decide when the user gave none (a script run's preset
    may be empty).

    `timesteps` and `episodes` are the two kinds of target, never both; with neither the preset's
    `timesteps` applies (every preset has one). An episode target replaces it.

    A new run refuses a run dir that already holds a run log; `resuming` expects one. With
    `script` (the command after `--`), `preset`, `env` and `timesteps` are not checked: the caller
    refuses them with a script, and the jobs run the command instead. A `name` (`--name`) must be
    a safe path component; without `run_dir` the run goes to `runs/<UTC time>-<name>`. `gpus`
    (`--gpus`) is checked against `gpus_here`, the GPUs the run may use (`checked_gpus`), and so
    are `devices` (`--devices`, `checked_devices`), one per slot, which `visible_by` (the
    cockpit's `CUDA_VISIBLE_DEVICES`, "" when unset) chose. `mps` (`--mps`) is recorded as
    given: whether this machine can run it is the command's to check
    (`cockpit.core.machine.mps_daemon.refusal`), since that takes the GPUs and the daemon's pipes.
    `on_done` (`--on-done`) must hold a command, not blanks.
    """
    s = settings
    if s.jobs is None or s.preset is None:
        raise ValueError("build_spec: the command decides --jobs and --preset when the user gives none")
    if s.on_done is not None and not s.on_done.strip():
        raise ConfigError("--on-done: give a shell command to run when the run ends, e.g. --on-done 'echo done'")
    name = checked_name(s.name)
    gpus = checked_gpus(s.gpus, gpus_here, visible_by)
    devices = checked_devices(s.devices, s.jobs, gpus_here)
    if s.timesteps is not None and s.episodes is not None:
        raise ConfigError(f"--episodes {s.episodes}: a run's target is --timesteps or --episodes, not both")
    run_dir = s.run_dir if s.run_dir is not None or name is None else stamped(name)
    checked = {**spec_values(s), "name": name, "gpus": gpus, "devices": devices}
    if s.script is not None:
        return _script_spec(s, checked, run_dir, command_line=command_line, resuming=resuming)
    try:
        resolved = load(s.preset)
    except PresetError as exc:
        raise ConfigError(str(exc)) from exc
    preset_arg = (
        str(Path(s.preset).resolve()) if resolved.source.endswith(".toml") and Path(s.preset).is_file() else s.preset
    )
    env_id = checked_env(resolved, s.env)
    n_agents = s.agents or s.jobs
    if s.seed + n_agents - 1 + resolved.n_envs > MAX_SEED:
        raise ConfigError(
            f"--seed {s.seed}: with {n_agents} agents of {resolved.n_envs} envs it must be at most "
            f"{MAX_SEED - resolved.n_envs - n_agents + 1} (env seeds are 32-bit)"
        )
    directory = run_dir or default_run_dir(resolved, env_id)
    _check_run_dir(directory, resuming)
    # Every setting as checked; those `build_spec` resolves (a default it decides, a preset's value)
    # in place of what was given.
    return RunSpec(
        **{
            **checked,
            "agents": n_agents,
            "preset": preset_arg,
            "env": env_id,
            "timesteps": 0 if s.episodes is not None else s.timesteps or resolved.timesteps,
            "run_dir": directory,
        },
        loaded_preset=resolved,
        command_line=command_line,
    )


def handed(text: str) -> RunSettings:
    """The settings `--spec JSON` hands a background `run` or `fleet` (`settings.encode` of the spec
    the cockpit that started it validated); ConfigError (one line) when `text` is not their JSON."""
    try:
        return decode(text)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"--spec: expected the JSON object of run settings a cockpit hands its background run ({exc})"
        ) from None


def _script_spec(
    s: RunSettings, checked: dict[str, Any], run_dir: Path | None, *, command_line: tuple[str, ...], resuming: bool
) -> RunSpec:
    """The RunSpec of a script run (`build_spec` with `script`), from its `checked` settings: its
    template and seeds checked, its run dir defaulted and checked."""
    assert s.script is not None and s.jobs is not None
    try:
        check_template(s.script)
    except ScriptError as exc:
        raise ConfigError(str(exc)) from exc
    agents = s.agents or s.jobs
    if s.seed + agents - 1 > MAX_SEED:
        raise ConfigError(f"--seed {s.seed}: with {agents} agents it must be at most {MAX_SEED - agents + 1}")
    directory = run_dir or script_run_dir(s.script)
    _check_run_dir(directory, resuming)
    # A script trains no preset of cockpit's and has no step target of its own here.
    resolved = {"agents": agents, "preset": "", "env": "", "timesteps": 0, "run_dir": directory}
    return RunSpec(**{**checked, **resolved}, command_line=command_line)


def _check_run_dir(directory: Path, resuming: bool) -> None:
    check_writable(directory)
    if RunDir(directory).run_toml.exists() and not resuming:
        raise ConfigError(f"--run-dir {directory}: already holds a run; continue it with --resume {directory}")


def on_cluster(spec: RunSpec, ray: str | None, storage: Path | None, *, run_dir_given: bool) -> RunSpec:
    """`spec` run on Ray (`--ray [ADDRESS]`: `ray` is "local" or the address) with `--storage`;
    the spec itself without `ray` or `storage`. With `storage` the run directory is on it: a run
    directory of the user's (`run_dir_given`) must be inside it, the default one goes there.
    ConfigError (one line) for `--storage` without `--ray`, a storage that is not a directory, a
    run directory outside it, `--gpus`, `--pin` or `--mps` with `--ray`, and `--ray` without the ray package."""
    if ray is None:
        if storage is not None:
            raise ConfigError(f"--storage {storage}: only with --ray, where it is the directory the nodes share")
        return spec
    if ray != LOCAL_RAY and ray != "auto" and ":" not in ray:
        raise ConfigError(
            f"--ray {ray}: expected a Ray head's HOST:PORT, ray://HOST:PORT or auto (or nothing: "
            "a local instance; then put --ray after any positional argument)"
        )
    # This machine's GPUs and cores are not where the jobs run: the cluster places each actor.
    local_only = [
        flag for flag, given in (("--gpus", spec.gpus is not None), ("--pin", spec.pin), ("--mps", spec.mps)) if given
    ]
    if local_only:
        raise ConfigError(
            f"{', '.join(local_only)}: places jobs on this machine's GPUs or cores; with --ray the "
            "cluster places them: drop it"
        )
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(f"--ray: Ray is not installed: {RAY_INSTALL_HINT}")
    run_dir = spec.run_dir
    if storage is not None:
        if not storage.is_dir():
            raise ConfigError(f"--storage {storage}: no such directory (give the directory every node mounts)")
        storage = storage.resolve()
        if not run_dir_given:
            run_dir = storage / run_dir
            check_writable(run_dir, "--storage")  # the user gave no --run-dir: name the flag they did give
        elif not run_dir.resolve().is_relative_to(storage):
            raise ConfigError(
                f"--run-dir {run_dir}: with --storage {storage} the run lives on the storage; give a directory in it"
            )
    cluster = Cluster(None if ray == LOCAL_RAY else ray, storage)
    return dataclasses.replace(spec, run_dir=run_dir, cluster=cluster)
