"""The index file under attack or in odd places: damaged pages, a folder pureMind does not own, read-only media.

Through the CLI, as a user meets them: `puremind index` must not take a damaged index for "unchanged",
`--rebuild` must repair it without ever putting an empty index in its place, an index in someone's existing
folder must not close that folder, and an index that cannot be written must still be searchable.
"""

from __future__ import annotations

import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from puremind import cli
from puremind.errors import IndexDamaged
from puremind.store import Store, files

REPO = Path(__file__).resolve().parent.parent


def pm(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A vault of 60 notes and keyword-only settings (no model), index in the pureMind home."""
    vault = tmp_path / "vault"
    for i in range(60):
        (vault / f"d{i % 6}").mkdir(parents=True, exist_ok=True)
        body = " ".join(f"word{j} topic{i}" for j in range(150))
        (vault / f"d{i % 6}" / f"n{i}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")
    for key in [k for k in os.environ if k.startswith("PUREMIND_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PUREMIND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PUREMIND_VAULT", str(vault))
    monkeypatch.setenv("PUREMIND_EMBED_MODEL", "none")
    return vault, tmp_path / "home" / "index.sqlite"


def overwrite_pages(db: Path, count: int = 20, seed: int = 1) -> None:
    """Overwrite `count` 4 KiB pages after the header page with random bytes (a bad sector, a sync tool)."""
    size = db.stat().st_size
    rng = random.Random(seed)
    with db.open("r+b") as f:
        for page in rng.sample(range(1, size // 4096), min(count, size // 4096 - 1)):
            f.seek(page * 4096)
            f.write(rng.randbytes(4096))


# -- damage ---------------------------------------------------------------------------------------------------


def test_a_damaged_index_is_reported_by_the_next_run_and_rebuild_repairs_it_keeping_the_damaged_file(capsys, world):
    vault, db = world
    assert pm(capsys, "index")[0] == 0
    overwrite_pages(db)
    code, out, err = pm(capsys, "index")
    assert code == 2 and "unchanged" not in out, (out, err)
    assert err.startswith("error: index ") and "is damaged" in err and "--rebuild" in err
    code, out, err = pm(capsys, "index", "--rebuild")
    assert code == 0, err
    assert "60 added" in out and "repaired" in err
    assert (db.parent / "index.sqlite.damaged").is_file()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    code, out, err = pm(capsys, "index")
    assert code == 0 and "60 unchanged" in out, (out, err)
    code, out, err = pm(capsys, "search", "--lexical-only", "topic7", "--limit", "1")
    assert code == 0 and "n7.md" in out


def test_a_damaged_index_is_not_replaced_by_an_empty_one_when_the_vault_looks_empty(capsys, world):
    vault, db = world
    assert pm(capsys, "index")[0] == 0
    overwrite_pages(db)
    damaged = db.read_bytes()
    shutil.rmtree(vault)
    vault.mkdir()  # a mount that is not there yet
    code, out, err = pm(capsys, "index", "--rebuild")
    assert code == 2 and "has no notes now" in err and "left as it was" in err, err
    assert db.read_bytes() == damaged and not (db.parent / "index.sqlite.rebuild").exists()


def test_a_rebuild_killed_half_way_leaves_the_damaged_index_in_place_and_the_next_one_completes(capsys, world, monkeypatch):
    vault, db = world
    assert pm(capsys, "index")[0] == 0
    overwrite_pages(db)
    damaged = db.read_bytes()
    import puremind.indexer as indexer

    real = indexer.index_vault

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(indexer, "index_vault", killed)
    assert pm(capsys, "index", "--rebuild")[0] == 130
    assert db.read_bytes() == damaged
    monkeypatch.setattr(indexer, "index_vault", real)
    code, out, err = pm(capsys, "index", "--rebuild")
    assert code == 0 and "60 added" in out, err
    assert not (db.parent / "index.sqlite.rebuild").exists()


def test_the_integrity_check_finds_damage_that_a_read_of_the_first_rows_does_not(world, capsys):
    vault, db = world
    assert pm(capsys, "index")[0] == 0
    overwrite_pages(db, count=3, seed=7)
    with pytest.raises(IndexDamaged):
        with Store.open(db) as store:
            store.check_integrity()


def test_swap_in_never_pairs_the_new_file_with_the_old_write_ahead_log(tmp_path):
    db, fresh = tmp_path / "index.sqlite", tmp_path / "index.sqlite.rebuild"
    for path, text in ((db, "old"), (fresh, "new")):
        path.write_text(text)
    for side in files.side_files(db):
        side.write_text("old side")
    files.swap_in(fresh, db, keep_old_as=tmp_path / "index.sqlite.damaged")
    assert db.read_text() == "new" and not fresh.exists()
    assert not any(side.exists() for side in files.side_files(db))
    assert (tmp_path / "index.sqlite.damaged").read_text() == "old"
    assert (tmp_path / "index.sqlite.damaged-wal").read_text() == "old side"


def test_a_reader_holding_the_old_index_during_a_repair_leaves_the_new_ones_log_alone(tmp_path):
    """A server still reading the damaged file when the repair swaps in the new one: when it closes, the new
    file's -wal (holding a write not yet checkpointed) must still be there."""
    db, fresh, kept = tmp_path / "index.sqlite", tmp_path / "index.sqlite.rebuild", tmp_path / "index.sqlite.damaged"
    for path, value in ((db, "old"), (fresh, "new")):
        store = Store.open(path)
        store.set_meta("which", value)
        store.close()
    reader = Store.open(db, create=False)
    assert reader.get_meta("which") == "old"
    files.swap_in(fresh, db, keep_old_as=kept)
    writer = Store.open(db)
    writer.set_meta("later", "kept")
    assert reader.get_meta("which") == "old"  # it goes on reading the file it opened
    reader.close()
    try:
        again = Store.open(db, create=False)
        assert (again.get_meta("which"), again.get_meta("later")) == ("new", "kept")
        again.close()
    finally:
        writer.close()
    again = Store.open(db, create=False)
    assert again.get_meta("later") == "kept"
    again.check_integrity()
    again.close()
    assert Store.open(kept, create=False).get_meta("which") == "old"


def test_a_second_repair_leaves_no_stale_log_beside_the_kept_file(tmp_path):
    db, kept = tmp_path / "index.sqlite", tmp_path / "index.sqlite.damaged"
    kept_wal = kept.with_name(kept.name + "-wal")
    for round_ in (1, 2):
        db.write_text(f"old {round_}")
        if round_ == 1:
            db.with_name(db.name + "-wal").write_text("old side")
        fresh = tmp_path / "index.sqlite.rebuild"
        fresh.write_text(f"new {round_}")
        files.swap_in(fresh, db, keep_old_as=kept)
        assert kept.read_text() == f"old {round_}" and db.read_text() == f"new {round_}"
    assert not kept_wal.exists()  # the first repair's log belonged to another file


def test_immutable_reading_is_only_for_media_that_cannot_hold_side_files(tmp_path):
    import sqlite3

    from puremind.store.store import _may_read_immutable

    db = tmp_path / "index.sqlite"
    db.write_bytes(b"")

    def error(name):
        exc = sqlite3.OperationalError("x")
        exc.sqlite_errorname = name
        return exc

    assert _may_read_immutable(db, error("SQLITE_CANTOPEN"))
    assert _may_read_immutable(db, error("SQLITE_READONLY_CANTINIT"))
    assert not _may_read_immutable(db, error("SQLITE_BUSY"))
    assert not _may_read_immutable(db, error("SQLITE_CORRUPT"))
    db.with_name(db.name + "-wal").write_bytes(b"frames")
    assert not _may_read_immutable(db, error("SQLITE_CANTOPEN"))  # immutable reading would skip them


# -- folders pureMind does not own ----------------------------------------------------------------------------


def test_an_index_in_an_existing_folder_leaves_the_folders_mode_and_warns_once(capsys, world, tmp_path, monkeypatch):
    shared = tmp_path / "projects"
    shared.mkdir()
    os.chmod(shared, 0o755)
    monkeypatch.setenv("PUREMIND_DB", str(shared / "pm.sqlite"))
    code, out, err = pm(capsys, "index")
    assert code == 0, err
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert stat.S_IMODE((shared / "pm.sqlite").stat().st_mode) == 0o600
    assert "warning: the folder" in err and "open to other users (mode 0755)" in err
    code, out, err = pm(capsys, "index")
    assert code == 0 and "open to other users" not in err  # said when the index is made, not at every run


def test_folders_pureMind_creates_for_the_index_are_private(capsys, world, tmp_path, monkeypatch):
    monkeypatch.setenv("PUREMIND_DB", str(tmp_path / "new" / "deeper" / "pm.sqlite"))
    code, out, err = pm(capsys, "index")
    assert code == 0 and "open to other users" not in err, err
    for folder in (tmp_path / "new", tmp_path / "new" / "deeper"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


# -- read-only media --------------------------------------------------------------------------------------------


def test_an_index_that_cannot_be_written_is_still_searched(capsys, world, tmp_path):
    """As a user whom permissions bind (`nobody` when the suite runs as root): the index in a folder and a file
    that nobody may write, with no -wal or -shm file beside it, as on read-only media."""
    vault, db = world
    assert pm(capsys, "index")[0] == 0
    base = Path(tempfile.mkdtemp(prefix="pm-ro-"))
    try:
        os.chmod(base, 0o755)
        media = base / "media"
        media.mkdir()
        shutil.copy(db, media / "index.sqlite")
        os.chmod(media / "index.sqlite", 0o444)
        os.chmod(media, 0o555)
        shutil.copytree(vault, base / "vault")
        for dirpath, dirnames, filenames in os.walk(base / "vault"):
            os.chmod(dirpath, 0o755)
        prefix: list[str] = []
        if os.geteuid() == 0:
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                pytest.skip("running as root without setpriv: cannot run a search that permissions bind")
            prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PUREMIND_")}
        env.update(PUREMIND_HOME=str(base / "home"), PUREMIND_DB=str(media / "index.sqlite"),
                   PUREMIND_VAULT=str(base / "vault"), PUREMIND_EMBED_MODEL="none", PYTHONPATH=str(REPO))
        probe = subprocess.run([*prefix, sys.executable, "-c", "import puremind"], cwd="/", env=env, capture_output=True)
        if probe.returncode != 0:
            pytest.skip("user nobody cannot run this Python or import puremind")
        for args in (["search", "--lexical-only", "topic7", "--limit", "1"], ["search", "topic7", "--limit", "1"]):
            done = subprocess.run([*prefix, sys.executable, "-m", "puremind", *args], cwd="/", env=env,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0 and "n7.md" in done.stdout, (args, done.stderr)
        assert sorted(os.listdir(media)) == ["index.sqlite"]  # nothing written beside it
        other = base / "other"
        other.mkdir()
        import sqlite3

        with sqlite3.connect(other / "app.sqlite") as conn:
            conn.execute("CREATE TABLE t (x)")
        conn.close()
        os.chmod(other / "app.sqlite", 0o444)
        os.chmod(other, 0o555)
        done = subprocess.run([*prefix, sys.executable, "-m", "puremind", "search", "--lexical-only", "topic7"],
                              cwd="/", env={**env, "PUREMIND_DB": str(other / "app.sqlite")},
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "not a pureMind index" in done.stderr, done.stderr
        done = subprocess.run([*prefix, sys.executable, "-m", "puremind", "index"], cwd="/", env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.startswith("error:") and "Traceback" not in done.stderr
    finally:
        for dirpath, dirnames, _ in os.walk(base):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(base, ignore_errors=True)
