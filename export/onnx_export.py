"""Optimum -> ONNX fp32, then fp16 and an 8-bit variant from it, each written as a verified artefact."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any, Sequence

from puremind.errors import ModelError
from puremind.models import artefacts, fidelity

from ._common import (
    SPEC_FIELDS,
    Progress,
    Timer,
    copy_tokenizer_files,
    current_artefact,
    export_available,
    human_size,
    one_line,
    print_to_stderr,
    quiet_libraries,
    spec_metadata,
    stdout_to_stderr,
    tool_versions,
)
from .coreml_export import export_coreml
from .quantize import EXTERNAL_DATA, convert_fp16, quantize_int8

ONNX_TOOLS = ("optimum", "optimum-onnx", "onnxruntime", "onnx", "transformers", "torch")
COREML_VARIANT = "coreml"  # handed to export_coreml
#: the libraries whose loggers the Optimum export quiets (see `quiet_libraries`)
LIBRARY_LOGGING = ("transformers.utils.logging", "optimum.utils.logging")


def variant_spec(spec: Any, name: str) -> Any:
    """The spec's VariantSpec called `name`.

    Raises:
        ModelError: the manifest defines no such variant (the message lists those it does).
    """
    try:
        return spec.variants[name]
    except KeyError:
        known = ", ".join(sorted(spec.variants)) or "none"
        raise ModelError(f"model {spec.key} has no variant {name!r}; known variants: {known}") from None


def variant_settings(vspec: Any) -> dict[str, Any]:
    """How a variant was made, stored in its metadata so a changed manifest is noticed. `probe` is the probe set
    it was checked on: a variant exported before the check, or checked on another probe set, is exported again."""
    return {"dtype": vspec.dtype, "method": vspec.method, "exclude_ops": list(vspec.exclude_ops),
            "probe": fidelity.probe_digest()}


def export_model(
    spec: Any,
    source: Any,
    home: Path,
    variants: Sequence[str] = ("fp32", "fp16", "int8"),
    *,
    progress: Progress = print_to_stderr,
    force: bool = False,
) -> dict[str, Path]:
    """Export one model to ONNX artefacts under `home` and return {variant: folder}.

    fp32 comes from Optimum's `main_export` with the spec's task (library "transformers", no remote code, no
    graph optimisation); fp16 and int8 are derived from it. A variant already exported with the same settings
    and passing its checksums is skipped unless `force`. A "coreml" variant is handed to `export_coreml`.
    Every variant is written atomically (see `artefacts.write_artefact_atomically`) and smoke-tested with
    onnxruntime (loads, finite outputs) before it is moved into place. Then it proves itself against the model as
    published: torch runs the source model in fp32 on the probe set (the reference, computed once), the variant
    runs the same texts on the CPU, and the figures, the verdict and the reference outputs go into its metadata
    (`puremind.models.fidelity`). A variant below a threshold is still written, but kept out of the automatic
    choice; the export prints one `warning:` line naming the figure and the threshold.

    Raises:
        ModelError: export dependencies missing, an unknown variant, or any export step failing (one line,
            the library's exception chained).
    """
    home = Path(home)
    wanted = list(dict.fromkeys(variants))
    specs = {name: variant_spec(spec, name) for name in wanted}
    onnx_names = [n for n in wanted if n != COREML_VARIANT]
    results: dict[str, Path] = {}
    if onnx_names and not export_available():
        raise ModelError(
            f"exporting {spec.key} needs the export tools (optimum, torch), which are not installed",
            hint="pip install 'puremind[export]'",
        )
    parent = artefacts.model_dir(home, spec.key, source.revision)
    with artefacts.model_lock(parent, on_wait=progress):
        removed = artefacts.remove_stale(parent)
        if removed:
            progress(f"{spec.key}: removed {len(removed)} unfinished export folder(s) left by an interrupted run")
        pending = []
        for name in onnx_names:
            final = artefacts.artefact_dir(home, spec.key, source.revision, name)
            expected = {**_expected_spec(spec, source), "variant": name, **variant_settings(specs[name])}
            results[name] = final
            if not force and current_artefact(final, expected, progress, f"{spec.key} {name}"):
                progress(f"{spec.key} {name}: already exported and verified ({final})")
            else:
                pending.append(name)
        if pending:
            _export_onnx(spec, source, home, pending, specs, results, progress)
    if COREML_VARIANT in wanted:
        results[COREML_VARIANT] = export_coreml(spec, source, home, progress=progress, force=force)
    return {name: results[name] for name in wanted}


def _expected_spec(spec: Any, source: Any) -> dict[str, Any]:
    meta = {k: getattr(spec, k) for k in SPEC_FIELDS if hasattr(spec, k)}
    meta["revision"] = source.revision
    meta["max_tokens"] = spec.max_tokens
    if spec.dim is None:
        meta.pop("dim", None)  # filled from config.json at export time
    return meta


def _export_onnx(spec, source, home: Path, pending: list[str], specs: dict, results: dict, progress: Progress) -> None:
    parent = artefacts.model_dir(home, spec.key, source.revision)
    src_dir = Path(source.path)
    fp32_final = results.get("fp32") or artefacts.artefact_dir(home, spec.key, source.revision, "fp32")
    base: Path | None = None
    if "fp32" not in pending:
        base = _reusable_fp32(spec, source, fp32_final, checked="fp32" in specs)
    reference = _Reference(spec, src_dir)
    with artefacts.partial_dir(parent, "-work") as work:
        if base is None:
            optimum_out = work / "optimum"
            progress(f"{spec.key} fp32: exporting {src_dir} with Optimum ({spec.task})")
            timer = Timer()
            _optimum_export(spec, src_dir, optimum_out)
            progress(f"{spec.key} fp32: exported in {timer} ({human_size(optimum_out / 'model.onnx')}"
                     f"{', weights in ' + EXTERNAL_DATA if (optimum_out / EXTERNAL_DATA).exists() else ''})")
            if "fp32" in pending:
                def build_fp32(tmp: Path) -> dict:
                    for name in ("model.onnx", EXTERNAL_DATA):
                        if (optimum_out / name).exists():
                            os.rename(optimum_out / name, tmp / name)
                    return _finish_variant(spec, source, "fp32", specs["fp32"], tmp, src_dir, optimum_out,
                                           reference, progress)

                artefacts.write_artefact_atomically(fp32_final, build_fp32)
                progress(f"{spec.key} fp32: written to {fp32_final}")
                report_fidelity(f"{spec.key} fp32", fp32_final, progress)
                base = fp32_final / "model.onnx"
            else:
                base = optimum_out / "model.onnx"
        for name in pending:
            if name == "fp32":
                continue
            vspec = specs[name]
            label = f"{spec.key} {name}"
            final = artefacts.artefact_dir(home, spec.key, source.revision, name)

            def build(tmp: Path, name=name, vspec=vspec, label=label) -> dict:
                timer = Timer()
                if vspec.dtype == "fp16":
                    progress(f"{label}: converting to fp16")
                    _guard(spec, name, lambda: convert_fp16(base, tmp / "model.onnx"))
                elif vspec.dtype == "int8":
                    method = vspec.method or "dynamic-per-channel"
                    progress(f"{label}: quantizing to int8 ({method})")
                    # a static method calibrates its activation ranges on the probe set's inputs
                    calibrated = {"calibration": lambda: calibration_feeds(spec, src_dir, base)} \
                        if method.startswith("static-") else {}
                    _guard(spec, name, lambda: quantize_int8(base, tmp / "model.onnx", method, vspec.exclude_ops,
                                                             **calibrated))
                elif vspec.dtype == "fp32":
                    progress(f"{label}: copying fp32")
                    for fname in ("model.onnx", EXTERNAL_DATA):
                        if (base.parent / fname).exists():
                            shutil.copyfile(base.parent / fname, tmp / fname)
                else:
                    raise ModelError(f"model {spec.key} variant {name}: unknown dtype {vspec.dtype!r}")
                progress(f"{label}: converted in {timer} ({human_size(tmp / 'model.onnx')}); checking it runs")
                return _finish_variant(spec, source, name, vspec, tmp, src_dir, base.parent, reference, progress)

            artefacts.write_artefact_atomically(final, build)
            progress(f"{label}: written to {final}")
            report_fidelity(label, final, progress)


def _reusable_fp32(spec, source, fp32_final: Path, *, checked: bool) -> Path | None:
    """The fp32 artefact's model when it can serve as the base of the other variants."""
    if not (fp32_final / "model.onnx").exists():
        return None
    if not checked:  # fp32 was not asked for, so nothing has verified it yet
        try:
            meta = artefacts.read_artefact(fp32_final, verify=True)
        except ModelError:
            return None
        if any(meta.get(k) != v for k, v in _expected_spec(spec, source).items()):
            return None
    return fp32_final / "model.onnx"


def _guard(spec, variant: str, fn, *, configure: tuple[str, ...] = ()) -> None:
    try:
        with stdout_to_stderr(), quiet_libraries(*configure):
            fn()
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - any library failure becomes one clear line
        raise ModelError(f"exporting {spec.key} {variant} failed: {one_line(exc)}") from exc


def _optimum_export(spec, src_dir: Path, out: Path) -> None:
    def run() -> None:
        from optimum.exporters.onnx import main_export

        main_export(
            str(src_dir),
            output=str(out),
            task=spec.task,
            library_name="transformers",
            trust_remote_code=False,
            local_files_only=True,
            # ONNX Runtime's graph optimiser refuses qwen3 (microsoft/onnxruntime#25083); the others are left
            # unfused too so every variant is derived from the same plain graph.
            optimize=None,
            device="cpu",
        )

    _guard(spec, "fp32", run, configure=LIBRARY_LOGGING)
    if not (out / "model.onnx").exists():
        raise ModelError(f"exporting {spec.key} fp32 failed: Optimum wrote no model.onnx")


def _finish_variant(spec, source, name: str, vspec, tmp: Path, src_dir: Path, fallback: Path,
                    reference: "_Reference", progress: Progress) -> dict:
    copy_tokenizer_files(src_dir, tmp, fallback)
    inputs, outputs = smoke_test(tmp / "model.onnx", spec, name)
    meta = spec_metadata(spec, source, name, tmp)
    meta.update(
        {
            "inputs": inputs,
            "outputs": outputs,
            "model_file": "model.onnx",
            **variant_settings(vspec),
            "providers": list(vspec.providers),
            "tools": tool_versions(*ONNX_TOOLS),
        }
    )
    meta["fidelity"] = check_fidelity(spec, name, tmp, meta, reference, progress)
    return meta


PROBE_MAX_TOKENS = fidelity.PROBE_MAX_TOKENS


class _Reference:
    """The source model's fp32 outputs on the probe set, computed with torch on the first variant that needs them."""

    def __init__(self, spec: Any, src_dir: Path):
        self.spec = spec
        self.src_dir = src_dir
        self._outputs: dict | None = None

    def outputs(self, progress: Progress, label: str) -> dict:
        if self._outputs is None:
            from puremind.models.torch_backend import TorchEmbedder, TorchReranker

            timer = Timer()
            progress(f"{label}: running the source model (torch, fp32) on the probe set, the reference for every "
                     "variant")
            if self.spec.role == "embedder":
                model: Any = TorchEmbedder(self.src_dir, self.spec, max_tokens=PROBE_MAX_TOKENS,
                                           fingerprint="reference", device="cpu")
            else:
                capped = dataclasses.replace(self.spec, max_tokens=min(self.spec.max_tokens, PROBE_MAX_TOKENS))
                model = TorchReranker(self.src_dir, capped, device="cpu")
            try:
                holder: dict = {}
                _guard(self.spec, "reference", lambda: holder.update(fidelity.run_probe(model, self.spec.role)))
            finally:
                model.close()
            self._outputs = holder
            progress(f"{label}: reference computed in {timer}")
        return self._outputs


def check_fidelity(spec: Any, variant: str, folder: Path, meta: dict, reference: _Reference,
                   progress: Progress) -> dict:
    """Run the variant in `folder` on the probe set (onnxruntime, CPU) and compare it with the reference.

    Raises:
        ModelError: the reference or the variant cannot be run.
    """
    from puremind.models.providers import CPU

    label = f"{spec.key} {variant}"
    expected = reference.outputs(progress, label)
    progress(f"{label}: checking it against the reference on the probe set")
    outputs = run_variant_probe(spec, variant, folder, meta)
    return fidelity.fidelity_record(spec.role, expected, outputs, provider=CPU,
                                    reference_label=getattr(reference, "label", fidelity.TORCH_REFERENCE))


def run_variant_probe(spec: Any, variant: str, folder: Path, meta: dict) -> dict:
    """The outputs of the ONNX variant in `folder` (described by `meta`) on the probe set, on the CPU.

    Raises:
        ModelError: the variant cannot be run.
    """
    from puremind.models.loader import onnx_batch_size
    from puremind.models.onnx_backend import OnnxEmbedder, OnnxReranker
    from puremind.models.providers import CPU

    if spec.role == "embedder":
        model: Any = OnnxEmbedder(folder, providers=[CPU], max_tokens=PROBE_MAX_TOKENS, fingerprint="probe",
                                  meta=meta, batch_size=onnx_batch_size(variant))
    else:
        capped = {**meta, "max_tokens": min(int(meta["max_tokens"]), PROBE_MAX_TOKENS)}
        model = OnnxReranker(folder, providers=[CPU], meta=capped, batch_size=onnx_batch_size(variant))
    try:
        holder: dict = {}
        _guard(spec, variant, lambda: holder.update(fidelity.run_probe(model, spec.role)))
    finally:
        model.close()
    return holder


def calibration_feeds(spec: Any, src_dir: Path, model_path: Path):
    """The inputs of the model at `model_path` for each probe text, one text per feed (a static int8 method's
    calibration): passages and queries (with their prefixes) for an embedder, each query with its candidates for a
    reranker."""
    import numpy as np
    import onnx

    from puremind.models.batching import model_inputs
    from puremind.models.tokenize import ModelMeta, TextEncoder

    probe = fidelity.load_probe()
    meta = ModelMeta.from_spec(dataclasses.replace(spec, max_tokens=min(spec.max_tokens, PROBE_MAX_TOKENS)))
    encoder = TextEncoder(src_dir, meta)
    names = [i.name for i in onnx.load(str(model_path), load_external_data=False).graph.input]
    if spec.role == "embedder":
        encoded = encoder.encode(list(probe.passages)) + encoder.encode(list(probe.queries), is_query=True)
    else:
        encoded = [e for qi, cands in fidelity.reranker_pairs(probe)
                   for e in encoder.encode_pairs(probe.queries[qi], [probe.passages[i] for i in cands],
                                                 max_chars=fidelity.PROBE_CHARS)]
    for i, item in enumerate(encoded):
        yield model_inputs(encoder.pad([item], np.asarray([i], dtype=np.int64)), names, src_dir)


def report_fidelity(label: str, folder: Path, progress: Progress, against: str = "the source model") -> None:
    """One line on how an exported variant compares with the reference (`against` names it); a `warning:` line
    when it is kept out."""
    meta = artefacts.read_artefact(folder, verify=False)
    fid = meta.get("fidelity") or {}
    figures = ", ".join(f"{k} {v:g}" for k, v in (fid.get("figures") or {}).items() if v is not None)
    if fidelity.kept_out(meta):
        progress(f"warning: {label} is kept out: {fidelity.describe_shortfalls(meta)} against {against} "
                 f"on the probe set; the next variant serves instead ([models] variant = \"{meta.get('variant')}\" "
                 "forces it)")
    elif fid.get("status") == "ok":
        progress(f"{label}: matches {against} on the probe set ({figures})")


def smoke_test(model_path: Path, spec, variant: str) -> tuple[list[str], list[str]]:
    """Run one short input through the model with onnxruntime; returns (input names, output names).

    Catches a variant that does not load (an operator this onnxruntime lacks) or that computes NaN (a
    quantized attention product) before it replaces anything.

    Raises:
        ModelError: the session cannot be created or run, or the output is not finite.
    """
    import numpy as np
    import onnxruntime as ort

    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        feeds = {}
        seq = 6
        for inp in session.get_inputs():
            if inp.name == "input_ids":
                feeds[inp.name] = np.array([[3, 4, 5, 6, 7, 2], [3, 4, 5, 2, 1, 1]], dtype=np.int64)[:, :seq]
            elif inp.name == "attention_mask":
                feeds[inp.name] = np.array([[1] * seq, [1, 1, 1, 1, 0, 0]], dtype=np.int64)
            elif inp.name == "position_ids":
                feeds[inp.name] = np.clip(np.cumsum(feeds.get("attention_mask", np.ones((2, seq), np.int64)),
                                                    axis=1) - 1, 0, None).astype(np.int64)
            else:
                feeds[inp.name] = np.zeros((2, seq), dtype=np.int64)
        # position_ids may come before attention_mask in the graph; recompute once both exist.
        if "position_ids" in feeds and "attention_mask" in feeds:
            feeds["position_ids"] = np.clip(np.cumsum(feeds["attention_mask"], axis=1) - 1, 0, None)
        result = session.run(None, feeds)[0]
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"the exported {spec.key} {variant} does not run in onnxruntime: {one_line(exc)}") from exc
    if not np.all(np.isfinite(result)):
        raise ModelError(
            f"the exported {spec.key} {variant} computes non-finite values (NaN or inf)",
            hint="a quantized attention or rotary product? add it to the variant's exclude_ops",
        )
    return [i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()]
