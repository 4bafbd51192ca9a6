"""The two interfaces models are handed in through. Nothing here imports onnxruntime or torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

from puremind.errors import ModelError

if TYPE_CHECKING:
    import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised vectors."""

    #: identity of the vectors this embedder makes (model, revision, pooling, prefixes, max tokens; not the
    #: precision: fp32, fp16 and int8 of one model embed into the same space); vectors with different
    #: fingerprints are never compared (see `puremind.fingerprint.vector_identity`).
    fingerprint: str
    # Optional: `precision` ("int8", "fp16", "fp32", "torch-fp32"), recorded with the vectors, never compared.
    dim: int
    #: ISO 639-1 codes the model reads, or ("multilingual",); () = not declared (reads any script). A search
    #: leaves the model out for a query written mostly in scripts none of these use (puremind.langs).
    languages: tuple[str, ...]

    def embed(self, texts: Sequence[str], is_query: bool = False) -> "np.ndarray":
        """One row per text, float32, L2-normalised. Queries get the model's instruction prefix."""
        ...


@runtime_checkable
class Reranker(Protocol):
    """Scores how well each passage answers a query, 0..1."""

    #: as Embedder.languages
    languages: tuple[str, ...]
    # Optional: `fingerprint` (model, revision, precision, characters read), which keys the caches of scores
    # (puremind.retrieval.rerank.model_key); a reranker without one is keyed by the object itself.

    def score(self, query: str, passages: Sequence[str]) -> "np.ndarray":
        ...


class ModelsUnavailable(ModelError):
    """The model cannot be had here, though nothing says it is broken: not in the Hugging Face cache with no way
    to download it (offline, or the hub out of reach), or not exported for ONNX Runtime with no [export] extra.

    Searches go on without it and say so in their notes; `puremind index` stops with the ways forward. A model
    whose files are there but broken (bad checksum, corrupt ONNX) or a name that resolves nowhere is a plain
    ModelError.
    """


class SemanticOff(ModelError):
    """The user turned semantic search off (`[models] embedder = "none"`): keyword search only."""
