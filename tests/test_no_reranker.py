"""`[models] reranker = "none"`: no reranker model at all, as `embedder = "none"` is for the embedder. It is not a
hub id (nothing named "none" is fetched), it turns reranking off whatever `[retrieval] rerank` says, and the commands
that name models say so instead of failing on it."""

from __future__ import annotations

import json

import pytest

from conftest import write
from puremind import cli
from puremind.config import load_settings
from puremind.services import build_models, retrieval_params


@pytest.fixture
def no_reranker(puremind_home, monkeypatch):
    """The default embedder (never loaded here) with no reranker."""
    monkeypatch.delenv("PUREMIND_EMBED_MODEL")
    monkeypatch.setenv("PUREMIND_RERANK_MODEL", "none")
    puremind_home.mkdir(parents=True, exist_ok=True)
    return puremind_home


@pytest.mark.parametrize("rerank", ["true", '"auto"', "false"])
def test_none_turns_reranking_off_whatever_rerank_says(no_reranker, rerank):
    (no_reranker / "config.toml").write_text(f"[retrieval]\nrerank = {rerank}\n", encoding="utf-8")
    settings = load_settings()
    assert settings.semantic and not settings.has_reranker
    assert settings.rerank is False and retrieval_params(settings).rerank is False
    assert settings.reranker_revision is None  # the default's pin is not carried over to "none"
    models = build_models(settings)
    assert models.has("embedder") and not models.has("reranker")


def test_the_default_reranker_is_still_there(puremind_home, monkeypatch):
    monkeypatch.delenv("PUREMIND_EMBED_MODEL")
    settings = load_settings()
    assert settings.has_reranker and settings.rerank is True
    assert build_models(settings).has("reranker")


def test_none_in_the_config_file_any_case(puremind_home, monkeypatch):
    monkeypatch.delenv("PUREMIND_EMBED_MODEL")
    puremind_home.mkdir(parents=True, exist_ok=True)
    (puremind_home / "config.toml").write_text('[models]\nreranker = "None"\n', encoding="utf-8")
    settings = load_settings()
    assert not settings.has_reranker and settings.rerank is False


def test_export_models_only_reranker_says_there_is_none(no_reranker, capsys):
    assert cli.run(["export-models", "--only", "reranker"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith('error: no reranker is configured ([models] reranker = "none")')
    assert "Traceback" not in out + err and len(err.strip().splitlines()) == 1


def test_export_models_only_embedder_with_embedder_none(puremind_home, capsys):
    assert cli.run(["export-models", "--only", "embedder"]) == 2
    assert capsys.readouterr().err.startswith('error: no embedder is configured ([models] embedder = "none")')


def test_doctor_names_no_reranker_and_looks_nothing_up(no_reranker, tmp_path, capsys, monkeypatch):
    vault = tmp_path / "vault"
    write(vault, "a.md", "# A\n\nsome text\n")
    assert cli.run(["init", str(vault)]) == 0
    capsys.readouterr()
    # the embedder is the pinned default, which is not downloaded here; the reranker must not be looked up at all
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cli.run(["doctor", "--json"])
    found = json.loads(capsys.readouterr().out)["checks"]
    rerankers = [c for c in found if c["section"] == "models" and c["name"] == "reranker"]
    assert len(rerankers) == 1 and rerankers[0]["status"] == "ok"
    assert 'reranker = "none"' in rerankers[0]["message"]
    assert not any("none" in c["message"] and c["status"] == "fail" for c in found)
