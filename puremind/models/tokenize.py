"""Texts to model inputs with `tokenizers` and numpy only (no transformers at run time).

`ModelMeta` says how a model wants its text (padding side, prefixes, token limit, pooling); it is read
from an artefact's `puremind_model.json` or from a manifest `ModelSpec`. `TextEncoder` loads the
model's `tokenizer.json`, overrides whatever padding and truncation the file bakes in (MiniLM's pads to
a fixed 128 and truncates at 128), tokenizes, keeps the end-of-text token a last-token model pools,
and cuts the work into batches of similar length so little padding is computed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from puremind.errors import ModelError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

POOLINGS = ("last_token", "mean", "cls")


@dataclass(frozen=True)
class ModelMeta:
    """How one model takes its text and gives its output."""

    role: str                   # "embedder" | "reranker"
    architecture: str           # config.json model_type, e.g. "qwen3", "bert", "xlm-roberta"
    pooling: str | None         # embedders: "last_token" | "mean" | "cls"
    normalize: bool             # L2-normalise embeddings
    padding_side: str           # "left" | "right"
    query_prefix: str
    passage_prefix: str
    max_tokens: int             # the model's own limit
    dim: int | None
    activation: str | None      # rerankers: "sigmoid"
    pad_token_id: int | None = None  # None: read from the tokenizer files

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "ModelMeta":
        """From `puremind_model.json` (or any mapping with the same keys).

        Raises:
            ModelError: a key is missing or has a value of the wrong kind.
        """
        try:
            meta = cls(
                role=str(data["role"]),
                architecture=str(data.get("architecture") or ""),
                pooling=data.get("pooling"),
                normalize=bool(data.get("normalize", False)),
                padding_side=str(data.get("padding_side") or "right"),
                query_prefix=str(data.get("query_prefix") or ""),
                passage_prefix=str(data.get("passage_prefix") or ""),
                max_tokens=int(data["max_tokens"]),
                dim=None if data.get("dim") is None else int(data["dim"]),
                activation=data.get("activation"),
                pad_token_id=None if data.get("pad_token_id") is None else int(data["pad_token_id"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"model description is incomplete or malformed: {exc!r}") from exc
        return meta.validated()

    @classmethod
    def from_spec(cls, spec: Any) -> "ModelMeta":
        """From a manifest `ModelSpec` (anything with its attributes), or a mapping.

        Raises:
            ModelError: as `from_mapping`.
        """
        if isinstance(spec, Mapping):
            return cls.from_mapping(spec)
        if isinstance(spec, ModelMeta):
            return spec
        names = ("role", "architecture", "pooling", "normalize", "padding_side", "query_prefix",
                 "passage_prefix", "max_tokens", "dim", "activation", "pad_token_id")
        return cls.from_mapping({n: getattr(spec, n) for n in names if hasattr(spec, n)})

    def validated(self) -> "ModelMeta":
        """Self, after checking the values the runtime branches on.

        Raises:
            ModelError: an unknown role, pooling or padding side, or a limit under 2 tokens.
        """
        if self.role not in ("embedder", "reranker"):
            raise ModelError(f"unknown model role {self.role!r} (expected embedder or reranker)")
        if self.role == "embedder" and self.pooling not in POOLINGS:
            raise ModelError(f"unknown pooling {self.pooling!r}; known: {', '.join(POOLINGS)}")
        if self.padding_side not in ("left", "right"):
            raise ModelError(f"unknown padding side {self.padding_side!r} (expected left or right)")
        if self.max_tokens < 2:
            raise ModelError(f"max_tokens must be at least 2, not {self.max_tokens}")
        return self


def read_json(path: Path) -> dict:
    """A JSON object from a model folder; {} when the file is absent.

    Raises:
        ModelError: the file exists but is not a JSON object.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelError(f"{path} is not a JSON object")
    return data


def load_tokenizer(model_dir: Path) -> "Tokenizer":
    """The `tokenizer.json` of a model folder, as saved (callers set padding and truncation).

    Raises:
        ModelError: the file is missing or `tokenizers` cannot read it.
    """
    from tokenizers import Tokenizer

    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        raise ModelError(f"no tokenizer.json in {model_dir}",
                         hint="pureMind needs a fast tokenizer (tokenizer.json) beside the model")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises plain Exception for a malformed file
        raise ModelError(f"cannot load {path}: {exc}") from exc


def special_token_id(model_dir: Path, tokenizer: "Tokenizer", name: str) -> int | None:
    """The id of a special token ("pad", "eos", ...) as the model folder declares it, or None.

    Looks in tokenizer_config.json (`<name>_token`, a string or an AddedToken object), then
    special_tokens_map.json, then config.json (`<name>_token_id`).
    """
    model_dir = Path(model_dir)
    for file in ("tokenizer_config.json", "special_tokens_map.json"):
        token = read_json(model_dir / file).get(f"{name}_token")
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str):
            token_id = tokenizer.token_to_id(token)
            if token_id is not None:
                return token_id
    value = read_json(model_dir / "config.json").get(f"{name}_token_id")
    if isinstance(value, list):  # some configs list several end tokens; the first is the text end
        value = value[0] if value else None
    return value if isinstance(value, int) else None


@dataclass(frozen=True)
class Encoded:
    """One tokenized text (or query-passage pair), unpadded."""

    ids: list[int]
    type_ids: list[int]


@dataclass(frozen=True)
class Batch:
    """Padded model inputs for some of the texts; `index` says which (positions in the input)."""

    index: np.ndarray           # int64 (n,)
    input_ids: np.ndarray       # int64 (n, length)
    attention_mask: np.ndarray  # int64 (n, length), 1 = real token
    token_type_ids: np.ndarray  # int64 (n, length)

    def position_ids(self) -> np.ndarray:
        """Positions counted over real tokens only, so left padding does not shift them:
        clip(cumsum(mask) - 1, 0). The pads get 0; the mask hides them."""
        return np.clip(np.cumsum(self.attention_mask, axis=1) - 1, 0, None).astype(np.int64)


class TextEncoder:
    """A model's tokenizer set up for pureMind: explicit truncation, padding per batch, EOS kept.

    Padding is done here in numpy rather than by `tokenizers` because the batches are formed only
    after sorting by length, and the end-of-text check runs between tokenization and padding.
    """

    def __init__(self, model_dir: Path, meta: ModelMeta, *, max_tokens: int | None = None):
        """Load `model_dir/tokenizer.json` and settle pad id, EOS and the token limit.

        `max_tokens` (e.g. the `embed_max_seq` setting) lowers the model's own limit, never raises it.

        Raises:
            ModelError: no usable tokenizer, or no pad token can be found.
        """
        self.meta = meta
        self.max_length = min(meta.max_tokens, max_tokens) if max_tokens else meta.max_tokens
        if self.max_length < 2:
            raise ModelError(f"the token limit must be at least 2, not {self.max_length}")
        tokenizer = load_tokenizer(model_dir)
        # The file may bake in padding (MiniLM: Fixed 128) or truncation (MiniLM: 128); neither may apply.
        tokenizer.no_padding()
        tokenizer.no_truncation()
        pad = meta.pad_token_id if meta.pad_token_id is not None else special_token_id(model_dir, tokenizer, "pad")
        if pad is None:
            raise ModelError(f"no pad token is declared in {model_dir}",
                             hint="set pad_token in tokenizer_config.json or pad_token_id in config.json")
        self.pad_id = int(pad)
        self.side = meta.padding_side
        # Last-token pooling reads the end-of-text token: it must be the last real token of every text.
        self.eos_id: int | None = None
        self._append_eos = False
        if meta.role == "embedder" and meta.pooling == "last_token":
            self.eos_id = special_token_id(model_dir, tokenizer, "eos")
            if self.eos_id is None:
                raise ModelError(f"last-token pooling needs an end-of-text token, and {model_dir} declares none")
            probe = tokenizer.encode("a").ids
            # Qwen3-Embedding's post-processor appends it; a tokenizer that does not gets it appended here.
            self._append_eos = not probe or probe[-1] != self.eos_id
        self._single = tokenizer
        limit = self.max_length - (1 if self._append_eos else 0)
        # tokenizers truncates the content and leaves room for the post-processor's special tokens,
        # so an appended EOS survives truncation.
        self._single.enable_truncation(limit, strategy="longest_first", direction="right")
        if meta.role == "reranker":
            # Two copies so one call never changes the truncation another thread is using.
            self._pair_second = _copy(tokenizer)
            self._pair_second.enable_truncation(self.max_length, strategy="only_second", direction="right")
            self._pair_longest = _copy(tokenizer)
            self._pair_longest.enable_truncation(self.max_length, strategy="longest_first", direction="right")
            self._pair_specials = tokenizer.num_special_tokens_to_add(True)

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> list[Encoded]:
        """Tokenize texts for an embedder, with the query or passage prefix, truncated, EOS kept."""
        prefix = self.meta.query_prefix if is_query else self.meta.passage_prefix
        inputs = [prefix + t for t in texts] if prefix else list(texts)
        out = []
        for enc in self._single.encode_batch(inputs):
            ids = list(enc.ids)
            if self.eos_id is not None and (not ids or ids[-1] != self.eos_id):
                if len(ids) >= self.max_length:
                    ids = ids[: self.max_length - 1]
                ids.append(self.eos_id)
            out.append(Encoded(ids, list(enc.type_ids) + [0] * (len(ids) - len(enc.type_ids))))
        return out

    def encode_pairs(self, query: str, passages: Sequence[str], *, max_chars: int | None = None) -> list[Encoded]:
        """Tokenize (query, passage) pairs for a cross-encoder, passages first cut to `max_chars`.

        Pairs over the limit lose passage tokens; only when the query alone fills the limit are both cut.
        """
        if max_chars is not None:
            passages = [p[:max_chars] for p in passages]
        query_len = len(self._single.encode(query, add_special_tokens=False).ids)
        room_for_passage = query_len + self._pair_specials < self.max_length
        tokenizer = self._pair_second if room_for_passage else self._pair_longest
        return [Encoded(list(e.ids), list(e.type_ids)) for e in tokenizer.encode_batch([(query, p) for p in passages])]

    def batches(self, encoded: Sequence[Encoded], batch_size: int) -> Iterator[Batch]:
        """Padded batches of texts of similar length, longest first; each batch says which texts it holds."""
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        order = sorted(range(len(encoded)), key=lambda i: (-len(encoded[i].ids), i))
        for start in range(0, len(order), batch_size):
            chosen = order[start : start + batch_size]
            yield self.pad([encoded[i] for i in chosen], np.asarray(chosen, dtype=np.int64))

    def pad(self, encoded: Sequence[Encoded], index: np.ndarray) -> Batch:
        """Pad a few encodings to their longest, on the model's side, with its pad id."""
        length = max(len(e.ids) for e in encoded)
        n = len(encoded)
        ids = np.full((n, length), self.pad_id, dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.int64)
        types = np.zeros((n, length), dtype=np.int64)
        for row, e in enumerate(encoded):
            k = len(e.ids)
            span = slice(length - k, length) if self.side == "left" else slice(0, k)
            ids[row, span] = e.ids
            mask[row, span] = 1
            types[row, span] = e.type_ids
        return Batch(index=index, input_ids=ids, attention_mask=mask, token_type_ids=types)


def _copy(tokenizer: "Tokenizer") -> "Tokenizer":
    from tokenizers import Tokenizer

    return Tokenizer.from_str(tokenizer.to_str())
