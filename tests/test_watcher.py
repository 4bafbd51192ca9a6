"""`puremind watch`: debounced runs after changes, a followed vault folder, fatal stops, compaction timing.

Every test waits on what the watcher reports (its on_event callback) with a deadline, never on a fixed sleep.
Where a test shows that something does *not* start a run, it waits until the watcher has seen and ignored the
event, then makes a visible change and checks that exactly that one run followed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import queue
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import FakeEmbedder, default_sigint, meta, write
from puremind import cli
from puremind.errors import FingerprintMismatch, IndexBusyError, PuremindError, VaultError
from puremind.indexer import IndexLock, index_vault
from puremind.store import Store
from puremind.watcher import Timing, WatchError, Watcher, event_matters, path_matters

REPO = Path(__file__).resolve().parents[1]
DEADLINE = 15.0
FAST = Timing(debounce=0.15, max_delay=5.0, rescan=600.0, compact_quiet=600.0, compact_latest=600.0,
              poll=0.05, retry=0.2, busy_retry=0.05)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify limits are Linux's")


# -- helpers ---------------------------------------------------------------------------------------------


class Recorder:
    """Collects the watcher's (time, kind, detail) events; tests wait on them with a deadline."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, object]] = []
        self._cond = threading.Condition()

    def __call__(self, kind: str, detail: object) -> None:
        with self._cond:
            self.events.append((time.monotonic(), kind, detail))
            self._cond.notify_all()

    def of(self, kind: str) -> list:
        with self._cond:
            return [d for _, k, d in self.events if k == kind]

    def times(self, kind: str) -> list[float]:
        with self._cond:
            return [t for t, k, _ in self.events if k == kind]

    def wait_for(self, predicate, what: str, timeout: float = DEADLINE) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    kinds = [k for _, k, _ in self.events if k not in ("change", "ignored")]
                    raise AssertionError(f"timed out waiting for {what}; events: {kinds}")
                self._cond.wait(left)


class Running:
    """A Watcher running in a thread, as `puremind watch` runs it in the main thread."""

    def __init__(self, vault: Path, db: Path, **kwargs) -> None:
        self.rec = Recorder()
        self.lines: list[str] = []
        self.error: BaseException | None = None
        self.watcher = Watcher(vault, db, timing=kwargs.pop("timing", FAST), say=self.lines.append,
                               notice=self.lines.append, on_event=self.rec, **kwargs)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.watcher.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc
        finally:
            self.rec("exited", None)

    @property
    def runs(self) -> list:
        return self.rec.of("run")

    def wait_runs(self, n: int, what: str = "") -> list:
        self.rec.wait_for(lambda: len(self.runs) >= n or self.rec.of("exited"), what or f"{n} runs")
        assert self.error is None, self.error
        return self.runs

    def wait_exit(self) -> BaseException | None:
        self.rec.wait_for(lambda: self.rec.of("exited"), "the watch to stop")
        self.thread.join(DEADLINE)
        return self.error

    def stop(self) -> None:
        self.watcher.stop()
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "the watch did not stop"
        assert self.error is None, self.error

    def wait_ignored(self, path: Path) -> None:
        self.rec.wait_for(lambda: str(path) in self.rec.of("ignored"), f"the event for {path} to be ignored")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "home" / "index.sqlite"


@pytest.fixture
def watching(vault: Path, db: Path):
    started: list[Running] = []

    def start(**kwargs) -> Running:
        running = Running(kwargs.pop("vault", vault), db, **kwargs)
        started.append(running)
        return running

    yield start
    for running in started:
        running.watcher.stop()
        running.thread.join(DEADLINE)


def settled(w: Running) -> bool:
    """A run finished more than a debounce after the last change, and nothing is pending."""
    changes, runs = w.rec.times("change"), w.rec.times("run")
    last_change = changes[-1] if changes else -1.0
    return bool(runs) and runs[-1] > last_change + w.watcher.timing.debounce and not w.watcher._dirty


def found(db: Path, word: str) -> list[str]:
    store = Store.open(db, create=False)
    try:
        return sorted({hit.path for hit in store.search_lexical(f'"{word}"', 50)})
    finally:
        store.close()


def indexed(db: Path) -> dict[str, list[str]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        out: dict[str, list[str]] = {p: [] for (p,) in con.execute("SELECT path FROM files")}
        for path, text in con.execute("SELECT f.path, c.text FROM chunks c JOIN files f ON f.id = c.file_id ORDER BY f.path, c.ord"):
            out[path].append(text)
        return out
    finally:
        con.close()


def assert_same_as_fresh_index(vault: Path, db: Path, tmp_path: Path) -> None:
    fresh = Store.open(tmp_path / "fresh" / f"index-{time.monotonic_ns()}.sqlite")
    try:
        index_vault(fresh, vault)
        expected = indexed(fresh.path)
    finally:
        fresh.close()
    assert indexed(db) == expected


# -- which events count (pure) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rel", "is_dir", "matters"),
    [
        ("note.md", False, True),
        ("a/b/Note.MARKDOWN", False, True),
        (".", True, True),
        ("projects", True, True),
        (".hidden.md", False, False),
        (".obsidian/workspace.json", False, False),
        (".git/objects/ab", True, False),
        ("a/.trash/old.md", False, False),
        ("node_modules/x/readme.md", False, False),
        ("Node_Modules", True, False),
        ("image.png", False, False),
        ("note.md~", False, False),
        ("note.md.swp", False, False),
        ("../outside.md", False, False),
    ],
)
def test_only_visible_notes_and_folders_count_as_changes(rel, is_dir, matters):
    root = "/vault"
    assert path_matters(root, os.path.normpath(os.path.join(root, rel)), is_dir) is matters


def test_reads_and_folder_echoes_are_not_changes_but_a_rename_onto_a_note_is():
    from watchdog.events import (DirModifiedEvent, FileClosedEvent, FileClosedNoWriteEvent, FileMovedEvent,
                                 FileOpenedEvent)

    assert not event_matters("/v", FileOpenedEvent("/v/a.md"))
    assert not event_matters("/v", FileClosedNoWriteEvent("/v/a.md"))
    assert not event_matters("/v", DirModifiedEvent("/v/sub"))
    assert event_matters("/v", FileClosedEvent("/v/a.md"))
    assert event_matters("/v", FileMovedEvent("/v/.a.md.tmp", "/v/a.md"))
    assert event_matters("/v", FileMovedEvent("/v/a.md", "/v/.trash/a.md"))
    assert not event_matters("/v", FileMovedEvent("/v/.a.tmp", "/v/.b.tmp"))


# -- runs after changes ----------------------------------------------------------------------------------


def test_the_watch_indexes_once_at_start_and_again_after_an_edit(watching, vault, db):
    w = watching()
    first = w.wait_runs(1)[0]
    assert first.added == 3
    write(vault, "coffee.md", "# Coffee\n\nSwitched to a hand grinder called zephyrmill for travel.\n")
    report = w.wait_runs(2)[1]
    assert (report.added, report.changed, report.removed) == (0, 1, 0)
    assert found(db, "zephyrmill") == ["coffee.md"]
    assert found(db, "purge") == []
    assert any(line.startswith("indexed ") for line in w.lines)


def test_a_created_note_is_found_after_the_debounce(watching, vault, db):
    w = watching()
    w.wait_runs(1)
    write(vault, "new/idea.md", "# Idea\n\nA quokkaphone is a phone for quokkas.\n")
    assert w.wait_runs(2)[1].added == 1
    assert found(db, "quokkaphone") == ["new/idea.md"]


def test_a_deleted_note_leaves_the_index(watching, vault, db):
    w = watching()
    w.wait_runs(1)
    (vault / "projects/deploy.md").unlink()
    assert w.wait_runs(2)[1].removed == 1
    assert "projects/deploy.md" not in indexed(db)


def test_a_renamed_note_is_indexed_under_its_new_path(watching, vault, db):
    w = watching()
    w.wait_runs(1)
    os.rename(vault / "journal/day.md", vault / "journal/2026-12-01.md")
    w.wait_runs(2)
    assert found(db, "flaky") == ["journal/2026-12-01.md"]


def test_a_burst_of_saves_makes_one_run(watching, vault, db):
    w = watching(timing=dataclasses.replace(FAST, debounce=0.4))
    w.wait_runs(1)
    for i in range(20):
        write(vault, "coffee.md", f"# Coffee\n\nDraft {i} mentions burstword{i}.\n")
    report = w.wait_runs(2, "the run after the burst")[1]
    assert report.changed == 1
    # A later, separate change is the very next run: the burst made no second one.
    write(vault, "later.md", "# Later\n\nsentinel\n")
    runs = w.wait_runs(3)
    assert len(runs) == 3 and runs[2].added == 1
    assert found(db, "burstword19") == ["coffee.md"] and found(db, "burstword3") == []


def test_an_editors_save_by_rename_is_indexed(watching, vault, db):
    w = watching()
    w.wait_runs(1)
    tmp = vault / ".coffee.md.swp"
    tmp.write_text("# Coffee\n\nSaved atomically: vimsaveword.\n")
    os.replace(tmp, vault / "coffee.md")
    assert w.wait_runs(2)[1].changed == 1
    assert found(db, "vimsaveword") == ["coffee.md"]
    tmp = vault / "coffee.md.tmp~"
    tmp.write_text("# Coffee\n\nSaved again: emacssaveword.\n")
    os.replace(tmp, vault / "coffee.md")
    w.wait_runs(3)
    assert found(db, "emacssaveword") == ["coffee.md"]


def test_a_folder_moved_in_and_out_adds_and_removes_its_notes(watching, vault, db, tmp_path):
    outside = tmp_path / "outside" / "trip"
    for i in range(3):
        write(outside, f"day{i}.md", f"# Day {i}\n\nHiked the travelword{i} trail.\n")
    write(outside, "deeper/more.md", "# More\n\ntravelword9\n")
    w = watching()
    w.wait_runs(1)
    os.rename(outside, vault / "trip")
    w.rec.wait_for(lambda: found(db, "travelword9") == ["trip/deeper/more.md"], "the moved-in folder to be indexed")
    assert set(indexed(db)) >= {"trip/day0.md", "trip/day1.md", "trip/day2.md"}
    os.rename(vault / "trip", outside)
    w.rec.wait_for(lambda: not any(p.startswith("trip/") for p in indexed(db)), "the moved-out folder to leave")
    assert_same_as_fresh_index(vault, db, tmp_path)


def test_hidden_files_other_file_types_and_reads_never_start_a_run(watching, vault, db):
    w = watching()
    w.wait_runs(1)
    (vault / ".obsidian").mkdir()
    hidden = vault / ".obsidian" / "workspace.md"
    hidden.write_text("hidden")
    other = vault / "picture.png"
    other.write_bytes(b"\x89PNG")
    skipped = vault / "node_modules"
    skipped.mkdir()
    (skipped / "readme.md").write_text("# pkg")
    (vault / "coffee.md").read_text()
    for path in (hidden, other, skipped / "readme.md", vault / "coffee.md"):
        w.wait_ignored(path)
    assert len(w.runs) == 1 and not w.watcher._dirty
    write(vault, "visible.md", "# Visible\n\nseen\n")
    runs = w.wait_runs(2)
    assert len(runs) == 2 and runs[1].added == 1


def test_a_change_during_a_run_starts_one_more_run_and_runs_never_overlap(watching, vault, db):
    active, most = [0], [0]
    lock = threading.Lock()
    state = {"calls": 0}

    def index_fn(*args, **kwargs):
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
            state["calls"] += 1
            call = state["calls"]
        try:
            report = index_vault(*args, **kwargs)
            if call == 2:  # after this run's walk: only a further run can see it
                write(vault, "during.md", "# During\n\nduringword\n")
            return report
        finally:
            with lock:
                active[0] -= 1

    w = watching(index_fn=index_fn)
    w.wait_runs(1)
    write(vault, "coffee.md", "# Coffee\n\nfirst edit\n")
    runs = w.wait_runs(3, "the run after the change made during a run")
    assert runs[2].added == 1
    assert found(db, "duringword") == ["during.md"]
    assert most[0] == 1


def test_a_note_rewritten_without_pause_is_indexed_within_the_maximal_delay(watching, vault, db):
    w = watching(timing=Timing(debounce=0.5, max_delay=0.6, poll=0.05))
    w.wait_runs(1)
    stop = threading.Event()

    def keep_writing():
        i = 0
        while not stop.is_set():
            write(vault, "log.md", f"# Log\n\nline {i} keepword\n")
            i += 1
            stop.wait(0.05)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        w.wait_runs(2, "a run while the note is still being rewritten")
        assert writer.is_alive()
    finally:
        stop.set()
        writer.join()
    assert found(db, "keepword") == ["log.md"]


def test_without_any_change_the_watch_scans_again_after_the_rescan_interval(watching, vault, db):
    w = watching(timing=Timing(debounce=0.1, rescan=0.3, poll=0.05))
    w.wait_runs(2, "a rescan")
    printed = [line for line in w.lines if line.startswith("indexed ")]
    assert len(printed) == 1  # a rescan that found nothing prints nothing


# -- the vault folder itself -----------------------------------------------------------------------------


def test_a_vault_folder_replaced_at_its_path_is_followed(watching, vault, db, tmp_path):
    w = watching()
    w.wait_runs(1)
    armed = len(w.rec.of("armed"))
    os.rename(vault, tmp_path / "vault-old")
    vault.mkdir()
    write(vault, "fresh.md", "# Fresh\n\nswapword from the sync tool\n")
    w.rec.wait_for(lambda: found(db, "swapword") == ["fresh.md"], "the replaced folder to be indexed")
    w.rec.wait_for(lambda: indexed(db).keys() == {"fresh.md"}, "the old notes to leave")
    assert len(w.rec.of("armed")) > armed
    # The new folder is the one watched: once all is quiet, an edit there is seen and indexed.
    w.rec.wait_for(lambda: settled(w), "the runs after the swap")
    write(vault, "fresh.md", "# Fresh\n\nnewfolderword\n")
    w.rec.wait_for(lambda: str(vault / "fresh.md") in w.rec.of("change"), "the edit in the new folder to be seen")
    w.rec.wait_for(lambda: found(db, "newfolderword") == ["fresh.md"], "the edit in the new folder to be indexed")
    assert_same_as_fresh_index(vault, db, tmp_path)
    # Depending on whether a check fell between the rename and the mkdir: replaced, or gone and back.
    assert any("was replaced" in line or "is back" in line for line in w.lines)


def test_a_vault_folder_swapped_for_one_holding_a_single_note_keeps_the_others_and_warns_once(
    watching, vault, db, tmp_path
):
    for i in range(30):
        write(vault, f"many/n{i}.md", f"# N{i}\n\nmanyword{i}\n")
    w = watching()
    w.wait_runs(1)
    os.rename(vault, tmp_path / "vault-real")
    vault.mkdir()
    write(vault, "coffee.md", "# Coffee\n\nhalfthereword\n")
    w.rec.wait_for(lambda: found(db, "halfthereword") == ["coffee.md"], "the swapped folder to be indexed")
    w.rec.wait_for(lambda: settled(w), "the runs after the swap")
    write(vault, "second.md", "# Second\n\nsecondword\n")
    w.rec.wait_for(lambda: found(db, "secondword") == ["second.md"], "a later run in the swapped folder")
    w.rec.wait_for(lambda: settled(w), "the runs after the second note")
    assert len(indexed(db)) == 34  # nothing removed
    assert all(report.removed == 0 for report in w.runs)
    held = [line for line in w.lines if "indexed notes are missing from the vault" in line]
    assert sum(report.kept_missing > 0 for report in w.runs) >= 2  # held at every run, said at the first
    assert len(held) == 1 and held[0].startswith("warning: ") and "--allow-removals" in held[0]
    # Back in place: the held notes are simply there again.
    shutil.rmtree(vault)
    os.rename(tmp_path / "vault-real", vault)
    w.rec.wait_for(lambda: found(db, "halfthereword") == [] and settled(w), "the real folder to be indexed")
    assert_same_as_fresh_index(vault, db, tmp_path)


def test_a_vault_folder_that_goes_away_is_waited_for_and_followed_when_made_again(watching, vault, db, tmp_path):
    w = watching()
    w.wait_runs(1)
    os.rename(vault, tmp_path / "unmounted")
    w.rec.wait_for(lambda: "gone" in w.rec.of("disarmed"), "the watch to notice the folder is gone")
    assert w.thread.is_alive() and len(indexed(db)) == 3  # nothing removed while it is away
    os.rename(tmp_path / "unmounted", vault)
    write(vault, "coffee.md", "# Coffee\n\nremountword\n")
    w.rec.wait_for(lambda: found(db, "remountword") == ["coffee.md"], "the folder to be followed again")
    assert any("is back" in line for line in w.lines)


def test_a_failing_run_is_one_line_and_watching_goes_on(watching, vault, db):
    failures = {"left": 3}

    def index_fn(*args, **kwargs):
        if kwargs.get("compact") is False and failures["left"] and (vault / "unreadable.md").exists():
            failures["left"] -= 1
            raise VaultError(f"cannot list the vault folder {vault}: Permission denied")
        return index_vault(*args, **kwargs)

    w = watching(index_fn=index_fn)
    w.wait_runs(1)
    write(vault, "unreadable.md", "# Later\n\nreadableword\n")
    # The run's event comes after its lines ("index runs work again" is printed once the index is written).
    w.wait_runs(2, "a retry to succeed")
    assert found(db, "readableword") == ["unreadable.md"]
    assert len(w.rec.of("run_failed")) == 3
    failed = [line for line in w.lines if "index run failed" in line]
    assert len(failed) == 1 and "\n" not in failed[0] and failed[0].startswith("warning: ")
    assert "index runs work again" in w.lines


def test_after_runs_failed_the_first_run_that_works_again_watches_the_folder_anew(watching, vault, db):
    from watchdog.observers import Observer

    failing = {"on": False}

    class Deaf(Observer):
        """Starts and stays alive but hears nothing: a folder watched while it could not be read, on a backend
        that does not say so."""

        def schedule(self, *args, **kwargs):
            return None

    def index_fn(*args, **kwargs):
        if failing["on"]:
            raise VaultError(f"cannot list the vault folder {vault}: Permission denied")
        return index_vault(*args, **kwargs)

    w = watching(index_fn=index_fn, observer_factory=lambda: Deaf() if failing["on"] else Observer())
    w.wait_runs(1)
    failing["on"] = True
    write(vault, "coffee.md", "# Coffee\n\nduring the failures\n")
    w.rec.wait_for(lambda: len(w.rec.of("run_failed")) >= 2, "runs to fail")
    # The failure's attempt to watch anew made a deaf observer.
    w.rec.wait_for(lambda: [k for _, k, _ in w.rec.events if k in ("run_failed", "armed")][-1] == "armed",
                   "the watch anew after a failure")
    failing["on"] = False
    w.wait_runs(2, "a run that works again")
    assert "index runs work again" in w.lines
    write(vault, "coffee.md", "# Coffee\n\nafterwardsword\n")
    w.rec.wait_for(lambda: found(db, "afterwardsword") == ["coffee.md"], "an edit after the recovery to be indexed")


# A watch in a child process, printing what it sees, so that it can run as a user whom permissions bind.
_CHILD_WATCH = """
import sys
from pathlib import Path
from puremind.watcher import Timing, Watcher

def show(*parts):
    print(*parts, flush=True)

timing = Timing(debounce=0.1, max_delay=5.0, poll=0.05, retry=0.3, busy_retry=0.05)
watcher = Watcher(Path(sys.argv[1]), Path(sys.argv[2]), timing=timing, say=lambda line: show("say", line),
                  notice=lambda line: show("say", line),
                  on_event=lambda kind, detail: show("event", kind, *((detail.added, detail.changed) if kind == "run" else ())))
watcher.run()
"""


@pytest.fixture
def as_unprivileged():
    """(command prefix, uid to own the index folder, base folder): runs a child as a user whom chmod binds, `nobody`
    through setpriv when the suite runs as root (root reads a chmod-000 folder and watches it), else ourselves."""
    prefix: list[str] = []
    uid = None
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot run a watch as a user that permissions bind")
        prefix, uid = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"], 65534
        probe = subprocess.run([*prefix, sys.executable, "-c", "import puremind.watcher"], cwd="/",
                               env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True)
        if probe.returncode != 0:
            pytest.skip("user nobody cannot run this Python or import puremind")
    base = Path(tempfile.mkdtemp(prefix="pm-watch-", dir="/tmp" if os.path.isdir("/tmp") else None))
    os.chmod(base, 0o755)
    try:
        yield prefix, uid, base
    finally:
        for dirpath, dirnames, _ in os.walk(base):
            for d in dirnames:
                os.chmod(os.path.join(dirpath, d), 0o755)
        shutil.rmtree(base, ignore_errors=True)


def test_a_vault_folder_that_was_unreadable_for_a_while_is_watched_anew_once_it_can_be_read(as_unprivileged):
    prefix, uid, base = as_unprivileged
    vault, home = base / "vault", base / "home"
    write(vault, "coffee.md", "# Coffee\n\nThe grinder setting is 2.4.\n")
    write(vault, "sub/deploy.md", "# Deploy\n\nRoll back with the deploy script.\n")
    write(vault, "locked/plan.md", "# Plan\n\nA plan kept private for now.\n")
    for folder in (vault, vault / "sub"):
        os.chmod(folder, 0o755)
    os.chmod(vault / "locked", 0)  # a subfolder that cannot be watched (nor listed) at first
    home.mkdir()
    if uid is not None:
        os.chown(home, uid, uid)
    db = home / "index.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUREMIND_")}
    env.update(PUREMIND_HOME=str(home), PUREMIND_EMBED_MODEL="none", PYTHONPATH=str(REPO))
    proc = subprocess.Popen([*prefix, sys.executable, "-c", _CHILD_WATCH, str(vault), str(db)], cwd="/", env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []
    cond = threading.Condition()

    def read() -> None:
        for line in iter(proc.stdout.readline, ""):
            with cond:
                seen.append(line.rstrip("\n"))
                cond.notify_all()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def wait_for(predicate, what: str) -> None:
        deadline = time.monotonic() + DEADLINE
        with cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0 or proc.poll() is not None:
                    raise AssertionError(f"timed out waiting for {what}; the watch printed: {seen[-30:]}")
                cond.wait(min(left, 0.2))

    def count(kind: str, since: int = 0) -> int:
        return sum(line.split()[:2] == ["event", kind] for line in seen[since:])

    def added(since: int) -> int:
        return sum(int(line.split()[2]) for line in seen[since:] if line.startswith("event run "))

    def changed(since: int) -> int:
        return sum(int(line.split()[3]) for line in seen[since:] if line.startswith("event run "))

    try:
        wait_for(lambda: count("run") >= 1, "the first run")
        os.chmod(vault, 0)
        # More than one retry period unreadable: runs fail, and watching anew fails too while it lasts.
        wait_for(lambda: count("run_failed") >= 3, "runs to fail while the folder is unreadable")
        with cond:
            third = [i for i, line in enumerate(seen) if line.startswith("event run_failed")][2]
        # ... and the attempt to watch anew that follows a failure has been made while it was unreadable.
        wait_for(lambda: count("armed", third) + count("disarmed", third) >= 1, "an attempt to watch anew")
        os.chmod(vault, 0o755)
        wait_for(lambda: "say index runs work again" in seen, "a run to succeed again")
        since = len(seen)
        write(vault, "coffee.md", "# Coffee\n\nThe grinder is now a zephyrmill.\n")
        write(vault, "sub/deploy.md", "# Deploy\n\nRoll back with the quokkascript.\n")
        # The child owns the index: look into it once the child has stopped (root would make files it cannot use).
        wait_for(lambda: changed(since) >= 2, "the edits after the folder was readable again to be indexed")
        # A subfolder that could not be watched is watched once it can be read: its notes, then edits to them.
        since = len(seen)
        os.chmod(vault / "locked", 0o755)
        wait_for(lambda: added(since) >= 1, "the notes of the subfolder to be indexed once it can be read")
        since = len(seen)
        write(vault, "locked/plan.md", "# Plan\n\nThe plan is a wombatfeast.\n")
        wait_for(lambda: changed(since) >= 1, "an edit in the subfolder to be indexed")
    finally:
        os.chmod(vault, 0o755)
        proc.terminate()
        try:
            proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(DEADLINE)
    err = proc.stderr.read()
    assert "Traceback" not in err, err
    assert found(db, "zephyrmill") == ["coffee.md"] and found(db, "quokkascript") == ["sub/deploy.md"]
    assert found(db, "wombatfeast") == ["locked/plan.md"]
    failed = [line for line in seen if "index run failed" in line]
    assert len(failed) == 1, failed  # one line for the whole episode


# -- fatal conditions ------------------------------------------------------------------------------------


def test_a_watch_embeds_changes_with_the_model_it_was_given(watching, vault, db, fake_embedder):
    w = watching(embedder=fake_embedder)
    w.wait_runs(1)
    write(vault, "new.md", "# New\n\nembedme please\n")
    w.wait_runs(2)
    assert any("embedme" in text for text in fake_embedder.embedded)
    store = Store.open(db, create=False)
    try:
        assert store.counts()["vectors"] == store.counts()["chunks"]
    finally:
        store.close()


def test_a_saved_note_is_searchable_by_keyword_while_a_long_backlog_is_embedding(watching, vault, db):
    """Issue 32: the embedding phase yields to a change after the call in flight; the note is indexed by keyword
    once its debounce is over, and the backlog goes on after it."""
    for i in range(60):
        write(vault, f"backlog/n{i:02}.md", f"# Backlog {i}\n\nbacklog note {i} with its own words w{i}\n")
    embedding = threading.Event()

    class Slow(FakeEmbedder):
        def embed(self, texts, is_query=False):
            embedding.set()
            time.sleep(0.05 * len(texts))  # 60 chunks: about 3 s of embedding in calls of about 0.05 s
            return super().embed(texts, is_query)

    model = Slow()
    loads: list[int] = []

    def load():
        loads.append(1)
        return model

    w = watching(load_embedder=load, embed_seconds=0.05)
    assert embedding.wait(DEADLINE), "the backlog never started embedding"
    write(vault, "saved.md", "# Saved\n\nfreshlysaved words\n")
    saved_at = time.monotonic()
    poll_until(lambda: found(db, "freshlysaved") == ["saved.md"], "the saved note to be searchable")
    waited = time.monotonic() - saved_at
    store = Store.open(db, create=False)
    try:
        left = store.counts()["chunks"] - store.counts()["vectors"]
    finally:
        store.close()
    assert left > 0, f"the saved note waited for the whole backlog ({waited:.1f} s)"
    # Then the backlog is embedded to the end, the saved note too, with the model loaded once.
    poll_until(lambda: vectors_complete(db), "the backlog to be embedded", timeout=60)
    assert loads == [1]
    assert any("freshlysaved" in text for text in model.embedded)


def poll_until(predicate, what: str, timeout: float = DEADLINE) -> None:
    """Look at the index (which sends no event) every 20 ms until `predicate()` holds, up to a deadline."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        threading.Event().wait(0.02)


def vectors_complete(db: Path) -> bool:
    store = Store.open(db, create=False)
    try:
        counts = store.counts()
        return counts["vectors"] == counts["chunks"] > 0
    finally:
        store.close()


def test_a_rebuild_with_another_model_stops_the_watch_with_exit_2_and_keeps_the_rebuilt_index(vault, db):
    from puremind.config import load_settings
    from puremind.models.lazy import Models
    from puremind.services import run_watch

    old = FakeEmbedder("model-a")
    settings = load_settings({"vault": vault, "db": db})
    result: dict = {}

    def watch() -> None:
        try:
            run_watch(settings, debounce=0.1, say=lambda _: None, notice=lambda _: None, models=Models.given(old))
        except PuremindError as exc:
            result["error"] = exc

    thread = threading.Thread(target=watch)
    thread.start()
    # What `puremind index --rebuild` does with the new model, as soon as the watch's first run lets it.
    deadline = time.monotonic() + DEADLINE
    while True:
        assert time.monotonic() < deadline and thread.is_alive(), "the watch did not finish its first run"
        try:
            with IndexLock(db):
                store = Store.open(db)
                try:
                    if store.get_meta("last_index_run") is None:
                        continue
                    index_vault(store, vault, embedder=FakeEmbedder("model-b"), rebuild=True)
                    break
                finally:
                    store.close()
        except IndexBusyError:
            pass
        finally:
            time.sleep(0.01)
    write(vault, "coffee.md", "# Coffee\n\nafter the model change\n")
    thread.join(DEADLINE)
    assert not thread.is_alive()
    error = result["error"]
    assert isinstance(error, FingerprintMismatch) and error.exit_code == 2
    assert "the index was rebuilt with another embedding model" in error.message and "restart `puremind watch`" in error.hint
    assert meta(db, "embed_fingerprint") == "model-b"
    store = Store.open(db, create=False)
    try:
        assert store.counts()["vectors"] == store.counts()["chunks"] > 0  # not wiped, not re-embedded
    finally:
        store.close()
    assert "coffee.md" in indexed(db) and "after the model change" not in " ".join(indexed(db)["coffee.md"])


def test_a_watch_started_with_another_model_than_the_index_stops_at_once(vault, db):
    store = Store.open(db)
    index_vault(store, vault, embedder=FakeEmbedder("model-b"))
    store.close()
    w = Running(vault, db, embedder=FakeEmbedder("model-a"))
    assert isinstance(w.wait_exit(), FingerprintMismatch)
    assert meta(db, "embed_fingerprint") == "model-b"


def test_a_vault_symlink_that_now_names_another_folder_stops_the_watch(watching, tmp_path, db):
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "one.md", "# One\n\nalpha\n")
    write(b, "two.md", "# Two\n\nbeta\n")
    link = tmp_path / "notes"
    link.symlink_to(a)
    w = watching(vault=link)
    w.wait_runs(1)
    tmp_link = tmp_path / "notes.new"
    tmp_link.symlink_to(b)
    os.replace(tmp_link, link)
    error = w.wait_exit()
    assert isinstance(error, VaultError) and "this index was built for the vault" in error.message
    assert set(indexed(db)) == {"one.md"}


def _user_namespaces_work() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(["unshare", "-Ur", "sh", "-c", "echo 64 > /proc/sys/user/max_inotify_watches"],
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


needs_userns = pytest.mark.skipif(not _user_namespaces_work(),
                                  reason="user namespaces are not allowed here: the watch limit cannot be set for a "
                                         "child process alone (unshare -Ur)")

#: watches a process in its own user namespace may hold (the kernel's limit there, set by the test)
WATCH_LIMIT = 64
LIMIT_LINE = "error: cannot watch the vault: the system limit on watched folders was reached (fs.inotify.max_user_watches)"


@contextlib.contextmanager
def _watch_child(argv: list[str], home: Path, **popen):
    """A `puremind watch` child with a home of its own and no PUREMIND_* settings from this shell; yields the
    process and a queue of its stdout lines, and kills it on the way out if it is still running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUREMIND_")}
    env.update(PUREMIND_HOME=str(home), PUREMIND_EMBED_MODEL="none", PYTHONPATH=str(REPO))
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in iter(proc.stdout.readline, "")], daemon=True)
    reader.start()
    try:
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(DEADLINE)


def _watch_under_a_watch_limit(vault: Path, home: Path):
    """`puremind watch` in a user namespace of its own whose inotify watch limit is WATCH_LIMIT: a real kernel
    limit, for this child only (the machine's own setting is not touched)."""
    script = f'echo {WATCH_LIMIT} > /proc/sys/user/max_inotify_watches && exec "$0" -m puremind watch "$1" --debounce 0.1'
    return _watch_child(["unshare", "-Ur", "sh", "-c", script, sys.executable, str(vault)], home,
                        stdin=subprocess.DEVNULL)


def _assert_the_limit_error(proc: subprocess.Popen, err: str) -> None:
    assert proc.returncode == 2, err
    assert LIMIT_LINE in err.splitlines(), err
    assert "sudo sysctl fs.inotify.max_user_watches=524288" in err
    assert "Traceback" not in err


@needs_userns
def test_a_vault_with_more_folders_than_the_watch_limit_stops_the_watch_at_start(tmp_path):
    vault = tmp_path / "vault"
    for i in range(WATCH_LIMIT + 6):
        write(vault, f"f{i:03d}/n.md", f"# N{i}\n\nword{i}\n")
    with _watch_under_a_watch_limit(vault, tmp_path / "home") as (proc, _lines):
        proc.wait(timeout=60)
        err = proc.stderr.read()
    _assert_the_limit_error(proc, err)


@needs_userns
def test_folders_made_while_watching_past_the_watch_limit_stop_the_watch_with_the_same_error(tmp_path):
    # 60 folders and the root fit the limit of 64; 8 more made while the watch runs do not. watchdog only logs the
    # folder it could not watch: the watcher must find it (Linux's own count of its watches) and stop.
    vault = tmp_path / "vault"
    for i in range(WATCH_LIMIT - 4):
        write(vault, f"f{i:03d}/n.md", f"# N{i}\n\nword{i}\n")
    with _watch_under_a_watch_limit(vault, tmp_path / "home") as (proc, lines):
        assert lines.get(timeout=DEADLINE * 4).startswith("indexed "), "no first run"
        for i in range(8):
            (vault / f"new{i}").mkdir()
        write(vault, "new7/late.md", "# Late\n\nlateword\n")
        proc.wait(timeout=DEADLINE * 4)
        err = proc.stderr.read()
    _assert_the_limit_error(proc, err)


def test_events_lost_by_the_kernel_start_a_run(watching, vault, db):
    # watchdog (7.1.1 and later) reports an inotify queue overflow as its public EventsLostEvent for the watched
    # folder; the change it stands for is unknown, so a run must look. Handed to the handler the way watchdog's
    # dispatcher hands it, with no file changed at all.
    from watchdog.events import EventsLostEvent
    from watchdog.observers import Observer

    observers = []

    def observer():
        observers.append(Observer())
        return observers[-1]

    w = watching(observer_factory=observer)
    w.wait_runs(1)
    root = os.path.realpath(vault)
    (emitter,) = observers[-1].emitters
    emitter.queue_event(EventsLostEvent(root, is_directory=True))
    w.wait_runs(2, "a run after the lost events")
    assert w.rec.of("lost") == [root]


def test_the_inotify_instance_limit_at_start_stops_the_watch(vault, db):
    def no_instances():
        raise OSError(errno.EMFILE, "inotify instance limit reached")

    w = Running(vault, db, observer_factory=no_instances)
    error = w.wait_exit()
    assert isinstance(error, WatchError) and "fs.inotify.max_user_instances" in error.message


def test_a_missing_vault_at_start_is_an_error(tmp_path, db):
    w = Running(tmp_path / "nowhere", db)
    assert isinstance(w.wait_exit(), VaultError)


# -- the lock --------------------------------------------------------------------------------------------


def test_a_watch_waits_while_puremind_index_holds_the_lock_and_index_runs_between_watch_runs(watching, vault, db):
    w = watching()
    w.wait_runs(1)
    with IndexLock(db):
        write(vault, "coffee.md", "# Coffee\n\nlockedword\n")
        w.rec.wait_for(lambda: w.rec.of("busy"), "the watch to find the lock taken")
        assert len(w.runs) == 1
    w.wait_runs(2)
    assert found(db, "lockedword") == ["coffee.md"]
    assert sum("waiting: another puremind index is writing" in line for line in w.lines) == 1
    # Between runs the lock is free: `puremind index` (say `--rebuild` after a model change) is not refused.
    assert cli.run(["index", str(vault)]) == 0
    assert w.thread.is_alive()


# -- compaction ------------------------------------------------------------------------------------------


def test_the_keyword_index_is_compacted_once_the_vault_has_been_quiet(watching, vault, db):
    quiet = 0.5
    w = watching(timing=Timing(debounce=0.1, compact_quiet=quiet, compact_latest=30, poll=0.05))
    w.wait_runs(1)
    assert meta(db, "compact_pending") is None
    write(vault, "coffee.md", "# Coffee\n\nreplaced text\n")
    w.wait_runs(2)
    assert meta(db, "compact_pending") == "1"  # the old words still sit in FTS segments
    w.rec.wait_for(lambda: w.rec.of("compacted"), "a compaction")
    last_change = max(w.rec.times("change"))
    assert w.rec.times("compacted")[0] - last_change >= quiet
    assert meta(db, "compact_pending") is None


def test_compaction_happens_at_the_latest_bound_while_changes_never_pause(watching, vault, db):
    latest = 1.0
    w = watching(timing=Timing(debounce=0.05, max_delay=0.2, compact_quiet=0.6, compact_latest=latest, poll=0.05))
    w.wait_runs(1)
    started = time.monotonic()
    i = 0
    while not w.rec.of("compacted"):
        assert time.monotonic() - started < DEADLINE, "no compaction while changes kept coming"
        write(vault, "coffee.md", f"# Coffee\n\nversion {i}\n")
        i += 1
        time.sleep(0.1)  # the "user" typing; the test waits on the recorder above
    first_owed = w.rec.times("change")[0]
    assert w.rec.times("compacted")[0] - first_owed >= latest
    gaps = [b - a for a, b in zip(w.rec.times("change"), w.rec.times("change")[1:])]
    assert max(gaps) < 0.6  # never quiet long enough: it was the latest bound


def test_a_watch_that_stops_compacts_on_its_way_out(watching, vault, db):
    w = watching()
    w.wait_runs(1)
    (vault / "coffee.md").unlink()
    w.wait_runs(2)
    assert meta(db, "compact_pending") == "1"
    w.stop()
    assert meta(db, "compact_pending") is None


def test_a_mark_left_by_a_crashed_watch_is_compacted_by_the_next_watch_and_by_index(watching, vault, db, capsys):
    store = Store.open(db)
    index_vault(store, vault)
    write(vault, "coffee.md", "# Coffee\n\nchanged\n")
    index_vault(store, vault, compact=False)  # a watch that died before compacting
    store.close()
    assert meta(db, "compact_pending") == "1"
    w = watching()
    w.wait_runs(1)
    assert meta(db, "compact_pending") is None
    w.stop()
    store = Store.open(db)
    write(vault, "coffee.md", "# Coffee\n\nchanged again\n")
    index_vault(store, vault, compact=False)
    store.close()
    assert cli.run(["index", str(vault)]) == 0
    assert meta(db, "compact_pending") is None


# -- Ctrl-C ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_ctrl_c_stops_the_watch_with_exit_130_after_compacting_and_sigterm_with_0(tmp_path, vault, sig, code):
    home = tmp_path / "home"
    argv = [sys.executable, "-m", "puremind", "watch", str(vault), "--debounce", "0.1"]
    with _watch_child(argv, home, preexec_fn=default_sigint) as (proc, lines):
        assert lines.get(timeout=DEADLINE).startswith("indexed "), "no first run"
        (vault / "coffee.md").unlink()
        assert "1 removed" in lines.get(timeout=DEADLINE)
        db = home / "index.sqlite"
        assert meta(db, "compact_pending") == "1"
        proc.send_signal(sig)
        proc.wait(timeout=DEADLINE)
        err = proc.stderr.read()
    assert proc.returncode == code, err
    assert "Traceback" not in err and ("error: interrupted" in err) == (code == 130)
    assert "InotifyEmitter" not in err
    assert meta(db, "compact_pending") is None
    assert set(indexed(db)) == {"projects/deploy.md", "journal/day.md"}
    con = sqlite3.connect(db)
    try:
        con.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        con.close()


def test_a_watch_of_another_vault_than_the_index_is_refused_at_start(tmp_path, vault, db):
    other = tmp_path / "other"
    write(other, "x.md", "# X\n\nx\n")
    store = Store.open(db)
    index_vault(store, other)
    store.close()
    error = Running(vault, db).wait_exit()
    assert isinstance(error, VaultError) and "this index was built for the vault" in error.message
    assert set(indexed(db)) == {"x.md"}


def test_after_a_storm_of_edits_renames_deletes_a_bulk_copy_and_a_replaced_folder_the_index_equals_a_rebuild(
    watching, vault, db, tmp_path
):
    import random
    import shutil

    rng = random.Random(5)
    for i in range(60):
        write(vault, f"d{i % 6}/n{i}.md", f"# N{i}\n\nword{i}\n")
    bulk = tmp_path / "bulk"
    for i in range(300):
        write(bulk, f"b{i}.md", f"# B{i}\n\nbulk{i}\n")
    w = watching()
    w.wait_runs(1)
    for step in range(120):
        i = rng.randrange(60)
        note = vault / f"d{i % 6}" / f"n{i}.md"
        choice = rng.random()
        if not note.exists():
            write(vault, f"d{i % 6}/n{i}.md", f"# N{i}\n\nback{step}\n")
        elif choice < 0.5:
            note.write_text(f"# N{i}\n\nedited{step}\n")
        elif choice < 0.8:
            note.rename(note.with_name(f"r{step}.md"))
        else:
            note.unlink()
        if step == 40:
            shutil.copytree(bulk, vault / "bulk")
        if step == 80:
            os.rename(vault, tmp_path / "vault-old")
            shutil.copytree(tmp_path / "vault-old", vault)

    w.rec.wait_for(lambda: settled(w), "a run after the storm", timeout=30)
    assert_same_as_fresh_index(vault, db, tmp_path)


def test_a_watch_that_starts_while_an_index_run_creates_the_index_waits_for_it(vault, db):
    # `puremind index` creating a new index holds SQLite's write lock before the file has a schema: the watch's
    # early model check must not end the watch with "busy" (it did, as a race in CI); the run waits for the lock.
    import sqlite3

    from puremind.config import load_settings
    from puremind.models.lazy import Models
    from puremind.services import embedder_for_index
    from puremind.store import files

    files.make_parent(db)
    files.create_file(db)
    creating = sqlite3.connect(str(db), isolation_level=None)
    creating.execute("BEGIN IMMEDIATE")
    creating.execute("CREATE TABLE being_made (a)")
    try:
        embedder = FakeEmbedder("model-a")
        settings = load_settings({"vault": vault, "db": db})
        assert embedder_for_index(settings, Models.given(embedder), lambda _: None)() is embedder
    finally:
        creating.execute("ROLLBACK")
        creating.close()


def test_an_approved_proposal_is_indexed_at_once_by_a_running_watch(watching, vault, db, tmp_path):
    from puremind.inbox import Inbox

    w = watching()
    w.wait_runs(1)
    inbox = Inbox(tmp_path / "inbox-home")
    pid = inbox.propose("Otter notes", "An otterphone is a phone for otters.\n").id
    inbox.approve(pid, vault)
    runs = w.wait_runs(2)
    assert runs[1].added == 1  # the note only: approve's hidden temporary file never counts
    assert found(db, "otterphone") == ["inbox/Otter notes.md"]
