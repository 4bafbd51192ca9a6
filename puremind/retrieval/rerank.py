"""Reranking that fits a time budget: the cross-encoder reads the fused candidates best first, in batches sized
by the time it has measured per character, and stops before the budget would be exceeded; identical passage
texts are scored once; scores and query vectors are kept in bounded per-process caches (a repeated or paged
query does not pay again).

Pure Python + numpy: the model is anything with `score(query, passages)` (puremind.models.base.Reranker).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Hashable, Sequence, TypeVar

V = TypeVar("V")

#: How many cross-encoder scores and query vectors a process keeps (least recently used dropped first): a
#: score is a float and a key of about 100 bytes, a query vector 4 KiB at 1,024 dimensions.
SCORE_CACHE_ITEMS = 100_000
QUERY_CACHE_ITEMS = 1_000
#: The first batch of a process, before any time per character is known: small, so a tight budget is not
#: overrun by much while the rate is measured.
PROBE_BATCH = 4


class BoundedCache(Generic[V]):
    """A least-recently-used mapping of at most `max_items` entries; thread-safe."""

    def __init__(self, max_items: int):
        self.max_items = max(0, int(max_items))
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: V) -> None:
        if self.max_items == 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def text_digest(text: str) -> bytes:
    """A 128-bit digest of a passage text: the cache key holds this, not the text."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def model_key(model: Any) -> str:
    """What tells one loaded model from another in the caches: its fingerprint when it has one, else its
    identity (a model handed in by a test or a bench)."""
    fingerprint = getattr(model, "fingerprint", None)
    return fingerprint if isinstance(fingerprint, str) and fingerprint else f"id:{id(model)}"


@dataclass
class RerankRun:
    """What one budgeted reranking did. `scores[i]` is the probability of candidate i; candidates without one
    were not reached within the budget."""

    scores: dict[int, float] = field(default_factory=dict)
    candidates: int = 0
    #: pairs run through the model this time
    computed: int = 0
    #: candidates whose score came from the cache
    cached: int = 0
    #: candidates that repeat the text of a better-ranked one (scored once, for both)
    repeated: int = 0
    seconds: float = 0.0
    budget: float = 0.0

    @property
    def reranked(self) -> int:
        return len(self.scores)

    @property
    def cut_by_budget(self) -> bool:
        return self.reranked < self.candidates


class Reranking:
    """Budgeted reranking with a score cache, one per process (a server keeps it across searches).

    `clock` is the time source (tests pass a fake one); the time per character of (query + passage) that it
    measures carries over between searches.
    """

    def __init__(self, *, cache_items: int = SCORE_CACHE_ITEMS, clock: Callable[[], float] = time.perf_counter):
        self.cache: BoundedCache[float] = BoundedCache(cache_items)
        #: seconds of model time each (model, query, candidates) has had: the budget is the query's, not each
        #: search's, so a repeated or paged query answers from the cache at once, with the same ranking; once the
        #: candidates change (the index changed), the query has a budget again
        self.spent: BoundedCache[float] = BoundedCache(QUERY_CACHE_ITEMS * 10)
        self.clock = clock
        self._seconds_per_char: float | None = None

    def run(self, reranker: Any, query: str, texts: Sequence[str], budget: float) -> RerankRun:
        """Scores for `texts` (the candidates in fused order), best first within `budget` seconds (0 = no
        bound: every candidate). The budget is the query's in this process: what earlier searches for the same
        query over the same candidates spent on the model counts, so a repeat reuses their scores and computes
        nothing new; other candidates (the index changed since) get a budget of their own, and what was scored
        before comes from the cache. The model must be loaded already: its load is not the budget's.

        Raises:
            ModelError: the model cannot run.
        """
        start = self.clock()
        run = RerankRun(candidates=len(texts), budget=budget)
        key = model_key(reranker)
        first_of: dict[str, int] = {}
        where: dict[int, list[int]] = {}  # first index of a text -> every index holding it
        for i, text in enumerate(texts):
            j = first_of.setdefault(text, i)
            where.setdefault(j, []).append(i)
        run.repeated = len(texts) - len(where)
        digests = [text_digest(t) for t in texts]
        pending: list[int] = []
        for j in where:  # in fused order
            cached = self.cache.get((key, query, digests[j]))
            if cached is None:
                pending.append(j)
            else:
                run.cached += len(where[j])
                for i in where[j]:
                    run.scores[i] = cached
        size = max(1, int(getattr(reranker, "batch_size", 16) or 16))
        spent_key = (key, query, hashlib.blake2b(b"".join(digests), digest_size=16).digest())
        spent_before = self.spent.get(spent_key) or 0.0
        while pending:
            if budget > 0:
                left = budget - spent_before - (self.clock() - start)
                batch = self._fitting(query, [texts[j] for j in pending[:size]], left)
                if batch == 0:
                    break
            else:
                batch = len(pending)  # no bound: one call, as without a budget
            chosen, pending = pending[:batch], pending[batch:]
            began = self.clock()
            scores = reranker.score(query, [texts[j] for j in chosen])
            took = self.clock() - began
            chars = sum(len(query) + len(texts[j]) for j in chosen)
            if chars and took > 0:
                rate = took / chars
                self._seconds_per_char = rate if self._seconds_per_char is None else 0.5 * (self._seconds_per_char + rate)
            run.computed += len(chosen)
            self.spent.put(spent_key, spent_before + (self.clock() - start))
            for j, s in zip(chosen, scores):
                value = float(s)
                self.cache.put((key, query, digests[j]), value)
                for i in where[j]:
                    run.scores[i] = value
        run.seconds = self.clock() - start
        return run

    def _fitting(self, query: str, texts: Sequence[str], left: float) -> int:
        """How many of `texts` (at most one batch) fit in `left` seconds at the measured rate; before any rate is
        known, a small probe batch."""
        if left <= 0:
            return 0
        rate = self._seconds_per_char
        if rate is None:
            return min(PROBE_BATCH, len(texts))
        spent, n = 0.0, 0
        for text in texts:
            spent += rate * (len(query) + len(text))
            if spent > left:
                break
            n += 1
        return n


class QueryVectors:
    """Query embeddings kept per process, keyed by (embedder, query): a repeated query is not embedded again."""

    def __init__(self, max_items: int = QUERY_CACHE_ITEMS):
        self.cache: BoundedCache[Any] = BoundedCache(max_items)

    def get(self, embedder: Any, query: str):
        key = (model_key(embedder), query)
        vector = self.cache.get(key)
        if vector is None:
            vector = embedder.embed([query], is_query=True)[0]
            self.cache.put(key, vector)
        return vector
