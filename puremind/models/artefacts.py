"""Exported model folders on disk: where they live, how they are written whole, and how they are checked.

Layout: `<PUREMIND_HOME>/models/<key>@<revision[:12]>/<variant>/` holding the model (`model.onnx`, plus
`model.onnx_data` over 2 GB, or a `model.mlpackage` folder), the tokenizer and config files, and
`puremind_model.json`: what the model is (pooling, prefixes, limits, graph inputs) and the SHA-256 and size
of every other file in the folder. That JSON is written last, so a folder without it is never a model.

A folder is built in a hidden sibling (`.partial-<pid>-<random>`) and renamed into place only once complete
and flushed to disk, so an interrupted export leaves no half model where a reader looks. Stale `.partial-`
and `.old-` siblings are removed by the next export of the same model, under a lock that keeps two exports of
one model from running at once.

Only the standard library is imported here: the runtime reads artefacts without onnxruntime being loaded.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

from puremind.errors import ModelError

FORMAT = 1
META_NAME = "puremind_model.json"
#: stats of the files as they were when last verified; lets later loads skip hashing gigabytes.
STAMP_NAME = ".verified.json"
LOCK_NAME = ".lock"
PARTIAL_PREFIX = ".partial-"
OLD_PREFIX = ".old-"
_HASH_CHUNK = 4 * 1024 * 1024
_EXPORT_HINT = "run `puremind export-models --force` to export it again"

# Within one process the per-model lock is re-entrant (export_model holds it while each variant is written);
# flock itself is per open file, so a second flock from this process on a new fd would deadlock.
_locks_guard = threading.Lock()
_held: dict[str, tuple[int, int]] = {}
_active_partials: set[str] = set()


def models_root(home: Path) -> Path:
    """The folder holding every exported model of this PUREMIND_HOME."""
    return Path(home) / "models"


def _check_name(value: str, what: str) -> str:
    if not value or value.startswith(".") or "/" in value or "\\" in value or "\0" in value:
        raise ModelError(f"{what} {value!r} cannot name a model folder")
    return value


def model_dir(home: Path, spec_key: str, revision: str) -> Path:
    """`<home>/models/<key>@<revision[:12]>`, the parent of one model's variant folders.

    Raises:
        ModelError: the key or revision would make an unsafe path (empty, hidden, or containing a slash).
    """
    _check_name(spec_key, "model key")
    _check_name(revision, "revision")
    return models_root(home) / f"{spec_key}@{revision[:12]}"


def artefact_dir(home: Path, spec_key: str, revision: str, variant: str) -> Path:
    """`<home>/models/<key>@<revision[:12]>/<variant>`; the folder may not exist yet.

    Raises:
        ModelError: a part would make an unsafe path.
    """
    return model_dir(home, spec_key, revision) / _check_name(variant, "variant")


def list_variants(home: Path, spec_key: str, revision: str) -> list[str]:
    """Names of the variants exported for this model and revision (folders holding puremind_model.json).

    Nothing is verified here; `read_artefact` does that when a variant is loaded.
    """
    parent = model_dir(home, spec_key, revision)
    try:
        entries = list(parent.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(p.name for p in entries if not p.name.startswith(".") and (p / META_NAME).is_file())


# -- checksums ------------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 4 MiB pieces (multi-gigabyte weights never sit in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _payload_files(root: Path) -> list[str]:
    """Relative POSIX paths of every regular file under root except the metadata and the stamp."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            rel = Path(dirpath, name).relative_to(root).as_posix()
            if rel in (META_NAME, STAMP_NAME):
                continue
            out.append(rel)
    return out


def _stat_key(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def _safe_rel(rel: Any) -> bool:
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\0" in rel:
        return False
    return all(part not in ("", ".", "..") for part in rel.split("/"))


# -- reading --------------------------------------------------------------------------------------


def read_artefact(dir: Path, *, verify: bool = True) -> dict:
    """Read an exported model's metadata, checking that its files are all there and intact.

    With `verify`, every file's SHA-256 is compared with the metadata. A successful check leaves a stamp of
    the files' (size, mtime_ns, inode) beside them, so later loads of unchanged files only stat them.
    Without `verify`, only presence and sizes are checked.

    Raises:
        ModelError: the folder or its metadata is missing or unreadable, a file is missing, or a file's size or
            checksum differs from the metadata.
    """
    dir = Path(dir)
    meta_path = dir / META_NAME
    try:
        raw = meta_path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise ModelError(
            f"no exported model in {dir}", hint="run `puremind export-models` to export it"
        ) from None
    except OSError as exc:
        raise ModelError(f"cannot read {meta_path}: {exc.strerror or exc}") from None
    try:
        meta = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"the model metadata {meta_path} is not valid JSON ({exc})", hint=_EXPORT_HINT) from None
    if not isinstance(meta, dict) or not isinstance(meta.get("files"), dict) or not meta["files"]:
        raise ModelError(f"the model metadata {meta_path} lists no files", hint=_EXPORT_HINT)
    if meta.get("format") != FORMAT:
        raise ModelError(
            f"{meta_path} has format {meta.get('format')!r}; this pureMind reads format {FORMAT}",
            hint=_EXPORT_HINT,
        )
    files: dict = meta["files"]
    for rel, entry in files.items():
        if not _safe_rel(rel) or not isinstance(entry, dict) or not isinstance(entry.get("size"), int) \
                or not isinstance(entry.get("sha256"), str):
            raise ModelError(f"the model metadata {meta_path} has a malformed entry {rel!r}", hint=_EXPORT_HINT)
        path = dir / rel
        try:
            size = path.stat().st_size
        except OSError:
            raise ModelError(f"exported model {dir} is incomplete: {rel} is missing", hint=_EXPORT_HINT) from None
        if size != entry["size"]:
            raise ModelError(
                f"exported model file {path} has {size} bytes, its metadata says {entry['size']} "
                "(changed or truncated)",
                hint=_EXPORT_HINT,
            )
    if verify and not _stamp_matches(dir, raw, files):
        for rel, entry in files.items():
            if sha256_file(dir / rel) != entry["sha256"]:
                raise ModelError(
                    f"exported model file {dir / rel} does not match its SHA-256 checksum (corrupt or changed)",
                    hint=_EXPORT_HINT,
                )
        _write_stamp(dir, raw, files)
    return meta


def _stamp_content(dir: Path, meta_raw: bytes, files: dict) -> dict:
    return {
        "meta_sha256": hashlib.sha256(meta_raw).hexdigest(),
        "meta": _stat_key(dir / META_NAME),
        "files": {rel: _stat_key(dir / rel) for rel in files},
    }


def _stamp_matches(dir: Path, meta_raw: bytes, files: dict) -> bool:
    try:
        stamp = json.loads((dir / STAMP_NAME).read_bytes())
        return stamp == _stamp_content(dir, meta_raw, files)
    except (OSError, ValueError):
        return False


def _write_stamp(dir: Path, meta_raw: bytes, files: dict) -> None:
    # Best effort: a read-only models folder is still usable, it is just hashed on every load.
    tmp = dir / f"{STAMP_NAME}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(_stamp_content(dir, meta_raw, files)))
        os.replace(tmp, dir / STAMP_NAME)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


# -- writing --------------------------------------------------------------------------------------


@contextlib.contextmanager
def model_lock(parent: Path, *, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the export lock of one model folder (`<key>@<rev>/.lock`); re-entrant within this process.

    Blocks while another process exports the same model; `on_wait` is told once when that happens.
    """
    parent.mkdir(parents=True, exist_ok=True)
    key = str(parent.resolve())
    with _locks_guard:
        if key in _held:
            fd, count = _held[key]
            _held[key] = (fd, count + 1)
            fd = -1
        else:
            fd = os.open(parent / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    if fd != -1:
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait:
                    on_wait(f"waiting for another export of {parent.name} to finish")
                fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        with _locks_guard:
            _held[key] = (fd, 1)
    try:
        yield
    finally:
        with _locks_guard:
            fd, count = _held[key]
            if count > 1:
                _held[key] = (fd, count - 1)
            else:
                del _held[key]
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)


def remove_stale(parent: Path) -> list[str]:
    """Remove `.partial-*` and `.old-*` leftovers of interrupted exports; call with the model lock held.

    Folders this process is building right now are kept. Returns the names removed.
    """
    removed = []
    try:
        entries = list(parent.iterdir())
    except FileNotFoundError:
        return removed
    for entry in entries:
        if not entry.name.startswith((PARTIAL_PREFIX, OLD_PREFIX)):
            continue
        with _locks_guard:
            if str(entry) in _active_partials:
                continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry.name)
    return removed


@contextlib.contextmanager
def partial_dir(parent: Path, suffix: str = "") -> Iterator[Path]:
    """A fresh hidden work folder in `parent`, removed on exit; never taken for stale while in use."""
    path = parent / f"{PARTIAL_PREFIX}{os.getpid()}-{secrets.token_hex(4)}{suffix}"
    path.mkdir(parents=True)
    with _locks_guard:
        _active_partials.add(str(path))
    try:
        yield path
    finally:
        with _locks_guard:
            _active_partials.discard(str(path))
        shutil.rmtree(path, ignore_errors=True)


def _fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, (os.O_RDONLY | os.O_DIRECTORY) if directory else os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_artefact_atomically(final_dir: Path, build: Callable[[Path], dict]) -> Path:
    """Build a model folder in a hidden sibling, then move it into place in one rename.

    `build(tmp)` writes the model, tokenizer and config files into `tmp` and returns the metadata (without
    "files"). This function adds "format", "created" when absent and the SHA-256 and size of every file, writes
    puremind_model.json last, flushes everything to disk and renames the folder into place, replacing an older
    one. If `build` raises, or the process dies, `final_dir` is left as it was (stale work folders are removed
    by the next export). Holds the model's export lock throughout.

    Raises:
        ModelError: the folder cannot be written; whatever `build` raises passes through unchanged.
    """
    final_dir = Path(final_dir)
    parent = final_dir.parent
    with model_lock(parent):
        remove_stale(parent)
        with partial_dir(parent) as tmp:
            meta = dict(build(tmp))
            try:
                files = {}
                for rel in _payload_files(tmp):
                    path = tmp / rel
                    _fsync_path(path)
                    files[rel] = {"sha256": sha256_file(path), "size": path.stat().st_size}
                if not files:
                    raise ModelError(f"exporting {final_dir.name} produced no files")
                meta.setdefault("format", FORMAT)
                meta.setdefault("created", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
                meta["files"] = files
                raw = (json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode()
                with open(tmp / META_NAME, "wb") as fh:
                    fh.write(raw)
                    fh.flush()
                    os.fsync(fh.fileno())
                _write_stamp(tmp, raw, files)  # hashed from disk a moment ago; inode and mtime survive the rename
                for dirpath, _, _ in os.walk(tmp):
                    _fsync_path(Path(dirpath), directory=True)
                old = None
                if final_dir.exists():
                    old = parent / f"{OLD_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
                    os.rename(final_dir, old)
                os.rename(tmp, final_dir)
                _fsync_path(parent, directory=True)
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)
            except OSError as exc:
                raise ModelError(f"cannot write the exported model {final_dir}: {exc.strerror or exc}") from exc
    return final_dir
