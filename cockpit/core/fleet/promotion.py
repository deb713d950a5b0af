"""Who goes on to the next tier: the ranking and the sync and async (ASHA) promotion rules.

Agents are ranked by evaluation score, best first; ties break on training return (higher first,
unknown last), then seed, then agent id, so the order never depends on when results came in.

- **sync** waits until every agent of a tier has a result (or failed), then promotes exactly the
  tier's top share (`Tier.promoted` of the agents that entered it). Its cost: slots idle while a
  tier's last stragglers finish.
- **async** is ASHA's rule (Li et al., MLSys 2020): as soon as an agent is among the top
  `floor(n × fraction)` of the n agents finished so far in its tier, it is promoted. No slot waits
  for stragglers. Its cost: a promotion is final, so an early agent promoted on few results may
  later fall out of the top share (ASHA accepts these "mispromotions"); a tier can therefore
  promote somewhat more agents than sync would, and those extra agents cost their next tier's
  steps. A `promote` given as a count is turned into the fraction count / agents the plan sends
  into that tier.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from cockpit.core.fleet.store import Result

EPSILON = 1e-9  # so 0.3 x 10 floors to 3, not 2


def rank_key(r: Result) -> tuple[float, float, int, str]:
    """Sorts best first: score, then training return (unknown last), then seed, then agent id."""
    return (-r.score, -(r.train_return if r.train_return is not None else -math.inf), r.seed, r.agent)


def ranked(results: Iterable[Result]) -> list[Result]:
    """Best first (`rank_key`)."""
    return sorted(results, key=rank_key)


def sync_promotions(results: Sequence[Result], quota: int) -> list[str]:
    """The `quota` best agents of a complete tier."""
    return [r.agent for r in ranked(results)[:quota]]


def async_promotions(results: Sequence[Result], fraction: float, promoted: set[str]) -> list[str]:
    """Agents among the top `floor(len(results) × fraction)` finished so far, not promoted yet."""
    top = ranked(results)[: math.floor(len(results) * fraction + EPSILON)]
    return [r.agent for r in top if r.agent not in promoted]
