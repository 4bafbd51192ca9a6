"""Reciprocal rank fusion: a pure function over ranked lists of ids."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable, Sequence, TypeVar

K = TypeVar("K", bound=Hashable)


def reciprocal_rank_fusion(rankings: Iterable[Sequence[K]], k: int = 60,
                           weights: Sequence[float] | None = None) -> list[tuple[K, float]]:
    """Fuse ranked lists: each id scores the sum of weight / (k + rank) over the lists it appears in (rank from
    1; every weight 1.0 unless `weights` gives one per list).

    Returns (id, score) best first; ties keep the order in which ids were first seen (earlier lists, higher
    ranks first), so the result is deterministic. An id listed twice in one list counts at its best rank only.

    Raises:
        ValueError: k is negative, or the weights do not match the rankings.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    rankings = list(rankings)
    if weights is not None and len(weights) != len(rankings):
        raise ValueError("give one weight per ranking")
    scores: dict[K, float] = {}
    for index, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else float(weights[index])
        seen: set[K] = set()
        for rank, item in enumerate(ranking, 1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    order = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))


@dataclass(frozen=True)
class Ranked:
    """One retriever's list for one query: ids best first, and its weight in the fusion."""

    ids: Sequence[Hashable]
    weight: float = 1.0


def fuse(lists: Sequence[Ranked], k: int = 60) -> list[tuple[Hashable, float]]:
    """reciprocal_rank_fusion of `lists`, each with its own weight."""
    return reciprocal_rank_fusion([r.ids for r in lists], k, [r.weight for r in lists])
