"""Artefacts from a model folder that already holds an ONNX export: no torch, no Optimum.

A sentence-transformers repository (or any folder) with `onnx/model.onnx` (or `model.onnx`) beside its
tokenizer.json runs on the runtime alone. The fp32 variant is that file as it is, copied into the artefact
layout with the tokenizer and config files; fp16 and int8 are derived from it by onnxruntime's own converter and
quantizer (`export.quantize`), which need the `onnx` package but no torch. There is no torch reference here, so
the folder's fp32 ONNX model is the reference: its outputs on the probe set are recorded in the fp32 variant's
metadata, and every derived variant is checked against them with the usual thresholds
(`puremind.models.fidelity`); the metadata says which reference was used.

Imports nothing heavy at import: onnxruntime (and onnx for a derived variant) load inside the functions.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Sequence

from puremind.errors import ModelError
from puremind.models import artefacts, fidelity, onnx_folder
from puremind.models.base import ModelsUnavailable
from puremind.models.onnx_folder import check_io, find_onnx, graph_io

from ._common import (
    Progress,
    Timer,
    copy_tokenizer_files,
    current_artefact,
    human_size,
    print_to_stderr,
    spec_metadata,
    tool_versions,
)
from .onnx_export import (
    _expected_spec,
    _guard,
    calibration_feeds,
    check_fidelity,
    report_fidelity,
    run_variant_probe,
    smoke_test,
    variant_settings,
    variant_spec,
)
from .quantize import convert_fp16, quantize_int8

TOOLS = ("onnxruntime", "onnx")


class _FolderReference:
    """The folder's fp32 ONNX model's outputs on the probe set: the reference of every variant made from it."""

    def __init__(self, spec: Any, rel: str):
        self.spec = spec
        self.label = f"the folder's own fp32 ONNX model ({rel}), run by onnxruntime on the CPU; no torch reference"
        self._outputs: dict | None = None
        self._folder: Path | None = None
        self._meta: dict | None = None

    def bind(self, folder: Path, meta: dict) -> None:
        """Compute the reference from the fp32 variant in `folder` (described by `meta`) when first asked."""
        self._folder, self._meta = folder, meta

    def outputs(self, progress: Progress, label: str) -> dict:
        if self._outputs is None:
            if self._folder is None or self._meta is None:
                raise ModelError(f"{label}: no fp32 ONNX model to check it against")
            timer = Timer()
            progress(f"{label}: running the folder's fp32 ONNX model on the probe set, the reference for every "
                     "variant")
            self._outputs = run_variant_probe(self.spec, "fp32", self._folder, self._meta)
            progress(f"{label}: reference computed in {timer}")
        return self._outputs


def adopt_onnx(spec: Any, source: Any, home: Path, variants: Sequence[str] = ("fp32",), *,
               progress: Progress = print_to_stderr, force: bool = False) -> dict[str, Path]:
    """Write the ONNX artefacts of a model folder that holds its own ONNX model; returns {variant: folder}.

    The fp32 variant (always written, being the reference and the base of the others) is the folder's ONNX file as
    it is; "fp16" and "int8" are made from it by onnxruntime's tools, by the spec's method, and checked against
    it on the probe set. A variant already written from the same file with the same settings is kept unless
    `force`. Each is written atomically and smoke-tested like an Optimum export (`export.onnx_export`).

    Raises:
        ModelsUnavailable: a derived variant is asked for and the `onnx` package is missing.
        ModelError: the folder holds no ONNX model, the file is not an encoder pureMind can run (its inputs and
            outputs are checked), a variant is unknown or cannot be made from ONNX (coreml), or a step fails.
    """
    home = Path(home)
    src_dir = Path(source.path)
    onnx_file = find_onnx(src_dir)
    if onnx_file is None:
        raise ModelError(f"{src_dir} holds no ONNX model (onnx/model.onnx or model.onnx)")
    rel = onnx_file.relative_to(src_dir).as_posix()
    wanted = list(dict.fromkeys(variants))
    specs = {name: variant_spec(spec, name) for name in dict.fromkeys(["fp32", *wanted])}
    derived = [name for name in wanted if specs[name].dtype != "fp32"]
    unsupported = [name for name in derived if specs[name].dtype not in ("fp16", "int8")]
    if unsupported:
        raise ModelError(f"{spec.hub_id}: the {', '.join(unsupported)} variant is made from the torch model, not "
                         f"from its ONNX file", hint="pip install 'puremind[export]' and run `puremind export-models`")
    if derived and not onnx_folder.derivable():
        raise ModelsUnavailable(
            f"making the {', '.join(derived)} copy of {spec.hub_id} from its ONNX model needs the onnx package",
            hint="pip install onnx; or set [models] variant = \"fp32\" to run the folder's ONNX model as it is",
        )
    _, _, output = graph_io(onnx_file, spec.role)  # refuses a file that is no usable encoder, before any copy

    parent = artefacts.model_dir(home, spec.key, source.revision)
    reference = _FolderReference(spec, rel)
    results: dict[str, Path] = {}
    with artefacts.model_lock(parent, on_wait=progress):
        removed = artefacts.remove_stale(parent)
        if removed:
            progress(f"{spec.key}: removed {len(removed)} unfinished export folder(s) left by an interrupted run")
        for name in specs:
            vspec = specs[name]
            label = f"{spec.key} {name}"
            final = artefacts.artefact_dir(home, spec.key, source.revision, name)
            expected = {**_expected_spec(spec, source), "variant": name, **variant_settings(vspec),
                        "source_file": rel}
            results[name] = final
            if not (force and name in wanted) and current_artefact(final, expected, progress, label):
                if name == "fp32":
                    reference.bind(final, artefacts.read_artefact(final, verify=False))
                else:
                    progress(f"{label}: already made and verified ({final})")
                continue
            if name == "fp32":
                build = _fp32_builder(spec, source, vspec, onnx_file, rel, output, reference, progress)
            else:
                base = results["fp32"] / "model.onnx"
                build = _derived_builder(spec, source, name, vspec, base, rel, reference, progress)
            artefacts.write_artefact_atomically(final, build)
            if name == "fp32":
                reference.bind(final, artefacts.read_artefact(final, verify=False))
            progress(f"{label}: written to {final}")
            if name == "fp32":
                progress(f"{label}: the folder's ONNX model as it is, the reference its other variants are checked "
                         "against (no torch here)")
            else:
                report_fidelity(label, final, progress, against=f"the folder's fp32 ONNX model ({rel})")
    return {name: results[name] for name in wanted}


def _copy_model(onnx_file: Path, dest: Path) -> None:
    """The ONNX file as `dest/model.onnx`, with its external weights (`model.onnx_data`, `model.onnx.data`)."""
    shutil.copyfile(onnx_file, dest / "model.onnx")
    for sibling in onnx_file.parent.iterdir():
        if sibling.is_file() and sibling.name != onnx_file.name and sibling.name.startswith(onnx_file.name):
            shutil.copyfile(sibling, dest / sibling.name)


def _describe(spec: Any, source: Any, name: str, vspec: Any, tmp: Path, rel: str) -> dict:
    """The variant's metadata (without fidelity), after a smoke test of the model in `tmp`."""
    copy_tokenizer_files(Path(source.path), tmp)
    inputs, outputs = smoke_test(tmp / "model.onnx", spec, name)
    meta = spec_metadata(spec, source, name, tmp)
    meta.update(
        {
            "inputs": inputs,
            "outputs": outputs,
            "output": check_io(tmp / "model.onnx", spec.role, inputs, outputs),
            "model_file": "model.onnx",
            **variant_settings(vspec),
            "providers": list(vspec.providers),
            "tools": tool_versions(*TOOLS),
            "source_file": rel,
        }
    )
    return meta


def _fp32_builder(spec, source, vspec, onnx_file: Path, rel: str, output: str, reference: _FolderReference,
                  progress: Progress):
    from puremind.models.providers import CPU

    def build(tmp: Path) -> dict:
        label = f"{spec.key} fp32"
        progress(f"{label}: using {rel} of {source.path} as it is ({human_size(onnx_file)})")
        _copy_model(onnx_file, tmp)
        meta = _describe(spec, source, "fp32", vspec, tmp, rel)
        reference.bind(tmp, meta)
        outputs = reference.outputs(progress, label)
        # The reference itself: its figures are those of a perfect match; what matters is the reference outputs
        # recorded for the derived variants and for the provider check on the user's machine.
        meta["fidelity"] = fidelity.fidelity_record(spec.role, outputs, outputs, provider=CPU,
                                                    reference_label=reference.label)
        return meta

    return build


def _derived_builder(spec, source, name: str, vspec, base: Path, rel: str, reference: _FolderReference,
                     progress: Progress):
    def build(tmp: Path) -> dict:
        label = f"{spec.key} {name}"
        timer = Timer()
        if vspec.dtype == "fp16":
            progress(f"{label}: converting {rel} to fp16")
            _guard(spec, name, lambda: convert_fp16(base, tmp / "model.onnx"))
        else:
            method = vspec.method or "dynamic-per-channel"
            progress(f"{label}: quantizing {rel} to int8 ({method}) with onnxruntime")
            calibrated = {"calibration": lambda: calibration_feeds(spec, Path(source.path), base)} \
                if method.startswith("static-") else {}
            _guard(spec, name, lambda: quantize_int8(base, tmp / "model.onnx", method, vspec.exclude_ops,
                                                     **calibrated))
        progress(f"{label}: made in {timer} ({human_size(tmp / 'model.onnx')}); checking it runs")
        meta = _describe(spec, source, name, vspec, tmp, rel)
        meta["fidelity"] = check_fidelity(spec, name, tmp, meta, reference, progress)
        return meta

    return build
