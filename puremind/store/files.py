"""Creating the index file and its folder private to the user, and tightening them when an older
version (or a loose umask) left them more open.

The index is a second copy of the user's notes, so: folder 0700, file 0600 (and the -wal/-shm
files SQLite keeps beside it).
"""

from __future__ import annotations

import os
import shutil
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
    except OSError:
        pass  # a read-only filesystem, or not ours after all: reading goes on


def open_folder_warning(db: Path) -> str | None:
    """A warning when the folder that holds the index is open to other users, or None.

    pureMind tightens only what it owns: the index file, its -wal/-shm/-journal/-lock files and the folders it
    creates. A folder that was there before (`PUREMIND_DB` in a user's own or shared folder) is left as it is.
    """
    try:
        st = os.stat(db.parent)
    except OSError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o077:
        return None
    return (
        f"the folder {db.parent} that holds the index is open to other users (mode {mode:04o}): pureMind leaves "
        f"folders it did not create as they are; the index file itself is private (0600); "
        f"`chmod go-rwx {db.parent}` closes the folder, or put the index in a private one"
    )


def tighten_all(db: Path) -> None:
    """Tighten the index file and its -wal/-shm/-journal files (not the folder: see open_folder_warning)."""
    tighten(db)
    for side in side_files(db):
        tighten(side)


def writable(db: Path) -> bool:
    """Whether this process may write the index file and create its -wal/-shm files beside it."""
    return os.access(db, os.W_OK) and os.access(db.parent, os.W_OK | os.X_OK)


def swap_in(fresh: Path, db: Path, *, keep_old_as: Path | None = None) -> None:
    """Put the closed index `fresh` in place of `db`.

    With `keep_old_as`, an earlier file there and its side files are removed first, then the old index gets that
    second name (a hard link, or a copy where the filesystem has no links) and copies of its -wal/-shm beside it.
    The old -wal/-shm files then go (SQLite must never pair them with the new file), and the new file takes the
    name in one rename, so there is no moment without a file at `db`. A reader holding the old file goes on
    reading it until it closes; readers open read-only, so closing never removes side files by name.

    Raises:
        OSError: a step failed (the old index is then still in place, unless only its side files went).
    """
    if keep_old_as is not None:
        for old in (keep_old_as, *side_files(keep_old_as)):
            old.unlink(missing_ok=True)
        if db.exists():
            try:
                os.link(db, keep_old_as)
            except OSError:
                shutil.copy2(db, keep_old_as)
            for side in side_files(db):
                try:
                    shutil.copy2(side, keep_old_as.with_name(keep_old_as.name + side.name[len(db.name):]))
                except FileNotFoundError:
                    pass
    for side in side_files(db):
        side.unlink(missing_ok=True)
    for side in side_files(fresh):  # none once SQLite closed it cleanly
        if side.exists():
            os.replace(side, db.with_name(db.name + side.name[len(fresh.name):]))
    os.replace(fresh, db)
    try:
        fd = os.open(db.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
