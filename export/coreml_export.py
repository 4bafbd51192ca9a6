"""CoreML package of a model through coremltools (conversion runs on Linux; prediction needs macOS).

The route that works for Qwen3 (toolchain.md section 8): a wrapper that builds its own 4-D additive mask and
cumsum positions, `torch.export.export` with dynamic batch and length, `run_decompositions()`, then
`ct.convert(..., convert_to="mlprogram", minimum_deployment_target=macOS14)`. TorchScript tracing and a
static `torch.export` both fail on Qwen3; other encoders take the same route with their own mask handling.
The package keeps the ONNX graph's contract: embedders return `last_hidden_state` (pooling stays in the
runtime, as for ONNX), rerankers return `logits`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from puremind.errors import ModelError
from puremind.models import artefacts, fidelity

from ._common import (
    SPEC_FIELDS,
    Progress,
    Timer,
    copy_tokenizer_files,
    current_artefact,
    human_size,
    one_line,
    print_to_stderr,
    quiet_libraries,
    read_json,
    spec_metadata,
    stdout_to_stderr,
    tool_versions,
)

VARIANT = "coreml"
MAX_BATCH = 64
#: the longest input the package accepts; the measured route (toolchain.md section 8) used 2..512.
DEFAULT_MAX_SEQ = 512
#: fp16-safe "minus infinity" for the additive mask.
MASK_MIN = -1e4
COREML_TOOLS = ("coremltools", "torch", "transformers")


def coreml_available() -> bool:
    """coremltools and torch importable (checked without importing them)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("coremltools", "torch", "transformers"))


def max_sequence(spec: Any, source_dir: Path, max_seq: int = DEFAULT_MAX_SEQ) -> int:
    """Upper bound of the package's length dimension: the asked bound, the model's limit, its position table."""
    limit = min(max_seq, spec.max_tokens)
    config = read_json(source_dir / "config.json")
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int):
        # RoBERTa-style position ids start after the pad id, so pad_token_id + 1 slots are never used.
        offset = config.get("pad_token_id", 0) + 1 if config.get("model_type") in ("xlm-roberta", "roberta") else 0
        limit = min(limit, positions - offset)
    return limit


def build_wrapper(spec: Any, source_dir: Path):
    """The torch module to export: (input_ids, attention_mask) -> last_hidden_state or logits.

    Raises:
        ModelError: the role is neither embedder nor reranker.
    """
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification

    kwargs = dict(local_files_only=True, trust_remote_code=False, attn_implementation="sdpa")

    class Plain(torch.nn.Module):
        """The model fed (input_ids, attention_mask) as they are, giving one named output."""

        def __init__(self, model, output: str) -> None:
            super().__init__()
            self.model = model
            self.output = output

        def forward(self, input_ids, attention_mask):
            return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask), self.output)

    if spec.role == "reranker":
        model = AutoModelForSequenceClassification.from_pretrained(str(source_dir), **kwargs).eval()
        return Plain(model, "logits").eval()
    if spec.role != "embedder":
        raise ModelError(f"model {spec.key} has role {spec.role!r}; CoreML export knows embedder and reranker")
    model = AutoModel.from_pretrained(str(source_dir), **kwargs).eval()
    if spec.architecture == "qwen3":

        class Qwen3(torch.nn.Module):
            """Qwen3Model with its mask and positions built here from plain tensor ops.

            transformers' own mask code (vmap, `new_ones`) does not convert, while a 4-D float mask is used as
            given. Positions are the cumsum of the mask minus one, so a left-padded text gets the positions it
            has when run alone (the ONNX runtime feeds the same `position_ids`).
            """

            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask):
                length = input_ids.shape[1]
                positions = (torch.cumsum(attention_mask, dim=1) - 1).clamp(min=0)
                causal = torch.ones(length, length, dtype=torch.float32).tril()
                allowed = causal[None, None, :, :] * attention_mask.to(torch.float32)[:, None, None, :]
                additive = (1.0 - allowed) * MASK_MIN
                out = self.model(input_ids=input_ids, attention_mask=additive, position_ids=positions)
                return out.last_hidden_state

        return Qwen3().eval()

    return Plain(model, "last_hidden_state").eval()


def convert(wrapper, package: Path, *, role: str, max_seq: int, max_batch: int = MAX_BATCH) -> None:
    """torch.export with dynamic batch and length -> run_decompositions -> ct.convert -> save `package`."""
    import coremltools as ct
    import numpy as np
    import torch

    ids = torch.full((2, 8), 5, dtype=torch.int64)
    mask = torch.ones((2, 8), dtype=torch.int64)
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    seq = torch.export.Dim("seq", min=2, max=max_seq)
    dims = {0: batch, 1: seq}
    program = torch.export.export(wrapper, (ids, mask), dynamic_shapes={"input_ids": dims, "attention_mask": dims})
    _check_program(wrapper, program)
    program = program.run_decompositions({})
    shape = (ct.RangeDim(1, max_batch, 1), ct.RangeDim(2, max_seq, 8))
    mlmodel = ct.convert(
        program,
        convert_to="mlprogram",
        minimum_deployment_target=ct.target.macOS14,
        inputs=[ct.TensorType(name="input_ids", shape=shape, dtype=np.int32),
                ct.TensorType(name="attention_mask", shape=shape, dtype=np.int32)],
        outputs=[ct.TensorType(name="logits" if role == "reranker" else "last_hidden_state")],
        skip_model_load=True,  # loading needs macOS
    )
    mlmodel.save(str(package))


def _check_program(wrapper, program) -> None:
    """The exported program must compute what the model does at another batch size and length, with padding.

    Prediction of the package needs macOS; this at least proves the traced graph is not specialised to the
    example shapes and keeps the mask.

    Raises:
        ModelError: the outputs differ.
    """
    import torch

    ids = torch.arange(5, 5 + 3 * 11, dtype=torch.int64).reshape(3, 11) % 100 + 5
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left padding, as the Qwen3 runtime pads
    mask[2, 7:] = 0  # right padding, as encoders are padded
    with torch.no_grad():
        expected = wrapper(ids, mask)
        got = program.module()(ids, mask)
    if not torch.allclose(expected, got, atol=1e-4, rtol=1e-4):
        diff = (expected - got).abs().max().item()
        raise ModelError(f"the exported program differs from the model by {diff:.2e} on a padded batch")


def package_io(package: Path) -> tuple[list[str], list[str]]:
    """Input and output names read back from a saved package's spec (works on Linux)."""
    import coremltools as ct

    spec = ct.models.MLModel(str(package), skip_model_load=True).get_spec()
    return [i.name for i in spec.description.input], [o.name for o in spec.description.output]


def export_coreml(
    spec: Any,
    source: Any,
    home: Path,
    *,
    progress: Progress = print_to_stderr,
    force: bool = False,
    max_seq: int = DEFAULT_MAX_SEQ,
) -> Path:
    """Convert a model to a CoreML package (`<artefact>/coreml/model.mlpackage`) and return the folder.

    Runs on Linux as well as macOS; only running the package needs macOS. Skipped when a verified package with
    the same settings exists, unless `force`. Written atomically like the ONNX variants.

    Raises:
        ModelError: coremltools or torch missing, or the conversion failing (one line, cause chained).
    """
    home = Path(home)
    if not coreml_available():
        raise ModelError(
            f"a CoreML package of {spec.key} needs coremltools and torch, which are not installed",
            hint="pip install 'puremind[export]' coremltools",
        )
    src_dir = Path(source.path)
    final = artefacts.artefact_dir(home, spec.key, source.revision, VARIANT)
    seq = max_sequence(spec, src_dir, max_seq)
    expected = {k: getattr(spec, k) for k in SPEC_FIELDS if hasattr(spec, k) and not (k == "dim" and spec.dim is None)}
    expected.update({"revision": source.revision, "variant": VARIANT, "max_tokens": seq})
    label = f"{spec.key} {VARIANT}"
    parent = artefacts.model_dir(home, spec.key, source.revision)
    with artefacts.model_lock(parent, on_wait=progress):
        if not force and current_artefact(final, expected, progress, label):
            progress(f"{label}: already exported and verified ({final})")
            return final

        def build(tmp: Path) -> dict:
            timer = Timer()
            progress(f"{label}: converting with coremltools (torch.export, batch 1-{MAX_BATCH}, length 2-{seq})")
            package = tmp / "model.mlpackage"
            try:
                with stdout_to_stderr(), quiet_libraries("transformers.utils.logging"):
                    wrapper = build_wrapper(spec, src_dir)
                    convert(wrapper, package, role=spec.role, max_seq=seq)
                    inputs, outputs = package_io(package)
            except ModelError:
                raise
            except Exception as exc:  # noqa: BLE001 - any library failure becomes one clear line
                raise ModelError(f"converting {spec.key} to CoreML failed: {one_line(exc)}") from exc
            progress(f"{label}: converted in {timer} ({human_size(package)})")
            copy_tokenizer_files(src_dir, tmp)
            meta = spec_metadata(spec, source, VARIANT, tmp)
            meta.update(
                {
                    "max_tokens": seq,
                    "inputs": inputs,
                    "outputs": outputs,
                    "model_file": "model.mlpackage",
                    "dtype": "fp16",
                    "method": None,
                    "exclude_ops": [],
                    "providers": list(getattr(spec.variants.get(VARIANT), "providers", ())),
                    "coreml": {"max_batch": MAX_BATCH, "max_seq": seq, "input_dtype": "int32",
                               "minimum_deployment_target": "macOS14", "compute_precision": "fp16"},
                    "tools": tool_versions(*COREML_TOOLS),
                    # coremltools predicts only on macOS; the runtime checks Core ML against the reference on its
                    # first use on a Mac (puremind.models.provider_check)
                    "fidelity": fidelity.pending_record(
                        "Core ML cannot predict on this machine; checked against the reference on first use on a Mac"),
                }
            )
            return meta

        artefacts.write_artefact_atomically(final, build)
        progress(f"{label}: written to {final}")
    return final
