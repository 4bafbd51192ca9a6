"""The export step: ONNX variants of the stand-in models, checksummed artefacts, atomic writes, CoreML packages."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("optimum.exporters.onnx", reason="the [export] extra is not installed")

# Tracing and conversion warnings come from torch, transformers and coremltools, not from this code.
pytestmark = [
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore:Exporting aten:UserWarning"),
    pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning"),
]

from puremind.errors import ModelError  # noqa: E402
from puremind.export import export_coreml, export_model  # noqa: E402
from puremind.export import onnx_export  # noqa: E402
from puremind.models import artefacts  # noqa: E402
from puremind.models.hub import ModelSource  # noqa: E402
from puremind.models.manifest import ModelSpec, VariantSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scripts.standins import build_qwen3, build_xlmr_reranker  # noqa: E402

slow = pytest.mark.slow  # the CoreML conversions: ~10 s each on 2 cores

QWEN3_EXCLUDE = ("/rotary_emb/MatMul", "/self_attn/MatMul")


def variants(int8_method: str = "dynamic-per-channel", exclude: tuple[str, ...] = ()) -> dict[str, VariantSpec]:
    return {
        "fp32": VariantSpec("fp32", "fp32", providers=("CPUExecutionProvider",)),
        "fp16": VariantSpec("fp16", "fp16", providers=("CUDAExecutionProvider",)),
        "int8": VariantSpec("int8", "int8", method=int8_method, exclude_ops=exclude,
                            providers=("CPUExecutionProvider",)),
        "coreml": VariantSpec("coreml", "fp16"),
    }


def qwen3_spec(**changes) -> ModelSpec:
    fields = dict(
        key="tiny-qwen3", hub_id="./tiny-qwen3", revision=None, role="embedder", architecture="qwen3",
        task="feature-extraction", pooling="last_token", normalize=True, padding_side="left",
        query_prefix="Instruct: find\nQuery:", passage_prefix="", max_tokens=4096, dim=64, activation=None,
        files=("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"),
        variants=variants(exclude=QWEN3_EXCLUDE), default_variant={"CPUExecutionProvider": "int8"},
    )
    fields.update(changes)
    return ModelSpec(**fields)


def reranker_spec(**changes) -> ModelSpec:
    fields = dict(
        key="tiny-reranker", hub_id="./tiny-reranker", revision=None, role="reranker", architecture="xlm-roberta",
        task="text-classification", pooling=None, normalize=False, padding_side="right", query_prefix="",
        passage_prefix="", max_tokens=1024, dim=None, activation="sigmoid",
        files=("config.json", "model.safetensors", "tokenizer.json"),
        variants=variants(), default_variant={"CPUExecutionProvider": "int8"},
    )
    fields.update(changes)
    return ModelSpec(**fields)


@pytest.fixture(scope="session")
def standins(tmp_path_factory) -> dict[str, ModelSource]:
    root = tmp_path_factory.mktemp("standins")
    q = build_qwen3(root / "tiny-qwen3")
    x = build_xlmr_reranker(root / "tiny-reranker")
    return {
        "qwen3": ModelSource(name=str(q), path=q, revision="local-0123456789ab", local=True),
        "reranker": ModelSource(name=str(x), path=x, revision="local-ba9876543210", local=True),
    }


@pytest.fixture(scope="session")
def exported(tmp_path_factory, standins) -> Path:
    """A home with fp32, fp16 and int8 of both stand-ins, exported once for the session (read-only use)."""
    home = tmp_path_factory.mktemp("export-home")
    export_model(qwen3_spec(), standins["qwen3"], home, progress=lambda _: None)
    export_model(reranker_spec(), standins["reranker"], home, progress=lambda _: None)
    return home


@pytest.fixture
def home_copy(exported, tmp_path) -> Path:
    """A private copy of the exported home, for tests that damage or re-export artefacts."""
    dest = tmp_path / "home-copy"
    shutil.copytree(exported, dest, symlinks=True)
    return dest


def qdir(home: Path, source: ModelSource, variant: str) -> Path:
    return artefacts.artefact_dir(home, "tiny-qwen3", source.revision, variant)


def rdir(home: Path, source: ModelSource, variant: str) -> Path:
    return artefacts.artefact_dir(home, "tiny-reranker", source.revision, variant)


def run_embedder(model_dir: Path, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_dir / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": np.clip(np.cumsum(mask, 1) - 1, 0, None)}
    vec = session.run(None, feeds)[0][:, -1]
    return vec / np.linalg.norm(vec, axis=1, keepdims=True)


# -- export -------------------------------------------------------------------------------------------


def test_export_writes_each_variant_with_model_tokenizer_and_checksums(exported, standins):
    for variant in ("fp32", "fp16", "int8"):
        folder = qdir(exported, standins["qwen3"], variant)
        meta = json.loads((folder / "puremind_model.json").read_text())
        assert set(meta["files"]) == {"model.onnx", "tokenizer.json", "tokenizer_config.json",
                                      "special_tokens_map.json", "config.json"}
        for rel, entry in meta["files"].items():
            data = (folder / rel).read_bytes()
            assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        assert meta["format"] == 1 and meta["variant"] == variant and meta["revision"] == "local-0123456789ab"
        assert meta["inputs"] == ["input_ids", "attention_mask", "position_ids"]
        assert meta["pooling"] == "last_token" and meta["padding_side"] == "left" and meta["dim"] == 64
        assert meta["query_prefix"] == "Instruct: find\nQuery:" and meta["normalize"] is True
        assert meta["pad_token_id"] == 0  # <|endoftext|>
        assert meta["created"].endswith("Z") and meta["tools"]["optimum"]
        assert artefacts.read_artefact(folder)["variant"] == variant
    # The tokenizer files are the fetched originals, byte for byte.
    src = standins["qwen3"].path
    assert (qdir(exported, standins["qwen3"], "int8") / "tokenizer.json").read_bytes() == (
        src / "tokenizer.json").read_bytes()
    assert artefacts.list_variants(exported, "tiny-qwen3", "local-0123456789ab") == ["fp16", "fp32", "int8"]


def test_reranker_artefact_describes_a_sequence_classifier(exported, standins):
    meta = artefacts.read_artefact(rdir(exported, standins["reranker"], "int8"))
    assert meta["task"] == "text-classification" and meta["activation"] == "sigmoid"
    assert meta["inputs"] == ["input_ids", "attention_mask"] and meta["outputs"] == ["logits"]
    assert meta["pad_token_id"] == 1 and meta["dim"] is None
    assert meta["method"] == "dynamic-per-channel"


def test_artefacts_live_under_the_model_key_and_short_revision(exported, standins):
    folder = qdir(exported, standins["qwen3"], "fp32")
    assert folder == exported / "models" / "tiny-qwen3@local-012345" / "fp32"
    assert not [p for p in folder.parent.iterdir() if p.name.startswith((".partial-", ".old-"))]


def test_fp16_and_int8_stay_close_to_fp32_and_int8_keeps_attention_in_float(exported, standins):
    import onnx

    rng = np.random.default_rng(0)
    ids = rng.integers(5, 2000, size=(4, 12)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, :5] = 0  # left padding
    mask[3, :9] = 0
    ref = run_embedder(qdir(exported, standins["qwen3"], "fp32"), ids, mask)
    fp16 = run_embedder(qdir(exported, standins["qwen3"], "fp16"), ids, mask)
    int8 = run_embedder(qdir(exported, standins["qwen3"], "int8"), ids, mask)
    assert np.sum(ref * fp16, axis=1).min() > 0.999
    assert np.sum(ref * int8, axis=1).min() > 0.98
    graph = onnx.load(str(qdir(exported, standins["qwen3"], "int8") / "model.onnx")).graph
    ops = {node.name: node.op_type for node in graph.node}
    assert "MatMulInteger" in ops.values()
    assert ops["/layers.0/self_attn/MatMul"] == "MatMul" and ops["/rotary_emb/MatMul"] == "MatMul"


def test_matmul_nbits_method_writes_weight_only_8_bit_blocks(home_copy, standins):
    import onnx

    spec = qwen3_spec(variants=variants("matmul-nbits-8", QWEN3_EXCLUDE))
    lines: list[str] = []
    out = export_model(spec, standins["qwen3"], home_copy, ["int8"], progress=lines.append)
    assert any("settings changed (method)" in line for line in lines)
    nodes = [n for n in onnx.load(str(out["int8"] / "model.onnx")).graph.node if n.op_type == "MatMulNBits"]
    assert nodes and all({a.name: a.i for a in n.attribute}["bits"] == 8 for n in nodes)
    assert all({a.name: a.i for a in n.attribute}["block_size"] == 32 for n in nodes)
    assert artefacts.read_artefact(out["int8"])["method"] == "matmul-nbits-8"


def test_static_method_calibrates_activation_ranges_on_the_probe_set(home_copy, standins):
    import onnx
    from onnx import numpy_helper

    spec = qwen3_spec(variants=variants("static-per-channel", QWEN3_EXCLUDE))
    out = export_model(spec, standins["qwen3"], home_copy, ["int8"], progress=lambda _: None)
    graph = onnx.load(str(out["int8"] / "model.onnx")).graph
    quantize = [n for n in graph.node if n.op_type == "QuantizeLinear"]
    assert quantize, "no activation is quantized"
    # a calibrated activation scale is a constant written at export, not computed at run time
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    scales = [constants[n.input[1]] for n in quantize if n.input[1] in constants]
    assert scales and all(float(np.min(s)) > 0 for s in scales)
    assert not [n for n in graph.node if n.op_type == "DynamicQuantizeLinear"]
    meta = artefacts.read_artefact(out["int8"])
    assert meta["method"] == "static-per-channel" and meta["fidelity"]["status"] in ("ok", "kept-out")


def test_a_second_export_skips_variants_already_verified(home_copy, standins):
    before = {v: (qdir(home_copy, standins["qwen3"], v) / "model.onnx").stat().st_ino for v in ("fp32", "int8")}
    lines: list[str] = []
    start = time.perf_counter()
    out = export_model(qwen3_spec(), standins["qwen3"], home_copy, progress=lines.append)
    assert time.perf_counter() - start < 2
    assert set(out) == {"fp32", "fp16", "int8"}
    assert sum("already exported and verified" in line for line in lines) == 3
    after = {v: (qdir(home_copy, standins["qwen3"], v) / "model.onnx").stat().st_ino for v in ("fp32", "int8")}
    assert before == after


def test_force_exports_again_from_the_existing_fp32(home_copy, standins):
    old = (qdir(home_copy, standins["qwen3"], "fp16") / "model.onnx").stat().st_ino
    lines: list[str] = []
    export_model(qwen3_spec(), standins["qwen3"], home_copy, ["fp16"], progress=lines.append, force=True)
    assert (qdir(home_copy, standins["qwen3"], "fp16") / "model.onnx").stat().st_ino != old
    assert not any("Optimum" in line for line in lines)  # derived from the verified fp32, not re-exported
    artefacts.read_artefact(qdir(home_copy, standins["qwen3"], "fp16"))


def test_export_progress_goes_to_stderr_and_nothing_to_stdout(standins, tmp_path, capfd):
    export_model(reranker_spec(), standins["reranker"], tmp_path / "h", ["fp32"])
    out, err = capfd.readouterr()
    assert out == ""
    assert "tiny-reranker fp32: exporting" in err and "written to" in err


def test_an_unknown_variant_names_the_known_ones(standins, tmp_path):
    with pytest.raises(ModelError, match="no variant 'int4'; known variants: coreml, fp16, fp32, int8"):
        export_model(qwen3_spec(), standins["qwen3"], tmp_path, ["int4"])


def test_missing_export_tools_give_a_model_error_with_the_install_hint(standins, tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_export, "export_available", lambda: False)  # the check export_model makes
    with pytest.raises(ModelError) as info:
        export_model(qwen3_spec(), standins["qwen3"], tmp_path)
    assert "pip install 'puremind[export]'" in info.value.hint


def test_export_available_without_importing_heavy_libraries():
    code = (
        "import sys, puremind.export as e, puremind.models.artefacts\n"
        "assert e.export_available()\n"
        "heavy = [m for m in ('torch', 'onnx', 'onnxruntime', 'optimum', 'transformers', 'coremltools') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# -- verification -------------------------------------------------------------------------------------


def test_a_changed_byte_fails_verification_with_a_clear_model_error(home_copy, standins):
    folder = qdir(home_copy, standins["qwen3"], "int8")
    artefacts.read_artefact(folder)  # leaves a verified stamp
    path = folder / "model.onnx"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))  # same size, new mtime: the stamp no longer matches
    with pytest.raises(ModelError) as info:
        artefacts.read_artefact(folder)
    assert "model.onnx does not match its SHA-256 checksum" in info.value.message
    assert "export-models --force" in info.value.hint
    # Without verification only presence and sizes are checked.
    assert artefacts.read_artefact(folder, verify=False)["variant"] == "int8"


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "tokenizer.json").unlink(), "incomplete: tokenizer.json is missing"),
        (lambda d: (d / "model.onnx").write_bytes(b"x"), "has 1 bytes, its metadata says"),
        (lambda d: (d / "puremind_model.json").write_text("{not json"), "is not valid JSON"),
        (lambda d: (d / "puremind_model.json").unlink(), "no exported model in"),
    ],
    ids=["missing-file", "truncated", "broken-metadata", "no-metadata"],
)
def test_damaged_artefacts_are_refused(home_copy, standins, damage, message):
    folder = qdir(home_copy, standins["qwen3"], "fp16")
    damage(folder)
    with pytest.raises(ModelError, match=message):
        artefacts.read_artefact(folder)


def test_metadata_naming_a_path_outside_the_folder_is_refused(home_copy, standins):
    folder = qdir(home_copy, standins["qwen3"], "fp16")
    meta = json.loads((folder / "puremind_model.json").read_text())
    meta["files"]["../fp32/model.onnx"] = meta["files"].pop("model.onnx")
    (folder / "puremind_model.json").write_text(json.dumps(meta))
    with pytest.raises(ModelError, match="malformed entry"):
        artefacts.read_artefact(folder)


def test_later_loads_of_unchanged_files_only_stat_them(home_copy, standins, monkeypatch):
    folder = qdir(home_copy, standins["qwen3"], "fp32")
    (folder / artefacts.STAMP_NAME).unlink()
    hashed: list[Path] = []
    real = artefacts.sha256_file
    monkeypatch.setattr(artefacts, "sha256_file", lambda p: hashed.append(p) or real(p))
    artefacts.read_artefact(folder)
    assert len(hashed) == 5
    artefacts.read_artefact(folder)
    assert len(hashed) == 5


def test_export_replaces_a_damaged_variant_and_keeps_the_good_ones(home_copy, standins):
    folder = qdir(home_copy, standins["qwen3"], "int8")
    (folder / "model.onnx").write_bytes(b"\0" * (folder / "model.onnx").stat().st_size)
    fp32_ino = (qdir(home_copy, standins["qwen3"], "fp32") / "model.onnx").stat().st_ino
    lines: list[str] = []
    export_model(qwen3_spec(), standins["qwen3"], home_copy, progress=lines.append)
    assert any("int8: the existing export is unusable" in line for line in lines)
    artefacts.read_artefact(folder)
    assert (qdir(home_copy, standins["qwen3"], "fp32") / "model.onnx").stat().st_ino == fp32_ino


# -- atomicity ----------------------------------------------------------------------------------------


def test_a_build_that_raises_leaves_no_folder_behind(tmp_path):
    final = artefacts.artefact_dir(tmp_path, "m", "rev123", "int8")

    def build(tmp: Path) -> dict:
        (tmp / "model.onnx").write_bytes(b"half a model")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        artefacts.write_artefact_atomically(final, build)
    assert not final.exists()
    assert [p.name for p in final.parent.iterdir()] == [".lock"]
    assert artefacts.list_variants(tmp_path, "m", "rev123") == []


def test_a_failed_rebuild_keeps_the_previous_variant(home_copy, standins, monkeypatch):
    folder = qdir(home_copy, standins["qwen3"], "int8")
    before = (folder / "puremind_model.json").read_bytes()

    def broken(src, dst, method, exclude_ops=()):
        Path(dst).write_bytes(b"partial output")
        raise RuntimeError("quantizer crashed")

    monkeypatch.setattr(onnx_export, "quantize_int8", broken)
    with pytest.raises(ModelError, match="exporting tiny-qwen3 int8 failed: RuntimeError: quantizer crashed"):
        export_model(qwen3_spec(), standins["qwen3"], home_copy, ["int8"], force=True)
    assert (folder / "puremind_model.json").read_bytes() == before
    artefacts.read_artefact(folder)
    assert not [p for p in folder.parent.iterdir() if p.name.startswith((".partial-", ".old-"))]


def test_a_variant_computing_nan_is_refused_before_it_replaces_anything(home_copy, standins, monkeypatch):
    import onnx
    from onnx import numpy_helper

    def poisoned(src, dst, method, exclude_ops=()):
        model = onnx.load(str(src))
        for init in model.graph.initializer:  # every projection weight (the graph cleans NaN attention rows)
            if init.name.startswith("onnx::MatMul"):
                arr = numpy_helper.to_array(init).copy()
                arr[...] = np.nan
                init.CopyFrom(numpy_helper.from_array(arr, init.name))
        onnx.save(model, str(dst))

    monkeypatch.setattr(onnx_export, "quantize_int8", poisoned)
    folder = qdir(home_copy, standins["qwen3"], "int8")
    before = (folder / "model.onnx").read_bytes()
    with pytest.raises(ModelError, match="computes non-finite values") as info:
        export_model(qwen3_spec(), standins["qwen3"], home_copy, ["int8"], force=True)
    assert "exclude_ops" in info.value.hint
    assert (folder / "model.onnx").read_bytes() == before


KILLED_EXPORT = """
import os, pickle, signal, sys
from pathlib import Path
import puremind.export.onnx_export as onnx_export
from puremind.export import export_model

spec, source, home = pickle.loads(Path(sys.argv[1]).read_bytes())

def dies_midway(src, dst, method, exclude_ops=()):
    Path(dst).write_bytes(b"half a model")
    os.kill(os.getpid(), signal.SIGKILL)

onnx_export.quantize_int8 = dies_midway
export_model(spec, source, Path(home), ["int8"], force=True, progress=lambda _: None)
"""


def test_a_killed_export_leaves_no_half_model_and_the_next_export_cleans_up(home_copy, standins, tmp_path):
    source = standins["qwen3"]
    shutil.rmtree(qdir(home_copy, source, "int8"))
    args = tmp_path / "args.pickle"
    args.write_bytes(pickle.dumps((qwen3_spec(), source, str(home_copy))))
    proc = subprocess.run([sys.executable, "-c", KILLED_EXPORT, str(args)], cwd=ROOT, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    parent = qdir(home_copy, source, "int8").parent
    leftovers = [p.name for p in parent.iterdir() if p.name.startswith(".partial-")]
    assert leftovers  # the dead process's work folder, never renamed into place
    assert artefacts.list_variants(home_copy, "tiny-qwen3", source.revision) == ["fp16", "fp32"]
    lines: list[str] = []
    export_model(qwen3_spec(), source, home_copy, ["int8"], progress=lines.append)
    assert any("removed" in line and "unfinished" in line for line in lines)
    assert not [p for p in parent.iterdir() if p.name.startswith(".partial-")]
    artefacts.read_artefact(qdir(home_copy, source, "int8"))


def test_a_second_exporter_waits_for_the_first(tmp_path):
    parent = artefacts.model_dir(tmp_path, "m", "rev123")
    parent.mkdir(parents=True)
    fd = os.open(parent / ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another exporter (flock is per open file, so this fd counts as one)
    waited: list[str] = []
    entered = threading.Event()

    def second() -> None:
        with artefacts.model_lock(parent, on_wait=waited.append):
            entered.set()

    thread = threading.Thread(target=second)
    thread.start()
    deadline = time.monotonic() + 10
    while not waited and time.monotonic() < deadline:
        time.sleep(0.01)
    assert waited == ["waiting for another export of m@rev123 to finish"] and not entered.is_set()
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    assert entered.wait(10)
    thread.join(10)


def test_the_export_lock_is_reentrant_within_one_process(tmp_path):
    parent = tmp_path / "m@rev"
    with artefacts.model_lock(parent):
        with artefacts.model_lock(parent):
            pass
        assert str(parent.resolve()) in artefacts._held
    assert str(parent.resolve()) not in artefacts._held


@pytest.mark.parametrize("key, revision", [("../x", "abc"), (".hidden", "abc"), ("m", "a/b"), ("", "abc")])
def test_unsafe_names_cannot_make_an_artefact_path(tmp_path, key, revision):
    with pytest.raises(ModelError, match="cannot name a model folder"):
        artefacts.artefact_dir(tmp_path, key, revision, "fp32")


# -- CoreML -------------------------------------------------------------------------------------------


def test_qwen3_coreml_wrapper_matches_the_model_under_left_padding(standins):
    import torch
    from transformers import AutoModel

    from puremind.export.coreml_export import build_wrapper

    path = standins["qwen3"].path
    wrapper = build_wrapper(qwen3_spec(), path)
    model = AutoModel.from_pretrained(str(path)).eval()
    ids = torch.tensor([[0, 0, 0, 11, 12, 13, 14], [21, 22, 23, 24, 25, 26, 27]])
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        batched = wrapper(ids, mask)
        alone = model(input_ids=ids[:1, 3:]).last_hidden_state
        full = model(input_ids=ids[1:]).last_hidden_state
    assert torch.allclose(batched[0, 3:], alone[0], atol=1e-5)
    assert torch.allclose(batched[1], full[0], atol=1e-5)


def _check_coreml(folder: Path, output: str, max_seq: int) -> None:
    import coremltools as ct

    meta = artefacts.read_artefact(folder)
    assert meta["variant"] == "coreml" and meta["model_file"] == "model.mlpackage"
    assert meta["inputs"] == ["input_ids", "attention_mask"] and meta["outputs"] == [output]
    assert meta["max_tokens"] == max_seq and meta["coreml"]["max_seq"] == max_seq
    assert any(rel.startswith("model.mlpackage/") for rel in meta["files"])
    spec = ct.models.MLModel(str(folder / "model.mlpackage"), skip_model_load=True).get_spec()
    assert spec.WhichOneof("Type") == "mlProgram"
    shape = spec.description.input[0].type.multiArrayType.shapeRange.sizeRanges
    assert [(r.lowerBound, r.upperBound) for r in shape] == [(1, 64), (2, max_seq)]


@slow
def test_coreml_package_of_the_tiny_reranker(standins, tmp_path):
    lines: list[str] = []
    folder = export_coreml(reranker_spec(), standins["reranker"], tmp_path, progress=lines.append)
    _check_coreml(folder, "logits", 512)  # 514 positions minus the two RoBERTa skips
    assert any("converting with coremltools" in line for line in lines)
    assert export_coreml(reranker_spec(), standins["reranker"], tmp_path, progress=lines.append) == folder
    assert "already exported and verified" in lines[-1]


@slow
def test_coreml_package_of_the_tiny_qwen3_through_export_model(standins, tmp_path):
    out = export_model(qwen3_spec(max_tokens=256), standins["qwen3"], tmp_path, ["coreml"], progress=lambda _: None)
    _check_coreml(out["coreml"], "last_hidden_state", 256)
    assert artefacts.list_variants(tmp_path, "tiny-qwen3", standins["qwen3"].revision) == ["coreml"]


def test_a_failing_coreml_conversion_is_one_model_error_and_leaves_nothing(standins, tmp_path, monkeypatch):
    from puremind.export import coreml_export

    def broken(*args, **kwargs):
        raise RuntimeError("op 'new_ones' not implemented\nlong traceback text")

    monkeypatch.setattr(coreml_export, "convert", broken)
    with pytest.raises(ModelError, match=r"converting tiny-reranker to CoreML failed: RuntimeError: op 'new_ones' "
                                         r"not implemented$"):
        export_coreml(reranker_spec(), standins["reranker"], tmp_path, progress=lambda _: None)
    assert artefacts.list_variants(tmp_path, "tiny-reranker", standins["reranker"].revision) == []
