"""From a ModelChoice to a ready Embedder or Reranker: manifest or generic spec, exported artefacts, backend.

The ONNX path needs only the exported artefacts under <home>/models (the Hugging Face cache is not read again
once a pinned model is exported). When the artefact a device needs is missing, the caller's `obtain` is asked for
it (the application layer exports it there when the [export] extra is installed); without one the error says
which command to run. This module never imports the export step. Nothing here loads a model into memory: the
backends open their sessions on first use.
"""

from __future__ import annotations

import dataclasses
import hashlib
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from puremind.errors import ModelError
from puremind.fingerprint import index_mismatch, vector_identity
from puremind.models.base import Embedder, ModelsUnavailable, Reranker
from puremind.models.folder_spec import generic_spec
from puremind.models.manifest import ModelSpec, load_manifest

Progress = Callable[[str], None]

EXPORT_HINT = "pip install 'puremind[export]' (it brings torch and Optimum for this one step), then run `puremind export-models`"


@dataclass(frozen=True)
class ModelChoice:
    """What the model layer needs to find and load one configured model (the application layer builds it from
    the settings): its role, name (hub id or local folder) and revision, where exported models live, and how to
    run it. `pooling`, `query_prefix` and `max_tokens` apply to an embedder, `max_chars` to a reranker."""

    role: str  # "embedder" or "reranker"
    name: str
    home: Path
    revision: str | None = None
    backend: str = "onnx"
    device: str = "auto"
    variant: str = "auto"
    pooling: str = "auto"
    query_prefix: str | None = None
    max_tokens: int = 2048
    max_chars: int = 800
    #: intra-op threads of the model (None: the runtime's default, every core)
    threads: int | None = None


@dataclass(frozen=True)
class Resolved:
    """A model as the settings name it: its spec, the revision its artefacts are filed under, and its source
    folder when it had to be looked up (generic and local models; None for a pinned manifest model)."""

    spec: ModelSpec
    revision: str
    source: object | None  # puremind.models.hub.ModelSource


def _overrides(choice: ModelChoice) -> dict:
    if choice.role != "embedder":
        return {}
    out: dict = {}
    if choice.pooling != "auto":
        out["pooling"] = choice.pooling
    if choice.query_prefix is not None:
        out["query_prefix"] = choice.query_prefix
    return out


def resolve(choice: ModelChoice, *, progress: Progress | None = None) -> Resolved:
    """The spec and revision of the chosen embedder or reranker.

    A pinned manifest model is resolved without touching the disk or the network. Another hub model or a local
    folder is looked up with `hub.fetch` (cache first; a download only when missing and online).

    Raises:
        ModelError: the model cannot be found or described.
    """
    from puremind.models import hub

    name, revision, role = choice.name, choice.revision, choice.role
    overrides = _overrides(choice)
    if not hub.is_local_name(name):
        spec = load_manifest().by_hub_id(name)
        if spec is not None:
            if spec.role != role:
                raise ModelError(f"{name} is a {spec.role} in the models manifest, not an {role}")
            for key, value in overrides.items():
                spec = dataclasses.replace(spec, **{key: value})
            return Resolved(spec=spec, revision=revision or spec.revision, source=None)
    # The torch backend reads safetensors weights; the ONNX runtime takes the repository's ONNX model if it has one.
    source = hub.fetch(name, revision, None, progress=progress,
                       weights="safetensors" if choice.backend == "torch" else "onnx")
    spec = generic_spec(name, source.path, role=role, overrides=overrides)
    return Resolved(spec=spec, revision=source.revision, source=source)


def fingerprint(resolved: Resolved, choice: ModelChoice) -> str:
    """Identity of the vectors an embedder makes: vectors with another fingerprint are never compared.

    Model, revision, pooling, normalisation, prefixes and token limit; not the precision or the backend (fp32,
    fp16 and int8 of one model embed into the same space, cosine 0.998), which is recorded apart.
    """
    spec = resolved.spec
    prefix = hashlib.sha256(spec.query_prefix.encode("utf-8")).hexdigest()[:12]
    passage = hashlib.sha256(spec.passage_prefix.encode("utf-8")).hexdigest()[:12]
    max_tokens = min(choice.max_tokens, spec.max_tokens)
    return (
        f"{spec.hub_id}@{resolved.revision}|pool={spec.pooling}|norm={int(spec.normalize)}"
        f"|q={prefix}|p={passage}|max={max_tokens}"
    )


def reranker_fingerprint(resolved: Resolved, choice: ModelChoice, precision: str) -> str:
    """Identity of the scores a cross-encoder gives, for the caches of scores (puremind.retrieval.rerank): model,
    revision, precision (int8 scores are not fp32 scores) and how much of each passage it reads."""
    return f"{resolved.spec.hub_id}@{resolved.revision}|{precision}|chars={choice.max_chars}"


def configured_fingerprint(choice: ModelChoice) -> str | None:
    """The fingerprint the chosen embedder will have, when that can be known without the disk or the network:
    a pinned manifest model (settings overrides included). None for other models."""
    from puremind.models import hub

    if hub.is_local_name(choice.name):
        return None
    spec = load_manifest().by_hub_id(choice.name)
    if spec is None or spec.role != "embedder":
        return None
    return fingerprint(resolve(choice), choice)


def check_index_embedder(choice: ModelChoice, stored: str | None, *, doing: str = "searches are refused") -> None:
    """Compare the configured embedder with the fingerprint of an index's vectors, BEFORE anything is fetched,
    exported or loaded: a pinned model by its whole fingerprint, another hub model or local folder by name (and
    by revision when one is pinned in the settings). What cannot be known cheaply is checked after loading.

    Raises:
        FingerprintMismatch: the index holds vectors of another model or settings (both are named).
    """
    if stored is None or "@" not in stored.split("|", 1)[0]:
        return  # no vectors, or a fingerprint not written by this loader
    expected = configured_fingerprint(choice)
    if expected is not None:
        if vector_identity(stored) != vector_identity(expected):
            raise index_mismatch(stored, expected, doing=doing)
        return
    from puremind.models import hub

    name, _, revision = stored.split("|", 1)[0].rpartition("@")
    pinned = choice.revision
    wanted_revision = pinned if pinned and len(pinned) == 40 else None
    same_name = name == choice.name if hub.is_local_name(name) else name.casefold() == choice.name.casefold()
    if not same_name or (wanted_revision is not None and revision != wanted_revision):
        configured = f"{choice.name}@{wanted_revision}" if wanted_revision else choice.name
        raise index_mismatch(stored, configured, doing=doing)


def _providers(choice: ModelChoice) -> list[str]:
    from puremind.models.providers import available_providers, select_providers

    return select_providers(choice.device, available_providers(), platform.system(), platform.machine())


def _variant(choice: ModelChoice, resolved: Resolved, providers: Sequence[str]) -> str:
    from puremind.models.artefacts import list_variants
    from puremind.models.providers import choose_variant

    if choice.variant != "auto":
        if choice.variant not in resolved.spec.variants:
            raise ModelError(
                f"variant {choice.variant!r} is not defined for {resolved.spec.hub_id}",
                hint="defined: " + ", ".join(sorted(resolved.spec.variants)),
            )
        return choice.variant  # forced: chosen even when kept out at export
    present = list_variants(choice.home, resolved.spec.key, resolved.revision)
    onnx_variants = [v for v in resolved.spec.variants if v != "coreml"]
    out = kept_out_variants(choice.home, resolved, present)
    candidates = list(present) or onnx_variants
    if out and "fp32" in onnx_variants and "fp32" not in candidates:
        candidates.append("fp32")  # what serves in place of a kept-out variant; exported on first use
    return choose_variant(providers, candidates, resolved.spec.default_variant, kept_out=out)


def kept_out_variants(home: Path, resolved: Resolved, present: Sequence[str]) -> list[str]:
    """The exported variants whose metadata says they failed their fidelity check at export (read, not
    verified: the chosen variant is verified when it loads)."""
    import json

    from puremind.models.artefacts import META_NAME, artefact_dir
    from puremind.models.fidelity import kept_out

    out = []
    for name in present:
        try:
            meta = json.loads((artefact_dir(home, resolved.spec.key, resolved.revision, name) / META_NAME)
                              .read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # an unreadable one is refused with a clear error if it is chosen
        if isinstance(meta, dict) and kept_out(meta):
            out.append(name)
    return out


def ready_variant(choice: ModelChoice, resolved: Resolved, providers: Sequence[str], *, obtain: "Obtain | None",
                  progress: Progress | None) -> tuple[str, Path]:
    """The variant to run and the folder of its verified export. A variant exported just now (by `obtain`) that
    failed its fidelity check is passed over for the next one, as a variant exported earlier would be.

    Raises:
        ModelsUnavailable, ModelError: as `ensure_artefact` and `choose_variant`.
    """
    variant = _variant(choice, resolved, providers)
    folder = ensure_artefact(choice, resolved, variant, obtain=obtain, progress=progress)
    if choice.variant == "auto" and kept_out_variants(choice.home, resolved, [variant]):
        variant = _variant(choice, resolved, providers)
        folder = ensure_artefact(choice, resolved, variant, obtain=obtain, progress=progress)
    return variant, folder


#: How the application layer obtains an ONNX variant that is not exported yet: (choice, resolved, variant,
#: progress) -> the folder of the verified export. It raises ModelsUnavailable when it cannot (no [export] extra).
Obtain = Callable[[ModelChoice, Resolved, str, "Progress | None"], Path]


def source_of(resolved: Resolved, *, progress: Progress | None = None):
    """The model's files (hub.ModelSource): the folder already looked up, else the pinned snapshot from the cache
    (downloaded when missing and online).

    Raises:
        ModelsUnavailable: not cached and no network to download it.
        ModelError: the model cannot be found or fetched.
    """
    from puremind.models import hub

    if resolved.source is not None:
        return resolved.source
    return hub.fetch(resolved.spec.hub_id, resolved.revision, resolved.spec.files, progress=progress)


def ensure_artefact(choice: ModelChoice, resolved: Resolved, variant: str, *, obtain: Obtain | None = None,
                    progress: Progress | None = None) -> Path:
    """The folder of an exported, verified ONNX variant; one that is missing comes from `obtain`.

    Raises:
        ModelsUnavailable: not exported and nothing can export it here (the message says what to run).
        ModelError: the export or the verification failed.
    """
    from puremind.models.artefacts import artefact_dir, read_artefact

    folder = artefact_dir(choice.home, resolved.spec.key, resolved.revision, variant)
    if (folder / "puremind_model.json").is_file():
        read_artefact(folder, verify=True)
        return folder
    if obtain is None:
        raise ModelsUnavailable(
            f"{resolved.spec.hub_id} is not exported for ONNX Runtime yet ({variant})",
            hint=EXPORT_HINT,  # load_embedder / load_reranker add the other ways forward
        )
    return obtain(choice, resolved, variant, progress)


def ways_forward(choice: ModelChoice, first: str | None = None) -> str:
    """One hint line naming every way forward for a model that cannot be had here; `first` (the specific
    remedy, e.g. "unset HF_HUB_OFFLINE ...") leads."""
    from puremind.models import hub
    from puremind.models.onnx_folder import FP32_FILES, find_onnx

    role = choice.role
    pinned = not hub.is_local_name(choice.name) and load_manifest().by_hub_id(choice.name) is not None
    models = choice.home / "models"
    parts = [first] if first else []
    if pinned and choice.backend != "torch":
        # The ONNX runtime reads nothing but these folders for a pinned model: a copy is enough.
        parts.append(f"run `puremind export-models` on a machine with network and copy its ~/.puremind/models "
                     f"folder to {models}")
        parts.append(f"set [models] {role} to a local model folder")
    elif hub.is_local_name(choice.name):
        # The user already copied a folder here: what it lacks is an ONNX model (only such a folder needs the extra).
        if find_onnx(Path(choice.name).expanduser()) is None:
            parts.append(f"put the model's ONNX export in that local model folder as {FP32_FILES[0]} beside "
                         "tokenizer.json (many hub repositories ship one), since a folder with ONNX runs without the "
                         "[export] extra")
    else:
        parts.append(f"download the model on a machine with network, copy its folder here and set [models] {role} "
                     f"to that local model folder (one with an ONNX model, {FP32_FILES[0]}, runs without the "
                     "[export] extra)")
    if role == "embedder":
        parts.append('set [models] embedder = "none" (PUREMIND_EMBED_MODEL=none) for keyword search only')
    else:
        parts.append("search without reranking: --no-rerank, or [retrieval] rerank = false")
    return "; or ".join(parts)


def _unavailable(choice: ModelChoice, exc: ModelsUnavailable) -> ModelsUnavailable:
    return ModelsUnavailable(exc.message, hint=ways_forward(choice, exc.hint))


def load_embedder(choice: ModelChoice, *, obtain: Obtain | None = None, progress: Progress | None = None) -> Embedder:
    """The chosen embedder, ready to embed (its model loads on the first call).

    Raises:
        ModelsUnavailable: the model cannot be had here (not cached and no network to download it, or not
            exported and nothing to export it); the hint names the ways forward.
        ModelError: the model cannot be found, fetched, exported or verified.
    """
    try:
        return _load_embedder(choice, obtain, progress)
    except ModelsUnavailable as exc:
        raise _unavailable(choice, exc) from exc


def _load_embedder(choice: ModelChoice, obtain: Obtain | None, progress: Progress | None) -> Embedder:
    resolved = resolve(choice, progress=progress)
    if resolved.spec.role != "embedder":
        raise ModelError(f"{choice.name} is not an embedding model")
    max_tokens = min(choice.max_tokens, resolved.spec.max_tokens)
    fp = fingerprint(resolved, choice)
    languages = resolved.spec.languages
    if choice.backend == "torch":
        from puremind.models.torch_backend import TorchEmbedder

        source = source_of(resolved, progress=progress)
        return TorchEmbedder(source.path, resolved.spec, device=choice.device, max_tokens=max_tokens, fingerprint=fp,
                             languages=languages, precision="torch-fp32", threads=choice.threads)
    from puremind.models.onnx_backend import OnnxEmbedder

    providers = _providers(choice)
    variant, folder = ready_variant(choice, resolved, providers, obtain=obtain, progress=progress)
    model = OnnxEmbedder(folder, providers=providers, max_tokens=max_tokens, fingerprint=fp, languages=languages,
                         precision=variant, threads=choice.threads, batch_size=onnx_batch_size(variant))
    return _checked(model, choice, resolved, variant, folder, progress)


def load_reranker(choice: ModelChoice, *, obtain: Obtain | None = None, progress: Progress | None = None) -> Reranker:
    """The chosen cross-encoder, ready to score (its model loads on the first call).

    Raises:
        ModelsUnavailable: the model cannot be had here (not cached and no network to download it, or not
            exported and nothing to export it); the hint names the ways forward, --no-rerank among them.
        ModelError: the model cannot be found, fetched, exported or verified.
    """
    try:
        return _load_reranker(choice, obtain, progress)
    except ModelsUnavailable as exc:
        raise _unavailable(choice, exc) from exc


def _load_reranker(choice: ModelChoice, obtain: Obtain | None, progress: Progress | None) -> Reranker:
    resolved = resolve(choice, progress=progress)
    languages = resolved.spec.languages
    if choice.backend == "torch":
        from puremind.models.torch_backend import TorchReranker

        source = source_of(resolved, progress=progress)
        return TorchReranker(source.path, resolved.spec, device=choice.device, max_chars=choice.max_chars,
                             languages=languages, threads=choice.threads,
                             fingerprint=reranker_fingerprint(resolved, choice, "torch-fp32"))
    from puremind.models.onnx_backend import OnnxReranker

    providers = _providers(choice)
    variant, folder = ready_variant(choice, resolved, providers, obtain=obtain, progress=progress)
    model = OnnxReranker(folder, providers=providers, max_chars=choice.max_chars, languages=languages,
                         threads=choice.threads, fingerprint=reranker_fingerprint(resolved, choice, variant),
                         batch_size=onnx_batch_size(variant))
    return _checked(model, choice, resolved, variant, folder, progress)


def _checked(model, choice: ModelChoice, resolved: Resolved, variant: str, folder: Path, progress: Progress | None):
    """`model` with its first session checked against the export's reference on the provider it gets here
    (`puremind.models.provider_check`)."""
    from puremind.messages import to_stderr
    from puremind.models.artefacts import read_artefact
    from puremind.models.provider_check import ProviderCheck

    try:
        meta = read_artefact(folder, verify=False)  # verified a moment ago by ensure_artefact
    except ModelError:
        return model  # a folder handed in without metadata (a caller's own `obtain`): no reference to check against
    model.check_providers_with(ProviderCheck(choice.home, meta, resolved.spec.role,
                                             label=f"{resolved.spec.hub_id} {variant}", warn=to_stderr))
    return model


#: Texts (embedder) or pairs (cross-encoder) per call of an ONNX model, by variant. int8 is dynamic quantisation:
#: each weight matmul quantises its input with one scale for the whole batch, padding included, so in a batch a
#: text's vector or a pair's score moves with its batch mates. Passages of 40 tokens of multilingual-e5-small
#: moved by up to 0.005 in cosine (as much as int8 itself costs against fp32): the same vault indexed twice, its
#: calls sized by time, got other vectors and rankings (tldr-pages bs: 342 of 350 vectors, 93 of 200 queries' top
#: 3), a note re-embedded alone got another vector than in a rebuild, and a reranking budget would not give
#: exactly the scores of no budget. One text or pair per call makes an int8 output a function of its input alone.
#: Cost (bench/RESULTS.md, sections rerank-batching and embed-batching): none for the full-size stand-ins and
#: for passages of 200 tokens or more; short passages of a small model embed slower. Float variants batch: their
#: outputs do not depend on their batch mates.
ONNX_BATCH = {"int8": 1}


def onnx_batch_size(variant: str) -> int:
    return ONNX_BATCH.get(variant, 16)
