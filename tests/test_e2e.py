"""End to end: `puremind init / index / search --lexical-only` against hostile vaults, checked against the rules.

Each test builds a small vault (symlinks in, out and looping, FIFOs, sockets, devices, non-UTF-8 names, the 2 MiB
and 1,024-character boundaries, CRLF, BOM, NUL bytes, invalid UTF-8), runs the real command, then opens the index
read-only and compares its `files` and `chunks` tables with what the rules say it must hold, or with a fresh
`puremind index --rebuild` in another PUREMIND_HOME. Tests that need a user whom chmod blocks run the command as
`nobody` (through setpriv) when the suite runs as root, and are skipped when that is impossible.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import default_sigint, meta
from puremind import cli
from puremind.chunker import chunk_markdown

MIB2 = 2 * 1024 * 1024
REPO = Path(__file__).resolve().parents[1]


# -- helpers ---------------------------------------------------------------------------------------


def pm(capsys, *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process; an exception escaping `cli.run` is a failure (users would see a traceback)."""
    try:
        code = cli.run(list(args))
    except SystemExit as exc:  # what a user's shell would see as the exit status
        code = exc.code if isinstance(exc.code, int) else 1
    except Exception as exc:  # noqa: BLE001 - the point is to report any of them
        out, err = capsys.readouterr()
        pytest.fail(f"`puremind {' '.join(args)}` raised {exc!r} instead of printing an error line (stderr: {err!r})")
    out, err = capsys.readouterr()
    return code, out, err


def put(root: Path | bytes, rel: str | bytes, data: str | bytes) -> None:
    """Write a file below root (bytes paths allowed for non-UTF-8 names), creating folders."""
    path = os.path.join(os.fsencode(root), os.fsencode(rel))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


def not_utf8_names_allowed(folder: Path) -> bool:
    """Linux filesystems take any bytes as a name; macOS (APFS) refuses names that are not UTF-8."""
    os.makedirs(folder, exist_ok=True)
    probe = os.fsencode(folder) + b"/probe\xff"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_WRONLY, 0o600))
    except OSError:
        return False
    os.unlink(probe)
    return True


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def index_rows(db: Path) -> tuple[dict[str, tuple], dict[str, list[tuple]]]:
    """(files by path -> (sha256, size, mtime_ns), chunks by path -> [(ord, heading_path, start, end, kind, text)])."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        files = {p: (s, z, m) for p, s, z, m in con.execute("SELECT path, sha256, size, mtime_ns FROM files")}
        chunks: dict[str, list[tuple]] = {p: [] for p in files}
        for path, ordn, heading, start, end, kind, text in con.execute(
            "SELECT f.path, c.ord, c.heading_path, c.start_line, c.end_line, c.kind, c.text"
            " FROM chunks c JOIN files f ON f.id = c.file_id ORDER BY f.path, c.ord"
        ):
            chunks[path].append((ordn, tuple(json.loads(heading)), start, end, kind, text))
        return files, chunks
    finally:
        con.close()


def expected_chunks(data: bytes) -> list[tuple]:
    text = data.decode("utf-8", errors="replace")
    return [(i, c.heading_path, c.start_line, c.end_line, c.kind, c.text) for i, c in enumerate(chunk_markdown(text))]


def assert_fts_consistent(db: Path) -> None:
    """FTS5's own check that the keyword index matches the chunks table (run on a copy: it is a write statement)."""
    copy = db.with_name("fts-check.sqlite")
    con = sqlite3.connect(db)
    try:
        con.execute("VACUUM INTO ?", (str(copy),))
    finally:
        con.close()
    con = sqlite3.connect(copy)
    try:
        con.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        con.close()
        copy.unlink()


def assert_index_holds_exactly(db: Path, expected: dict[str, bytes]) -> None:
    """The files table names exactly `expected`, with their hashes, and every note's chunks are the chunker's."""
    files, chunks = index_rows(db)
    assert sorted(files) == sorted(expected)
    for rel, data in expected.items():
        assert files[rel][0] == sha(data), rel
        assert chunks[rel] == expected_chunks(data), rel
    assert_fts_consistent(db)


def same_index(db_a: Path, db_b: Path) -> None:
    files_a, chunks_a = index_rows(db_a)
    files_b, chunks_b = index_rows(db_b)
    assert {p: v[:2] for p, v in files_a.items()} == {p: v[:2] for p, v in files_b.items()}
    assert chunks_a == chunks_b


def many_notes(root: Path, n: int) -> None:
    """A vault big enough that indexing it takes a second or two."""
    for i in range(n):
        sections = "".join(
            f"## Part {j}\n\nNote {i} part {j} talks about topic{i % 97} and shared words like espresso and grinder. "
            + "filler text " * 12
            + "\n\n"
            for j in range(4)
        )
        put(root, f"d{i % 50}/note{i}.md", f"# Note {i}\n\n{sections}")


def wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except sqlite3.Error:
            pass
        time.sleep(0.02)
    return False


def indexed_count(db: Path) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute("SELECT count(*) FROM files").fetchone()[0]
    finally:
        con.close()


def subprocess_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUREMIND_")}
    env["PUREMIND_HOME"] = str(home)
    env["PUREMIND_EMBED_MODEL"] = "none"  # keyword-only: the real models cannot be had here
    env["PYTHONPATH"] = str(REPO)
    return env


# -- running as a user that chmod blocks --------------------------------------------------------------


class Unprivileged:
    """Runs puremind as a user whom file permissions bind: `nobody` via setpriv when we are root, else ourselves."""

    def __init__(self, base: Path, prefix: list[str], uid: int | None):
        self.base = base
        self.prefix = prefix
        self.uid = uid
        self.vault = base / "vault"
        self.home = base / "home"
        self.vault.mkdir()
        self.home.mkdir()
        if uid is not None:
            os.chown(self.home, uid, uid)

    def run(self, *args: str) -> tuple[int, str, str]:
        proc = subprocess.run(
            [*self.prefix, sys.executable, "-m", "puremind", *args],
            env=subprocess_env(self.home),
            capture_output=True,
            text=True,
            timeout=120,
        )
        return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def unprivileged():
    prefix: list[str] = []
    uid = None
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot run puremind as a user that permissions bind")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        uid = 65534
        probe = subprocess.run([*prefix, sys.executable, "-c", "import puremind"], env=subprocess_env(Path("/")),
                               capture_output=True)
        if probe.returncode != 0:
            pytest.skip("user nobody cannot run this Python or import puremind")
    base = Path(tempfile.mkdtemp(prefix="pm-e2e-", dir="/tmp" if os.path.isdir("/tmp") else None))
    os.chmod(base, 0o755)
    try:
        yield Unprivileged(base, prefix, uid)
    finally:
        for dirpath, dirnames, _ in os.walk(base):
            for d in dirnames:
                p = os.path.join(dirpath, d)
                if not os.path.islink(p):
                    os.chmod(p, 0o755)
        shutil.rmtree(base, ignore_errors=True)


# -- the adversarial vault --------------------------------------------------------------------------


def build_adversarial_vault(root: Path, outside: Path, monkeypatch) -> dict[str, bytes]:
    """Every kind of entry the rules name; returns {vault-relative path: bytes the index must hold}."""
    expected: dict[str, bytes] = {}

    def note(rel: str, data: str | bytes) -> None:
        put(root, rel, data)
        expected[rel] = data.encode() if isinstance(data, str) else data

    note("plain.md", "# Plain\n\nuniqplainword lives here.\n")
    note("crlf.md", "# Crlf\r\n\r\n## Sub\r\n\r\nuniqcrlfword with windows endings\r\n")
    note("bom.md", "\ufeff---\ntitle: x\n---\n# Bomhead\n\nuniqbomword body\n")
    note("nul.md", b"# Nul\n\nbefore\x00uniqnulword after\n")
    note("invalid.md", b"# Inv\n\n\xff\xfe uniqinvalidword \xc3\x28\n")
    note("empty.md", b"")
    note("blank.md", b"   \n\n\t\n")
    head = b"# Exact\n\nuniqexactword\n"
    note("exact.md", head + (b"x" * 999 + b"\n") * ((MIB2 - len(head)) // 1000) + b"y" * ((MIB2 - len(head)) % 1000))
    assert len(expected["exact.md"]) == MIB2
    put(root, "over.md", b"# Over\n\nuniqoverword\n" + b"z" * MIB2)  # 2 MiB + a few bytes: skipped
    note("UP.MARKDOWN", "# Up\n\nuniqupperword\n")
    note("mixed.Md", "uniqmixedword\n")
    note("名前のノート.md", "# 日本語\n\n東京タワーの設定メモ uniqjapword\n")
    note("dir.md/inner.md", "uniqdirmdword\n")  # a folder with a note's name is still a folder
    note("sub/s.md", "# S\n\nuniqsubword\n")
    put(root, "NODE_MODULES/nm.md", "uniqnmword")
    put(root, "Node_Modules/deeper/nm2.md", "uniqnm2word")
    put(root, "__PyCache__/pc.md", "uniqpcword")
    put(root, ".hidden/h.md", "uniqhiddenword")
    put(root, ".hid.md", "uniqhidfileword")
    put(root, ".md", "uniqdotmdword")
    put(root, "notes.txt", "uniqtxtword")
    put(root, "x.markdown.txt", "uniqmdtxtword")
    if not_utf8_names_allowed(root):
        put(root, b"bad\xffname.md", "uniqbadnameword")
        put(root, b"bad\xffdir/inside.md", "uniqbaddirword")
        os.symlink(b"plain.md", os.fsencode(root) + b"/badlink\xff.md")
    # The vault-relative path may be 1,024 characters, not one more.
    folder = ""
    while len(folder) + 201 < 1000:
        folder += "d" * 200 + "/"
    ok_name = folder + "n" * (1024 - len(folder) - 3) + ".md"
    note(ok_name, "uniqlen1024word\n")
    put(root, folder + "m" * (1025 - len(folder) - 3) + ".md", "uniqlen1025word")
    put(outside, "o.md", "uniqoutsideword")
    put(outside, "odir/od.md", "uniqoutdirword")
    links = {
        "in.md": ("plain.md", "plain.md"),
        "chain.md": ("in.md", "plain.md"),
        "abs_in.md": (str(root / "plain.md"), "plain.md"),
        "toexact.md": ("exact.md", "exact.md"),
        "via_dirlink.md": ("dirlink/s.md", "sub/s.md"),
        "out.md": (str(outside / "o.md"), None),
        "loop1.md": ("loop2.md", None),
        "loop2.md": ("loop1.md", None),
        "self.md": ("self.md", None),
        "broken.md": ("nothere.md", None),
        "tohidden.md": (".hidden/h.md", None),
        "tohidfile.md": (".hid.md", None),
        "tonm.md": ("NODE_MODULES/nm.md", None),
        "totxt.md": ("notes.txt", None),
        "tobig.md": ("over.md", None),
        "tofifo.md": ("fifo.md", None),
        "dirlink": ("sub", None),
        "dirlink.md": ("sub", None),
        "outdir": (str(outside), None),
        "outdir.md": (str(outside / "odir"), None),
        "up": ("..", None),
        ".hiddenlink.md": ("plain.md", None),
        "NODE_MODULES/nmlink.md": ("../plain.md", None),
    }
    for rel, (target, indexed_as) in links.items():
        os.symlink(target, root / rel)
        if indexed_as is not None:
            expected[rel] = expected[indexed_as]
    os.mkfifo(root / "fifo.md")
    monkeypatch.chdir(root)  # a socket path must be short: bind it relative to the vault
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("sock.md")
    sock.close()
    if os.geteuid() == 0:
        os.mknod(root / "dev.md", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    return expected


# -- the vault rules ------------------------------------------------------------------------------


def test_an_adversarial_vault_indexes_exactly_the_notes_the_rules_allow(capsys, tmp_path, monkeypatch, puremind_home):
    vault, outside = tmp_path / "vault", tmp_path / "outside"
    expected = build_adversarial_vault(vault, outside, monkeypatch)
    code, out, err = pm(capsys, "index", str(vault))
    assert code == 0, err
    assert_index_holds_exactly(puremind_home / "index.sqlite", expected)
    reasons = ["hidden", "skipped folder", "too large", "symlink outside vault", "symlink to skipped file",
               "symlink loop or broken", "not a regular file", "path too long"]
    if not_utf8_names_allowed(tmp_path):
        reasons.append("name not UTF-8")
    for reason in reasons:
        assert reason in out, f"the summary should count {reason!r}: {out}"
    # Nothing that the rules skip is searchable.
    for word in ("uniqoverword", "uniqnmword", "uniqpcword", "uniqhiddenword", "uniqhidfileword", "uniqtxtword",
                 "uniqbadnameword", "uniqbaddirword", "uniqlen1025word", "uniqoutsideword", "uniqoutdirword"):
        code, out, err = pm(capsys, "search", "--lexical-only", word)
        assert code == 1, f"{word} was found: {out}"


def test_a_second_run_over_an_unchanged_adversarial_vault_changes_nothing(capsys, tmp_path, monkeypatch, puremind_home):
    vault, outside = tmp_path / "vault", tmp_path / "outside"
    expected = build_adversarial_vault(vault, outside, monkeypatch)
    assert pm(capsys, "index", str(vault))[0] == 0
    code, out, err = pm(capsys, "index", str(vault))
    assert code == 0, err
    assert f"0 added, 0 changed, 0 removed, {len(expected)} unchanged" in out
    assert_index_holds_exactly(puremind_home / "index.sqlite", expected)


def test_words_after_a_nul_byte_a_bom_crlf_or_invalid_utf8_are_found_at_their_note(capsys, tmp_path, monkeypatch):
    vault = tmp_path / "vault"
    build_adversarial_vault(vault, tmp_path / "outside", monkeypatch)
    assert pm(capsys, "index", str(vault))[0] == 0
    for word, rel in (("uniqnulword", "nul.md"), ("uniqbomword", "bom.md"), ("uniqcrlfword", "crlf.md"),
                      ("uniqinvalidword", "invalid.md"), ("東京タワーの設定メモ", "名前のノート.md"),
                      ("uniqupperword", "UP.MARKDOWN"), ("uniqlen1024word", None)):
        code, out, err = pm(capsys, "search", "--lexical-only", "--json", word)
        assert code == 0, (word, err)
        paths = [r["path"] for r in json.loads(out)["results"]]
        assert paths and (rel is None or paths[0] == rel), (word, paths)
    code, out, err = pm(capsys, "search", "--lexical-only", "--json", "Bomhead")
    hit = json.loads(out)["results"][0]
    assert hit["path"] == "bom.md" and hit["heading_path"] == ["Bomhead"], "a BOM must not hide frontmatter or a heading"


# -- edits between runs --------------------------------------------------------------------------


def test_edits_renames_deletes_copies_and_replacements_between_runs_end_like_a_fresh_rebuild(
    capsys, tmp_path, monkeypatch, puremind_home
):
    vault, outside = tmp_path / "vault", tmp_path / "outside"
    expected = build_adversarial_vault(vault, outside, monkeypatch)
    for rel, text in {"edit.md": "# Edit\n\nold words\n", "ren.md": "# Ren\n\nrenamed words\n",
                      "del.md": "# Del\n\ndeleted words\n", "tolink.md": "# L\n\nlinked away\n",
                      "grow.md": "# G\n\ngrows\n", "tofifo2.md": "fifo later\n", "todir.md": "dir later\n",
                      "folder/a.md": "# A\n\nfolder a\n", "folder/b.md": "# B\n\nfolder b\n"}.items():
        put(vault, rel, text)
    assert pm(capsys, "index", str(vault))[0] == 0

    put(vault, "edit.md", "# Edit\n\nnew words entirely\n")
    os.rename(vault / "ren.md", vault / "ren2.md")
    (vault / "del.md").unlink()
    shutil.copy(vault / "plain.md", vault / "plaincopy.md")
    (vault / "tolink.md").unlink()
    os.symlink(outside / "o.md", vault / "tolink.md")  # a note replaced by a symlink to outside: removed
    put(vault, "grow.md", b"# G\n\n" + b"g" * MIB2)  # grew over 2 MiB: skipped, so removed
    (vault / "tofifo2.md").unlink()
    os.mkfifo(vault / "tofifo2.md")
    (vault / "todir.md").unlink()
    put(vault, "todir.md/inside.md", "now a folder\n")
    os.rename(vault / "folder", vault / "renamed folder")
    os.rename(vault / "sub", vault / ".sub")  # hidden now: sub/s.md and the links through it go
    (vault / "chain.md").unlink()
    os.symlink("plaincopy.md", vault / "chain.md")  # retargeted to another file with other stat
    code, out, err = pm(capsys, "index", str(vault))
    assert code == 0, err

    home2 = tmp_path / "home2"
    monkeypatch.setenv("PUREMIND_HOME", str(home2))
    assert pm(capsys, "index", "--rebuild", str(vault))[0] == 0
    same_index(puremind_home / "index.sqlite", home2 / "index.sqlite")
    files, _ = index_rows(puremind_home / "index.sqlite")
    for gone in ("ren.md", "del.md", "tolink.md", "grow.md", "tofifo2.md", "todir.md", "folder/a.md",
                 "sub/s.md", "via_dirlink.md"):
        assert gone not in files, gone
    for new in ("ren2.md", "plaincopy.md", "todir.md/inside.md", "renamed folder/a.md", "renamed folder/b.md"):
        assert new in files, new
    assert_fts_consistent(puremind_home / "index.sqlite")


def test_an_emptied_vault_removes_nothing_and_warns(capsys, tmp_path, puremind_home):
    vault = tmp_path / "vault"
    put(vault, "a.md", "# A\n\nalpha\n")
    put(vault, "b/b.md", "# B\n\nbeta\n")
    assert pm(capsys, "index", str(vault))[0] == 0
    shutil.rmtree(vault)
    vault.mkdir()
    code, out, err = pm(capsys, "index", str(vault))
    assert code == 0 and "warning:" in err and "looks empty" in err
    assert sorted(index_rows(puremind_home / "index.sqlite")[0]) == ["a.md", "b/b.md"]


def test_a_retargeted_symlink_note_is_read_again_even_when_both_targets_share_size_and_mtime(
    capsys, tmp_path, puremind_home
):
    # Two notes extracted from one archive often share mtime, and here also size.
    vault = tmp_path / "vault"
    put(vault, "a.md", "# A\n\nalphaword\n")
    put(vault, "b.md", "# B\n\nbetawords\n")
    for rel in ("a.md", "b.md"):
        os.utime(vault / rel, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    os.symlink("a.md", vault / "link.md")
    assert pm(capsys, "index", str(vault))[0] == 0
    (vault / "link.md").unlink()
    os.symlink("b.md", vault / "link.md")
    assert pm(capsys, "index", str(vault))[0] == 0
    files, _ = index_rows(puremind_home / "index.sqlite")
    assert files["link.md"][0] == sha((vault / "b.md").read_bytes()), "link.md still holds a.md's text"


def test_a_rebuild_against_an_empty_folder_does_not_relabel_another_vaults_notes(capsys, tmp_path, puremind_home):
    vault_a, vault_b = tmp_path / "A", tmp_path / "B"
    put(vault_a, "a.md", "# A\n\nalphaword only lives in vault A\n")
    vault_b.mkdir()
    assert pm(capsys, "index", str(vault_a))[0] == 0
    pm(capsys, "index", "--rebuild", str(vault_b))
    db = puremind_home / "index.sqlite"
    files, _ = index_rows(db)
    assert not (meta(db, "vault") == str(vault_b.resolve()) and "a.md" in files), (
        "the index now claims vault B but holds vault A's notes"
    )
    code, out, err = pm(capsys, "index", str(vault_a))
    assert code == 0, f"vault A can no longer be indexed: {err}"


# -- permissions: unreadable files and folders ---------------------------------------------------------


def test_unreadable_files_and_folders_keep_their_previous_entries(unprivileged):
    u = unprivileged
    put(u.vault, "open.md", "# Open\n\nopenword\n")
    put(u.vault, "locked.md", "# Locked\n\nlockedword\n")
    put(u.vault, "edited-then-locked.md", "# E\n\neditedword\n")
    put(u.vault, "lockeddir/l.md", "# L\n\nlockeddirword\n")
    put(u.vault, "nosearch/n.md", "# N\n\nnosearchword\n")
    code, out, err = u.run("index", str(u.vault))
    assert code == 0, err
    before = index_rows(u.home / "index.sqlite")[0]
    assert sorted(before) == ["edited-then-locked.md", "locked.md", "lockeddir/l.md", "nosearch/n.md", "open.md"]
    put(u.vault, "edited-then-locked.md", "# E\n\nnew text the run cannot read\n")
    os.chmod(u.vault / "edited-then-locked.md", 0)
    os.chmod(u.vault / "locked.md", 0)
    os.chmod(u.vault / "lockeddir", 0)
    os.chmod(u.vault / "nosearch", 0o744)  # listable, but its entries cannot be examined
    code, out, err = u.run("index", str(u.vault))
    assert code == 0, err
    assert "warning: cannot read edited-then-locked.md" in err and "warning: 2 folders could not be listed" in err
    assert index_rows(u.home / "index.sqlite")[0] == before
    code, out, err = u.run("search", "--lexical-only", "lockeddirword")
    assert code == 0 and "lockeddir/l.md" in out


def test_a_symlinked_note_whose_target_folder_becomes_unreadable_keeps_its_entry(unprivileged):
    u = unprivileged
    put(u.vault, "private/target.md", "# T\n\ntargetword\n")
    put(u.vault, "other.md", "# O\n\notherword\n")  # so the vault does not look empty
    os.symlink("private/target.md", u.vault / "link.md")
    assert u.run("index", str(u.vault))[0] == 0
    os.chmod(u.vault / "private", 0)
    code, out, err = u.run("index", str(u.vault))
    assert code == 0, err
    files = index_rows(u.home / "index.sqlite")[0]
    assert "link.md" in files, f"a note that cannot be read must keep its previous entry; summary: {out}"


def test_symlinked_notes_in_a_folder_that_lists_but_cannot_be_searched_are_kept(unprivileged):
    u = unprivileged
    put(u.vault, "real.md", "# R\n\nrealword\n")
    os.makedirs(u.vault / "links")
    os.symlink("../real.md", u.vault / "links" / "l.md")
    assert u.run("index", str(u.vault))[0] == 0
    os.chmod(u.vault / "links", 0o744)  # r without x: names list, entries cannot be examined
    code, out, err = u.run("index", str(u.vault))
    assert code == 0, err
    assert "links/l.md" in index_rows(u.home / "index.sqlite")[0], f"removed although unexaminable: {out}"


def test_an_unwritable_puremind_home_is_an_error_line_not_a_traceback(unprivileged):
    u = unprivileged
    put(u.vault, "a.md", "# A\n\nalpha\n")
    if u.uid is not None:
        os.chown(u.home, 0, 0)  # owned by root: nobody may not write there
    os.chmod(u.home, 0o555)
    for args in (("init", str(u.vault)), ("index", str(u.vault))):
        code, out, err = u.run(*args)
        assert code == 2 and "error:" in err, (args, code, err[-400:])
        assert "Traceback" not in err, (args, err[-400:])


# -- bad input: exit 2 and one error line ----------------------------------------------------------


def test_a_missing_vault_or_a_vault_that_is_a_file_is_exit_2_with_an_error_line(capsys, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for args in (("index", str(tmp_path / "missing")), ("index", str(afile)),
                 ("init", str(tmp_path / "missing")), ("init", str(afile))):
        code, out, err = pm(capsys, *args)
        assert code == 2 and "error:" in err, (args, err)


def test_a_puremind_home_that_is_a_file_is_exit_2_for_init_and_index(capsys, tmp_path, monkeypatch):
    put(tmp_path, "vault/a.md", "# A\n\nalpha\n")
    afile = tmp_path / "afile"
    afile.write_text("x")
    for home in (afile, afile / "sub"):
        monkeypatch.setenv("PUREMIND_HOME", str(home))
        for args in (("init", str(tmp_path / "vault")), ("index", str(tmp_path / "vault"))):
            code, out, err = pm(capsys, *args)
            assert code == 2 and "error:" in err, (home, args, err)


def test_an_index_path_below_a_regular_file_is_exit_2(capsys, tmp_path, monkeypatch):
    put(tmp_path, "vault/a.md", "# A\n\nalpha\n")
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("PUREMIND_DB", str(tmp_path / "afile" / "index.sqlite"))
    code, out, err = pm(capsys, "index", str(tmp_path / "vault"))
    assert code == 2 and "error:" in err


def test_an_index_path_that_is_a_directory_or_a_corrupt_file_is_exit_2(capsys, tmp_path, monkeypatch, puremind_home):
    put(tmp_path, "vault/a.md", "# A\n\nalpha\n")
    (puremind_home / "index.sqlite").mkdir(parents=True)
    for args in (("index", str(tmp_path / "vault")), ("search", "--lexical-only", "alpha")):
        code, out, err = pm(capsys, *args)
        assert code == 2 and "error:" in err, (args, err)
    os.rmdir(puremind_home / "index.sqlite")
    (puremind_home / "index.sqlite").write_bytes(os.urandom(64 * 1024))
    for args in (("index", str(tmp_path / "vault")), ("search", "--lexical-only", "alpha")):
        code, out, err = pm(capsys, *args)
        assert code == 2 and "not a pureMind index" in err, (args, err)


def test_a_damaged_keyword_index_makes_search_exit_2_not_crash(capsys, tmp_path, puremind_home):
    put(tmp_path, "vault/a.md", "# A\n\nalpha beta\n")
    put(tmp_path, "vault/b.md", "# B\n\nalpha gamma\n")
    assert pm(capsys, "index", str(tmp_path / "vault"))[0] == 0
    con = sqlite3.connect(puremind_home / "index.sqlite")
    # The FTS5 'averages' record says one row of total length 0: bm25() then yields NULL.
    con.execute("UPDATE chunks_fts_data SET block = X'010000' WHERE id = 1")
    con.commit()
    con.close()
    code, out, err = pm(capsys, "search", "--lexical-only", "alpha")
    assert code == 2 and "error:" in err


def test_a_broken_config_is_exit_2_naming_file_line_and_column(capsys, tmp_path, puremind_home):
    puremind_home.mkdir()
    (puremind_home / "config.toml").write_text(f'vault = "{tmp_path}"\n[models\n')
    for args in (("index",), ("search", "--lexical-only", "x")):
        code, out, err = pm(capsys, *args)
        assert code == 2 and "broken config file" in err and "line 2" in err and "column" in err, err


def test_a_vault_or_home_path_that_is_not_utf8_is_an_error_line_or_works(capsys, tmp_path, monkeypatch):
    if not not_utf8_names_allowed(tmp_path):
        pytest.skip("this filesystem refuses names that are not UTF-8")
    bad_vault = os.fsencode(tmp_path) + b"/v\xff"
    put(bad_vault, "a.md", "# A\n\nalpha\n")
    code, out, err = pm(capsys, "index", os.fsdecode(bad_vault))
    assert code == 0 or (code == 2 and "error:" in err), err
    put(tmp_path, "good/a.md", "# A\n\nalpha\n")
    monkeypatch.setenv("PUREMIND_HOME", os.fsdecode(os.fsencode(tmp_path) + b"/h\xff"))
    code, out, err = pm(capsys, "index", str(tmp_path / "good"))
    assert code == 0 or (code == 2 and "error:" in err), err



@pytest.mark.parametrize("name", ['quote"back\\slash', "new\nline", "tab\there", "del\x7fchar", "名前 ünïcode"])
def test_init_writes_a_config_that_later_commands_can_read_for_any_vault_name(capsys, tmp_path, name):
    vault = tmp_path / name
    put(vault, "a.md", "# A\n\nalphaword\n")
    code, out, err = pm(capsys, "init", str(vault))
    assert code == 0, err
    code, out, err = pm(capsys, "index")
    assert code == 0, err
    assert pm(capsys, "search", "--lexical-only", "alphaword")[0] == 0

# -- privacy -------------------------------------------------------------------------------------------


def test_old_text_of_edited_and_deleted_notes_is_gone_from_the_index_and_its_wal(capsys, tmp_path, puremind_home):
    vault = tmp_path / "vault"
    put(vault, "edit.md", "# Head zqxheadold\n\nzqxeditold " * 50 + "\n")
    put(vault, "del.md", "# Del\n\nzqxdelold here\n")
    put(vault, "out.md", "# Out\n\nzqxoutold here\n")
    put(vault, "keep.md", "# Keep\n\nordinary words\n")
    assert pm(capsys, "index", str(vault))[0] == 0
    db = puremind_home / "index.sqlite"
    # An idle connection keeps the -wal file in place after the run, so its bytes can be checked.
    idle = sqlite3.connect(db)
    try:
        put(vault, "edit.md", "# Head\n\nnew text\n")
        (vault / "del.md").unlink()
        (vault / "out.md").unlink()
        put(tmp_path, "outside.md", "elsewhere\n")
        os.symlink(tmp_path / "outside.md", vault / "out.md")
        assert pm(capsys, "index", str(vault))[0] == 0
        for path in (db, db.with_name("index.sqlite-wal")):
            if path.exists():
                data = path.read_bytes()
                for word in (b"zqxheadold", b"zqxeditold", b"zqxdelold", b"zqxoutold"):
                    assert word not in data, (path.name, word)
    finally:
        idle.close()


def test_old_text_held_by_a_reader_during_the_run_is_removed_by_the_next_run(capsys, tmp_path, puremind_home):
    vault = tmp_path / "vault"
    put(vault, "edit.md", "# Edit\n\nzqxreaderold secret words\n")
    put(vault, "keep.md", "# Keep\n\nordinary words\n")
    assert pm(capsys, "index", str(vault))[0] == 0
    db = puremind_home / "index.sqlite"
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM chunks").fetchone()
    put(vault, "edit.md", "# Edit\n\nnothing secret\n")
    assert pm(capsys, "index", str(vault))[0] == 0
    reader.execute("COMMIT")
    idle = reader  # still open, so the -wal file stays for inspection
    try:
        assert pm(capsys, "index", str(vault))[0] == 0
        for path in (db, db.with_name("index.sqlite-wal")):
            if path.exists():
                assert b"zqxreaderold" not in path.read_bytes(), path.name
    finally:
        idle.close()


def test_index_files_are_private_and_loose_ones_are_tightened(capsys, tmp_path, puremind_home):
    put(tmp_path, "vault/a.md", "# A\n\nalpha\n")
    assert pm(capsys, "index", str(tmp_path / "vault"))[0] == 0
    db = puremind_home / "index.sqlite"
    assert stat.S_IMODE(puremind_home.stat().st_mode) == 0o700
    for path in (db, db.with_name("index.sqlite.lock")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    os.chmod(puremind_home, 0o755)
    os.chmod(db, 0o644)
    assert pm(capsys, "search", "--lexical-only", "alpha")[0] == 0
    assert stat.S_IMODE(puremind_home.stat().st_mode) == 0o700
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


# -- interruption and concurrency ------------------------------------------------------------------------


def test_ctrl_c_during_a_long_index_exits_130_and_leaves_a_consistent_index_the_next_run_completes(tmp_path):
    vault, home = tmp_path / "vault", tmp_path / "home"
    many_notes(vault, 4000)
    db = home / "index.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "puremind", "index", str(vault)], env=subprocess_env(home),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        assert wait_for(lambda: indexed_count(db) > 0 or proc.poll() is not None), "no progress was committed"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode == 0:
        pytest.skip("the run finished before Ctrl-C arrived")
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    files, chunks = index_rows(db)
    assert 0 < len(files) < 4000
    for rel, (digest, _size, _mtime) in files.items():
        data = (vault / rel).read_bytes()
        assert digest == sha(data) and chunks[rel] == expected_chunks(data), rel
    assert_fts_consistent(db)
    done = subprocess.run([sys.executable, "-m", "puremind", "index", str(vault)], env=subprocess_env(home),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"{4000 - len(files)} added" in done.stdout and f"{len(files)} unchanged" in done.stdout
    fresh = tmp_path / "fresh"
    assert subprocess.run([sys.executable, "-m", "puremind", "index", str(vault)], env=subprocess_env(fresh),
                          capture_output=True).returncode == 0
    same_index(db, fresh / "index.sqlite")


def test_a_second_index_is_refused_and_search_answers_while_an_index_runs(capsys, tmp_path, monkeypatch):
    vault, home = tmp_path / "vault", tmp_path / "home"
    many_notes(vault, 3000)
    db = home / "index.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "puremind", "index", str(vault)], env=subprocess_env(home),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: indexed_count(db) > 0 or proc.poll() is not None)
        monkeypatch.setenv("PUREMIND_HOME", str(home))
        if proc.poll() is None:
            code, out, err = pm(capsys, "index", str(vault))
            still_running = proc.poll() is None
            if still_running:
                assert code == 2 and "error: another puremind index" in err, err
            code, out, err = pm(capsys, "search", "--lexical-only", "espresso grinder")
            assert code == 0 and "note" in out, err
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert indexed_count(db) == 3000


def test_search_whose_reader_goes_away_does_not_exit_1_as_if_nothing_was_found(capsys, tmp_path, puremind_home):
    vault = tmp_path / "vault"
    for i in range(60):
        put(vault, f"n{i}.md", f"# Note {i}\n\nshared word espresso number {i}\n")
    assert pm(capsys, "index", str(vault))[0] == 0
    proc = subprocess.Popen([sys.executable, "-m", "puremind", "search", "--lexical-only", "-n", "50", "espresso"],
                            env=subprocess_env(puremind_home), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # like `| head -0`: the reader is gone before the first result is written
    proc.wait(timeout=60)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.returncode == 0, f"exit {proc.returncode} means 'nothing found'; stderr: {err[-300:]}"
