"""What a job's remote keeper (a Ray actor on the node the worker runs on) and a node's sampler
report to the cockpit. Ray pickles these across processes and machines: both sides import them
from here, so the node and the cockpit must run the same cockpit version.

A `JobReport` is one increment: the bytes the worker appended to its `events.jsonl` from the
offset the cockpit asked for (at most `MAX_EVENT_BYTES`; the cockpit parses them with
`events.parse`), the worker's exit code once it has exited (then with the last lines of its
stderr), whether it is stopped by a signal, and its process tree's CPU and memory.
"""

from __future__ import annotations

from dataclasses import dataclass

# One report carries at most this much of the events file: a job that wrote a lot while the
# cockpit looked away (a resumed run's first read) comes back in several increments, not one RPC.
MAX_EVENT_BYTES = 1 << 20


@dataclass(frozen=True)
class Placement:
    """Where a job's worker started: its pid on its node, and the node (Ray's id and its IP)."""

    pid: int
    node_id: str
    node_ip: str


@dataclass(frozen=True)
class JobReport:
    """One look at a remote job's worker (see the module docstring). `code` is None while it runs
    (negative: killed by that signal). `cpu_percent` (of one core, summed over the worker's
    process tree) and `rss_bytes` are None until the first reading that has a baseline."""

    events: bytes
    code: int | None
    stopped: bool
    cpu_percent: float | None
    rss_bytes: int | None
    stderr_tail: str = ""


@dataclass(frozen=True)
class NodeSample:
    """One node's CPU, memory and GPU at `t` (Unix time), from its sampler. `node` is its name as
    the views show it and `JobView.node` gives it: its IP (with the start of Ray's node id where
    nodes share an IP: several on one machine). The GPU fields are None on a node without one (or
    without NVML)."""

    node: str
    t: float
    cpu_percent: tuple[float, ...]
    ram_used_bytes: int
    ram_total_bytes: int
    gpu_util_percent: float | None = None
    gpu_mem_used_bytes: int | None = None
    gpu_mem_total_bytes: int | None = None

    @property
    def cpu_total_percent(self) -> float:
        """Mean over the node's cores."""
        return sum(self.cpu_percent) / len(self.cpu_percent) if self.cpu_percent else 0.0
