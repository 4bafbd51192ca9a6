"""The index schema as numbered migrations, each applied in its own transaction and recorded.

An index is only ever read by code that knows its newest migration: an older index is upgraded on
open, a newer one is refused (see `migrate`). Add a migration by appending to MIGRATIONS; never
edit one that has shipped.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Callable, Union

Step = Union[str, Callable[[sqlite3.Connection], None]]

#: The tokenizer of the keyword indexes (chunks_fts, notes_fts): an English stemmer over Unicode words.
KEYWORD_TOKENIZER = "porter unicode61 remove_diacritics 2"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    # SQL statements (one per string) or callables; run in order inside the migration's transaction.
    # Not a script: Connection.executescript() would COMMIT first and break the transaction.
    steps: tuple[Step, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "files, chunks, FTS5 keyword index, meta",
        (
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            """CREATE TABLE files (
                id INTEGER PRIMARY KEY,
                path TEXT UNIQUE NOT NULL,
                sha256 TEXT NOT NULL,
                size INTEGER NOT NULL,
                mtime_ns INTEGER NOT NULL,
                indexed_at REAL NOT NULL
            )""",
            # The vector sits before the long text columns: a row larger than a page spills into
            # overflow pages, and reading a column means walking the chain up to it, so loading every
            # vector touches only the first overflow page of each row instead of all its text.
            """CREATE TABLE chunks (
                id INTEGER PRIMARY KEY,
                file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
                ord INTEGER NOT NULL,
                start_line INTEGER NOT NULL,
                end_line INTEGER NOT NULL,
                kind TEXT NOT NULL,
                text_sha256 TEXT NOT NULL,
                vector BLOB,
                heading_path TEXT NOT NULL,
                heading_text TEXT NOT NULL,
                text TEXT NOT NULL
            )""",
            "CREATE INDEX chunks_text_sha256 ON chunks(text_sha256)",
            "CREATE INDEX chunks_file_id ON chunks(file_id)",
            # External content: FTS5 reads column values from `chunks` by these names, so the FTS
            # columns are named exactly like the content columns (heading_text, text).
            f"""CREATE VIRTUAL TABLE chunks_fts USING fts5(
                heading_text, text,
                content='chunks', content_rowid='id',
                tokenize='{KEYWORD_TOKENIZER}'
            )""",
            """CREATE TRIGGER chunks_fts_ai AFTER INSERT ON chunks BEGIN
                INSERT INTO chunks_fts(rowid, heading_text, text)
                VALUES (new.id, new.heading_text, new.text);
            END""",
            """CREATE TRIGGER chunks_fts_ad AFTER DELETE ON chunks BEGIN
                INSERT INTO chunks_fts(chunks_fts, rowid, heading_text, text)
                VALUES ('delete', old.id, old.heading_text, old.text);
            END""",
            # Only text changes touch the FTS index: clearing vectors on 100k rows must not rewrite it.
            """CREATE TRIGGER chunks_fts_au AFTER UPDATE OF id, heading_text, text ON chunks BEGIN
                INSERT INTO chunks_fts(chunks_fts, rowid, heading_text, text)
                VALUES ('delete', old.id, old.heading_text, old.text);
                INSERT INTO chunks_fts(rowid, heading_text, text)
                VALUES (new.id, new.heading_text, new.text);
            END""",
        ),
    ),
    Migration(
        2,
        "files.identity: device, inode and ctime of the file read, so a same-size, same-mtime swap is noticed",
        # '' for rows of an older index: their next run hashes them once (cheap) to fill it in.
        ("ALTER TABLE files ADD COLUMN identity TEXT NOT NULL DEFAULT ''",),
    ),
    Migration(
        3,
        "chunks.cjk_text and its FTS5 index: Chinese, Japanese and Korean runs as characters and pairs",
        (
            "ALTER TABLE chunks ADD COLUMN cjk_text TEXT NOT NULL DEFAULT ''",
            lambda conn: _fill_cjk_text(conn),
            """CREATE VIRTUAL TABLE chunks_cjk USING fts5(
                cjk_text, content='chunks', content_rowid='id', tokenize='unicode61'
            )""",
            "INSERT INTO chunks_cjk(chunks_cjk) VALUES ('rebuild')",
            """CREATE TRIGGER chunks_cjk_ai AFTER INSERT ON chunks BEGIN
                INSERT INTO chunks_cjk(rowid, cjk_text) VALUES (new.id, new.cjk_text);
            END""",
            """CREATE TRIGGER chunks_cjk_ad AFTER DELETE ON chunks BEGIN
                INSERT INTO chunks_cjk(chunks_cjk, rowid, cjk_text) VALUES ('delete', old.id, old.cjk_text);
            END""",
            """CREATE TRIGGER chunks_cjk_au AFTER UPDATE OF id, cjk_text ON chunks BEGIN
                INSERT INTO chunks_cjk(chunks_cjk, rowid, cjk_text) VALUES ('delete', old.id, old.cjk_text);
                INSERT INTO chunks_cjk(rowid, cjk_text) VALUES (new.id, new.cjk_text);
            END""",
        ),
    ),
    Migration(
        4,
        "orphan_vectors: vectors of removed notes by chunk text hash and model, for a note that comes back",
        (
            # No text: only the hash of a chunk's embedded text, the fingerprint of the model that made the
            # vector, the vector and when its note was removed (for pruning). Never searched.
            """CREATE TABLE orphan_vectors (
                text_sha256 TEXT NOT NULL,
                fingerprint TEXT NOT NULL,
                vector BLOB NOT NULL,
                removed_at REAL NOT NULL,
                PRIMARY KEY (text_sha256, fingerprint)
            )""",
            "CREATE INDEX orphan_vectors_removed_at ON orphan_vectors(removed_at)",
        ),
    ),
    Migration(
        5,
        "files.title and files.aliases and their FTS5 index: a note is found by what it is called",
        (
            "ALTER TABLE files ADD COLUMN title TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE files ADD COLUMN aliases TEXT NOT NULL DEFAULT ''",  # one per line
            # Until a run reads the note again (the chunker signature changed with this), its file name.
            lambda conn: _fill_titles(conn),
            f"""CREATE VIRTUAL TABLE notes_fts USING fts5(
                title, aliases, content='files', content_rowid='id',
                tokenize='{KEYWORD_TOKENIZER}'
            )""",
            "INSERT INTO notes_fts(notes_fts) VALUES ('rebuild')",
            """CREATE TRIGGER notes_fts_ai AFTER INSERT ON files BEGIN
                INSERT INTO notes_fts(rowid, title, aliases) VALUES (new.id, new.title, new.aliases);
            END""",
            """CREATE TRIGGER notes_fts_ad AFTER DELETE ON files BEGIN
                INSERT INTO notes_fts(notes_fts, rowid, title, aliases) VALUES ('delete', old.id, old.title, old.aliases);
            END""",
            # A touched stat (size, mtime) does not rewrite the keyword index.
            """CREATE TRIGGER notes_fts_au AFTER UPDATE OF id, title, aliases ON files BEGIN
                INSERT INTO notes_fts(notes_fts, rowid, title, aliases) VALUES ('delete', old.id, old.title, old.aliases);
                INSERT INTO notes_fts(rowid, title, aliases) VALUES (new.id, new.title, new.aliases);
            END""",
        ),
    ),
    Migration(
        6,
        "chunks.cjk_text also holds Thai, Lao, Khmer and Burmese runs as characters and pairs",
        # The update trigger of migration 3 keeps chunks_cjk in step.
        (lambda conn: _fill_cjk_text(conn, only_changed=True),),
    ),
    Migration(
        7,
        "files.private_mark and files.private: notes kept from agents (frontmatter `private: true`, or a folder "
        "of `[agents] private`)",
        (
            # What the note's own frontmatter says, as the last run read it.
            "ALTER TABLE files ADD COLUMN private_mark INTEGER NOT NULL DEFAULT 0",
            # private_mark, or the note lies in a private folder of the configuration of the last run: what the
            # searches that serve an agent leave out. Set by the next index run (the chunker signature changed
            # with this, so it reads every note again; vectors of unchanged text are reused).
            "ALTER TABLE files ADD COLUMN private INTEGER NOT NULL DEFAULT 0",
            "CREATE INDEX files_private ON files(private) WHERE private",
        ),
    ),
    Migration(
        8,
        "files.path_key, files.target, files.target_key: the note path NFC and casefolded, as an agent's scope "
        "folders are matched in SQL, and for a note that is a symlink the note it leads to",
        (
            "ALTER TABLE files ADD COLUMN path_key TEXT NOT NULL DEFAULT ''",
            # "" for a note that is no symlink; set by every index run from its walk (Store.refresh_targets)
            "ALTER TABLE files ADD COLUMN target TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE files ADD COLUMN target_key TEXT NOT NULL DEFAULT ''",
            lambda conn: _fill_path_keys(conn),
        ),
    ),
)


def _fill_path_keys(conn: sqlite3.Connection) -> None:
    """files.path_key of every note of an older index (see puremind.vault.path_key)."""
    from puremind.folders import path_key

    rows = conn.execute("SELECT id, path FROM files").fetchall()
    conn.executemany("UPDATE files SET path_key = ? WHERE id = ?", [(path_key(path), file_id) for file_id, path in rows])


def _fill_titles(conn: sqlite3.Connection) -> None:
    """The file name without its extension as the title of each note of an older index."""
    rows = conn.execute("SELECT id, path FROM files").fetchall()
    conn.executemany("UPDATE files SET title = ? WHERE id = ?", [(_stem(path), file_id) for file_id, path in rows])


def _stem(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    stem, dot, _ = name.rpartition(".")
    return stem if dot and stem else name


def _fill_cjk_text(conn: sqlite3.Connection, *, only_changed: bool = False) -> None:
    """Compute cjk_text for the chunks of an older index: all of them (before its FTS index and triggers exist),
    or, `only_changed`, those whose stored value differs from today's rule (so the update trigger rewrites only
    their FTS rows)."""
    from puremind.cjk import cjk_terms

    rows = conn.execute("SELECT id, heading_text, text, cjk_text FROM chunks")
    updates = [
        (terms, cid) for cid, heading, text, old in rows
        if (terms := cjk_terms(heading + "\n" + text)) != old and (terms or only_changed)
    ]
    conn.executemany("UPDATE chunks SET cjk_text = ? WHERE id = ?", updates)

LATEST_VERSION = MIGRATIONS[-1].version


class SchemaError(Exception):
    """The database cannot be migrated: it is newer than this code, or not a pureMind index."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


def _has_migrations_table(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    return row is not None


def current_version(conn: sqlite3.Connection) -> int:
    """The highest migration recorded in the database; 0 for a database without any."""
    if not _has_migrations_table(conn):
        return 0
    row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    return int(row[0] or 0)


def applied_versions(conn: sqlite3.Connection) -> list[int]:
    """Every recorded migration version, ascending."""
    if not _has_migrations_table(conn):
        return []
    return [int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def _check_not_newer(version: int, latest: int) -> None:
    if version > latest:
        raise SchemaError(
            f"was written by a newer pureMind (schema {version}; this version knows up to {latest})",
            hint="upgrade pureMind, or delete the index file to rebuild it with this version",
        )


def migrate(conn: sqlite3.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[int]:
    """Apply every pending migration, each in its own BEGIN IMMEDIATE transaction.

    Reads first and takes the write lock only when something is pending, so a reader opening an
    up-to-date index never waits for a writer. The version is read again under the lock because
    another process may have migrated in between. `conn` must be in autocommit mode
    (isolation_level=None) with no transaction open.

    Returns the versions applied (empty when the index was up to date).

    Raises:
        SchemaError: the database is newer than this code, or is a SQLite database that is not a
            pureMind index (tables but no schema_migrations).
        sqlite3.Error: the database cannot be read or written.
    """
    latest = migrations[-1].version
    version = current_version(conn)
    _check_not_newer(version, latest)
    if version >= latest:
        return []
    applied: list[int] = []
    for migration in migrations:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = current_version(conn)
            _check_not_newer(version, latest)
            if migration.version <= version:
                conn.execute("COMMIT")
                continue
            if version == 0:
                _refuse_foreign_database(conn)
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations"
                    " (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
                )
            for step in migration.steps:
                if callable(step):
                    step(conn)
                else:
                    conn.execute(step)
            conn.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                (migration.version, time.time()),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        applied.append(migration.version)
    return applied


def _refuse_foreign_database(conn: sqlite3.Connection) -> None:
    # Creating our tables inside some other program's database would damage it; refuse instead.
    row = conn.execute(
        "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' LIMIT 1"
    ).fetchone()
    if row is not None:
        raise SchemaError(
            "is an SQLite database but not a pureMind index",
            hint="point pureMind at another index path (PUREMIND_DB) or move that file away",
        )
