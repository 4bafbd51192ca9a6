"""Turning sqlite3 and OS errors about the index file into one-line StoreErrors that name it."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from puremind.errors import IndexBusyError, IndexDamaged, StoreError
from puremind.messages import one_line

# SQLite primary result codes (sqlite3 exposes them only from Python 3.11 on, and only some).
_PERM, _BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 3, 5, 6, 8, 10, 11, 13, 14, 26

REBUILD_HINT = "delete the index file (and its -wal and -shm files) and run `puremind index` to rebuild it"
#: For a damaged index: --rebuild builds a new file beside it and swaps it in, keeping the damaged one aside.
REPAIR_HINT = (
    "run `puremind index --rebuild`: it builds a new index from the notes beside this one and swaps it in "
    "(the damaged file is kept as <index>.damaged)"
)


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def from_sqlite(path: Path, exc: sqlite3.Error, action: str) -> StoreError:
    """A StoreError for an sqlite3 error met while doing `action` ("open", "read", "write") on `path`."""
    code = _primary_code(exc)
    reason = one_line(exc) or type(exc).__name__
    low = reason.lower()
    if code == _NOTADB or "file is not a database" in low:
        return StoreError(f"{path} is not a pureMind index (not an SQLite database)", hint=REBUILD_HINT)
    if code == _CORRUPT or "malformed" in low:
        return IndexDamaged(f"index {path} is damaged: {reason}", hint=REPAIR_HINT)
    if code == _FULL or "disk is full" in low:
        return StoreError(
            f"cannot write index {path}: the disk is full",
            hint="free some disk space, then run the command again",
        )
    if code == _READONLY or "readonly" in low or "read-only" in low:
        return StoreError(
            f"cannot write index {path}: it is read-only",
            hint="check the file's permissions and that its filesystem is mounted writable",
        )
    if code in (_BUSY, _LOCKED) or "locked" in low or "busy" in low:
        return IndexBusyError(
            f"index {path} is busy: another process kept it locked",
            hint="wait for the other pureMind process to finish, then try again",
        )
    if code in (_CANTOPEN, _PERM) or "unable to open" in low:
        return StoreError(
            f"cannot open index {path}: {reason}",
            hint="check that its folder exists and that you may read and write it",
        )
    if code == _IOERR or "disk i/o" in low:
        return StoreError(f"cannot {action} index {path}: input/output error ({reason})")
    return StoreError(f"cannot {action} index {path}: {reason}")


def from_os(path: Path, exc: OSError, action: str) -> StoreError:
    """A StoreError for an OSError met while creating or tightening the index file or its folder."""
    where = exc.filename if exc.filename else path
    reason = one_line(exc.strerror or exc)
    if exc.errno == errno.ENOSPC:
        return StoreError(
            f"cannot {action} index {path}: the disk is full",
            hint="free some disk space, then run the command again",
        )
    if exc.errno == errno.EROFS:
        return StoreError(
            f"cannot {action} index {path}: {where} is on a read-only filesystem",
            hint="set another index path (PUREMIND_DB) on a writable disk",
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return StoreError(
            f"cannot {action} index {path}: permission denied for {where}",
            hint="check the permissions of the index file and its folder",
        )
    place = "" if str(where) == str(path) else f" ({where})"
    return StoreError(
        f"cannot {action} index {path}: {reason}{place}",
        hint="check the index path (PUREMIND_DB or `db` in config.toml)",
    )
