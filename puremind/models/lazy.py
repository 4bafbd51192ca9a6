"""The models object: the embedder and reranker one command (or one server) uses, each loaded on first use.

The application layer builds it from the settings (`puremind.services.build_models`) and hands it to the
Searcher, the indexer run and the watcher; the MCP server's lifespan owns one for the whole session. Tests and
benches hand in ready models with `Models.given(...)` instead of patching loaders. Nothing here imports the
export step: a variant that is not exported yet comes from the `obtain` callable the application layer passes.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from puremind.models.base import Embedder, Reranker, SemanticOff
from puremind.models.loader import (
    ModelChoice,
    Obtain,
    check_index_embedder,
    load_embedder,
    load_reranker,
)

Progress = Callable[[str], None]

SEMANTIC_OFF = 'semantic search is off (embedder = "none"): keyword search only'


class Models:
    """The embedder and the reranker, each loaded once, on first use, from its ModelChoice (or handed in).

    `embedder` None means semantic search is off (`embedder = "none"`); `reranker` None means no reranker (off,
    or keyword search only). Thread-safe: two searches never load the same model twice.
    """

    def __init__(
        self,
        embedder: "ModelChoice | Embedder | None",
        reranker: "ModelChoice | Reranker | None",
        *,
        obtain: Obtain | None = None,
        progress: Progress | None = None,
    ):
        """Each model is a ModelChoice (loaded on first use), a ready model (handed in: tests, benches), or None
        (left out)."""
        self._choices: dict[str, ModelChoice | None] = {}
        self._ready: dict[str, Any] = {}
        for role, model in (("embedder", embedder), ("reranker", reranker)):
            if model is None or isinstance(model, ModelChoice):
                self._choices[role] = model
            else:
                self._choices[role] = None
                self._ready[role] = model
        self._obtain = obtain
        self._progress = progress
        self._lock = threading.Lock()

    @classmethod
    def given(cls, embedder: Embedder | None = None, reranker: Reranker | None = None) -> "Models":
        """Models handed in ready (tests, benches): nothing is loaded; None leaves that model out."""
        return cls(embedder, reranker)

    # -- what is configured ----------------------------------------------------------------------------------

    @property
    def semantic(self) -> bool:
        """Whether there is an embedder (configured or handed in): False is keyword search only."""
        return self.has("embedder")

    def has(self, role: str) -> bool:
        """Whether `role` ("embedder" or "reranker") is configured or handed in."""
        return role in self._ready or self._choices[role] is not None

    def choice(self, role: str) -> ModelChoice | None:
        """How `role` is configured (None: handed in ready, or left out)."""
        return self._choices[role]

    def loaded(self, role: str) -> bool:
        """Whether `role` is ready now (handed in, or loaded by an earlier call)."""
        return role in self._ready

    def check_index(self, stored: str | None, *, doing: str = "searches are refused") -> None:
        """Compare the configured embedder with the fingerprint of an index's vectors BEFORE anything is fetched,
        exported or loaded (see loader.check_index_embedder). Nothing to do for a model that is ready.

        Raises:
            FingerprintMismatch: the index holds vectors of another model or settings (both are named).
        """
        choice = self._choices["embedder"]
        if stored is None or "embedder" in self._ready or choice is None:
            return  # a ready model is compared by its fingerprint (Store.check_vectors) by whoever uses it
        check_index_embedder(choice, stored, doing=doing)

    # -- the models ------------------------------------------------------------------------------------------

    def embedder(self) -> Embedder:
        """The embedder, loaded on the first call.

        Raises:
            SemanticOff: semantic search is off (`embedder = "none"`).
            ModelsUnavailable: the model cannot be had here (the hint names the ways forward).
            ModelError: the model cannot be found, fetched, exported or verified.
        """
        return self._get("embedder", load_embedder)

    def reranker(self) -> Reranker:
        """The reranker, loaded on the first call.

        Raises:
            SemanticOff: no reranker is configured.
            ModelsUnavailable, ModelError: as for `embedder`.
        """
        return self._get("reranker", load_reranker)

    def _get(self, role: str, load: Callable[..., Any]) -> Any:
        with self._lock:
            model = self._ready.get(role)
            if model is not None:
                return model
            choice = self._choices[role]
            if choice is None:
                raise SemanticOff(SEMANTIC_OFF if role == "embedder" else "no reranker is configured")
            model = load(choice, obtain=self._obtain, progress=self._progress)
            self._ready[role] = model
            return model


__all__ = ["Models", "SEMANTIC_OFF"]
