"""Specs for models not in the manifest, read from the model's own folder.

Any embedder or reranker other than the pinned ones (a local folder, or a hub id fetched into the cache)
describes itself the way sentence-transformers folders do: config.json, modules.json, the pooling module's
config.json, sentence_bert_config.json, config_sentence_transformers.json and the model card's languages.
Config keys (OVERRIDE_KEYS) override that description. The result is the same `ModelSpec` the manifest gives.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

from puremind.errors import ConfigError, ModelError
from puremind.langs import card_languages
from puremind.models.hub import GENERIC_PATTERNS, is_local_name
from puremind.models.manifest import (
    PADDING_SIDES,
    POOLINGS,
    ROLES,
    TASKS,
    FrozenDict,
    ModelSpec,
    VariantSpec,
)
from puremind.models.onnx_folder import onnx_variants

#: Config keys that override what a generic model's own files say.
OVERRIDE_KEYS = ("pooling", "query_prefix", "passage_prefix", "normalize")

#: sentence-transformers pooling config keys -> pureMind pooling names (the modes pureMind can run).
_ST_POOLING = {
    "pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_lasttoken": "last_token",
}
#: Position embeddings of these start after the padding index, so two positions are not usable.
_OFFSET_POSITIONS = {"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "mpnet"}
#: Node-name substrings an int8 export leaves in float: the rotary and attention act x act MatMuls of decoder
#: models (Qwen3 gives NaN without this). They match nothing in encoder exports (BERT names them attention/self).
_DECODER_EXCLUDE_OPS = ("/rotary_emb/MatMul", "/self_attn/MatMul")
_DEFAULT_VARIANT = {"CPUExecutionProvider": "int8", "CUDAExecutionProvider": "fp16", "CoreMLExecutionProvider": "fp16"}
#: The variant a model family runs on the CPU where it was measured on retrieval (bench/RESULTS.md, section
#: int8-retrieval): the fastest within 0.005 of fp32 on every dev set. A family is the base model its config.json
#: names (`_name_or_path`). MiniLM-L6-H384 (all-MiniLM-L6-v2): dynamic per-channel int8 fell 0.012 Recall@5 on the
#: six-language dev split (2 of 168 queries) and static int8 further; MatMulNBits 8-bit kept fp32's figures but
#: indexed slower than fp32 (131 s against 106 s for 2,000 notes), so fp32 serves. Every other model runs int8
#: (dynamic per-channel; multilingual-e5-small: within 0.000 at 1.9 times fp32's speed), behind the export's check.
CPU_VARIANT_BY_FAMILY = {"nreimers/minilm-l6-h384-uncased": "fp32"}


def generic_spec(name: str, model_dir: Path, *, role: str, overrides: Mapping[str, Any] | None = None) -> ModelSpec:
    """A spec for a model that is not in the manifest, from the files in `model_dir` and config `overrides`.

    Reads config.json (model_type, hidden_size, max_position_embeddings), modules.json and the pooling module's
    config.json (pooling mode, a Normalize module), sentence_bert_config.json (max_seq_length) and
    config_sentence_transformers.json (prompts: "query", "document"/"passage"). `overrides` (keys in
    OVERRIDE_KEYS; None values are ignored) win over the files. Without modules.json an embedder needs a
    `pooling` override and is normalised unless `normalize` says otherwise. A folder that holds its own ONNX model
    (`puremind.models.onnx_folder`) serves fp32 on every device where its int8 and fp16 copies cannot be made.

    Raises:
        ModelError: the folder lacks config.json or holds broken JSON, the model needs its own code
            (auto_map), uses a sentence-transformers module or pooling mode pureMind cannot run, or gives no
            pooling; a reranker with more than one output label.
        ConfigError: an unknown override key or a bad override value.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")
    model_dir = Path(model_dir)
    given = _check_overrides(overrides or {}, role)
    config = _read_json(model_dir / "config.json", name, required=True)
    if config.get("auto_map"):
        raise ModelError(
            f"{name} needs its own Python code (auto_map in config.json); pureMind never runs a model's code",
            hint="choose a model that the transformers library supports as it is",
        )
    architecture = config.get("model_type")
    if not isinstance(architecture, str) or not architecture:
        raise ModelError(f"{name}: config.json has no model_type")
    tokenizer_config = _read_json(model_dir / "tokenizer_config.json", name)
    st_config = _read_json(model_dir / "config_sentence_transformers.json", name)
    prompts = st_config.get("prompts") if isinstance(st_config.get("prompts"), dict) else {}
    query_prefix = given.get("query_prefix", _first_str(prompts, ("query", "search_query")))
    passage_prefix = given.get(
        "passage_prefix",
        _first_str(prompts, ("document", "passage", "search_document", "corpus", st_config.get("default_prompt_name"))),
    )

    pooling: str | None = None
    dim: int | None = None
    normalize = False
    activation: str | None = None
    extra_files: list[str] = []
    if role == "embedder":
        pooling, normalize, dim, extra_files = _sentence_transformers_pooling(model_dir, name, given)
        if dim is None:
            dim = config.get("hidden_size") or config.get("d_model")
            if not isinstance(dim, int) or dim <= 0:
                raise ModelError(f"{name}: cannot tell the embedding size (no hidden_size in config.json)")
    else:
        labels = config.get("id2label")
        if isinstance(labels, dict) and len(labels) > 1:
            raise ModelError(f"{name} gives {len(labels)} scores per pair; a reranker must give one")
        activation = "sigmoid"

    padding_side = tokenizer_config.get("padding_side")
    if pooling == "last_token":
        padding_side = "left"  # the last position must be the last real token
    elif padding_side not in PADDING_SIDES:
        padding_side = "right"

    spec = ModelSpec(
        key=_slug(name),
        hub_id=name,
        revision=None,
        role=role,
        architecture=architecture,
        task=TASKS[role],
        pooling=pooling,
        normalize=normalize,
        padding_side=padding_side,
        query_prefix=query_prefix,
        passage_prefix=passage_prefix,
        max_tokens=_max_tokens(model_dir, name, config, tokenizer_config, architecture),
        dim=dim,
        activation=activation,
        files=tuple(sorted(set(_present_files(model_dir)) | set(extra_files))),
        variants=FrozenDict(
            fp32=VariantSpec(
                "fp32", "fp32", providers=("CPUExecutionProvider", "CUDAExecutionProvider", "CoreMLExecutionProvider")
            ),
            fp16=VariantSpec("fp16", "fp16", providers=("CUDAExecutionProvider", "CoreMLExecutionProvider")),
            int8=VariantSpec("int8", "int8", method="dynamic-per-channel", exclude_ops=_DECODER_EXCLUDE_OPS,
                             providers=("CPUExecutionProvider",)),
        ),
        default_variant=FrozenDict({**_DEFAULT_VARIANT, "CPUExecutionProvider": cpu_variant(config)}),
        languages=_card_languages(model_dir),
    )
    # A folder that ships its ONNX model serves it as fp32 where its int8 and fp16 copies cannot be made.
    return onnx_variants(spec, model_dir)


def cpu_variant(config: Mapping[str, Any]) -> str:
    """The variant a model of this config.json runs on the CPU: its family's measured one, else int8."""
    family = config.get("_name_or_path")
    default = _DEFAULT_VARIANT["CPUExecutionProvider"]
    return CPU_VARIANT_BY_FAMILY.get(family.casefold(), default) if isinstance(family, str) else default


def _card_languages(model_dir: Path) -> tuple[str, ...]:
    """The languages the model card (README.md front matter) declares; () without a readable card."""
    try:
        text = (model_dir / "README.md").read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError:
        return ()
    return card_languages(text)


def _check_overrides(overrides: Mapping[str, Any], role: str) -> dict[str, Any]:
    given = {k: v for k, v in overrides.items() if v is not None}
    for key, value in given.items():
        if key not in OVERRIDE_KEYS:
            raise ConfigError(f"unknown model setting {key!r}; known: {', '.join(OVERRIDE_KEYS)}")
        if role == "reranker" and key in ("pooling", "normalize"):
            raise ConfigError(f"the model setting {key} applies to the embedder, not to a reranker")
        if key == "pooling" and value not in POOLINGS:
            raise ConfigError(f"[models] pooling must be one of {', '.join(POOLINGS)}, not {value!r}")
        if key == "normalize" and not isinstance(value, bool):
            raise ConfigError(f"[models] normalize must be true or false, not {value!r}")
        if key in ("query_prefix", "passage_prefix") and not isinstance(value, str):
            raise ConfigError(f"[models] {key} must be a string, not {value!r}")
    return given


def _sentence_transformers_pooling(
    model_dir: Path, name: str, given: Mapping[str, Any]
) -> tuple[str, bool, int | None, list[str]]:
    """(pooling, normalize, dim or None, files read) from modules.json and the pooling config, overrides winning."""
    modules = _read_json(model_dir / "modules.json", name, kind=list)
    if not modules:
        if "pooling" not in given:
            raise ModelError(
                f"{name} does not say how to pool its token vectors (no sentence-transformers modules.json)",
                hint="set [models] pooling to mean, cls or last_token (see the model card)",
            )
        return given["pooling"], given.get("normalize", True), None, []

    normalize = False
    pooling_path: str | None = None
    for module in modules:
        kind = str(module.get("type", "")) if isinstance(module, dict) else ""
        short = kind.rsplit(".", 1)[-1]
        if short == "Transformer":
            continue
        if short == "Pooling":
            pooling_path = str(module.get("path", "")).strip("/")
        elif short == "Normalize":
            normalize = True
        else:
            raise ModelError(
                f"{name} uses a sentence-transformers {short or 'unnamed'} module, which pureMind cannot run"
            )

    pooling = given.get("pooling")
    dim = None
    files = []
    if pooling_path is not None:
        rel = f"{pooling_path}/config.json" if pooling_path else "config.json"
        pool_config = _read_json(model_dir / rel, name, required=pooling is None) if pooling_path else {}
        if pool_config:
            files.append(rel)
        if isinstance(pool_config.get("word_embedding_dimension"), int):
            dim = pool_config["word_embedding_dimension"]
        if pooling is None:
            pooling = _pooling_mode(pool_config, name)
    if pooling is None:
        raise ModelError(
            f"{name} has no pooling module in modules.json",
            hint="set [models] pooling to mean, cls or last_token (see the model card)",
        )
    return pooling, given.get("normalize", normalize), dim, files


def _pooling_mode(pool_config: Mapping[str, Any], name: str) -> str:
    mode = pool_config.get("pooling_mode")  # newer sentence-transformers may also write the mode as a string
    if isinstance(mode, str):
        mode = {"lasttoken": "last_token", "mean_tokens": "mean", "cls_token": "cls"}.get(mode, mode)
        if mode in POOLINGS:
            return mode
        raise ModelError(f"{name} pools by {mode!r}; pureMind pools by {', '.join(POOLINGS)}")
    on = [k for k, v in pool_config.items() if k.startswith("pooling_mode_") and v is True]
    if len(on) == 1 and on[0] in _ST_POOLING:
        return _ST_POOLING[on[0]]
    if not on:
        raise ModelError(f"{name}: its pooling config turns no pooling mode on",
                         hint="set [models] pooling to mean, cls or last_token")
    modes = ", ".join(k.removeprefix("pooling_mode_") for k in on)
    raise ModelError(
        f"{name} pools by {modes}; pureMind pools by one of {', '.join(POOLINGS)}",
        hint="set [models] pooling only if the model card says one of those is right",
    )


def _max_tokens(model_dir: Path, name: str, config: Mapping[str, Any], tokenizer_config: Mapping[str, Any],
                architecture: str) -> int:
    st = _read_json(model_dir / "sentence_bert_config.json", name)
    for value in (st.get("max_seq_length"), tokenizer_config.get("model_max_length")):
        # transformers writes a huge sentinel (1e30) for "no limit" into model_max_length.
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 1_000_000:
            return value
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and positions > 2:
        return positions - 2 if architecture in _OFFSET_POSITIONS else positions
    return 512


def _present_files(model_dir: Path) -> list[str]:
    """The top-level files GENERIC_PATTERNS would fetch, as they are in the folder."""
    from fnmatch import fnmatch

    return [
        p.name for p in model_dir.iterdir() if p.is_file() and any(fnmatch(p.name, pat) for pat in GENERIC_PATTERNS)
    ]


def _first_str(table: Mapping[str, Any], keys: tuple[Any, ...]) -> str:
    return next((table[k] for k in keys if isinstance(k, str) and isinstance(table.get(k), str)), "")


def _read_json(path: Path, name: str, *, required: bool = False, kind: type = dict) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise ModelError(f"{name}: {path.name} is missing from {path.parent}") from None
        return kind()
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"{name}: cannot read {path}: {exc}") from exc
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelError(f"{name}: {path} is not valid JSON ({exc})") from exc
    if not isinstance(value, kind):
        raise ModelError(f"{name}: {path} should hold a JSON {'object' if kind is dict else 'list'}")
    return value


def _slug(name: str) -> str:
    """A key for a generic model: a local folder's name, or the hub id with '/' as '--', lower case."""
    base = Path(name.rstrip("/")).name if is_local_name(name) else name.replace("/", "--")
    slug = re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-.")
    return slug[:64] or "model"
