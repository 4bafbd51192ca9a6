"""Vault -> chunker -> store, then store -> embedder -> store: incrementally, in two phases.

Phase one ("reading") involves no model: walk the vault, re-read only notes whose size or mtime changed (and
re-chunk only those whose SHA-256 changed), write their chunks, titles and keyword index, reuse stored vectors of
identical text (moved, renamed or copied notes are not embedded again), commit every few files so a killed run
keeps its progress and readers see it, remove notes that are gone last (so a rename reuses the vectors of the old
path), then compact the keyword index and empty the -wal file. Every note is searchable by keyword from here.

Phase two ("embedding") loads the model (unless the run was handed a loaded one) and embeds the chunks that have no
vector yet, in batches sized by time, each committed: a killed run keeps every batch it committed, and the next run
embeds only what is left. A vector is written only to a chunk that still has the text it was made from, so a note
changed meanwhile never gets the vector of its old text. A model that cannot be had ends the run with its error
after phase one: the keyword index is complete, and the next run that can load the model embeds what is missing.
A run that drops vectors (`--rebuild`, or a switch to another model) loads the model first instead, so that a
mistyped or missing model leaves the index as it was.
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
from puremind.errors import IndexBusyError, PuremindError, StoreError, VaultError
from puremind.folders import in_folders
from puremind.index_plan import RunPlan, content_action, note_identity, plan_run, unreadable_warnings
from puremind.store import ChunkRow, Store
from puremind.vault import NoteFile, NoteReadError, read_note, walk_vault

if TYPE_CHECKING:
    import numpy as np

    from puremind.models import Embedder

#: Commit after this many changed notes, or this many seconds, whichever comes first.
BATCH_FILES = 32
BATCH_SECONDS = 2.0
#: Phase two embeds in calls sized to take about this long (each committed); the first call embeds EMBED_FIRST
#: chunks, and no call more than EMBED_MAX.
EMBED_SECONDS = 2.0
EMBED_FIRST = 8
EMBED_MAX = 256
#: the two phases of a run, as the progress callback names them
READING = "reading"
EMBEDDING = "embedding"
#: The passage a new embedding model must embed before `--rebuild` touches the index.
TEST_PASSAGE = "pureMind checks that the embedding model loads before it changes the index."

META_VAULT = "vault"
META_PRECISION = "embed_precision"  # e.g. "int8" or "int8,fp16": how the vectors were computed (not compared)
META_CHUNKER = "chunker"
META_LAST_RUN = "last_index_run"

#: Vectors of removed notes are kept this long (and at most this many, newest first) so that a note that comes
#: back (a restored folder, an undone delete) is not embedded again; never searched, dropped by `--rebuild`.
ORPHAN_VECTOR_DAYS = 30
ORPHAN_VECTOR_ROWS = 20_000

#: progress(phase, done, total, name): phase READING counts notes (name: the note's path), phase EMBEDDING
#: counts chunks (name: the path of the note whose chunks are being embedded).
ProgressFn = Callable[[str, int, int, str], None]


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
    #: notes missing from the vault that were not removed (the vault looked empty, or too many at once)
    kept_missing: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    #: chunks still without a vector when the run ended (phase two stopped early, or no model)
    chunks_left: int = 0
    #: seconds of each phase (reading: walk, read, chunk, keyword index; embedding: load the model and embed)
    reading_seconds: float = 0.0
    embedding_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    #: the warnings that describe a lasting state of the vault, by kind ("removals held", "no notes"): a watch
    #: says each once while it lasts, not at every run
    standing: dict[str, str] = field(default_factory=dict)
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
        if self.kept_missing:
            parts.append(f"{self.kept_missing} missing kept")
        if self.chunks_left:
            parts.append(f"{self.chunks_left} passages still to embed")
        return f"indexed {self.vault}: " + ", ".join(parts) + f" in {self.seconds:.1f}s"


def chunker_signature() -> str:
    """The chunker settings that shape stored chunks and titles; a change re-reads every note (vectors of unchanged
    text are reused). titles=2: the file name is a name of every note, an alias when the note has another title.
    private=1: the frontmatter's `private` flag is stored (an index of the release before never read it)."""
    return f"v{chunker.CHUNKER_VERSION};max=2048;min=100;overlap=0.2;titles=2;private=1"


def embed_text(chunk: chunker.Chunk, title: str = "") -> str:
    """The text the embedder reads for a chunk: the breadcrumb (title, then headings) gives a window cut from a
    long section, or a note whose file name is its only title, its context."""
    return _embed_text_of(chunk.text, title, chunk.heading_path)


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
            from puremind.store.files import make_parent

            make_parent(self.path)  # every folder it makes 0700, whatever the umask
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
    if embedder is not None:
        store.check_vectors(embedder.fingerprint, doing="`puremind index` refuses to mix them")


def _record_precision(store: Store, embedder: "Embedder", fresh: bool) -> None:
    """Note the embedder's precision ("int8", "fp16", "torch-fp32") in META_PRECISION: the precisions that have
    written this index's vectors since they were last cleared. Recorded, never compared."""
    precision = getattr(embedder, "precision", None)
    if not isinstance(precision, str) or not precision:
        return
    known = [] if fresh else [p for p in (store.get_meta(META_PRECISION) or "").split(",") if p]
    if precision not in known:
        store.set_meta(META_PRECISION, ",".join([*known, precision]))


@dataclass(frozen=True)
class IndexOptions:
    """The knobs of one run.

    `rebuild`: re-chunk and re-embed every note (and switch the index to this vault or model). `allow_removals`:
    remove missing notes even when the vault looks empty or many go at once. `compact=False`: leave compacting
    the keyword index to the caller (`puremind watch` compacts on its own schedule). A batch is committed after
    `batch_files` changed notes or `batch_seconds`, whichever comes first.
    """

    rebuild: bool = False
    allow_removals: bool = False
    compact: bool = True
    batch_files: int = BATCH_FILES
    batch_seconds: float = BATCH_SECONDS
    #: phase two: seconds one embedding call (and commit) should take (a watch keeps it short, so that a saved
    #: note waits for at most one call)
    embed_seconds: float = EMBED_SECONDS
    #: `[agents] private`: vault-relative folders whose notes are kept from agents. Each run marks the notes anew,
    #: first, so a change of these folders takes effect without reading or embedding a note again.
    private_folders: tuple[str, ...] = ()


def index_vault(
    store: Store,
    vault: Path,
    *,
    embedder: "Embedder | None" = None,
    load_embedder: "Callable[[], Embedder] | None" = None,
    progress: ProgressFn | None = None,
    keep_embedding: Callable[[], bool] | None = None,
    options: IndexOptions | None = None,
    **knobs: object,
) -> IndexReport:
    """Bring the index up to date with the vault, in two phases (see the module). The caller holds the IndexLock.

    The model is `embedder` (loaded, handed in) or `load_embedder()` (called after phase one, only when a chunk
    lacks a vector; before it when the run drops vectors); neither is keyword-only. `keep_embedding()` is asked
    before each embedding call: False ends phase two there (a watch yields to a saved note), with what was embedded
    committed and `chunks_left` said in the report. `options` (or its fields as keywords: `rebuild=True`,
    `compact=False`, ...) set the run's knobs. With `compact=False`, text deleted by the run stays in the keyword
    index until a later `Store.compact()`, which `compact_pending()` marks. The vectors of removed notes are kept
    aside (by chunk text hash, for ORPHAN_VECTOR_DAYS) for a note that comes back.

    Raises:
        VaultError: the vault is missing or cannot be listed at all, or the index belongs to another vault.
        FingerprintMismatch: the embedder changed and `rebuild` was not asked for.
        StoreError: the index cannot be written.
        ModelError: `load_embedder()` failed; phase one is committed, and the error's message says that every
            note is searchable by keyword (its `report` attribute holds the run's report).
    """
    if options is not None and knobs:
        raise TypeError("give index_vault either options= or its fields as keywords, not both")
    opts = options if options is not None else IndexOptions(**knobs)  # type: ignore[arg-type]
    started = time.monotonic()
    root = _resolve_vault(vault)
    _check_vault_identity(store, root, opts.rebuild)
    if embedder is None and load_embedder is not None and opts.rebuild and store.counts().get("chunks", 0):
        embedder = load_embedder()  # a rebuild drops the vectors: only once the model is known to load
    model_changed = _check_model(store, embedder, opts.rebuild)

    walk = walk_vault(root)
    states = store.file_states()
    recut = opts.rebuild or store.get_meta(META_CHUNKER) not in (None, chunker_signature())
    plan = plan_run(root, walk, states, recut=recut, rebuild=opts.rebuild, allow_removals=opts.allow_removals)

    report = IndexReport(vault=root, kept_unlisted=plan.kept_unlisted, kept_missing=plan.kept_missing,
                         standing=dict(plan.standing))
    report.skipped.update(walk.skipped)
    _start_run(store, embedder, model_changed=model_changed, rebuild=opts.rebuild)
    with store.batch():
        store.refresh_targets({note.rel: note.target for note in walk.notes if note.target})
        store.refresh_private((lambda path: in_folders(path, opts.private_folders)) if opts.private_folders else None)
    # Vectors of identical text are reused in phase one: those of the model handed in, or (a model loaded later)
    # those of the index, whose model the caller compared with the configured one before the run.
    reuse_fp = embedder.fingerprint if embedder is not None else (
        store.vectors_fingerprint() if load_embedder is not None else None)
    _read_and_store(store, plan, reuse_fp, report, opts, progress)
    report.warnings.extend(report.standing.values())
    report.warnings.extend(plan.walk_warnings)
    report.warnings.extend(unreadable_warnings(report.unreadable, states))
    _finish_run(store, plan, opts.rebuild)
    report.removed = len(plan.remove)
    # The keyword index keeps old words in its segments until merged: compact so deleted text is gone.
    if opts.compact:
        store.compact()
    report.reading_seconds = time.monotonic() - started
    try:
        if embedder is not None or load_embedder is not None:
            embed_missing(store, embedder if embedder is not None else load_embedder, report,  # type: ignore[arg-type]
                          progress=progress, keep_going=keep_embedding, seconds=opts.embed_seconds)
        # keyword only (embedder = "none"): nothing is "still to embed"
    except PuremindError as exc:
        report.chunks_left = _chunks_left(store)
        files = store.counts().get("files", 0)
        exc.message = f"{exc.message.rstrip('.')}; all {files} notes are searchable by keyword meanwhile"
        exc.report = report  # type: ignore[attr-defined]
        raise
    finally:
        report.seconds = time.monotonic() - started
        report.embedding_seconds = report.seconds - report.reading_seconds
    return report


def _chunks_left(store: Store) -> int:
    counts = store.counts()
    return counts.get("chunks", 0) - counts.get("vectors", 0)


def embed_missing(
    store: Store,
    embedder: "Embedder | Callable[[], Embedder]",
    report: IndexReport,
    *,
    progress: ProgressFn | None = None,
    keep_going: Callable[[], bool] | None = None,
    seconds: float = EMBED_SECONDS,
) -> None:
    """Phase two: give every chunk without a vector one, in calls sized to take about `seconds`, each committed.
    `embedder` is the model or a callable that loads it (called only when a chunk lacks a vector). Identical text
    is embedded once, and a stored vector of identical text is reused. Sets the report's chunks_embedded,
    chunks_reused and chunks_left.

    Raises:
        FingerprintMismatch: the loaded model's vectors differ from those the index holds.
        ModelError: the model cannot be loaded.
        StoreError: the index cannot be written.
    """
    todo = store.chunks_missing_vectors()
    report.chunks_left = len(todo)
    if not todo:
        return
    model: "Embedder" = embedder if hasattr(embedder, "embed") else embedder()  # type: ignore[operator,assignment]
    check_fingerprint(store, model)
    fingerprint = model.fingerprint
    with store.batch():
        fresh = False
        if store.embed_fingerprint() != fingerprint:  # written only when it changes: a write bumps the change counter
            fresh = store.vectors_fingerprint() is None
            store.set_embed_fingerprint(fingerprint)
        _record_precision(store, model, fresh)
    total, done, size, at = len(todo), 0, EMBED_FIRST, 0
    while at < total:
        if keep_going is not None and not keep_going():
            break
        part = todo[at:at + size]
        at += len(part)
        sources = store.embed_sources([chunk_id for chunk_id, _ in part])
        vectors: dict[str, "np.ndarray"] = {}
        texts: dict[str, str] = {}
        name = ""
        for chunk_id, sha in part:
            source = sources.get(chunk_id)
            if source is None or source[0] != sha or sha in vectors or sha in texts:
                continue  # gone or changed since it was listed: its new chunks are listed by the next run
            _, name, title, heading_path, text = source
            kept = store.vector_for(sha, fingerprint=fingerprint)
            if kept is not None:
                vectors[sha] = kept
                report.chunks_reused += 1
            else:
                texts[sha] = _embed_text_of(text, title, heading_path)
        if texts:
            began = time.monotonic()
            fresh_vectors = model.embed(list(texts.values()))
            took = time.monotonic() - began
            for sha, vec in zip(texts, fresh_vectors):
                vectors[sha] = vec
            report.chunks_embedded += len(texts)
            per_chunk = took / len(texts)
            size = max(1, min(EMBED_MAX, int(seconds / per_chunk) if per_chunk > 0 else EMBED_MAX))
        rows = [(chunk_id, sha, vectors[sha]) for chunk_id, sha in part if sha in vectors]
        if rows:
            with store.batch():
                store.set_vectors(rows)
        done += len(part)
        if progress is not None:
            progress(EMBEDDING, done, total, name)
    report.chunks_left = _chunks_left(store)


def _embed_text_of(text: str, title: str, heading_path: tuple[str, ...]) -> str:
    """`embed_text` of a stored chunk (its text, the note's title and the headings above it)."""
    crumbs = chunker.breadcrumb(title, heading_path)
    return " > ".join(crumbs) + "\n\n" + text if crumbs else text


def _check_model(store: Store, embedder: "Embedder | None", rebuild: bool) -> bool:
    """Whether the run writes vectors of another model than the stored ones. A mistyped or broken model fails
    here, before anything in the index changes.

    Raises:
        FingerprintMismatch: the model changed and `rebuild` was not asked for.
    """
    if embedder is None or store.vectors_match(embedder.fingerprint):
        return False
    if not rebuild:
        check_fingerprint(store, embedder)
    embedder.embed([TEST_PASSAGE])
    return True


def _start_run(store: Store, embedder: "Embedder | None", *, model_changed: bool, rebuild: bool) -> None:
    stored_fp = store.embed_fingerprint()
    with store.batch():
        if rebuild:
            store.rebuild_keyword_index()  # also repairs a damaged keyword index
            store.prune_orphan_vectors(max_rows=0)  # a rebuild starts over: no vectors of deleted notes kept
        if embedder is not None:
            if model_changed:
                store.clear_vectors()
            fresh = model_changed or rebuild or stored_fp is None
            store.set_embed_fingerprint(embedder.fingerprint)
            _record_precision(store, embedder, fresh)


def _read_and_store(store: Store, plan: RunPlan, reuse_fp: str | None, report: IndexReport,
                    opts: IndexOptions, progress: ProgressFn | None) -> None:
    """Phase one: read the notes the plan names, chunk the changed ones (reusing stored vectors of identical text
    made with `reuse_fp`, unless rebuilding), and commit in batches (a killed run keeps what it committed)."""
    reuse: dict[str, "np.ndarray"] = {}
    pending: list[Callable[[], None]] = []
    last_commit = time.monotonic()
    total = len(plan.steps)

    def flush() -> None:
        nonlocal last_commit
        if pending:
            with store.batch():
                for op in pending:
                    op()
            pending.clear()
        last_commit = time.monotonic()

    for done, step in enumerate(plan.steps, 1):
        note, state = step.note, step.state
        if progress is not None:
            progress(READING, done, total, note.rel)
        if step.step == "unchanged":
            report.unchanged += 1
            continue
        try:
            data = read_note(plan.root, note)
        except NoteReadError as exc:
            report.unreadable.append((note.rel, getattr(exc, "reason", None) or str(exc)))
            if state is not None:
                report.kept_unreadable += 1
            continue
        digest = hashlib.sha256(data).hexdigest()
        identity = note_identity(note)
        if content_action(step, digest) == "touch":
            pending.append(lambda n=note, i=identity: store.touch_file(n.rel, n.size, n.mtime_ns, identity=i))
            report.unchanged += 1
        else:
            # --rebuild embeds every note again; otherwise identical text anywhere in the index is reused.
            text = data.decode("utf-8", errors="replace")
            named = chunker.note_title(text, note.rel)
            rows = _chunk_rows(text, named.title, None if opts.rebuild else reuse_fp, store, reuse, report)
            private = named.private or in_folders(note.rel, opts.private_folders) or bool(
                note.target and in_folders(note.target, opts.private_folders))
            pending.append(
                lambda n=note, d=digest, r=rows, i=identity, t=named, p=private: store.put_file(
                    n.rel, d, n.size, n.mtime_ns, r, identity=i, title=t.title, aliases=t.aliases,
                    private_mark=t.private, private=p, target=n.target)
            )
            if state is None:
                report.added += 1
            else:
                report.changed += 1
        if len(pending) >= opts.batch_files or time.monotonic() - last_commit >= opts.batch_seconds:
            flush()
    flush()


def _finish_run(store: Store, plan: RunPlan, rebuild: bool) -> None:
    """Remove the notes that are gone (last, so that a rename reused their vectors), prune old kept vectors and
    label the index."""
    # Vectors are not text: those of removed notes are kept aside for reuse (by the fingerprint they were made with).
    keep_for = None if rebuild else store.embed_fingerprint()
    with store.batch():
        for path in plan.remove:
            store.remove_file(path, keep_vectors_for=keep_for)
        store.prune_orphan_vectors(fingerprint=store.embed_fingerprint(),
                                   removed_before=time.time() - ORPHAN_VECTOR_DAYS * 86400,
                                   max_rows=0 if rebuild else ORPHAN_VECTOR_ROWS)
        store.set_meta(META_CHUNKER, chunker_signature())
        if not plan.looks_empty:
            # Set last: an index is only relabelled to a vault once that vault's notes are in it.
            store.set_meta(META_VAULT, str(plan.root))
        store.set_meta(META_LAST_RUN, f"{time.time():.3f}")


def _chunk_rows(
    text: str,
    title: str,
    reuse_fp: str | None,
    store: Store,
    reuse: dict[str, "np.ndarray"],
    report: IndexReport,
) -> list[ChunkRow]:
    """Chunk one note; a chunk whose identical text has a stored vector (made with `reuse_fp`) gets it, the
    others none yet (phase two embeds them)."""
    chunks = chunker.chunk_markdown(text)
    texts = [embed_text(c, title) for c in chunks]
    hashes = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
    vectors: list["np.ndarray | None"] = [None] * len(chunks)
    if reuse_fp is not None:
        for i, h in enumerate(hashes):
            vec = reuse.get(h)
            if vec is None:
                vec = store.vector_for(h, fingerprint=reuse_fp)
            if vec is not None:
                vectors[i] = reuse[h] = vec
                report.chunks_reused += 1
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


def iter_progress_lines(report: IndexReport) -> Iterator[str]:
    """The warning lines of a report, then its summary."""
    yield from (f"warning: {w}" for w in report.warnings)
    yield report.summary()


__all__ = [
    "IndexLock",
    "IndexOptions",
    "IndexReport",
    "NoteFile",
    "StoreError",
    "check_fingerprint",
    "embed_missing",
    "embed_text",
    "index_vault",
    "iter_progress_lines",
]
