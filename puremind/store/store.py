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
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

import numpy

from puremind.cjk import TERM_COUNT_CAP, cjk_terms
from puremind.errors import IndexDamaged, QueryError, StoreError
from puremind.fingerprint import index_mismatch, same_vectors
from puremind.store import files
from puremind.store.errors import REPAIR_HINT, from_os, from_sqlite, one_line
from puremind.store.rows import ChunkRow, FileState, Hit, TitleHit, title_key as _title_key
from puremind.store.schema import KEYWORD_TOKENIZER, LATEST_VERSION, SchemaError, current_version, migrate
from puremind.folders import path_key

BUSY_TIMEOUT_MS = 10_000
# compact() waits at most this long for readers to leave the -wal file; a later run empties it.
CHECKPOINT_TIMEOUT_MS = 1_000
EXCERPT_CHARS = 200
#: How much of each note `note_scores` reads (a whole note's evidence, bounded for a vault of huge notes).
NOTE_SCORE_CHARS = 50_000
#: ... and at most this many of its first chunks (a note of thousands of one-line chunks is not read whole).
_NOTE_SCORE_CHUNKS = 400
VECTOR_DTYPE = numpy.dtype("<f2")  # float16, little-endian on disk whatever the machine

_SQLITE_ERROR = 1
#: the meta key of the embedding fingerprint (see Store.embed_fingerprint)
META_FINGERPRINT = "embed_fingerprint"
_CHANGE_COUNTER = "change_counter"
_COMPACT_PENDING = "compact_pending"

_F = TypeVar("_F", bound=Callable[..., Any])


def clip_excerpt(text: str, limit: int = EXCERPT_CHARS, *, passage: str | None = None) -> str:
    """`text` on one line in at most `limit` characters, cut after a whole word with "…". A long run without
    spaces (a URL, Chinese or Japanese text) is cut inside rather than losing most of the room.

    Frontmatter never shows as YAML (see `without_frontmatter`). `passage` is the chunk text that `text`, an FTS5
    snippet, was cut from: a snippet that reaches into the passage's frontmatter is replaced by the start of the
    passage as `without_frontmatter` shows it (where the title and aliases come first)."""
    if passage is None:
        text = without_frontmatter(text)
    else:
        split = _split_frontmatter(passage)
        if split is not None:
            core = text.strip().removeprefix("…").removesuffix("…").strip()
            at = passage.find(core) if core else -1
            if at < split[1]:  # the snippet begins inside the frontmatter (or cannot be placed)
                text = split[0]
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    if flat[limit - 1] != " ":  # the cut falls inside a word: end before it
        space = cut.rfind(" ")
        if space >= limit // 2:
            cut = cut[:space]
    return cut.rstrip(" …") + "…"


#: What stands between a note's title and aliases and the rest of the passage in an excerpt.
FRONTMATTER_JOINER = " — "
_FRONTMATTER_SCALARS = ("|", ">", "|-", ">-", "|+", ">+")  # YAML block scalar markers: not words of the note


def without_frontmatter(text: str) -> str:
    """`text` as an excerpt shows it: a leading YAML frontmatter block (`---` on the first line up to a closing
    `---` or `...` line, as the chunker finds it) becomes plain words, never its fences or `key:` lines. The
    note's title and aliases come first ("Dana Fischer (Dana, DF) — " and the rest of the passage); a passage
    that is all frontmatter shows the values of its entries ("Dana Fischer · Dana · DF · person"). Text without
    frontmatter is returned as is. Pure; the stored chunk text (and the keyword index of it) keeps the block."""
    split = _split_frontmatter(text)
    return text if split is None else split[0]


def _split_frontmatter(text: str) -> tuple[str, int] | None:
    """(`text` shown without its frontmatter, the offset in `text` where the frontmatter block ends); None when
    `text` does not start with frontmatter."""
    lines = text.split("\n")
    if lines[0].rstrip(" \t\r") != "---":
        return None
    close = next((i for i in range(1, len(lines)) if lines[i].rstrip(" \t\r") in ("---", "...")), None)
    if close is None:  # without a closing line it is not frontmatter (a thematic break)
        return None
    fields: dict[str, list[str]] = {}
    values: list[str] = []
    key: str | None = None
    for line in lines[1:close]:
        line = line.rstrip(" \t\r")
        nested = line[:1] in (" ", "\t")
        body = line.strip()
        if body.startswith("- ") or body == "-":  # a list item: belongs to the key above it
            words = _frontmatter_values(body[1:])
            if key is not None:
                fields[key] += words
            values += words
            continue
        name, colon, rest = body.partition(":")
        if colon and _is_frontmatter_key(name.rstrip(" \t")) and (not rest or rest[0] in " \t"):
            words = _frontmatter_values(rest)
            if not nested:
                key = name.rstrip(" \t").casefold()
                fields[key] = list(words)
            values += words
        elif body and not body.startswith("#"):  # the text of a block scalar, or a value that goes on
            values.append(body)
    end = sum(len(line) + 1 for line in lines[: close + 1])
    rest_of_text = text[end:] if end <= len(text) else ""
    if not rest_of_text.strip():
        return " · ".join(dict.fromkeys(v for v in values if v)), min(end, len(text))
    title = next((v for v in fields.get("title", []) if v), "")
    seen = {title.casefold()}
    aliases = [a for a in fields.get("aliases", []) + fields.get("alias", [])
               if a and a.casefold() not in seen and not seen.add(a.casefold())]
    label = title
    if aliases:
        label = f"{title} ({', '.join(aliases)})" if title else ", ".join(aliases)
    return (label + FRONTMATTER_JOINER if label else "") + rest_of_text.lstrip("\n"), end


def _is_frontmatter_key(name: str) -> bool:
    return bool(name) and (name[0].isalpha() or name[0] == "_") and all(ch.isalnum() or ch in "_-" for ch in name)


def _frontmatter_values(value: str) -> list[str]:
    """The words of one YAML value: an inline list's items, quotes and a trailing comment removed."""
    value = value.strip()
    if value in _FRONTMATTER_SCALARS:
        return []
    items = value[1:-1].split(",") if value.startswith("[") and value.endswith("]") else [value]
    out = []
    for item in items:
        item = item.strip()
        if len(item) >= 2 and item[0] == item[-1] and item[0] in "\"'":
            item = item[1:-1].strip()
        elif " #" in item:
            item = item.split(" #", 1)[0].rstrip()
        if item:
            out.append(item)
    return out


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


@contextlib.contextmanager
def _scratch_fts(columns: str, tokenizer: str) -> Iterator[sqlite3.Connection]:
    """An in-memory database holding one FTS5 table `texts` of `columns`, tokenized with `tokenizer`."""
    scratch = sqlite3.connect(":memory:")
    try:
        scratch.execute(f"CREATE VIRTUAL TABLE texts USING fts5({columns}, tokenize='{tokenizer}')")
        yield scratch
    finally:
        scratch.close()


def bm25_scores(texts: Mapping[str, str], match: str) -> dict[str, float]:
    """BM25 of each text (name -> text) for the FTS5 MATCH expression `match`, judged among these texts only, with
    the keyword index's tokenizer: name -> -bm25, higher is better, for the texts that match.

    Raises:
        QueryError: FTS5 rejected `match`.
    """
    with _scratch_fts("name UNINDEXED, body", KEYWORD_TOKENIZER) as scratch:
        scratch.executemany("INSERT INTO texts(name, body) VALUES (?, ?)", texts.items())
        try:
            found = scratch.execute("SELECT name, -bm25(texts) FROM texts WHERE texts MATCH ?", (match,)).fetchall()
        except sqlite3.OperationalError as exc:
            raise QueryError(f"the search expression cannot be used: {one_line(exc)}") from exc
    return {name: float(score) for name, score in found}


def keyword_words(texts: Sequence[str], *, stems: bool = True) -> list[tuple[str, ...]]:
    """The words the keyword index makes of each text, in order (its tokenizer: case and diacritics folded, split
    at punctuation and `_`, symbols and emoji dropped, Porter stems unless `stems` is false): "🚀 Café-menus" ->
    ("cafe", "menu") (("cafe", "menus") without stems)."""
    tokenizer = KEYWORD_TOKENIZER if stems else KEYWORD_TOKENIZER.removeprefix("porter ")
    out: list[list[str]] = [[] for _ in texts]
    with _scratch_fts("body", tokenizer) as scratch:
        scratch.execute("CREATE VIRTUAL TABLE terms USING fts5vocab(texts, 'instance')")
        scratch.executemany("INSERT INTO texts(rowid, body) VALUES (?, ?)", enumerate(texts, 1))
        for doc, term in scratch.execute("SELECT doc, term FROM terms ORDER BY doc, offset"):
            out[doc - 1].append(term)
    return [tuple(words) for words in out]


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
        self._hide_private = False
        self._scope: tuple[str, ...] = ()

    # -- opening and closing -------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, create: bool = True, hide_private: bool = False,
             scope: Sequence[str] = ()) -> "Store":
        """Open (and with `create`, make) the index at `path`, upgrading an older schema.

        A missing parent folder is created 0700 and the file 0600 whatever the umask; an existing
        file, -wal or -shm that is more open is tightened (an existing folder is not: it may be the
        user's own or a shared one; see files.open_folder_warning). When the file cannot be written
        here (read-only media, another user's index) and `create` is off, it is opened read-only: it
        can be searched, not indexed. With `create` off the connection is a reader (SQLite's mode=ro
        and query_only, after a short read-write open when the schema needs an upgrade), which never
        checkpoints or removes the -wal/-shm files. A writer uses WAL, synchronous=NORMAL,
        secure_delete=ON, foreign_keys=ON; both wait up to 10 s for a lock, so a searcher can open
        and read while another process is writing.

        With `hide_private` (a store that serves an agent), every read leaves out the notes marked private
        (files.private, see `refresh_private`): the searches filter them in SQL, so that each list still holds
        up to its limit of other passages. `scope` (folder keys as `puremind.vault.folder_key` makes them, e.g.
        "work/"): every read leaves out the notes outside those folders, the same way (empty: the whole vault).

        Raises:
            StoreError: create=False and there is no file ("no index at PATH"); the file is not an
                SQLite database, is another program's database, is damaged, or was written by a
                newer pureMind; the file or its folder cannot be created, opened or written
                (permissions, read-only filesystem, disk full) or stayed locked too long.
        """
        store = cls._open(path, create=create)
        store._hide_private = hide_private
        store._scope = _scope_keys(scope)
        return store

    @classmethod
    def _open(cls, path: Path, *, create: bool) -> "Store":
        path = Path(path).expanduser().absolute()
        try:
            if create:
                files.make_parent(path)
                files.create_file(path)
            elif not path.exists():
                raise StoreError(f"no index at {path}", hint="run `puremind index`")
            files.tighten_all(path)
        except OSError as exc:
            raise from_os(path, exc, "create" if create else "open") from exc
        if not create:
            if not files.writable(path):
                return cls._open_reader(path, media_read_only=True)
            store = cls._open_reader(path, media_read_only=False, upgrade_ok=True)
            if store is not None:
                return store
        store = cls._open_writer(path)
        if create:
            return store
        # The schema was just brought up to date; read through a read-only connection from here on.
        store.close()
        reader = cls._open_reader(path, media_read_only=False)
        assert reader is not None
        return reader

    @classmethod
    def _open_writer(cls, path: Path) -> "Store":
        conn = _connect_and_migrate(path)
        files.tighten_all(path)  # the -wal and -shm files exist only now
        return cls(conn, path)

    @classmethod
    def _open_reader(cls, path: Path, *, media_read_only: bool, upgrade_ok: bool = False) -> "Store | None":
        """Open the index for reading only (SQLite's mode=ro with query_only), as search, get, recent and the
        server do. A read-only connection never checkpoints or deletes the -wal and -shm files when it closes, so
        a reader still holding an old file after `puremind index --rebuild` swapped in a new one cannot touch the
        new file's side files by name.

        `media_read_only`: this process cannot write the file. When mode=ro cannot open it either (SQLite needs
        the -shm file, which cannot be created on read-only media), it is opened as a file nothing changes
        (immutable=1), but only when there is no -wal file with content that immutable reading would ignore.
        `upgrade_ok`: the caller may write the file; an older schema then returns None (open a writer to upgrade).

        Raises:
            StoreError: the file cannot be read, is not a pureMind index, was written by a newer pureMind, or has
                an older schema that cannot be upgraded here (read-only).
        """
        quoted = urllib.parse.quote(str(path))
        queries = ["mode=ro"]
        if media_read_only:
            queries.append("mode=ro&immutable=1")
        first: sqlite3.Error | None = None
        for query in queries:
            if query.endswith("immutable=1") and not _may_read_immutable(path, first):
                break
            conn: sqlite3.Connection | None = None
            try:
                conn = sqlite3.connect(f"file:{quoted}?{query}", uri=True, isolation_level=None,
                                       timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                conn.execute("PRAGMA query_only = ON")
                conn.execute("PRAGMA foreign_keys = ON")
                version = current_version(conn)
                foreign = version == 0 and conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' LIMIT 1").fetchone() is not None
            except sqlite3.Error as exc:
                _close_quietly(conn)
                first = first or exc
                continue
            if version == LATEST_VERSION:
                return cls(conn, path)
            _close_quietly(conn)
            if version > LATEST_VERSION:
                raise StoreError(f"index {path} was written by a newer pureMind", hint="upgrade pureMind")
            if foreign:
                raise StoreError(f"index {path} is an SQLite database but not a pureMind index",
                                 hint="point PUREMIND_DB (or --db) at a pureMind index, or at a new file")
            if upgrade_ok:
                return None
            if version == 0:
                raise StoreError(f"index {path} is empty and read-only: it is not a pureMind index yet",
                                 hint="run `puremind index` where the index can be written")
            raise StoreError(
                f"index {path} was written by an older pureMind and cannot be upgraded here: it is read-only",
                hint="run `puremind index` once where the index can be written, or search with that version",
            )
        assert first is not None
        raise from_sqlite(path, first, "open") from first

    @_guarded("read")
    def check_integrity(self) -> None:
        """A quick check of every page of the index (SQLite's quick_check: structure, not the text of each row),
        run at the start of an index run so that a damaged file is never taken for "unchanged".

        Raises:
            IndexDamaged: the check found damage (repaired by `puremind index --rebuild`).
        """
        rows = self._db.execute("PRAGMA quick_check(3)").fetchall()
        if [tuple(row) for row in rows] != [("ok",)]:
            found = "; ".join(str(row[0]) for row in rows)
            raise IndexDamaged(f"index {self._path} is damaged: {one_line(found)}", hint=REPAIR_HINT)

    @property
    def path(self) -> Path:
        """The index file's absolute path."""
        return self._path

    def _public(self, files_alias: str) -> str:
        """An SQL condition on the files row `files_alias`: true for every note, or, when this store hides
        private notes or serves a scope, for the notes it may show (not private, inside a scope folder)."""
        conditions = [f"NOT {files_alias}.private"] if self._hide_private else []
        if self._scope:
            # Folder keys are plain text (no NUL: see _scope_keys), quoted as SQL string literals. A note that is
            # a symlink is in scope when the note it leads to is as well.
            def inside(column: str) -> str:
                return "(" + " OR ".join(
                    f"substr({files_alias}.{column}, 1, {len(key)}) = '{key.replace(chr(39), chr(39) * 2)}'"
                    for key in self._scope) + ")"

            conditions.append(inside("path_key"))
            conditions.append(f"({files_alias}.target_key = '' OR {inside('target_key')})")
        return " AND ".join(conditions) or "1"

    def _public_file(self, file_id: str) -> str:
        """An SQL condition on a file id expression: true for every note, or, when this store hides private notes
        or serves a scope, for the notes it may show."""
        if not self._hide_private and not self._scope:
            return "1"
        if not self._scope:
            return f"{file_id} NOT IN (SELECT id FROM files WHERE private)"
        return f"{file_id} IN (SELECT pf.id FROM files AS pf WHERE {self._public('pf')})"

    def _public_chunk(self, chunk_id: str) -> str:
        """An SQL condition on a chunk id expression: true for every chunk, or, when this store hides private
        notes or serves a scope, for the chunks of the notes it may show."""
        if not self._hide_private and not self._scope:
            return "1"
        if not self._scope:  # the private notes are few: the shorter list
            return (f"{chunk_id} NOT IN (SELECT pc.id FROM files AS pf JOIN chunks AS pc ON pc.file_id = pf.id"
                    " WHERE pf.private)")
        return (f"{chunk_id} IN (SELECT pc.id FROM files AS pf JOIN chunks AS pc ON pc.file_id = pf.id"
                f" WHERE {self._public('pf')})")

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

    # -- the embedding fingerprint, kept beside the vectors ---------------------------------------------------

    def embed_fingerprint(self) -> str | None:
        """The fingerprint of the embedder that wrote this index's vectors (see puremind.fingerprint); None when
        no embedder ever wrote it. It stays when the vectors are cleared, until a new embedder writes.

        Raises:
            StoreError: the index cannot be read.
        """
        return self.get_meta(META_FINGERPRINT)

    def vectors_fingerprint(self) -> str | None:
        """The embed fingerprint when the index holds vectors; None when it holds none (anything may write)."""
        stored = self.embed_fingerprint()
        if stored is None or self.counts().get("vectors", 0) == 0:
            return None
        return stored

    def vectors_match(self, fingerprint: str) -> bool:
        """Whether vectors fingerprinted `fingerprint` may be compared with (or added to) this index's vectors:
        the same model, revision and settings, or no vectors yet. The precision does not count."""
        stored = self.vectors_fingerprint()
        return stored is None or same_vectors(stored, fingerprint)

    def check_vectors(self, fingerprint: str, *, doing: str) -> None:
        """Refuse vectors of another embedder.

        Raises:
            FingerprintMismatch: the index holds vectors with another fingerprint (both models are named; `doing`
                says what is refused, e.g. "searches are refused").
            StoreError: the index cannot be read.
        """
        stored = self.vectors_fingerprint()
        if stored is not None and not same_vectors(stored, fingerprint):
            raise index_mismatch(stored, fingerprint, doing=doing)

    def set_embed_fingerprint(self, fingerprint: str) -> None:
        """Record the embedder that writes this index's vectors (joins the open batch).

        Raises:
            StoreError: the index cannot be written.
        """
        self.set_meta(META_FINGERPRINT, fingerprint)

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
        self, path: str, sha256: str, size: int, mtime_ns: int, chunks: list[ChunkRow], *, identity: str = "",
        title: str = "", aliases: tuple[str, ...] = (), private_mark: bool = False, private: bool = False,
        target: str = "",
    ) -> None:
        """Insert or replace the file `path` and all its chunks (the old chunks and their FTS
        entries are deleted), with the note's title and aliases (searched by `search_titles`). Needs an open
        batch. `private_mark`: the note's frontmatter says `private: true`; `private`: the note is kept from
        agents (its mark, or a private folder; see `refresh_private`). `target`: for a note that is a symlink, the
        vault-relative path of the note it leads to (see `refresh_targets`).

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
            "INSERT INTO files (path, sha256, size, mtime_ns, indexed_at, identity, title, aliases, private_mark,"
            " private, path_key, target, target_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT(path) DO UPDATE SET sha256 = excluded.sha256, size = excluded.size,"
            " mtime_ns = excluded.mtime_ns, indexed_at = excluded.indexed_at, identity = excluded.identity,"
            " title = excluded.title, aliases = excluded.aliases, private_mark = excluded.private_mark,"
            " private = excluded.private, target = excluded.target, target_key = excluded.target_key"
            " RETURNING id",
            (path, sha256, int(size), int(mtime_ns), time.time(), identity, title, "\n".join(aliases),
             int(bool(private_mark)), int(bool(private or private_mark)), path_key(path), target,
             path_key(target)),
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
        # Kept vectors of text that is indexed again now live in `chunks`.
        conn.executemany(
            "DELETE FROM orphan_vectors WHERE text_sha256 = ?",
            [(chunk.text_sha256,) for chunk in chunks if chunk.vector is not None],
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
    def refresh_private(self, in_private_folder: Callable[[str], bool] | None) -> int:
        """Mark each note private when its frontmatter says so (private_mark) or `in_private_folder(path)` (or of the
        note it leads to, for a symlink) (None:
        no folder is private), and public otherwise: a change of the configured folders takes effect without
        reading a note again. Needs an open batch. Returns how many notes changed.

        Raises:
            RuntimeError: no batch is open.
            StoreError: the index cannot be written.
        """
        conn = self._require_batch("refresh_private")
        if in_private_folder is None:
            return conn.execute("UPDATE files SET private = private_mark WHERE private != private_mark").rowcount
        rows = conn.execute("SELECT id, path, target, private_mark, private FROM files").fetchall()
        # A note that is a symlink is private when either its own path or the note it leads to is.
        changed = [(int(want), file_id) for file_id, path, target, mark, now in rows
                   if (want := bool(mark) or in_private_folder(path) or bool(target and in_private_folder(target)))
                   != bool(now)]
        conn.executemany("UPDATE files SET private = ? WHERE id = ?", changed)
        return len(changed)

    @_guarded("write")
    def refresh_targets(self, targets: Mapping[str, str]) -> int:
        """Record, for each note that is a symlink, the note it leads to (`targets`: path -> vault-relative target,
        as the walk found it); every other note gets none. Needs an open batch. Returns how many notes changed.

        Raises:
            RuntimeError: no batch is open.
            StoreError: the index cannot be written.
        """
        conn = self._require_batch("refresh_targets")
        rows = conn.execute("SELECT id, path, target FROM files WHERE target != '' OR path IN"
                            " (SELECT value FROM json_each(?))", (json.dumps(list(targets)),)).fetchall()
        changed = [(want, path_key(want), file_id) for file_id, path, now in rows
                   if (want := targets.get(path, "")) != now]
        conn.executemany("UPDATE files SET target = ?, target_key = ? WHERE id = ?", changed)
        return len(changed)

    @_guarded("read")
    def is_private(self, path: str) -> bool:
        """Whether the note indexed under `path` is marked private (False when it is not indexed).

        Raises:
            StoreError: the index cannot be read.
        """
        row = self._db.execute("SELECT private FROM files WHERE path = ?", (path,)).fetchone()
        return bool(row and row[0])

    @_guarded("read")
    def private_count(self) -> int:
        """How many indexed notes are kept from agents.

        Raises:
            StoreError: the index cannot be read.
        """
        return int(self._db.execute("SELECT count(*) FROM files WHERE private").fetchone()[0])

    @_guarded("write")
    def remove_file(self, path: str, *, keep_vectors_for: str | None = None) -> None:
        """Delete the file `path`, its chunks and their FTS entries; nothing happens when it is not
        indexed. Needs an open batch.

        With `keep_vectors_for` (the fingerprint of the model that made the stored vectors), the chunks'
        vectors are kept aside by text hash, with no text, for `vector_for` (see `prune_orphan_vectors`).

        Raises:
            RuntimeError: no batch is open.
            StoreError: the index cannot be written.
        """
        conn = self._require_batch("remove_file")
        row = conn.execute("SELECT id FROM files WHERE path = ?", (path,)).fetchone()
        if row is None:
            return
        if keep_vectors_for is not None:
            # Text still indexed elsewhere keeps its vector in `chunks`: not kept twice.
            conn.execute(
                "INSERT INTO orphan_vectors (text_sha256, fingerprint, vector, removed_at)"
                " SELECT c.text_sha256, ?, c.vector, ? FROM chunks AS c"
                " WHERE c.file_id = ? AND c.vector IS NOT NULL AND NOT EXISTS"
                " (SELECT 1 FROM chunks AS o WHERE o.text_sha256 = c.text_sha256 AND o.file_id != c.file_id)"
                " GROUP BY c.text_sha256"
                " ON CONFLICT (text_sha256, fingerprint) DO UPDATE SET vector = excluded.vector,"
                " removed_at = excluded.removed_at",
                (keep_vectors_for, time.time(), row[0]),
            )
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
        conn.execute("DELETE FROM orphan_vectors")

    @_guarded("write")
    def prune_orphan_vectors(
        self, *, fingerprint: str | None = None, removed_before: float | None = None, max_rows: int | None = None
    ) -> int:
        """Forget kept vectors of removed notes: those made by another model than `fingerprint` (when
        given), those removed before `removed_before` (seconds since the epoch, when given), and all but the
        `max_rows` most recently removed (when given; 0 forgets all). Needs an open batch. Returns how many
        were forgotten.

        Raises:
            RuntimeError: no batch is open.
            StoreError: the index cannot be written.
        """
        conn = self._require_batch("prune_orphan_vectors")
        removed = 0
        if fingerprint is not None:
            removed += conn.execute("DELETE FROM orphan_vectors WHERE fingerprint != ?", (fingerprint,)).rowcount
        if removed_before is not None:
            removed += conn.execute("DELETE FROM orphan_vectors WHERE removed_at < ?", (removed_before,)).rowcount
        if max_rows is not None:
            removed += conn.execute(
                "DELETE FROM orphan_vectors WHERE rowid NOT IN"
                " (SELECT rowid FROM orphan_vectors ORDER BY removed_at DESC LIMIT ?)",
                (max(0, int(max_rows)),),
            ).rowcount
        return removed

    @_guarded("read")
    def vector_for(self, text_sha256: str, *, fingerprint: str | None = None) -> numpy.ndarray | None:
        """A stored vector of a chunk whose embedded text has this sha256 (float16 copy), or None. With
        `fingerprint`, a kept vector of a removed note made by that model also counts.

        Raises:
            StoreError: the index cannot be read.
        """
        row = self._db.execute(
            "SELECT vector FROM chunks WHERE text_sha256 = ? AND vector IS NOT NULL LIMIT 1",
            (text_sha256,),
        ).fetchone()
        if row is None and fingerprint is not None:
            row = self._db.execute(
                "SELECT vector FROM orphan_vectors WHERE text_sha256 = ? AND fingerprint = ?",
                (text_sha256, fingerprint),
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

    @_guarded("read")
    def cjk_term_counts(self, terms: list[str], cap: int = TERM_COUNT_CAP) -> dict[str, int]:
        """How many passages of the characters-and-pairs index hold each of `terms` (grams as puremind.cjk makes
        them), each counted up to `cap`: term -> count, so that a search can match a long query's rarest grams.
        Each count reads at most `cap` rows of the term's list, however large the index.

        Raises:
            QueryError: FTS5 rejected a term.
            StoreError: the index cannot be read.
        """
        sql = ("SELECT count(*) FROM (SELECT 1 FROM chunks_cjk WHERE chunks_cjk MATCH ?"
               f" AND {self._public_chunk('chunks_cjk.rowid')} LIMIT ?)")
        return {t: self._match_rows(sql, ('"' + t.replace('"', '""') + '"', int(cap)))[0][0]
                for t in dict.fromkeys(terms)}

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
    def note_scores(self, paths: list[str], match: str, max_chars: int = NOTE_SCORE_CHARS) -> dict[str, float]:
        """BM25 of each whole note among the notes `paths` (their chunks' texts in order, at most `max_chars`
        characters of each), for the FTS5 MATCH expression `match`: path -> -bm25, higher is better, for the notes
        that match. The statistics (how rare a word is, how long a note is) are those of these notes only: a
        passage's note is judged against the other notes its search found, with the index's own tokenizer.

        Raises:
            QueryError: FTS5 rejected `match`.
            StoreError: the index cannot be read.
        """
        wanted = list(dict.fromkeys(paths))
        if not wanted:
            return {}
        bodies: dict[str, list[str]] = {p: [] for p in wanted}
        sizes = dict.fromkeys(wanted, 0)
        rows = self._db.execute(
            "SELECT f.path, c.text FROM chunks AS c JOIN files AS f ON f.id = c.file_id"
            f" WHERE f.path IN (SELECT value FROM json_each(?)) AND c.ord < ? AND {self._public('f')}"
            " ORDER BY f.path, c.ord",
            (json.dumps(wanted), _NOTE_SCORE_CHUNKS),
        )
        for path, text in rows:
            if sizes[path] < max_chars:
                bodies[path].append(text[: max_chars - sizes[path]])
                sizes[path] += len(text)
        return bm25_scores({p: "\n\n".join(parts) for p, parts in bodies.items()}, match)

    @_guarded("read")
    def search_titles(self, match: str, limit: int) -> list[TitleHit]:
        """BM25 over the notes' titles and aliases (weights 1.0 and 0.8), best first: up to `limit` notes.

        Raises:
            QueryError: FTS5 rejected `match`.
            StoreError: the index cannot be read.
        """
        if limit <= 0:
            return []
        rows = self._match_rows(
            "SELECT f.id, f.path, f.title, f.aliases, -bm25(notes_fts, 1.0, 0.8) FROM notes_fts"
            f" JOIN files AS f ON f.id = notes_fts.rowid WHERE notes_fts MATCH ? AND {self._public('f')}"
            " ORDER BY bm25(notes_fts, 1.0, 0.8), f.id LIMIT ?",
            (match, int(limit)),
        )
        return [_title_hit(*row) for row in rows]

    @_guarded("read")
    def notes_titled(self, names: list[str]) -> list[TitleHit]:
        """The notes whose title or one of whose aliases is exactly one of `names` (compared casefolded and in
        NFC by the caller: pass them so), by path.

        Raises:
            StoreError: the index cannot be read.
        """
        wanted = {n for n in names if any(ch.isalnum() for ch in n)}
        if not wanted:
            return []
        rows = self._match_rows(
            "SELECT f.id, f.path, f.title, f.aliases, 0.0 FROM notes_fts JOIN files AS f ON f.id = notes_fts.rowid"
            f" WHERE notes_fts MATCH ? AND {self._public('f')} ORDER BY f.path",
            (" OR ".join('"' + n.replace('"', '""') + '"' for n in sorted(wanted)),),
        )
        hits = [_title_hit(*row) for row in rows]
        return [h for h in hits if any(_title_key(n) in wanted for n in (h.title, *h.aliases) if n)]

    @_guarded("read")
    def chunk_files(self, chunk_ids: list[int]) -> dict[int, int]:
        """chunk id -> the id of its note's file (ids that no longer exist are left out).

        Raises:
            StoreError: the index cannot be read.
        """
        return self._id_map("SELECT id, file_id FROM chunks WHERE id IN (SELECT value FROM json_each(?))"
                            f" AND {self._public_chunk('id')}", chunk_ids)

    @_guarded("read")
    def best_chunk_of(self, file_ids: list[int]) -> dict[int, int]:
        """file id -> id of the chunk a note found by its title is shown by: its first chunk.

        Raises:
            StoreError: the index cannot be read.
        """
        return self._id_map(
            "SELECT file_id, MIN(id) FROM chunks WHERE file_id IN (SELECT value FROM json_each(?))"
            + f" AND {self._public_file('file_id')}"
            + " GROUP BY file_id",
            file_ids,
        )

    def _id_map(self, sql: str, ids: list[int]) -> dict[int, int]:
        """`sql` (two id columns, one `json_each(?)` of the ids) as a dict; {} for no ids."""
        if not ids:
            return {}
        return dict(self._db.execute(sql, (json.dumps([int(i) for i in ids]),)).fetchall())

    def _match_rows(self, sql: str, params: tuple) -> list[tuple]:
        """The rows of an FTS5 MATCH query. Raises QueryError when FTS5 rejects the expression (SQLITE_ERROR),
        StoreError for trouble with the index itself."""
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            # FTS5 rejects a bad expression with the generic SQLITE_ERROR ("fts5: syntax error near
            # ...", "unterminated string", "no such column: x"); storage trouble has its own codes.
            if getattr(exc, "sqlite_errorcode", 1) & 0xFF == _SQLITE_ERROR:
                raise QueryError(f"the search expression cannot be used: {one_line(exc)}") from exc
            raise from_sqlite(self._path, exc, "read") from exc
        except sqlite3.Error as exc:
            raise from_sqlite(self._path, exc, "read") from exc

    @_guarded("read")
    def _search_fts(self, table: str, rank: str, snippet: str, match: str, limit: int) -> list[Hit]:
        if limit <= 0:
            return []
        # The best `limit` first, by rank alone; then the passages, their notes and snippets of those only. In one
        # query SQLite reads the text and makes a snippet of every passage that matches before it sorts: with a
        # common word (or character pair) that is most of the index (issue 33).
        ranked = self._match_rows(
            f"SELECT rowid, -{rank} FROM {table} WHERE {table} MATCH ? AND {self._public_chunk(table + '.rowid')}"
            f" ORDER BY {rank}, rowid LIMIT ?",
            (match, int(limit)),
        )
        found = {
            row[0]: row
            for row in self._match_rows(
                "SELECT c.id, f.path, c.heading_path, c.start_line, c.end_line, c.text, "
                f"{snippet}, f.title, f.private"
                f" FROM {table}"
                f" JOIN chunks AS c ON c.id = {table}.rowid"
                " JOIN files AS f ON f.id = c.file_id"
                f" WHERE {table} MATCH ? AND {table}.rowid IN (SELECT value FROM json_each(?))"
                f" AND {self._public('f')}",
                (match, json.dumps([chunk_id for chunk_id, _ in ranked])),
            )
        } if ranked else {}
        rows = [(*found[cid][:5], score, *found[cid][5:]) for cid, score in ranked if cid in found]
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
                excerpt=clip_excerpt(row[7] if row[7] and row[7].strip() else row[6], passage=row[6]),
                title=row[8],
                private=bool(row[9]),
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
        conn.execute("INSERT INTO notes_fts(notes_fts) VALUES ('rebuild')")
        self._mark_compact_pending(conn)

    @_guarded("read")
    def vectors(self) -> tuple[numpy.ndarray, numpy.ndarray]:
        """Every stored vector: (chunk ids int64 of shape (n,), float16 matrix (n, d)), by chunk id (those of
        private notes left out when this store hides them).

        One query; the matrix is a writable array over the joined bytes. An index without
        vectors gives arrays of shape (0,) and (0, 0).

        Raises:
            StoreError: the index cannot be read, or holds vectors of different sizes.
        """
        rows = self._db.execute(
            "SELECT id, vector FROM chunks WHERE vector IS NOT NULL"
            + f" AND {self._public_file('file_id')}"
            + " ORDER BY id"
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
        """The chunks with these ids, in the order asked, as Hits with score 0 and the start of the
        text as excerpt (see clip_excerpt). Ids that no longer exist are left out.

        Raises:
            StoreError: the index cannot be read.
        """
        wanted = [int(i) for i in ids]
        if not wanted:
            return []
        rows = self._db.execute(
            "SELECT c.id, f.path, c.heading_path, c.start_line, c.end_line, c.text, f.title, f.private"
            " FROM chunks AS c JOIN files AS f ON f.id = c.file_id"
            f" WHERE c.id IN (SELECT value FROM json_each(?)) AND {self._public('f')}",
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
                excerpt=clip_excerpt(row[5]),
                title=row[6],
                private=bool(row[7]),
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
    def chunks_missing_vectors(self) -> list[tuple[int, str]]:
        """(chunk id, text sha256) of every chunk without a vector, note by note in the order they were indexed:
        what the second phase of an index run embeds.

        Raises:
            StoreError: the index cannot be read.
        """
        return [
            (row[0], row[1])
            for row in self._db.execute(
                "SELECT id, text_sha256 FROM chunks WHERE vector IS NULL ORDER BY file_id, ord"
            ).fetchall()
        ]

    @_guarded("read")
    def embed_sources(self, ids: list[int]) -> dict[int, tuple[str, str, str, tuple[str, ...], str]]:
        """For these chunk ids (those that still exist): (text sha256, note path, note title, heading path, text),
        from which the indexer makes the text the embedder reads (`indexer.embed_text`).

        Raises:
            StoreError: the index cannot be read.
        """
        if not ids:
            return {}
        rows = self._db.execute(
            "SELECT c.id, c.text_sha256, f.path, f.title, c.heading_path, c.text FROM chunks AS c"
            " JOIN files AS f ON f.id = c.file_id WHERE c.id IN (SELECT value FROM json_each(?))",
            (json.dumps([int(i) for i in ids]),),
        ).fetchall()
        return {row[0]: (row[1], row[2], row[3] or "", _heading_path(row[4]), row[5]) for row in rows}

    @_guarded("write")
    def set_vectors(self, rows: list[tuple[int, str, numpy.ndarray]]) -> int:
        """Give chunks their vectors: (chunk id, the sha256 of the text the vector was made from, vector). A chunk
        is only written when it still has that text and no vector yet, so a note changed meanwhile never gets the
        vector of its old text. Needs an open batch. Returns how many chunks were written.

        Raises:
            RuntimeError: no batch is open.
            ValueError: a vector is not a non-empty 1-D array of float16-sized values.
            StoreError: the index cannot be written.
        """
        conn = self._require_batch("set_vectors")
        written = 0
        for chunk_id, sha, vector in rows:
            written += conn.execute(
                "UPDATE chunks SET vector = ? WHERE id = ? AND text_sha256 = ? AND vector IS NULL",
                (_vector_bytes(vector), int(chunk_id), sha),
            ).rowcount
        conn.executemany("DELETE FROM orphan_vectors WHERE text_sha256 = ?", [(sha,) for _, sha, _ in rows])
        return written

    @_guarded("read")
    def vector_coverage(self) -> tuple[int, int]:
        """(notes whose every chunk has a vector, notes): how much of the index meaning search covers.

        Raises:
            StoreError: the index cannot be read.
        """
        files_n, partial = self._db.execute(
            "SELECT (SELECT count(*) FROM files),"
            " (SELECT count(DISTINCT file_id) FROM chunks WHERE vector IS NULL)"
        ).fetchone()
        return files_n - partial, files_n

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
            "SELECT f.path, f.sha256, f.size, f.mtime_ns, f.indexed_at FROM files AS f WHERE f.mtime_ns >= ?"
            f" AND {self._public('f')} ORDER BY f.mtime_ns DESC, f.path LIMIT ?",
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
                conn.execute("INSERT INTO notes_fts (notes_fts) VALUES ('optimize')")
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


def _may_read_immutable(path: Path, error: sqlite3.Error | None) -> bool:
    """Whether an index that mode=ro could not open may be read as immutable: only when SQLite could not open or
    set up its side files (read-only media), not when it was busy or found damage, and only when no -wal file
    holds changes that immutable reading would silently skip."""
    name = getattr(error, "sqlite_errorname", "") or ""
    if not (name.startswith("SQLITE_CANTOPEN") or name.startswith("SQLITE_READONLY")):
        return False
    wal = path.with_name(path.name + "-wal")
    try:
        return wal.stat().st_size == 0
    except FileNotFoundError:
        return True
    except OSError:
        return False


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


def _title_hit(file_id: int, path: str, title: str, aliases: str, score: float | None) -> TitleHit:
    """A TitleHit from a files row (aliases are stored one per line)."""
    return TitleHit(file_id, path, title, tuple(a for a in aliases.split("\n") if a), float(score or 0.0))


def _scope_keys(scope: Sequence[str]) -> tuple[str, ...]:
    """The scope's folder keys, checked: each non-empty, ending in "/" and free of NUL (they become SQL literals).

    Raises:
        ValueError: a key that `puremind.vault.folder_key` would never make.
    """
    keys = tuple(dict.fromkeys(scope))
    for key in keys:
        if not key or not key.endswith("/") or "\0" in key or key != path_key(key):
            raise ValueError(f"not a scope folder key: {key!r}")
    return keys
