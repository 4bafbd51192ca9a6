"""Hybrid retrieval: BM25 + CJK grams + dense cosine, fused by RRF, then re-scored by the cross-encoder.

One `Searcher` serves many searches (the CLI makes one per command, the MCP server one per process): it owns
the store connection, the lazily loaded models and the dense matrix cache. Every search reads one consistent
snapshot of the index, even while `puremind index` or `watch` writes.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from puremind.cjk import cjk_match_expression
from puremind.config import Settings
from puremind.errors import FingerprintMismatch
from puremind.langs import unread_script
from puremind.retrieval.dense import DenseIndex
from puremind.retrieval.fusion import reciprocal_rank_fusion
from puremind.retrieval.lexical import fts_match_expression
from puremind.store import Hit, Store

Notice = Callable[[str], None]
META_FINGERPRINT = "embed_fingerprint"  # written by the indexer
SCORE_LABELS = {"lexical": "bm25", "hybrid": "rrf", "reranked": "p"}


def _quiet(_: str) -> None:
    pass


@dataclass
class SearchOutcome:
    """Results of one search and how their scores read: "lexical" (BM25), "hybrid" (RRF) or "reranked"
    (cross-encoder probability 0..1). `notes` says what was left out: a model that is not available, or one
    that cannot read the query's script."""

    query: str
    mode: str
    hits: list[Hit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "mode": self.mode,
            "notes": list(self.notes),
            "results": [
                {
                    "rank": i,
                    "path": h.path,
                    "heading_path": list(h.heading_path),
                    "start_line": h.start_line,
                    "end_line": h.end_line,
                    "score": round(float(h.score), 6),
                    "excerpt": h.excerpt,
                    "text": h.text,
                }
                for i, h in enumerate(self.hits, 1)
            ],
        }

    def render_text(self) -> list[str]:
        if not self.hits:
            return [f"nothing found for {self.query!r}"]
        label = SCORE_LABELS[self.mode]
        lines: list[str] = []
        for i, h in enumerate(self.hits, 1):
            crumb = " > ".join(h.heading_path)
            path = h.path.replace("\n", "\\n")
            lines.append(f"{i}. {path}:{h.start_line}  (lines {h.start_line}-{h.end_line})  {label} {h.score:.4g}")
            if crumb:
                lines.append(f"   {crumb}")
            excerpt = " ".join(h.excerpt.split())
            if excerpt:
                lines.append(f"   {excerpt}")
        return lines


def _reads(model: Any, query: str, part: str, notes: list[str]) -> bool:
    """Whether `model` can read `query` (see puremind.langs); when not, says so in `notes`."""
    languages = tuple(getattr(model, "languages", ()) or ())
    script = unread_script(languages, query)
    if script is None:
        return True
    notes.append(f"{part} left out for this query: the model reads {', '.join(languages)}, and most of the "
                 f"query is in {script} script")
    return False


class Searcher:
    """Searches one index with the configured models, loading each model on first use.

    `embedder` / `reranker` may be handed in (tests, benchmarks); otherwise they are loaded from the settings
    the first time a search needs them. Thread-safe: overlapping searches run one at a time.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        rerank: bool | None = None,
        embedder: Any = None,
        reranker: Any = None,
        notice: Notice = _quiet,
    ):
        self.settings = settings
        self.rerank = settings.rerank if rerank is None else rerank
        self._embedder = embedder
        self._embedder_loaded = embedder is not None
        self._reranker = reranker
        self._reranker_loaded = reranker is not None
        self._notice = notice
        self._store: Store | None = None
        self._identity: tuple[int, int] | None = None
        self._dense = DenseIndex()
        self._lock = threading.Lock()

    # -- lazily opened parts -------------------------------------------------------------------------------

    def _store_open(self) -> Store:
        """The open index; reopened when the file was deleted and made again (a long-lived server must not go on
        reading a deleted file, old text included).

        Raises:
            StoreError: there is no index file.
        """
        try:
            st = os.stat(self.settings.db)
            identity: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            identity = None
        if self._store is not None and identity != self._identity:
            self._store.close()
            self._store = None
            self._dense = DenseIndex()  # a new file's change counter says nothing about the old matrix
        if self._store is None:
            self._store = Store.open(self.settings.db, create=False)
            self._identity = identity
        return self._store

    def _embedder_or_none(self, notes: list[str]):
        """The embedder; None when semantic search is off or the model is not exported (noted in `notes`).

        Raises:
            ModelError: the model cannot be found, fetched or verified.
        """
        from puremind.models import ModelsUnavailable, SemanticOff

        if not self._embedder_loaded:
            from puremind.models.loader import load_embedder

            try:
                self._embedder = load_embedder(self.settings, progress=self._notice)
            except SemanticOff:
                self._embedder = None
            except ModelsUnavailable as exc:
                # Not "cannot load": the model was never exported here. Keyword search still answers.
                notes.append(f"semantic search unavailable: {exc.message} ({exc.hint})")
                return None
            self._embedder_loaded = True
        return self._embedder

    def _reranker_or_none(self, notes: list[str]):
        from puremind.models import ModelsUnavailable

        if not self._reranker_loaded:
            from puremind.models.loader import load_reranker

            try:
                self._reranker = load_reranker(self.settings, progress=self._notice)
            except ModelsUnavailable as exc:
                notes.append(f"reranking skipped: {exc.message} ({exc.hint})")
                return None
            self._reranker_loaded = True
        return self._reranker

    # -- searching -------------------------------------------------------------------------------------------

    def search(self, query: str, limit: int = 10, *, lexical_only: bool = False) -> SearchOutcome:
        """Up to `limit` passages for `query`, best first (no relevance cut-off).

        Raises:
            QueryError: the query has nothing to search for.
            StoreError: there is no index yet, or it cannot be read.
            FingerprintMismatch: the configured embedder is not the one the index was built with.
            ModelError: a configured model cannot be loaded.
        """
        match = fts_match_expression(query)  # refuse an empty query before any work
        with self._lock:
            store = self._store_open()
            if lexical_only:
                with store.snapshot():
                    return SearchOutcome(query, "lexical", store.search_lexical(match, limit))
            notes: list[str] = []
            embedder = self._embedder_or_none(notes)
            qvec = None
            if embedder is not None:
                self._check_fingerprint(store, embedder)
                if _reads(embedder, query, "semantic search", notes):
                    qvec = embedder.embed([query], is_query=True)[0]
            hits, fused = self._fuse(store, match, query, qvec)
            use_rerank = self.rerank and bool(hits)
            reranker = self._reranker_or_none(notes) if use_rerank else None
            if reranker is not None and _reads(reranker, query, "reranking", notes):
                cut = self.settings.rerank_chars
                scores = reranker.score(query, [h.text[:cut] for h in hits])
                ranked = sorted(zip(hits, scores), key=lambda hs: -float(hs[1]))
                out = [dataclasses.replace(h, score=float(s)) for h, s in ranked[:limit]]
                return SearchOutcome(query, "reranked", out, notes)
            out = [dataclasses.replace(h, score=fused[h.chunk_id]) for h in hits[:limit]]
            return SearchOutcome(query, "hybrid", out, notes)

    def _fuse(self, store: Store, match: str, query: str, qvec) -> tuple[list[Hit], dict[int, float]]:
        """The fused top `candidates`, read in one snapshot: (hits in fused order, chunk id -> RRF score)."""
        cand = self.settings.candidates
        cjk = cjk_match_expression(query)
        with store.snapshot():
            rankings: list[list[int]] = [[h.chunk_id for h in store.search_lexical(match, cand)]]
            if cjk is not None:
                rankings.append([h.chunk_id for h in store.search_cjk(cjk, cand)])
            if qvec is not None:
                self._dense.refresh(store)
                rankings.append([cid for cid, _ in self._dense.search(qvec, cand)])
            fused = reciprocal_rank_fusion(rankings, self.settings.rrf_k)[:cand]
            hits = store.chunks_by_ids([cid for cid, _ in fused])
        return hits, dict(fused)

    def _check_fingerprint(self, store: Store, embedder: Any) -> None:
        stored = store.get_meta(META_FINGERPRINT)
        if stored is not None and stored != embedder.fingerprint and store.counts().get("vectors", 0) > 0:
            raise FingerprintMismatch(
                "the embedding model or its settings changed since this index was built: searches are refused",
                hint="run `puremind index --rebuild` (or search with --lexical-only meanwhile)",
            )

    @property
    def dense_loads(self) -> int:
        return self._dense.loads

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
