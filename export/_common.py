"""Helpers shared by the ONNX and CoreML exports: progress, stdout protection, metadata, source files."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from puremind.errors import ModelError

Progress = Callable[[str], None]

#: copied from the fetched model folder into every variant: what a tokenizers-only runtime needs.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json")


def print_to_stderr(message: str) -> None:
    """The default progress sink: one line on stderr (stdout belongs to JSON-RPC in `serve`)."""
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout, by Python or native code, to stderr for the duration.

    Exporters and converters print banners and progress bars; in `serve` a stray byte on fd 1 breaks the
    JSON-RPC stream, so the export never writes there.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


class Timer:
    """Seconds since creation, for progress lines."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __str__(self) -> str:
        return f"{time.perf_counter() - self.start:.1f} s"


def human_size(path: Path) -> str:
    """Total size of a folder, or of a model file with its external data file, e.g. '90.4 MB'."""
    if path.is_dir():
        total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    else:
        total = path.stat().st_size
        data = path.with_name(path.name + "_data")  # model.onnx -> model.onnx_data
        if data.is_file():
            total += data.stat().st_size
    return f"{total / 1e9:.2f} GB" if total >= 1e9 else f"{total / 1e6:.1f} MB"


def tool_versions(*names: str) -> dict[str, str]:
    """Installed versions of the named distributions (those absent are left out)."""
    out = {}
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[name] = importlib.metadata.version(name)
    return out


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, for a ModelError built from a library's exception."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def pad_token_id(model_dir: Path) -> int | None:
    """The pad token's id from the tokenizer files (tokenizer_config / special_tokens_map), else config.json."""
    pad = read_json(model_dir / "tokenizer_config.json").get("pad_token")
    if pad is None:
        pad = read_json(model_dir / "special_tokens_map.json").get("pad_token")
    if isinstance(pad, dict):
        pad = pad.get("content")
    if isinstance(pad, str) and (model_dir / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        token_id = Tokenizer.from_file(str(model_dir / "tokenizer.json")).token_to_id(pad)
        if token_id is not None:
            return int(token_id)
    value = read_json(model_dir / "config.json").get("pad_token_id")
    return int(value) if isinstance(value, int) else None


def copy_tokenizer_files(source_dir: Path, dest: Path, fallback_dir: Path | None = None) -> list[str]:
    """Copy the tokenizer and config files into a variant folder; returns the names copied.

    The fetched originals are copied byte for byte (a tokenizer re-saved by transformers can differ);
    `fallback_dir` (Optimum's output) supplies a tokenizer.json the source lacks, e.g. one converted from a
    sentencepiece model.

    Raises:
        ModelError: no tokenizer.json anywhere: the runtime reads nothing else.
    """
    copied = []
    for name in TOKENIZER_FILES:
        for folder in (source_dir, fallback_dir):
            if folder is not None and (folder / name).is_file():
                shutil.copyfile(folder / name, dest / name)
                copied.append(name)
                break
    if "tokenizer.json" not in copied:
        raise ModelError(
            f"the model in {source_dir} has no tokenizer.json (a fast tokenizer); pureMind's runtime needs one"
        )
    return copied


def spec_metadata(spec: Any, source: Any, variant: str, model_dir_for_ids: Path) -> dict[str, Any]:
    """The fields of puremind_model.json that describe the model rather than the file format."""
    dim = spec.dim
    if dim is None and spec.role == "embedder":
        hidden = read_json(model_dir_for_ids / "config.json").get("hidden_size")
        dim = hidden if isinstance(hidden, int) else None
    return {
        "format": 1,
        "key": spec.key,
        "hub_id": spec.hub_id,
        "revision": source.revision,
        "variant": variant,
        "role": spec.role,
        "task": spec.task,
        "architecture": spec.architecture,
        "pooling": spec.pooling,
        "normalize": spec.normalize,
        "padding_side": spec.padding_side,
        "pad_token_id": pad_token_id(model_dir_for_ids),
        "query_prefix": spec.query_prefix,
        "passage_prefix": spec.passage_prefix,
        "max_tokens": spec.max_tokens,
        "dim": dim,
        "activation": spec.activation,
    }


#: fields whose change makes an existing artefact stale (its metadata would lie about the model).
SPEC_FIELDS = ("key", "hub_id", "revision", "role", "task", "architecture", "pooling", "normalize",
               "padding_side", "query_prefix", "passage_prefix", "dim", "activation")
