"""The run-time backend: exported ONNX models on onnxruntime, with `tokenizers` and numpy around them.

onnxruntime is imported when the first text is embedded or scored, not at import: `puremind --help`
and the server's start stay fast, and a model that is never used costs nothing. Its log goes to
stderr at warning severity and above (stdout belongs to JSON-RPC in `serve`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from puremind.errors import ModelError
from puremind.models.tokenize import Batch, ModelMeta, TextEncoder, read_json

log = logging.getLogger("puremind.models")

META_FILE = "puremind_model.json"
MODEL_FILE = "model.onnx"
#: onnxruntime severities: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal. Warnings and worse only:
#: its info level narrates every graph transformation. onnxruntime writes its log to stderr.
ORT_LOG_SEVERITY = 2


def read_meta(artefact_dir: Path) -> dict:
    """The `puremind_model.json` of an artefact folder (not checksum-verified; the loader does that).

    Raises:
        ModelError: the folder has no model description or no model.onnx.
    """
    artefact_dir = Path(artefact_dir)
    data = read_json(artefact_dir / META_FILE)
    if not data:
        raise ModelError(f"{artefact_dir} holds no exported model ({META_FILE} is missing)",
                         hint="run `puremind export-models`")
    if not (artefact_dir / MODEL_FILE).is_file():
        raise ModelError(f"{artefact_dir} has no {MODEL_FILE}", hint="run `puremind export-models --force`")
    return data


def session_options(threads: int | None) -> Any:
    """onnxruntime SessionOptions: quiet log, `threads` intra-op threads (None: onnxruntime decides)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = ORT_LOG_SEVERITY
    options.intra_op_num_threads = int(threads) if threads else 0
    # One operator at a time: inter-op parallelism does not help these sequential graphs and would
    # add its own thread pool on top of `threads`.
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return options


def create_session(model_path: Path, providers: Sequence[str], threads: int | None) -> Any:
    """An onnxruntime InferenceSession on the given providers (best first).

    Raises:
        ModelError: onnxruntime is missing or cannot load the model.
    """
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ModelError(f"onnxruntime cannot be imported: {exc}", hint="pip install onnxruntime") from exc
    ort.set_default_logger_severity(ORT_LOG_SEVERITY)
    try:
        session = ort.InferenceSession(str(model_path), sess_options=session_options(threads),
                                       providers=list(providers))
    except Exception as exc:  # onnxruntime raises its own exception types, not exported stably
        raise ModelError(f"onnxruntime cannot load {model_path}: {str(exc).splitlines()[0] if str(exc) else exc!r}",
                         hint="run `puremind export-models --force` to export it again") from exc
    active = session.get_providers()
    if providers and providers[0] not in active:
        # onnxruntime falls back to the CPU silently, e.g. when CUDA libraries are missing.
        log.warning("%s did not start for %s; running on %s", providers[0], model_path.parent.name, ", ".join(active))
    return session


class _LazySession:
    """An InferenceSession made on first use, once, even with several threads asking."""

    def __init__(self, model_path: Path, providers: Sequence[str], threads: int | None):
        self.model_path = model_path
        self.providers = list(providers)
        self.threads = threads
        self._session: Any = None
        self._lock = threading.Lock()
        self.input_names: tuple[str, ...] = ()
        self.output_names: tuple[str, ...] = ()

    def get(self) -> Any:
        session = self._session
        if session is None:
            with self._lock:
                if self._session is None:
                    created = create_session(self.model_path, self.providers, self.threads)
                    self.input_names = tuple(i.name for i in created.get_inputs())
                    self.output_names = tuple(o.name for o in created.get_outputs())
                    self._session = created
                session = self._session
        return session

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def active_providers(self) -> list[str]:
        return list(self._session.get_providers()) if self._session is not None else []

    def close(self) -> None:
        with self._lock:
            self._session = None

    def run(self, output: str, batch: Batch) -> np.ndarray:
        """Run one batch, feeding only the inputs the graph declares (read from the session).

        Raises:
            ModelError: the graph wants an input pureMind does not know how to make, or the run fails.
        """
        session = self.get()
        feeds: dict[str, np.ndarray] = {}
        for name in self.input_names:
            if name == "input_ids":
                feeds[name] = batch.input_ids
            elif name == "attention_mask":
                feeds[name] = batch.attention_mask
            elif name == "position_ids":
                feeds[name] = batch.position_ids()
            elif name == "token_type_ids":
                feeds[name] = batch.token_type_ids
            else:
                raise ModelError(f"{self.model_path} wants an input pureMind cannot supply: {name!r}")
        name = output if output in self.output_names else self.output_names[0]
        try:
            (result,) = session.run([name], feeds)
        except Exception as exc:  # onnxruntime's runtime errors
            raise ModelError(f"onnxruntime failed on {self.model_path}: {str(exc).splitlines()[0]}") from exc
        return np.asarray(result, dtype=np.float32)


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


class _SessionOwner:
    """What both model classes say about their lazily created onnxruntime session."""

    _session: "_LazySession"

    @property
    def loaded(self) -> bool:
        """Whether the onnxruntime session exists yet."""
        return self._session.loaded

    @property
    def active_providers(self) -> list[str]:
        """The providers onnxruntime actually runs on ([] before the first call)."""
        return self._session.active_providers()

    def close(self) -> None:
        """Drop the session (memory back); the next call loads it again."""
        self._session.close()


class OnnxEmbedder(_SessionOwner):
    """Implements `puremind.models.base.Embedder` over an exported ONNX model folder."""

    def __init__(self, artefact_dir: Path, *, providers: Sequence[str], max_tokens: int, threads: int | None = None,
                 batch_size: int = 16, fingerprint: str, meta: Mapping[str, Any] | None = None):
        """Read the model description and tokenizer; the onnxruntime session waits for the first call.

        `max_tokens` is the `embed_max_seq` setting (capped at the model's own limit). `meta` is the
        already-read `puremind_model.json` when the caller verified it; otherwise it is read here.

        Raises:
            ModelError: the folder is not an exported embedder, or its tokenizer cannot be used.
        """
        self.artefact_dir = Path(artefact_dir)
        data = dict(meta) if meta is not None else read_meta(self.artefact_dir)
        self.meta = ModelMeta.from_mapping(data)
        if self.meta.role != "embedder":
            raise ModelError(f"{self.artefact_dir} holds a {self.meta.role}, not an embedder")
        if not self.meta.dim:
            raise ModelError(f"{self.artefact_dir}: the model description has no output dimension")
        self.fingerprint = fingerprint
        self.dim = int(self.meta.dim)
        self.batch_size = max(1, int(batch_size))
        self.variant = data.get("variant")
        self.encoder = TextEncoder(self.artefact_dir, self.meta, max_tokens=max_tokens)
        self._session = _LazySession(self.artefact_dir / MODEL_FILE, providers, threads)

    def embed(self, texts: Sequence[str], is_query: bool = False) -> np.ndarray:
        """One float32 row per text, in input order; queries get the query prefix.

        Raises:
            ModelError: onnxruntime cannot load or run the model.
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encoded = self.encoder.encode(texts, is_query=is_query)
        for batch in self.encoder.batches(encoded, self.batch_size):
            hidden = self._session.run("last_hidden_state", batch)
            vectors = pool(hidden, batch.attention_mask, self.meta.pooling or "mean", self.meta.padding_side)
            if vectors.shape[1] != self.dim:
                raise ModelError(f"{self.artefact_dir} gives {vectors.shape[1]}-dimensional vectors, "
                                 f"its description says {self.dim}")
            out[batch.index] = l2_normalize(vectors) if self.meta.normalize else vectors
        return out


class OnnxReranker(_SessionOwner):
    """Implements `puremind.models.base.Reranker` over an exported ONNX cross-encoder folder."""

    def __init__(self, artefact_dir: Path, *, providers: Sequence[str], max_chars: int = 800,
                 threads: int | None = None, batch_size: int = 16, meta: Mapping[str, Any] | None = None):
        """Read the model description and tokenizer; the onnxruntime session waits for the first call.

        Raises:
            ModelError: the folder is not an exported reranker, or its tokenizer cannot be used.
        """
        self.artefact_dir = Path(artefact_dir)
        data = dict(meta) if meta is not None else read_meta(self.artefact_dir)
        self.meta = ModelMeta.from_mapping(data)
        if self.meta.role != "reranker":
            raise ModelError(f"{self.artefact_dir} holds an {self.meta.role}, not a reranker")
        self.max_chars = max_chars
        self.batch_size = max(1, int(batch_size))
        self.variant = data.get("variant")
        self.encoder = TextEncoder(self.artefact_dir, self.meta)
        self._session = _LazySession(self.artefact_dir / MODEL_FILE, providers, threads)

    def logits(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """The raw logits, (n, labels) float32, in input order.

        Raises:
            ModelError: onnxruntime cannot load or run the model.
        """
        if not passages:
            return np.zeros((0, 1), dtype=np.float32)
        encoded = self.encoder.encode_pairs(query, passages, max_chars=self.max_chars)
        out: np.ndarray | None = None
        for batch in self.encoder.batches(encoded, self.batch_size):
            result = self._session.run("logits", batch)
            result = result.reshape(result.shape[0], -1)
            if out is None:
                out = np.zeros((len(passages), result.shape[1]), dtype=np.float32)
            out[batch.index] = result
        assert out is not None
        return out

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Relevance of each passage to the query, 0..1 (float64), in input order.

        Raises:
            ModelError: onnxruntime cannot load or run the model.
        """
        if not passages:
            return np.zeros(0, dtype=np.float64)
        return scores_from_logits(self.logits(query, passages))
