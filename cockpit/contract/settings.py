"""A run's settings, each declared once: `RunSettings`, one field per setting.

A field's type and default are the setting's; its `Setting` (the field's metadata) holds the rest:
its flag, argparse type, metavar and help, which commands take it, whether `--resume` keeps it and
whether run.toml's `[config]` records it. Every form the setting takes is made from that one
declaration (CleanRL's `Args` dataclass, parsed by tyro):

- the `run` and `fleet` flags (`add_flags`, by section), and what they parsed (`RunSettings.from_args`);
- the validated spec: `runspec.RunSpec` is a `RunSettings` whose fields `build_spec` checked and
  resolved, so a new setting is a field of every spec, as validated, with nothing more to write;
- the background child's arguments: the spec as data (`spec_values`, sent as `--spec JSON` and read
  back with `RunSettings.from_values`), not a command line spelled again;
- run.toml's `[config]`: `runrecord.ConfigRecord` is a `RunSettings` too, and records each setting
  declared `recorded` under its field's name (`recorded_values`), read back typed by its type hint;
- what `--resume` reads back (`resumed`), by each setting's `resume`.

Adding a setting is its field here, its use (`spec.<field>`), and its line in docs/run.md.

Imports nothing of cockpit's but `arguments` and `rundir`: the command line loads this before any
command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cockpit.contract.arguments import (
    device_mix,
    gpu_indices,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from cockpit.contract.rundir import RUN_NAME_RULE

Command = Literal["run", "fleet"]
# What `--resume` does with a setting: "fixed", the recorded value, and the flag given again is refused
# (where it can be told from its default); "kept", the recorded value unless the flag is given again;
# "fresh", not recorded for a resume: each session takes the flag as given.
Resume = Literal["fixed", "kept", "fresh"]
# Where a setting's flag sits in `--help`, among the command's other flags: what is trained and where
# it goes, how the jobs run on the machine, when a failed job restarts, and what happens at the end.
Section = Literal["work", "machine", "restarts", "end"]


@dataclass(frozen=True)
class Setting:
    """One run setting's declaration, beside its `RunSettings` field (which holds its type and default).

    `flag` is its option (None: not a flag: a script's command, after `--`), in `section` of the
    command's `--help` (in declaration order there), `parse` the argparse
    type that checks a value (one line and exit 2 otherwise), `help` its help for `run` and
    `fleet_help` for `fleet` (None: `run`'s), `commands` those that take it. `negated`: the flag is
    `--no-X`, a store_true whose field is its opposite. `group`: the flags of one group are
    mutually exclusive. `worker`: a setting of cockpit's own worker, refused with a script.
    `resume` (`Resume`) is what `--resume` does with it, and `recorded` whether run.toml's `[config]`
    records it under the field's name."""

    flag: str | None
    help: str = ""
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    fleet_help: str | None = None
    commands: frozenset[Command] = frozenset({"run"})
    negated: bool = False
    group: str | None = None
    worker: bool = False
    resume: Resume = "fixed"
    recorded: bool = True
    section: Section = "work"

    @property
    def dest(self) -> str:
        """The argparse attribute the flag parses into (`--max-restarts`: `max_restarts`)."""
        assert self.flag is not None
        return self.flag.removeprefix("--").replace("-", "_")


def _setting(default: Any, setting: Setting) -> Any:
    return field(default=default, metadata={"setting": setting})


MPS_HELP = (
    "run the jobs on each GPU as clients of NVIDIA's Multi-Process Service, whose kernels then run side by side "
    "rather than in turns: uses an MPS daemon already running (anyone's), else starts one per GPU in the run "
    "directory and stops them at the end. Needs nvidia-cuda-mps-control and a Volta or newer GPU. One client's "
    "fatal fault ends every job on that GPU; they restart from their checkpoints (docs/gpu.md)"
)
BOTH: frozenset[Command] = frozenset({"run", "fleet"})


# fmt: off
@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """The settings of a run, as given (None: not given, the command's default) or as a `RunSpec` holds
    them once validated; `runspec.build_spec` checks them into a `RunSpec`. Fields are in the order
    `--help` lists them within their section, which is also the order a refusal names them in."""

    jobs: int | None = _setting(None, Setting(
        "--jobs", "workers running at once (default: 2)", positive_int, "N",
        fleet_help="parallel slots (default: the plan's jobs)", commands=BOTH, resume="kept"))
    agents: int | None = _setting(None, Setting(
        "--agents", "agents to train in all, seeds S..S+M-1 (default: N)", positive_int, "M"))
    preset: str | None = _setting(None, Setting(
        "--preset", "preset name or .toml file (default: heavy with a GPU, cartpole without)", None, "P",
        worker=True))
    env: str | None = _setting(None, Setting(
        "--env", "environment id (default: the preset's env)", None, "ENV", worker=True))
    timesteps: int | None = _setting(None, Setting(
        "--timesteps", "steps per agent (default: the preset's)", positive_int, "T", group="target", worker=True))
    episodes: int | None = _setting(None, Setting(
        "--episodes", "whole episodes per agent (whole games on Atari) instead of steps: each job stops after "
        "training the rollout in which its N-th episode ended, across restarts; the preset's timesteps then do "
        "not apply", positive_int, "N", group="target", worker=True))
    seed: int = _setting(0, Setting(
        "--seed", "first agent's seed (default: 0)", non_negative_int, "S"))
    eval_episodes: int | None = _setting(None, Setting(
        "--eval-episodes", "once each job reaches its target, score its model over N deterministic episodes on a "
        "separate env with a fixed seed (an `evaluated` event: `cockpit export mlflow` logs it as eval/mean_reward; "
        "default: no evaluation); a resumed run keeps it", positive_int, "N", worker=True, resume="kept"))
    run_dir: Path | None = _setting(None, Setting(  # noqa: RUF009 (the default is None; the call declares)
        "--run-dir", "where the run goes (default: runs/<UTC time>-<name> with --name, else "
        "runs/<UTC time>-<preset>-<env>)", Path, "DIR",
        fleet_help="where the fleet goes (default: runs/<UTC time>-NAME with --name, else "
        "runs/<UTC time>-fleet-<plan name>)", commands=BOTH, recorded=False))
    name: str | None = _setting(None, Setting(
        "--name", "name the run: its directory (runs/<UTC time>-NAME), the cockpit's header, run.toml, and "
        f"`cockpit attach NAME` (the newest run of that name); {RUN_NAME_RULE}", None, "NAME",
        fleet_help="the fleet's run name instead of the plan's name: its directory (runs/<UTC time>-NAME), header, "
        f"run.toml and `cockpit attach NAME`; {RUN_NAME_RULE}", commands=BOTH, recorded=False))
    pin: bool = _setting(False, Setting("--pin", "pin each parallel slot to its own CPU cores", section="machine"))
    gpus: tuple[int, ...] | None = _setting(None, Setting(
        "--gpus", "the GPUs to sample and place jobs on, by NVML index as nvidia-smi numbers them, among those "
        "CUDA_VISIBLE_DEVICES leaves (default: every one it leaves; each job runs on one, the only one its "
        "worker sees)", gpu_indices, "I,J", commands=BOTH, resume="kept", section="machine"))
    devices: tuple[str, ...] | None = _setting(None, Setting(
        "--devices", "which device each parallel job trains on, e.g. 2:cuda,1:cpu (the counts add up to --jobs, "
        "which they set when it is not given; default: cuda where there is a GPU); `cockpit recommend` names the "
        "fastest mix it measured", device_mix, "N:DEV,...", worker=True, resume="kept", section="machine"))
    mps: bool = _setting(False, Setting(
        "--mps", MPS_HELP, fleet_help=MPS_HELP + " (a plan's mps = true does the same)", commands=BOTH,
        resume="kept", section="machine"))
    tensorboard: bool = _setting(True, Setting(
        "--no-tensorboard", "no TensorBoard logs (default, with the tensorboard package: each job's SB3 scalars and "
        "the cockpit's SPS, CPU %% and GPU utilization by phase in RUN_DIR/jobs/<id>/tb, for tensorboard "
        "--logdir RUN_DIR)",
        fleet_help="no TensorBoard logs (default, with the tensorboard package: each agent's SB3 scalars and the "
        "cockpit's in RUN_DIR/jobs/<id>/tb)", commands=BOTH, negated=True, resume="fresh",
        recorded=False, section="machine"))
    video_every: int | None = _setting(None, Setting(
        "--video-every", "record a short clip of each job playing once its checkpoint passes each multiple of STEPS "
        "steps: from that checkpoint, in a process of its own at low priority (never in the worker), into "
        "RUN_DIR/jobs/<id>/videos/<checkpoint>.mp4 and the job's TensorBoard (cockpit/video); needs "
        "cockpit[video] (default: no clips); a resumed run keeps it", positive_int, "STEPS", commands=BOTH,
        resume="kept", section="machine"))
    max_restarts: int = _setting(3, Setting(
        "--max-restarts", "restarts in a row of a crashed job before it is marked failed (default: 3; back-off 1 s, "
        "2 s, 4 s... up to 60 s); see --healthy-uptime", non_negative_int, "K",
        fleet_help="restarts in a row before an agent fails (default: 3)", commands=BOTH, resume="kept",
        section="restarts"))
    healthy_uptime_s: float = _setting(300.0, Setting(
        "--healthy-uptime", "seconds after which a crash no longer counts as a crash loop: a crashed job that had "
        "run this long restarts with a fresh count of --max-restarts (default: 300)", positive_float, "S",
        resume="kept", section="restarts"))
    stall_timeout_s: float | None = _setting(None, Setting(
        "--stall-timeout", "seconds without an event from a running worker (hung, or stopped by a signal) after "
        "which it is killed and restarted from its checkpoint, as a crash counted by --max-restarts (default: 3x "
        "the job's longest silence between events so far, at least 60 s; a worker reports every few seconds, "
        "in train phases too)", positive_float, "S", commands=BOTH, resume="kept", section="restarts"))
    disk_wait_s: float | None = _setting(None, Setting(
        "--disk-wait", "seconds to wait, the jobs paused, for disk space after the disk filled up: every 5 s the "
        "cockpit reads the space free, and once there is room for the paused jobs' checkpoints they go on from "
        "them by themselves; past the wait the run ends failed (default: no limit; 0: a full disk ends the run "
        "once every job has stopped); a resumed run keeps it", non_negative_float, "S", commands=BOTH,
        resume="kept", section="restarts"))
    on_done: str | None = _setting(None, Setting(
        "--on-done", "shell command run once when the run ends done, failed or stopped (not when the cockpit is "
        "killed): it gets COCKPIT_RUN_STATUS (done, failed, stopped), COCKPIT_RUN_DIR, COCKPIT_RUN_NAME and "
        "COCKPIT_EXIT_CODE; its output goes to RUN_DIR/cockpit.log; a resumed run keeps it. E.g. --on-done "
        "'runpodctl stop pod $RUNPOD_POD_ID' stops a rented pod when its work is over", None, "CMD",
        commands=BOTH, resume="kept", section="end"))
    script: tuple[str, ...] | None = _setting(None, Setting(None))
    # fmt: on

    @classmethod
    def from_args(cls, args: argparse.Namespace, **given: Any) -> RunSettings:
        """The settings a command's flags parsed into `args` (a command that lacks a flag: its
        default), with `given` in place of what the command decides itself."""
        values = {name: value for name, _, value in _given(args)}
        return cls(**{**values, "script": getattr(args, "script", None), **given})

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> RunSettings:
        """The settings that rebuild a validated run from `spec_values` of its spec, or from run.toml's
        `[config]` (JSON's lists and strings back into tuples and paths; unknown keys ignored). A
        recorded episode target stands alone: the `timesteps` of such a run (0) is no target."""
        kept = {name: values[name] for name, _ in declared() if name in values}
        for name in ("gpus", "devices", "script"):
            if kept.get(name) is not None:
                kept[name] = tuple(kept[name])
        if kept.get("run_dir") is not None:
            kept["run_dir"] = Path(kept["run_dir"])
        if kept.get("episodes") is not None:
            kept["timesteps"] = None
        return cls(**kept)

    @staticmethod
    def given_again(args: argparse.Namespace, resume: Resume) -> Iterator[tuple[str, Setting, Any]]:
        """The settings of `resume` kind that the flags in `args` give along with `--resume`, as (field
        name, declaration, value): each one whose flag is on the command line, whatever its value."""
        return ((name, each, value) for name, each, value in _given(args) if each.resume == resume)


def _given(args: argparse.Namespace) -> Iterator[tuple[str, Setting, Any]]:
    """The settings whose flags are on the command line `args` parsed, as (field name, declaration,
    value). A flag's argparse default is None (a switch's, False) whatever its setting's default, so
    that a flag given is told from one left out even when its value is the default (`--seed 0`)."""
    for name, each in declared():
        if each.flag is None or not hasattr(args, each.dest):
            continue
        value = getattr(args, each.dest)
        if value is not None and value is not False:
            yield name, each, not value if each.negated else value


def declared() -> Iterator[tuple[str, Setting]]:
    """Every run setting, as (field name, declaration), in declaration order."""
    for each in dataclasses.fields(RunSettings):
        yield each.name, each.metadata["setting"]


def declared_recorded() -> Iterator[tuple[str, Setting]]:
    """The settings run.toml's `[config]` records, as (field name, declaration), in declaration order."""
    return ((name, each) for name, each in declared() if each.recorded)


def unrecorded(each: dataclasses.Field[Any]) -> bool:
    """Whether a dataclass field is a run setting that run.toml's `[config]` does not record (a
    `RunSettings` field declared `recorded=False`)."""
    declared = each.metadata.get("setting")
    return declared is not None and not declared.recorded


def setting(name: str) -> Setting:
    """The declaration of the setting `name` (a `RunSettings` field)."""
    return dict(declared())[name]


def add_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup, name: str, command: Command = "run") -> None:
    """Add the setting `name`'s flag to `command`'s parser (or a group of it), as declared."""
    declaration = setting(name)
    assert declaration.flag is not None and command in declaration.commands
    help_text = declaration.help if command == "run" or declaration.fleet_help is None else declaration.fleet_help
    default = _default(name)
    if isinstance(default, bool):  # a switch: `--pin`, or `--no-tensorboard` for a setting on by default
        parser.add_argument(declaration.flag, action="store_true", help=help_text)
        return
    # None, not the setting's default: a flag left out is told from one given (`_given`), and
    # `RunSettings` fills in the default.
    options: dict[str, Any] = {"default": None, "metavar": declaration.metavar, "help": help_text}
    if declaration.parse is not None:  # none: the text as given
        options["type"] = declaration.parse
    parser.add_argument(declaration.flag, **options)


def _default(name: str) -> Any:
    return next(each.default for each in dataclasses.fields(RunSettings) if each.name == name)


def add_flags(parser: argparse.ArgumentParser, command: Command, section: Section) -> None:
    """Add to `command`'s parser the flags of the settings it takes in `section`, in declaration
    order; the settings of one `group` go into one mutually exclusive group (both at once: one
    line and exit 2)."""
    groups: dict[str, argparse._MutuallyExclusiveGroup] = {}
    for name, each in declared():
        if each.flag is None or command not in each.commands or each.section != section:
            continue
        if each.group is None:
            add_flag(parser, name, command)
        else:
            add_flag(groups.setdefault(each.group, parser.add_mutually_exclusive_group()), name, command)


def spec_values(spec: RunSettings) -> dict[str, Any]:
    """A validated `RunSpec`'s settings as data, by field name: what the background child is handed
    (`RunSettings.from_values` reads it back) and, of the `recorded` settings, run.toml's `[config]`."""
    return {name: getattr(spec, name) for name, _ in declared()}


def recorded_values(spec: RunSettings) -> dict[str, Any]:
    """The settings run.toml's `[config]` records of `spec`, by key (the field's name)."""
    return {name: getattr(spec, name) for name, _ in declared_recorded()}


def encode(spec: RunSettings) -> str:
    """`--spec JSON`: a validated run's settings for the background child that carries it out."""
    return json.dumps(spec_values(spec), default=str)


def decode(text: str) -> RunSettings:
    """The settings `encode` wrote; ValueError when `text` is not its JSON object."""
    values = json.loads(text)
    if not isinstance(values, dict):
        raise ValueError("expected a JSON object of run settings")
    return RunSettings.from_values(values)


def resumed(config: RunSettings, name: str | None, run_dir: Path, command: Command = "run") -> RunSettings:
    """The settings a resume of `command` starts again with: each of its `fixed` or `kept` settings
    that run.toml's `[config]` (`config`, a `ConfigRecord`) recorded, unless it recorded none (an
    older file, or no such flag: the default then); the recorded run's `name` and its `run_dir`."""
    values: dict[str, Any] = {"run_dir": run_dir, "name": name}
    for key, each in declared():
        if each.resume != "fresh" and each.recorded and command in each.commands:
            value = getattr(config, key)
            if value is not None:
                values[key] = value
    return RunSettings.from_values(values)


def fixed_given(args: argparse.Namespace) -> list[str]:
    """The flags on the command line `args` parsed of settings a resume keeps as recorded (`fixed`):
    each is refused with `--resume` (one line, exit 2), not silently dropped."""
    return [str(each.flag) for _, each, _ in RunSettings.given_again(args, "fixed")]


def resumed_with(
    args: argparse.Namespace, config: RunSettings, name: str | None, run_dir: Path, command: Command = "run"
) -> RunSettings:
    """The settings `--resume` starts `command` again with, given its flags `args`: the recorded
    ones (`resumed`), a `kept` setting given again in place of its recorded value, and each
    `fresh` one as given, this session."""
    recorded = resumed(config, name, run_dir, command)
    given = RunSettings.from_args(args)
    again = {key: value for key, _, value in RunSettings.given_again(args, "kept")}
    fresh = {key: getattr(given, key) for key, each in declared() if each.resume == "fresh"}
    return dataclasses.replace(recorded, **again, **fresh)
