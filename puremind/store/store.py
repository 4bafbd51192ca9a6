"""The index: one SQLite file holding note files, their chunks, an FTS5 keyword index and float16
vectors.

One writer at a time (the caller's lock), any number of readers: the file is in WAL mode, so a
reader sees the last committed state while a batch is being written. Deleted text is overwritten
(secure_delete) and `compact` pushes it out of the FTS5 segments and the -wal file.
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import numpy

from puremind.cjk import cjk_terms
from puremind.errors import QueryError, StoreError
from puremind.store import files
from puremind.store.errors import from_os, from_sqlite, one_line
from puremind.store.rows import ChunkRow, FileState, Hit
from puremind.store.schema import SchemaError, migrate

BUSY_TIMEOUT_MS = 10_000
# compact() waits at most this long for readers to leave the -wal file; a later run empties it.
CHECKPOINT_TIMEOUT_MS = 1_000
EXCERPT_CHARS = 200
VECTOR_DTYPE = numpy.dtype("<f2")  # float16, little-endian on disk whatever the machine

_SQLITE_ERROR = 1
_CHANGE_COUNTER = "change_counter"
_COMPACT_PENDING = "compact_pending"

_F = TypeVar("_F", bound=Callable[..., Any])


def _guarded(action: str) -> Callable[[_F], _F]:
    """Report sqlite3 errors from a Store method as StoreErrors naming the file."""

    def decorate(method: _F) -> _F:
        @functools.wraps(method)
        def wrapper(self: "Store", *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except sqlite3.Error as exc:
                raise from_sqlite(self.path, exc, action) from exc

        return wrapper  # type: ignore[return-value]

    return decorate


def _vector_bytes(vector: numpy.ndarray) -> bytes:
    array = numpy.asarray(vector)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"a chunk vector must be a non-empty 1-D array, got shape {array.shape}")
    with numpy.errstate(over="ignore"):  # overflow becomes inf, refused just below
        half = array.astype(VECTOR_DTYPE)
    if not numpy.isfinite(half).all():
        raise ValueError("a chunk vector has values that float16 cannot hold (NaN, inf or over 65504)")
    return half.tobytes()


def _heading_path(stored: str) -> tuple[str, ...]:
    return tuple(json.loads(stored))


class Store:
    """An open index file. Make one with `Store.open`; close it with `close()` (or `with`).

    Not for use by two threads at the same time; give each thread its own Store, or serialise calls.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path):
        # Use Store.open: it creates the file safely, configures the connection and migrates.
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._batch_open = False
        self._snapshot_open = False

    # -- opening and closing -------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, create: bool = True) -> "Store":
        """Open (and with `create`, make) the index at `path`, upgrading an older schema.

        A missing parent folder is created 0700 and the file 0600 whatever the umask; an existing
        folder, file, -wal or -shm that is more open is tightened. The connection uses WAL,
        synchronous=NORMAL, secure_delete=ON, foreign_keys=ON and a 10 s busy timeout, so a
        searcher can open and read while another process is writing.

        Raises:
            StoreError: create=False and there is no file ("no index at PATH"); the file is not an
                SQLite database, is another program's database, is damaged, or was written by a
                newer pureMind; the file or its folder cannot be created, opened or written
                (permissions, read-only filesystem, disk full) or stayed locked too long.
        """
        path = Path(path).expanduser().absolute()
        try:
            if create:
                files.make_parent(path)
                files.tighten_parent(path)
                files.create_file(path)
            elif not path.exists():
                raise StoreError(f"no index at {path}", hint="run `puremind index`")
            files.tighten_all(path)
        except OSError as exc:
            raise from_os(path, exc, "create" if create else "open") from exc

        conn = _connect_and_migrate(path)
        files.tighten_all(path)  # the -wal and -shm files exist only now
        return cls(conn, path)

    @property
    def path(self) -> Path:
        """The index file's absolute path."""
        return self._path

    def close(self) -> None:
        """Close the connection. Safe to call twice. Any open batch is rolled back."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"the index {self._path} is closed")
        return self._conn

    # -- meta ----------------------------------------------------------------------------------

    @_guarded("read")
    def get_meta(self, key: str) -> str | None:
        """The value stored under `key`, or None.

        Raises:
            StoreError: the index cannot be read.
        """
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    @_guarded("write")
    def set_meta(self, key: str, value: str | None) -> None:
        """Store `value` under `key`; None deletes the key.

        Joins the open batch; outside a batch it commits on its own (bumping the change counter).

        Raises:
            StoreError: the index cannot be written.
        """
        if not self._batch_open:
            with self.batch():
                self.set_meta(key, value)
            return
        if value is None:
            self._db.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, str(value)),
            )

    def change_counter(self) -> int:
        """A number that grows with every committed batch that changed something.

        Readers compare it with the value they saw to know when cached vectors are stale.

        Raises:
            StoreError: the index cannot be read.
        """
        value = self.get_meta(_CHANGE_COUNTER)
        return int(value) if value else 0

    def compact_pending(self) -> bool:
        """True when text was deleted or replaced since the last `compact` that emptied the -wal.

        Stored in the index, so a process that crashed before compacting leaves the note for the
        next one.

        Raises:
            StoreError: the index cannot be read.
        """
        return self.get_meta(_COMPACT_PENDING) == "1"

    # -- transactions --------------------------------------------------------------------------

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """A write transaction: BEGIN IMMEDIATE on entry, COMMIT on exit, ROLLBACK on any exception.

        Commits that changed something bump the change counter. Batches do not nest.

        Raises:
            RuntimeError: a batch (or a read snapshot) is already open on this Store.
            StoreError: the write lock was not granted within the busy timeout, or the index
                cannot be written (read-only, disk full, damaged).
        """
        if self._batch_open:
            raise RuntimeError("a store batch is already open: `with store.batch()` cannot be nested")
        if self._snapshot_open:
            raise RuntimeError("cannot open a store batch inside a read snapshot")
        conn = self._db
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise from_sqlite(self._path, exc, "write") from exc
        self._batch_open = True
        try:
            before = conn.total_changes
            yield
            if conn.total_changes != before:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, '1') ON CONFLICT(key)"
                    " DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)",
                    (_CHANGE_COUNTER,),
                )
            conn.execute("COMMIT")
        except BaseException as exc:
            _rollback_quietly(conn)
            if isinstance(exc, sqlite3.Error):
                raise from_sqlite(self._path, exc, "write") from exc
            raise
        finally:
            self._batch_open = False

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """Run several reads against one committed state (a read transaction).

        Keep it short: while it is open, `compact` in another process cannot empty the -wal file.
        Inside a batch, or inside another snapshot, it does nothing extra.

        Raises:
            StoreError: the index cannot be read.
        """
        if self._batch_open or self._snapshot_open:
            yield
            return
        conn = self._db
        try:
            conn.execute("BEGIN DEFERRED")
            # A deferred transaction starts reading at its first SELECT; start it now.
            conn.execute("SELECT 1 FROM meta LIMIT 1").fetchall()
        except sqlite3.Error as exc:
            _rollback_quietly(conn)
            raise from_sqlite(self._path, exc, "read") from exc
        self._snapshot_open = True
        try:
            yield
        finally:
            self._snapshot_open = False
            _rollback_quietly(conn)

    def _require_batch(self, method: str) -> sqlite3.Connection:
        if not self._batch_open:
            raise RuntimeError(f"Store.{method}() writes, so it must be called inside `with store.batch():`")
        return self._db

    # -- writing -------------------------------------------------------------------------------

    @_guarded("read")
    def file_states(self) -> dict[str, FileState]:
        """Every indexed file by vault-relative path.

        Raises:
            StoreError: the index cannot be read.
        """
        rows = self._db.execute(
            "SELECT path, sha256, size, mtime_ns, indexed_at, identity FROM files"
        ).fetchall()
        return {row[0]: FileState(*row) for row in rows}

    @_guarded("write")
    def put_file(
        self, path: str, sha256: str, size: int, mtime_ns: int, chunks: list[ChunkRow], *, identity: str = ""
    ) -> None:
        """Insert or replace the file `path` and all its chunks (the old chunks and their FTS
        entries are deleted). Needs an open batch.

        Raises:
            RuntimeError: no batch is open.
            ValueError: a chunk vector is not a non-empty 1-D array of float16-sized values.
            StoreError: the index cannot be written.
        """
        conn = self._require_batch("put_file")
        prepared = [
            (
                chunk.ord,
                chunk.start_line,
                chunk.end_line,
                chunk.kind,
                chunk.text_sha256,
                None if chunk.vector is None else _vector_bytes(chunk.vector),
                json.dumps(list(chunk.heading_path), ensure_ascii=False),
                " > ".join(chunk.heading_path),
                chunk.text,
                cjk_terms(" > ".join(chunk.heading_path) + "\n" + chunk.text),
            )
            for chunk in chunks
        ]
        file_id = conn.execute(
            "INSERT INTO files (path, sha256, size, mtime_ns, indexed_at, identity) VALUES (?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(path) DO UPDATE SET sha256 = excluded.sha256, size = excluded.size,"
            " mtime_ns = excluded.mtime_ns, indexed_at = excluded.indexed_at, identity = excluded.identity"
            " RETURNING id",
            (path, sha256, int(size), int(mtime_ns), time.time(), identity),
        ).fetchall()[0][0]  # fetchall: a RETURNING statement must run to its end before the next one
        # Row by row through the delete trigger, so the FTS index forgets exactly these rows.
        deleted = conn.execute("DELETE FROM chunks WHERE file_id = ?", (file_id,)).rowcount
        if deleted:
            self._mark_compact_pending(conn)
        conn.executemany(
            "INSERT INTO chunks (file_id, ord, start_line, end_line, kind, text_sha256, vector,"
            " heading_path, heading_text, text, cjk_text) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(file_id, *row) for row in prepared],
        )

    @_guarded("write")
    def touch_file(self, path: str, size: int, mtime_ns: int, *, identity: str = "") -> None:
        """Record a new size and mtime for a file whose content did not change (its chunks and
        indexed_at stay). Needs an open batch.

        Raises:
            RuntimeError: no batch is open.
            KeyError: no file is indexed under `path`.
            StoreError: the index cannot be written.
        """
        conn = self._require_batch("touch_file")
        cursor = conn.execute(
            "UPDATE files SET size = ?, mtime_ns = ?, identity = ? WHERE path = ?",
            (int(size), int(mtime_ns), identity, path),
        )
        if cursor.rowcount == 0:
            raise KeyError(path)

    @_guarded("write")
    def remove_file(self, path: str) -> None:
        """Delete the file `path`, its chunks and their FTS entries; nothing happens when it is not
        indexed. Needs an open batch.

        Raises:
            RuntimeError: no batch is open.
            StoreError: the index cannot be written.
        """
        conn = self._require_batch("remove_file")
        row = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
        if row is None:
            return
        # Chunks first and explicitly, through the FTS delete trigger (not left to the cascade).
        conn.execute("DELETE FROM chunks WHERE file_id = ?", (row[0],))
        conn.execute("DELETE FROM files WHERE id = ?", (row[0],))
        self._mark_compact_pending(conn)

    @_guarded("write")
    def clear_vectors(self) -> None:
        """Forget every stored vector (for a rebuild with another embedding model). Needs an open
        batch.

        Raises:
            RuntimeError: no batch is open.
            StoreError: the index cannot be written.
        """
        conn = self._require_batch("clear_vectors")
        conn.execute("UPDATE chunks SET vector = NULL WHERE vector IS NOT NULL")

    @_guarded("read")
    def vector_for(self, text_sha256: str) -> numpy.ndarray | None:
        """A stored vector of a chunk whose embedded text has this sha256 (float16 copy), or None.

        Raises:
            StoreError: the index cannot be read.
        """
        row = self._db.execute(
            "SELECT vector FROM chunks WHERE text_sha256 = ? AND vector IS NOT NULL LIMIT 1",
            (text_sha256,),
        ).fetchone()
        if row is None:
            return None
        return numpy.frombuffer(row[0], dtype=VECTOR_DTYPE).astype(numpy.float16)

    def _mark_compact_pending(self, conn: sqlite3.Connection) -> None:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, '1') ON CONFLICT(key) DO UPDATE SET value = '1'",
            (_COMPACT_PENDING,),
        )

    # -- reading -------------------------------------------------------------------------------

    def search_cjk(self, match: str, limit: int) -> list[Hit]:
        """BM25 over the Chinese/Japanese/Korean characters-and-pairs index (see puremind.cjk), best first.

        Raises:
            QueryError: FTS5 rejected `match`.
            StoreError: the index cannot be read.
        """
        return self._search_fts("chunks_cjk", "bm25(chunks_cjk)", "snippet(chunks_cjk, 0, '', '', '…', 24)", match, limit)

    def search_lexical(self, match: str, limit: int) -> list[Hit]:
        """BM25 keyword search: up to `limit` hits, best first.

        `match` must already be a safe FTS5 MATCH expression (the caller quotes user words).
        Score = -bm25 with weights heading 2.0, text 1.0, so higher is better. The excerpt is an
        FTS5 snippet of the text (no markers, about 24 tokens), or its first 200 characters.

        Raises:
            QueryError: FTS5 rejected `match` (syntax error, unknown column).
            StoreError: the index cannot be read.
        """
        return self._search_fts(
            "chunks_fts", "bm25(chunks_fts, 2.0, 1.0)", "snippet(chunks_fts, 1, '', '', '…', 24)", match, limit
        )

    @_guarded("read")
    def _search_fts(self, table: str, rank: str, snippet: str, match: str, limit: int) -> list[Hit]:
        if limit <= 0:
            return []
        try:
            rows = self._db.execute(
                "SELECT c.id, f.path, c.heading_path, c.start_line, c.end_line,"
                f" -{rank}, c.text, {snippet}"
                f" FROM {table}"
                f" JOIN chunks AS c ON c.id = {table}.rowid"
                " JOIN files AS f ON f.id = c.file_id"
                f" WHERE {table} MATCH ?"
                f" ORDER BY {rank}, c.id"
                " LIMIT ?",
                (match, int(limit)),
            ).fetchall()
        except sqlite3.OperationalError as exc:
            # FTS5 rejects a bad expression with the generic SQLITE_ERROR ("fts5: syntax error near
            # ...", "unterminated string", "no such column: x"); storage trouble has its own codes.
            if getattr(exc, "sqlite_errorcode", 1) & 0xFF == _SQLITE_ERROR:
                raise QueryError(f"the search expression cannot be used: {one_line(exc)}") from exc
            raise from_sqlite(self._path, exc, "read") from exc
        except sqlite3.Error as exc:
            raise from_sqlite(self._path, exc, "read") from exc
        if any(row[5] is None or row[6] is None for row in rows):
            # FTS5 pointing at rows it cannot score: its segments no longer match the chunks table.
            raise StoreError(
                f"the keyword index in {self._path} is damaged",
                hint="run `puremind index --rebuild` to rebuild it from the stored chunks",
            )
        return [
            Hit(
                chunk_id=row[0],
                path=row[1],
                heading_path=_heading_path(row[2]),
                start_line=row[3],
                end_line=row[4],
                score=float(row[5]),
                text=row[6],
                # A snippet of one very long "word" can run to thousands of characters.
                excerpt=(row[7] if row[7] and row[7].strip() else row[6])[:EXCERPT_CHARS],
            )
            for row in rows
        ]

    @_guarded("write")
    def rebuild_keyword_index(self) -> None:
        """Rebuild the FTS5 index from the chunks table (repairs a damaged one). Needs an open batch.

        Raises:
            RuntimeError: no batch is open.
            StoreError: the index cannot be written.
        """
        conn = self._require_batch("rebuild_keyword_index")
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
        conn.execute("INSERT INTO chunks_cjk(chunks_cjk) VALUES ('rebuild')")
        self._mark_compact_pending(conn)

    @_guarded("read")
    def vectors(self) -> tuple[numpy.ndarray, numpy.ndarray]:
        """Every stored vector: (chunk ids int64 of shape (n,), float16 matrix (n, d)), by chunk id.

        One query; the matrix is a writable array over the joined bytes. An index without
        vectors gives arrays of shape (0,) and (0, 0).

        Raises:
            StoreError: the index cannot be read, or holds vectors of different sizes.
        """
        rows = self._db.execute(
            "SELECT id, vector FROM chunks WHERE vector IS NOT NULL ORDER BY id"
        ).fetchall()
        if not rows:
            return numpy.empty(0, dtype=numpy.int64), numpy.empty((0, 0), dtype=numpy.float16)
        ids, blobs = zip(*rows)
        sizes = set(map(len, blobs))
        width = len(blobs[0])
        if len(sizes) != 1 or width % VECTOR_DTYPE.itemsize:
            raise StoreError(
                f"index {self._path} holds vectors of different sizes",
                hint="run `puremind index --rebuild`",
            )
        matrix = numpy.frombuffer(bytearray().join(blobs), dtype=VECTOR_DTYPE)
        matrix = matrix.reshape(len(blobs), width // VECTOR_DTYPE.itemsize)
        if VECTOR_DTYPE != numpy.dtype(numpy.float16):  # big-endian machine: convert once
            matrix = matrix.astype(numpy.float16)
        return numpy.array(ids, dtype=numpy.int64), matrix

    @_guarded("read")
    def chunks_by_ids(self, ids: list[int]) -> list[Hit]:
        """The chunks with these ids, in the order asked, as Hits with score 0 and the first 200
        characters as excerpt. Ids that no longer exist are left out.

        Raises:
            StoreError: the index cannot be read.
        """
        wanted = [int(i) for i in ids]
        if not wanted:
            return []
        rows = self._db.execute(
            "SELECT c.id, f.path, c.heading_path, c.start_line, c.end_line, c.text"
            " FROM chunks AS c JOIN files AS f ON f.id = c.file_id"
            " WHERE c.id IN (SELECT value FROM json_each(?))",
            (json.dumps(wanted),),
        ).fetchall()
        by_id = {
            row[0]: Hit(
                chunk_id=row[0],
                path=row[1],
                heading_path=_heading_path(row[2]),
                start_line=row[3],
                end_line=row[4],
                score=0.0,
                text=row[5],
                excerpt=row[5][:EXCERPT_CHARS],
            )
            for row in rows
        }
        return [by_id[i] for i in wanted if i in by_id]

    @_guarded("read")
    def counts(self) -> dict[str, int]:
        """{"files": ..., "chunks": ..., "vectors": ...} (vectors = chunks that have one).

        Raises:
            StoreError: the index cannot be read.
        """
        files_n, chunks_n, vectors_n = self._db.execute(
            "SELECT (SELECT count(*) FROM files), (SELECT count(*) FROM chunks),"
            " (SELECT count(*) FROM chunks WHERE vector IS NOT NULL)"
        ).fetchone()
        return {"files": files_n, "chunks": chunks_n, "vectors": vectors_n}

    @_guarded("read")
    def paths_missing_vectors(self) -> set[str]:
        """Paths of files with at least one chunk that has no vector (indexed while no embedder was available).

        Raises:
            StoreError: the index cannot be read.
        """
        rows = self._db.execute(
            "SELECT DISTINCT f.path FROM chunks c JOIN files f ON f.id = c.file_id WHERE c.vector IS NULL"
        ).fetchall()
        return {row[0] for row in rows}

    @_guarded("read")
    def recent_files(self, since: float, limit: int) -> list[FileState]:
        """Up to `limit` files modified at or after `since` (seconds since the epoch, compared with
        their mtime), newest first.

        Raises:
            StoreError: the index cannot be read.
        """
        if limit <= 0:
            return []
        rows = self._db.execute(
            "SELECT path, sha256, size, mtime_ns, indexed_at FROM files WHERE mtime_ns >= ?"
            " ORDER BY mtime_ns DESC, path LIMIT ?",
            (int(since * 1_000_000_000), int(limit)),
        ).fetchall()
        return [FileState(*row) for row in rows]

    # -- compaction ----------------------------------------------------------------------------

    def compact(self) -> bool:
        """Remove deleted text for good: FTS5 'optimize' (merges away deleted entries; secure_delete
        zeroes the freed pages), then PRAGMA wal_checkpoint(TRUNCATE) to empty the -wal file.

        Returns True when the -wal file was emptied; False when a reader kept it (waiting at most
        1 s), in which case `compact_pending()` stays True so a later run finishes the job.

        Raises:
            RuntimeError: called inside a batch or read snapshot.
            StoreError: the index cannot be written.
        """
        if self._batch_open or self._snapshot_open:
            raise RuntimeError("Store.compact() cannot run inside a batch or a read snapshot")
        conn = self._db
        try:
            # Not a batch: compaction changes no content, so readers need not reload vectors.
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("INSERT INTO chunks_fts (chunks_fts) VALUES ('optimize')")
                conn.execute("INSERT INTO chunks_cjk (chunks_cjk) VALUES ('optimize')")
                conn.execute("DELETE FROM meta WHERE key = ?", (_COMPACT_PENDING,))
                conn.execute("COMMIT")
            except BaseException:
                _rollback_quietly(conn)
                raise
            conn.execute(f"PRAGMA busy_timeout = {CHECKPOINT_TIMEOUT_MS}")
            try:
                busy, _log, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if busy:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    self._mark_compact_pending(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback_quietly(conn)
                    raise
            return not busy
        except sqlite3.Error as exc:
            raise from_sqlite(self._path, exc, "write") from exc


def _connect_and_migrate(path: Path) -> sqlite3.Connection:
    """Connect to the existing file at `path`, switch it to WAL and migrate it, retrying the whole setup while
    SQLite says busy, until the busy timeout has passed.

    Several processes opening one new index at once (two agents' servers, `watch` and `serve` started together)
    meet while the file is still in rollback-journal mode: there a connection that holds a read lock and wants
    the write lock (the switch to WAL, a migration) gets SQLITE_BUSY at once, without SQLite's busy handler,
    whenever another one does the same, since waiting could deadlock. Closing the connection releases its lock,
    so the other one goes on, and the next try here finds WAL and the schema in place.
    """
    # mode=rw: SQLite must never create the file itself (it would use the umask's mode).
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=rw"
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.002
    while True:
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                uri,
                uri=True,
                isolation_level=None,  # transactions are explicit: BEGIN IMMEDIATE ... COMMIT
                timeout=BUSY_TIMEOUT_MS / 1000,
                check_same_thread=False,
            )
            _configure(conn)
            migrate(conn)
            return conn
        except SchemaError as exc:
            _close_quietly(conn)
            raise StoreError(f"index {path} {exc.message}", hint=exc.hint) from exc
        except sqlite3.Error as exc:
            _close_quietly(conn)
            if _is_busy(exc) and time.monotonic() < deadline:
                # Random, growing pauses: processes that collided do not collide again in step.
                time.sleep(random.uniform(pause / 2, pause))
                pause = min(pause * 2, 0.1)
                continue
            raise from_sqlite(path, exc, "open") from exc
        except BaseException:
            _close_quietly(conn)
            raise


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _configure(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    # Only switch when needed: the switch takes an exclusive lock, a plain query does not.
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    if str(mode).lower() != "wal":
        conn.execute("PRAGMA journal_mode = WAL").fetchone()
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA secure_delete = ON")
    conn.execute("PRAGMA foreign_keys = ON")


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    # SQLite may already have rolled back by itself (disk full, I/O error); don't mask the cause.
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _close_quietly(conn: sqlite3.Connection | None) -> None:
    if conn is not None:
        try:
            conn.close()
        except sqlite3.Error:
            pass


__all__ = ["Store", "ChunkRow", "FileState", "Hit"]
