"""The incremental indexer: what is read, embedded, kept and removed, with a deterministic fake embedder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import FakeEmbedder, write
from puremind import indexer
from puremind.errors import FingerprintMismatch, IndexBusyError, ModelError, VaultError
from puremind.indexer import IndexLock, index_vault
from puremind.retrieval.lexical import search_lexical
from puremind.store import Store
from puremind.vault import NoteReadError, WalkResult


@pytest.fixture
def store(tmp_path: Path):
    s = Store.open(tmp_path / "idx" / "index.sqlite")
    yield s
    s.close()


def paths(store: Store, query: str) -> list[str]:
    return [h.path for h in search_lexical(store, query, 50)]


def test_first_run_adds_every_note_and_finds_them(store, vault, fake_embedder):
    report = index_vault(store, vault, embedder=fake_embedder)
    assert (report.added, report.changed, report.removed, report.unchanged) == (3, 0, 0, 0)
    assert paths(store, "grinder") == ["coffee.md"]
    assert store.counts()["vectors"] == store.counts()["chunks"] > 0


def test_unchanged_files_are_not_read_again(store, vault, fake_embedder, monkeypatch):
    index_vault(store, vault, embedder=fake_embedder)
    reads: list[str] = []
    real = indexer.read_note
    monkeypatch.setattr(indexer, "read_note", lambda root, note: reads.append(note.rel) or real(root, note))
    report = index_vault(store, vault, embedder=fake_embedder)
    assert reads == []
    assert report.unchanged == 3 and report.added == report.changed == 0


def test_a_touched_file_with_the_same_content_is_hashed_but_not_embedded(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    os.utime(vault / "coffee.md", ns=(1_000_000_000, 1_000_000_000))
    before = len(fake_embedder.embedded)
    report = index_vault(store, vault, embedder=fake_embedder)
    assert report.unchanged == 3 and report.changed == 0
    assert len(fake_embedder.embedded) == before
    assert store.file_states()["coffee.md"].mtime_ns == 1_000_000_000


def test_an_edited_note_is_replaced_and_its_old_words_are_not_found(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    write(vault, "coffee.md", "# Coffee\n\nNow I brew pour-over with a kettle and a paper filter, no more espresso machine.\n")
    report = index_vault(store, vault, embedder=fake_embedder)
    assert report.changed == 1
    assert paths(store, "grinder") == []
    assert paths(store, "kettle") == ["coffee.md"]


def test_a_deleted_note_is_removed(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    (vault / "journal" / "day.md").unlink()
    report = index_vault(store, vault, embedder=fake_embedder)
    assert report.removed == 1
    assert paths(store, "flaky") == []
    assert "journal/day.md" not in store.file_states()


def test_a_renamed_note_reuses_its_vectors_instead_of_embedding_again(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    (vault / "archive").mkdir()
    os.rename(vault / "projects" / "deploy.md", vault / "archive" / "deploy-old.md")
    before = len(fake_embedder.embedded)
    report = index_vault(store, vault, embedder=fake_embedder)
    assert (report.added, report.removed) == (1, 1)
    assert len(fake_embedder.embedded) == before, "moved text was embedded again"
    assert report.chunks_reused >= 1
    assert paths(store, "rollback production") == ["archive/deploy-old.md"]
    assert store.counts()["vectors"] == store.counts()["chunks"]


def test_a_copied_note_reuses_the_stored_vectors(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    (vault / "copy.md").write_bytes((vault / "coffee.md").read_bytes())
    before = len(fake_embedder.embedded)
    report = index_vault(store, vault, embedder=fake_embedder)
    assert report.added == 1 and len(fake_embedder.embedded) == before
    assert sorted(paths(store, "grinder")) == ["coffee.md", "copy.md"]


def test_rebuild_embeds_every_note_again_and_keeps_the_index_searchable(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    before = len(fake_embedder.embedded)
    report = index_vault(store, vault, embedder=fake_embedder, rebuild=True)
    assert report.changed == 3
    assert len(fake_embedder.embedded) - before == store.counts()["chunks"]
    assert paths(store, "grinder") == ["coffee.md"]


def test_an_empty_looking_vault_removes_nothing_and_says_why(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    for path in list(vault.rglob("*.md")):
        path.unlink()
    report = index_vault(store, vault, embedder=fake_embedder)
    assert report.removed == 0
    assert len(store.file_states()) == 3
    assert any("looks empty" in w for w in report.warnings)


def test_an_unreadable_note_keeps_its_previous_entry(store, vault, fake_embedder, monkeypatch):
    index_vault(store, vault, embedder=fake_embedder)
    write(vault, "coffee.md", "# Coffee\n\nA new text about tea that the run cannot read.\n")
    real = indexer.read_note

    def failing(root, note):
        if note.rel == "coffee.md":
            raise NoteReadError(note.rel, "Permission denied")
        return real(root, note)

    monkeypatch.setattr(indexer, "read_note", failing)
    report = index_vault(store, vault, embedder=fake_embedder)
    assert [rel for rel, _ in report.unreadable] == ["coffee.md"]
    assert paths(store, "grinder") == ["coffee.md"]
    assert any("cannot read coffee.md" in w for w in report.warnings)


def test_notes_below_a_folder_that_cannot_be_listed_are_kept(store, vault, fake_embedder, monkeypatch):
    index_vault(store, vault, embedder=fake_embedder)
    real = indexer.walk_vault

    def walk_without_journal(root):
        result = real(root)
        return WalkResult(
            notes=[n for n in result.notes if not n.rel.startswith("journal/")],
            skipped=result.skipped,
            unlisted=["journal"],
        )

    monkeypatch.setattr(indexer, "walk_vault", walk_without_journal)
    report = index_vault(store, vault, embedder=fake_embedder)
    assert report.removed == 0 and report.kept_unlisted == 1
    assert paths(store, "flaky") == ["journal/day.md"]


def test_a_killed_run_keeps_what_it_committed(tmp_path, fake_embedder):
    vault = tmp_path / "big"
    for i in range(20):
        write(vault, f"n{i:02}.md", f"# Note {i}\n\nword{i} appears only in note {i}.\n")
    db = tmp_path / "idx.sqlite"
    store = Store.open(db)

    def interrupt(phase, done, total, name):
        if phase == "reading" and done == 11:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        index_vault(store, vault, embedder=fake_embedder, progress=interrupt, batch_files=2)
    store.close()
    reader = Store.open(db, create=False)
    kept = reader.file_states()
    reader.close()
    assert len(kept) == 10, "committed batches of two files must survive the interrupt"
    store = Store.open(db)
    report = index_vault(store, vault, embedder=fake_embedder)
    assert (report.added, report.unchanged) == (10, 10)
    store.close()


def test_a_search_during_a_first_long_run_finds_the_notes_done_so_far(tmp_path, fake_embedder):
    vault = tmp_path / "big"
    for i in range(12):
        write(vault, f"n{i:02}.md", f"# Note {i}\n\nshared words and token{i}.\n")
    db = tmp_path / "idx.sqlite"
    store = Store.open(db)
    seen: list[int] = []

    def look(phase, done, total, name):
        if phase == "reading" and done == 9:
            reader = Store.open(db, create=False)
            seen.append(len(search_lexical(reader, "shared", 50)))
            reader.close()

    index_vault(store, vault, embedder=fake_embedder, progress=look, batch_files=4)
    store.close()
    assert seen == [8]


def test_a_changed_embedding_model_stops_the_run_and_changes_nothing(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    write(vault, "new.md", "# New\n\nA note that must not be added by a refused run.\n")
    with pytest.raises(FingerprintMismatch) as info:
        index_vault(store, vault, embedder=FakeEmbedder(fingerprint="other-model"))
    assert "--rebuild" in (info.value.hint or "")
    assert "new.md" not in store.file_states()


def test_rebuild_with_a_model_that_cannot_embed_leaves_the_index_untouched(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    counts = store.counts()

    class Broken(FakeEmbedder):
        def embed(self, texts, is_query=False):
            raise ModelError("model 'Qwen/Qwen3-Embeding-0.6B' not found")

    with pytest.raises(ModelError):
        index_vault(store, vault, embedder=Broken(fingerprint="typo"), rebuild=True)
    assert store.counts() == counts
    assert store.embed_fingerprint() == fake_embedder.fingerprint


def test_rebuild_with_a_new_model_replaces_every_vector(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    new = FakeEmbedder(fingerprint="new-model", dim=32)
    index_vault(store, vault, embedder=new, rebuild=True)
    ids, matrix = store.vectors()
    assert matrix.shape == (store.counts()["chunks"], 32)
    assert store.embed_fingerprint() == "new-model"
    assert new.embedded[0] == indexer.TEST_PASSAGE


def test_an_index_of_another_vault_is_not_wiped_by_accident(store, vault, fake_embedder, tmp_path):
    index_vault(store, vault, embedder=fake_embedder)
    other = tmp_path / "other"
    write(other, "x.md", "# X\n\nsomething else entirely\n")
    with pytest.raises(VaultError, match="built for the vault"):
        index_vault(store, other, embedder=fake_embedder)
    assert len(store.file_states()) == 3
    report = index_vault(store, other, embedder=fake_embedder, rebuild=True)
    assert report.removed == 3 and list(store.file_states()) == ["x.md"]


def test_a_missing_vault_is_an_error(store, tmp_path):
    with pytest.raises(VaultError, match="does not exist"):
        index_vault(store, tmp_path / "nope")


def test_a_second_writer_is_refused_while_the_lock_is_held(tmp_path):
    db = tmp_path / "index.sqlite"
    with IndexLock(db):
        with pytest.raises(IndexBusyError):
            with IndexLock(db):
                pass
    with IndexLock(db):  # released
        pass


def test_keyword_only_indexing_stores_no_vectors_and_a_later_embedder_fills_them(store, vault, fake_embedder):
    index_vault(store, vault, embedder=None)
    assert store.counts()["vectors"] == 0
    assert paths(store, "grinder") == ["coffee.md"]
    report = index_vault(store, vault, embedder=fake_embedder)
    # No note is read again: phase two embeds the stored chunks that lack a vector.
    assert (report.changed, report.unchanged) == (0, 3)
    assert report.chunks_embedded == store.counts()["chunks"] and report.chunks_left == 0
    assert store.counts()["vectors"] == store.counts()["chunks"]


def test_a_changed_chunker_recuts_every_note(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    store_sig = indexer.chunker_signature()
    with store.batch():
        store.set_meta(indexer.META_CHUNKER, "v0;old")
    before = len(fake_embedder.embedded)
    report = index_vault(store, vault, embedder=fake_embedder)
    assert report.changed == 3
    assert len(fake_embedder.embedded) == before, "identical chunk text keeps its vectors"
    assert store.get_meta(indexer.META_CHUNKER) == store_sig


def test_old_text_is_gone_from_the_index_file_and_its_wal_after_an_edit(tmp_path, vault, fake_embedder):
    db = tmp_path / "idx.sqlite"
    write(vault, "secret.md", "# Secret\n\nThe word zanzibarquux must vanish from the index file.\n")
    store = Store.open(db)
    index_vault(store, vault, embedder=fake_embedder)
    write(vault, "secret.md", "# Secret\n\nNothing secret here any more, only ordinary words.\n")
    index_vault(store, vault, embedder=fake_embedder)
    for path in (db, db.with_name(db.name + "-wal")):
        if path.exists():
            assert b"zanzibarquux" not in path.read_bytes(), path
    store.close()


# -- removals held back, kept vectors, an empty vault --------------------------------------------------------


def many_notes(root: Path, n: int) -> None:
    for i in range(n):
        write(root, f"d{i % 4}/note{i:03}.md", f"# Note {i}\n\nnoteword{i} and its own sentence number {i}.\n")


def test_a_vault_swapped_for_one_holding_a_single_note_keeps_the_others_and_says_how_to_confirm(
    store, tmp_path, fake_embedder
):
    vault = tmp_path / "vault"
    many_notes(vault, 40)
    index_vault(store, vault, embedder=fake_embedder)
    os.rename(vault, tmp_path / "vault-real")
    write(vault, "d0/note000.md", "# Note 0\n\nnoteword0 and its own sentence number 0.\n")  # half there
    report = index_vault(store, vault, embedder=fake_embedder)
    assert report.removed == 0 and report.kept_missing == 39
    assert len(store.file_states()) == 40 and paths(store, "noteword39") == ["d3/note039.md"]
    [held] = [w for w in report.warnings if "are missing" in w]
    assert "39 of the 40 indexed notes" in held and "--allow-removals" in held and "39 missing kept" in report.summary()
    # Back in place: nothing to re-add, nothing embedded again.
    os.rename(vault, tmp_path / "vault-half")
    os.rename(tmp_path / "vault-real", vault)
    before = len(fake_embedder.embedded)
    report = index_vault(store, vault, embedder=fake_embedder)
    assert (report.added, report.removed, report.kept_missing) == (0, 0, 0) and not report.warnings
    assert len(fake_embedder.embedded) == before
    # Confirmed: they go.
    os.rename(vault, tmp_path / "vault-real")
    os.rename(tmp_path / "vault-half", vault)
    report = index_vault(store, vault, embedder=fake_embedder, allow_removals=True)
    assert report.removed == 39 and list(store.file_states()) == ["d0/note000.md"]


def test_deleting_a_folder_of_notes_or_most_of_a_small_vault_still_removes_them(store, tmp_path, fake_embedder):
    vault = tmp_path / "vault"
    many_notes(vault, 100)
    index_vault(store, vault, embedder=fake_embedder)
    for path in sorted(vault.rglob("*.md"))[:45]:  # more than 20, less than half
        path.unlink()
    assert index_vault(store, vault, embedder=fake_embedder).removed == 45
    for path in sorted(vault.rglob("*.md"))[:35]:  # more than half of 55, but more than 20 too: held
        path.unlink()
    assert index_vault(store, vault, embedder=fake_embedder).kept_missing == 35
    small = tmp_path / "small"
    many_notes(small, 10)
    other = Store.open(tmp_path / "small.sqlite")
    try:
        index_vault(other, small, embedder=fake_embedder)
        for path in sorted(small.rglob("*.md"))[:9]:  # most of a small vault, but no more than 20 notes
            path.unlink()
        report = index_vault(other, small, embedder=fake_embedder)
        assert report.removed == 9 and not report.warnings
    finally:
        other.close()


def test_a_deleted_note_that_comes_back_is_not_embedded_again(store, vault, fake_embedder):
    index_vault(store, vault, embedder=fake_embedder)
    text = (vault / "projects" / "deploy.md").read_bytes()
    (vault / "projects" / "deploy.md").unlink()
    assert index_vault(store, vault, embedder=fake_embedder).removed == 1
    assert paths(store, "rollback production") == []
    before = len(fake_embedder.embedded)
    (vault / "projects" / "deploy.md").write_bytes(text)
    report = index_vault(store, vault, embedder=fake_embedder)
    assert report.added == 1 and report.chunks_embedded == 0 and report.chunks_reused >= 1
    assert len(fake_embedder.embedded) == before
    assert store.counts()["vectors"] == store.counts()["chunks"]
    assert paths(store, "rollback production") == ["projects/deploy.md"]


def orphan_rows(store: Store) -> list[tuple]:
    return store._db.execute("SELECT text_sha256, fingerprint, removed_at FROM orphan_vectors").fetchall()


def test_kept_vectors_are_for_the_model_that_made_them_and_a_rebuild_or_their_age_drops_them(
    store, vault, fake_embedder, monkeypatch
):
    index_vault(store, vault, embedder=fake_embedder)
    (vault / "coffee.md").unlink()
    index_vault(store, vault, embedder=fake_embedder)
    [(digest, fingerprint, _)] = orphan_rows(store)
    assert fingerprint == fake_embedder.fingerprint
    assert store.vector_for(digest, fingerprint=fake_embedder.fingerprint) is not None
    assert store.vector_for(digest, fingerprint="another-model") is None
    assert store.vector_for(digest) is None  # never without the model's name
    index_vault(store, vault, embedder=fake_embedder, rebuild=True)
    assert orphan_rows(store) == []
    # Older than the kept days: dropped by the next run.
    (vault / "projects" / "deploy.md").unlink()
    index_vault(store, vault, embedder=fake_embedder)
    assert len(orphan_rows(store)) == 1
    real_time = indexer.time.time
    monkeypatch.setattr(indexer.time, "time", lambda: real_time() + (indexer.ORPHAN_VECTOR_DAYS + 1) * 86400)
    index_vault(store, vault, embedder=fake_embedder)
    assert orphan_rows(store) == []


def test_a_deleted_notes_text_is_gone_from_the_index_file_though_its_vectors_are_kept(tmp_path, vault, fake_embedder):
    db = tmp_path / "idx.sqlite"
    write(vault, "secret.md", "# Secret\n\nThe word zanzibarquux must vanish from the index file.\n")
    store = Store.open(db)
    try:
        index_vault(store, vault, embedder=fake_embedder)
        (vault / "secret.md").unlink()
        index_vault(store, vault, embedder=fake_embedder)
        assert len(orphan_rows(store)) == 1
    finally:
        store.close()
    for path in (db, db.with_name(db.name + "-wal")):
        if path.exists():
            assert b"zanzibarquux" not in path.read_bytes(), path


def test_an_empty_vault_says_that_no_markdown_notes_were_found(tmp_path, capsys):
    from puremind import cli

    empty = tmp_path / "empty"
    write(empty, "readme.txt", "not a note")
    write(empty, ".obsidian/hidden.md", "# Hidden\n")
    assert cli.run(["index", str(empty)]) == 0
    err = capsys.readouterr().err
    assert "warning: no Markdown notes were found in the vault" in err and ".markdown" in err
    write(empty, "first.md", "# First\n\nfirst words\n")
    assert cli.run(["index", str(empty)]) == 0
    assert "no Markdown notes" not in capsys.readouterr().err


def test_index_allow_removals_confirms_what_a_run_held_back(tmp_path, capsys):
    from puremind import cli

    vault = tmp_path / "vault"
    many_notes(vault, 30)
    assert cli.run(["index", str(vault)]) == 0
    for path in sorted(vault.rglob("*.md"))[1:]:
        path.unlink()
    capsys.readouterr()
    assert cli.run(["index", str(vault)]) == 0
    captured = capsys.readouterr()
    assert "warning: 29 of the 30 indexed notes are missing" in captured.err and "0 removed" in captured.out
    assert cli.run(["index", str(vault), "--allow-removals"]) == 0
    assert "29 removed" in capsys.readouterr().out
