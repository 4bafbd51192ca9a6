"""Reciprocal rank fusion: a pure function over ranked lists of ids."""

from __future__ import annotations

from typing import Hashable, Iterable, Sequence, TypeVar

K = TypeVar("K", bound=Hashable)


def reciprocal_rank_fusion(rankings: Iterable[Sequence[K]], k: int = 60) -> list[tuple[K, float]]:
    """Fuse ranked lists: each id scores the sum of 1 / (k + rank) over the lists it appears in (rank from 1).

    Returns (id, score) best first; ties keep the order in which ids were first seen (earlier lists, higher
    ranks first), so the result is deterministic. An id listed twice in one list counts at its best rank only.

    Raises:
        ValueError: k is negative.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    scores: dict[K, float] = {}
    for ranking in rankings:
        seen: set[K] = set()
        for rank, item in enumerate(ranking, 1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    order = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))
