"""First contact without the models: what search and index do when a model cannot be had here, with
`embedder = "none"`, and with an index whose vectors were made by another embedder. No model library is needed:
vectors come from FakeEmbedder under fingerprints in the loader's format; nothing can be downloaded (offline)."""

from __future__ import annotations

import importlib.util


import json
import re
from pathlib import Path

import pytest

from conftest import CONFIGURED, FakeEmbedder, meta, searcher_with
from puremind import cli
from puremind.config import DEFAULT_EMBEDDER, DEFAULT_EMBEDDER_REVISION, load_settings
from puremind.errors import FingerprintMismatch, ModelError
from puremind.indexer import IndexLock, index_vault
from puremind.models import ModelsUnavailable
from puremind.fingerprint import same_vectors, vector_identity
from puremind.services import make_searcher, model_choice
from puremind.store import Store

REV = "0123456789abcdef0123456789abcdef01234567"
OTHER_FP = f"acme/other-embedder@{REV}|pool=mean|norm=1|q=e3b0c44298fc|p=e3b0c44298fc|max=256"


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """An empty Hugging Face cache, offline; the index and vault set; every hub fetch recorded."""
    import puremind.models.hub as hub

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PUREMIND_DB", str(tmp_path / "index.sqlite"))
    fetched: list[str] = []
    real = hub.fetch

    def recording(name, *a, **k):
        fetched.append(name)
        return real(name, *a, **k)

    monkeypatch.setattr(hub, "fetch", recording)
    return fetched


def build_index(db: Path, vault: Path, fingerprint: str) -> int:
    """Index `vault` into `db` with a FakeEmbedder carrying `fingerprint`; returns how many vectors it holds."""
    store = Store.open(db)
    try:
        with IndexLock(db):
            index_vault(store, vault, embedder=FakeEmbedder(fingerprint))
        return store.counts()["vectors"]
    finally:
        store.close()


def vectors(db: Path) -> int:
    store = Store.open(db, create=False)
    try:
        return store.counts()["vectors"]
    finally:
        store.close()


# --- embedder = "none" --------------------------------------------------------------------------------------


def test_embedder_none_searches_keywords_without_fetching_or_loading_any_model(capsys, offline, vault, monkeypatch):
    monkeypatch.setenv("PUREMIND_VAULT", str(vault))
    assert run(capsys, "index")[0] == 0
    code, out, err = run(capsys, "search", "grinder espresso", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["mode"] == "hybrid" and data["results"][0]["path"] == "coffee.md"
    assert data["notes"] == [] and "note:" not in err
    assert offline == [], "keyword search alone must not look for the reranker"


def test_embedder_none_on_an_index_with_vectors_says_so_in_the_notes(capsys, offline, vault, tmp_path):
    assert build_index(tmp_path / "index.sqlite", vault, OTHER_FP) > 0
    code, out, err = run(capsys, "search", "grinder", "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert len(notes) == 1 and "keyword search only" in notes[0] and "acme/other-embedder@0123456789ab" in notes[0]
    assert offline == []


def test_index_with_embedder_none_keeps_the_vectors_and_warns(capsys, offline, vault, tmp_path, monkeypatch):
    db = tmp_path / "index.sqlite"
    before = build_index(db, vault, OTHER_FP)
    monkeypatch.setenv("PUREMIND_VAULT", str(vault))
    code, out, err = run(capsys, "index")
    assert code == 0, err
    assert re.search(r'warning: embedder = "none".*vectors of acme/other-embedder', err)
    assert vectors(db) == before and meta(db, "embed_fingerprint") == OTHER_FP


def test_index_rebuild_with_embedder_none_is_refused_and_drops_nothing(capsys, offline, vault, tmp_path, monkeypatch):
    db = tmp_path / "index.sqlite"
    before = build_index(db, vault, OTHER_FP)
    monkeypatch.setenv("PUREMIND_VAULT", str(vault))
    code, out, err = run(capsys, "index", "--rebuild")
    assert code == 2 and err.startswith("error: --rebuild with embedder = \"none\" would drop the vectors of acme/")
    assert "hint: set [models] embedder back to acme/other-embedder" in err
    assert vectors(db) == before


# --- another embedder configured ------------------------------------------------------------------------------


def test_a_changed_embedder_is_refused_before_anything_is_fetched_naming_both_models(
        capsys, offline, vault, tmp_path, monkeypatch):
    build_index(tmp_path / "index.sqlite", vault, OTHER_FP)
    monkeypatch.delenv("PUREMIND_EMBED_MODEL")  # the pinned default, which is not in the (empty) cache
    monkeypatch.setenv("PUREMIND_VAULT", str(vault))
    for args in (("search", "grinder"), ("index",)):
        code, out, err = run(capsys, *args)
        assert code == 2, err
        assert "acme/other-embedder@0123456789ab" in err and f"{DEFAULT_EMBEDDER}@{DEFAULT_EMBEDDER_REVISION[:12]}" in err
        assert "puremind index --rebuild" in err and "not in the Hugging Face cache" not in err
    assert offline == [], "the mismatch must be found before the model is looked for"
    # Another hub model, not pinned: compared by name, so nothing is fetched either.
    monkeypatch.setenv("PUREMIND_EMBED_MODEL", "acme/third-embedder")
    code, out, err = run(capsys, "search", "grinder")
    assert code == 2 and "acme/other-embedder" in err and "acme/third-embedder" in err
    assert offline == []


def test_the_pinned_embedders_index_is_not_refused_by_the_early_check(offline, vault, tmp_path, monkeypatch):
    from puremind.models.loader import configured_fingerprint

    monkeypatch.delenv("PUREMIND_EMBED_MODEL")
    expected = configured_fingerprint(model_choice(load_settings(), "embedder"))
    assert expected is not None and expected.startswith(f"{DEFAULT_EMBEDDER}@{DEFAULT_EMBEDDER_REVISION}|")
    build_index(tmp_path / "index.sqlite", vault, expected)
    # Past the check, the model itself is looked for (and cannot be had: not cached, offline).
    outcome = make_searcher(load_settings(), rerank=False).search("grinder")
    assert outcome.mode == "hybrid" and "semantic search unavailable" in outcome.notes[0]
    # With the [export] extra the model is fetched to be exported; without it, nothing is fetched that could not
    # be exported here.
    can_export = importlib.util.find_spec("optimum") is not None and importlib.util.find_spec("torch") is not None
    assert offline == ([DEFAULT_EMBEDDER] if can_export else []), outcome.notes


# --- precision is not identity --------------------------------------------------------------------------------


def test_a_fingerprint_with_the_onnx_variant_inside_matches_the_same_model_at_any_precision():
    legacy = f"{DEFAULT_EMBEDDER}@{REV}|int8|pool=last_token|norm=1|q=abc|p=def|max=2048"
    current = f"{DEFAULT_EMBEDDER}@{REV}|pool=last_token|norm=1|q=abc|p=def|max=2048"
    assert vector_identity(legacy) == current and same_vectors(legacy, current)
    assert same_vectors(legacy, legacy.replace("|int8|", "|torch-fp32|"))
    assert not same_vectors(legacy, current.replace("max=2048", "max=512"))
    assert not same_vectors(current, current.replace(REV, "f" * 40))
    assert vector_identity("fake-embedder-v1") == "fake-embedder-v1" and not same_vectors(None, "x")


def test_an_index_written_with_the_variant_in_its_fingerprint_is_reused_without_embedding_again(offline, vault, tmp_path):
    db = tmp_path / "index.sqlite"
    legacy = f"{DEFAULT_EMBEDDER}@{REV}|int8|pool=last_token|norm=1|q=abc|p=def|max=2048"
    build_index(db, vault, legacy)
    embedder = FakeEmbedder(vector_identity(legacy))
    embedder.precision = "fp16"
    store = Store.open(db)
    try:
        with IndexLock(db):
            index_vault(store, vault, embedder=embedder)
    finally:
        store.close()
    assert embedder.embedded == [], "the same model at another precision needs no rebuild"
    assert meta(db, "embed_fingerprint") == vector_identity(legacy) and meta(db, "embed_precision") == "fp16"
    settings = load_settings()
    outcome = searcher_with(settings, embedder=embedder, rerank=False).search("grinder espresso")
    assert outcome.mode == "hybrid" and outcome.hits[0].path == "coffee.md"


def test_the_precisions_that_wrote_the_vectors_are_recorded_and_reset_by_a_rebuild(vault, tmp_path):
    from conftest import write

    db = tmp_path / "index.sqlite"
    fp = f"{DEFAULT_EMBEDDER}@{REV}|pool=last_token|norm=1|q=abc|p=def|max=2048"

    def index(precision: str, rebuild: bool = False) -> None:
        embedder = FakeEmbedder(fp)
        embedder.precision = precision
        store = Store.open(db)
        try:
            with IndexLock(db):
                index_vault(store, vault, embedder=embedder, rebuild=rebuild)
        finally:
            store.close()

    index("int8")
    write(vault, "new.md", "# New\n\nA note embedded at another precision.\n")
    index("fp16")
    assert meta(db, "embed_precision") == "int8,fp16"
    index("fp32", rebuild=True)
    assert meta(db, "embed_precision") == "fp32"


# --- a model that cannot be had -------------------------------------------------------------------------------


def test_a_reranker_that_cannot_be_had_leaves_search_hybrid_with_a_note_naming_the_ways_forward(
        offline, vault, tmp_path, monkeypatch):
    from puremind.models.lazy import Models

    monkeypatch.delenv("PUREMIND_EMBED_MODEL")  # semantic search on, so the default reranker is asked for
    embedder = FakeEmbedder()
    build_index(tmp_path / "index.sqlite", vault, embedder.fingerprint)
    calls: list[str] = []

    class Counting(Models):
        def reranker(self):
            calls.append("load")
            return super().reranker()

    searcher = searcher_with(load_settings(), embedder=embedder, reranker=CONFIGURED, models_class=Counting)
    first = searcher.search("grinder espresso")
    assert first.mode == "hybrid" and first.hits[0].path == "coffee.md"
    # One line of at most 160 characters as the terminal shows it, then one hint line (issue 32).
    assert len(first.notes) == 2 and first.notes[0].startswith("reranking skipped: ")
    assert len("note: " + first.notes[0]) <= 160 and first.notes[1].startswith("hint: ")
    assert "--no-rerank" in first.notes[1] and "puremind export-models" in first.notes[1]
    assert "set HF_HUB_OFFLINE=1" not in " ".join(first.notes)
    second = searcher.search("deploy")
    assert second.mode == "hybrid" and second.notes == first.notes
    assert calls == ["load"], "an unavailable reranker is not looked for again at every search"


def test_offline_and_not_cached_is_unavailable_but_a_mistyped_local_folder_is_an_error(offline, monkeypatch):
    from puremind.models.loader import load_embedder, load_reranker
    from puremind.services import model_choice

    monkeypatch.delenv("PUREMIND_EMBED_MODEL")
    with pytest.raises(ModelsUnavailable) as err:
        load_embedder(model_choice(load_settings(), "embedder"))
    hint = err.value.hint or ""
    assert "puremind export-models" in hint and "local model folder" in hint and 'embedder = "none"' in hint
    with pytest.raises(ModelsUnavailable) as err:
        load_reranker(model_choice(load_settings(), "reranker"))
    assert "--no-rerank" in (err.value.hint or "")
    monkeypatch.setenv("PUREMIND_RERANK_MODEL", "./no/such/reranker")
    with pytest.raises(ModelError) as err:
        load_reranker(model_choice(load_settings(), "reranker"))
    assert not isinstance(err.value, ModelsUnavailable)


@pytest.mark.parametrize("case", ["connection", "timeout", "not found"])
def test_a_hub_out_of_reach_makes_a_model_unavailable_and_a_missing_repository_an_error(monkeypatch, tmp_path, case):
    import huggingface_hub
    import huggingface_hub.constants as constants
    from huggingface_hub import errors

    from puremind.models.hub import fetch

    from conftest import hf_http_error, http_failures

    unreachable, timeout = http_failures()
    error = {
        "connection": unreachable("Max retries exceeded"),
        "timeout": timeout("read timed out"),
        "not found": hf_http_error(errors.RepositoryNotFoundError, "404 Repository Not Found"),
    }[case]
    real = huggingface_hub.snapshot_download

    def download(repo_id, *, local_files_only=False, **kw):
        if local_files_only:
            return real(repo_id, local_files_only=True, **kw)
        raise error

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    with pytest.raises(ModelError) as err:
        fetch("org/tiny", None, None, progress=lambda m: None)
    assert isinstance(err.value, ModelsUnavailable) == (case != "not found")
    assert "HF_HUB_OFFLINE=1" not in (err.value.hint or "")


def test_search_refuses_the_other_embedders_vectors_even_when_it_is_handed_in(offline, vault, tmp_path):
    build_index(tmp_path / "index.sqlite", vault, OTHER_FP)
    with pytest.raises(FingerprintMismatch) as err:
        searcher_with(load_settings(), embedder=FakeEmbedder(), rerank=False).search("grinder")
    assert "acme/other-embedder@0123456789ab" in err.value.message and "fake-embedder-v1" in err.value.message
    assert "--lexical-only" in (err.value.hint or "")


def test_the_mcp_search_tool_answers_without_a_reranker_that_cannot_be_had(offline, vault, tmp_path, monkeypatch):
    from puremind.server import PuremindTools, SearchArgs

    monkeypatch.delenv("PUREMIND_EMBED_MODEL")
    monkeypatch.setenv("PUREMIND_VAULT", str(vault))
    embedder = FakeEmbedder()
    build_index(tmp_path / "index.sqlite", vault, embedder.fingerprint)
    settings = load_settings()
    tools = PuremindTools(settings, searcher_with(settings, embedder=embedder, reranker=CONFIGURED))
    result, text = tools.search(SearchArgs(query="grinder espresso", limit=3))
    assert result.mode == "hybrid" and result.results[0].path == "coffee.md"
    assert len(result.notes) == 2 and "reranking skipped" in result.notes[0] and "--no-rerank" in result.notes[1]
    assert result.notes[1].startswith("hint: ")


# --- issue 32: no dead end before the models are there ------------------------------------------------------


def test_a_model_that_cannot_be_had_leaves_a_keyword_index_and_the_next_run_only_embeds(
        capsys, offline, vault, tmp_path, monkeypatch):
    """A fresh home offline with the pinned models: `index` exits 2 with the error after indexing every note by
    keyword; `search` answers by keyword with one short note and one hint per model; once a model can be had,
    `index` embeds what is missing and reads no note again (no config edit)."""
    monkeypatch.delenv("PUREMIND_EMBED_MODEL")  # the pinned models, which cannot be had here
    monkeypatch.setenv("PUREMIND_VAULT", str(vault))
    notes = len(list(vault.rglob("*.md")))
    code, out, err = run(capsys, "index")
    assert code == 2
    assert f"{notes} added" in out and "passages still to embed" in out
    error = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and f"all {notes} notes are searchable by keyword meanwhile" in error[0]
    assert vectors(tmp_path / "index.sqlite") == 0

    code, out, err = run(capsys, "search", "grinder")
    assert code == 0 and "espresso" in out
    assert "run `puremind index`" not in err
    said = [line for line in err.splitlines() if line.startswith(("note:", "hint:"))]
    assert [line.split(":")[0] for line in said] == ["note", "hint", "note", "hint"], said
    assert all(len(line) <= 160 for line in said), said

    # The model can be had now: only the embedding is done.
    model = FakeEmbedder()
    import puremind.models.lazy as lazy

    monkeypatch.setattr(lazy, "load_embedder", lambda choice, **_: model)
    code, out, err = run(capsys, "index")
    assert code == 0, err
    assert f"0 added, 0 changed, 0 removed, {notes} unchanged" in out
    assert vectors(tmp_path / "index.sqlite") == len(model.embedded) > 0
