"""The torch backend: the fetched model folder on transformers, behind the same two interfaces.

Used when `[models] backend = "torch"` (extra `[torch]`) and as the reference the ONNX backend is
tested against. Text goes through the same `TextEncoder` as the ONNX backend (so both see the same
tokens); the model and the pooling are torch's own. torch and transformers are imported when the
model is first used, never at import.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from puremind.errors import ModelError
from puremind.models.tokenize import Batch, ModelMeta, TextEncoder


def _import_torch() -> Any:
    try:
        import torch
        import transformers  # noqa: F401  (checked here so the error names the extra)
    except ImportError as exc:
        raise ModelError(f"the torch backend needs torch and transformers: {exc}",
                         hint="pip install 'puremind[torch]', or set backend = \"onnx\"") from exc
    return torch


class _LazyModel:
    """A transformers model loaded on first use, once."""

    def __init__(self, model_dir: Path, kind: str, device: str, threads: int | None):
        self.model_dir = model_dir
        self.kind = kind  # "embedder" | "reranker"
        self.requested_device = device  # a `device` setting: auto, cpu, cuda, mps or coreml
        self.device = "cpu"  # the torch device, settled when the model loads
        self.threads = threads
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def close(self) -> None:
        with self._lock:
            self._model = None

    def get(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self) -> Any:
        torch = _import_torch()
        from transformers import AutoModel, AutoModelForSequenceClassification

        from puremind.models.providers import select_torch_device

        mps = getattr(torch.backends, "mps", None)
        self.device = select_torch_device(
            self.requested_device,
            cuda_available=torch.cuda.is_available(),
            mps_available=bool(mps is not None and mps.is_available()),
        )
        if self.threads:
            torch.set_num_threads(int(self.threads))  # process-wide in torch; only when asked for
        cls = AutoModel if self.kind == "embedder" else AutoModelForSequenceClassification
        try:
            model = cls.from_pretrained(str(self.model_dir), trust_remote_code=False, dtype=torch.float32)
        except Exception as exc:  # transformers raises OSError/ValueError/... for a bad folder
            raise ModelError(f"transformers cannot load {self.model_dir}: {str(exc).splitlines()[0]}") from exc
        return model.to(self.device).eval()


def _tensors(batch: Batch, device: str, *, positions: bool) -> dict[str, Any]:
    import torch

    feeds = {
        "input_ids": torch.from_numpy(batch.input_ids).to(device),
        "attention_mask": torch.from_numpy(batch.attention_mask).to(device),
    }
    if positions:
        # Left padding: positions over real tokens only, as the ONNX graph is fed.
        feeds["position_ids"] = torch.from_numpy(batch.position_ids()).to(device)
    return feeds


def _accepts_token_types(model: Any) -> bool:
    """Whether the model's forward takes token_type_ids (BERT does; Qwen3 does not)."""
    import inspect

    return "token_type_ids" in inspect.signature(model.forward).parameters


class TorchEmbedder:
    """Implements `puremind.models.base.Embedder` with transformers' AutoModel."""

    def __init__(self, model_dir: Path, spec: Any, *, max_tokens: int, threads: int | None = None,
                 batch_size: int = 16, fingerprint: str, device: str = "auto"):
        """Read the tokenizer now; the model loads on the first call, on `device` (a `device` setting:
        auto = CUDA, then Apple's MPS, then the CPU).

        `spec` is a manifest ModelSpec, a ModelMeta or a `puremind_model.json`-style mapping.

        Raises:
            ModelError: the description is not an embedder's, or the tokenizer cannot be used.
        """
        self.model_dir = Path(model_dir)
        self.meta = ModelMeta.from_spec(spec)
        if self.meta.role != "embedder":
            raise ModelError(f"{self.model_dir} is described as a {self.meta.role}, not an embedder")
        self.fingerprint = fingerprint
        self.dim = int(self.meta.dim or 0)
        self.batch_size = max(1, int(batch_size))
        self.encoder = TextEncoder(self.model_dir, self.meta, max_tokens=max_tokens)
        self._model = _LazyModel(self.model_dir, "embedder", device, threads)

    @property
    def loaded(self) -> bool:
        return self._model.loaded

    def close(self) -> None:
        """Drop the model; the next call loads it again."""
        self._model.close()

    def embed(self, texts: Sequence[str], is_query: bool = False) -> np.ndarray:
        """One float32 row per text, in input order; queries get the query prefix.

        Raises:
            ModelError: torch/transformers missing or the model cannot be loaded.
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._model.get()
        device = self._model.device
        import torch

        encoded = self.encoder.encode(texts, is_query=is_query)
        rows: np.ndarray | None = None
        left = self.meta.padding_side == "left"
        with torch.inference_mode():
            for batch in self.encoder.batches(encoded, self.batch_size):
                feeds = _tensors(batch, device, positions=left)
                if _accepts_token_types(model):
                    feeds["token_type_ids"] = torch.from_numpy(batch.token_type_ids).to(device)
                hidden = model(**feeds).last_hidden_state.float()
                mask = feeds["attention_mask"]
                vectors = _torch_pool(hidden, mask, self.meta.pooling or "mean", left)
                if self.meta.normalize:
                    vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
                if rows is None:
                    rows = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
                rows[batch.index] = vectors.cpu().numpy()
        assert rows is not None
        return rows


def _torch_pool(hidden: Any, mask: Any, pooling: str, left: bool) -> Any:
    """Pooling written in torch, independently of the ONNX backend's numpy version."""
    import torch

    if pooling == "last_token":
        if left:
            return hidden[:, -1]
        last = mask.sum(dim=1) - 1
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    if pooling == "mean":
        # sentence-transformers' mean: masked sum over the count of real tokens
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(dim=1) / torch.clamp(weights.sum(dim=1), min=1e-9)
    if pooling == "cls":
        first = mask.to(torch.int64).argmax(dim=1)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), first]
    raise ModelError(f"unknown pooling {pooling!r}")


class TorchReranker:
    """Implements `puremind.models.base.Reranker` with transformers' AutoModelForSequenceClassification."""

    def __init__(self, model_dir: Path, spec: Any, *, max_chars: int = 800, threads: int | None = None,
                 batch_size: int = 16, device: str = "auto"):
        """Read the tokenizer now; the model loads on the first call, on `device` (as TorchEmbedder).

        Raises:
            ModelError: the description is not a reranker's, or the tokenizer cannot be used.
        """
        self.model_dir = Path(model_dir)
        self.meta = ModelMeta.from_spec(spec)
        if self.meta.role != "reranker":
            raise ModelError(f"{self.model_dir} is described as an {self.meta.role}, not a reranker")
        self.max_chars = max_chars
        self.batch_size = max(1, int(batch_size))
        self.encoder = TextEncoder(self.model_dir, self.meta)
        self._model = _LazyModel(self.model_dir, "reranker", device, threads)

    @property
    def loaded(self) -> bool:
        return self._model.loaded

    def close(self) -> None:
        """Drop the model; the next call loads it again."""
        self._model.close()

    def logits(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """The raw logits, (n, labels) float32, in input order.

        Raises:
            ModelError: torch/transformers missing or the model cannot be loaded.
        """
        if not passages:
            return np.zeros((0, 1), dtype=np.float32)
        model = self._model.get()
        device = self._model.device
        import torch

        encoded = self.encoder.encode_pairs(query, passages, max_chars=self.max_chars)
        out: np.ndarray | None = None
        with torch.inference_mode():
            for batch in self.encoder.batches(encoded, self.batch_size):
                # XLM-R derives positions from the ids itself; only pads need declaring.
                feeds = _tensors(batch, device, positions=False)
                if _accepts_token_types(model):
                    feeds["token_type_ids"] = torch.from_numpy(batch.token_type_ids).to(device)
                logits = model(**feeds).logits.float().cpu().numpy()
                logits = logits.reshape(logits.shape[0], -1)
                if out is None:
                    out = np.zeros((len(passages), logits.shape[1]), dtype=np.float32)
                out[batch.index] = logits
        assert out is not None
        return out

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Relevance of each passage to the query, 0..1 (float64), in input order.

        Raises:
            ModelError: torch/transformers missing or the model cannot be loaded.
        """
        from puremind.models.onnx_backend import scores_from_logits

        if not passages:
            return np.zeros(0, dtype=np.float64)
        return scores_from_logits(self.logits(query, passages))
