"""watchdog events -> debounced index runs: `puremind watch`.

One thread (the caller's) does all the work: it runs the indexer, compacts the keyword index and checks the
vault folder, so runs never overlap and Ctrl-C lands in the middle of whatever is happening, where the
indexer's transactional batches make it safe. watchdog's threads only record that something relevant changed.

- A change is an event for a visible note path (the walk's own path rules) or a visible folder. Reads (open,
  close without writing), hidden files and folders, skipped folders and other file types are ignored.
- A run starts once the vault has been quiet for `debounce` seconds, and at the latest `max_delay` seconds after
  the first change it covers, so a note that some tool rewrites every second still gets indexed. Changes made
  during a run start one more run after it (the pending flag is cleared when a run starts, not when it ends).
- The folder is watched at its real path. Every `poll` seconds the watcher checks that the path still leads to
  the folder it watches (a sync tool or a remount can swap the folder, a symlink can be repointed) and that
  watchdog's threads are alive; if not it watches the folder now there and runs. A vault that is gone is
  waited for. A run that fails is reported on one line and tried again after `retry` seconds (watching anew
  first), so a folder that could not be read for a while is picked up once it can.
- Without any change for `rescan` seconds (10 minutes) it runs anyway, in case an event was missed.
- Fatal, because no later run could succeed: the vault path now leads to another folder than the one the index
  belongs to; the index was built or rebuilt with another embedding model (the watch keeps the model it started
  with and never re-embeds over a newer index); a system limit on file watching (inotify watches or instances).
  The watch limit is caught for a folder made while watching too: after arming and after every run the watcher
  asks Linux which folders its inotify instances watch (puremind/inotify_watches.py, /proc/self/fdinfo) and
  probes any visible folder left unwatched with a watch of its own; ENOSPC there is the limit. A folder that
  can be watched but is not (watchdog had not reached it) is watched anew once, with a run.
- Events the kernel dropped (inotify queue overflow) reach the watcher as watchdog's public EventsLostEvent
  and start a run, which rescans the whole vault.
- Only watchdog's public API is used (Observer, schedule/start/stop, emitters, the event classes' fields).
- The keyword index is compacted once the vault has been quiet for `compact_quiet` seconds after a run that left
  deleted text behind, and at the latest `compact_latest` seconds after the change that caused it; a watch that
  stops compacts on its way out. One that dies before that leaves `Store.compact_pending()` set, and the first
  run of the next watch (or any `puremind index`) compacts.
- The IndexLock is taken per run (and per compaction), not for the watch's lifetime: between runs a
  `puremind index` (say `--rebuild` after a model change) can run; while it does, the watch waits for it.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from puremind import inotify_watches
from puremind.errors import FingerprintMismatch, IndexBusyError, PuremindError, VaultError
from puremind.indexer import META_FINGERPRINT, META_VAULT, IndexLock, IndexReport, index_vault
from puremind.store import Store
from puremind.vault import SKIPPED_DIR_NAMES, note_rel_is_valid

if TYPE_CHECKING:
    from puremind.config import Settings
    from puremind.models import Embedder

Say = Callable[[str], None]
#: on_event(kind, detail): "armed" (real root), "disarmed" (reason), "change" (path), "ignored" (path),
#: "lost" (path: events were dropped), "unwatched" (list of folders that are watchable but were not watched),
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


@dataclass(frozen=True)
class Timing:
    """Every interval of a watch, in seconds (tests shrink them)."""

    debounce: float = 2.0
    #: a run starts at the latest this long after the first change it covers, even if changes never pause
    max_delay: float = 60.0
    rescan: float = 600.0
    compact_quiet: float = 60.0
    compact_latest: float = 300.0
    #: how often the vault folder's identity and watchdog's threads are checked
    poll: float = 1.0
    #: a failed run is tried again after this long
    retry: float = 10.0
    #: a run that found `puremind index` holding the lock tries again after this long
    busy_retry: float = 0.5

    @classmethod
    def for_debounce(cls, debounce: float) -> "Timing":
        """The default intervals with this debounce (a long debounce also stretches the maximal delay)."""
        return cls(debounce=debounce, max_delay=max(60.0, 10 * debounce))


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

    Models are handed in: `embedder` is used for every run (None = keyword only).
    """

    def __init__(
        self,
        vault: Path,
        db: Path,
        *,
        embedder: "Embedder | None" = None,
        timing: Timing = Timing(),
        say: Say = print,
        notice: Say = print,
        on_event: OnEvent | None = None,
        progress: Callable[[int, int, str], None] | None = None,
        index_fn: Callable[..., IndexReport] = index_vault,
        observer_factory: Callable[[], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.vault = Path(vault)
        self.db = Path(db)
        self.embedder = embedder
        self.timing = timing
        self._say = say
        self._notice = notice
        self._on_event = on_event
        self._progress = progress
        self._index_fn = index_fn
        self._observer_factory = observer_factory
        self._clock = clock

        # Shared with watchdog's threads (under _cond).
        self._cond = threading.Condition(threading.RLock())
        self._dirty = False
        self._first_change: float | None = None
        self._last_change = -math.inf
        self._stop_requested = False

        # The caller's thread only.
        self._observer: Any = None
        self._armed: tuple[str, tuple[int, int]] | None = None
        self._vault_gone = False
        self._last_activity = clock()
        self._not_before = -math.inf  # retry or busy back-off
        self._failure: str | None = None  # last failure line shown (not repeated)
        self._busy_shown = False
        self._owed_since: float | None = None  # compaction owed since (a change time)
        self._compact_not_before = -math.inf
        # Folders found unwatched (but watchable) at the last check, and those already watched anew once.
        self._unwatched: frozenset[str] = frozenset()
        self._rewatched: frozenset[str] = frozenset()
        self._unwatchable_shown: set[str] = set()
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

    def _changed(self) -> None:
        now = self._clock()
        with self._cond:
            if not self._dirty:
                self._first_change = now
            self._dirty = True
            self._last_change = now
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
        self._check_watches()
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
        now = self._clock()
        due = self._run_due(now)
        if due <= now:
            self._run_guarded()
            return
        compact_due = self._compact_due(now)
        if compact_due <= now:
            self._compact()
            return
        with self._cond:
            if self._stop_requested:
                return
            # Re-read under the lock: an event may have arrived since.
            timeout = min(self._run_due(now), compact_due, now + self.timing.poll) - now
            if timeout > 0:
                self._cond.wait(max(timeout, 0.005))

    def _run_due(self, now: float) -> float:
        if self._vault_gone:
            return math.inf
        with self._cond:
            due = self._last_activity + self.timing.rescan
            if self._dirty:
                first = now if self._first_change is None else self._first_change
                due = min(due, self._last_change + self.timing.debounce, first + self.timing.max_delay)
        return max(due, self._not_before)

    def _run_guarded(self) -> None:
        now = self._clock()
        rescan = not self._dirty
        try:
            self._run(trigger="rescan" if rescan else "change", first=False)
        except _StopRun:
            return
        except IndexBusyError:
            self._not_before = now + self.timing.busy_retry
            self._note_busy()
        except (PuremindError, OSError) as exc:
            message = exc.message if isinstance(exc, PuremindError) else f"{exc.strerror or exc}"
            line = " ".join(str(message).split())
            if line != self._failure:
                self._notice(f"warning: index run failed: {line} (watching goes on; trying again every "
                             f"{self.timing.retry:g}s)")
                self._failure = line
            self._emit("run_failed", exc)
            self._not_before = now + self.timing.retry
            self._last_activity = now
            # The folder may have gone away with the failure: watch anew before the next try.
            self._arm_quietly()

    def _run(self, *, trigger: str, first: bool) -> None:
        """One index run under the lock. Restores the pending change when the run does not complete."""
        with self._cond:
            first_change = self._first_change
            self._dirty, self._first_change = False, None
        started = self._clock()
        completed = False
        try:
            report, owed = self._index(first=first)
            completed = True
        finally:
            if not completed:
                # What this run was to cover is still to do (a failed rescan is simply retried).
                with self._cond:
                    self._dirty = True
                    self._first_change = min(x for x in (first_change, self._first_change, started) if x is not None)
        self._not_before = -math.inf
        self._busy_shown = False
        self._last_activity = self._clock()
        if self._failure is not None:
            self._notice("index runs work again")
            self._failure = None
        if owed and self._owed_since is None:
            self._owed_since = first_change if first_change is not None else started
        elif not owed:
            self._owed_since = None
        changed = report.added or report.changed or report.removed or report.warnings
        if trigger != "rescan" or changed:
            for warning in report.warnings:
                self._notice(f"warning: {warning}")
            self._say(report.summary())
        self._emit("run", report)
        self._check_watches()

    def _index(self, *, first: bool) -> tuple[IndexReport, bool]:
        root = self._vault_root()
        with IndexLock(self.db):
            store = Store.open(self.db)
            try:
                stored_fp = store.get_meta(META_FINGERPRINT)
                if not first and stored_fp is not None and stored_fp != self._fingerprint:
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
                    report = self._index_fn(store, self.vault, embedder=self.embedder, progress=self._progress_or_stop,
                                            compact=compact)
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
                    self._fingerprint = store.get_meta(META_FINGERPRINT)
                return report, store.compact_pending()
            finally:
                store.close()

    def _progress_or_stop(self, done: int, total: int, rel: str) -> None:
        if self._stop_requested:
            raise _StopRun()
        if self._progress is not None:
            self._progress(done, total, rel)

    # -- compaction ------------------------------------------------------------------------------------

    def _compact_due(self, now: float) -> float:
        if self._owed_since is None:
            return math.inf
        with self._cond:
            due = min(self._last_change + self.timing.compact_quiet, self._owed_since + self.timing.compact_latest)
        # A run that is due goes first; after an attempt that a reader or `puremind index` kept from
        # finishing, wait before the next one.
        return max(due, self._compact_not_before)

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
            self._compact_not_before = now + self.timing.compact_quiet
            return
        except PuremindError as exc:
            self._notice(f"warning: cannot compact the keyword index: {' '.join(exc.message.split())}")
            self._compact_not_before = now + self.timing.compact_quiet
            return
        if done:
            self._owed_since = None
        else:
            # A reader kept the -wal file; the mark stays in the index for a later try.
            self._compact_not_before = now + self.timing.compact_quiet
        self._emit("compacted", done)

    # -- the vault folder and the observer -------------------------------------------------------------

    def _vault_root(self) -> str:
        return os.path.realpath(self.vault)

    def _check_watches(self) -> None:
        """Stop with the limit error when a visible folder of the vault is not watched because of the inotify
        watch limit (watchdog only logs that for a folder made while it runs); watch anew, once, when a folder
        that could be watched is still unwatched at a second check."""
        if self._armed is None:
            return
        root = self._armed[0]
        missing = inotify_watches.unwatched_folders(root, lambda path: path_matters(root, path, True))
        if not missing:
            self._unwatched = frozenset()
            return
        watchable = []
        for path in missing[:_MAX_PROBES]:
            err = inotify_watches.probe(path)
            if err in (errno.ENOSPC, errno.EMFILE):
                raise _Fatal(_limit_error(OSError(err, os.strerror(err), path)))
            if err == 0:
                watchable.append(path)
            elif err != errno.ENOENT and path not in self._unwatchable_shown:
                self._unwatchable_shown.add(path)
                self._notice(f"warning: cannot watch the folder {path}: {os.strerror(err)}; its notes are indexed "
                             "by the next run or rescan only")
        again = self._unwatched & set(watchable)
        self._unwatched = frozenset(watchable)
        if again and not again <= self._rewatched:
            # Still unwatched a run later, yet watchable: watch the vault anew (and run, in case a change was missed).
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
            if not self._vault_gone:
                self._notice(f"warning: the vault folder {self.vault} is gone or cannot be reached; waiting for it")
                self._vault_gone = True
                self._disarm()
                self._emit("disarmed", "gone")
            return
        if self._armed == (root, identity) and self._observer_alive():
            return
        if self._vault_gone:
            self._notice(f"the vault folder {self.vault} is back")
        elif self._armed is not None and self._armed != (root, identity):
            self._notice(f"the vault folder {self.vault} was replaced; watching the new one")
        self._vault_gone = False
        if self._arm_quietly():
            self._changed()

    def _observer_alive(self) -> bool:
        observer = self._observer
        if observer is None or not observer.is_alive():
            return False
        emitters = getattr(observer, "emitters", ())
        return all(emitter.is_alive() for emitter in emitters)

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
        """(Re)start watching the vault's real folder, recursively.

        Raises:
            OSError: the folder cannot be watched (a system limit, or it is gone).
        """
        self._disarm()
        root = self._vault_root()
        st = os.stat(root)
        factory = self._observer_factory
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
            observer.schedule(_Handler(self, root), root, recursive=True)
            observer.start()
        except BaseException as exc:
            _stop_observer(observer)
            if isinstance(exc, OSError) and exc.errno in _LIMIT_ERRNOS:
                # watchdog raises for any folder it cannot watch while it starts (the root or one below it).
                raise _Fatal(_limit_error(exc)) from None
            raise
        self._observer = observer
        self._armed = (root, (st.st_dev, st.st_ino))
        self._emit("armed", root)

    def _disarm(self) -> None:
        observer, self._observer, self._armed = self._observer, None, None
        if observer is not None:
            _stop_observer(observer)

    def _shutdown(self) -> None:
        self._disarm()
        if self._owed_since is not None:
            self._compact()


class _Handler:
    """A watchdog event handler that only tells the watcher that something relevant changed."""

    def __init__(self, watcher: Watcher, root: str):
        self._watcher = watcher
        self._root = root

    def dispatch(self, event: Any) -> None:
        if getattr(event, "event_type", "") == _LOST_EVENT:
            # The kernel's queue overflowed: changes anywhere may be missing. A run walks the whole vault.
            self._watcher._emit("lost", os.fsdecode(event.src_path))
            self._watcher._changed()
            return
        if event_matters(self._root, event):
            self._watcher._emit("change", os.fsdecode(event.src_path))
            self._watcher._changed()
        else:
            self._watcher._emit("ignored", os.fsdecode(event.src_path))


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


def watch_command(
    settings: "Settings",
    *,
    debounce: float = 2.0,
    say: Say,
    notice: Say,
    progress: Callable[[int, int, str], None] | None = None,
) -> None:
    """`puremind watch`: load the embedder once, then watch until Ctrl-C (KeyboardInterrupt, after compacting)
    or SIGTERM (a run in progress stops at its next note; returns after compacting).

    Raises:
        ConfigError, VaultError, StoreError, FingerprintMismatch, ModelError, WatchError: see Watcher.run.
    """
    from puremind.services import load_embedder_for_index

    vault = settings.require_vault()
    # watchdog logs its own races and lost events through logging's last-resort handler (stderr); what matters
    # of them reaches the user through the watcher (a lost event starts a run), so keep its lines out.
    logging.getLogger("watchdog").addHandler(logging.NullHandler())
    embedder = load_embedder_for_index(settings, notice)
    watcher = Watcher(vault, settings.db, embedder=embedder, timing=Timing.for_debounce(debounce), say=say,
                      notice=notice, progress=progress)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: watcher.stop())
    try:
        watcher.run()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


__all__ = ["Timing", "WatchError", "Watcher", "event_matters", "path_matters", "watch_command"]
