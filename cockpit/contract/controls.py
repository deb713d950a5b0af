"""The controls a viewer sends a run (the TUI, an attached TUI, `--auto`), and their wire codec.

A `Control` is one of the frozen dataclasses below (not a verb of the command line, which is
`cockpit.commands`). Views build them, the run's session and supervisor carry them out, and the
control socket carries them as JSON: `encode` gives `{"kind": ..., **fields}` and
`decode` rebuilds the exact dataclass, raising ValueError that names the missing or bad key.

What comes off the socket is bounded here: a seed is at most `MAX_SEED` (2^31 - 1, what the
worker's seeding takes), a preset argument at most `MAX_PRESET_ARG` characters, and an error or
warning repeats at most `SHOWN_CHARS` characters of a value a client sent (`shown`). How many jobs
a run may run or queue is the machine's, checked where the run is known (`run_session.check_bounds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from cockpit.contract.advice import AdviceSetting
from cockpit.contract.runspec import MAX_SEED

SHOWN_CHARS = 64  # the most characters of a client's value an error or a warning repeats
MAX_PRESET_ARG = 4096  # a preset is a name or a path, and Linux's PATH_MAX is 4096 bytes


def shown(value: Any) -> str:
    """`repr(value)`, cut to `SHOWN_CHARS` characters ("..." ends a cut one): how an error or a
    warning repeats a value a client sent, whose size is the client's to choose."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


@dataclass(frozen=True)
class AddJob:
    """Queue one more agent (next free seed when `seed` is None)."""

    seed: int | None = None


@dataclass(frozen=True)
class StopJob:
    """Checkpoint and stop a job (it can be restarted later); dequeue it if it has not started."""

    job_id: str


@dataclass(frozen=True)
class RestartJob:
    """Stop a live job and queue it again, or queue a finished, stopped or failed one."""

    job_id: str


@dataclass(frozen=True)
class KillJob:
    """SIGKILL a live job at once (it resumes from its last checkpoint if restarted)."""

    job_id: str


@dataclass(frozen=True)
class StopAll:
    """Checkpoint and stop every job and end the run (resumable, like Ctrl-C); twice kills them."""


@dataclass(frozen=True)
class SetSlots:
    """Run at most `slots` jobs at once. Lowering it checkpoints and stops the most recently
    started jobs, which go back to the front of the queue and resume when a slot frees."""

    slots: int


@dataclass(frozen=True)
class SetPreset:
    """Launch jobs from now on with this preset (a name or a file). Running jobs keep theirs until
    restarted; a restarted job resumes its checkpoint under the new rollout and batch settings."""

    preset_arg: str


@dataclass(frozen=True)
class ApplyAdvice:
    """Apply an advisor item: `setting` to `suggested`. The session turns it into the commands
    above (the supervisor itself does not know presets' contents)."""

    setting: AdviceSetting
    suggested: str

    def __post_init__(self) -> None:
        # Accept the plain string too ("n_envs"); an unknown setting is a ValueError here.
        object.__setattr__(self, "setting", AdviceSetting(self.setting))


@dataclass(frozen=True)
class SetMps:
    """Launch the jobs on a GPU from now on as clients of the run's MPS daemon (`on`), or not.
    Running jobs keep what they started with until restarted; a run with no daemon cannot."""

    on: bool


Control = AddJob | StopJob | RestartJob | KillJob | StopAll | SetSlots | SetPreset | SetMps | ApplyAdvice

COMMAND_KINDS: dict[type, str] = {
    AddJob: "add",
    StopJob: "stop",
    RestartJob: "restart",
    KillJob: "kill",
    StopAll: "stop_all",
    SetSlots: "set_slots",
    SetPreset: "set_preset",
    SetMps: "set_mps",
    ApplyAdvice: "apply_advice",
}
_JOB_COMMANDS: dict[str, type[StopJob | RestartJob | KillJob]] = {
    "stop": StopJob,
    "restart": RestartJob,
    "kill": KillJob,
}


def encode(command: Control) -> dict[str, Any]:
    """`{"kind": "add"|"stop"|..., ...the command's fields}` (enums as their values)."""
    fields = asdict(command)
    if isinstance(command, ApplyAdvice):
        fields["setting"] = command.setting.value
    return {"kind": COMMAND_KINDS[type(command)], **fields}


def decode(data: Any) -> Control:
    """The Control that `encode` encoded; ValueError names the missing or bad key."""
    if not isinstance(data, dict):
        raise ValueError(f"command: expected an object, got {type(data).__name__}")
    values: Mapping[str, Any] = data
    if "kind" not in values:
        raise ValueError("command: missing key 'kind'")
    kind = values["kind"]
    if not isinstance(kind, str):
        raise ValueError(f"command: key 'kind' must be one of {', '.join(COMMAND_KINDS.values())}, got {shown(kind)}")
    if kind == "stop_all":
        return StopAll()
    if kind == "set_preset":
        preset_arg = values.get("preset_arg")
        if not isinstance(preset_arg, str) or not preset_arg or len(preset_arg) > MAX_PRESET_ARG:
            raise ValueError(
                f"command 'set_preset': key 'preset_arg' must name a preset (at most {MAX_PRESET_ARG} "
                f"characters), got {shown(preset_arg)}"
            )
        return SetPreset(preset_arg)
    if kind == "set_mps":
        on = values.get("on")
        if not isinstance(on, bool):
            raise ValueError(f"command 'set_mps': key 'on' must be true or false, got {shown(on)}")
        return SetMps(on)
    if kind == "apply_advice":
        setting, suggested = values.get("setting"), values.get("suggested")
        if not isinstance(setting, str) or not isinstance(suggested, str):
            raise ValueError("command 'apply_advice': keys 'setting' and 'suggested' must be strings")
        try:
            return ApplyAdvice(AdviceSetting(setting), suggested)
        except ValueError:
            valid = ", ".join(s.value for s in AdviceSetting)
            raise ValueError(
                f"command 'apply_advice': key 'setting' must be one of {valid}, got {shown(setting)}"
            ) from None
    if kind == "set_slots":
        slots = values.get("slots")
        if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
            raise ValueError(f"command 'set_slots': key 'slots' must be a positive integer, got {shown(slots)}")
        return SetSlots(slots)
    if kind == "add":
        seed = values.get("seed")
        # bool is an int in Python, but `true` is not a seed.
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED):
            raise ValueError(
                f"command 'add': key 'seed' must be an integer from 0 to {MAX_SEED} or null, got {shown(seed)}"
            )
        return AddJob(seed)
    if kind in _JOB_COMMANDS:
        job_id = values.get("job_id")
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"command {kind!r}: key 'job_id' must be a job id string, got {shown(job_id)}")
        return _JOB_COMMANDS[kind](job_id)
    raise ValueError(f"command: key 'kind' must be one of {', '.join(COMMAND_KINDS.values())}, got {shown(kind)}")
