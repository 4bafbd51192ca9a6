"""Walking the vault: which files count as notes, and reading them safely.

The walk never follows a folder symlink, never opens a file (so a FIFO or device can
never block it) and stats only the entries that could be notes, so a vault of tens of
thousands of files is listed in well under a second. Folders are opened one component
at a time relative to their parent (`dir_fd`, `O_NOFOLLOW`): a folder swapped for a
symlink while the walk runs is not entered, and no path is ever longer than one name.

`read_note` repeats the checks at read time and compares the opened file's identity
(device, inode) with the one the walk saw, so a note replaced by a symlink or another
file between walk and read is refused rather than read through.

Symlinks are resolved one name at a time relative to open folder descriptors (see
`_resolve_link`), never through an absolute path: a vault deep in the file system can hold
links whose absolute target exceeds PATH_MAX, and the error of each step tells a link that
is broken apart from one whose target merely cannot be checked now (a permission problem).
The latter is reported in `WalkResult.uncertain`, never as a deletion.
"""

from __future__ import annotations

import errno
import os
import stat
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from puremind.errors import VaultError

_Frame = tuple[int, str, Iterator[os.DirEntry[str]]]  # (folder fd, folder rel, entries left)

MAX_NOTE_BYTES = 2 * 1024 * 1024
MAX_PATH_CHARS = 1024
NOTE_SUFFIXES = (".md", ".markdown")  # case-insensitive match of the suffix
SKIPPED_DIR_NAMES = {"node_modules", "__pycache__"}  # compared casefolded; plus every name starting with "."

# Reasons counted in WalkResult.skipped (exact strings; the CLI prints them).
HIDDEN = "hidden"
SKIPPED_FOLDER = "skipped folder"
TOO_LARGE = "too large"
SYMLINK_OUTSIDE = "symlink outside vault"
SYMLINK_TO_SKIPPED = "symlink to skipped file"
SYMLINK_BROKEN = "symlink loop or broken"
NOT_REGULAR = "not a regular file"
NOT_UTF8 = "name not UTF-8"
PATH_TOO_LONG = "path too long"

# Folders are only ever opened without following a symlink in their last component.
# The walk lists folders, so it opens them for reading.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# The vault root was resolved with realpath, so following is fine (and needed) there.
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# Reading a note and resolving a symlink only look names up. O_PATH (Linux) opens a folder for
# that alone, which needs search (x) permission on the way but not read permission on the folder:
# a note in a 711 folder is readable, as `cat` can read it. macOS has no O_PATH; O_RDONLY there
# also needs read permission, so such a note is reported unreadable (its entry is kept).
_LOOKUP = os.O_PATH if hasattr(os, "O_PATH") else os.O_RDONLY
_LOOKUP_DIR_FLAGS = _LOOKUP | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LOOKUP_ROOT_FLAGS = _LOOKUP | os.O_DIRECTORY | os.O_CLOEXEC
# O_NONBLOCK: should a FIFO appear in the instant between our lstat and open, open returns at once.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# The shortest note name, "x.md", after a "/": a folder longer than this allows holds no note.
_SHORTEST_CHILD = len("/x.md")
# Linux's MAXSYMLINKS: a path lookup that meets more symlinks than this fails with ELOOP.
_MAX_SYMLINKS = 40
# Errors that say for certain what a symlink leads to (nothing usable); the reason counted for
# each. Any other error (EACCES, EPERM, EIO, EMFILE, ...) says only that it cannot be checked now.
_DEFINITE_LINK_ERRORS = {
    errno.ENOENT: SYMLINK_BROKEN,
    errno.ENOTDIR: SYMLINK_BROKEN,
    errno.ELOOP: SYMLINK_BROKEN,
    # Resolution is one name at a time, so this means a single name in the target is longer than
    # the file system allows (NAME_MAX): no such file can exist.
    errno.ENAMETOOLONG: PATH_TOO_LONG,
}


@dataclass(frozen=True)
class NoteFile:
    """One note found by the walk."""

    rel: str  # vault-relative POSIX path of the entry as walked (a symlink keeps its own name)
    # size, mtime_ns, dev, ino and ctime_ns all come from one stat of the file read_note will read
    # (the target for an allowed in-vault symlink). ctime_ns changes on every write, rename or
    # metadata change and cannot be set back by a tool (unlike mtime), so together with (dev, ino)
    # it tells a note rewritten or swapped for another file of the same size and mtime (`mv`,
    # `rsync -a`, a retargeted symlink) from an unchanged one.
    size: int
    mtime_ns: int
    dev: int
    ino: int
    ctime_ns: int
    #: for a note that is a symlink, the vault-relative path of the note it leads to ("" otherwise): what an
    #: agent may read is judged by both paths (a link in a shared folder to a private note stays private)
    target: str = ""


@dataclass
class WalkResult:
    """What a walk found: the notes, what it skipped and why, the folders it could not list and
    the symlinks whose target it could not check."""

    notes: list[NoteFile] = field(default_factory=list)  # sorted by rel
    # reason -> count. Only entries that would otherwise have been notes (a note suffix) or folders
    # searched for notes are counted; ordinary non-note files are not "skipped".
    skipped: Counter[str] = field(default_factory=Counter)
    unlisted: list[str] = field(default_factory=list)  # vault-relative folders not listed ("" = root)
    # Sorted vault-relative paths of symlinks with a note name whose target could not be checked
    # (a permission problem such as a target folder without search permission, or an I/O error):
    # they may or may not be notes now. Neither in `notes` nor counted in `skipped`; the indexer
    # keeps their previous entries, as it keeps everything below an `unlisted` folder.
    uncertain: list[str] = field(default_factory=list)


class NoteReadError(VaultError):
    """A walked note that cannot be read now: gone, unreadable, replaced, no longer regular or too large."""

    def __init__(self, rel: str, reason: str):
        super().__init__(f"cannot read note {rel}: {reason}")
        self.rel = rel
        self.reason = reason


@dataclass(frozen=True)
class _LinkTarget:
    """Where a symlink leads.

    Resolved: `stat` is the final target's own stat and `rel` its vault-relative path (None when
    it lies outside the vault). Not resolved: `stat` and `rel` are None and either `failed` names
    the reason it can never be a note (broken, a loop, a name too long) or `unknown` holds the
    error that kept the target from being checked (permission, I/O): it may still be a note.
    """

    stat: os.stat_result | None = None
    rel: str | None = None
    failed: str | None = None
    unknown: OSError | None = None


def note_rel_is_valid(rel: str) -> bool:
    """True when the path string alone is allowed as a note: relative POSIX path without '.',
    '..' or empty parts, no hidden part, no skipped folder, a note suffix, valid UTF-8, at most
    MAX_PATH_CHARS characters. Looks at no file."""
    if not rel or len(rel) > MAX_PATH_CHARS or rel.startswith("/") or "\x00" in rel:
        return False
    if not _is_utf8(rel):
        return False
    parts = rel.split("/")
    # "", "." and ".." all fail the hidden test, so this also rules out climbing and empty parts.
    if any(not part or part.startswith(".") for part in parts):
        return False
    if any(part.casefold() in SKIPPED_DIR_NAMES for part in parts[:-1]):
        return False
    return _has_note_suffix(parts[-1])


def walk_vault(root: Path) -> WalkResult:
    """List every note in the vault at `root` (which may itself be a symlink).

    Raises:
        VaultError: root does not exist, is not a directory, or cannot be listed at all.
    """
    root_real = os.path.realpath(root)
    root_fd = _open_root(root, root_real)
    try:
        try:
            entries = _list_dir(root_fd)
        except OSError as exc:
            raise VaultError(
                f"cannot list the vault folder {root}: {exc.strerror or exc}",
                hint="check the folder's permissions",
            ) from exc
        result = WalkResult()
        _Walker(_path_parts(root_real), result).walk(root_fd, entries)
    finally:
        os.close(root_fd)
    result.notes.sort(key=lambda note: note.rel)
    result.uncertain.sort()
    return result


def read_note(root: Path, note: NoteFile) -> bytes:
    """Read a walked note without following any symlink the walk did not allow.

    Every folder on the path is opened with O_NOFOLLOW relative to its parent (for lookup only,
    so a folder needs search but not read permission); an allowed symlink note is read through
    its resolved in-vault target, opened the same way. The opened file must be regular, at most
    MAX_NOTE_BYTES, and the same (dev, ino) the walk saw. ctime is not compared: a note edited in
    place since the walk is read with its new text (the indexer sees the new stat next run).

    Raises:
        NoteReadError: the note is gone or unreadable, was replaced by a symlink or another file
            since the walk, is no longer a regular file, or grew over MAX_NOTE_BYTES.
    """
    rel = note.rel
    if not note_rel_is_valid(rel):
        raise NoteReadError(rel, "not a note path")
    root_real = os.path.realpath(root)
    try:
        root_fd = os.open(root_real, _LOOKUP_ROOT_FLAGS)
    except OSError as exc:
        raise NoteReadError(rel, f"the vault folder cannot be opened ({exc.strerror})") from exc
    try:
        fd = _open_note(_path_parts(root_real), root_fd, note)
        try:
            return _read_bounded(fd, rel)
        finally:
            os.close(fd)
    finally:
        os.close(root_fd)


def is_note_path(root: Path, rel: str) -> bool:
    """True when `rel` names a note the indexer would read: a valid note path (see
    note_rel_is_valid) reached through real folders only, naming a regular file of at most
    MAX_NOTE_BYTES or a symlink the walk would index. A symlink whose target cannot be checked
    (see WalkResult.uncertain) is not confirmed: False. Never raises for a bad path."""
    if not note_rel_is_valid(rel):
        return False
    root_real = os.path.realpath(root)
    try:
        root_fd = os.open(root_real, _LOOKUP_ROOT_FLAGS)
    except OSError:
        return False
    try:
        parts = rel.split("/")
        dir_fd = _open_folders(root_fd, parts[:-1])
        try:
            st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                target = _resolve_link(_path_parts(root_real), dir_fd, rel)
                return target.unknown is None and _file_link_reason(target) is None
        finally:
            if dir_fd != root_fd:
                os.close(dir_fd)
    except OSError:
        return False
    finally:
        os.close(root_fd)
    return stat.S_ISREG(st.st_mode) and st.st_size <= MAX_NOTE_BYTES


MAX_SPELLINGS = 16  # bounds the search over folders whose names differ only in Unicode normalisation


def read_note_at(root: Path, rel: str) -> tuple[str, bytes]:
    """Read one note by its vault-relative path, with the indexer's rules: `is_note_path`, then `read_note`
    (which checks, on the descriptor it opened, that no folder or link on the way was swapped since). A path
    in another Unicode normalisation than the file name (NFC vs NFD, as macOS clients send) is accepted when
    exactly one note matches. Returns (the path as it is on disk, the bytes).

    Raises:
        VaultError: the vault folder is missing; or the path is not a note pureMind serves (one message whether
            it is missing, refused or outside the vault: the answer must not tell which files exist where an
            agent may not look); or the note cannot be read now.
    """
    if not root.is_dir():
        raise VaultError(f"vault folder not found: {root}", hint="check the vault setting, or run `puremind init <vault_dir>`")
    refused = not_served(rel)
    if not is_note_path(root, rel):
        # macOS clients send decomposed (NFD) names, Linux files are mostly composed (NFC), and the reverse.
        other = _other_normalisation(root, rel)
        if other is None:
            raise refused
        rel = other
    try:
        # Follows an allowed in-vault symlink to the file read_note will open.
        st = os.stat(os.path.join(os.path.realpath(root), rel))
    except (OSError, ValueError):
        raise refused from None
    note = NoteFile(rel, st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, st.st_ctime_ns)
    try:
        return rel, read_note(root, note)
    except NoteReadError as exc:
        if not is_note_path(root, rel):
            raise refused from None
        raise VaultError(exc.message, hint="try again; the note may be changing right now") from None


def not_served(rel: str) -> VaultError:
    """The one answer to a request for a note that is not served: missing, refused, outside the vault or private
    alike, so that the answer never tells which files exist where an agent may not look."""
    return VaultError(
        f"no note {shown_text(rel)} in the vault",
        hint="pass a vault-relative path of a .md or .markdown note exactly as puremind_search or "
        "puremind_recent returned it; hidden files, node_modules, __pycache__ and links out of the vault "
        "are not served",
    )


def shown_text(text: str, limit: int = 200) -> str:
    """A user-supplied string for a message: quoted, control characters escaped, bounded."""
    shown = repr(text[:limit])
    return shown + "..." if len(text) > limit else shown


def _other_normalisation(root: Path, rel: str) -> str | None:
    """The one note path in the vault that is `rel` written in another Unicode normalisation (compared as NFC,
    part by part), or None when no note or more than one matches. Only folders inside the vault are listed:
    the path must first pass the note path rules (no '..', no hidden part, a note suffix)."""
    wanted = unicodedata.normalize("NFC", rel)
    if rel.isascii() or not note_rel_is_valid(wanted):
        return None
    parts = wanted.split("/")
    real = os.path.realpath(root)
    paths: list[list[str]] = [[]]  # the on-disk spellings of the parts matched so far
    for part in parts:
        longer = []
        for done in paths:
            try:
                names = os.listdir(os.path.join(real, *done))
            except (OSError, ValueError):
                continue
            longer += [[*done, name] for name in names if unicodedata.normalize("NFC", name) == part]
        if not longer or len(longer) > MAX_SPELLINGS:
            return None
        paths = longer
    found = ["/".join(path) for path in paths if is_note_path(root, "/".join(path))]
    return found[0] if len(found) == 1 else None


class _Walker:
    """Depth-first walk holding one open folder descriptor per level of depth.

    Depth is bounded by MAX_PATH_CHARS (a folder too long to hold a note is not entered), so
    even a bind-mount loop ends.
    """

    def __init__(self, root_parts: list[str], result: WalkResult):
        self.root_parts = root_parts
        self.result = result
        self.unlisted: set[str] = set()

    def walk(self, root_fd: int, root_entries: list[os.DirEntry[str]]) -> None:
        """Visit every entry under the root; folders are entered as they are met."""
        stack: list[_Frame] = [(root_fd, "", iter(root_entries))]
        try:
            while stack:
                dir_fd, dir_rel, entries = stack[-1]
                entry = next(entries, None)
                if entry is None:
                    stack.pop()
                    if dir_fd != root_fd:
                        os.close(dir_fd)
                    continue
                child = self._visit(dir_fd, dir_rel, entry)
                if child is not None:
                    stack.append(child)
        finally:
            for dir_fd, _, _ in stack:
                if dir_fd != root_fd:
                    os.close(dir_fd)
        self.result.unlisted = sorted(self.unlisted)

    def _visit(self, dir_fd: int, dir_rel: str, entry: os.DirEntry[str]) -> _Frame | None:
        """Handle one entry; return (fd, rel, entries) of a folder to enter, else None."""
        name = entry.name
        rel = f"{dir_rel}/{name}" if dir_rel else name
        try:
            # is_symlink / is_dir / is_file answer from the listing's d_type: no system call.
            if entry.is_symlink():
                self._visit_symlink(dir_fd, rel, name)
                return None
            if entry.is_dir(follow_symlinks=False):
                return self._enter_folder(dir_fd, rel, name)
            if not _has_note_suffix(name):
                return None  # an ordinary non-note file: not counted as skipped
            reason = _name_reason(name) or _length_reason(rel)
            if reason is None and not entry.is_file(follow_symlinks=False):
                reason = NOT_REGULAR  # FIFO, socket or device: judged from d_type, never opened
            if reason is None:
                st = entry.stat(follow_symlinks=False)  # the only stat a plain note costs
                if not stat.S_ISREG(st.st_mode):
                    reason = NOT_REGULAR
                elif st.st_size > MAX_NOTE_BYTES:
                    reason = TOO_LARGE
                else:
                    self._add_note(rel, st)
                    return None
            self.result.skipped[reason] += 1
        except FileNotFoundError:
            pass  # removed since the folder was listed: it is simply no longer there
        except OSError:
            # The folder lists but its entries cannot be examined (e.g. read without search
            # permission). Report the folder so the indexer keeps what it knew about it.
            self.unlisted.add(dir_rel)
        return None

    def _visit_symlink(self, dir_fd: int, rel: str, name: str) -> None:
        target = _resolve_link(self.root_parts, dir_fd, rel)
        to_folder = target.stat is not None and stat.S_ISDIR(target.stat.st_mode)
        if not to_folder and not _has_note_suffix(name):
            return  # would not be a note whatever it points at
        reason = _name_reason(name)
        if reason is None and to_folder:
            if target.rel is not None:
                return  # never followed; its notes are listed under their real path
            reason = SYMLINK_OUTSIDE
        if reason is None:
            reason = _length_reason(rel)
        if reason is None and target.unknown is not None:
            # Its target cannot be checked now: it may well still be a note, so it must not
            # look deleted. The indexer keeps its previous entry.
            self.result.uncertain.append(rel)
            return
        if reason is None:
            reason = _file_link_reason(target)
        if reason is None:
            self._add_note(rel, target.stat, target.rel or "")
        else:
            self.result.skipped[reason] += 1

    def _enter_folder(self, dir_fd: int, rel: str, name: str) -> _Frame | None:
        reason = _name_reason(name)
        if reason is None and name.casefold() in SKIPPED_DIR_NAMES:
            reason = SKIPPED_FOLDER
        if reason is None and len(rel) + _SHORTEST_CHILD > MAX_PATH_CHARS:
            reason = PATH_TOO_LONG  # no note inside could be short enough; do not descend
        if reason is not None:
            self.result.skipped[reason] += 1
            return None
        try:
            # O_NOFOLLOW: a folder swapped for a symlink since the listing is not entered.
            child_fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except (FileNotFoundError, NotADirectoryError):
            return None  # gone or replaced since the listing: its notes are no longer here
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None  # replaced by a symlink (some systems say ELOOP, Linux ENOTDIR)
            self.unlisted.add(rel)
            return None
        try:
            entries = _list_dir(child_fd)
        except OSError:
            os.close(child_fd)
            self.unlisted.add(rel)
            return None
        return child_fd, rel, iter(entries)

    def _add_note(self, rel: str, st: os.stat_result, target: str = "") -> None:
        self.result.notes.append(
            NoteFile(rel, st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, st.st_ctime_ns, target)
        )


def _open_root(root: Path, root_real: str) -> int:
    """Open the resolved vault root. Raises VaultError with a message naming what is wrong."""
    try:
        # O_DIRECTORY makes a FIFO fail with ENOTDIR instead of blocking in open().
        return os.open(root_real, _ROOT_FLAGS)
    except FileNotFoundError as exc:
        raise VaultError(
            f"vault folder not found: {root}",
            hint="check the vault setting, or run `puremind init <vault_dir>`",
        ) from exc
    except NotADirectoryError as exc:
        raise VaultError(f"the vault is not a folder: {root}") from exc
    except OSError as exc:
        raise VaultError(
            f"cannot open the vault folder {root}: {exc.strerror or exc}",
            hint="check the folder's permissions",
        ) from exc


def _list_dir(dir_fd: int) -> list[os.DirEntry[str]]:
    """All entries of an open folder.

    Listing eagerly means a folder that fails halfway is reported as unlisted as a whole,
    rather than looking as if its remaining notes had been deleted. The entries' stat() is
    relative to `dir_fd`, so the caller keeps it open while using them.
    """
    with os.scandir(dir_fd) as it:
        return list(it)


def _open_folders(root_fd: int, folders: list[str]) -> int:
    """Open the folders below the root one by one for lookup, never following a symlink.

    Returns the last folder's descriptor (root_fd itself when `folders` is empty; the caller
    closes any other). Raises OSError when a folder is missing, not a folder or a symlink.
    """
    dir_fd = root_fd
    try:
        for name in folders:
            next_fd = os.open(name, _LOOKUP_DIR_FLAGS, dir_fd=dir_fd)
            if dir_fd != root_fd:
                os.close(dir_fd)
            dir_fd = next_fd
    except BaseException:
        if dir_fd != root_fd:
            os.close(dir_fd)
        raise
    return dir_fd


def _open_note(root_parts: list[str], root_fd: int, note: NoteFile) -> int:
    """Open the file the walk identified as `note`; raise NoteReadError when that is impossible."""
    rel = note.rel
    fd = _open_regular_same(root_fd, rel, note, allow_link=True)
    if fd is not None:
        return fd
    # The entry is a symlink: allowed only when it still leads to an allowed note in the vault.
    try:
        dir_fd = _open_folders(root_fd, rel.split("/")[:-1])
    except OSError as exc:
        raise NoteReadError(rel, f"a folder on its path cannot be opened ({exc.strerror})") from exc
    try:
        target = _resolve_link(root_parts, dir_fd, rel)
    finally:
        if dir_fd != root_fd:
            os.close(dir_fd)
    if target.unknown is not None:
        raise NoteReadError(
            rel, f"its symlink target cannot be checked ({target.unknown.strerror or target.unknown})"
        )
    reason = _file_link_reason(target)
    if reason == PATH_TOO_LONG:
        raise NoteReadError(rel, "its symlink target has a name too long for the file system")
    if reason is not None:
        raise NoteReadError(rel, f"it is now a {reason}")
    # Resolution left no symlink in target.rel; if one appears now, opening it fails.
    fd = _open_regular_same(root_fd, target.rel, note, allow_link=False, shown_rel=rel)
    assert fd is not None  # allow_link=False never returns None
    return fd


def _open_regular_same(
    root_fd: int, rel: str, note: NoteFile, *, allow_link: bool, shown_rel: str | None = None
) -> int | None:
    """Open `rel` below the root without following any symlink and check it is the walked file.

    Returns None (only with allow_link) when the last component is a symlink, so the caller
    can apply the symlink rules. Raises NoteReadError for anything else that is not right.
    """
    shown = shown_rel or rel
    parts = rel.split("/")
    try:
        dir_fd = _open_folders(root_fd, parts[:-1])
    except FileNotFoundError as exc:
        raise NoteReadError(shown, "it no longer exists") from exc
    except OSError as exc:
        raise NoteReadError(
            shown, f"a folder on its path cannot be opened or is now a symlink ({exc.strerror})"
        ) from exc
    try:
        try:
            # lstat before open, so a device or FIFO put in the note's place is never opened.
            st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError as exc:
            raise NoteReadError(shown, "it no longer exists") from exc
        except OSError as exc:
            raise NoteReadError(shown, exc.strerror or str(exc)) from exc
        if stat.S_ISLNK(st.st_mode):
            if allow_link:
                return None
            raise NoteReadError(shown, "its target was replaced by a symlink since the walk")
        _check_same_regular(st, note, shown)
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            raise NoteReadError(shown, exc.strerror or str(exc)) from exc
    finally:
        if dir_fd != root_fd:
            os.close(dir_fd)
    try:
        # The decisive check: what we actually opened, not what a path named a moment ago.
        _check_same_regular(os.fstat(fd), note, shown)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_same_regular(st: os.stat_result, note: NoteFile, shown: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise NoteReadError(shown, "it is no longer a regular file")
    if (st.st_dev, st.st_ino) != (note.dev, note.ino):
        raise NoteReadError(shown, "it was replaced by another file since the walk")
    if st.st_size > MAX_NOTE_BYTES:
        raise NoteReadError(shown, "it grew over 2 MiB since the walk")


def _read_bounded(fd: int, rel: str) -> bytes:
    """Read at most MAX_NOTE_BYTES + 1 bytes, so a file still growing cannot exhaust memory."""
    chunks: list[bytes] = []
    remaining = MAX_NOTE_BYTES + 1
    try:
        while remaining > 0:
            data = os.read(fd, min(remaining, 1024 * 1024))
            if not data:
                break
            chunks.append(data)
            remaining -= len(data)
    except OSError as exc:
        raise NoteReadError(rel, exc.strerror or str(exc)) from exc
    content = b"".join(chunks)
    if len(content) > MAX_NOTE_BYTES:
        raise NoteReadError(rel, "it grew over 2 MiB since the walk")
    return content


def _resolve_link(root_parts: list[str], dir_fd: int, rel: str) -> _LinkTarget:
    """Follow the symlink at `rel`, whose folder is open as `dir_fd`, to its final target.

    Works like realpath, one name at a time: each name is looked up (lstat, readlink, O_PATH
    open) relative to the descriptor of the folder reached so far, and the real path is kept as
    a list of names. So no path handed to the OS is longer than one name (an absolute target
    path beyond PATH_MAX resolves fine), nothing but folders is opened (a FIFO target never
    blocks), and the errno of the failing step is known: ENOENT, ENOTDIR and ELOOP mean broken;
    a permission or I/O error means the target cannot be checked (`unknown`). Never raises.

    `root_parts` are the names of the resolved vault root, as from _path_parts.
    """
    parts = rel.split("/")
    real = root_parts + parts[:-1]  # the real path of the folder `fd` is open on, as names
    pending = [parts[-1]]  # names still to resolve, the next one last
    fd, owned = dir_fd, False  # owned: fd was opened here and must be closed here
    links = 0
    try:
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if real:  # ".." of "/" is "/" itself
                    fd, owned = _lookup_dir(fd, owned, ".."), True
                    real.pop()
                continue
            st = os.lstat(name, dir_fd=fd)
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > _MAX_SYMLINKS:
                    return _LinkTarget(failed=SYMLINK_BROKEN)
                target = os.readlink(name, dir_fd=fd)
                if not target:
                    return _LinkTarget(failed=SYMLINK_BROKEN)  # an empty target is ENOENT
                if target.startswith("/"):
                    fd, owned = _lookup_dir(fd, owned, "/"), True
                    real = []
                pending.extend(reversed(target.split("/")))
                continue
            if not pending:
                real.append(name)
                return _LinkTarget(st, _vault_rel(root_parts, real))
            if not stat.S_ISDIR(st.st_mode):
                # More names follow (even just a trailing "/"): as stat() would, ENOTDIR.
                return _LinkTarget(failed=SYMLINK_BROKEN)
            fd, owned = _lookup_dir(fd, owned, name), True
            real.append(name)
        # Ended on a folder reached through ".", ".." or a trailing "/".
        return _LinkTarget(os.fstat(fd), _vault_rel(root_parts, real))
    except OSError as exc:
        reason = _DEFINITE_LINK_ERRORS.get(exc.errno)  # type: ignore[arg-type]
        return _LinkTarget(failed=reason) if reason else _LinkTarget(unknown=exc)
    finally:
        if owned:
            os.close(fd)


def _lookup_dir(fd: int, owned: bool, name: str) -> int:
    """Open folder `name` (relative to `fd`, or "/") for lookup; close `fd` if owned.

    On error `fd` is left open, so the caller's cleanup still closes it exactly once.
    """
    if name == "/":
        new_fd = os.open("/", _LOOKUP_DIR_FLAGS)
    else:
        new_fd = os.open(name, _LOOKUP_DIR_FLAGS, dir_fd=fd)
    if owned:
        os.close(fd)
    return new_fd


def _path_parts(real: str) -> list[str]:
    """The names of an absolute, resolved path: "/a/b" -> ["a", "b"], "/" -> []."""
    return [part for part in real.split("/") if part]


def _vault_rel(root_parts: list[str], real: list[str]) -> str | None:
    """The real path `real` (as names) relative to the vault as a POSIX path; None outside.

    Compared name by name, not by string prefix: "/vault2/x" is not inside "/vault".
    """
    if real[: len(root_parts)] != root_parts:
        return None
    return "/".join(real[len(root_parts):])


def _file_link_reason(target: _LinkTarget) -> str | None:
    """Why a symlink with a note name is skipped, or None when it leads to an allowed note.

    The caller first handles `target.unknown` (not checkable is not a reason to skip).
    """
    if target.stat is None:
        return target.failed or SYMLINK_BROKEN
    if target.rel is None:
        return SYMLINK_OUTSIDE
    st = target.stat
    # The target is judged by its own path: a link must not smuggle in a hidden or
    # node_modules note, a non-note file, a FIFO or an over-large file.
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_NOTE_BYTES or not note_rel_is_valid(target.rel):
        return SYMLINK_TO_SKIPPED
    return None


def _name_reason(name: str) -> str | None:
    """Reason to skip an entry for its name alone: hidden or not valid UTF-8."""
    if name.startswith("."):
        return HIDDEN
    if not _is_utf8(name):
        return NOT_UTF8
    return None


def _length_reason(rel: str) -> str | None:
    return PATH_TOO_LONG if len(rel) > MAX_PATH_CHARS else None


def _is_utf8(name: str) -> bool:
    # Names that are not valid UTF-8 reach Python as lone surrogates (surrogateescape),
    # which UTF-8 refuses to encode.
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _has_note_suffix(name: str) -> bool:
    for suffix in NOTE_SUFFIXES:
        tail = name[-len(suffix):]
        # isascii: only a real ".MD"-style suffix counts, not look-alikes that lower() to ASCII.
        if len(name) > len(suffix) and tail.isascii() and tail.lower() == suffix:
            return True
    return False
