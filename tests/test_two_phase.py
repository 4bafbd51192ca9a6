"""Issue 32: every index run in two phases. The keyword index first (no model involved), then the chunks that
have no vector are embedded, in committed batches: a run stopped or killed in either phase keeps what it did, the
next one does only what is left, and a model that cannot be had leaves every note searchable by keyword."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder, write

from puremind import indexer
from puremind.errors import ModelError
from puremind.indexer import EMBEDDING, READING, index_vault
from puremind.models import ModelsUnavailable
from puremind.store import Store


def many_notes(root: Path, n: int, words: int = 40) -> Path:
    for i in range(n):
        body = " ".join(f"w{(i * 7 + j) % 97}" for j in range(words))
        write(root, f"folder{i % 5}/note{i:03}.md", f"# Note {i}\n\nunique{i} {body}\n\n## Part\n\nsecond part {i}\n")
    return root


def lexical_paths(store: Store, word: str) -> list[str]:
    from puremind.retrieval.lexical import fts_match_expression

    return sorted({h.path for h in store.search_lexical(fts_match_expression(word), 50)})


def snapshot(store: Store) -> dict[tuple[str, int], tuple[str, bytes | None]]:
    """Every chunk as (path, ord) -> (text, vector bytes): what a fresh rebuild must equal."""
    rows = store._db.execute(  # noqa: SLF001 - a test reads the table it checks
        "SELECT f.path, c.ord, c.text, c.vector FROM chunks c JOIN files f ON f.id = c.file_id"
    ).fetchall()
    return {(p, o): (t, v) for p, o, t, v in rows}


def test_the_model_is_loaded_after_the_keyword_index_and_a_missing_one_leaves_it_searchable(tmp_path):
    vault = many_notes(tmp_path / "vault", 12)
    store = Store.open(tmp_path / "idx.sqlite")
    phases: list[str] = []

    def unavailable():
        phases.append("load")
        raise ModelsUnavailable("Qwen/Qwen3-Embedding-0.6B is not exported for ONNX Runtime yet (int8)",
                                hint="run `puremind export-models`")

    with pytest.raises(ModelsUnavailable) as info:
        index_vault(store, vault, load_embedder=unavailable,
                    progress=lambda phase, *_: phases.append(phase) if phase not in phases else None)
    assert phases == [READING, "load"], "the model is asked for only once every note is read"
    assert "all 12 notes are searchable by keyword" in info.value.message
    report = info.value.report
    assert report.added == 12 and report.chunks_left == store.counts()["chunks"] > 0
    assert lexical_paths(store, "unique7") == ["folder2/note007.md"]
    assert store.counts()["vectors"] == 0

    # The next run that can load the model embeds what is missing, and reads no note again.
    model = FakeEmbedder()
    report = index_vault(store, vault, load_embedder=lambda: model)
    assert (report.added, report.changed, report.unchanged) == (0, 0, 12)
    chunks = store.counts()["chunks"]
    assert report.chunks_embedded == chunks == store.counts()["vectors"] == len(model.embedded)
    assert report.chunks_left == 0
    assert store.embed_fingerprint() == model.fingerprint
    # Nothing is missing any more: the model is not even loaded.
    report = index_vault(store, vault, load_embedder=lambda: pytest.fail("the model was loaded for nothing"))
    assert report.chunks_embedded == 0
    store.close()


def test_a_rebuild_loads_the_model_first_so_a_missing_one_changes_nothing(tmp_path):
    vault = many_notes(tmp_path / "vault", 6)
    store = Store.open(tmp_path / "idx.sqlite")
    model = FakeEmbedder()
    index_vault(store, vault, embedder=model)
    before = snapshot(store)

    def broken():
        raise ModelError("model 'Qwen/Qwen3-Embeding-0.6B' not found")

    with pytest.raises(ModelError):
        index_vault(store, vault, load_embedder=broken, rebuild=True)
    assert snapshot(store) == before
    store.close()


def test_phase_two_stops_when_asked_and_the_next_run_embeds_only_what_is_left(tmp_path):
    vault = many_notes(tmp_path / "vault", 30)
    store = Store.open(tmp_path / "idx.sqlite")
    model = FakeEmbedder()
    calls = {"n": 0}

    def keep_going() -> bool:
        calls["n"] += 1
        return calls["n"] <= 2  # two embedding calls, then a saved note needs the run

    report = index_vault(store, vault, embedder=model, keep_embedding=keep_going, embed_seconds=0)
    chunks, vectors = store.counts()["chunks"], store.counts()["vectors"]
    assert 0 < vectors < chunks and report.chunks_left == chunks - vectors
    assert report.chunks_embedded == vectors == len(model.embedded)
    assert "passages still to embed" in report.summary()
    model.embedded.clear()
    report = index_vault(store, vault, embedder=model)
    assert report.chunks_embedded == chunks - vectors == len(model.embedded), "no chunk is embedded twice"
    assert store.counts()["vectors"] == chunks
    store.close()


def test_identical_text_is_embedded_once_and_kept_vectors_are_reused(tmp_path):
    vault = tmp_path / "vault"
    for i in range(4):
        write(vault, f"copy{i}.md", "# Same\n\nexactly the same words in every copy\n")
    store = Store.open(tmp_path / "idx.sqlite")
    model = FakeEmbedder()
    index_vault(store, vault, embedder=model)
    assert store.counts()["vectors"] == store.counts()["chunks"] == 4
    assert len(model.embedded) == 1
    store.close()


def test_a_vector_is_never_written_to_a_chunk_whose_text_changed(tmp_path):
    vault = many_notes(tmp_path / "vault", 3)
    store = Store.open(tmp_path / "idx.sqlite")
    index_vault(store, vault)  # keyword only
    listed = store.chunks_missing_vectors()
    first_id, first_sha = listed[0]
    # The note changes after phase two listed its chunks: its chunks are replaced.
    write(vault, "folder0/note000.md", "# Note 0\n\nentirely new text\n")
    index_vault(store, vault)
    vec = np.ones(8, dtype=np.float32)
    with store.batch():
        assert store.set_vectors([(first_id, first_sha, vec)]) == 0
    assert store.counts()["vectors"] == 0
    store.close()


def test_embedding_progress_counts_chunks_after_reading_counts_notes(tmp_path):
    vault = many_notes(tmp_path / "vault", 10)
    store = Store.open(tmp_path / "idx.sqlite")
    seen: list[tuple[str, int, int]] = []
    index_vault(store, vault, embedder=FakeEmbedder(), progress=lambda p, d, t, n: seen.append((p, d, t)))
    reading = [s for s in seen if s[0] == READING]
    embedding = [s for s in seen if s[0] == EMBEDDING]
    assert reading[-1][1:] == (10, 10)
    assert seen.index(embedding[0]) > seen.index(reading[-1]), "phase two starts after phase one"
    assert embedding[-1][1] == embedding[-1][2] == store.counts()["chunks"]
    store.close()


def test_a_search_during_phase_two_uses_the_vectors_so_far_and_says_how_much_meaning_search_covers(tmp_path,
                                                                                                  monkeypatch):
    from puremind.config import load_settings
    from puremind.services import run_search

    home = Path(os.environ["PUREMIND_HOME"])
    vault = many_notes(tmp_path / "vault", 20)
    store = Store.open(home / "index.sqlite")
    calls = {"n": 0}

    def keep_going() -> bool:
        calls["n"] += 1
        return calls["n"] <= 1

    model = FakeEmbedder()
    index_vault(store, vault, embedder=model, keep_embedding=keep_going, embed_seconds=0)
    covered, notes = store.vector_coverage()
    assert 0 < covered < notes == 20
    store.close()
    monkeypatch.setenv("PUREMIND_DB", str(home / "index.sqlite"))
    settings = load_settings({"vault": vault, "rerank": False})
    from puremind.models.lazy import Models

    result = run_search(settings, "unique3 second part", models=Models.given(model))
    assert result.results
    assert any(f"meaning search covers {covered} of 20 notes" in n for n in result.notes), result.notes


KILLER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from pathlib import Path
    from conftest import FakeEmbedder
    from puremind.indexer import index_vault
    from puremind.store import Store

    class Slow(FakeEmbedder):
        def embed(self, texts, is_query=False):
            time.sleep(0.002 * len(texts))
            return super().embed(texts, is_query)

    model = Slow()
    store = Store.open(Path({db!r}))
    def progress(phase, done, total, name):
        if phase == "embedding":
            print(done, flush=True)
    index_vault(store, Path({vault!r}), embedder=model, progress=progress, embed_seconds=0.02)
    print("finished", flush=True)
""")


def test_a_run_killed_in_phase_two_resumes_without_embedding_a_chunk_twice_and_equals_a_fresh_rebuild(tmp_path):
    vault = many_notes(tmp_path / "vault", 40)
    db = tmp_path / "idx.sqlite"
    script = KILLER.format(tests=str(Path(__file__).parent), db=str(db), vault=str(vault))
    rng = np.random.default_rng(32)
    for kill_after in rng.integers(1, 6, size=3):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        lines = 0
        for line in proc.stdout:  # each line is a committed embedding call: kill -9 after some of them
            lines += 1
            if line.strip() == "finished" or lines >= kill_after:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
    store = Store.open(db)
    before = store.counts()
    model = FakeEmbedder()
    report = index_vault(store, vault, embedder=model)
    assert report.chunks_embedded == len(model.embedded) == before["chunks"] - before["vectors"]
    assert store.counts()["vectors"] == store.counts()["chunks"]
    resumed = snapshot(store)
    store.close()
    fresh = Store.open(tmp_path / "fresh.sqlite")
    index_vault(fresh, vault, embedder=FakeEmbedder())
    assert snapshot(fresh) == resumed
    fresh.close()
