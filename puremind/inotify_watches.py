"""What Linux says about this process's inotify watches, read through /proc and libc only.

`puremind watch` must stop with an error when a system limit means that a folder of the vault cannot be watched
(spec: watcher). watchdog raises for a folder it cannot watch only while it starts; a folder made later that hits
the watch limit is only logged inside watchdog (7.1.1 and later). So the watcher asks the kernel instead:

- `watched_inodes()`: every inode this process's inotify instances watch, from the `inotify wd:` lines of
  /proc/self/fdinfo/<fd> for each fd that is an inotify instance.
- `unwatched_folders(root, wanted)`: the folders below `root` that `wanted` keeps and that no watch covers.
- `probe(path)`: try one watch on `path` from a fresh inotify instance of our own (removed at once) and return
  the errno, so ENOSPC (the watch limit) tells a folder that cannot be watched from one that watchdog simply has
  not reached yet (made a moment ago).

All of it is Linux-only: elsewhere (macOS FSEvents watches a whole tree with one stream, and has no limit per
folder) `watched_inodes()` returns None and the watcher does no such check.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys
from typing import Callable

_PROC_FD = "/proc/self/fd"
_PROC_FDINFO = "/proc/self/fdinfo"
_IN_CLOEXEC = 0o2000000
_IN_ATTRIB = 0x00000004
_IN_ONLYDIR = 0x01000000

Identity = tuple[int, int]  # (device as the kernel writes it, inode)


def _kernel_dev(st_dev: int) -> int:
    # fdinfo's sdev is the kernel's dev_t (major << 20 | minor), not stat's encoding.
    return (os.major(st_dev) << 20) | os.minor(st_dev)


def identity(st: os.stat_result) -> Identity:
    return (_kernel_dev(st.st_dev), st.st_ino)


def _inotify_fds() -> list[str]:
    fds = []
    for name in os.listdir(_PROC_FD):
        try:
            if os.readlink(os.path.join(_PROC_FD, name)) == "anon_inode:inotify":
                fds.append(name)
        except OSError:
            continue  # closed meanwhile
    return fds


def watched_inodes() -> set[Identity] | None:
    """(device, inode) of everything this process's inotify instances watch; None where the kernel does not say
    (not Linux, no /proc)."""
    if not sys.platform.startswith("linux") or not os.path.isdir(_PROC_FDINFO):
        return None
    watched: set[Identity] = set()
    try:
        fds = _inotify_fds()
    except OSError:
        return None
    for fd in fds:
        try:
            with open(os.path.join(_PROC_FDINFO, fd), encoding="ascii", errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            continue
        for line in lines:
            if not line.startswith("inotify wd:"):
                continue
            fields = dict(part.split(":", 1) for part in line.split()[1:] if ":" in part)
            try:
                watched.add((int(fields["sdev"], 16), int(fields["ino"], 16)))
            except (KeyError, ValueError):
                continue
    return watched


def folders(root: str, wanted: Callable[[str], bool]) -> dict[str, Identity]:
    """Every folder below `root` (root included) that `wanted(path)` keeps, as watchdog walks them: symlinked
    folders are not entered. A folder that `wanted` refuses is not entered either."""
    found: dict[str, Identity] = {}
    try:
        found[root] = identity(os.stat(root))
    except OSError:
        return found
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        if not entry.is_dir(follow_symlinks=False):
                            continue
                        if not wanted(entry.path):
                            continue
                        found[entry.path] = identity(entry.stat(follow_symlinks=False))
                    except OSError:
                        continue  # gone meanwhile
                    stack.append(entry.path)
        except OSError:
            continue  # unreadable or gone: watchdog cannot enter it either
    return found


def unwatched_folders(root: str, wanted: Callable[[str], bool]) -> list[str] | None:
    """The folders below `root` that `wanted` keeps and that no inotify watch of this process covers, sorted;
    `[root]` alone when `root` itself is not watched (then nothing below it is either); None when that cannot be
    told (not Linux, no /proc)."""
    watched = watched_inodes()
    if watched is None:
        return None
    present = folders(root, wanted)
    if root not in present:
        return []  # gone: nothing to watch
    if present[root] not in watched:
        return [root]
    return sorted(path for path, ident in present.items() if ident not in watched)


_libc = None


def _load_libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        _libc.inotify_init1.argtypes = [ctypes.c_int]
        _libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return _libc


def probe(path: str) -> int:
    """Try to watch `path` from a fresh inotify instance of our own; 0 when it could be watched, else the errno
    (ENOSPC: the watch limit; EMFILE: the instance limit; ENOENT, EACCES: gone, not readable). The instance is
    closed at once, which removes the watch."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = _load_libc()
    fd = libc.inotify_init1(_IN_CLOEXEC)
    if fd < 0:
        return ctypes.get_errno() or errno.EIO
    try:
        wd = libc.inotify_add_watch(fd, os.fsencode(path), _IN_ATTRIB | _IN_ONLYDIR)
        return 0 if wd >= 0 else (ctypes.get_errno() or errno.EIO)
    finally:
        os.close(fd)


__all__ = ["folders", "identity", "probe", "unwatched_folders", "watched_inodes"]
