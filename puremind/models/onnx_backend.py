"""The run-time backend: exported ONNX models on onnxruntime, with `tokenizers` and numpy around them.

onnxruntime is imported when the first text is embedded or scored, not at import: `puremind --help`
and the server's start stay fast, and a model that is never used costs nothing. Its log goes to
stderr at warning severity and above (stdout belongs to JSON-RPC in `serve`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from puremind.errors import ModelError
from puremind.models.batching import BatchedEmbedder, BatchedReranker, LoadsOnFirstUse, l2_normalize, model_inputs
from puremind.models.onnx_folder import POOLED_OUTPUTS
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
    """An InferenceSession made on first use, once, even with several threads asking.

    `verify(active providers) -> bool`, when set, runs once the session exists and before any other caller gets
    it (`puremind.models.provider_check`): it may run texts through the model, whose calls reach this session
    from the checking thread. False makes the session again on the CPU alone (and checks that one too).
    """

    def __init__(self, model_path: Path, providers: Sequence[str], threads: int | None):
        self.model_path = model_path
        self.providers = list(providers)
        self.threads = threads
        self._session: Any = None  # made, maybe still being checked
        self._ready: Any = None  # made and checked: what other threads get
        self._checking: int | None = None  # the thread running the check
        self._lock = threading.Lock()
        self.input_names: tuple[str, ...] = ()
        self.output_names: tuple[str, ...] = ()
        self.verify: Callable[[list[str]], bool] | None = None

    def get(self) -> Any:
        session = self._ready
        if session is not None:
            return session
        if self._checking == threading.get_ident():
            return self._session  # the check's own texts
        with self._lock:
            if self._ready is None:
                self._make(self.providers)
                if self.verify is not None and not self._verified():
                    from puremind.models.providers import CPU

                    self._make([CPU])
                    self._verified()  # the CPU has nothing behind it: a disagreement there raises
                self._ready = self._session
            return self._ready

    def _make(self, providers: Sequence[str]) -> None:
        created = create_session(self.model_path, providers, self.threads)
        self.input_names = tuple(i.name for i in created.get_inputs())
        self.output_names = tuple(o.name for o in created.get_outputs())
        self._session = created

    def _verified(self) -> bool:
        self._checking = threading.get_ident()
        try:
            return bool(self.verify(list(self._session.get_providers())))
        except BaseException:
            self._session = None
            raise
        finally:
            self._checking = None

    @property
    def loaded(self) -> bool:
        return self._ready is not None

    def active_providers(self) -> list[str]:
        return list(self._ready.get_providers()) if self._ready is not None else []

    def close(self) -> None:
        with self._lock:
            self._session = None
            self._ready = None

    def run(self, output: str, batch: Batch) -> np.ndarray:
        """Run one batch, feeding only the inputs the graph declares (read from the session).

        Raises:
            ModelError: the graph wants an input pureMind does not know how to make, or the run fails.
        """
        session = self.get()
        feeds = model_inputs(batch, self.input_names, self.model_path)
        name = output if output in self.output_names else self.output_names[0]
        try:
            (result,) = session.run([name], feeds)
        except Exception as exc:  # onnxruntime's runtime errors
            raise ModelError(f"onnxruntime failed on {self.model_path}: {str(exc).splitlines()[0]}") from exc
        return np.asarray(result, dtype=np.float32)


class _SessionOwner(LoadsOnFirstUse):
    """What both model classes say about their lazily created onnxruntime session."""

    _lazy: "_LazySession"

    @property
    def threads(self) -> int | None:
        """The intra-op threads its session is made with (None: onnxruntime's default, every core)."""
        return self._lazy.threads

    @property
    def active_providers(self) -> list[str]:
        """The providers onnxruntime actually runs on ([] before the first call)."""
        return self._lazy.active_providers()

    def check_providers_with(self, check: Callable[[Any, list[str]], bool]) -> None:
        """Have `check(self, active providers)` prove the session before first use (see `_LazySession`)."""
        self._lazy.verify = lambda active: check(self, active)


class OnnxEmbedder(_SessionOwner, BatchedEmbedder):
    """Implements `puremind.models.base.Embedder` over an exported ONNX model folder."""

    def __init__(self, artefact_dir: Path, *, providers: Sequence[str], max_tokens: int, threads: int | None = None,
                 batch_size: int = 16, fingerprint: str, meta: Mapping[str, Any] | None = None,
                 languages: tuple[str, ...] = (), precision: str | None = None):
        """Read the model description and tokenizer; the onnxruntime session waits for the first call.

        `max_tokens` is the `embed_max_seq` setting (capped at the model's own limit). `meta` is the
        already-read `puremind_model.json` when the caller verified it; otherwise it is read here.
        `languages` are those the model reads (the spec's); `precision` is recorded with the vectors
        (None: the artefact's variant, e.g. "int8").

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
        self.languages = tuple(languages)
        self.precision = precision if precision is not None else data.get("variant")
        self.encoder = TextEncoder(self.artefact_dir, self.meta, max_tokens=max_tokens)
        self._lazy = _LazySession(self.artefact_dir / MODEL_FILE, providers, threads)
        # The graph output read: token vectors, pooled here, unless the graph pools itself (an ONNX file a model
        # folder shipped, see puremind.models.onnx_folder).
        self.output = str(data.get("output") or "last_hidden_state")
        self.pooled = self.output in POOLED_OUTPUTS

    def _hidden(self, batch: Batch) -> np.ndarray:
        hidden = self._lazy.run(self.output, batch)
        if hidden.shape[-1] != self.dim:
            raise ModelError(f"{self.artefact_dir} gives {hidden.shape[-1]}-dimensional vectors, "
                             f"its description says {self.dim}")
        return hidden

    def _vectors(self, batch: Batch) -> np.ndarray:
        if not self.pooled:
            return super()._vectors(batch)
        vectors = self._hidden(batch).reshape(len(batch.index), -1)
        return l2_normalize(vectors) if self.meta.normalize else vectors


class OnnxReranker(_SessionOwner, BatchedReranker):
    """Implements `puremind.models.base.Reranker` over an exported ONNX cross-encoder folder."""

    def __init__(self, artefact_dir: Path, *, providers: Sequence[str], max_chars: int = 800,
                 threads: int | None = None, batch_size: int = 16, meta: Mapping[str, Any] | None = None,
                 languages: tuple[str, ...] = (), fingerprint: str = ""):
        """Read the model description and tokenizer; the onnxruntime session waits for the first call.

        `languages` are those the model reads (the spec's); `fingerprint` tells its scores apart in the caches
        of scores (`puremind.models.loader.reranker_fingerprint`; "" = this object alone).

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
        self.languages = tuple(languages)
        self.fingerprint = fingerprint
        self.encoder = TextEncoder(self.artefact_dir, self.meta)
        self._lazy = _LazySession(self.artefact_dir / MODEL_FILE, providers, threads)

    def _logits(self, batch: Batch) -> np.ndarray:
        return self._lazy.run("logits", batch)
