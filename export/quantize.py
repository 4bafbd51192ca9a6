"""8-bit variants of an exported fp32 ONNX model, and the fp16 conversion.

Methods (the `method` of an int8 VariantSpec):
- "dynamic-per-channel": onnxruntime `quantize_dynamic`, QInt8 weights with one scale per output channel,
  activations quantized at run time (MatMulInteger / DynamicQuantizeLinear). Fast on CPUs with int8 dot
  products; embeddings (Gather) are quantized too.
- "dynamic-per-channel-matmul": the same, but only MatMul weights; embedding tables stay fp32.
- "dynamic-per-tensor": one scale per weight tensor; bends embeddings badly (toolchain.md section 4).
- "matmul-nbits-8": `MatMulNBitsQuantizer`, 8-bit weights in blocks of 32 along the input dimension,
  activations stay float (weight-only, near lossless). `accuracy_level` 4 lets the kernel quantize
  activations to int8 per block as well ("matmul-nbits-8-acc4").
- "static-per-channel": onnxruntime `quantize_static` (QDQ), per-channel QInt8 weights of the MatMuls and QUInt8
  activations whose ranges are calibrated beforehand (MinMax) on the shipped probe set
  (`puremind.models.fidelity`), so nothing is measured at run time. Needs `calibration`: the model's inputs for
  the probe texts.

bench/int8_methods.py measures them against fp32; the manifest names the one used.
Node-name substrings in `exclude_ops` are kept in float: for Qwen3 the rotary and attention products, which
multiply two activations and turn to NaN when quantized.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Iterable, Sequence

from puremind.errors import ModelError

INT8_METHODS = (
    "dynamic-per-channel",
    "dynamic-per-channel-matmul",
    "dynamic-per-tensor",
    "matmul-nbits-8",
    "matmul-nbits-8-acc4",
    "static-per-channel",
)
#: protobuf cannot serialise one message over 2 GiB; bigger models keep their weights in model.onnx_data.
PROTO_LIMIT = 2**31 - 1
EXTERNAL_DATA = "model.onnx_data"


def _initializer_bytes(model) -> int:
    total = 0
    for tensor in model.graph.initializer:
        if tensor.raw_data:
            total += len(tensor.raw_data)
        else:
            total += 4 * max(len(tensor.float_data), len(tensor.int64_data) * 2, len(tensor.int32_data))
    return total


def save_onnx(model, path: Path) -> None:
    """Save a ModelProto as `path`, with the weights in `model.onnx_data` beside it when over 2 GB."""
    import onnx

    if _initializer_bytes(model) > PROTO_LIMIT - 64 * 1024 * 1024:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=EXTERNAL_DATA, size_threshold=1024)
    else:
        onnx.save_model(model, str(path))


def uses_external_data(path: Path) -> bool:
    return (path.parent / EXTERNAL_DATA).exists()


def nodes_matching(model_path: Path, substrings: Sequence[str]) -> list[str]:
    """Names of the graph's nodes whose name contains any of `substrings` (the graph is read without weights)."""
    if not substrings:
        return []
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    return [node.name for node in graph.node if any(s in node.name for s in substrings)]


def convert_fp16(src: Path, dst: Path) -> None:
    """fp16 weights and arithmetic with float32 inputs and outputs, so callers feed and read the same types.

    Over 2 GB, onnx shape inference cannot serialise the model, so it is skipped (toolchain.md section 3).
    """
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    large = uses_external_data(src)
    model = onnx.load(str(src))  # loads model.onnx_data too: the converter only sees in-memory weights
    model = convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=large)
    save_onnx(model, dst)


def quantize_int8(src: Path, dst: Path, method: str, exclude_ops: Sequence[str] = (),
                  calibration: "Callable[[], Iterable[dict]] | None" = None) -> None:
    """Write an 8-bit variant of the fp32 model `src` to `dst` by `method` (see the module docstring).
    `calibration()` gives the model's input feeds (one dict per text) for a static method.

    Raises:
        ModelError: an unknown method, or a static method without calibration.
    """
    if method not in INT8_METHODS:
        raise ModelError(f"unknown int8 method {method!r}; known: {', '.join(INT8_METHODS)}")
    excluded = nodes_matching(src, exclude_ops)
    # quantize_dynamic nags about pre-processing through the root logger; keep progress readable.
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        if method.startswith("dynamic-"):
            _dynamic(src, dst, method, excluded)
        elif method.startswith("static-"):
            if calibration is None:
                raise ModelError(f"int8 method {method!r} needs calibration inputs")
            _static(src, dst, excluded, calibration)
        else:
            _nbits(src, dst, accuracy_level=4 if method.endswith("-acc4") else None, excluded=excluded)
    finally:
        root.setLevel(level)


def _dynamic(src: Path, dst: Path, method: str, excluded: list[str]) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        model_input=str(src),
        model_output=str(dst),
        per_channel=method != "dynamic-per-tensor",
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"] if method.endswith("-matmul") else None,
        nodes_to_exclude=excluded,
        # Only weights are quantized ahead of time; a MatMul of two activations (attention, rotary) stays
        # float. Explicit, because Optimum's presets turn this off and break Qwen3.
        extra_options={"MatMulConstBOnly": True},
    )


def _static(src: Path, dst: Path, excluded: list[str], calibration) -> None:
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(calibration())

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(
        model_input=str(src),
        model_output=str(dst),
        calibration_data_reader=Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        weight_type=QuantType.QInt8,
        activation_type=QuantType.QUInt8,
        op_types_to_quantize=["MatMul"],
        nodes_to_exclude=excluded,
        calibrate_method=CalibrationMethod.MinMax,
        extra_options={"MatMulConstBOnly": True},
    )


def _nbits(src: Path, dst: Path, *, accuracy_level: int | None, excluded: list[str]) -> None:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(src))
    quantizer = MatMulNBitsQuantizer(
        model,
        bits=8,
        block_size=32,
        is_symmetric=True,
        accuracy_level=accuracy_level,
        nodes_to_exclude=excluded,
        op_types_to_quantize=("MatMul",),
    )
    quantizer.process()
    save_onnx(quantizer.model.model, dst)
