"""The pinned models (models_manifest.toml) as validated, frozen data.

A model in the manifest is described there: hub id, revision, pooling, prefixes, limits, export variants.
A model not in it (a local folder or another hub id) is described from its own files by
`puremind.models.folder_spec.generic_spec`, into the same `ModelSpec`.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from puremind.errors import ModelError
from puremind.langs import normalize_languages
from puremind.models.hub import looks_like_hub_id

MANIFEST_FORMAT = 1
#: The manifest shipped with the package (a link to the top-level models_manifest.toml in a checkout).
DEFAULT_MANIFEST = Path(__file__).resolve().parent.parent / "models_manifest.toml"

ROLES = ("embedder", "reranker")
TASKS = {"embedder": "feature-extraction", "reranker": "text-classification"}
POOLINGS = ("last_token", "mean", "cls")
PADDING_SIDES = ("left", "right")
ACTIVATIONS = ("sigmoid",)
VARIANT_NAMES = ("fp32", "fp16", "int8", "coreml")
DTYPES = ("fp32", "fp16", "int8")
INT8_METHODS = ("dynamic-per-channel", "dynamic-per-tensor", "matmul-nbits-8", "static-per-channel")

_KEY_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")
_PROVIDER_RE = re.compile(r"[A-Za-z0-9]+ExecutionProvider")


class FrozenDict(dict):
    """A dict that cannot be changed after it is built: hashable, still JSON-serialisable and a `dict`."""

    def _readonly(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("this mapping is frozen")

    __setitem__ = __delitem__ = __ior__ = _readonly  # type: ignore[assignment]
    clear = pop = popitem = setdefault = update = _readonly  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle/deepcopy rebuild a dict subclass item by item through __setitem__; hand them the items at once.
        return (type(self), (dict(self),))


@dataclass(frozen=True)
class VariantSpec:
    """One export variant of a model."""

    name: str  # "fp32" | "fp16" | "int8" | "coreml"
    dtype: str  # "fp32" | "fp16" | "int8"
    method: str | None = None  # int8 only: one of INT8_METHODS
    exclude_ops: tuple[str, ...] = ()  # node-name substrings left in float
    providers: tuple[str, ...] = ()  # execution providers this variant suits


@dataclass(frozen=True)
class ModelSpec:
    """Everything pureMind needs to know about a model to fetch, export and run it."""

    key: str  # manifest name, e.g. "qwen3-embedding-0.6b"; for a generic model a slug of its name
    hub_id: str  # "Qwen/Qwen3-Embedding-0.6B", or the local directory path as given
    revision: str | None  # pinned commit; None for a model not in the manifest
    role: str  # "embedder" | "reranker"
    architecture: str  # config.json model_type
    task: str  # "feature-extraction" | "text-classification"
    pooling: str | None  # embedders: "last_token" | "mean" | "cls"
    normalize: bool  # L2-normalise embeddings
    padding_side: str  # "left" | "right"
    query_prefix: str  # prepended to queries only
    passage_prefix: str  # prepended to passages
    max_tokens: int  # the model's own limit
    dim: int | None  # output dimension (embedders)
    activation: str | None  # rerankers: "sigmoid"
    files: tuple[str, ...]  # files fetched from the hub
    variants: dict[str, VariantSpec]  # a FrozenDict
    default_variant: dict[str, str]  # execution provider -> variant name (a FrozenDict)
    #: ISO 639-1 codes the model was trained for, or ("multilingual",); () = not declared (reads anything).
    #: A search leaves the model out for a query mostly in scripts none of these use (puremind.langs).
    languages: tuple[str, ...] = ()


class Manifest:
    """The validated models of a manifest file, by name, in file order."""

    __slots__ = ("path", "_specs")

    def __init__(self, specs: Mapping[str, ModelSpec], path: Path):
        self.path = path
        self._specs = FrozenDict(specs)

    def names(self) -> list[str]:
        """The model names, in file order."""
        return list(self._specs)

    def get(self, name: str) -> ModelSpec:
        """The model called `name`.

        Raises:
            ModelError: no such model; the message lists the known names.
        """
        try:
            return self._specs[name]
        except KeyError:
            raise ModelError(
                f"unknown model {name!r} in the models manifest; known models: {', '.join(self._specs)}",
                hint="or give a Hugging Face model id (org/name) or a local folder (starting with /, ./, ../ or ~)",
            ) from None

    def by_hub_id(self, hub_id: str) -> ModelSpec | None:
        """The model whose hub id is `hub_id` (compared without case, as the hub does), or None."""
        wanted = hub_id.casefold()
        return next((spec for spec in self._specs.values() if spec.hub_id.casefold() == wanted), None)

    def __iter__(self) -> Iterator[ModelSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, name: object) -> bool:
        return name in self._specs


def load_manifest(path: Path | None = None) -> Manifest:
    """Read and validate a models manifest (default: the one shipped with pureMind).

    Raises:
        ModelError: the file is missing or unreadable, is not TOML, or holds a missing, unknown or bad key;
            the message names the file and the offending model and key.
    """
    path = DEFAULT_MANIFEST if path is None else Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ModelError(f"the models manifest {path} is missing", hint="reinstall pureMind") from None
    except OSError as exc:
        raise ModelError(f"cannot read the models manifest {path}: {exc.strerror or exc}") from exc
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        # tomllib's message ends with "(at line L, column C)".
        raise ModelError(f"broken models manifest {path}: {exc}") from exc

    where = f"models manifest {path}"
    _check_keys(doc, where, required=("format", "models"), optional=())
    if doc["format"] != MANIFEST_FORMAT:
        raise ModelError(f"{where}: format {doc['format']!r} is not one this pureMind reads ({MANIFEST_FORMAT})")
    models = doc["models"]
    if not isinstance(models, dict) or not models:
        raise ModelError(f"{where}: [models] must hold at least one model table")
    specs: dict[str, ModelSpec] = {}
    for key, table in models.items():
        specs[key] = _parse_model(key, table, f'{where}: [models."{key}"]')
    return Manifest(specs, path)


def _parse_model(key: str, table: Any, where: str) -> ModelSpec:
    if not _KEY_RE.fullmatch(key):
        raise ModelError(f"{where}: a model name must be lower-case letters, digits, '.', '_' or '-'")
    if not isinstance(table, dict):
        raise ModelError(f"{where} must be a table")
    common = ("hub_id", "revision", "role", "architecture", "task", "padding_side", "max_tokens", "files",
              "variants", "default_variant")
    role = table.get("role")
    if role == "embedder":
        _check_keys(table, where, required=common + ("pooling", "normalize", "dim"),
                    optional=("query_prefix", "passage_prefix", "languages"))
    elif role == "reranker":
        _check_keys(table, where, required=common + ("activation",),
                    optional=("query_prefix", "passage_prefix", "normalize", "languages"))
    else:
        raise ModelError(f"{where}: role must be one of {', '.join(ROLES)}, not {role!r}")

    hub_id = _string(table, "hub_id", where)
    if "/" not in hub_id or not looks_like_hub_id(hub_id):
        raise ModelError(f"{where}: hub_id must be a Hugging Face model id (org/name), not {hub_id!r}")
    revision = _string(table, "revision", where)
    if not _COMMIT_RE.fullmatch(revision):
        raise ModelError(f"{where}: revision must be a full commit hash (40 lower-case hex digits), not {revision!r}")
    task = _string(table, "task", where)
    if task != TASKS[role]:
        raise ModelError(f"{where}: task of a {role} must be {TASKS[role]!r}, not {task!r}")
    padding_side = _choice(table, "padding_side", PADDING_SIDES, where)
    pooling = _choice(table, "pooling", POOLINGS, where) if role == "embedder" else None
    if pooling == "last_token" and padding_side != "left":
        raise ModelError(f"{where}: last_token pooling reads the last position, so padding_side must be 'left'")
    normalize = _bool(table, "normalize", where) if "normalize" in table else False
    if role == "reranker" and normalize:
        raise ModelError(f"{where}: normalize applies to embedders; a reranker scores with its activation")
    variants = _parse_variants(table["variants"], f"{where} variants")
    default_variant = _parse_default_variant(table["default_variant"], variants, f"{where} default_variant")
    return ModelSpec(
        key=key,
        hub_id=hub_id,
        revision=revision,
        role=role,
        architecture=_string(table, "architecture", where),
        task=task,
        pooling=pooling,
        normalize=normalize,
        padding_side=padding_side,
        query_prefix=_string(table, "query_prefix", where, empty_ok=True) if "query_prefix" in table else "",
        passage_prefix=_string(table, "passage_prefix", where, empty_ok=True) if "passage_prefix" in table else "",
        max_tokens=_positive_int(table, "max_tokens", where),
        dim=_positive_int(table, "dim", where) if role == "embedder" else None,
        activation=_choice(table, "activation", ACTIVATIONS, where) if role == "reranker" else None,
        files=_parse_files(table["files"], f"{where} files"),
        variants=variants,
        default_variant=default_variant,
        languages=_parse_languages(table.get("languages", []), f"{where} languages"),
    )


def _parse_languages(value: Any, where: str) -> tuple[str, ...]:
    items = _string_list(value, where) if value != [] else ()
    for item in items:
        if not normalize_languages([item]):
            raise ModelError(f"{where}: {item!r} is neither an ISO 639 language code (en, zh, ...) nor 'multilingual'")
    return normalize_languages(items)


def _parse_variants(table: Any, where: str) -> FrozenDict:
    if not isinstance(table, dict) or not table:
        raise ModelError(f"{where} must be a table of variant tables")
    out: dict[str, VariantSpec] = {}
    for name, entry in table.items():
        here = f"{where}.{name}"
        if name not in VARIANT_NAMES:
            raise ModelError(f"{where}: unknown variant {name!r}; known variants: {', '.join(VARIANT_NAMES)}")
        if not isinstance(entry, dict):
            raise ModelError(f"{here} must be a table")
        _check_keys(entry, here, required=("dtype",), optional=("method", "exclude_ops", "providers"))
        dtype = _choice(entry, "dtype", DTYPES, here)
        if name != "coreml" and dtype != name:
            raise ModelError(f"{here}: dtype of the {name} variant must be {name!r}, not {dtype!r}")
        method = None
        if dtype == "int8":
            if "method" not in entry:
                raise ModelError(f"{here}: an int8 variant needs a method: {', '.join(INT8_METHODS)}")
            method = _choice(entry, "method", INT8_METHODS, here)
        elif "method" in entry:
            raise ModelError(f"{here}: method applies to int8 variants only")
        exclude_ops = _string_list(entry.get("exclude_ops", []), f"{here} exclude_ops")
        providers = _string_list(entry.get("providers", []), f"{here} providers")
        for provider in providers:
            if not _PROVIDER_RE.fullmatch(provider):
                raise ModelError(f"{here}: {provider!r} is not an execution provider name (e.g. CPUExecutionProvider)")
        out[name] = VariantSpec(name=name, dtype=dtype, method=method, exclude_ops=exclude_ops, providers=providers)
    if "fp32" not in out:
        raise ModelError(f"{where}: an fp32 variant is needed (the reference every other variant is checked against)")
    return FrozenDict(out)


def _parse_default_variant(table: Any, variants: Mapping[str, VariantSpec], where: str) -> FrozenDict:
    if not isinstance(table, dict):
        raise ModelError(f"{where} must be a table of execution provider = variant name")
    for provider, variant in table.items():
        if not _PROVIDER_RE.fullmatch(provider):
            raise ModelError(f"{where}: {provider!r} is not an execution provider name (e.g. CPUExecutionProvider)")
        if variant not in variants:
            raise ModelError(f"{where}: {provider} uses {variant!r}, which is not among this model's variants "
                             f"({', '.join(variants)})")
    if "CPUExecutionProvider" not in table:
        raise ModelError(f"{where}: CPUExecutionProvider needs a variant (every device falls back to the CPU)")
    return FrozenDict(table)


def _parse_files(value: Any, where: str) -> tuple[str, ...]:
    files = _string_list(value, where)
    for name in files:
        parts = name.split("/")
        if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
            raise ModelError(f"{where}: {name!r} must be a plain path inside the repository")
    if len(set(files)) != len(files):
        raise ModelError(f"{where}: a file is listed twice")
    if "config.json" not in files:
        raise ModelError(f"{where}: config.json is needed")
    return files


def _check_keys(table: Mapping[str, Any], where: str, *, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    # Unknown keys first: a misspelt key is also a missing one, and the misspelling is what to fix.
    unknown = [k for k in table if k not in required and k not in optional]
    if unknown:
        raise ModelError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(required + optional)}")
    missing = [k for k in required if k not in table]
    if missing:
        raise ModelError(f"{where}: missing {', '.join(missing)}")


def _string(table: Mapping[str, Any], key: str, where: str, *, empty_ok: bool = False) -> str:
    value = table[key]
    if not isinstance(value, str) or (not empty_ok and not value.strip()):
        raise ModelError(f"{where}: {key} must be a{'' if empty_ok else ' non-empty'} string, not {value!r}")
    return value


def _choice(table: Mapping[str, Any], key: str, choices: tuple[str, ...], where: str) -> str:
    value = table[key]
    if value not in choices:
        raise ModelError(f"{where}: {key} must be one of {', '.join(choices)}, not {value!r}")
    return value


def _bool(table: Mapping[str, Any], key: str, where: str) -> bool:
    value = table[key]
    if not isinstance(value, bool):
        raise ModelError(f"{where}: {key} must be true or false, not {value!r}")
    return value


def _positive_int(table: Mapping[str, Any], key: str, where: str) -> int:
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelError(f"{where}: {key} must be a positive whole number, not {value!r}")
    return value


def _string_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ModelError(f"{where} must be a list of non-empty strings, not {value!r}")
    return tuple(value)
