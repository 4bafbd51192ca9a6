"""The operations behind each command, shared by the CLI, the demo and (later) the server and watcher.

Each opens what it needs (store, lock, models), does one job and returns data for the caller to render.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from puremind.config import Settings
from puremind.retrieval.pipeline import SearchOutcome, Searcher
from puremind.store import Store

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


def run_search(
    settings: Settings, query: str, *, limit: int = 10, lexical_only: bool = False, notice: Notice = _quiet
) -> SearchOutcome:
    """One search from the terminal: hybrid (BM25 + CJK grams + dense, RRF, then the reranker unless
    `settings.rerank` is off), or BM25 alone with `lexical_only`. Notes about skipped models go to `notice`.

    Raises:
        QueryError: nothing searchable in the query.
        StoreError: there is no index yet, or it cannot be read.
        FingerprintMismatch: the embedding model changed; `puremind index --rebuild` is needed.
        ModelError: a configured model cannot be loaded.
    """
    searcher = Searcher(settings, notice=notice)
    try:
        outcome = searcher.search(query, limit, lexical_only=lexical_only)
    finally:
        searcher.close()
    for note in outcome.notes:
        notice(f"note: {note}")
    return outcome
