"""From settings to a ready Embedder or Reranker: manifest or generic spec, exported artefacts, backend.

The ONNX path needs only the exported artefacts under PUREMIND_HOME/models (the Hugging Face cache is not read
again once a pinned model is exported). When the artefact a device needs is missing, it is exported on the spot
if the [export] extra is installed; otherwise the error says which command to run. Nothing here loads a model
into memory: the backends open their sessions on first use.
"""

from __future__ import annotations

import dataclasses
import hashlib
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from puremind.config import Settings
from puremind.errors import ModelError
from puremind.models.base import Embedder, ModelsUnavailable, Reranker, SemanticOff
from puremind.models.manifest import ModelSpec, generic_spec, load_manifest

Progress = Callable[[str], None]

EXPORT_HINT = "pip install 'puremind[export]' (it brings torch and Optimum for this one step), then run `puremind export-models`"


@dataclass(frozen=True)
class Resolved:
    """A model as the settings name it: its spec, the revision its artefacts are filed under, and its source
    folder when it had to be looked up (generic and local models; None for a pinned manifest model)."""

    spec: ModelSpec
    revision: str
    source: object | None  # puremind.models.hub.ModelSource


def _overrides(settings: Settings, role: str) -> dict:
    if role != "embedder":
        return {}
    out: dict = {}
    if settings.pooling != "auto":
        out["pooling"] = settings.pooling
    if settings.query_prefix is not None:
        out["query_prefix"] = settings.query_prefix
    return out


def resolve(settings: Settings, role: str, *, progress: Progress | None = None) -> Resolved:
    """The spec and revision of the configured embedder or reranker.

    A pinned manifest model is resolved without touching the disk or the network. Another hub model or a local
    folder is looked up with `hub.fetch` (cache first; a download only when missing and online).

    Raises:
        ModelError: the model cannot be found or described.
    """
    from puremind.models import hub

    name = settings.embedder if role == "embedder" else settings.reranker
    revision = settings.embedder_revision if role == "embedder" else settings.reranker_revision
    overrides = _overrides(settings, role)
    if not hub.is_local_name(name):
        spec = load_manifest().by_hub_id(name)
        if spec is not None:
            if spec.role != role:
                raise ModelError(f"{name} is a {spec.role} in the models manifest, not an {role}")
            for key, value in overrides.items():
                spec = dataclasses.replace(spec, **{key: value})
            return Resolved(spec=spec, revision=revision or spec.revision, source=None)
    source = hub.fetch(name, revision, None, progress=progress)
    spec = generic_spec(name, source.path, role=role, overrides=overrides)
    return Resolved(spec=spec, revision=source.revision, source=source)


def fingerprint(resolved: Resolved, variant: str, settings: Settings) -> str:
    """Identity of the vectors an embedder makes: vectors with another fingerprint are never compared."""
    spec = resolved.spec
    prefix = hashlib.sha256(spec.query_prefix.encode("utf-8")).hexdigest()[:12]
    passage = hashlib.sha256(spec.passage_prefix.encode("utf-8")).hexdigest()[:12]
    max_tokens = min(settings.embed_max_seq, spec.max_tokens)
    return (
        f"{spec.hub_id}@{resolved.revision}|{variant}|pool={spec.pooling}|norm={int(spec.normalize)}"
        f"|q={prefix}|p={passage}|max={max_tokens}"
    )


def _providers(settings: Settings) -> list[str]:
    from puremind.models.providers import available_providers, select_providers

    return select_providers(settings.device, available_providers(), platform.system(), platform.machine())


def _variant(settings: Settings, resolved: Resolved, providers: Sequence[str]) -> str:
    from puremind.models.artefacts import list_variants
    from puremind.models.providers import choose_variant

    if settings.variant != "auto":
        if settings.variant not in resolved.spec.variants:
            raise ModelError(
                f"variant {settings.variant!r} is not defined for {resolved.spec.hub_id}",
                hint="defined: " + ", ".join(sorted(resolved.spec.variants)),
            )
        return settings.variant
    present = list_variants(settings.home, resolved.spec.key, resolved.revision)
    onnx_variants = [v for v in resolved.spec.variants if v != "coreml"]
    return choose_variant(providers, present or onnx_variants, resolved.spec.default_variant)


def ensure_artefact(settings: Settings, resolved: Resolved, variant: str, *, progress: Progress | None = None) -> Path:
    """The folder of an exported, verified ONNX variant, exporting it first when needed and possible.

    Raises:
        ModelsUnavailable: not exported and the [export] extra is not installed (the message says what to run).
        ModelError: the export or the verification failed.
    """
    from puremind.models.artefacts import artefact_dir, read_artefact

    folder = artefact_dir(settings.home, resolved.spec.key, resolved.revision, variant)
    if (folder / "puremind_model.json").is_file():
        read_artefact(folder, verify=True)
        return folder
    try:
        from puremind.export import export_available, export_model
    except ImportError:  # pragma: no cover - the export package ships with puremind
        export_available = None
    if export_available is None or not export_available():
        raise ModelsUnavailable(
            f"{resolved.spec.hub_id} is not exported for ONNX Runtime yet ({variant})",
            hint=EXPORT_HINT,
        )
    from puremind.models import hub

    source = resolved.source
    if source is None:
        source = hub.fetch(resolved.spec.hub_id, resolved.revision, resolved.spec.files, progress=progress)
    if progress is not None:
        progress(f"exporting {resolved.spec.hub_id} ({variant}) once; later runs load the export")
    paths = export_model(resolved.spec, source, settings.home, [variant], progress=progress or _stderr)
    return paths[variant]


def _stderr(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def load_embedder(settings: Settings, *, progress: Progress | None = None) -> Embedder:
    """The configured embedder, ready to embed (its model loads on the first call).

    Raises:
        SemanticOff: semantic search is off (`embedder = "none"`).
        ModelsUnavailable: the model is not exported and cannot be here.
        ModelError: the model cannot be found, fetched, exported or verified.
    """
    if not settings.semantic:
        raise SemanticOff('semantic search is off (embedder = "none"): keyword search only')
    resolved = resolve(settings, "embedder", progress=progress)
    if resolved.spec.role != "embedder":
        raise ModelError(f"{settings.embedder} is not an embedding model")
    max_tokens = min(settings.embed_max_seq, resolved.spec.max_tokens)
    if settings.backend == "torch":
        from puremind.models import hub
        from puremind.models.torch_backend import TorchEmbedder

        source = resolved.source or hub.fetch(resolved.spec.hub_id, resolved.revision, resolved.spec.files, progress=progress)
        return _with_languages(TorchEmbedder(
            source.path, resolved.spec, device=settings.device, max_tokens=max_tokens,
            fingerprint=fingerprint(resolved, "torch-fp32", settings),
        ), resolved)
    from puremind.models.onnx_backend import OnnxEmbedder

    providers = _providers(settings)
    variant = _variant(settings, resolved, providers)
    folder = ensure_artefact(settings, resolved, variant, progress=progress)
    return _with_languages(OnnxEmbedder(
        folder, providers=providers, max_tokens=max_tokens, fingerprint=fingerprint(resolved, variant, settings)
    ), resolved)


def load_reranker(settings: Settings, *, progress: Progress | None = None) -> Reranker:
    """The configured cross-encoder, ready to score (its model loads on the first call).

    Raises:
        ModelsUnavailable: not exported and the [export] extra is not installed.
        ModelError: the model cannot be found, fetched, exported or verified.
    """
    resolved = resolve(settings, "reranker", progress=progress)
    if settings.backend == "torch":
        from puremind.models import hub
        from puremind.models.torch_backend import TorchReranker

        source = resolved.source or hub.fetch(resolved.spec.hub_id, resolved.revision, resolved.spec.files, progress=progress)
        return _with_languages(
            TorchReranker(source.path, resolved.spec, device=settings.device, max_chars=settings.rerank_chars), resolved
        )
    from puremind.models.onnx_backend import OnnxReranker

    providers = _providers(settings)
    variant = _variant(settings, resolved, providers)
    folder = ensure_artefact(settings, resolved, variant, progress=progress)
    return _with_languages(OnnxReranker(folder, providers=providers, max_chars=settings.rerank_chars), resolved)


def _with_languages(model, resolved: Resolved):
    """`model` carrying the languages its spec declares (the Searcher leaves it out for a query it cannot read)."""
    model.languages = resolved.spec.languages
    return model


def export_configured(
    settings: Settings,
    *,
    variants: Sequence[str] | None = None,
    coreml: bool | None = None,
    roles: Sequence[str] = ("embedder", "reranker"),
    force: bool = False,
    progress: Progress = _stderr,
) -> list[tuple[str, str, Path]]:
    """`puremind export-models`: fetch and export the configured models. Returns (model, variant, folder) rows.

    Raises:
        ModelError: the [export] extra is missing, or a model cannot be fetched or exported.
    """
    from puremind.export import export_available, export_model
    from puremind.models import hub

    if not export_available():
        raise ModelError("the export step needs the [export] extra (torch, Optimum)", hint=EXPORT_HINT.split(", then")[0])
    if coreml is None:
        coreml = platform.system() == "Darwin" and platform.machine() == "arm64"
    done: list[tuple[str, str, Path]] = []
    for role in roles:
        if role == "embedder" and not settings.semantic:
            continue
        resolved = resolve(settings, role, progress=progress)
        source = resolved.source or hub.fetch(resolved.spec.hub_id, resolved.revision, resolved.spec.files, progress=progress)
        wanted = list(variants) if variants else [v for v in resolved.spec.variants if v != "coreml"]
        unknown = [v for v in wanted if v not in resolved.spec.variants]
        if unknown:
            raise ModelError(
                f"unknown variant {', '.join(unknown)} for {resolved.spec.hub_id}",
                hint="defined: " + ", ".join(sorted(resolved.spec.variants)),
            )
        paths = export_model(resolved.spec, source, settings.home, wanted, progress=progress, force=force)
        done += [(resolved.spec.hub_id, v, p) for v, p in paths.items()]
        if coreml and "coreml" in resolved.spec.variants:
            from puremind.export import export_coreml

            done.append((resolved.spec.hub_id, "coreml", export_coreml(resolved.spec, source, settings.home, progress=progress)))
    return done
