"""Facts about this machine, and how a run divides its cores among jobs."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class HostInfo:
    """The machine a run is on, as recorded in the run log."""

    hostname: str
    cpu_model: str
    physical_cores: int
    logical_cores: int
    ram_bytes: int
    os: str


def cpu_model() -> str:
    """This CPU's model name (from /proc/cpuinfo on Linux), or the platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_info() -> HostInfo:
    """Read this machine's CPU model, core counts, RAM and OS."""
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    return HostInfo(
        hostname=platform.node(),
        cpu_model=cpu_model(),
        physical_cores=psutil.cpu_count(logical=False) or logical,
        logical_cores=logical,
        ram_bytes=psutil.virtual_memory().total,
        os=f"{platform.system()} {platform.release()}",
    )


@dataclass(frozen=True)
class ThreadBudget:
    """How many envpool threads each of `slots` concurrent jobs gets on `physical_cores`."""

    slots: int
    physical_cores: int
    threads_per_job: int

    @property
    def oversubscribed(self) -> bool:
        """True when the jobs' env threads together exceed the physical cores."""
        return self.slots * self.threads_per_job > self.physical_cores

    def warning(self) -> str | None:
        """A line naming the numbers when the budget oversubscribes the CPU, else None."""
        if not self.oversubscribed:
            return None
        total = self.slots * self.threads_per_job
        return (
            f"warning: {self.slots} parallel jobs x {self.threads_per_job} env thread(s) = {total} env threads "
            f"on {self.physical_cores} physical cores; jobs will contend for CPU (try --jobs {self.physical_cores})"
        )


def thread_budget(slots: int, physical_cores: int) -> ThreadBudget:
    """Split the physical cores evenly among `slots` jobs, at least one thread each."""
    return ThreadBudget(slots, physical_cores, max(1, physical_cores // slots))


def pin_sets(slots: int, cpus: list[int]) -> list[list[int]]:
    """Disjoint CPU lists for each slot (round-robin when there are more slots than CPUs)."""
    if slots <= len(cpus):
        per = len(cpus) // slots
        return [cpus[i * per : (i + 1) * per] for i in range(slots)]
    return [[cpus[i % len(cpus)]] for i in range(slots)]
