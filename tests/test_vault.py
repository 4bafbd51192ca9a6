"""Tests for puremind.vault: which files are notes, what is skipped and why, and safe reads.

Every test builds a real tree under tmp_path. Permission cases are simulated by monkeypatching
os functions (the tests also run as root, which ignores permissions); the real-permission
variants skip when run as root, except those using the `as_user` fixture, which walk the vault
in a subprocess as `nobody` (through setpriv) when the tests run as root.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import pytest

from puremind import vault as vault_mod
from puremind.errors import VaultError
from puremind.vault import (
    MAX_NOTE_BYTES,
    MAX_PATH_CHARS,
    NoteFile,
    NoteReadError,
    WalkResult,
    is_note_path,
    note_rel_is_valid,
    read_note,
    walk_vault,
)

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
HAS_O_PATH = hasattr(os, "O_PATH")
REPO = Path(__file__).resolve().parents[1]
ROOT_REASON = "runs as root, which ignores file permissions; the monkeypatched variant covers this"


# ---------------------------------------------------------------- helpers


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    path = tmp_path / "vault"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    return path


def write(path: Path, data: bytes | str = b"# A note\n\nSome text.\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def sized(path: Path, size: int) -> Path:
    """A file of exactly `size` bytes (sparse, so it costs no disk or time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def rels(result: WalkResult) -> list[str]:
    return [note.rel for note in result.notes]


def note_for(result: WalkResult, rel: str) -> NoteFile:
    return next(note for note in result.notes if note.rel == rel)


def _identity(path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def within(seconds: float, fn, *args):
    """Run fn in a daemon thread and fail (instead of hanging) if it blocks, e.g. on a FIFO."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # re-raised in the test's thread below
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn.__name__} blocked for more than {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def make_bytes_name(folder: Path, name: bytes, *, is_dir: bool = False) -> bytes:
    """Create an entry whose name is raw bytes; skip where the filesystem refuses non-UTF-8 names."""
    path = os.fsencode(folder) + b"/" + name
    try:
        if is_dir:
            os.mkdir(path)
        else:
            with open(path, "wb") as handle:
                handle.write(b"# note\n")
    except OSError as exc:
        if exc.errno in (errno.EILSEQ, errno.EINVAL):
            pytest.skip("this filesystem refuses names that are not valid UTF-8 (e.g. APFS)")
        raise
    return path


# ---------------------------------------------------------------- what counts as a note


def test_md_and_markdown_notes_are_found_in_any_letter_case(vault):
    for name in ["a.md", "b.MD", "c.markdown", "d.MarkDown", "sub/deeper/e.Md"]:
        write(vault / name)
    for name in ["f.mdx", "g.md.txt", "h.txt", "md", "markdown", "i.mkd"]:
        write(vault / name)
    result = walk_vault(vault)
    assert rels(result) == ["a.md", "b.MD", "c.markdown", "d.MarkDown", "sub/deeper/e.Md"]


def test_ordinary_non_note_files_are_ignored_without_being_counted_as_skipped(vault):
    write(vault / "n.md")
    for name in ["photo.png", "script.py", "README", "data.json"]:
        write(vault / name)
    result = walk_vault(vault)
    assert rels(result) == ["n.md"]
    assert result.skipped == Counter()
    assert result.unlisted == []


def test_notes_are_sorted_by_vault_relative_posix_path(vault):
    for name in ["b.md", "a/z.md", "A.md", "a.md", "a/b/c.md", "é.md"]:
        write(vault / name)
    result = walk_vault(vault)
    assert rels(result) == sorted(["b.md", "a/z.md", "A.md", "a.md", "a/b/c.md", "é.md"])
    assert all("\\" not in rel and not rel.startswith("/") for rel in rels(result))


def test_a_note_records_its_size_mtime_file_identity_and_ctime(vault):
    path = write(vault / "sub/n.md", b"12345")
    note = walk_vault(vault).notes[0]
    st = os.stat(path)
    assert note == NoteFile("sub/n.md", 5, st.st_mtime_ns, st.st_dev, st.st_ino, st.st_ctime_ns)


def test_unicode_note_names_that_are_valid_utf8_are_kept(vault):
    write(vault / "日本語.md")
    write(vault / "café/naïve.md")
    assert rels(walk_vault(vault)) == ["café/naïve.md", "日本語.md"]


def test_an_empty_vault_gives_no_notes_and_no_skips(vault):
    result = walk_vault(vault)
    assert result == WalkResult(notes=[], skipped=Counter(), unlisted=[], uncertain=[])


# ---------------------------------------------------------------- hidden and skipped folders


def test_hidden_files_and_folders_are_skipped_and_counted(vault):
    write(vault / "visible.md")
    write(vault / ".Hidden.md")
    write(vault / ".obsidian/workspace.md")
    write(vault / ".git/notes.md")
    write(vault / "sub/.drafts/d.md")
    write(vault / ".DS_Store")  # a hidden non-note file: neither a note nor a folder, so not counted
    result = walk_vault(vault)
    assert rels(result) == ["visible.md"]
    assert result.skipped == Counter({"hidden": 4})


def test_node_modules_and_pycache_are_skipped_in_any_letter_case(vault):
    write(vault / "node_modules/pkg/README.md")
    write(vault / "NODE_MODULES/x.md")
    write(vault / "deep/Node_Modules/y.md")
    write(vault / "__pycache__/z.md")
    write(vault / "src/__PyCache__/w.md")
    write(vault / "node_modules.md")  # only folders are skipped by name
    write(vault / "my_node_modules/kept.md")
    result = walk_vault(vault)
    assert rels(result) == ["my_node_modules/kept.md", "node_modules.md"]
    assert result.skipped == Counter({"skipped folder": 5})


# ---------------------------------------------------------------- size, type, name, length


def test_a_note_of_exactly_2_mib_is_kept_and_one_byte_more_is_skipped(vault):
    sized(vault / "exact.md", MAX_NOTE_BYTES)
    sized(vault / "over.md", MAX_NOTE_BYTES + 1)
    sized(vault / "huge.txt", MAX_NOTE_BYTES * 3)  # not a note: not counted
    result = walk_vault(vault)
    assert rels(result) == ["exact.md"]
    assert note_for(result, "exact.md").size == MAX_NOTE_BYTES
    assert result.skipped == Counter({"too large": 1})


def test_a_fifo_is_skipped_without_ever_being_opened(vault):
    write(vault / "n.md")
    os.mkfifo(vault / "pipe.md")
    os.mkfifo(vault / "pipe.txt")  # not a note name: not counted
    result = within(10, walk_vault, vault)
    assert rels(result) == ["n.md"]
    assert result.skipped == Counter({"not a regular file": 1})


def test_a_socket_is_skipped_as_not_a_regular_file(vault, monkeypatch):
    # Bind by a relative name: AF_UNIX paths are limited to about 100 bytes.
    monkeypatch.chdir(vault)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("sock.md")
        result = within(10, walk_vault, vault)
    finally:
        sock.close()
    assert rels(result) == []
    assert result.skipped == Counter({"not a regular file": 1})


def test_a_device_node_is_skipped_without_being_opened(vault):
    try:
        os.mknod(vault / "dev.md", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        pytest.skip("creating a device node needs root with CAP_MKNOD")
    result = within(10, walk_vault, vault)
    assert rels(result) == []
    assert result.skipped == Counter({"not a regular file": 1})


def test_the_walk_opens_only_folders_never_files(vault, monkeypatch):
    write(vault / "a.md")
    write(vault / "sub/b.md")
    os.mkfifo(vault / "sub/pipe.md")
    os.symlink("a.md", vault / "link.md")
    flags_seen = []
    real_open = os.open

    def spy_open(path, flags, *args, **kwargs):
        flags_seen.append(flags)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(vault_mod.os, "open", spy_open)
    walk_vault(vault)
    assert flags_seen and all(flags & os.O_DIRECTORY for flags in flags_seen)


def test_names_that_are_not_valid_utf8_are_skipped(vault):
    write(vault / "good.md")
    make_bytes_name(vault, b"bad\xff.md")
    folder = make_bytes_name(vault, b"dir\xfe", is_dir=True)
    with open(folder + b"/inside.md", "wb") as handle:
        handle.write(b"# note\n")
    make_bytes_name(vault, b"image\xff.png")  # not a note name: not counted
    result = walk_vault(vault)
    assert rels(result) == ["good.md"]
    assert result.skipped == Counter({"name not UTF-8": 2})
    assert all(rel.encode("utf-8") for rel in rels(result))


def _make_deep_folder(base: Path, rel_len: int, monkeypatch) -> str:
    """Create nested folders whose vault-relative path has exactly `rel_len` characters.

    Created one level at a time from inside the previous one, so no single path handed to the
    OS is long (macOS limits paths to 1,024 bytes).
    """
    parts = []
    remaining = rel_len
    while remaining > 0:
        size = min(200, remaining)
        if remaining - size == 1:  # never leave a 1-char gap that a "/" would fill
            size -= 1
        parts.append("d" * size)
        remaining -= size + 1  # the "/" before the next part
    assert len("/".join(parts)) == rel_len
    monkeypatch.chdir(base)
    for part in parts:
        os.mkdir(part)
        os.chdir(part)
    return "/".join(parts)


def test_a_note_path_of_1024_characters_is_kept_and_longer_is_skipped(vault, monkeypatch):
    folder = _make_deep_folder(vault, 800, monkeypatch)  # cwd is now that folder
    ok_name = "n" * (MAX_PATH_CHARS - 801 - 3) + ".md"
    long_name = "m" * (MAX_PATH_CHARS - 801 - 3 + 1) + ".md"
    for name in (ok_name, long_name):
        with open(name, "wb") as handle:
            handle.write(b"# deep\n")
    result = walk_vault(vault)
    assert rels(result) == [f"{folder}/{ok_name}"]
    assert len(rels(result)[0]) == MAX_PATH_CHARS
    assert result.skipped == Counter({"path too long": 1})
    assert read_note(vault, result.notes[0]) == b"# deep\n"


def test_a_folder_too_long_to_hold_any_note_is_counted_once_and_not_entered(vault, monkeypatch):
    _make_deep_folder(vault, MAX_PATH_CHARS - 4, monkeypatch)  # + "/x.md" would be 1,025
    for name in ("x.md", "y.md"):
        with open(name, "wb") as handle:
            handle.write(b"# too deep\n")
    result = walk_vault(vault)
    assert rels(result) == []
    assert result.skipped == Counter({"path too long": 1})


# ---------------------------------------------------------------- symlinks


def test_a_symlink_to_a_note_inside_the_vault_is_indexed_under_its_own_name(vault):
    target = write(vault / "real/note.md", b"real text")
    os.symlink("real/note.md", vault / "alias.md")
    result = walk_vault(vault)
    assert rels(result) == ["alias.md", "real/note.md"]
    alias, real = note_for(result, "alias.md"), note_for(result, "real/note.md")
    st = os.stat(target)
    # The link's entry carries the identity and stat of the file that will be read: the target.
    assert (alias.dev, alias.ino, alias.size, alias.mtime_ns, alias.ctime_ns) == (
        st.st_dev, st.st_ino, 9, st.st_mtime_ns, st.st_ctime_ns
    )
    assert (alias.dev, alias.ino, alias.ctime_ns) == (real.dev, real.ino, real.ctime_ns)
    assert read_note(vault, alias) == b"real text"


def test_a_chain_of_symlinks_inside_the_vault_leads_to_the_final_note(vault):
    write(vault / "a.md", b"A")
    os.symlink("a.md", vault / "b.md")
    os.symlink(str(vault / "b.md"), vault / "c.md")  # absolute target, still inside
    result = walk_vault(vault)
    assert rels(result) == ["a.md", "b.md", "c.md"]
    assert [read_note(vault, note) for note in result.notes] == [b"A", b"A", b"A"]


def test_a_symlink_that_resolves_outside_the_vault_is_skipped(vault, outside):
    write(outside / "secret.md", b"secret")
    os.symlink(outside / "secret.md", vault / "abs.md")
    os.symlink("../outside/secret.md", vault / "rel.md")
    result = walk_vault(vault)
    assert rels(result) == []
    assert result.skipped == Counter({"symlink outside vault": 2})


def test_a_sibling_folder_whose_name_extends_the_vault_name_is_outside(tmp_path, vault):
    # String-prefix checks would wrongly accept /.../vault2 as inside /.../vault.
    write(tmp_path / "vault2/n.md", b"sibling")
    os.symlink(tmp_path / "vault2/n.md", vault / "looks_inside.md")
    result = walk_vault(vault)
    assert rels(result) == []
    assert result.skipped == Counter({"symlink outside vault": 1})
    assert not is_note_path(vault, "looks_inside.md")


def _target_hidden(vault: Path) -> str:
    write(vault / ".private/n.md")
    return ".private/n.md"


def _target_in_node_modules(vault: Path) -> str:
    write(vault / "Node_Modules/pkg/n.md")
    return "Node_Modules/pkg/n.md"


def _target_in_pycache(vault: Path) -> str:
    write(vault / "__pycache__/n.md")
    return "__pycache__/n.md"


def _target_not_markdown(vault: Path) -> str:
    write(vault / "n.txt")
    return "n.txt"


def _target_too_large(vault: Path) -> str:
    sized(vault / "big.md", MAX_NOTE_BYTES + 1)
    return "big.md"


def _target_fifo(vault: Path) -> str:
    os.mkfifo(vault / "pipe.md")
    return "pipe.md"


@pytest.mark.parametrize(
    "make_target",
    [
        _target_hidden,
        _target_in_node_modules,
        _target_in_pycache,
        _target_not_markdown,
        _target_too_large,
        _target_fifo,
    ],
    ids=lambda fn: fn.__name__.removeprefix("_target_"),
)
def test_a_symlink_to_a_skipped_file_is_skipped_by_the_targets_own_path(vault, make_target):
    target = make_target(vault)
    os.symlink(target, vault / "link.md")
    result = within(10, walk_vault, vault)
    assert "link.md" not in rels(result)
    assert result.skipped["symlink to skipped file"] == 1
    assert not is_note_path(vault, "link.md")


def test_a_symlink_to_a_note_whose_target_path_is_not_utf8_is_skipped(vault):
    target = make_bytes_name(vault, b"t\xff.md")
    os.symlink(target, os.fsencode(vault) + b"/link.md")
    result = walk_vault(vault)
    assert rels(result) == []
    assert result.skipped == Counter({"name not UTF-8": 1, "symlink to skipped file": 1})


def test_a_symlink_whose_own_name_is_not_a_note_name_is_ignored(vault):
    write(vault / "n.md")
    os.symlink("n.md", vault / "alias.txt")
    os.symlink("n.md", vault / "alias")
    result = walk_vault(vault)
    assert rels(result) == ["n.md"]
    assert result.skipped == Counter()


def test_a_hidden_symlink_is_skipped_as_hidden(vault):
    write(vault / "n.md")
    os.symlink("n.md", vault / ".alias.md")
    result = walk_vault(vault)
    assert rels(result) == ["n.md"]
    assert result.skipped == Counter({"hidden": 1})


def test_broken_symlinks_and_symlink_loops_are_skipped(vault):
    os.symlink("missing.md", vault / "broken.md")
    os.symlink("ping.md", vault / "pong.md")
    os.symlink("pong.md", vault / "ping.md")
    os.symlink("self.md", vault / "self.md")
    os.symlink("missing", vault / "broken_dir")  # not a note name, not a folder: not counted
    result = within(10, walk_vault, vault)
    assert rels(result) == []
    assert result.skipped == Counter({"symlink loop or broken": 4})


def test_a_symlink_to_a_folder_is_never_followed(vault, outside):
    write(vault / "real/n.md")
    write(outside / "o.md")
    os.symlink("real", vault / "alias")  # inside: its notes are reached by their real path
    os.symlink(outside, vault / "external")  # outside: counted
    result = walk_vault(vault)
    assert rels(result) == ["real/n.md"]
    assert result.skipped == Counter({"symlink outside vault": 1})


def test_symlinks_to_the_vault_itself_or_its_parent_do_not_loop(vault):
    write(vault / "sub/n.md")
    os.symlink(".", vault / "self")
    os.symlink("..", vault / "sub/up")
    os.symlink("../..", vault / "sub/above")  # the vault's parent: outside
    result = within(10, walk_vault, vault)
    assert rels(result) == ["sub/n.md"]
    assert result.skipped == Counter({"symlink outside vault": 1})


def test_the_vault_root_may_itself_be_a_symlink(tmp_path, vault):
    write(vault / "n.md", b"via link")
    os.symlink(vault / "n.md", vault / "abs.md")  # absolute target through the real path
    root_link = tmp_path / "link_to_vault"
    os.symlink(vault, root_link)
    result = walk_vault(root_link)
    assert rels(result) == ["abs.md", "n.md"]
    assert [read_note(root_link, note) for note in result.notes] == [b"via link", b"via link"]
    assert is_note_path(root_link, "abs.md")


def test_a_symlink_into_the_vault_through_the_vault_links_own_path_counts_as_inside(tmp_path, vault):
    root_link = tmp_path / "link_to_vault"
    os.symlink(vault, root_link)
    write(vault / "n.md", b"x")
    os.symlink(root_link / "n.md", vault / "round_trip.md")
    result = walk_vault(root_link)
    assert rels(result) == ["n.md", "round_trip.md"]


# ---------------------------------------------------------------- the vault root and unlisted folders


def test_a_missing_vault_raises_vault_error(tmp_path):
    with pytest.raises(VaultError, match="not found") as info:
        walk_vault(tmp_path / "nope")
    assert info.value.hint


def test_a_vault_that_is_a_file_raises_vault_error(tmp_path):
    write(tmp_path / "file.md")
    with pytest.raises(VaultError, match="not a folder"):
        walk_vault(tmp_path / "file.md")


def test_a_vault_that_is_a_fifo_raises_vault_error_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(VaultError):
        within(10, walk_vault, tmp_path / "pipe")


def test_a_vault_that_is_a_broken_symlink_raises_vault_error(tmp_path):
    os.symlink(tmp_path / "gone", tmp_path / "vault_link")
    with pytest.raises(VaultError, match="not found"):
        walk_vault(tmp_path / "vault_link")


def _deny_listing(monkeypatch, *folders: Path) -> None:
    """Make os.scandir raise PermissionError for these folders (by path or by open fd)."""
    denied = {_identity(folder) for folder in folders}
    real_scandir = os.scandir

    def scandir(arg=None):
        if _identity(arg if arg is not None else ".") in denied:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_scandir(arg) if arg is not None else real_scandir()

    monkeypatch.setattr(vault_mod.os, "scandir", scandir)


def test_a_vault_root_that_cannot_be_listed_raises_vault_error(vault, monkeypatch):
    write(vault / "n.md")
    _deny_listing(monkeypatch, vault)
    with pytest.raises(VaultError, match="cannot list"):
        walk_vault(vault)


def test_a_folder_that_cannot_be_listed_is_recorded_and_the_walk_goes_on(vault, monkeypatch):
    write(vault / "a.md")
    write(vault / "locked/inner/b.md")
    write(vault / "z/c.md")
    _deny_listing(monkeypatch, vault / "locked")
    result = walk_vault(vault)
    assert rels(result) == ["a.md", "z/c.md"]
    assert result.unlisted == ["locked"]


def test_a_folder_that_cannot_be_opened_is_recorded_as_unlisted(vault, monkeypatch):
    write(vault / "a.md")
    write(vault / "sub/locked/b.md")
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):
        if path == "locked":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(vault_mod.os, "open", fake_open)
    result = walk_vault(vault)
    assert rels(result) == ["a.md"]
    assert result.unlisted == ["sub/locked"]


class _UnstatableEntry:
    """A DirEntry stand-in whose stat() fails, as in a folder readable but not searchable."""

    def __init__(self, entry):
        self._entry = entry
        self.name = entry.name
        self.path = entry.path

    def is_symlink(self):
        return self._entry.is_symlink()

    def is_dir(self, *, follow_symlinks=True):
        return self._entry.is_dir(follow_symlinks=follow_symlinks)

    def is_file(self, *, follow_symlinks=True):
        return self._entry.is_file(follow_symlinks=follow_symlinks)

    def stat(self, *, follow_symlinks=True):
        raise PermissionError(errno.EACCES, "Permission denied", self.name)


def test_notes_that_cannot_be_examined_mark_their_folder_unlisted(vault, monkeypatch):
    write(vault / "top.md")
    write(vault / "sub/a.md")
    write(vault / "other/b.md")
    unsearchable = {_identity(vault), _identity(vault / "sub")}
    real_scandir = os.scandir

    class Listing:
        """os.scandir whose note entries in `unsearchable` folders cannot be stat'ed."""

        def __init__(self, arg):
            self._it = real_scandir(arg)
            self._deny = _identity(arg) in unsearchable

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._it.close()

        def __iter__(self):
            for entry in self._it:
                deny = self._deny and entry.name.endswith(".md")
                yield _UnstatableEntry(entry) if deny else entry

    monkeypatch.setattr(vault_mod.os, "scandir", Listing)
    result = walk_vault(vault)
    assert rels(result) == ["other/b.md"]
    assert result.unlisted == ["", "sub"]  # "" is the root itself


def test_a_note_that_vanishes_during_the_walk_is_dropped_silently(vault, monkeypatch):
    write(vault / "a.md")
    write(vault / "gone.md")
    real_scandir = os.scandir

    class Listing:
        def __init__(self, arg):
            self._entries = list(real_scandir(arg))
            os.remove(vault / "gone.md")  # after listing, before its stat

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def __iter__(self):
            return iter(self._entries)

    monkeypatch.setattr(vault_mod.os, "scandir", Listing)
    result = walk_vault(vault)
    assert rels(result) == ["a.md"]
    assert result.skipped == Counter()
    assert result.unlisted == []


@pytest.mark.skipif(IS_ROOT, reason=ROOT_REASON)
def test_a_folder_without_permissions_is_recorded_as_unlisted(vault):
    write(vault / "a.md")
    write(vault / "locked/b.md")
    os.chmod(vault / "locked", 0)
    try:
        result = walk_vault(vault)
    finally:
        os.chmod(vault / "locked", 0o755)
    assert rels(result) == ["a.md"]
    assert result.unlisted == ["locked"]


@pytest.mark.skipif(IS_ROOT, reason=ROOT_REASON)
def test_a_vault_root_without_permissions_raises_vault_error(vault):
    os.chmod(vault, 0)
    try:
        with pytest.raises(VaultError):
            walk_vault(vault)
    finally:
        os.chmod(vault, 0o755)


# ---------------------------------------------------------------- read_note


def test_read_note_returns_the_bytes_of_a_walked_note(vault):
    write(vault / "sub/n.md", b"# Title\r\n\xe2\x9c\x93 bytes as stored\n")
    note = walk_vault(vault).notes[0]
    assert read_note(vault, note) == b"# Title\r\n\xe2\x9c\x93 bytes as stored\n"


def test_read_note_reads_a_note_of_exactly_2_mib(vault):
    sized(vault / "exact.md", MAX_NOTE_BYTES)
    note = walk_vault(vault).notes[0]
    assert len(read_note(vault, note)) == MAX_NOTE_BYTES


def test_read_note_sees_new_content_of_a_note_edited_in_place(vault):
    path = write(vault / "n.md", b"old")
    note = walk_vault(vault).notes[0]
    with open(path, "r+b") as handle:  # same file, same inode
        handle.write(b"new text")
    assert read_note(vault, note) == b"new text"


def test_read_note_refuses_a_note_replaced_by_a_symlink_outside_the_vault(vault, outside):
    path = write(vault / "n.md", b"mine")
    write(outside / "secret.md", b"secret")
    note = walk_vault(vault).notes[0]
    path.unlink()
    os.symlink(outside / "secret.md", path)
    with pytest.raises(NoteReadError, match="symlink outside vault") as info:
        read_note(vault, note)
    assert info.value.rel == "n.md"


def test_read_note_refuses_a_note_replaced_by_a_symlink_to_another_note(vault):
    path = write(vault / "n.md", b"mine")
    write(vault / "other.md", b"other")
    note = note_for(walk_vault(vault), "n.md")
    path.unlink()
    os.symlink("other.md", path)
    with pytest.raises(NoteReadError, match="replaced"):
        read_note(vault, note)


def test_read_note_refuses_a_note_replaced_by_another_file(vault):
    path = write(vault / "n.md", b"mine")
    note = walk_vault(vault).notes[0]
    write(vault / "n.md.tmp", b"swapped")
    os.replace(vault / "n.md.tmp", path)
    with pytest.raises(NoteReadError, match="replaced by another file"):
        read_note(vault, note)


def test_read_note_refuses_a_note_whose_folder_became_a_symlink(vault):
    write(vault / "sub/n.md", b"mine")
    note = walk_vault(vault).notes[0]
    # Same file (same inode) now reachable only through a folder symlink: never followed.
    os.rename(vault / "sub", vault / "moved")
    os.symlink("moved", vault / "sub")
    with pytest.raises(NoteReadError, match="folder"):
        read_note(vault, note)


def test_read_note_refuses_a_note_replaced_by_a_fifo_without_blocking(vault):
    path = write(vault / "n.md")
    note = walk_vault(vault).notes[0]
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(NoteReadError, match="no longer a regular file"):
        within(10, read_note, vault, note)


def test_read_note_refuses_a_note_that_grew_over_2_mib(vault):
    path = write(vault / "n.md", b"small")
    note = walk_vault(vault).notes[0]
    with open(path, "r+b") as handle:
        handle.truncate(MAX_NOTE_BYTES + 1)
    with pytest.raises(NoteReadError, match="grew over"):
        read_note(vault, note)


def test_read_note_reads_at_most_one_byte_past_the_limit_when_the_size_lies(vault, monkeypatch):
    path = write(vault / "n.md", b"small")
    note = walk_vault(vault).notes[0]
    with open(path, "r+b") as handle:
        handle.truncate(MAX_NOTE_BYTES * 2)

    class SmallStat:
        """A stat as of before the growth: read_note must still stop reading at the limit."""

        def __init__(self, st):
            self._st = st

        def __getattr__(self, name):
            return 5 if name == "st_size" else getattr(self._st, name)

    def stale(real):
        return lambda *args, **kwargs: SmallStat(real(*args, **kwargs))

    monkeypatch.setattr(vault_mod.os, "stat", stale(os.stat))
    monkeypatch.setattr(vault_mod.os, "fstat", stale(os.fstat))
    read_sizes = []
    real_read = os.read

    def spy_read(fd, n):
        data = real_read(fd, n)
        read_sizes.append(len(data))
        return data

    monkeypatch.setattr(vault_mod.os, "read", spy_read)
    with pytest.raises(NoteReadError, match="grew over"):
        read_note(vault, note)
    assert sum(read_sizes) == MAX_NOTE_BYTES + 1


def test_read_note_refuses_a_deleted_note(vault):
    path = write(vault / "n.md")
    note = walk_vault(vault).notes[0]
    path.unlink()
    with pytest.raises(NoteReadError, match="no longer exists"):
        read_note(vault, note)


def test_read_note_refuses_a_symlink_note_retargeted_to_another_note(vault):
    write(vault / "a.md", b"A")
    write(vault / "b.md", b"B")
    os.symlink("a.md", vault / "link.md")
    note = note_for(walk_vault(vault), "link.md")
    (vault / "link.md").unlink()
    os.symlink("b.md", vault / "link.md")
    with pytest.raises(NoteReadError, match="replaced"):
        read_note(vault, note)


def test_read_note_refuses_a_symlink_note_retargeted_outside_the_vault(vault, outside):
    write(vault / "a.md", b"A")
    write(outside / "secret.md", b"secret")
    os.symlink("a.md", vault / "link.md")
    note = note_for(walk_vault(vault), "link.md")
    (vault / "link.md").unlink()
    os.symlink(outside / "secret.md", vault / "link.md")
    with pytest.raises(NoteReadError, match="outside"):
        read_note(vault, note)


def test_read_note_refuses_a_symlink_note_retargeted_to_a_hidden_file(vault):
    write(vault / "a.md", b"A")
    os.symlink("a.md", vault / "link.md")
    note = note_for(walk_vault(vault), "link.md")
    os.rename(vault / "a.md", vault / ".a.md")  # same inode, now hidden
    (vault / "link.md").unlink()
    os.symlink(".a.md", vault / "link.md")
    with pytest.raises(NoteReadError, match="symlink to skipped file"):
        read_note(vault, note)


def test_read_note_refuses_a_path_that_is_not_a_note_path(vault, outside):
    write(outside / "secret.md", b"secret")
    st = os.stat(outside / "secret.md")
    forged = NoteFile("../outside/secret.md", st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, st.st_ctime_ns)
    with pytest.raises(NoteReadError, match="not a note path"):
        read_note(vault, forged)


def test_read_note_reports_an_unreadable_note(vault, monkeypatch):
    write(vault / "locked.md")
    note = walk_vault(vault).notes[0]
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):
        if path == "locked.md":
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(vault_mod.os, "open", fake_open)
    with pytest.raises(NoteReadError, match="Permission denied"):
        read_note(vault, note)


@pytest.mark.skipif(IS_ROOT, reason=ROOT_REASON)
def test_read_note_reports_a_note_without_read_permission(vault):
    path = write(vault / "locked.md")
    note = walk_vault(vault).notes[0]
    os.chmod(path, 0)
    with pytest.raises(NoteReadError):
        read_note(vault, note)


def test_read_note_reports_a_vault_that_is_gone(tmp_path, vault):
    write(vault / "n.md")
    note = walk_vault(vault).notes[0]
    os.rename(vault, tmp_path / "elsewhere")
    with pytest.raises(NoteReadError, match="vault folder"):
        read_note(vault, note)


def test_read_note_errors_are_vault_errors_with_a_message(vault):
    path = write(vault / "n.md")
    note = walk_vault(vault).notes[0]
    path.unlink()
    with pytest.raises(VaultError) as info:
        read_note(vault, note)
    assert info.value.message.startswith("cannot read note n.md:")


def test_read_note_leaks_no_file_descriptors(vault):
    write(vault / "a/b/c.md", b"deep")
    os.symlink("a/b/c.md", vault / "link.md")
    result = walk_vault(vault)
    fd_dir = "/proc/self/fd" if os.path.isdir("/proc/self/fd") else "/dev/fd"
    before = len(os.listdir(fd_dir))
    for _ in range(50):
        for note in result.notes:
            read_note(vault, note)
        walk_vault(vault)
        with pytest.raises(NoteReadError):
            read_note(vault, NoteFile("a/b/c.md", 4, 0, 0, 0, 0))
    assert len(os.listdir(fd_dir)) == before


# ---------------------------------------------------------------- note_rel_is_valid and is_note_path


@pytest.mark.parametrize(
    "rel",
    ["n.md", "a/b/c.MARKDOWN", "node_modules.md", "日本語/メモ.md", "x" * (MAX_PATH_CHARS - 3) + ".md"],
)
def test_note_rel_is_valid_accepts_plain_note_paths(rel):
    assert note_rel_is_valid(rel)


@pytest.mark.parametrize(
    "rel",
    [
        "",
        "/abs.md",
        "../up.md",
        "a/../b.md",
        "./a.md",
        "a//b.md",
        "a/",
        ".hidden.md",
        "a/.hidden/b.md",
        "NODE_MODULES/x.md",
        "a/__pycache__/x.md",
        "a.txt",
        "md",
        ".md",
        "x" * (MAX_PATH_CHARS - 2) + ".md",
        "bad\udcff.md",
        "nul\x00.md",
    ],
)
def test_note_rel_is_valid_rejects_paths_the_walk_would_never_produce(rel):
    assert not note_rel_is_valid(rel)


def test_is_note_path_agrees_with_the_walk_on_a_mixed_vault(vault, outside):
    write(vault / "a.md")
    write(vault / "sub/b.markdown")
    write(vault / "sub/c.txt")
    write(vault / ".hidden/d.md")
    write(vault / "node_modules/e.md")
    sized(vault / "big.md", MAX_NOTE_BYTES + 1)
    os.mkfifo(vault / "pipe.md")
    write(outside / "o.md")
    os.symlink("a.md", vault / "in.md")
    os.symlink(outside / "o.md", vault / "out.md")
    os.symlink("missing.md", vault / "broken.md")
    os.symlink("sub", vault / "dirlink")
    os.symlink(".hidden/d.md", vault / "to_hidden.md")
    walked = set(rels(within(10, walk_vault, vault)))
    candidates = {
        "a.md", "sub/b.markdown", "sub/c.txt", ".hidden/d.md", "node_modules/e.md", "big.md",
        "pipe.md", "in.md", "out.md", "broken.md", "dirlink/b.markdown", "to_hidden.md",
        "missing.md", "sub", "../outside/o.md",
    }  # fmt: skip
    assert walked == {"a.md", "sub/b.markdown", "in.md"}
    for rel in sorted(candidates):
        assert within(10, is_note_path, vault, rel) == (rel in walked), rel


def test_is_note_path_is_false_for_a_missing_vault(tmp_path):
    assert not is_note_path(tmp_path / "nope", "n.md")


# ---------------------------------------------------------------- change detection: ctime and identity

_SAME_TIME_NS = 1_700_000_000_000_000_000


def _stamped(path: Path, data: bytes) -> Path:
    """Write `data` and set atime and mtime to one fixed instant, as an archive extraction might."""
    write(path, data)
    os.utime(path, ns=(_SAME_TIME_NS, _SAME_TIME_NS))
    return path


def test_a_symlink_retargeted_to_a_file_of_the_same_size_and_mtime_carries_the_new_targets_identity(vault):
    _stamped(vault / "a.md", b"alpha text")
    b = _stamped(vault / "b.md", b"betas text")
    os.symlink("a.md", vault / "link.md")
    before = note_for(walk_vault(vault), "link.md")
    (vault / "link.md").unlink()
    os.symlink("b.md", vault / "link.md")
    after = note_for(walk_vault(vault), "link.md")
    st = os.stat(b)
    assert (after.size, after.mtime_ns) == (before.size, before.mtime_ns)
    assert (after.dev, after.ino, after.ctime_ns) == (st.st_dev, st.st_ino, st.st_ctime_ns)
    assert (after.dev, after.ino) != (before.dev, before.ino)
    assert read_note(vault, after) == b"betas text"


def test_a_note_replaced_by_mv_with_the_same_size_and_mtime_gets_a_new_identity(tmp_path, vault):
    path = _stamped(vault / "n.md", b"version 1")
    before = walk_vault(vault).notes[0]
    # What `mv` and `rsync -a` do: write elsewhere, keep the mtime, rename over the note.
    staged = _stamped(tmp_path / "staging.md", b"version 2")
    os.rename(staged, path)
    after = walk_vault(vault).notes[0]
    st = os.stat(path)
    assert (after.size, after.mtime_ns) == (before.size, before.mtime_ns)
    assert (after.ino, after.ctime_ns) == (st.st_ino, st.st_ctime_ns)
    assert (after.dev, after.ino, after.ctime_ns) != (before.dev, before.ino, before.ctime_ns)
    assert read_note(vault, after) == b"version 2"


def test_a_note_rewritten_in_place_with_its_mtime_put_back_gets_a_new_ctime(vault):
    path = _stamped(vault / "n.md", b"version 1")
    before = walk_vault(vault).notes[0]
    _stamped(path, b"version 2")  # same inode, same size, same mtime
    after = walk_vault(vault).notes[0]
    st = os.stat(path)
    assert (after.size, after.mtime_ns, after.ino) == (before.size, before.mtime_ns, before.ino)
    assert after.ctime_ns == st.st_ctime_ns
    if st.st_ctime_ns == before.ctime_ns:
        pytest.skip("this file system's ctime did not tick between the two writes")
    assert after.ctime_ns != before.ctime_ns


# ---------------------------------------------------------------- symlink resolution edge cases


@pytest.mark.parametrize(
    "target",
    ["./n.md", "sub/../n.md", "sub//../n.md", "sub/deeper/../../n.md", "../vault/n.md", "../vault/./sub/../n.md"],
)
def test_symlink_targets_with_dot_parts_resolve_like_the_kernel_does(vault, target):
    write(vault / "n.md", b"N")
    (vault / "sub/deeper").mkdir(parents=True)
    os.symlink(target, vault / "link.md")
    result = walk_vault(vault)
    assert rels(result) == ["link.md", "n.md"]
    assert read_note(vault, note_for(result, "link.md")) == b"N"


def test_a_symlink_through_a_file_or_with_a_trailing_slash_on_a_file_is_broken(vault):
    write(vault / "n.md", b"N")
    os.symlink("n.md/", vault / "slash.md")  # stat("n.md/") is ENOTDIR
    os.symlink("n.md/x.md", vault / "through.md")
    result = walk_vault(vault)
    assert rels(result) == ["n.md"]
    assert result.skipped == Counter({"symlink loop or broken": 2})
    assert result.uncertain == []


def test_a_chain_of_forty_symlinks_resolves_and_forty_one_is_a_loop(vault):
    write(vault / "n.md", b"N")
    previous = "n.md"
    for i in range(41):
        os.symlink(previous, vault / f"l{i:02}.md")
        previous = f"l{i:02}.md"
    result = walk_vault(vault)
    # l00 follows 1 link ... l39 follows 40 (Linux's limit, as stat() would); l40 follows 41.
    assert "l39.md" in rels(result) and "l40.md" not in rels(result)
    assert result.skipped == Counter({"symlink loop or broken": 1})
    assert read_note(vault, note_for(result, "l39.md")) == b"N"


def test_a_symlink_target_with_a_name_too_long_for_the_file_system_is_path_too_long(vault):
    os.symlink("x" * 300 + ".md", vault / "long.md")  # no file system allows a 303-byte name
    result = walk_vault(vault)
    assert rels(result) == []
    assert result.skipped == Counter({"path too long": 1})
    assert not is_note_path(vault, "long.md")


def _path_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 4096


def test_symlinks_in_a_vault_whose_absolute_paths_exceed_path_max_are_resolved(tmp_path, monkeypatch):
    # The vault itself lies deep (its own path fits PATH_MAX), and notes deeper still: absolute
    # paths of notes and links pass PATH_MAX though their vault-relative paths are well within
    # MAX_PATH_CHARS. Resolution relative to folder descriptors never builds those paths.
    path_max = _path_max(tmp_path)
    vault_rel = _make_deep_folder(tmp_path, path_max - 300 - len(str(tmp_path)), monkeypatch)
    vault = tmp_path / vault_rel
    notes_rel = _make_deep_folder(Path("."), 500, monkeypatch)  # inside the vault; cwd is now there
    depth = notes_rel.count("/") + 1
    with open("deep.md", "wb") as handle:
        handle.write(b"deep")
    os.symlink("../" * depth + "top.md", "up.md")  # a link whose own absolute path is too long
    os.symlink("deep.md", "side.md")
    monkeypatch.chdir(vault)
    with open("top.md", "wb") as handle:
        handle.write(b"top")
    os.symlink(f"{notes_rel}/deep.md", "down.md")  # a link whose target's absolute path is too long
    assert len(str(vault)) + 1 + len(f"{notes_rel}/deep.md") > path_max
    result = walk_vault(vault)
    expected = {"down.md": b"deep", f"{notes_rel}/deep.md": b"deep", f"{notes_rel}/side.md": b"deep",
                f"{notes_rel}/up.md": b"top", "top.md": b"top"}  # fmt: skip
    assert rels(result) == sorted(expected)
    assert result.skipped == Counter() and result.uncertain == [] and result.unlisted == []
    assert {note.rel: read_note(vault, note) for note in result.notes} == expected
    assert all(is_note_path(vault, rel) for rel in expected)


# ---------------------------------------------------------------- symlink targets that cannot be checked


def _fail_lookup(monkeypatch, name: str, err: int = errno.EACCES) -> None:
    """Make os.lstat of `name` (any folder) fail with `err`, as when its folder cannot be searched."""
    real_lstat = os.lstat

    def lstat(path, *args, **kwargs):
        if path == name:
            raise OSError(err, os.strerror(err), path)
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(vault_mod.os, "lstat", lstat)


@pytest.mark.parametrize("err", [errno.EACCES, errno.EPERM, errno.EIO, errno.EMFILE], ids=errno.errorcode.get)
def test_a_symlink_whose_target_cannot_be_examined_is_uncertain_not_broken(vault, monkeypatch, err):
    write(vault / "other.md")
    write(vault / "private/target.md")
    os.symlink("private/target.md", vault / "link.md")
    os.symlink("private/target.md", vault / "alias.txt")  # not a note name: never reported
    os.symlink("private/target.md", vault / ".hidden.md")  # hidden whatever it leads to
    _fail_lookup(monkeypatch, "target.md", err)
    result = walk_vault(vault)
    assert rels(result) == ["other.md", "private/target.md"]  # the walk stats entries itself
    assert result.uncertain == ["link.md"]
    assert result.skipped == Counter({"hidden": 1})  # not "symlink loop or broken"
    assert result.unlisted == []


def test_a_symlink_in_a_folder_that_lists_but_cannot_be_searched_is_uncertain(vault, monkeypatch):
    write(vault / "real.md")
    os.makedirs(vault / "links")
    os.symlink("../real.md", vault / "links/l.md")
    _fail_lookup(monkeypatch, "l.md")  # the link itself cannot be examined (folder mode r--)
    result = walk_vault(vault)
    assert rels(result) == ["real.md"]
    assert result.uncertain == ["links/l.md"]
    assert result.skipped == Counter()


def test_a_symlink_into_a_folder_that_cannot_be_opened_is_uncertain(vault, monkeypatch):
    write(vault / "other.md")
    write(vault / "private/target.md")
    os.symlink("private/target.md", vault / "link.md")
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):
        if path == "private":  # chmod 000: neither listed by the walk nor searched by the link
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(vault_mod.os, "open", fake_open)
    result = walk_vault(vault)
    assert rels(result) == ["other.md"]
    assert result.unlisted == ["private"]
    assert result.uncertain == ["link.md"]
    assert result.skipped == Counter()


def test_several_uncertain_symlinks_are_listed_sorted(vault, monkeypatch):
    write(vault / "t.md")
    for rel in ["z.md", "a/y.md", "b.md", "a/b/x.md"]:
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(vault / "t.md", (vault / rel).parent), vault / rel)
    _fail_lookup(monkeypatch, "t.md")
    assert walk_vault(vault).uncertain == ["a/b/x.md", "a/y.md", "b.md", "z.md"]


def test_read_note_and_is_note_path_refuse_a_symlink_whose_target_can_no_longer_be_checked(vault, monkeypatch):
    write(vault / "private/target.md", b"T")
    os.symlink("private/target.md", vault / "link.md")
    note = note_for(walk_vault(vault), "link.md")
    _fail_lookup(monkeypatch, "target.md")
    with pytest.raises(NoteReadError, match="cannot be checked") as info:
        read_note(vault, note)
    assert "broken" not in info.value.reason
    assert not is_note_path(vault, "link.md")


@pytest.mark.skipif(not HAS_O_PATH, reason="O_PATH is Linux-only; elsewhere a folder must be readable too")
def test_a_note_in_a_folder_that_can_be_searched_but_not_listed_is_read_through_its_symlink(vault, monkeypatch):
    write(vault / "secret/n.md", b"secret text")
    os.symlink("secret/n.md", vault / "via.md")
    st = os.stat(vault / "secret/n.md")
    direct = NoteFile("secret/n.md", st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino, st.st_ctime_ns)
    real_open = os.open

    def open_711(path, flags, *args, **kwargs):
        # What the kernel does with another user's 711 folder: lookups (O_PATH) yes, reading no.
        if path == "secret" and not flags & os.O_PATH:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(vault_mod.os, "open", open_711)
    result = walk_vault(vault)
    assert rels(result) == ["via.md"]
    assert result.unlisted == ["secret"]  # listing still needs read permission
    assert read_note(vault, note_for(result, "via.md")) == b"secret text"
    assert read_note(vault, direct) == b"secret text"
    assert is_note_path(vault, "via.md") and is_note_path(vault, "secret/n.md")


# ---------------------------------------------------------------- real permissions, as another user

# Walks a vault and prints what it found as JSON; run as a user whom permissions bind.
_WALK_AS_USER = r"""
import json, sys
from puremind.vault import is_note_path, read_note, walk_vault
root = sys.argv[1]
result = walk_vault(root)
read = {}
for note in result.notes:
    try:
        read[note.rel] = read_note(root, note).decode()
    except Exception as exc:
        read[note.rel] = f"error: {exc}"
print(json.dumps({
    "skipped": dict(result.skipped), "unlisted": result.unlisted, "uncertain": result.uncertain,
    "read": read, "is_note": {rel: is_note_path(root, rel) for rel in sys.argv[2:]},
}))
"""


@pytest.fixture
def as_user():
    """(vault, run): a vault in a world-searchable temporary folder, and run(*rels) that walks it as a
    user whom permissions bind (`nobody` through setpriv when the tests run as root) and returns the
    decoded JSON of _WALK_AS_USER, asking is_note_path about `rels`."""
    prefix: list[str] = []
    if IS_ROOT:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot test as a user that permissions bind")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    probe = subprocess.run([*prefix, sys.executable, "-c", "import puremind.vault"], env=env, capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"the other user cannot run this Python or import puremind: {probe.stderr[-300:]!r}")
    base = Path(tempfile.mkdtemp(prefix="pm-vault-"))
    os.chmod(base, 0o755)  # tmp_path lies in a folder only its owner can search
    vault = base / "vault"
    vault.mkdir()

    def run(*rels: str) -> dict:
        proc = subprocess.run(
            [*prefix, sys.executable, "-c", _WALK_AS_USER, str(vault), *rels],
            env=env, capture_output=True, text=True, timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    try:
        yield vault, run
    finally:
        for dirpath, dirnames, _ in os.walk(base):
            for name in dirnames:
                if not os.path.islink(os.path.join(dirpath, name)):
                    os.chmod(os.path.join(dirpath, name), 0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_symlinks_whose_targets_permissions_hide_them_are_uncertain_for_a_real_user(as_user):
    vault, run = as_user
    write(vault / "other.md", b"other")
    write(vault / "private/target.md", b"T")
    os.symlink("private/target.md", vault / "link.md")
    write(vault / "links/keep.txt", b"")
    os.symlink("../other.md", vault / "links/l.md")
    os.chmod(vault / "private", 0)  # neither listable nor searchable
    os.chmod(vault / "links", 0o744)  # for others: listable (r) but not searchable (no x)
    found = run("link.md", "links/l.md")
    assert found["read"] == {"other.md": "other"}
    assert found["uncertain"] == ["link.md", "links/l.md"]
    assert found["unlisted"] == ["private"]
    assert found["skipped"] == {}  # in particular, not "symlink loop or broken"
    assert found["is_note"] == {"link.md": False, "links/l.md": False}


def test_a_symlink_into_a_searchable_but_unlistable_folder_is_read_by_a_real_user(as_user):
    vault, run = as_user
    write(vault / "secret/n.md", b"secret text")
    os.symlink("secret/n.md", vault / "via.md")
    os.chmod(vault / "secret", 0o711)  # others may look names up (like `cat secret/n.md`) but not list
    found = run("via.md", "secret/n.md")
    assert found["unlisted"] == ["secret"]
    if HAS_O_PATH:
        assert found["read"] == {"via.md": "secret text"}
        assert found["is_note"] == {"via.md": True, "secret/n.md": True}
        assert found["uncertain"] == []
    else:  # without O_PATH a folder must be readable to be opened: unknown, never broken
        assert found["read"] == {} and found["uncertain"] == ["via.md"]
    assert found["skipped"] == {}
