"""The inbox (issue 14): proposals live outside the vault; only approve writes a note, a new file, inside it."""

from __future__ import annotations

import multiprocessing
import os
import re
import stat
from pathlib import Path

import pytest

from puremind.inbox import MAX_TEXT_CHARS, Inbox, InboxError, approved_note, parse_proposal, safe_stem


def vault_files(vault: Path) -> set[str]:
    return {str(p.relative_to(vault)) for p in vault.rglob("*") if p.is_file()}


def test_a_proposal_is_stored_privately_outside_the_vault_and_read_back_as_given(tmp_path, vault):
    before = vault_files(vault)
    inbox = Inbox(tmp_path / "home")
    text = "# Grinder\n\n---\ntitle: not a header\n---\nline with \x1b[31m escape and trailing spaces   \n"
    done = inbox.propose("Grinder\nsettings", text, tags=["coffee", "coffee", "a\nb"], reason="seen twice",
                         client="claude-code 1.0")
    assert not done.merged and vault_files(vault) == before
    assert stat.S_IMODE(inbox.dir.stat().st_mode) == 0o700 and stat.S_IMODE(done.path.stat().st_mode) == 0o600
    back = inbox.get(done.id)
    assert back.text == text and back.title == "Grinder settings" and back.tags == ("coffee", "a b")
    assert back.client == "claude-code 1.0" and back.reason == "seen twice"
    assert [p.id for p in inbox.pending()] == [done.id]


def test_identical_proposals_are_merged_and_limits_are_errors(tmp_path):
    inbox = Inbox(tmp_path / "home", max_pending=2)
    first = inbox.propose("A", "text a")
    assert inbox.propose("A", "text a").id == first.id and inbox.propose("A", "text a").merged
    inbox.propose("B", "text b")
    with pytest.raises(InboxError, match="inbox is full"):
        inbox.propose("C", "text c")
    for title, text, match in [("x", "y" * (MAX_TEXT_CHARS + 1), "at most"), ("x" * 5000, "y", "at most"),
                               ("", "y", "title is empty"), ("x", "  \n", "text is empty"),
                               ("x", "a\x00b", "NUL")]:
        with pytest.raises(InboxError, match=match):
            Inbox(tmp_path / "other").propose(title, text)


@pytest.mark.parametrize(("title", "expected"), [
    ("../x", "x"), ("/etc/passwd", "etc passwd"), ("CON", "_CON"), ("nul.txt", "_nul.txt"), ("a\x00b", "a b"),
    ("?!...", "proposal-ID"), (".hidden", "hidden"), ("Notes.md", "Notes"), ("x" * 5000, "x" * 100),
    ("Café au lait", "Café au lait"),
])
def test_a_hostile_title_cannot_choose_a_path(title, expected):
    assert safe_stem(title, fallback="proposal-ID") == expected


def test_approve_writes_a_new_note_with_its_origin_and_never_overwrites(tmp_path, vault):
    inbox = Inbox(tmp_path / "home")
    (vault / "inbox").mkdir()
    (vault / "inbox" / "Kettle.md").write_text("mine\n", encoding="utf-8")
    one = inbox.propose("Kettle", "---\ntitle: evil\nsource: forged\ncolour: red\ntags:\n  - x\n---\nBoil at 96 C.\n",
                        tags=["tea"], client="codex 0.9")
    path = inbox.approve(one.id, vault)
    assert path == vault / "inbox" / "Kettle 2.md"
    assert (vault / "inbox" / "Kettle.md").read_text() == "mine\n"
    written = path.read_text(encoding="utf-8")
    head = written.split("\n---\n", 1)[0]
    assert 'title: "Kettle"' in head and 'source: "pureMind inbox"' in head and "colour: red" in head
    assert "evil" not in written and "forged" not in written and "  - x" not in written
    assert written.endswith("Boil at 96 C.\n") and inbox.pending() == []
    with pytest.raises(InboxError, match="no pending proposal"):
        inbox.approve(one.id, vault)


@pytest.mark.parametrize("folder", ["../out", "/tmp", ".obsidian", "a/node_modules", "a/../../b"])
def test_approve_refuses_folders_outside_or_hidden(tmp_path, vault, folder):
    inbox = Inbox(tmp_path / "home")
    pid = inbox.propose("T", "text").id
    with pytest.raises(InboxError):
        inbox.approve(pid, vault, folder=folder)
    assert [p.id for p in inbox.pending()] == [pid]  # nothing lost


def test_approve_refuses_a_symlinked_folder_that_leads_out(tmp_path, vault):
    outside = tmp_path / "outside"
    outside.mkdir()
    (vault / "link").symlink_to(outside)
    inbox = Inbox(tmp_path / "home")
    pid = inbox.propose("T", "text").id
    with pytest.raises(InboxError, match="leads out"):
        inbox.approve(pid, vault, folder="link")
    assert list(outside.iterdir()) == []


def test_an_approve_killed_after_writing_the_note_is_finished_without_a_duplicate(tmp_path, vault):
    inbox = Inbox(tmp_path / "home")
    proposal = inbox.get(inbox.propose("Once", "only once").id)
    folder = vault / "inbox"
    folder.mkdir()
    (folder / "Once.md").write_text(approved_note(proposal), encoding="utf-8")  # what the killed run wrote
    assert inbox.approve(proposal.id, vault) == folder / "Once.md"
    assert sorted(p.name for p in folder.iterdir()) == ["Once.md"] and inbox.pending() == []


def test_reject_and_edit(tmp_path):
    inbox = Inbox(tmp_path / "home")
    a, b = inbox.propose("A", "a").id, inbox.propose("B", "b").id
    assert inbox.replace_text(b, "b, edited").text == "b, edited"
    assert inbox.reject(a).title == "A"
    assert [(p.id, p.text) for p in inbox.pending()] == [(b, "b, edited")]


def test_a_file_pureMind_did_not_write_is_not_a_proposal(tmp_path):
    with pytest.raises(InboxError):
        parse_proposal("---\ntitle: x\n---\ntext\n")


def _propose_many(home: str, worker: int, n: int) -> None:
    inbox = Inbox(Path(home))
    for i in range(n):
        inbox.propose(f"from {worker} #{i}", f"text {worker} {i}")


def test_proposals_from_overlapping_processes_are_all_kept(tmp_path):
    home = tmp_path / "home"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_propose_many, args=(str(home), w, 15)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    titles = {p.title for p in Inbox(home).pending()}
    assert titles == {f"from {w} #{i}" for w in range(4) for i in range(15)}
    assert not [name for name in os.listdir(home / "inbox") if name.endswith(".tmp")]


# -- the command line ------------------------------------------------------------------------------------------

from puremind import cli  # noqa: E402


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def configured(capsys, vault, puremind_home):
    assert run(capsys, "init", str(vault))[0] == 0
    assert run(capsys, "index")[0] == 0
    return Inbox(puremind_home)


def test_the_cli_lists_shows_approves_and_the_note_is_found_after_index(capsys, vault, configured):
    pid = configured.propose("Water \x1b[2J filter", "Change the \x1b[31mfilter\x1b[0m cartridge every 60 days, "
                             "zebrafinch.\n", client="claude-code 2.1").id
    code, out, err = run(capsys, "search", "--lexical-only", "zebrafinch")
    assert code == 1, "a pending proposal is not a note"
    code, out, err = run(capsys, "inbox")
    assert code == 0 and pid in out and "claude-code 2.1" in out and "Water [2J filter" in out and "\x1b" not in out
    code, out, err = run(capsys, "inbox", "show", pid)
    assert code == 0 and "\\x1b[31mfilter" in out and "\x1b" not in out
    code, out, err = run(capsys, "inbox", "approve", pid, "--to", "notes/agents", "--name", "Water filter")
    assert code == 0 and "notes/agents/Water filter.md" in out
    assert "zebrafinch" in (vault / "notes" / "agents" / "Water filter.md").read_text(encoding="utf-8")
    assert run(capsys, "index")[0] == 0
    code, out, err = run(capsys, "search", "--lexical-only", "zebrafinch")
    assert code == 0 and "notes/agents/Water filter.md" in out
    assert run(capsys, "inbox")[1].startswith("the inbox is empty")


def test_the_cli_refuses_what_it_cannot_do_with_one_error_line(capsys, vault, configured):
    before = vault_files(vault)
    pid = configured.propose("T", "text").id
    for args, match in [(("inbox", "approve"), "name the proposals"), (("inbox", "show", "nope"), "no pending proposal"),
                        (("inbox", "approve", pid, "--to", "../x"), "not one pureMind indexes"),
                        (("inbox", "reject", pid, "--all"), "not both")]:
        code, out, err = run(capsys, *args)
        assert code == 2 and err.startswith("error:") and match in err and "Traceback" not in err, args
    assert vault_files(vault) == before and [p.id for p in configured.pending()] == [pid]


def test_reject_all_and_approve_all(capsys, vault, configured):
    configured.propose("One", "one")
    configured.propose("Two", "two")
    code, out, err = run(capsys, "inbox", "approve", "--all")
    assert code == 0 and (vault / "inbox" / "One.md").exists() and (vault / "inbox" / "Two.md").exists()
    configured.propose("Three", "three")
    code, out, err = run(capsys, "inbox", "reject", "--all")
    assert code == 0 and "rejected" in out and configured.pending() == []
    assert not (vault / "inbox" / "Three.md").exists()


def test_edit_opens_the_editor_and_keeps_what_was_saved(capsys, configured, monkeypatch):
    pid = configured.propose("Draft", "first line\n").id
    monkeypatch.setenv("EDITOR", "sh -c 'printf \"added by hand\\n\" >> \"$0\"'")
    monkeypatch.delenv("VISUAL", raising=False)
    code, out, err = run(capsys, "inbox", "edit", pid)
    assert code == 0 and "text updated" in out
    assert configured.get(pid).text == "first line\nadded by hand\n"
    monkeypatch.setenv("EDITOR", "false")
    code, out, err = run(capsys, "inbox", "edit", pid)
    assert code == 2 and "unchanged" in err and configured.get(pid).text == "first line\nadded by hand\n"


def test_pending_lists_newest_first_even_within_one_second(tmp_path):
    inbox = Inbox(tmp_path / "home")
    ids = [inbox.propose(f"note {i}", f"text {i}").id for i in range(5)]
    assert [p.title for p in inbox.pending()] == [f"note {i}" for i in reversed(range(5))]
    assert set(ids) == {p.id for p in inbox.pending()}


_KILLED_APPROVE = """
import os, signal, sys
from pathlib import Path
from puremind import inbox as box

where = sys.argv[3]
def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)
if where == "while writing":
    real_fsync = os.fsync
    box.os.fsync = lambda fd: (os.write(fd, b"half"), die())
elif where == "after linking the note":
    real_link = os.link
    box.os.link = lambda src, dst: (real_link(src, dst), die())
elif where == "before removing the proposal":
    real_unlink = Path.unlink
    def unlink(self, missing_ok=False):
        if self.parent.name == "inbox" and self.suffix == ".md":
            die()
        return real_unlink(self, missing_ok=missing_ok)
    Path.unlink = unlink
box.Inbox(Path(sys.argv[1])).approve(sys.argv[2], Path(sys.argv[4]))
"""


@pytest.mark.parametrize("where", ["while writing", "after linking the note", "before removing the proposal"])
def test_an_approve_killed_with_sigkill_loses_nothing_and_the_next_one_finishes_it(tmp_path, vault, where):
    import signal
    import subprocess
    import sys

    home = tmp_path / "home"
    inbox = Inbox(home)
    proposal = inbox.get(inbox.propose("Killed", "the text\n" * 200).id)
    pid = proposal.id
    before = vault_files(vault)
    proc = subprocess.run([sys.executable, "-c", _KILLED_APPROVE, str(home), pid, where, str(vault)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert [p.id for p in inbox.pending()] == [pid]  # the proposal is not lost
    folder = vault / "inbox"
    notes = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    assert notes == ([] if where == "while writing" else ["Killed.md"])  # no half-written note under a name
    for tmp in folder.glob(".puremind-approve-*.tmp"):  # what the killed run left, an hour later:
        os.utime(tmp, (tmp.stat().st_atime - 3600, tmp.stat().st_mtime - 3600))
    note = inbox.approve(pid, vault)
    # The note says when it was approved, to the second: the killed run may have written it a second before this
    # test's own copy is made.
    undated = lambda text: re.sub(r'(?m)^approved: ".*"$', 'approved: ""', text)  # noqa: E731
    assert note == folder / "Killed.md"
    assert undated(note.read_text(encoding="utf-8")) == undated(approved_note(proposal))
    assert re.search(r'(?m)^approved: "\d{4}-\d\d-\d\dT[\d:]{8}Z"$', note.read_text(encoding="utf-8"))
    assert vault_files(vault) == before | {"inbox/Killed.md"} and inbox.pending() == []

