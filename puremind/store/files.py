"""Creating the index file and its folder private to the user, and tightening them when an older
version (or a loose umask) left them more open.

The index is a second copy of the user's notes, so: folder 0700, file 0600 (and the -wal/-shm
files SQLite keeps beside it).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
SIDE_SUFFIXES = ("-wal", "-shm", "-journal")


def side_files(db: Path) -> list[Path]:
    """The files SQLite keeps beside `db` (they hold the same text as the index itself)."""
    return [db.with_name(db.name + suffix) for suffix in SIDE_SUFFIXES]


def make_parent(db: Path) -> None:
    """Create the folders above `db` that are missing, each 0700 whatever the umask.

    Raises:
        OSError: a folder cannot be created (a file in the way, read-only filesystem, no permission).
    """
    missing: list[Path] = []
    parent = db.parent
    while not parent.exists():
        missing.append(parent)
        if parent.parent == parent:
            break
        parent = parent.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            pass  # made by a concurrent open; tightened below like any existing folder
        os.chmod(folder, DIR_MODE)  # mkdir's mode is filtered by the umask


def create_file(db: Path) -> None:
    """Create `db` empty with mode 0600 if it does not exist (umask-proof).

    Raises:
        OSError: the file cannot be created (read-only filesystem, a directory in the way, ...).
    """
    fd = os.open(db, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        st = os.fstat(fd)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o700)
    finally:
        os.close(fd)


def tighten(path: Path, *, is_dir: bool = False) -> None:
    """Remove group and other permission bits from `path` when it has any.

    Does nothing when `path` does not exist or belongs to someone else (chmod would fail, and a
    shared folder is not ours to close).
    """
    try:
        st = os.stat(path)  # follows a symlinked index to the file that holds the text
    except (FileNotFoundError, NotADirectoryError):
        return
    if is_dir != stat.S_ISDIR(st.st_mode):
        return
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o077:
        return
    if st.st_uid != os.geteuid():
        return
    try:
        os.chmod(path, mode & 0o700)
    except PermissionError:
        pass


def tighten_parent(db: Path) -> None:
    """Tighten the index's folder, unless it is a shared place that must stay open.

    A sticky folder (like /tmp), the root folder and the user's home folder are left alone: an
    index placed directly in one of them must not close it for everyone else.
    """
    parent = db.parent
    try:
        st = os.stat(parent)
    except OSError:
        return
    if st.st_mode & stat.S_ISVTX:
        return
    resolved = parent.resolve()
    if resolved == Path(resolved.anchor):
        return
    try:
        if resolved == Path.home().resolve():
            return
    except (RuntimeError, KeyError):  # no home folder known
        pass
    tighten(parent, is_dir=True)


def tighten_all(db: Path) -> None:
    """Tighten the index's folder, the index file and its -wal/-shm/-journal files."""
    tighten_parent(db)
    tighten(db)
    for side in side_files(db):
        tighten(side)
