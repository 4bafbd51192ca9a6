"""What the ONNX and the torch backends share: feeding batches, pooling, normalising and scoring.

Pure numpy: nothing here imports onnxruntime or torch. A backend says how to run one padded batch (`Batch`)
through its model; the classes here turn texts into length-sorted batches, run them, and put the rows back
in input order, so both backends tokenize, batch, pool and score the same way.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import numpy as np

from puremind.errors import ModelError
from puremind.models.tokenize import Batch, Encoded, ModelMeta, TextEncoder

#: The model inputs pureMind knows how to make from a batch.
_INPUTS: dict[str, Callable[[Batch], np.ndarray]] = {
    "input_ids": lambda batch: batch.input_ids,
    "attention_mask": lambda batch: batch.attention_mask,
    "position_ids": Batch.position_ids,
    "token_type_ids": lambda batch: batch.token_type_ids,
}


def model_inputs(batch: Batch, names: Iterable[str], model: object) -> dict[str, np.ndarray]:
    """The inputs called `names` (as the graph or the forward declares them), int64 arrays made from `batch`.

    Raises:
        ModelError: a name pureMind does not know how to make; the message names `model` and the input.
    """
    feeds: dict[str, np.ndarray] = {}
    for name in names:
        make = _INPUTS.get(name)
        if make is None:
            raise ModelError(f"{model} wants an input pureMind cannot supply: {name!r}")
        feeds[name] = make(batch)
    return feeds


def run_batches(encoder: TextEncoder, encoded: Sequence[Encoded], batch_size: int,
                run: Callable[[Batch], np.ndarray]) -> np.ndarray:
    """`run` over batches of similar length, its rows (flattened to one row per text) put back in input order.

    Returns float32 (len(encoded), width), the width being that of `run`'s first result; `encoded` must not
    be empty.
    """
    out: np.ndarray | None = None
    for batch in encoder.batches(encoded, batch_size):
        result = run(batch)
        result = result.reshape(result.shape[0], -1)
        if out is None:
            out = np.zeros((len(encoded), result.shape[1]), dtype=np.float32)
        out[batch.index] = result
    assert out is not None, "run_batches needs at least one text"
    return out


# ---- pooling and scores: pure numpy, shared by the tests' expectations ----

def pool(hidden: np.ndarray, mask: np.ndarray, pooling: str, padding_side: str) -> np.ndarray:
    """One vector per row of `hidden` (n, length, dim) by the model's pooling, ignoring pads.

    Raises:
        ModelError: an unknown pooling.
    """
    hidden = hidden.astype(np.float32, copy=False)
    if pooling == "last_token":
        if padding_side == "left":
            # Left padding puts every text's last real token (the EOS) in the last column.
            return hidden[:, -1]
        last = mask.sum(axis=1) - 1
        return hidden[np.arange(hidden.shape[0]), last]
    if pooling == "mean":
        # sentence-transformers' mean: masked sum over the count of real tokens
        weights = mask[..., None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    if pooling == "cls":
        first = mask.argmax(axis=1)  # the first real token, wherever the pads are
        return hidden[np.arange(hidden.shape[0]), first]
    raise ModelError(f"unknown pooling {pooling!r}")


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.clip(norms, 1e-12, None)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function in float64, without overflow warnings for large logits."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def scores_from_logits(logits: np.ndarray) -> np.ndarray:
    """Relevance in 0..1 from a cross-encoder's logits: the sigmoid of one logit, or the positive
    class of two (softmax of two = sigmoid of their difference).

    Raises:
        ModelError: more than two logits per pair.
    """
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim == 1:
        return sigmoid(logits)
    if logits.shape[1] == 1:
        return sigmoid(logits[:, 0])
    if logits.shape[1] == 2:
        return sigmoid(logits[:, 1] - logits[:, 0])
    raise ModelError(f"a reranker must give one relevance logit per pair, not {logits.shape[1]}")


# ---- what both backends' model classes share ----

class LoadsOnFirstUse:
    """A model class whose model (an onnxruntime session, a torch module) is made on the first call.

    `_lazy` is the holder: anything with a `loaded` property and a `close()` method.
    """

    _lazy: Any

    @property
    def loaded(self) -> bool:
        """Whether the model is loaded yet."""
        return self._lazy.loaded

    def load(self) -> None:
        """Load the model now rather than on the first call (a search loads the reranker while its lists run)."""
        self._lazy.get()

    def close(self) -> None:
        """Drop the model (memory back); the next call loads it again."""
        self._lazy.close()


class BatchedEmbedder(LoadsOnFirstUse):
    """`embed` for a backend that gives `_hidden(batch)`, the last hidden state (n, length, dim) of a batch."""

    meta: ModelMeta
    encoder: TextEncoder
    dim: int
    batch_size: int
    #: ISO 639-1 codes the model reads, or ("multilingual",); () = not declared (reads any script).
    languages: tuple[str, ...]
    #: how the vectors are computed ("int8", "fp16", "fp32", "torch-fp32"): recorded with them, never compared.
    precision: str | None

    def _hidden(self, batch: Batch) -> np.ndarray:
        raise NotImplementedError

    def embed(self, texts: Sequence[str], is_query: bool = False) -> np.ndarray:
        """One float32 row per text, in input order; queries get the query prefix.

        Raises:
            ModelError: the backend cannot load or run the model.
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encoded = self.encoder.encode(texts, is_query=is_query)
        return run_batches(self.encoder, encoded, self.batch_size, self._vectors)

    def _vectors(self, batch: Batch) -> np.ndarray:
        vectors = pool(self._hidden(batch), batch.attention_mask, self.meta.pooling or "mean", self.meta.padding_side)
        return l2_normalize(vectors) if self.meta.normalize else vectors


class BatchedReranker(LoadsOnFirstUse):
    """`logits` and `score` for a backend that gives `_logits(batch)`, a cross-encoder's logits for a batch."""

    encoder: TextEncoder
    max_chars: int
    batch_size: int
    #: ISO 639-1 codes the model reads, or ("multilingual",); () = not declared (reads any script).
    languages: tuple[str, ...]

    def _logits(self, batch: Batch) -> np.ndarray:
        raise NotImplementedError

    def logits(self, query: str, passages: Sequence[str], *, max_chars: int | None = None) -> np.ndarray:
        """The raw logits, (n, labels) float32, in input order; each passage cut to `max_chars` (None: the
        reranker's own setting).

        Raises:
            ModelError: the backend cannot load or run the model.
        """
        if not passages:
            return np.zeros((0, 1), dtype=np.float32)
        encoded = self.encoder.encode_pairs(query, passages, max_chars=max_chars or self.max_chars)
        return run_batches(self.encoder, encoded, self.batch_size, self._logits)

    def score(self, query: str, passages: Sequence[str], *, max_chars: int | None = None) -> np.ndarray:
        """Relevance of each passage to the query, 0..1 (float64), in input order; `max_chars` as `logits`.

        Raises:
            ModelError: the backend cannot load or run the model.
        """
        if not passages:
            return np.zeros(0, dtype=np.float64)
        return scores_from_logits(self.logits(query, passages, max_chars=max_chars))
