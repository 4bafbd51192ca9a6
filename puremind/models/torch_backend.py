"""The torch backend: the fetched model folder on transformers, behind the same two interfaces.

Used when `[models] backend = "torch"` (extra `[torch]`) and as the reference the ONNX backend is
tested against. Text goes through the same `TextEncoder`, batches and pooling as the ONNX backend
(`puremind.models.batching`), so the two differ only in the model that computes the hidden states and
logits. torch and transformers are imported when the model is first used, never at import.
"""

from __future__ import annotations

import inspect
import threading
from pathlib import Path
from typing import Any

import numpy as np

from puremind.errors import ModelError
from puremind.models.batching import BatchedEmbedder, BatchedReranker, model_inputs
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
        self._token_types = False  # whether the model's forward takes token_type_ids, settled when it loads

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
                    model = self._load()
                    # BERT's forward takes token_type_ids; Qwen3's does not.
                    self._token_types = "token_type_ids" in inspect.signature(model.forward).parameters
                    self._model = model
        return self._model

    def run(self, batch: Batch, output: str, *, positions: bool) -> np.ndarray:
        """One batch through the model (loaded on first use): its `output` ("last_hidden_state" or "logits")
        as float32 numpy, fed input_ids, attention_mask, position_ids when `positions`, and token_type_ids when
        the model takes them.

        Raises:
            ModelError: torch/transformers missing or the model cannot be loaded.
        """
        model = self.get()
        import torch

        names = ["input_ids", "attention_mask"]
        if positions:
            names.append("position_ids")
        if self._token_types:
            names.append("token_type_ids")
        feeds = {k: torch.from_numpy(v).to(self.device) for k, v in model_inputs(batch, names, self.model_dir).items()}
        with torch.inference_mode():
            return getattr(model(**feeds), output).float().cpu().numpy()

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
        # transformers 4.56 renamed from_pretrained's `torch_dtype` to `dtype`; the older name still works there,
        # with a deprecation warning, so the name follows the installed release (the range is >=4.51.3,<4.58).
        import transformers

        major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
        dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
        try:
            model = cls.from_pretrained(str(self.model_dir), trust_remote_code=False, **{dtype_kw: torch.float32})
        except Exception as exc:  # transformers raises OSError/ValueError/... for a bad folder
            raise ModelError(f"transformers cannot load {self.model_dir}: {str(exc).splitlines()[0]}") from exc
        return model.to(self.device).eval()


class TorchEmbedder(BatchedEmbedder):
    """Implements `puremind.models.base.Embedder` with transformers' AutoModel."""

    def __init__(self, model_dir: Path, spec: Any, *, max_tokens: int, threads: int | None = None,
                 batch_size: int = 16, fingerprint: str, device: str = "auto", languages: tuple[str, ...] = (),
                 precision: str = "torch-fp32"):
        """Read the tokenizer now; the model loads on the first call, on `device` (a `device` setting:
        auto = CUDA, then Apple's MPS, then the CPU).

        `spec` is a manifest ModelSpec, a ModelMeta or a `puremind_model.json`-style mapping. `languages` are
        those the model reads (the spec's); `precision` is recorded with the vectors.

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
        self.languages = tuple(languages)
        self.precision = precision
        self.encoder = TextEncoder(self.model_dir, self.meta, max_tokens=max_tokens)
        self._lazy = _LazyModel(self.model_dir, "embedder", device, threads)

    def _hidden(self, batch: Batch) -> np.ndarray:
        # Left padding: positions over real tokens only, as the ONNX graph is fed.
        return self._lazy.run(batch, "last_hidden_state", positions=self.meta.padding_side == "left")


class TorchReranker(BatchedReranker):
    """Implements `puremind.models.base.Reranker` with transformers' AutoModelForSequenceClassification."""

    def __init__(self, model_dir: Path, spec: Any, *, max_chars: int = 800, threads: int | None = None,
                 batch_size: int = 16, device: str = "auto", languages: tuple[str, ...] = (),
                 fingerprint: str = ""):
        """Read the tokenizer now; the model loads on the first call, on `device` (as TorchEmbedder).
        `languages` are those the model reads (the spec's); `fingerprint` as OnnxReranker's.

        Raises:
            ModelError: the description is not a reranker's, or the tokenizer cannot be used.
        """
        self.model_dir = Path(model_dir)
        self.meta = ModelMeta.from_spec(spec)
        if self.meta.role != "reranker":
            raise ModelError(f"{self.model_dir} is described as an {self.meta.role}, not a reranker")
        self.max_chars = max_chars
        self.batch_size = max(1, int(batch_size))
        self.languages = tuple(languages)
        self.fingerprint = fingerprint
        self.encoder = TextEncoder(self.model_dir, self.meta)
        self._lazy = _LazyModel(self.model_dir, "reranker", device, threads)

    def _logits(self, batch: Batch) -> np.ndarray:
        # XLM-R derives positions from the ids itself; only pads need declaring.
        return self._lazy.run(batch, "logits", positions=False)
