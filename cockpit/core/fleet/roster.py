"""What a running fleet knows in memory, shared by `FleetRun` and the parts it composes.

fleet.db (`cockpit.core.fleet.store`) is the durable copy: `Roster.load` reads it back, and every
change here follows a transaction there. The PBT boundary (`pbt_boundary`), the search draws
(`draws`) and the fleet's view (`fleet_view`) read and change the same `Roster` as `FleetRun`
does, so none of them keeps a copy of its own. Also here: the preset file an agent trains with,
and how an agent's overrides and lineage read in the notices and views.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.contract.events import EvaluatedEvent
from cockpit.contract.fleetplan import Agent, Tier
from cockpit.contract.presets import Preset, builtin_names, to_toml
from cockpit.core.feed.snapshot import override_pairs
from cockpit.core.fleet.store import AgentRow, Exploit, FleetStore, Result

PRESETS_DIR = "presets"
NOTICES_KEPT = 20


@dataclass
class Tracked:
    """An agent as the fleet tracks it in memory (fleet.db is the durable copy)."""

    row: AgentRow
    preset_arg: str
    tier: int
    status: str
    handed: bool = False  # its job for this tier is in the supervisor (queued, running or ended)


class Roster:
    """A fleet of `tiers` tiers in memory: its agents, those still waiting to start (in matrix
    order), each tier's results and promotions, the tiers whose sync or pbt promotion is made (even
    of no one), each agent's pbt exploits (oldest first), and the notices (the last
    `NOTICES_KEPT`, with a count of all)."""

    def __init__(self, tiers: int) -> None:
        self.agents: dict[str, Tracked] = {}
        self.waiting: deque[str] = deque()
        self.results: dict[int, list[Result]] = {i: [] for i in range(tiers)}
        self.promoted: dict[int, set[str]] = {i: set() for i in range(tiers)}
        self.decided: set[int] = set()
        self.lineage: dict[str, list[Exploit]] = {}
        self.notices: list[str] = []
        self.notice_count = 0

    def load(self, store: FleetStore) -> None:
        """The agents, results, promotions, decisions and exploits fleet.db holds."""
        for row in store.agents():
            self.agents[row.id] = Tracked(row, row.preset, row.tier, row.status)
            if row.status == "waiting":
                self.waiting.append(row.id)
        for result in store.results():
            self.results[result.tier].append(result)
        for tier, agents in store.promotions().items():
            self.promoted[tier] |= agents
        self.decided = {i for i in self.results if store.meta(f"decided:{i}") is not None}
        for exploit in store.lineage():
            self.lineage.setdefault(exploit.agent, []).append(exploit)

    def entered(self, tier: int) -> list[Tracked]:
        """The agents assigned to `tier` or a later one."""
        return [a for a in self.agents.values() if a.tier >= tier]

    def tier_complete(self, tier: int) -> bool:
        """True once `tier`'s promotion is decided (sync or pbt)."""
        return tier in self.decided

    def result_of(self, agent: str, tier: int) -> Result:
        """`agent`'s recorded result in `tier` (it has one)."""
        return next(r for r in self.results[tier] if r.agent == agent)

    def all_results(self) -> list[Result]:
        """Every result recorded, tier by tier."""
        return [r for tier in self.results.values() for r in tier]

    def notice(self, line: str) -> None:
        """Add `line` to the notices the views show."""
        self.notices = [*self.notices[-(NOTICES_KEPT - 1) :], line]
        self.notice_count += 1


def preset_arg(agent: Agent, run_dir: Path) -> str:
    """What the agent's worker gets as --preset: the plan's built-in name or file when the agent has
    no overrides, else a preset file written into the run dir (one per distinct preset)."""
    if not agent.overrides and agent.preset_name in builtin_names():
        return agent.preset_name
    if not agent.overrides and Path(agent.preset_name).is_file():
        return str(Path(agent.preset_name).resolve())
    return preset_file(agent.preset, run_dir)


def preset_file(preset: Preset, run_dir: Path) -> str:
    """`preset` written into the run dir's presets/ (one file per distinct preset), its path."""
    text = to_toml(preset)
    path = run_dir / PRESETS_DIR / f"{preset.name}-{hashlib.sha256(text.encode()).hexdigest()[:10]}.toml"
    if not path.exists():
        from cockpit.contract.files import write_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    return str(path.resolve())


def lineage_text(exploits: list[Exploit]) -> str:
    """An agent's latest exploit as `a0007@t1` (whose checkpoint, at the end of which tier), "" for none."""
    return f"{exploits[-1].source}@t{exploits[-1].tier}" if exploits else ""


def overrides_text(overrides: dict[str, Any]) -> str:
    """`key=value, ...` in key order ("" for none)."""
    return ", ".join(f"{key}={value}" for key, value in override_pairs(overrides))


def reached(evaluation: EvaluatedEvent | None, tier: Tier) -> bool:
    """True when `evaluation` scored the agent at the end of `tier`, not of a tier before it: at or
    past the tier's steps, or its whole training episodes."""
    if evaluation is None:
        return False
    if tier.episodes is not None:
        return (evaluation.trained_episodes or 0) >= tier.episodes
    return evaluation.step >= (tier.timesteps or 0)
