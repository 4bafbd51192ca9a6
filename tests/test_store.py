"""The SQLite index: files, permissions, migrations, FTS5 consistency, vectors, snapshots, secure deletion."""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from puremind.errors import QueryError, StoreError
from puremind.store import ChunkRow, FileState, Hit, Store
from puremind.store import files as store_files
from puremind.store import schema
from puremind.store import store as store_module

MARKER = "qxzvblorp"  # a word no stemmer changes and no test writes by accident
MARKER_STEM = MARKER[:-1].encode()  # also catches any stemmed or prefix-compressed copy in FTS segments


# -- helpers -----------------------------------------------------------------------------------


def chunk(ord_: int, text: str, heading: tuple[str, ...] = (), vector=None, sha: str | None = None) -> ChunkRow:
    return ChunkRow(
        ord=ord_,
        heading_path=heading,
        text=text,
        start_line=ord_ * 10 + 1,
        end_line=ord_ * 10 + 5,
        kind="section",
        text_sha256=sha or f"sha-{ord_}-{text[:20]}",
        vector=vector,
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "home" / "index.sqlite"


@pytest.fixture
def store(db: Path):
    s = Store.open(db)
    yield s
    s.close()


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def raw(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


def fts_is_consistent(db: Path) -> bool:
    # rank = 1: also compare the FTS index with the external content table.
    conn = raw(db)
    try:
        conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 1)")
        return True
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()


def marker_counts(db: Path) -> dict[str, int]:
    wal = db.with_name(db.name + "-wal")
    return {
        "db": db.read_bytes().count(MARKER_STEM),
        "wal": wal.read_bytes().count(MARKER_STEM) if wal.exists() else 0,
    }


def filler(store: Store, n: int = 30) -> None:
    with store.batch():
        for i in range(n):
            store.put_file(f"filler/{i}.md", f"f{i}", 10, 10, [chunk(0, f"ordinary words about topic{i} " * 40)])


# -- creating, permissions ---------------------------------------------------------------------


def test_a_new_index_is_0600_inside_0700_folders_whatever_the_umask(tmp_path: Path):
    db = tmp_path / "a" / "b" / "index.sqlite"
    old = os.umask(0o000)
    try:
        Store.open(db).close()
    finally:
        os.umask(old)
    assert mode(db) == 0o600
    assert mode(db.parent) == 0o700
    assert mode(db.parent.parent) == 0o700


def test_the_wal_and_shm_files_of_an_open_index_are_0600(db: Path):
    old = os.umask(0o022)
    try:
        s = Store.open(db)
        filler(s, 2)
        for suffix in ("-wal", "-shm"):
            assert mode(db.with_name(db.name + suffix)) == 0o600
        s.close()
    finally:
        os.umask(old)


def test_an_index_left_more_open_is_tightened_with_its_wal_and_shm_but_not_a_folder_it_did_not_make(db: Path):
    keeper = Store.open(db)  # keeps the -wal and -shm files in existence
    filler(keeper, 2)
    side = [db.with_name(db.name + s) for s in ("-wal", "-shm")]
    for path in [db, *side]:
        os.chmod(path, 0o644)
    os.chmod(db.parent, 0o755)

    Store.open(db).close()

    assert mode(db.parent) == 0o755  # the user's folder (PUREMIND_DB): warned about by `index`, not closed
    assert store_files.open_folder_warning(db) is not None
    assert mode(db) == 0o600
    for path in side:
        assert mode(path) == 0o600
    keeper.close()


def test_a_shared_sticky_folder_like_tmp_is_not_closed(tmp_path: Path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    Store.open(shared / "index.sqlite").close()
    assert mode(shared) == 0o1777
    assert mode(shared / "index.sqlite") == 0o600


def test_the_home_folder_is_not_closed_when_the_index_sits_directly_in_it(tmp_path: Path, monkeypatch):
    home = tmp_path / "user"
    home.mkdir()
    os.chmod(home, 0o755)
    monkeypatch.setenv("HOME", str(home))
    Store.open(home / "index.sqlite").close()
    assert mode(home) == 0o755


# -- opening errors ----------------------------------------------------------------------------


def test_opening_a_missing_index_without_create_says_no_index_and_creates_nothing(tmp_path: Path):
    db = tmp_path / "nothing" / "index.sqlite"
    with pytest.raises(StoreError) as info:
        Store.open(db, create=False)
    assert info.value.message == f"no index at {db}"
    assert "puremind index" in info.value.hint
    assert not db.parent.exists()


def test_a_file_of_random_bytes_is_reported_as_not_an_index(db: Path):
    db.parent.mkdir(parents=True)
    db.write_bytes(os.urandom(8192))
    with pytest.raises(StoreError) as info:
        Store.open(db)
    assert str(db) in info.value.message
    assert "not an SQLite database" in info.value.message
    assert "\n" not in info.value.message
    assert info.value.hint


def test_a_damaged_index_is_a_store_error_naming_the_file(db: Path, store: Store):
    filler(store, 40)
    store.close()  # closing the last connection checkpoints everything into the file
    data = bytearray(db.read_bytes())
    data[4096:] = os.urandom(len(data) - 4096)  # keep the header, ruin every page after the first
    db.write_bytes(bytes(data))
    with pytest.raises(StoreError) as info:
        with Store.open(db) as s:
            s.search_lexical("ordinary", 5)
            s.vectors()
    assert str(db) in info.value.message
    assert "\n" not in info.value.message


def test_another_programs_sqlite_database_is_refused_and_left_untouched(db: Path):
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE contacts (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError) as info:
        Store.open(db)
    assert "not a pureMind index" in info.value.message
    conn = sqlite3.connect(db)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert names == {"contacts"}


def test_a_folder_where_the_index_file_should_be_is_a_store_error(db: Path):
    db.mkdir(parents=True)
    for create in (True, False):
        with pytest.raises(StoreError) as info:
            Store.open(db, create=create)
        assert str(db) in info.value.message
        assert "\n" not in info.value.message


def test_a_file_where_the_index_folder_should_be_is_a_store_error(tmp_path: Path):
    (tmp_path / "blocker").write_text("x")
    with pytest.raises(StoreError) as info:
        Store.open(tmp_path / "blocker" / "index.sqlite")
    assert "blocker" in info.value.message


def test_a_read_only_filesystem_becomes_a_one_line_store_error_naming_the_file(db: Path, monkeypatch):
    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(store_files.os, "open", read_only)
    with pytest.raises(StoreError) as info:
        Store.open(db)
    assert str(db) in info.value.message
    assert "read-only filesystem" in info.value.message
    assert "\n" not in info.value.message


def test_writing_a_read_only_index_is_a_store_error_and_changes_nothing(store: Store):
    store._db.execute("PRAGMA query_only = ON")  # what SQLite reports on a read-only file
    with pytest.raises(StoreError) as info:
        with store.batch():
            store.put_file("a.md", "s", 1, 1, [chunk(0, "text")])
    assert "read-only" in info.value.message
    assert str(store.path) in info.value.message
    store._db.execute("PRAGMA query_only = OFF")
    assert store.counts()["files"] == 0


def test_a_full_disk_during_a_batch_is_a_store_error_and_rolls_the_batch_back(store: Store):
    filler(store, 3)
    before = store.counts()
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite answers SQLITE_FULL, as on a full disk
    with pytest.raises(StoreError) as info:
        with store.batch():
            store.put_file("big.md", "s", 1, 1, [chunk(i, f"long text {i} " * 500) for i in range(20)])
    assert "disk is full" in info.value.message
    assert str(store.path) in info.value.message
    assert store.counts() == before
    store._db.execute("PRAGMA max_page_count = 1073741823")
    with store.batch():
        store.put_file("small.md", "s", 1, 1, [chunk(0, "fits now")])
    assert store.counts()["files"] == before["files"] + 1


def test_a_batch_that_cannot_get_the_write_lock_is_a_busy_store_error(db: Path, monkeypatch):
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_MS", 100)
    s = Store.open(db)
    other = raw(db)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError) as info:
            with s.batch():
                pass
        assert "busy" in info.value.message
    finally:
        other.execute("ROLLBACK")
        other.close()
        s.close()


# -- migrations --------------------------------------------------------------------------------


def test_migrations_are_recorded_once_and_reopening_applies_nothing_new(db: Path):
    Store.open(db).close()
    conn = raw(db)
    first = conn.execute("SELECT version, applied_at FROM schema_migrations").fetchall()
    conn.close()
    assert [v for v, _ in first] == [m.version for m in schema.MIGRATIONS]

    Store.open(db).close()
    Store.open(db, create=False).close()
    conn = raw(db)
    again = conn.execute("SELECT version, applied_at FROM schema_migrations").fetchall()
    conn.close()
    assert again == first


def test_an_older_index_is_upgraded_by_the_pending_migration_only(db: Path):
    Store.open(db).close()
    newer = schema.MIGRATIONS + (
        schema.Migration(schema.LATEST_VERSION + 1, "test column", ("ALTER TABLE files ADD COLUMN extra TEXT",)),
    )
    conn = raw(db)
    assert schema.migrate(conn, newer) == [schema.LATEST_VERSION + 1]
    assert schema.migrate(conn, newer) == []
    assert "extra" in {r[1] for r in conn.execute("PRAGMA table_info(files)")}
    conn.close()


def _undo_path_keys(conn) -> None:
    """Take an index back to before migration 8 (files.path_key, files.target, files.target_key)."""
    conn.execute("DELETE FROM schema_migrations WHERE version >= 8")
    for column in ("path_key", "target", "target_key"):
        conn.execute(f"ALTER TABLE files DROP COLUMN {column}")


def _undo_private_columns(conn) -> None:
    """Take an index back to before migration 7 (files.private_mark, files.private); migration 8 came later."""
    _undo_path_keys(conn)
    conn.execute("DROP INDEX files_private")
    conn.execute("ALTER TABLE files DROP COLUMN private")
    conn.execute("ALTER TABLE files DROP COLUMN private_mark")


def test_an_index_from_before_private_notes_gets_every_note_public_until_the_next_run(db: Path):
    s = Store.open(db)
    with s.batch():
        s.put_file("diary.md", "h1", 1, 0, [chunk(0, "secret words")], private_mark=True)
    s.close()
    conn = raw(db)
    conn.execute("DELETE FROM schema_migrations WHERE version = 7")
    _undo_private_columns(conn)
    conn.close()
    with Store.open(db, create=False, hide_private=True) as s:  # opening upgrades it
        assert [h.path for h in s.search_lexical('"secret"', 5)] == ["diary.md"]
        assert not s.is_private("diary.md")
    with Store.open(db) as s:
        with s.batch():
            s.put_file("diary.md", "h1", 1, 0, [chunk(0, "secret words")], private_mark=True)
    with Store.open(db, create=False, hide_private=True) as s:
        assert s.search_lexical('"secret"', 5) == [] and s.is_private("diary.md")


def test_an_index_from_before_thai_matching_gets_its_thai_runs_as_characters_and_pairs(db: Path):
    thai = "ร้านกาแฟใกล้สถานีรถไฟ"
    s = Store.open(db)
    with s.batch():
        s.put_file("thai.md", "h1", 1, 0, [chunk(0, f"{thai} เปิดทุกวัน")])
        s.put_file("english.md", "h2", 1, 0, [chunk(0, "plain English only")])
    s.close()
    # The index as the code before migration 6 left it: Thai runs were not in cjk_text.
    conn = raw(db)
    conn.execute("UPDATE chunks SET cjk_text = ''")
    conn.execute("DELETE FROM schema_migrations WHERE version >= 6")
    _undo_private_columns(conn)  # migration 7 came later
    assert conn.execute("SELECT count(*) FROM chunks_cjk WHERE chunks_cjk MATCH '\"สถ\"'").fetchone() == (0,)
    conn.close()
    with Store.open(db, create=False) as s:  # opening upgrades it
        assert [h.path for h in s.search_cjk('"สถ" OR "ถา"', 5)] == ["thai.md"]
    conn = raw(db)
    assert conn.execute("SELECT cjk_text FROM chunks JOIN files f ON f.id = file_id WHERE f.path = 'english.md'"
                        ).fetchone() == ("",)
    conn.close()


def test_a_failing_migration_leaves_no_trace(db: Path):
    Store.open(db).close()
    broken = schema.MIGRATIONS + (
        schema.Migration(
            schema.LATEST_VERSION + 1,
            "half done",
            ("CREATE TABLE half (x)", "THIS IS NOT SQL"),
        ),
    )
    conn = raw(db)
    with pytest.raises(sqlite3.Error):
        schema.migrate(conn, broken)
    assert schema.current_version(conn) == schema.LATEST_VERSION
    assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'half'").fetchone() is None
    conn.close()


def test_an_index_from_a_newer_pureMind_is_refused(db: Path):
    Store.open(db).close()
    conn = raw(db)
    conn.execute("INSERT INTO schema_migrations VALUES (?, ?)", (schema.LATEST_VERSION + 5, time.time()))
    conn.close()
    with pytest.raises(StoreError) as info:
        Store.open(db)
    assert "newer pureMind" in info.value.message
    assert str(db) in info.value.message


def test_several_processes_opening_a_new_index_at_once_migrate_it_once(db: Path):
    errors: list[BaseException] = []

    def opener():
        try:
            Store.open(db).close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    conn = raw(db)
    assert schema.applied_versions(conn) == [m.version for m in schema.MIGRATIONS]
    conn.close()



def _open_each(paths: list[str], results) -> None:
    failures = []
    for p in paths:
        try:
            Store.open(Path(p)).close()
        except Exception as exc:  # reported by the test
            failures.append(f"{p}: {exc}")
    results.put(failures)


def test_six_processes_opening_150_new_indexes_at_once_always_succeed(tmp_path: Path):
    # Before the open retried its setup, 6 processes over 300 new indexes failed some 18 opens with "busy": two
    # connections both wanting the write lock on a file still in rollback-journal mode get SQLITE_BUSY at once.
    import multiprocessing

    paths = [str(tmp_path / f"i{n}" / "index.db") for n in range(150)]
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_open_each, args=(paths, results)) for _ in range(6)]
    for proc in procs:
        proc.start()
    failures = [line for _ in procs for line in results.get(timeout=120)]
    for proc in procs:
        proc.join(timeout=30)
    assert failures == []
    assert [proc.exitcode for proc in procs] == [0] * 6
    for p in paths[::25]:
        conn = raw(Path(p))
        assert schema.applied_versions(conn) == [m.version for m in schema.MIGRATIONS]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.close()

# -- batches, meta, change counter -------------------------------------------------------------


def test_meta_values_are_stored_replaced_and_deleted(store: Store):
    assert store.get_meta("fingerprint") is None
    store.set_meta("fingerprint", "a")
    with store.batch():
        store.set_meta("fingerprint", "b")
    assert store.get_meta("fingerprint") == "b"
    store.set_meta("fingerprint", None)
    assert store.get_meta("fingerprint") is None


def test_the_change_counter_bumps_once_per_committed_batch_that_changed_something(store: Store):
    assert store.change_counter() == 0
    with store.batch():
        store.put_file("a.md", "s", 1, 1, [chunk(0, "one")])
        store.put_file("b.md", "s", 1, 1, [chunk(0, "two")])
    assert store.change_counter() == 1
    with store.batch():
        pass
    assert store.change_counter() == 1
    with pytest.raises(ZeroDivisionError):
        with store.batch():
            store.remove_file("a.md")
            1 / 0
    assert store.change_counter() == 1
    store.set_meta("k", "v")
    assert store.change_counter() == 2
    store.compact()
    assert store.change_counter() == 2


def test_an_exception_inside_a_batch_rolls_back_every_write(store: Store):
    with pytest.raises(RuntimeError, match="boom"):
        with store.batch():
            store.put_file("a.md", "s", 1, 1, [chunk(0, "words")])
            raise RuntimeError("boom")
    assert store.counts() == {"files": 0, "chunks": 0, "vectors": 0}
    assert store.search_lexical("words", 5) == []


def test_nesting_batches_raises_a_clear_error_and_commits_nothing(store: Store):
    with pytest.raises(RuntimeError, match="nested"):
        with store.batch():
            store.put_file("a.md", "s", 1, 1, [chunk(0, "words")])
            with store.batch():
                pass
    assert store.counts()["files"] == 0
    with store.batch():  # the store is usable afterwards
        store.put_file("a.md", "s", 1, 1, [chunk(0, "words")])
    assert store.counts()["files"] == 1


def test_writes_outside_a_batch_are_refused(store: Store):
    with pytest.raises(RuntimeError, match="batch"):
        store.put_file("a.md", "s", 1, 1, [])
    with pytest.raises(RuntimeError, match="batch"):
        store.touch_file("a.md", 1, 1)
    with pytest.raises(RuntimeError, match="batch"):
        store.remove_file("a.md")
    with pytest.raises(RuntimeError, match="batch"):
        store.clear_vectors()


# -- files and chunks --------------------------------------------------------------------------


def test_put_file_stores_the_file_state_and_its_chunks(store: Store):
    with store.batch():
        store.put_file("notes/a.md", "abc", 123, 456, [chunk(0, "alpha text", ("A",)), chunk(1, "beta", ("A", "B"))])
    states = store.file_states()
    assert set(states) == {"notes/a.md"}
    state = states["notes/a.md"]
    assert (state.path, state.sha256, state.size, state.mtime_ns) == ("notes/a.md", "abc", 123, 456)
    assert abs(state.indexed_at - time.time()) < 60
    assert store.counts() == {"files": 1, "chunks": 2, "vectors": 0}
    hits = store.search_lexical("beta", 5)
    assert [(h.path, h.heading_path, h.start_line, h.end_line) for h in hits] == [("notes/a.md", ("A", "B"), 11, 15)]


def test_put_file_replaces_every_old_chunk_and_keeps_the_keyword_index_consistent(db: Path, store: Store):
    with store.batch():
        store.put_file("a.md", "v1", 1, 1, [chunk(i, f"oldword{i} shared") for i in range(3)])
        store.put_file("b.md", "v1", 1, 1, [chunk(0, "other shared")])
    with store.batch():
        store.put_file("a.md", "v2", 2, 2, [chunk(0, "newword shared")])
    assert store.counts() == {"files": 2, "chunks": 2, "vectors": 0}
    assert store.search_lexical("oldword0 OR oldword1 OR oldword2", 10) == []
    assert [h.path for h in store.search_lexical("newword", 10)] == ["a.md"]
    assert store.file_states()["a.md"].sha256 == "v2"
    assert fts_is_consistent(db)


def test_remove_file_deletes_the_file_its_chunks_and_their_keyword_entries(db: Path, store: Store):
    with store.batch():
        store.put_file("a.md", "s", 1, 1, [chunk(0, "gone soon", ("Gone",)), chunk(1, "also gone")])
        store.put_file("b.md", "s", 1, 1, [chunk(0, "stays")])
    with store.batch():
        store.remove_file("a.md")
        store.remove_file("never-indexed.md")  # nothing to do, no error
    assert set(store.file_states()) == {"b.md"}
    assert store.counts() == {"files": 1, "chunks": 1, "vectors": 0}
    assert store.search_lexical("gone", 5) == []
    assert fts_is_consistent(db)


def test_touch_file_records_the_new_stat_and_keeps_the_chunks(store: Store):
    with store.batch():
        store.put_file("a.md", "s", 1, 1, [chunk(0, "kept words")])
    indexed_at = store.file_states()["a.md"].indexed_at
    with store.batch():
        store.touch_file("a.md", 99, 12345)
    state = store.file_states()["a.md"]
    assert (state.sha256, state.size, state.mtime_ns, state.indexed_at) == ("s", 99, 12345, indexed_at)
    assert len(store.search_lexical("kept", 5)) == 1
    with pytest.raises(KeyError):
        with store.batch():
            store.touch_file("missing.md", 1, 1)


def test_recent_files_are_those_modified_since_newest_first(store: Store):
    second = 1_000_000_000
    with store.batch():
        for name, mtime in (("old.md", 1000), ("mid.md", 2000), ("new.md", 3000)):
            store.put_file(name, "s", 1, mtime * second, [])
    assert [f.path for f in store.recent_files(1500, 10)] == ["new.md", "mid.md"]
    assert [f.path for f in store.recent_files(0, 1)] == ["new.md"]
    assert all(isinstance(f, FileState) for f in store.recent_files(0, 10))
    assert store.recent_files(0, 0) == []


# -- vectors -----------------------------------------------------------------------------------


def test_vectors_are_stored_as_little_endian_float16_and_come_back_as_a_matrix(db: Path, store: Store):
    rng = np.random.default_rng(1)
    vecs = rng.standard_normal((3, 8)).astype(np.float32)
    with store.batch():
        store.put_file("a.md", "s", 1, 1, [chunk(i, f"text {i}", vector=vecs[i]) for i in range(3)])
        store.put_file("b.md", "s", 1, 1, [chunk(0, "no vector")])
    ids, matrix = store.vectors()
    assert ids.dtype == np.int64 and matrix.dtype == np.float16
    assert matrix.shape == (3, 8)
    np.testing.assert_array_equal(matrix, vecs.astype(np.float16))
    assert [h.text for h in store.chunks_by_ids(list(ids))] == ["text 0", "text 1", "text 2"]
    conn = raw(db)
    blob = conn.execute("SELECT vector FROM chunks WHERE text = 'text 0'").fetchone()[0]
    conn.close()
    assert blob == vecs[0].astype("<f2").tobytes()
    assert store.counts()["vectors"] == 3


def test_an_index_without_vectors_gives_empty_arrays(store: Store):
    ids, matrix = store.vectors()
    assert ids.shape == (0,) and ids.dtype == np.int64
    assert matrix.shape == (0, 0) and matrix.dtype == np.float16


def test_vector_for_finds_a_stored_vector_of_identical_text(store: Store):
    vec = np.linspace(-1, 1, 16, dtype=np.float32)
    with store.batch():
        store.put_file("a.md", "s", 1, 1, [chunk(0, "same text", vector=vec, sha="h-same")])
        store.put_file("b.md", "s", 1, 1, [chunk(0, "not embedded", sha="h-none")])
    found = store.vector_for("h-same")
    assert found is not None and found.dtype == np.float16
    np.testing.assert_array_equal(found, vec.astype(np.float16))
    assert store.vector_for("h-none") is None
    assert store.vector_for("h-unknown") is None


def test_clear_vectors_forgets_every_vector_but_keeps_the_text(db: Path, store: Store):
    with store.batch():
        store.put_file("a.md", "s", 1, 1, [chunk(i, f"words {i}", vector=np.ones(4)) for i in range(3)])
    with store.batch():
        store.clear_vectors()
    assert store.counts() == {"files": 1, "chunks": 3, "vectors": 0}
    assert store.vectors()[0].size == 0
    assert len(store.search_lexical("words", 10)) == 3
    assert fts_is_consistent(db)


def test_a_vector_that_is_not_1d_or_not_finite_in_float16_is_refused(store: Store):
    for bad in (np.ones((2, 2)), np.array([]), np.array([1.0, np.nan]), np.array([1e6, 0.0])):
        with pytest.raises(ValueError):
            with store.batch():
                store.put_file("a.md", "s", 1, 1, [chunk(0, "t", vector=bad)])
    assert store.counts()["files"] == 0


def test_vectors_of_100k_chunks_load_in_well_under_a_second_or_two(store: Store):
    n, d = 100_000, 32
    vecs = np.random.default_rng(2).standard_normal((n, d)).astype(np.float16)
    with store.batch():
        for f in range(10):
            rows = [chunk(j, "v", vector=vecs[f * 10_000 + j]) for j in range(10_000)]
            store.put_file(f"{f}.md", "s", 1, 1, rows)
    start = time.perf_counter()
    ids, matrix = store.vectors()
    elapsed = time.perf_counter() - start
    assert matrix.shape == (n, d)
    np.testing.assert_array_equal(matrix, vecs)
    assert np.all(np.diff(ids) > 0)
    assert elapsed < 2.0, f"vectors() took {elapsed:.2f} s for {n} rows"


# -- lexical search ----------------------------------------------------------------------------


def test_lexical_hits_come_best_first_with_positive_scores(store: Store):
    with store.batch():
        store.put_file("many.md", "s", 1, 1, [chunk(0, "grinder grinder grinder espresso")])
        store.put_file("one.md", "s", 1, 1, [chunk(0, "grinder and a lot of other words about nothing in particular")])
        store.put_file("none.md", "s", 1, 1, [chunk(0, "tea")])
    hits = store.search_lexical("grinder", 10)
    assert [h.path for h in hits] == ["many.md", "one.md"]
    assert all(isinstance(h, Hit) and h.score > 0 for h in hits)
    assert hits[0].score > hits[1].score
    assert len(store.search_lexical("grinder", 1)) == 1
    assert store.search_lexical("grinder", 0) == []


def test_words_in_the_heading_path_weigh_more_than_words_in_the_text(store: Store):
    with store.batch():
        store.put_file("body.md", "s", 1, 1, [chunk(0, "kettle notes here", ("Misc",))])
        store.put_file("head.md", "s", 1, 1, [chunk(0, "misc notes here", ("Kettle",))])
    assert [h.path for h in store.search_lexical("kettle", 10)] == ["head.md", "body.md"]


def test_lexical_search_stems_english_and_ignores_diacritics(store: Store):
    with store.batch():
        store.put_file("a.md", "s", 1, 1, [chunk(0, "We configured the café machine")])
    assert len(store.search_lexical("configuring", 5)) == 1
    assert len(store.search_lexical("cafe", 5)) == 1


def test_excerpts_are_short_snippets_without_markers(store: Store):
    long_text = " ".join(f"word{i}" for i in range(300)) + " needle " + " ".join(f"tail{i}" for i in range(300))
    with store.batch():
        store.put_file("long.md", "s", 1, 1, [chunk(0, long_text)])
        store.put_file("head.md", "s", 1, 1, [chunk(0, "body without the word", ("Needle",))])
    hits = {h.path: h for h in store.search_lexical("needle", 5)}
    excerpt = hits["long.md"].excerpt
    assert "needle" in excerpt and len(excerpt) < 400
    assert "…" in excerpt
    assert "<b>" not in excerpt and "[" not in excerpt
    assert hits["long.md"].text == long_text
    assert hits["head.md"].excerpt.strip()


@pytest.mark.parametrize("bad", ['"unterminated', "nosuchcolumn: word", "AND", "word NEAR("])
def test_a_malformed_match_expression_is_a_query_error_not_a_crash(store: Store, bad: str):
    filler(store, 1)
    with pytest.raises(QueryError):
        store.search_lexical(bad, 5)


def test_chunks_by_ids_come_in_the_order_asked_and_skip_missing_ids(store: Store):
    with store.batch():
        store.put_file("a.md", "s", 1, 1, [chunk(i, f"text {i} " + "x" * 300, ("H", str(i))) for i in range(3)])
    ids = [h.chunk_id for h in sorted(store.search_lexical("text", 10), key=lambda h: h.start_line)]
    asked = [np.int64(ids[2]), ids[0], 999_999]
    hits = store.chunks_by_ids(asked)
    assert [h.chunk_id for h in hits] == [ids[2], ids[0]]
    assert all(h.score == 0 for h in hits)
    assert hits[0].heading_path == ("H", "2")
    assert hits[0].excerpt.startswith("text 2 xxx") and hits[0].excerpt.endswith("…") and len(hits[0].excerpt) <= 200
    assert store.chunks_by_ids([]) == []


# -- readers and snapshots ---------------------------------------------------------------------


def test_a_reader_sees_the_last_committed_state_while_a_batch_is_open(db: Path, store: Store):
    with store.batch():
        store.put_file("a.md", "s", 1, 1, [chunk(0, "committed words")])
    reader = Store.open(db, create=False)
    try:
        with store.batch():
            store.put_file("b.md", "s", 1, 1, [chunk(0, "uncommitted words")])
            store.remove_file("a.md")
            assert reader.counts()["files"] == 1
            assert [h.path for h in reader.search_lexical("words", 5)] == ["a.md"]
        assert [h.path for h in reader.search_lexical("words", 5)] == ["b.md"]
    finally:
        reader.close()


def test_a_read_snapshot_keeps_one_state_across_several_reads(db: Path, store: Store):
    with store.batch():
        store.put_file("a.md", "s", 1, 1, [chunk(0, "first", vector=np.ones(4))])
    reader = Store.open(db, create=False)
    try:
        with reader.snapshot():
            ids, _ = reader.vectors()
            with store.batch():
                store.remove_file("a.md")
            assert [h.text for h in reader.chunks_by_ids(list(ids))] == ["first"]
        assert reader.chunks_by_ids(list(ids)) == []
    finally:
        reader.close()


def test_a_searcher_opens_and_reads_while_another_process_holds_a_write_transaction(db: Path):
    with Store.open(db) as s:
        with s.batch():
            s.put_file("a.md", "s", 1, 1, [chunk(0, "visible words")])
    writer_code = (
        "import sys; from puremind.store import Store, ChunkRow\n"
        f"s = Store.open({str(db)!r})\n"
        "with s.batch():\n"
        "    s.put_file('b.md', 's', 1, 1, [ChunkRow(0, (), 'pending words', 1, 1, 'section', 'h', None)])\n"
        "    print('holding', flush=True)\n"
        "    sys.stdin.readline()\n"
    )
    root = Path(__file__).resolve().parents[1]
    writer = subprocess.Popen(
        [sys.executable, "-c", writer_code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        assert writer.stdout.readline().strip() == "holding"
        start = time.perf_counter()
        with Store.open(db, create=False) as reader:
            assert [h.path for h in reader.search_lexical("words", 5)] == ["a.md"]
        assert time.perf_counter() - start < 2.0
    finally:
        writer.communicate("go\n", timeout=30)
    assert writer.returncode == 0
    with Store.open(db, create=False) as reader:
        assert reader.counts()["files"] == 2


# -- secure deletion and compaction ------------------------------------------------------------


def _secret_note(store: Store, path: str) -> None:
    with store.batch():
        store.put_file(
            path,
            "v1",
            1,
            1,
            [
                chunk(0, f"the {MARKER} code lives here " * 200, ("Secret", MARKER)),
                chunk(1, f"short {MARKER} line"),
            ],
        )


def test_text_of_a_removed_note_is_gone_from_the_index_file_and_its_wal_after_compact(db: Path, store: Store):
    filler(store)
    _secret_note(store, "secret.md")
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # as an autocheckpoint would: text now in the main file
    _secret_note(store, "secret-again.md")  # and some still only in the -wal
    before = marker_counts(db)
    assert before["db"] > 0 and before["wal"] > 0

    with store.batch():
        store.remove_file("secret.md")
        store.remove_file("secret-again.md")
    assert store.compact_pending()
    assert store.compact() is True

    assert marker_counts(db) == {"db": 0, "wal": 0}
    assert db.with_name(db.name + "-wal").stat().st_size == 0
    assert not store.compact_pending()
    assert fts_is_consistent(db)
    assert len(store.search_lexical("ordinary", 100)) == 30


def test_old_text_of_an_edited_note_is_gone_from_the_index_file_and_its_wal_after_compact(db: Path, store: Store):
    filler(store)
    _secret_note(store, "note.md")
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with store.batch():
        store.put_file("note.md", "v2", 1, 1, [chunk(0, "the rewritten note says something else entirely")])
    assert store.compact() is True
    assert marker_counts(db) == {"db": 0, "wal": 0}
    assert [h.path for h in store.search_lexical("rewritten", 5)] == ["note.md"]
    assert fts_is_consistent(db)


def test_compact_leaves_the_note_pending_while_a_reader_holds_the_wal(db: Path, store: Store):
    filler(store, 3)
    _secret_note(store, "secret.md")
    with store.batch():
        store.remove_file("secret.md")
    reader = Store.open(db, create=False)
    try:
        with reader.snapshot():
            assert store.compact() is False
            assert store.compact_pending()
    finally:
        reader.close()
    assert store.compact() is True
    assert not store.compact_pending()
    assert marker_counts(db) == {"db": 0, "wal": 0}


def test_compact_inside_a_batch_is_refused(store: Store):
    with pytest.raises(RuntimeError):
        with store.batch():
            store.compact()
