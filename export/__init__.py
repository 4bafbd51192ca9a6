"""The one-time export step, installed as `puremind.export` (needs the `[export]` extra).

- `export_model(spec, source, home, variants)`: Optimum -> ONNX fp32, then fp16 and an 8-bit variant, each an
  atomically written, checksummed folder under `<home>/models/` (see `puremind.models.artefacts`).
- `export_coreml(spec, source, home)`: a CoreML package through coremltools (converts on Linux too).
- `export_available()`: whether the export tools are installed, without importing them.
- `adopt_onnx(spec, source, home, variants)`: the artefacts of a model folder that ships its own ONNX model: that
  file as fp32, int8/fp16 made from it by onnxruntime; needs no torch or Optimum (`from_onnx`).

Nothing heavy is imported with this package: torch, optimum, onnx and coremltools load inside the functions.
The modules import one way: `from_onnx` -> `onnx_export` -> `coreml_export` (a "coreml" variant is handed on)
-> `_common`, `quantize`; nothing imports this package's `__init__`.
"""

from __future__ import annotations

from ._common import export_available, print_to_stderr
from .coreml_export import coreml_available, export_coreml
from .from_onnx import adopt_onnx
from .onnx_export import export_model
from .quantize import INT8_METHODS


__all__ = [
    "INT8_METHODS",
    "adopt_onnx",
    "coreml_available",
    "export_available",
    "export_coreml",
    "export_model",
    "print_to_stderr",
]
