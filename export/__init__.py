"""The one-time export step, installed as `puremind.export` (needs the `[export]` extra).

- `export_model(spec, source, home, variants)`: Optimum -> ONNX fp32, then fp16 and an 8-bit variant, each an
  atomically written, checksummed folder under `<home>/models/` (see `puremind.models.artefacts`).
- `export_coreml(spec, source, home)`: a CoreML package through coremltools (converts on Linux too).
- `export_available()`: whether the export tools are installed, without importing them.

Nothing heavy is imported with this package: torch, optimum, onnx and coremltools load inside the functions.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from ._common import print_to_stderr
from .coreml_export import coreml_available, export_coreml
from .onnx_export import export_model
from .quantize import INT8_METHODS


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


__all__ = [
    "INT8_METHODS",
    "coreml_available",
    "export_available",
    "export_coreml",
    "export_model",
    "print_to_stderr",
]
