"""The operations behind each command, shared by the CLI, the demo and (later) the server and watcher.

Each opens what it needs (store, lock, models), does one job and returns data for the caller to render.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from puremind.config import Settings
from puremind.store import Hit, Store

Notice = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


def load_embedder_for_index(settings: Settings, notice: Notice):
    """The configured embedder, or None when the user turned semantic search off (`embedder = "none"`).

    Raises:
        ModelsUnavailable: the model is not exported and the [export] extra is missing (the hint says what to run).
        ModelError: the model cannot be found, fetched, exported or verified.
    """
    from puremind.models import SemanticOff
    from puremind.models.loader import load_embedder

    try:
        return load_embedder(settings, progress=notice)
    except SemanticOff:
        return None


def current_fingerprint(settings: Settings) -> str | None:
    """The fingerprint the configured embedder would give its vectors, without loading it (None: semantic off).

    Raises:
        ModelError: the configured model cannot be resolved.
    """
    from puremind.models.loader import _providers, _variant, fingerprint, resolve

    if not settings.semantic:
        return None
    resolved = resolve(settings, "embedder")
    if settings.backend == "torch":
        return fingerprint(resolved, "torch-fp32", settings)
    return fingerprint(resolved, _variant(settings, resolved, _providers(settings)), settings)


def check_search_fingerprint(settings: Settings, store: Store) -> None:
    """Refuse a semantic search over vectors of another model than the configured one.

    Raises:
        FingerprintMismatch: the configured embedder changed since the index was built.
    """
    from puremind.errors import FingerprintMismatch
    from puremind.indexer import META_FINGERPRINT

    stored = store.get_meta(META_FINGERPRINT)
    if stored is None or store.counts().get("vectors", 0) == 0:
        return
    if current_fingerprint(settings) != stored:
        raise FingerprintMismatch(
            "the embedding model or its settings changed since this index was built: searches are refused",
            hint="run `puremind index --rebuild` (or search with --lexical-only meanwhile)",
        )


def run_index(settings: Settings, *, rebuild: bool = False, progress=None, notice: Notice = _quiet):
    """Index the configured vault into the configured index file.

    Raises:
        ConfigError, VaultError, StoreError, IndexBusyError, FingerprintMismatch, ModelError.
    """
    from puremind.indexer import IndexLock, index_vault

    vault = settings.require_vault()
    embedder = load_embedder_for_index(settings, notice)
    with IndexLock(settings.db):
        store = Store.open(settings.db)
        try:
            return index_vault(store, vault, embedder=embedder, rebuild=rebuild, progress=progress)
        finally:
            store.close()


@dataclass
class SearchOutcome:
    """Results of one search, and how they were found."""

    query: str
    mode: str  # "lexical" (BM25 score), "hybrid" (RRF), "reranked" (probability)
    hits: list[Hit] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "mode": self.mode,
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
        label = {"lexical": "bm25", "hybrid": "rrf", "reranked": "p"}[self.mode]
        lines: list[str] = []
        for i, h in enumerate(self.hits, 1):
            crumb = " > ".join(h.heading_path)
            lines.append(f"{i}. {h.path}:{h.start_line}  (lines {h.start_line}-{h.end_line})  {label} {h.score:.4g}")
            if crumb:
                lines.append(f"   {crumb}")
            excerpt = " ".join(h.excerpt.split())
            if excerpt:
                lines.append(f"   {excerpt}")
        return lines


def run_search(settings: Settings, query: str, *, limit: int = 10, lexical_only: bool = False, notice: Notice = _quiet) -> SearchOutcome:
    """Search the index. Hybrid search needs the models; until they are available it is keyword search.

    Raises:
        QueryError: nothing searchable in the query.
        StoreError: there is no index yet, or it cannot be read.
    """
    from puremind.retrieval.lexical import fts_match_expression

    match = fts_match_expression(query)  # refuse a bad query before touching the index
    store = Store.open(settings.db, create=False)
    try:
        if not lexical_only:
            check_search_fingerprint(settings, store)
            notice("note: hybrid search is not wired into this build yet: showing keyword (BM25) results")
        hits = store.search_lexical(match, limit)
    finally:
        store.close()
    return SearchOutcome(query=query, mode="lexical", hits=hits)


def vault_of(settings: Settings) -> Path:
    return settings.require_vault()
