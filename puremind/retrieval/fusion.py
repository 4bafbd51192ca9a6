"""Reciprocal rank fusion: a pure function over ranked lists of ids."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping, Sequence, TypeVar

K = TypeVar("K", bound=Hashable)


def reciprocal_rank_fusion(rankings: Iterable[Sequence[K]], k: int = 60,
                           weights: Sequence[float] | None = None,
                           ranks: Sequence[Sequence[int] | None] | None = None) -> list[tuple[K, float]]:
    """Fuse ranked lists: each id scores the sum of weight / (k + rank) over the lists it appears in (rank from
    1; every weight 1.0 unless `weights` gives one per list; `ranks` may give a list's own ranks, one per id, where
    ties share one, see `shared_ranks`).

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
    if ranks is not None and len(ranks) != len(rankings):
        raise ValueError("give one list of ranks (or None) per ranking")
    scores: dict[K, float] = {}
    for index, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else float(weights[index])
        own = None if ranks is None else ranks[index]
        seen: set[K] = set()
        for position, item in enumerate(ranking, 1):
            if item in seen:
                continue
            seen.add(item)
            rank = position if own is None else own[position - 1]
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    order = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))


def shared_ranks(scores: Sequence[float]) -> list[int]:
    """Ranks (from 1) of a list's scores, best first, where equal scores share the best rank among them
    ("1, 2, 2, 4"): a retriever that cannot tell two passages apart does not rank one above the other."""
    out: list[int] = []
    for position, score in enumerate(scores, 1):
        out.append(out[-1] if out and score == scores[position - 2] else position)
    return out


def before_cut_tie(scores: Sequence[float], limit: int) -> int:
    """How many of a list's best-first `scores`, fetched one past `limit`, to keep: the first `limit`, unless
    the cut at `limit` goes through a run of equal scores. Which passages of such a run the list would hold is
    arbitrary (the index's own order), so the run is left out: 50 of 300 notes that share one boilerplate
    sentence would otherwise be lifted over the other 250 by their file order alone."""
    if len(scores) <= limit:
        return len(scores)
    keep = limit
    while keep > 0 and scores[keep - 1] == scores[limit]:
        keep -= 1
    return keep


@dataclass(frozen=True)
class Ranked:
    """One retriever's list for one query: ids best first, its weight in the fusion, and optionally each id's
    rank (`shared_ranks`: ties share one); by default the position."""

    ids: Sequence[Hashable]
    weight: float = 1.0
    ranks: Sequence[int] | None = None


def fuse(lists: Sequence[Ranked], k: int = 60) -> list[tuple[Hashable, float]]:
    """reciprocal_rank_fusion of `lists`, each with its own weight and ranks."""
    return reciprocal_rank_fusion([r.ids for r in lists], k, [r.weight for r in lists], [r.ranks for r in lists])


#: how much of a candidate's whole-list RRF breaks ties among equal depth-limited ones (far below any RRF step)
DEPTH_TIE_BREAK = 1e-6


def head_by_group(ids: Sequence[Hashable], depth: int, group: Mapping[Hashable, Hashable]) -> int:
    """How many of `ids` (best first) come before the first id of the (depth + 1)-th distinct group (an id with
    no group is a group of its own)."""
    seen: set[Hashable] = set()
    for position, item in enumerate(ids):
        key = group.get(item, ("id", item))
        if key not in seen:
            if len(seen) == depth:
                return position
            seen.add(key)
    return len(ids)


def _with_ties(ranked: Ranked, cut: int) -> int:
    """`cut`, moved past the passages that share the rank of the last one before it (ties are all in or all out)."""
    if ranked.ranks is None or cut <= 0:
        return cut
    while cut < len(ranked.ids) and ranked.ranks[cut] == ranked.ranks[cut - 1]:
        cut += 1
    return cut


def fuse_at_depth(lists: Sequence[Ranked], k: int = 60, depth: int = 0,
                  group: Mapping[Hashable, Hashable] | None = None) -> list[tuple[Hashable, float]]:
    """RRF of each list's top `depth` (0 = whole lists): what a list ranks below its first `depth` adds nothing to
    a candidate that some list ranks within them. The candidates no list ranks that high follow, in the RRF of the
    whole lists (each list still offers every candidate it holds). A score is the depth-limited RRF plus a
    millionth of the whole-list RRF (a tie-break only), so scores fall along the order.

    With `group` (id -> its note), the depth counts distinct notes, not ids: each list is read down to the last
    of its passages before the first passage of its (depth + 1)-th note (`head_by_group`). Passages that share a
    rank (`Ranked.ranks`) are read all or none: a cut never goes through a run of ties.

    Measured (bench/RESULTS.md, issue-12-fusion-trials): with k=60, a passage ranked 30th in three lists outscored
    one ranked 1st in a single list; evidence that deep is weak for a note finder. Counted in passages, a note cut
    into many passages filled a list's top on its own and left the other notes of a question no say."""
    whole = fuse(lists, k)
    if depth <= 0:
        return whole
    cuts = [_with_ties(r, depth if group is None else head_by_group(r.ids, depth, group)) for r in lists]
    if all(len(r.ids) <= cut for r, cut in zip(lists, cuts)):
        return whole
    head = dict(fuse([Ranked(r.ids[:cut], r.weight, r.ranks[:cut] if r.ranks is not None else None)
                      for r, cut in zip(lists, cuts)], k))
    scored = [(item, head.get(item, 0.0) + DEPTH_TIE_BREAK * score) for item, score in whole]
    order = {item: i for i, (item, _) in enumerate(whole)}
    return sorted(scored, key=lambda kv: (-kv[1], order[kv[0]]))
