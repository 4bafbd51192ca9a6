"""The application layer: the operations both front ends call (index, search, get a note, recent notes, watch,
export the models), shared by the CLI, the MCP server and the demo.

Each takes the Settings, builds what it needs (store, lock, the models object) and returns data for the caller to
render (the result schema of puremind.results). Only the front ends and this layer see `Settings`: the layers below
take small parameter objects (ModelChoice, RetrievalParams) and a models object. Deciding to export a model that
is missing belongs here, above both the model layer and the export step.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Sequence

from puremind.config import Settings
from puremind.errors import IndexBusyError, IndexDamaged, StoreError, VaultError
from puremind.messages import quiet, to_stderr
from puremind.models.lazy import Models
from puremind.models.loader import EXPORT_HINT, ModelChoice, Resolved
from puremind.results import NoteResult, RecentNote, RecentResult, SearchResult, iso_utc, search_result
from puremind.retrieval.pipeline import RetrievalParams, Searcher
from puremind.store import Store

Notice = Callable[[str], None]


# -- the models object -----------------------------------------------------------------------------------------


def model_choice(settings: Settings, role: str, *, threads: int | None = None) -> ModelChoice:
    """The settings of the configured embedder or reranker, as the model layer takes them; `threads` None lets
    the runtime use every core (searches)."""
    if role == "embedder":
        return ModelChoice("embedder", settings.embedder, settings.home, settings.embedder_revision,
                           backend=settings.backend, device=settings.device, variant=settings.variant,
                           pooling=settings.pooling, query_prefix=settings.query_prefix,
                           max_tokens=settings.embed_max_seq, threads=threads)
    return ModelChoice("reranker", settings.reranker, settings.home, settings.reranker_revision,
                       backend=settings.backend, device=settings.device, variant=settings.variant,
                       max_chars=settings.rerank_chars, threads=threads)


def indexing_threads(settings: Settings, cores: int | None = None) -> int:
    """The model threads of `index` and `watch`: `[models] threads`, else every core but one on a machine with
    more than two (a core stays free for the user and for searches), else every core."""
    if settings.threads:
        return settings.threads
    cores = cores if cores is not None else (os.cpu_count() or 1)
    return cores - 1 if cores > 2 else cores


#: How much lower `index` and `watch` run than other processes (os.nice: 0 normal, 19 lowest).
INDEXING_NICENESS = 10

#: Set in the environment of an `index` or `watch` run that was started again in a session of its own: the pid
#: of the process that started it (it stops when that one is gone).
OWN_SESSION_ENV = "PUREMIND_OWN_SESSION"

_AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")
_AUTOGROUP = Path("/proc/self/autogroup")


def autogroup_scheduling() -> bool:
    """Whether Linux schedules by autogroup here (most desktop distributions): the CPU is then shared fairly
    between sessions (terminals) first, and a process's niceness orders it only against its own session."""
    try:
        return _AUTOGROUP_SWITCH.read_text().strip() == "1" and _AUTOGROUP.exists()
    except OSError:
        return False


def needs_own_session() -> bool:
    """Whether an `index` or `watch` run must start again in a session of its own to yield the CPU: under
    autogroup scheduling, a run that shares a terminal's session can only lower that whole session's group,
    which is the user's shell and everything in it. A run that leads its own session already (a service, a
    command started with one) does not."""
    return autogroup_scheduling() and os.getsid(0) != os.getpid() and OWN_SESSION_ENV not in os.environ


def run_in_own_session(command: Sequence[str]) -> int | None:
    """Run `command` (this `index` or `watch` command line again) as the leader of a new session, whose autogroup
    it can then lower alone, and return its exit code; None when it cannot be started (the caller then runs
    here, at its own niceness only).

    The child shares stdin, stdout and stderr. A new session has no controlling terminal, so this process passes
    the terminal's signals on: Ctrl-C (SIGINT), SIGTERM and SIGHUP are sent to the child (unless this process
    ignores them, as under `nohup`), and Ctrl-Z stops both until they are continued. The child stops itself when
    this process is gone (see `lower_priority`).
    """
    import signal
    import subprocess

    env = {**os.environ, OWN_SESSION_ENV: str(os.getpid())}
    child: subprocess.Popen | None = None
    early: list[int] = []  # signals that came before the child existed

    def forward(signum, frame) -> None:
        if child is None:
            early.append(signum)
            return
        try:
            os.kill(child.pid, signum)
        except ProcessLookupError:
            pass

    def stop(signum, frame) -> None:
        forward(signal.SIGSTOP, frame)
        os.kill(os.getpid(), signal.SIGSTOP)  # the shell sees the job stopped; `fg` continues this process

    def resume(signum, frame) -> None:
        forward(signal.SIGCONT, frame)

    handled = [(signal.SIGINT, forward), (signal.SIGTERM, forward), (signal.SIGHUP, forward),
               (signal.SIGTSTP, stop), (signal.SIGCONT, resume)]
    # A signal this process ignores stays ignored, and the child inherits that (`nohup`, a background job's
    # Ctrl-C): passing it on would undo what the user asked for.
    previous = [(signum, signal.signal(signum, handler)) for signum, handler in handled
                if signal.getsignal(signum) != signal.SIG_IGN]
    try:
        try:
            child = subprocess.Popen(list(command), env=env, start_new_session=True)
        except OSError:
            return None  # this interpreter cannot be started again (a sandbox, a user without access to it)
        for signum in early:
            forward(signum, None)
        code = child.wait()
    finally:
        for signum, handler in previous:
            signal.signal(signum, handler)
    return 128 - code if code < 0 else code  # killed by a signal: the shell's convention


def _stop_with_parent(parent: int) -> None:
    """In a run started by `run_in_own_session`: be sent SIGTERM when the starting process ends (Linux), and end
    at once if it has ended already."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _lower_autogroup(niceness: int) -> bool:
    """Raise the niceness of this session's autogroup to at least `niceness` (any user may lower a group's
    priority; the kernel accepts one change per 0.1 s across the system, so a busy moment is retried)."""
    try:
        current = int(_AUTOGROUP.read_text().split("nice")[1])
    except (OSError, IndexError, ValueError):
        return False
    if current >= niceness:
        return True
    for _ in range(20):
        try:
            _AUTOGROUP.write_text(str(niceness))
            return True
        except BlockingIOError:
            time.sleep(0.02)
        except OSError:
            return False
    return False


def _lower_threads(niceness: int) -> None:
    """Raise the niceness of every thread of this process to at least `niceness` (Linux: /proc/self/task; never
    lowered: a thread already nicer stays so). Linux keeps a niceness per thread, and `os.nice` changes only the
    calling one; threads started before (a thread pool, onnxruntime's, watchdog's) would keep theirs. Threads
    started later inherit their starter's. Listed again until no new thread shows up (one may start meanwhile)."""
    task = Path("/proc/self/task")
    done: set[int] = set()
    for _ in range(10):
        try:
            tids = {int(name) for name in os.listdir(task) if name.isdigit()} - done
        except OSError:
            return  # not Linux: os.nice changed the whole process
        if not tids:
            return
        for tid in tids:
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                    os.setpriority(os.PRIO_PROCESS, tid, niceness)
            except OSError:
                pass  # the thread has ended meanwhile
        done |= tids


def lower_priority() -> bool:
    """Make this process (an `index` or `watch` run) yield the CPU to others: niceness +10 where the system has
    it, for every thread it has and starts later, and under autogroup scheduling, when this process leads its own
    session, the same for its session's group (which holds only this run), so that the user's other terminals and
    agents' servers come first. Returns whether the niceness took effect."""
    parent = os.environ.get(OWN_SESSION_ENV)
    if parent and parent.isdigit() and os.getsid(0) == os.getpid():
        _stop_with_parent(int(parent))
    try:
        niceness = os.nice(INDEXING_NICENESS)
    except (AttributeError, OSError):
        return False
    _lower_threads(niceness)
    if autogroup_scheduling() and os.getsid(0) == os.getpid():
        _lower_autogroup(INDEXING_NICENESS)
    return True


def retrieval_params(settings: Settings, *, rerank: bool | None = None) -> RetrievalParams:
    """The settings of a search, as the retrieval layer takes them; `rerank` overrides the configured one."""
    return RetrievalParams(candidates=settings.candidates, rrf_k=settings.rrf_k, fusion_depth=settings.fusion_depth,
                           rerank=settings.rerank if rerank is None else rerank, rerank_chars=settings.rerank_chars,
                           rerank_candidates=settings.rerank_candidates, rerank_budget=settings.rerank_budget)


def build_models(settings: Settings, *, progress: Notice | None = None, indexing: bool = False) -> Models:
    """The models object of one command (or one server session): nothing is loaded until it is used. With
    `indexing` (the `index` and `watch` commands), the models run on `indexing_threads` threads.

    `embedder = "none"` is keyword search with no model: then no embedder and no reranker are configured;
    `reranker = "none"` configures no reranker. An ONNX variant that is not exported yet is exported on first use
    when the [export] extra is installed.
    """
    if not settings.semantic:
        return Models(None, None, progress=progress)
    threads = indexing_threads(settings) if indexing else None
    reranker = model_choice(settings, "reranker", threads=threads) if settings.has_reranker else None
    return Models(model_choice(settings, "embedder", threads=threads), reranker, obtain=export_if_missing,
                  progress=progress)


def export_if_missing(choice: ModelChoice, resolved: Resolved, variant: str, progress: Notice | None) -> Path:
    """Export one ONNX variant that a model needs and is missing (the loader's `obtain`).

    A model folder (or hub snapshot) that holds its own ONNX model needs no [export] extra: its ONNX file serves
    as fp32 and the other variants are made from it by onnxruntime (`puremind.export.from_onnx`).

    Raises:
        ModelsUnavailable: the [export] extra is not installed and the folder holds no ONNX model (the message
            says what to run), or the int8/fp16 copy of an ONNX model cannot be made (no onnx package).
        ModelError: fetching, exporting or verifying failed.
    """
    from puremind.models import ModelsUnavailable
    from puremind.models.loader import source_of
    from puremind.models.onnx_folder import FP32_FILES, find_onnx

    folder = getattr(resolved.source, "path", None)
    if folder is not None and find_onnx(folder) is not None:
        from puremind.export.from_onnx import adopt_onnx

        if progress is not None:
            progress(f"preparing {resolved.spec.hub_id} ({variant}) from its ONNX model once; later runs load it")
        return adopt_onnx(resolved.spec, resolved.source, choice.home, [variant],
                          progress=progress or to_stderr)[variant]
    try:
        from puremind.export import export_available, export_model
    except ImportError:  # pragma: no cover - the export package ships with puremind
        export_available = None
    if export_available is None or not export_available():
        if folder is not None:  # a local folder or a hub snapshot without ONNX: only exporting it needs the extra
            raise ModelsUnavailable(
                f"{resolved.spec.hub_id} holds no ONNX model ({' or '.join(FP32_FILES)}), and exporting one "
                "needs the [export] extra",
                hint=EXPORT_HINT,  # the loader adds the other ways forward
            )
        raise ModelsUnavailable(
            f"{resolved.spec.hub_id} is not exported for ONNX Runtime yet ({variant})",
            hint=EXPORT_HINT,  # the loader adds the other ways forward
        )
    source = source_of(resolved, progress=progress)
    if progress is not None:
        progress(f"exporting {resolved.spec.hub_id} ({variant}) once; later runs load the export")
    paths = export_model(resolved.spec, source, choice.home, [variant], progress=progress or to_stderr)
    return paths[variant]


def export_models(
    settings: Settings,
    *,
    variants: Sequence[str] | None = None,
    coreml: bool | None = None,
    roles: Sequence[str] = ("embedder", "reranker"),
    force: bool = False,
    progress: Notice = to_stderr,
) -> list[tuple[str, str, Path]]:
    """`puremind export-models`: fetch and export the configured models. Returns (model, variant, folder) rows.

    A model whose folder (or hub snapshot) holds its own ONNX model is prepared from it by onnxruntime's tools
    (`export.from_onnx.adopt_onnx`: no torch); any other is exported through Optimum, which needs the [export] extra.

    Raises:
        ModelError: the [export] extra is missing for a model without ONNX, or a model cannot be fetched or
            exported.
    """
    import platform

    from puremind.errors import ModelError
    from puremind.export import export_available, export_model
    from puremind.export.from_onnx import adopt_onnx
    from puremind.models.loader import resolve, source_of
    from puremind.models.onnx_folder import find_onnx

    def need_export_extra(what: str) -> None:
        if not export_available():
            raise ModelError(f"the export step needs the [export] extra (torch, Optimum){what}",
                             hint=EXPORT_HINT.split(", then")[0])

    if coreml is None:
        coreml = platform.system() == "Darwin" and platform.machine() == "arm64"
    done: list[tuple[str, str, Path]] = []
    for role in roles:
        if not settings.configures(role):
            continue
        resolved = resolve(model_choice(settings, role), progress=progress)
        source = source_of(resolved, progress=progress)
        wanted = list(variants) if variants else [v for v in resolved.spec.variants if v != "coreml"]
        unknown = [v for v in wanted if v not in resolved.spec.variants]
        if unknown:
            raise ModelError(
                f"unknown variant {', '.join(unknown)} for {resolved.spec.hub_id}",
                hint="defined: " + ", ".join(sorted(resolved.spec.variants)),
            )
        if find_onnx(source.path) is not None:
            # Its own ONNX model serves as fp32; fp16 and int8 are made from it (a Core ML copy is not).
            paths = adopt_onnx(resolved.spec, source, settings.home, wanted, progress=progress, force=force)
            done += [(resolved.spec.hub_id, v, p) for v, p in paths.items()]
            continue
        need_export_extra(f" for {resolved.spec.hub_id}, which ships no ONNX model")
        paths = export_model(resolved.spec, source, settings.home, wanted, progress=progress, force=force)
        done += [(resolved.spec.hub_id, v, p) for v, p in paths.items()]
        if coreml and "coreml" in resolved.spec.variants:
            from puremind.export import export_coreml

            done.append((resolved.spec.hub_id, "coreml", export_coreml(resolved.spec, source, settings.home, progress=progress)))
    return done


# -- indexing --------------------------------------------------------------------------------------------------


def _index_vectors(db: Path) -> str | None:
    """The embedding fingerprint of the vectors in the index at `db`; None when it holds none (or is damaged)."""
    if not Path(db).is_file():
        return None
    try:
        store = Store.open(db, create=False)
        try:
            return store.vectors_fingerprint()
        finally:
            store.close()
    except IndexDamaged:
        return None  # nothing in it can be trusted; the run itself says so (or, with --rebuild, repairs it)
    except IndexBusyError:
        # Another `puremind index` is creating or upgrading it right now: this is only the early check; the run
        # checks again under the index lock (a watch waits for that lock).
        return None


def embedder_for_index(settings: Settings, models: Models, notice: Notice, *, rebuild: bool = False):
    """What loads the embedder an index run writes with (called after the run's first phase, see
    indexer.index_vault), or None when the user turned semantic search off.

    Unless `rebuild`, the configured model is compared with the index's vectors first, before anything is
    fetched, exported or loaded. `embedder = "none"` on an index with vectors keeps them (notes changed meanwhile get
    theirs when indexed with the model again) and says so; with `rebuild` it is refused, since it would drop them.

    Raises:
        FingerprintMismatch: the index holds vectors of another embedder (both named), or `rebuild` with
            `embedder = "none"` would drop its vectors.
        ModelsUnavailable: the model cannot be had here (the hint names the ways forward).
        ModelError: the model cannot be found, fetched, exported or verified.
    """
    from puremind.errors import FingerprintMismatch
    from puremind.fingerprint import model_label

    stored = _index_vectors(settings.db)
    if not models.semantic:
        if stored is not None:
            was = model_label(stored)
            if rebuild:
                raise FingerprintMismatch(
                    f'--rebuild with embedder = "none" would drop the vectors of {was} this index holds',
                    hint=f"set [models] embedder back to {was.rsplit('@', 1)[0]} to rebuild with it, or delete "
                         f"{settings.db} to start over with keyword search only",
                )
            notice(f'warning: embedder = "none": indexing keywords only; the vectors of {was} stay in the index, '
                   "and notes changed now get theirs when you index with that model again")
        return None
    if not rebuild:
        models.check_index(stored, doing="`puremind index` refuses to mix them")
    return models.embedder


def run_index(
    settings: Settings,
    *,
    rebuild: bool = False,
    allow_removals: bool = False,
    progress=None,
    notice: Notice = quiet,
    models: Models | None = None,
):
    """Index the configured vault into the configured index file.

    A run first checks the index's pages (quick_check): a damaged index is never taken for "unchanged". With
    `rebuild`, a damaged index is repaired: a new index is built beside it from the notes and swapped in (the
    damaged file is kept as <index>.damaged); an undamaged one is rebuilt in place, as before.

    `models`: the models object to index with (default: built from the settings).

    Raises:
        ConfigError, VaultError, StoreError (IndexDamaged: the index is damaged and `rebuild` was not asked for),
        IndexBusyError, FingerprintMismatch, ModelError.
    """
    from puremind.indexer import IndexLock, IndexOptions, index_vault
    from puremind.store import files

    vault = settings.require_vault()
    if models is None:
        models = build_models(settings, progress=notice)
    # Reads the index's fingerprint (a short read-only open) before the model is loaded or exported, which can
    # take minutes, and before the lock is taken: the run below checks it again under the lock.
    load_embedder = embedder_for_index(settings, models, notice, rebuild=rebuild)
    with IndexLock(settings.db):
        new_file = not settings.db.exists()
        try:
            store = Store.open(settings.db)
            try:
                store.check_integrity()
            except BaseException:
                store.close()
                raise
        except IndexDamaged:
            if not rebuild:
                raise
            return _repair(settings, vault, load_embedder, allow_removals, progress, notice)
        try:
            if new_file and (warning := files.open_folder_warning(settings.db)) and settings.db.parent != settings.home:
                notice(f"warning: {warning}")
            return index_vault(store, vault, load_embedder=load_embedder, progress=progress,
                               options=IndexOptions(rebuild=rebuild, allow_removals=allow_removals,
                                                    private_folders=settings.private_folders))
        finally:
            store.close()


def _repair(settings: Settings, vault: Path, load_embedder, allow_removals: bool, progress, notice: Notice):
    """`--rebuild` of a damaged index (the caller holds the index lock): index the vault into a new file beside
    it, then swap that in and keep the damaged one as <index>.damaged. A run killed on the way leaves the damaged
    index where it was (the half-built file is removed by the next try).

    Raises:
        VaultError: the vault holds no notes (the damaged index is left in place rather than replaced by an empty
            one), unless `allow_removals`.
    """
    from puremind.indexer import IndexOptions, index_vault
    from puremind.store import files

    db = settings.db
    fresh = db.with_name(db.name + ".rebuild")
    for leftover in (fresh, *files.side_files(fresh)):
        leftover.unlink(missing_ok=True)
    notice(f"the index {db} is damaged: building a new one from the notes beside it")
    store = Store.open(fresh)
    try:
        report = index_vault(store, vault, load_embedder=load_embedder, progress=progress,
                             options=IndexOptions(rebuild=True, allow_removals=True,
                                                  private_folders=settings.private_folders))
        notes = store.counts().get("files", 0)
    finally:
        store.close()
    if notes == 0 and not allow_removals:
        for leftover in (fresh, *files.side_files(fresh)):
            leftover.unlink(missing_ok=True)
        raise VaultError(
            f"the vault {report.vault} has no notes now: the damaged index {db} was left as it was",
            hint="check the vault folder; run `puremind index --rebuild --allow-removals` to replace it with an "
            "empty index",
        )
    damaged = db.with_name(db.name + ".damaged")
    files.swap_in(fresh, db, keep_old_as=damaged)
    notice(f"repaired: the new index is in place; the damaged one is kept as {damaged} (delete it when done)")
    return report


# -- searching and reading -------------------------------------------------------------------------------------


def make_searcher(settings: Settings, *, rerank: bool | None = None, models: Models | None = None,
                  notice: Notice = quiet, agent: bool = False) -> Searcher:
    """A Searcher over the configured index, with the models object (default: built from the settings). `agent`:
    it serves an agent (the MCP server), and never finds a private note or one outside the agent's scope.

    Raises:
        ConfigError: (agent) a scope folder that is not a folder of the vault (see `agent_scope`).
    """
    if models is None:
        models = build_models(settings, progress=notice)
    scope = agent_scope(settings) if agent else ()
    return Searcher(settings.db, models, retrieval_params(settings, rerank=rerank), notice=notice, agent=agent,
                    scope=scope)


def agent_scope(settings: Settings) -> tuple[str, ...]:
    """The folders an agent may read (`serve --scope`, `[agents] scope`) as folder keys ("work/"); () for the
    whole vault (see puremind.folders.scope_folders).

    Raises:
        ConfigError: a folder outside the vault, with `..`, or that is not a folder of the vault.
    """
    from puremind.folders import folder_key

    return tuple(dict.fromkeys(folder_key(folder) for folder in scope_folders(settings)))


def scope_folders(settings: Settings) -> tuple[str, ...]:
    """The agent's scope folders as given, each made vault-relative ("Work/Notes"); () for the whole vault.

    Raises:
        ConfigError: see `agent_scope`.
    """
    from puremind import folders

    return folders.scope_folders(settings.require_vault(), settings.scope) if settings.scope else ()


def require_index(settings: Settings) -> None:
    """Refuse early, with the next step to take, when there is no index file (or not even a vault).

    Raises:
        StoreError: there is no index file.
    """
    db = settings.db
    if db.exists():
        return
    if settings.vault is None:
        raise StoreError(
            f"no index at {db}: no vault is configured yet",
            hint="run `puremind init <vault_dir>`, then `puremind index`",
        )
    raise StoreError(f"no index at {db}", hint="run `puremind index`")


def search(settings: Settings, searcher, query: str, limit: int = 10, *, lexical_only: bool = False) -> SearchResult:
    """One search with a long-lived Searcher (the server's), as the result schema.

    Raises:
        QueryError: nothing searchable in the query.
        StoreError: there is no index yet, or it cannot be read.
        FingerprintMismatch: the embedding model changed; `puremind index --rebuild` is needed.
        ModelError: a configured model cannot be loaded.
    """
    require_index(settings)
    return search_result(searcher.search(query, limit, lexical_only=lexical_only))


def run_search(
    settings: Settings,
    query: str,
    *,
    limit: int = 10,
    lexical_only: bool = False,
    rerank: bool | None = None,
    models: Models | None = None,
    notice: Notice = quiet,
) -> SearchResult:
    """One search from the terminal: hybrid (BM25 + CJK grams + dense, RRF, then the reranker unless reranking
    is off), or BM25 alone with `lexical_only`. Notes about skipped models go to `notice` too.

    Raises:
        QueryError: nothing searchable in the query.
        StoreError: there is no index yet, or it cannot be read.
        FingerprintMismatch: the embedding model changed; `puremind index --rebuild` is needed.
        ModelError: a configured model cannot be loaded.
    """
    searcher = make_searcher(settings, rerank=rerank, models=models, notice=notice)
    try:
        outcome = searcher.search(query, limit, lexical_only=lexical_only)
    finally:
        searcher.close()
    for note in outcome.notes:
        notice(note if note.startswith("hint: ") else f"note: {note}")
    return search_result(outcome)


def run_eval(
    settings: Settings,
    *,
    seed: int | None = None,
    queries: int | None = None,
    time_budget: float = 0.0,
    progress=None,
    models: Models | None = None,
    notice: Notice = quiet,
) -> dict:
    """`puremind eval`: known-item queries built from the configured vault (puremind.evaluate), run through each
    configuration that can run here; returns the summary (figures only) after storing it in the index's meta table
    in one write at the end, so an interrupted run leaves the last summary as it was.

    Raises:
        ConfigError, VaultError: no vault, or it holds no indexed note to build queries from.
        StoreError: there is no index yet, or it cannot be read or written.
        FingerprintMismatch: the configured embedder is not the one the index was built with.
        ModelError: a configured model is broken.
    """
    import json

    from puremind import evaluate
    from puremind.retrieval.gate import META_EVAL
    from puremind.vault import NoteReadError, read_note, walk_vault

    require_index(settings)
    vault = settings.require_vault()
    seed = evaluate.DEFAULT_SEED if seed is None else seed
    if models is None:
        models = build_models(settings, progress=notice)
    store = Store.open(settings.db, create=False)
    try:
        indexed = set(store.file_states())
        stored = store.vectors_fingerprint()
    finally:
        store.close()
    if models.semantic and stored is not None:
        models.check_index(stored)  # before a model is loaded
    notes = []
    for note in walk_vault(vault).notes:
        if note.rel in indexed:
            try:
                notes.append((note.rel, read_note(vault, note).decode("utf-8", errors="replace")))
            except NoteReadError:
                continue  # gone or changed since the walk: the next index run sees it
    built = evaluate.build_queries(notes, seed=seed, limit=evaluate.DEFAULT_QUERIES if queries is None else queries)
    if not built:
        raise VaultError(f"no known-item queries could be built from the {len(notes)} indexed notes of {vault}",
                         hint="run `puremind index`; eval needs notes with a title, a heading, a longer text or a link")
    configs = evaluate.configurations(settings.db, models, retrieval_params(settings, rerank=True),
                                      has_vectors=stored is not None)
    start = time.perf_counter()
    try:
        evaluate.run_queries(built, configs, time_budget=time_budget, progress=progress)
    finally:
        for config in configs:
            if config.searcher is not None:
                config.searcher.close()
    summary = evaluate.summarise(built, configs, seed=seed, notes=len(notes),
                                 models=evaluate.model_summary(models, configs),
                                 elapsed=time.perf_counter() - start, planned=len(built),
                                 date=iso_utc(time.time_ns()))
    store = Store.open(settings.db)
    try:
        with store.batch():
            store.set_meta(META_EVAL, json.dumps(summary, ensure_ascii=False, separators=(",", ":")))
    finally:
        store.close()
    return summary


def get_note(settings: Settings, path: str, *, max_chars: int = 200_000, agent: bool = False) -> NoteResult:
    """One whole note by its vault-relative path, read with the indexer's rules (see vault.read_note_at); the
    text is cut after `max_chars` characters. `agent`: it serves an agent, so a private note (see `is_private`)
    is refused with the very message of a note that does not exist.

    Raises:
        ConfigError: no vault is configured.
        VaultError: the path is not a note pureMind serves (or, for an agent, is private), or it cannot be read now.
    """
    from puremind.vault import not_served, read_note_at

    vault = settings.require_vault()
    rel, data = read_note_at(vault, path)
    text = data.decode("utf-8", errors="replace")
    if agent and not agent_may_read(settings, vault, rel, text):
        raise not_served(path)
    return NoteResult(path=rel, text=text[:max_chars], total_chars=len(text), truncated=len(text) > max_chars)


def agent_may_read(settings: Settings, vault: Path, rel: str, text: str) -> bool:
    """Whether an agent may read the note at `rel` (content `text`): it is not private and lies in the agent's
    scope. A note that is a symlink is judged by the note it leads to as well."""
    from puremind.folders import in_folders

    real_vault = os.path.realpath(vault)
    target = os.path.relpath(os.path.realpath(os.path.join(real_vault, rel)), real_vault).replace(os.sep, "/")
    paths = dict.fromkeys([rel, target])
    scope = agent_scope(settings)
    if scope and not all(in_folders(p, scope) for p in paths):
        return False
    return not any(is_private(settings, p, text) for p in paths)


def is_private(settings: Settings, rel: str, text: str) -> bool:
    """Whether the note at `rel` with content `text` is kept from agents: its frontmatter says `private: true`, it
    lies in a folder of `[agents] private`, or the index marks it private (as of the last run). The note as it is
    now counts as well as the index, so a note made private since the last run is refused already; an index that
    cannot be read leaves the first two to decide."""
    from puremind.chunker import note_title
    from puremind.folders import in_folders

    if in_folders(rel, settings.private_folders) or note_title(text, rel).private:
        return True
    if not settings.db.exists():
        return False
    try:
        store = Store.open(settings.db, create=False)
        try:
            return store.is_private(rel)
        finally:
            store.close()
    except StoreError:
        return False


def recent_notes(settings: Settings, days: int, limit: int, *, agent: bool = False) -> RecentResult:
    """Notes by modification time, newest first, from the index's file table; `agent`: without private notes and
    those outside the agent's scope.

    Raises:
        StoreError: there is no index yet, or it cannot be read.
    """
    require_index(settings)
    since = time.time() - days * 86_400
    store = Store.open(settings.db, create=False, hide_private=agent, scope=agent_scope(settings) if agent else ())
    try:
        rows = store.recent_files(since, limit)
    finally:
        store.close()
    return RecentResult(days=days, notes=[RecentNote(path=r.path, modified=iso_utc(r.mtime_ns), size=r.size) for r in rows])


# -- watching --------------------------------------------------------------------------------------------------


def run_watch(
    settings: Settings,
    *,
    debounce: float = 2.0,
    say: Notice,
    notice: Notice,
    progress: Callable[[str, int, int, str], None] | None = None,
    models: Models | None = None,
) -> None:
    """`puremind watch`: load the embedder once, then watch until Ctrl-C (KeyboardInterrupt, after compacting)
    or SIGTERM (a run in progress stops at its next note; returns after compacting).

    Raises:
        ConfigError, VaultError, StoreError, FingerprintMismatch, ModelError, WatchError: see Watcher.run.
    """
    import logging
    import signal
    import threading

    from puremind.watcher import Timing, Watcher

    vault = settings.require_vault()
    # watchdog logs its own races and lost events through logging's last-resort handler (stderr); what matters
    # of them reaches the user through the watcher (a lost event starts a run), so keep its lines out.
    logging.getLogger("watchdog").addHandler(logging.NullHandler())
    if models is None:
        models = build_models(settings, progress=notice)
    load_embedder = embedder_for_index(settings, models, notice)
    watcher = Watcher(vault, settings.db, load_embedder=load_embedder, timing=Timing.for_debounce(debounce), say=say,
                      notice=notice, progress=progress, private_folders=settings.private_folders)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: watcher.stop())
    try:
        watcher.run()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
