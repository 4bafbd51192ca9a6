"""Settings: every setting of the spec, its environment variable, and flags > env > file > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from puremind.config import (
    DEFAULT_EMBEDDER_REVISION,
    DEFAULT_RERANKER_REVISION,
    load_settings,
    read_config_file,
    render_config,
    write_config,
)
from puremind.errors import ConfigError


def test_defaults_match_the_spec(puremind_home, monkeypatch):
    monkeypatch.delenv("PUREMIND_EMBED_MODEL")
    s = load_settings()
    assert s.db == puremind_home / "index.sqlite"
    assert (s.embedder, s.embedder_revision) == ("Qwen/Qwen3-Embedding-0.6B", DEFAULT_EMBEDDER_REVISION)
    assert (s.reranker, s.reranker_revision) == ("BAAI/bge-reranker-v2-m3", DEFAULT_RERANKER_REVISION)
    assert (s.device, s.embed_max_seq, s.candidates, s.rrf_k, s.rerank, s.rerank_chars) == ("auto", 2048, 50, 60, True, 800)
    assert s.vault is None


@pytest.mark.parametrize(
    "var, field, raw, expected",
    [
        ("PUREMIND_VAULT", "vault", "/tmp/v", Path("/tmp/v")),
        ("PUREMIND_DB", "db", "/tmp/x.sqlite", Path("/tmp/x.sqlite")),
        ("PUREMIND_EMBED_MODEL", "embedder", "./my-model", "./my-model"),
        ("PUREMIND_EMBED_REVISION", "embedder_revision", "abc123", "abc123"),
        ("PUREMIND_RERANK_MODEL", "reranker", "BAAI/bge-reranker-base", "BAAI/bge-reranker-base"),
        ("PUREMIND_RERANK_REVISION", "reranker_revision", "def456", "def456"),
        ("PUREMIND_DEVICE", "device", "CPU", "cpu"),
    ],
)
def test_each_environment_variable_sets_its_setting(monkeypatch, var, field, raw, expected):
    monkeypatch.setenv(var, raw)
    assert getattr(load_settings(), field) == expected


def test_another_model_does_not_inherit_the_pinned_revision(monkeypatch):
    monkeypatch.setenv("PUREMIND_EMBED_MODEL", "sentence-transformers/all-MiniLM-L6-v2")
    assert load_settings().embedder_revision is None


def test_precedence_is_flags_then_environment_then_file_then_defaults(puremind_home, monkeypatch):
    puremind_home.mkdir()
    (puremind_home / "config.toml").write_text(
        'vault = "/from/file"\n[retrieval]\ncandidates = 20\nrrf_k = 30\n[models]\ndevice = "cpu"\n'
    )
    s = load_settings()
    assert (s.vault, s.candidates, s.rrf_k, s.device) == (Path("/from/file"), 20, 30, "cpu")
    monkeypatch.setenv("PUREMIND_VAULT", "/from/env")
    monkeypatch.setenv("PUREMIND_DEVICE", "cuda")
    s = load_settings()
    assert (s.vault, s.device, s.candidates) == (Path("/from/env"), "cuda", 20)
    s = load_settings({"vault": "/from/flag", "rerank": False})
    assert (s.vault, s.rerank, s.device) == (Path("/from/flag"), False, "cuda")


def test_puremind_home_moves_the_config_and_the_default_index(tmp_path, monkeypatch):
    monkeypatch.setenv("PUREMIND_HOME", str(tmp_path / "elsewhere"))
    s = load_settings()
    assert s.config_path == tmp_path / "elsewhere" / "config.toml" and s.db == tmp_path / "elsewhere" / "index.sqlite"


@pytest.mark.parametrize(
    "text, message",
    [
        ("[retrieval]\ncandidates = 0\n", "between 1 and 1000"),
        ("[retrieval]\ncandidates = \"many\"\n", "whole number"),
        ("[retrieval]\nrerank = \"maybe\"\n", "true or false"),
        ("[models]\ndevice = \"tpu\"\n", "must be one of"),
        ("[models]\nembed_max_seq = 8\n", "between 16"),
        ("vault = 3\n", "must be a string"),
        ("[nope]\nx = 1\n", "unknown setting [nope] x"),
    ],
)
def test_bad_values_in_the_config_file_are_named(puremind_home, text, message):
    puremind_home.mkdir()
    (puremind_home / "config.toml").write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_settings()


def test_a_bad_environment_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("PUREMIND_DEVICE", "gpu9000")
    with pytest.raises(ConfigError, match="PUREMIND_DEVICE"):
        load_settings()


def test_rendered_config_reads_back_to_the_same_settings(tmp_path):
    values = {"vault": Path('/tmp/a "quoted" \\ vault'), "candidates": 25, "rerank": False, "embedder": "~/models/x"}
    path = tmp_path / "c.toml"
    path.write_text(render_config(values))
    back = read_config_file(path)
    assert back["vault"] == values["vault"] and back["candidates"] == 25 and back["rerank"] is False
    assert back["embedder"] == "~/models/x", "a model name keeps its ~ so it stays a local-directory marker"


def test_init_force_on_a_broken_file_keeps_it_beside_a_fresh_one(puremind_home, tmp_path):
    puremind_home.mkdir()
    broken = '[retrieval\ncandidates = 3\n'
    (puremind_home / "config.toml").write_text(broken)
    with pytest.raises(ConfigError, match="line 1"):
        load_settings()
    path, moved = write_config(tmp_path, force=True)
    assert moved == puremind_home / "config.toml.broken" and moved.read_text() == broken
    assert load_settings().vault == tmp_path
    (puremind_home / "config.toml").write_text(broken)
    assert write_config(tmp_path, force=True)[1] == puremind_home / "config.toml.broken-1"
