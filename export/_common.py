"""Helpers shared by the ONNX and CoreML exports: tools present, progress, stdout protection, metadata, source files,
whether an existing export is current."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

from puremind.errors import ModelError
from puremind.models import artefacts

Progress = Callable[[str], None]

#: copied from the fetched model folder into every variant: what a tokenizers-only runtime needs.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json")


def export_available() -> bool:
    """True when optimum (with optimum-onnx), torch, transformers and onnx are importable.

    Checked with `find_spec` on the top-level packages, so nothing is imported.
    """
    names = ("optimum", "torch", "transformers", "onnx", "onnxruntime")
    if not all(importlib.util.find_spec(name) is not None for name in names):
        return False
    try:
        importlib.metadata.version("optimum-onnx")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


from puremind.messages import to_stderr as print_to_stderr  # noqa: E402  (the one stderr printer)


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


#: loggers of the libraries the export drives; their warnings are about their own internals, not the user's model
QUIET_LOGGERS = ("transformers", "optimum", "torch", "onnx", "onnxruntime", "coremltools", "accelerate")


@contextlib.contextmanager
def quiet_libraries(*configure: str) -> Iterator[None]:
    """Keep third-party chatter out of the user's terminal for the duration: Python warnings (torch's
    TracerWarning, deprecations) and the libraries' log lines below ERROR ("install accelerate", "`torch_dtype`
    is deprecated"). pureMind's own progress goes on; errors still raise and become one `error:` line.

    `configure` names logging modules to import first ("transformers.utils.logging"): transformers and optimum
    set their loggers' level when first imported, which would undo a level set before.
    """
    for module in configure:
        with contextlib.suppress(ImportError):
            importlib.import_module(module).get_logger()
    saved = []
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)


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


def current_artefact(path: Path, expected: dict[str, Any], progress: Progress, label: str) -> bool:
    """True when `path` holds a verified artefact made with `expected` settings (checksums are checked)."""
    if not (path / artefacts.META_NAME).exists():
        return False
    try:
        meta = artefacts.read_artefact(path, verify=True)
    except ModelError as exc:
        progress(f"{label}: the existing export is unusable ({exc.message}); exporting again")
        return False
    changed = [k for k, v in expected.items() if meta.get(k) != v]
    if changed:
        progress(f"{label}: settings changed ({', '.join(changed)}); exporting again")
        return False
    return True
