"""Advice: one change the advisor suggests, and the setting it changes.

`Advice` crosses processes: the advisor makes it in the run's process, the control socket carries
it to attached viewers, `--auto` applies it and run.toml records it. `AdviceSetting` names what it
changes, and `ApplyAdvice` (`cockpit.contract.controls`) asks a run to apply one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class AdviceSetting(str, Enum):
    """What an advice item changes; the first three can change under a running run. `memory` changes
    no setting: it explains a job whose memory keeps growing, and what to look for."""

    JOBS = "jobs"
    N_ENVS = "n_envs"
    BATCH_SIZE = "batch_size"
    NET_ARCH = "net_arch"
    PRESET = "preset"
    MEMORY = "memory"
    DEVICES = "devices"  # how many jobs train on the GPU and how many on the CPU (`run --devices`)
    MPS = "mps"  # the jobs of a GPU as clients of one MPS server (`run --mps`): their kernels run at once

    def __str__(self) -> str:
        # The value, in f-strings too (Python 3.12 formats a mixed-in enum by its name otherwise).
        return self.value

    @property
    def live(self) -> bool:
        """True when a running run can apply it (the others need a new run)."""
        return self in (AdviceSetting.JOBS, AdviceSetting.N_ENVS, AdviceSetting.BATCH_SIZE)


@dataclass(frozen=True)
class Advice:
    """One change: `setting` from `current` to `suggested`, what it should do, and why."""

    setting: AdviceSetting
    current: str
    suggested: str
    effect: str
    reason: str
    numbers: dict[str, float | int | str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "setting", AdviceSetting(self.setting))  # a plain string is accepted

    def line(self) -> str:
        """One line for a console or a panel."""
        return f"{self.setting}: {self.current} -> {self.suggested}. {self.effect} ({self.reason})"
