"""Vault -> chunker -> embedder -> store, incrementally by size, mtime and content hash.

One run: walk the vault, re-read only notes whose size or mtime changed (and re-chunk only those whose SHA-256
changed), reuse stored vectors of identical text (moved, renamed or copied notes are not embedded again),
commit every few files so a killed run keeps its progress and readers see it, remove notes that are gone last
(so a rename reuses the vectors of the old path), then compact the keyword index and empty the -wal file.
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from puremind import chunker
from puremind.errors import FingerprintMismatch, IndexBusyError, StoreError, VaultError
from puremind.store import ChunkRow, Store
from puremind.vault import NoteFile, NoteReadError, read_note, walk_vault

if TYPE_CHECKING:
    import numpy as np

    from puremind.models import Embedder

#: Commit after this many changed notes, or this many seconds, whichever comes first.
BATCH_FILES = 32
BATCH_SECONDS = 2.0
#: The passage a new embedding model must embed before `--rebuild` touches the index.
TEST_PASSAGE = "pureMind checks that the embedding model loads before it changes the index."

META_VAULT = "vault"
META_FINGERPRINT = "embed_fingerprint"
META_CHUNKER = "chunker"
META_LAST_RUN = "last_index_run"

ProgressFn = Callable[[int, int, str], None]


@dataclass
class IndexReport:
    """What one run did; `summary()` is the one line the CLI prints."""

    vault: Path
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: collections.Counter[str] = field(default_factory=collections.Counter)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    kept_unlisted: int = 0
    kept_unreadable: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        parts = [
            f"{self.added} added",
            f"{self.changed} changed",
            f"{self.removed} removed",
            f"{self.unchanged} unchanged",
        ]
        skipped = sum(self.skipped.values())
        if skipped:
            reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items(), key=lambda kv: (-kv[1], kv[0])))
            parts.append(f"{skipped} skipped ({reasons})")
        else:
            parts.append("0 skipped")
        if self.unreadable:
            kept = f", {self.kept_unreadable} previous entries kept" if self.kept_unreadable else ""
            parts.append(f"{len(self.unreadable)} unreadable{kept}")
        if self.kept_unlisted:
            parts.append(f"{self.kept_unlisted} kept below folders that could not be listed")
        return f"indexed {self.vault}: " + ", ".join(parts) + f" in {self.seconds:.1f}s"


def chunker_signature() -> str:
    """The chunker settings that shape stored chunks; a change re-cuts every note."""
    return f"v{chunker.CHUNKER_VERSION};max=2048;min=100;overlap=0.2"


def embed_text(chunk: chunker.Chunk) -> str:
    """The text the embedder reads for a chunk: the breadcrumb gives a window cut from a long section its context."""
    if chunk.heading_path:
        return " > ".join(chunk.heading_path) + "\n\n" + chunk.text
    return chunk.text


class IndexLock:
    """An exclusive advisory lock beside the index, so two writers never interleave runs.

    Raises:
        IndexBusyError: another process holds it.
    """

    def __init__(self, db: Path):
        self.path = db.with_name(db.name + ".lock")
        self._fd: int | None = None

    def __enter__(self) -> "IndexLock":
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreError(
                f"cannot create the index folder or its lock file {self.path}: {exc.strerror or exc}",
                hint="set PUREMIND_DB (or PUREMIND_HOME) to a place you can write",
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise IndexBusyError(
                f"another puremind index or watch is writing {self.path.with_suffix('')}",
                hint="wait for it to finish, or stop the running `puremind watch`",
            ) from None
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def check_fingerprint(store: Store, embedder: "Embedder | None") -> None:
    """Refuse to mix vectors of different embedding settings.

    Raises:
        FingerprintMismatch: the index holds vectors of another embedder; `puremind index --rebuild` is needed.
    """
    if embedder is None:
        return
    stored = store.get_meta(META_FINGERPRINT)
    if stored is not None and stored != embedder.fingerprint and store.counts().get("vectors", 0) > 0:
        raise FingerprintMismatch(
            "the embedding model or its settings changed since this index was built",
            hint=f"run `puremind index --rebuild` to embed every note with the new model (index built with: {stored})",
        )


def index_vault(
    store: Store,
    vault: Path,
    *,
    embedder: "Embedder | None" = None,
    rebuild: bool = False,
    progress: ProgressFn | None = None,
    batch_files: int = BATCH_FILES,
    batch_seconds: float = BATCH_SECONDS,
    compact: bool = True,
) -> IndexReport:
    """Bring the index up to date with the vault. The caller holds the IndexLock.

    With `compact=False` the keyword index is not compacted at the end (`puremind watch` compacts on its own
    schedule); text deleted by the run then stays until a later `Store.compact()`, which `compact_pending()` marks.

    Raises:
        VaultError: the vault is missing or cannot be listed at all, or the index belongs to another vault.
        FingerprintMismatch: the embedder changed and `rebuild` was not asked for.
        StoreError: the index cannot be written.
    """
    started = time.monotonic()
    root = _resolve_vault(vault)
    report = IndexReport(vault=root)
    _check_vault_identity(store, root, rebuild)

    model_changed = False
    if embedder is not None:
        stored_fp = store.get_meta(META_FINGERPRINT)
        if stored_fp is not None and stored_fp != embedder.fingerprint and store.counts().get("vectors", 0) > 0:
            if not rebuild:
                check_fingerprint(store, embedder)
            # A mistyped or broken model must fail here, before anything in the index changes.
            embedder.embed([TEST_PASSAGE])
            model_changed = True

    walk = walk_vault(root)
    report.skipped.update(walk.skipped)
    states = store.file_states()
    recut = rebuild or store.get_meta(META_CHUNKER) not in (None, chunker_signature())
    needs_vectors = embedder is not None and (model_changed or store.counts().get("vectors", 0) < store.counts().get("chunks", 0))
    missing_vector_paths = store.paths_missing_vectors() if needs_vectors and not model_changed else set()

    with store.batch():
        if rebuild:
            store.rebuild_keyword_index()  # also repairs a damaged keyword index
        if embedder is not None:
            if model_changed:
                store.clear_vectors()
            store.set_meta(META_FINGERPRINT, embedder.fingerprint)

    reuse: dict[str, "np.ndarray"] = {}
    pending: list[Callable[[], None]] = []
    last_commit = time.monotonic()
    total = len(walk.notes)

    def flush() -> None:
        nonlocal last_commit
        if pending:
            with store.batch():
                for op in pending:
                    op()
            pending.clear()
        last_commit = time.monotonic()

    for done, note in enumerate(walk.notes, 1):
        if progress is not None:
            progress(done, total, note.rel)
        state = states.get(note.rel)
        identity = note_identity(note)
        force = recut or model_changed or note.rel in missing_vector_paths
        if (
            state is not None
            and not force
            and (state.size, state.mtime_ns, state.identity) == (note.size, note.mtime_ns, identity)
        ):
            report.unchanged += 1
            continue
        try:
            data = read_note(root, note)
        except NoteReadError as exc:
            report.unreadable.append((note.rel, getattr(exc, "reason", None) or str(exc)))
            if state is not None:
                report.kept_unreadable += 1
            continue
        digest = hashlib.sha256(data).hexdigest()
        if state is not None and not force and state.sha256 == digest:
            pending.append(lambda n=note, i=identity: store.touch_file(n.rel, n.size, n.mtime_ns, identity=i))
            report.unchanged += 1
        else:
            # --rebuild embeds every note again; otherwise identical text anywhere in the index is reused.
            rows = _chunk_rows(data, embedder, store, reuse, report, allow_reuse=not rebuild)
            pending.append(
                lambda n=note, d=digest, r=rows, i=identity: store.put_file(n.rel, d, n.size, n.mtime_ns, r, identity=i)
            )
            if state is None:
                report.added += 1
            else:
                report.changed += 1
        if len(pending) >= batch_files or time.monotonic() - last_commit >= batch_seconds:
            flush()
    flush()

    present = {n.rel for n in walk.notes}
    # Notes whose state the walk could not determine (a permission problem on a symlink's target): kept.
    present.update(walk.uncertain)
    gone = [p for p in states if p not in present]
    kept = [p for p in gone if _below_any(p, walk.unlisted)]
    report.kept_unlisted = len(kept)
    gone = [p for p in gone if not _below_any(p, walk.unlisted)]
    looks_empty = bool(gone) and not walk.notes and bool(states)
    if looks_empty:
        report.warnings.append(
            f"the vault {root} looks empty while the index holds {_n(len(states), 'note')}: nothing was removed "
            "(was a drive unmounted or a sync folder emptied? to start over, delete the index file)"
        )
        gone = []
    if walk.unlisted:
        shown = ", ".join(p or "." for p in walk.unlisted[:3]) + (" ..." if len(walk.unlisted) > 3 else "")
        report.warnings.append(f"{_n(len(walk.unlisted), 'folder')} could not be listed ({shown}): the notes below were kept")
    if walk.uncertain:
        shown = ", ".join(walk.uncertain[:3]) + (" ..." if len(walk.uncertain) > 3 else "")
        report.warnings.append(
            f"{_n(len(walk.uncertain), 'symlinked note')} could not be checked ({shown}): previous entries kept"
        )
    for rel, reason in report.unreadable[:3]:
        kept = " (previous entry kept)" if rel in states else ""
        report.warnings.append(f"cannot read {rel}: {reason}{kept}")
    if len(report.unreadable) > 3:
        report.warnings.append(f"... and {_n(len(report.unreadable) - 3, 'more unreadable note')}")
    with store.batch():
        for path in gone:
            store.remove_file(path)
        store.set_meta(META_CHUNKER, chunker_signature())
        if not looks_empty:
            # Set last: an index is only relabelled to a vault once that vault's notes are in it.
            store.set_meta(META_VAULT, str(root))
        store.set_meta(META_LAST_RUN, f"{time.time():.3f}")
    report.removed = len(gone)
    # The keyword index keeps old words in its segments until merged: compact so deleted text is gone.
    if compact:
        store.compact()
    report.seconds = time.monotonic() - started
    return report


def _chunk_rows(
    data: bytes,
    embedder: "Embedder | None",
    store: Store,
    reuse: dict[str, "np.ndarray"],
    report: IndexReport,
    *,
    allow_reuse: bool,
) -> list[ChunkRow]:
    """Chunk one note and give each chunk a vector: reused when identical text was embedded before."""
    text = data.decode("utf-8", errors="replace")
    chunks = chunker.chunk_markdown(text)
    texts = [embed_text(c) for c in chunks]
    hashes = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
    vectors: list["np.ndarray | None"] = [None] * len(chunks)
    if embedder is not None:
        todo: list[int] = []
        for i, h in enumerate(hashes):
            vec = reuse.get(h)
            if vec is None and allow_reuse:
                vec = store.vector_for(h)
            if vec is None:
                todo.append(i)
            else:
                vectors[i] = vec
                report.chunks_reused += 1
        if todo:
            fresh = embedder.embed([texts[i] for i in todo])
            for j, i in enumerate(todo):
                vectors[i] = fresh[j]
            report.chunks_embedded += len(todo)
        for h, vec in zip(hashes, vectors):
            if vec is not None:
                reuse[h] = vec
    return [
        ChunkRow(
            ord=i,
            heading_path=c.heading_path,
            text=c.text,
            start_line=c.start_line,
            end_line=c.end_line,
            kind=c.kind,
            text_sha256=h,
            vector=v,
        )
        for i, (c, h, v) in enumerate(zip(chunks, hashes, vectors))
    ]


def _resolve_vault(vault: Path) -> Path:
    """The vault's real directory. Raises VaultError when it is missing or not a directory."""
    try:
        root = vault.resolve(strict=True)
    except FileNotFoundError:
        raise VaultError(f"the vault directory {vault} does not exist", hint="check the path, or run `puremind init <vault_dir>`") from None
    except (OSError, RuntimeError) as exc:
        raise VaultError(f"cannot open the vault directory {vault}: {exc}") from None
    if not root.is_dir():
        raise VaultError(f"the vault {vault} is not a directory")
    return root


def _check_vault_identity(store: Store, root: Path, rebuild: bool) -> None:
    """An index belongs to one vault: pointing it at another one must not silently drop every note."""
    previous = store.get_meta(META_VAULT)
    if previous is None or previous == str(root) or rebuild:
        return
    if store.counts().get("files", 0) == 0:
        return
    raise VaultError(
        f"this index was built for the vault {previous}, not {root}",
        hint="run `puremind index --rebuild` to replace it with this vault, or set PUREMIND_DB to use another index file",
    )


def note_identity(note: NoteFile) -> str:
    """Device, inode and ctime of the file a note is read from: any swap or rewrite changes one of them."""
    return f"{note.dev}:{note.ino}:{note.ctime_ns}"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _below_any(path: str, folders: list[str]) -> bool:
    for folder in folders:
        if folder == "" or path.startswith(folder.rstrip("/") + "/"):
            return True
    return False


def iter_progress_lines(report: IndexReport) -> Iterator[str]:
    """The warning lines of a report, then its summary."""
    yield from (f"warning: {w}" for w in report.warnings)
    yield report.summary()


__all__ = [
    "IndexLock",
    "IndexReport",
    "NoteFile",
    "StoreError",
    "check_fingerprint",
    "embed_text",
    "index_vault",
    "iter_progress_lines",
]
