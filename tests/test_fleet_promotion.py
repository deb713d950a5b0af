"""Ranking and the sync and async (ASHA) promotion rules (`cockpit.core.fleet.promotion`)."""

from __future__ import annotations

from cockpit.core.fleet.promotion import async_promotions, ranked, sync_promotions
from cockpit.core.fleet.store import Result


def result(agent: str, score: float, train_return: float | None = None, seed: int = 0) -> Result:
    return Result(agent, 0, 4096, score, 0.0, train_return, seed, 0.0)


def test_ranking_is_by_score_then_training_return_then_seed() -> None:
    results = [
        result("a", 100.0, train_return=50.0, seed=3),
        result("b", 200.0, train_return=10.0, seed=4),
        result("c", 100.0, train_return=80.0, seed=5),  # same score as a: the better training return wins
        result("d", 100.0, train_return=50.0, seed=1),  # same score and return as a: the lower seed wins
        result("e", 100.0, train_return=None, seed=0),  # an unknown training return ranks last among equals
    ]
    assert [r.agent for r in ranked(results)] == ["b", "c", "d", "a", "e"]
    assert [r.agent for r in ranked(reversed(results))] == ["b", "c", "d", "a", "e"]  # order of arrival is moot


def test_sync_promotes_exactly_the_top_quota() -> None:
    results = [result(f"a{i}", float(s)) for i, s in enumerate([5, 9, 1, 7, 3, 8])]
    assert sync_promotions(results, 3) == ["a1", "a5", "a3"]
    assert sync_promotions(results, 0) == []


def test_async_promotes_the_top_share_of_those_finished_so_far() -> None:
    fraction = 0.5
    finished: list[Result] = []
    promoted: set[str] = set()
    decisions = []
    for agent, score in [("a", 1.0), ("b", 2.0), ("c", 0.5), ("d", 3.0)]:
        finished.append(result(agent, score))
        chosen = async_promotions(finished, fraction, promoted)
        promoted |= set(chosen)
        decisions.append(chosen)
    # 1 finished: floor(0.5) = 0 promoted; 2: b (top 1); 3: top 1 is still b; 4: top 2 = d, b.
    assert decisions == [[], ["b"], [], ["d"]]


def test_async_can_promote_more_than_sync_when_early_agents_fall_out_of_the_top() -> None:
    finished: list[Result] = []
    promoted: set[str] = set()
    for i, score in enumerate([1.0, 2.0, 3.0, 4.0]):  # each newcomer beats all before it
        finished.append(result(f"a{i}", score))
        promoted |= set(async_promotions(finished, 0.5, promoted))
    assert promoted == {"a1", "a2", "a3"}  # ASHA's accepted cost: sync would promote only a3 and a2
    assert set(sync_promotions(finished, 2)) == {"a3", "a2"}
