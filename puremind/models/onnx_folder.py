"""Model folders that already hold an ONNX export: which file, what it takes and gives, what can be made from it.

Many hub repositories ship their model as ONNX beside the tokenizer (sentence-transformers repositories under
`onnx/`). Such a folder runs on the runtime alone: its fp32 ONNX file serves as it is, and the other variants
are derived from it by onnxruntime's own tools (`puremind.export.from_onnx`), so no torch or Optimum is needed.
Only a folder without ONNX needs the [export] extra.

Only the standard library at import; onnxruntime is imported by `graph_io` alone.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from puremind.errors import ModelError

#: Where a folder keeps its fp32 ONNX model, first found wins. Quantized copies a repository may ship beside it
#: (onnx/model_quantized.onnx, onnx/model_qint8_avx512.onnx, ...) are not used: pureMind makes its own int8 copy
#: by a measured method and checks it against this fp32 file.
FP32_FILES = ("onnx/model.onnx", "model.onnx")
#: The inputs pureMind knows how to feed (see `puremind.models.batching.model_inputs`).
KNOWN_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids")
#: An embedder's outputs pureMind reads, best first: token vectors (pooled here, as the folder says), then a
#: vector per text that the graph already pooled.
EMBEDDER_OUTPUTS = ("last_hidden_state", "token_embeddings", "sentence_embedding")
POOLED_OUTPUTS = ("sentence_embedding",)
RERANKER_OUTPUTS = ("logits",)


def find_onnx(model_dir: Path) -> Path | None:
    """The folder's fp32 ONNX model (see FP32_FILES), or None when it holds none."""
    for rel in FP32_FILES:
        path = Path(model_dir) / rel
        if path.is_file():
            return path
    return None


def derivable() -> bool:
    """True when the fp16 and int8 copies can be made here: onnxruntime's quantizer and float16 converter need
    the `onnx` package (not a runtime dependency). Checked without importing it."""
    return importlib.util.find_spec("onnx") is not None


def onnx_variants(spec: Any, model_dir: Path) -> Any:
    """`spec` for a folder that holds an ONNX model: where fp16 and int8 cannot be made here (no `onnx`
    package), fp32 serves on every device. A spec for a folder without ONNX comes back unchanged."""
    import dataclasses

    from puremind.models.manifest import FrozenDict

    if find_onnx(model_dir) is None or derivable():
        return spec
    return dataclasses.replace(spec, default_variant=FrozenDict({k: "fp32" for k in spec.default_variant}))


def graph_io(path: Path, role: str) -> tuple[list[str], list[str], str]:
    """(inputs, outputs, the output pureMind reads) of the ONNX model at `path`, read from an onnxruntime session
    on the CPU.

    Raises:
        ModelError: the file does not load, or is not an encoder pureMind can run (an input it cannot feed, such as
            a decoder's past_key_values, or none of the outputs it reads).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    # Loading only: no graph optimisation, so a large model is inspected quickly.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"{path} is not an ONNX model onnxruntime can load: {first}") from exc
    inputs = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    return inputs, outputs, check_io(path, role, inputs, outputs)


def check_io(path: Path, role: str, inputs: list[str], outputs: list[str]) -> str:
    """The output pureMind reads from a graph with these inputs and outputs.

    Raises:
        ModelError: as `graph_io`.
    """
    unknown = [name for name in inputs if name not in KNOWN_INPUTS]
    if unknown or "input_ids" not in inputs:
        wants = ", ".join(unknown[:3]) + (", ..." if len(unknown) > 3 else "") if unknown else "no input_ids"
        raise ModelError(
            f"{path} is not a text encoder pureMind can run: it takes {wants} "
            f"(pureMind feeds {', '.join(KNOWN_INPUTS)})"
        )
    wanted = EMBEDDER_OUTPUTS if role == "embedder" else RERANKER_OUTPUTS
    output = next((name for name in wanted if name in outputs), None)
    if output is None:
        raise ModelError(
            f"{path} is not {'an embedding model' if role == 'embedder' else 'a cross-encoder'} pureMind can run: "
            f"it gives {', '.join(outputs) or 'nothing'}, pureMind reads {' or '.join(wanted)}"
        )
    return output

