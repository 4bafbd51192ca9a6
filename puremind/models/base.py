"""The two interfaces models are handed in through. Nothing here imports onnxruntime or torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

from puremind.errors import ModelError

if TYPE_CHECKING:
    import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised vectors."""

    #: identity of the vectors this embedder makes (model, revision, variant, pooling, prefix...);
    #: vectors with different fingerprints are never compared.
    fingerprint: str
    dim: int
    # Optional: `languages` (ISO 639-1 codes or ("multilingual",)); absent or () = reads any script.

    def embed(self, texts: Sequence[str], is_query: bool = False) -> "np.ndarray":
        """One row per text, float32, L2-normalised. Queries get the model's instruction prefix."""
        ...


@runtime_checkable
class Reranker(Protocol):
    """Scores how well each passage answers a query, 0..1."""

    def score(self, query: str, passages: Sequence[str]) -> "np.ndarray":
        ...


class ModelsUnavailable(ModelError):
    """The model is not exported for ONNX Runtime and this installation cannot export it (no [export] extra)."""


class SemanticOff(ModelError):
    """The user turned semantic search off (`[models] embedder = "none"`): keyword search only."""
