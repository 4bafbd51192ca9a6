"""watchdog events -> debounced index runs: `puremind watch`.

One thread (the caller's) does all the work: it runs the indexer, compacts the keyword index and checks the
vault folder, so runs never overlap and Ctrl-C lands in the middle of whatever is happening, where the
indexer's transactional batches make it safe. watchdog's threads only record that something relevant changed.

- A change is an event for a visible note path (the walk's own path rules) or a visible folder. Reads (open,
  close without writing), hidden files and folders, skipped folders and other file types are ignored.
- When to run and to compact (debounce, maximal delay, rescans, retries, compaction) is decided by
  `watch_schedule.Schedule` from the events and the clock, without threads; this module is the plumbing around
  it: watchdog's observer (`VaultObserver`), the index runs, the checks of the vault folder.
- The folder is watched at its real path. Every `poll` seconds the watcher checks that the path still leads to
  the folder it watches (a sync tool or a remount can swap the folder, a symlink can be repointed) and that
  watchdog's threads are alive; if not it watches the folder now there and runs. A vault that is gone is
  waited for. A run that fails is reported on one line and tried again after `retry` seconds (watching anew
  first), so a folder that could not be read for a while is picked up once it can.
- Fatal, because no later run could succeed: the vault path now leads to another folder than the one the index
  belongs to; the index was built or rebuilt with another embedding model (the watch keeps the model it started
  with and never re-embeds over a newer index); a system limit on file watching (inotify watches or instances).
  The watch limit is caught for a folder made while watching too: after arming and after every run the watcher
  asks Linux which folders its inotify instances watch (puremind/inotify_watches.py, /proc/self/fdinfo) and
  probes any visible folder left unwatched with a watch of its own: ENOSPC there is the limit, EACCES a folder
  that cannot be read (watched anew once it can be), success a folder watchdog had not reached yet (watched
  anew, once, if it is still unwatched at the next check).
- Events the kernel dropped (inotify queue overflow) reach the watcher as watchdog's public EventsLostEvent and
  start a run, which looks at the whole vault.
- Only watchdog's public API is used (Observer, schedule/start/stop, emitters, the events' fields).
- A watch that stops compacts on its way out. One that dies before that leaves `Store.compact_pending()` set,
  and the first run of the next watch (or any `puremind index`) compacts.
- The IndexLock is taken per run (and per compaction), not for the watch's lifetime: between runs a
  `puremind index` (say `--rebuild` after a model change) can run; while it does, the watch waits for it.
"""

from __future__ import annotations

import errno
import math
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from puremind import inotify_watches
from puremind.errors import FingerprintMismatch, IndexBusyError, IndexDamaged, PuremindError, VaultError
from puremind.fingerprint import same_vectors
from puremind.indexer import EMBED_SECONDS, META_VAULT, IndexLock, IndexReport, index_vault
from puremind.store import Store
from puremind.vault import SKIPPED_DIR_NAMES, note_rel_is_valid
from puremind.watch_schedule import Schedule, StandingWarnings, Timing

if TYPE_CHECKING:
    from puremind.models import Embedder

Say = Callable[[str], None]
#: on_event(kind, detail): "armed" (real root), "disarmed" (reason), "change" (path), "ignored" (path),
#: "lost" (path: events were dropped), "unwatched" (folders watchable but not watched: watched anew),
#: "run" (IndexReport), "run_failed" (exception), "busy" (None), "compacted" (True when the -wal was emptied).
OnEvent = Callable[[str, Any], None]

#: Event types that never mean a change: a read opens and closes a file without writing.
_READ_EVENTS = {"opened", "closed_no_write"}
_CHANGE_EVENTS = {"created", "deleted", "modified", "moved", "closed", "attrib"}
#: watchdog's EventsLostEvent (7.1.1 and later): the kernel dropped events, a run must look at everything.
_LOST_EVENT = "events_lost"
#: unwatched folders probed per check (the first that hits the limit is enough to tell)
_MAX_PROBES = 64
#: inotify limits: watches per user (ENOSPC) and instances per user (EMFILE).
_LIMIT_ERRNOS = {errno.ENOSPC: "fs.inotify.max_user_watches", errno.EMFILE: "fs.inotify.max_user_instances"}


class WatchError(PuremindError):
    """Watching cannot go on: a system limit on watched folders or inotify instances was reached."""


class _Fatal(Exception):
    """Carries a PuremindError that ends the watch (no later run could succeed)."""

    def __init__(self, error: PuremindError):
        super().__init__(error.message)
        self.error = error


class _StopRun(Exception):
    """Raised from the progress callback to end a run early when the watch is asked to stop."""


def path_matters(root: str, path: str | bytes, is_directory: bool) -> bool:
    """True when a change at `path` (absolute, below the watched real root) can change the index: a visible
    note path, or a visible folder (the root included). Pure string rules; looks at no file."""
    path = os.fsdecode(path)
    rel = os.path.relpath(path, root)
    if rel == os.curdir:
        return is_directory
    if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
        return False
    rel = rel.replace(os.sep, "/")
    if not is_directory:
        return note_rel_is_valid(rel)
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return all(part and not part.startswith(".") and part.casefold() not in SKIPPED_DIR_NAMES for part in rel.split("/"))


def event_matters(root: str, event: Any) -> bool:
    """True when a watchdog event is a change to a visible note or folder below `root`."""
    kind = getattr(event, "event_type", "")
    if kind not in _CHANGE_EVENTS:
        return False
    if kind == "modified" and event.is_directory:
        # The folder echo of a child's create/delete/move (inotify): the child's own event decides.
        return False
    paths = [event.src_path]
    if kind == "moved":
        paths.append(getattr(event, "dest_path", ""))
    return any(path_matters(root, p, event.is_directory) for p in paths if p)


class Watcher:
    """Watches one vault and keeps one index file up to date with it. `run()` blocks; `stop()` ends it.

    Models are handed in: `embedder` (loaded) or `load_embedder` (called by the first run that has a chunk to
    embed, after its keyword phase) is used for every run; neither is keyword only. A run's embedding phase yields
    to a change: it stops after the embedding call in flight (each takes about `embed_seconds`), the change is
    indexed once its debounce is over, and the next run embeds what is left.
    """

    def __init__(
        self,
        vault: Path,
        db: Path,
        *,
        embedder: "Embedder | None" = None,
        load_embedder: "Callable[[], Embedder] | None" = None,
        embed_seconds: float = EMBED_SECONDS,
        timing: Timing = Timing(),
        say: Say = print,
        notice: Say = print,
        on_event: OnEvent | None = None,
        progress: Callable[[str, int, int, str], None] | None = None,
        index_fn: Callable[..., IndexReport] = index_vault,
        observer_factory: Callable[[], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        private_folders: tuple[str, ...] = (),
    ):
        self.vault = Path(vault)
        self.private_folders = tuple(private_folders)
        self.db = Path(db)
        self.embedder = embedder
        self.load_embedder = load_embedder
        self.embed_seconds = embed_seconds
        self.timing = timing
        self._say = say
        self._notice = notice
        self._on_event = on_event
        self._progress = progress
        self._index_fn = index_fn
        self._observer_factory = observer_factory
        self._clock = clock

        # Shared with watchdog's threads (under _cond): the schedule takes their changes.
        self._cond = threading.Condition(threading.RLock())
        self._schedule = Schedule(timing, clock())
        self._stop_requested = False

        # The caller's thread only.
        self._observer: VaultObserver | None = None
        self._armed: tuple[str, tuple[int, int]] | None = None
        self._blind_not_before = -math.inf
        # Folders found unwatched (but watchable) at the last check, and those already watched anew once.
        self._unwatched: frozenset[str] = frozenset()
        self._rewatched: frozenset[str] = frozenset()
        self._failure: str | None = None  # last failure line shown (not repeated)
        self._busy_shown = False
        self._standing = StandingWarnings()
        # The embedding fingerprint this watch writes; None until known (keyword-only: the index's at start).
        self._fingerprint: str | None = embedder.fingerprint if embedder is not None else None

    # -- public ----------------------------------------------------------------------------------------

    def run(self) -> None:
        """Index once, then after every change until `stop()`; compacts on the way out.

        Raises:
            VaultError: the vault is missing or unusable at start, or now leads to another folder than the
                index's.
            FingerprintMismatch: the index is (or was rebuilt) for another embedding model.
            WatchError: a system limit on file watching was reached.
            StoreError, ModelError: the first run failed (later failures are reported and retried).
            KeyboardInterrupt: Ctrl-C, after stopping the observer and compacting.
        """
        try:
            self._start()
            while not self._stop_requested:
                self._step()
        except _StopRun:
            pass
        except _Fatal as fatal:
            raise fatal.error from None
        finally:
            self._shutdown()

    def stop(self) -> None:
        """Ask the watch to end: a run in progress stops at its next note; safe from a signal handler."""
        self._stop_requested = True
        if self._cond.acquire(blocking=False):
            try:
                self._cond.notify_all()
            finally:
                self._cond.release()

    # -- watchdog side ---------------------------------------------------------------------------------

    @property
    def _dirty(self) -> bool:
        """A change is waiting for a run."""
        with self._cond:
            return self._schedule.dirty

    def _changed(self) -> None:
        now = self._clock()
        with self._cond:
            self._schedule.changed(now)
            self._cond.notify_all()

    def _emit(self, kind: str, detail: Any = None) -> None:
        if self._on_event is not None:
            self._on_event(kind, detail)

    # -- the loop --------------------------------------------------------------------------------------

    def _start(self) -> None:
        root = self._vault_root()
        if not os.path.isdir(root):
            raise _Fatal(VaultError(f"the vault directory {self.vault} does not exist or is not a directory",
                                    hint="check the path, or run `puremind init <vault_dir>`"))
        self._arm()
        self._notice(f"watching {root}: re-indexing {self.timing.debounce:g}s after the last change (Ctrl-C to stop)")
        while not self._stop_requested:
            try:
                self._run(trigger="start", first=True)
                return
            except IndexBusyError:
                self._wait_busy()

    def _wait_busy(self) -> None:
        self._note_busy()
        with self._cond:
            self._cond.wait(self.timing.busy_retry)

    def _note_busy(self) -> None:
        if not self._busy_shown:
            self._notice("waiting: another puremind index is writing the index")
            self._busy_shown = True
        self._emit("busy")

    def _step(self) -> None:
        self._check_vault_folder()
        with self._cond:
            if self._stop_requested:
                return
            # Under the lock, so that a change that arrives now wakes the wait.
            decision = self._schedule.decide(self._clock())
            if decision.action == "wait":
                self._cond.wait(decision.seconds)
                return
        if decision.action == "run":
            self._run_guarded(rescan=decision.rescan)
        else:
            self._compact()

    def _run_guarded(self, *, rescan: bool) -> None:
        now = self._clock()
        try:
            self._run(trigger="rescan" if rescan else "change", first=False)
        except _StopRun:
            return
        except IndexBusyError:
            with self._cond:
                self._schedule.busy(now)
            self._note_busy()
        except (PuremindError, OSError) as exc:
            message = exc.message if isinstance(exc, PuremindError) else f"{exc.strerror or exc}"
            line = " ".join(str(message).split())
            if line != self._failure:
                self._notice(f"warning: index run failed: {line} (watching goes on; trying again every "
                             f"{self.timing.retry:g}s)")
                self._failure = line
            self._emit("run_failed", exc)
            with self._cond:
                self._schedule.run_failed(now)
            # The folder may have gone away with the failure: watch anew before the next try.
            self._arm_quietly()

    def _run(self, *, trigger: str, first: bool) -> None:
        """One index run under the lock. Restores the pending change when the run does not complete."""
        with self._cond:
            ticket = self._schedule.run_started(self._clock())
        completed = False
        try:
            report, owed = self._index(first=first)
            completed = True
        finally:
            if not completed:
                with self._cond:
                    self._schedule.run_incomplete(ticket)
        with self._cond:
            self._schedule.run_done(ticket, self._clock(), owed=owed)
        self._busy_shown = False
        if self._failure is not None:
            self._notice("index runs work again")
            self._failure = None
            # What was watched while runs failed may never report a change (a folder watched while it could not
            # be read, on a backend that does not say so): watch anew, as for a replaced folder. An edit made while
            # the watches were swapped may reach neither observer: look at once (a rescan: silent when nothing
            # changed).
            self._arm_quietly()
            with self._cond:
                self._schedule.rescan_now()
        # Removals held back, an empty vault: said when they start, not again at every run while they last.
        warnings = self._standing.to_say(report.standing, report.warnings)
        changed = report.added or report.changed or report.removed or warnings
        if trigger != "rescan" or changed:
            for warning in warnings:
                self._notice(f"warning: {warning}")
            self._say(report.summary())
        self._emit("run", report)
        self._check_watches()

    def _index(self, *, first: bool) -> tuple[IndexReport, bool]:
        root = self._vault_root()
        with IndexLock(self.db):
            try:
                store = Store.open(self.db)
            except IndexDamaged as exc:
                raise _Fatal(exc) from None
            try:
                if first:
                    try:
                        store.check_integrity()  # a damaged index is never taken for "unchanged"
                    except IndexDamaged as exc:
                        raise _Fatal(exc) from None
                stored_fp = store.embed_fingerprint()
                # The precision is not compared: another run with the same model at another variant is fine.
                if not first and stored_fp is not None and not same_vectors(stored_fp, self._fingerprint):
                    raise _Fatal(FingerprintMismatch(
                        "the index was rebuilt with another embedding model while this watch was running",
                        hint=f"restart `puremind watch`: a watch keeps the model it started with (index now built with: {stored_fp})",
                    ))
                # At start the indexer's own check says it (and it is fatal there like every first-run error).
                previous = store.get_meta(META_VAULT)
                if not first and os.path.isdir(root) and previous not in (None, root) and store.counts().get("files", 0):
                    raise _Fatal(VaultError(
                        f"the vault {self.vault} now leads to {root}, but this index was built for the vault {previous}",
                        hint="run `puremind index --rebuild` to switch the index to it, or set PUREMIND_DB to use another index file",
                    ))
                # A mark left by a watch that died before compacting: the first run settles it.
                compact = first and store.compact_pending()
                try:
                    report = self._index_fn(store, self.vault, embedder=self.embedder,
                                            load_embedder=self._load_embedder if self.load_embedder else None,
                                            progress=self._progress_or_stop,
                                            keep_embedding=self._keep_embedding, compact=compact,
                                            embed_seconds=min(self.embed_seconds, self.timing.debounce / 2),
                                            private_folders=self.private_folders)
                except FingerprintMismatch as exc:
                    raise _Fatal(exc) from None
                except VaultError as exc:
                    if first:
                        raise _Fatal(exc) from None
                    raise
                except PuremindError as exc:
                    if first and not isinstance(exc, IndexBusyError):
                        raise _Fatal(exc) from None
                    raise
                if self._fingerprint is None:
                    self._fingerprint = store.embed_fingerprint()
                return report, store.compact_pending()
            finally:
                store.close()

    def _progress_or_stop(self, phase: str, done: int, total: int, rel: str) -> None:
        if self._stop_requested:
            raise _StopRun()
        if self._progress is not None:
            self._progress(phase, done, total, rel)

    def _load_embedder(self) -> "Embedder":
        """The model, loaded by the first run that needs it and kept for every later run of this watch."""
        if self.embedder is None:
            self.embedder = self.load_embedder()  # type: ignore[misc]
        return self.embedder

    def _keep_embedding(self) -> bool:
        """Asked before each embedding call: a change waiting for a run (or a stop) comes first."""
        return not (self._stop_requested or self._dirty)

    # -- compaction ------------------------------------------------------------------------------------

    def _compact(self) -> None:
        now = self._clock()
        try:
            with IndexLock(self.db):
                store = Store.open(self.db)
                try:
                    done = store.compact() if store.compact_pending() else True
                finally:
                    store.close()
        except IndexBusyError:
            # `puremind index` is running: it compacts at its end.
            with self._cond:
                self._schedule.compact_blocked(now)
            return
        except PuremindError as exc:
            self._notice(f"warning: cannot compact the keyword index: {' '.join(exc.message.split())}")
            with self._cond:
                self._schedule.compact_blocked(now)
            return
        with self._cond:
            # Not done: a reader kept the -wal file; the mark stays in the index for a later try.
            self._schedule.compacted(now, done=done)
        self._emit("compacted", done)

    # -- the vault folder and the observer -------------------------------------------------------------

    def _vault_root(self) -> str:
        return os.path.realpath(self.vault)

    def _check_watches(self) -> None:
        """After a run: stop with the limit error when a visible folder is unwatched because of the inotify watch
        limit (watchdog only logs that for a folder made while it runs); list folders that cannot be read as
        blind (watched anew once they can be); watch anew, once, when a folder that could be watched is still
        unwatched at a second check."""
        observer = self._observer
        if observer is None:
            return
        try:
            watchable = observer.check()
        except OSError as exc:
            if exc.errno in _LIMIT_ERRNOS:
                raise _Fatal(_limit_error(exc)) from None
            # The root cannot be read now: the next run fails and watching anew is tried with it.
            return
        again = self._unwatched & set(watchable)
        self._unwatched = frozenset(watchable)
        if again and not again <= self._rewatched:
            self._rewatched = self._rewatched | again
            self._emit("unwatched", sorted(again))
            if self._arm_quietly():
                self._changed()

    def _check_vault_folder(self) -> None:
        root = self._vault_root()
        try:
            st = os.stat(root)
            identity: tuple[int, int] | None = (st.st_dev, st.st_ino) if os.path.isdir(root) else None
        except OSError:
            identity = None
        if identity is None:
            if not self._schedule.vault_gone:
                self._notice(f"warning: the vault folder {self.vault} is gone or cannot be reached; waiting for it")
                with self._cond:
                    self._schedule.vault_gone = True
                self._disarm()
                self._emit("disarmed", "gone")
            return
        if self._armed == (root, identity) and self._observer_alive() and not self._blind_readable():
            return
        if self._schedule.vault_gone:
            self._notice(f"the vault folder {self.vault} is back")
        elif self._armed is not None and self._armed != (root, identity):
            self._notice(f"the vault folder {self.vault} was replaced; watching the new one")
        with self._cond:
            self._schedule.vault_gone = False
        if self._arm_quietly():
            self._changed()

    def _observer_alive(self) -> bool:
        return self._observer is not None and self._observer.alive()

    def _blind_readable(self) -> bool:
        """True when a folder that could not be watched for lack of permission can be read now (looked at with
        every check, acted on at most once per retry interval in case the system still refuses to watch it)."""
        now = self._clock()
        blind = self._observer.blind if self._observer is not None else []
        if not blind or now < self._blind_not_before:
            return False
        if any(os.access(path, os.R_OK) for path in blind):
            self._blind_not_before = now + self.timing.retry
            return True
        return False

    def _arm_quietly(self) -> bool:
        """Watch the vault folder now at the path; False (and retried later) when it cannot be watched now."""
        try:
            self._arm()
            return True
        except OSError as exc:
            if exc.errno in _LIMIT_ERRNOS:
                raise _Fatal(_limit_error(exc)) from None
            self._emit("disarmed", exc)
            return False

    def _arm(self) -> None:
        """(Re)start watching the vault's real folder, recursively. The new observer starts before the old one
        stops, so no change falls between them; when the new one cannot start, the old one is stopped too (what
        it watches may be stale) and the next check tries again.

        Raises:
            OSError: the folder cannot be watched (a system limit, it is gone, or it cannot be read).
        """
        try:
            root = self._vault_root()
            st = os.stat(root)
            observer = VaultObserver(root, on_change=self._on_change, on_ignored=lambda path: self._emit("ignored", path),
                                     on_lost=self._on_lost, factory=self._observer_factory)
            observer.start()
        except BaseException as exc:
            self._disarm()
            if isinstance(exc, OSError) and exc.errno in _LIMIT_ERRNOS:
                # watchdog raises for any folder it cannot watch while it starts; `check` for one it only logs.
                raise _Fatal(_limit_error(exc)) from None
            raise
        self._disarm()
        self._observer = observer
        self._armed = (root, (st.st_dev, st.st_ino))
        self._emit("armed", root)

    def _on_lost(self, path: str) -> None:
        self._emit("lost", path)
        self._changed()

    def _on_change(self, path: str) -> None:
        self._emit("change", path)
        self._changed()

    def _disarm(self) -> None:
        observer, self._observer, self._armed = self._observer, None, None
        if observer is not None:
            observer.stop()

    def _shutdown(self) -> None:
        self._disarm()
        if self._schedule.owed_since is not None:
            self._compact()


class VaultObserver:
    """watchdog's observer on one folder, recursively: the only code that knows watchdog, through its public API
    only. Tells `on_change` of each change to a visible note or folder (`event_matters`), `on_ignored` of any
    other event, `on_lost` when the kernel dropped events (watchdog's EventsLostEvent). What watchdog does not
    say, Linux does (`check`): `blind` lists the folders below the root that could not be watched for lack of
    permission."""

    def __init__(self, root: str, *, on_change: Callable[[str], None], on_ignored: Callable[[str], None],
                 on_lost: Callable[[str], None], factory: Callable[[], Any] | None = None):
        self.root = root
        self.blind: list[str] = []
        self._on_change, self._on_ignored, self._on_lost = on_change, on_ignored, on_lost
        self._factory = factory
        self._observer: Any = None

    def start(self) -> None:
        """Start watching; the watches are added in this thread.

        Raises:
            OSError: the folder cannot be watched (a system limit, it is gone, or it cannot be read).
        """
        factory = self._factory
        if factory is None:
            from watchdog.observers import Observer

            factory = Observer
        try:
            observer = factory()
        except OSError as exc:
            if exc.errno in _LIMIT_ERRNOS:
                raise _Fatal(_limit_error(exc)) from None
            raise
        try:
            observer.schedule(self, self.root, recursive=True)
            observer.start()
            self._observer = observer
            self.check()
        except BaseException:
            self._observer = None
            _stop_observer(observer)
            raise

    def check(self) -> list[str]:
        """Ask Linux which visible folders below the root no inotify watch of this process covers, and try a
        watch of our own on each (`inotify_watches.probe`). Returns the folders that could be watched but are not
        (watchdog had not reached them yet); lists those that cannot be read in `blind`. Does nothing where Linux
        does not tell (another system), or where the root itself is unwatched yet watchable (an observer that is
        not inotify's, as tests hand in).

        Raises:
            OSError: ENOSPC or EMFILE, a system limit kept a folder from being watched; EACCES, the root cannot be
                read (watchdog keeps a watch that never fires: raised, so that watching it is tried again).
        """
        root = self.root
        missing = inotify_watches.unwatched_folders(root, lambda path: path_matters(root, path, True))
        if not missing:
            self.blind = []
            return []
        if missing[0] == root:
            err = inotify_watches.probe(root)
            if err in _LIMIT_ERRNOS or err in (errno.EACCES, errno.EPERM):
                raise OSError(err, os.strerror(err), root)
            return []
        blind, watchable = [], []
        for path in missing[:_MAX_PROBES]:
            err = inotify_watches.probe(path)
            if err in _LIMIT_ERRNOS:
                raise OSError(err, os.strerror(err), path)
            if err == 0:
                watchable.append(path)
            elif err in (errno.EACCES, errno.EPERM):
                blind.append(path)
        self.blind = blind
        return watchable

    def alive(self) -> bool:
        """The observer's thread and each of its emitters' threads are running."""
        observer = self._observer
        if observer is None or not observer.is_alive():
            return False
        return all(emitter.is_alive() for emitter in observer.emitters)

    def stop(self) -> None:
        observer, self._observer = self._observer, None
        if observer is not None:
            _stop_observer(observer)

    def dispatch(self, event: Any) -> None:
        """watchdog's event handler interface (called from its threads)."""
        path = os.fsdecode(event.src_path)
        if getattr(event, "event_type", "") == _LOST_EVENT:
            # The kernel's queue overflowed: changes anywhere may be missing. A run walks the whole vault.
            self._on_lost(path)
        elif event_matters(self.root, event):
            self._on_change(path)
        else:
            self._on_ignored(path)


def _stop_observer(observer: Any) -> None:
    try:
        observer.stop()
        if observer.is_alive():
            observer.join(timeout=5)
    except RuntimeError:
        pass  # never started


def _limit_error(exc: OSError) -> WatchError:
    setting = _LIMIT_ERRNOS.get(exc.errno or 0, "")
    what = "watched folders" if exc.errno == errno.ENOSPC else "inotify instances"
    return WatchError(
        f"cannot watch the vault: the system limit on {what} was reached ({setting})",
        hint=f"raise it, for example `sudo sysctl {setting}=524288`, or run `puremind index` after editing notes",
    )


__all__ = ["Timing", "VaultObserver", "WatchError", "Watcher", "event_matters", "path_matters"]
