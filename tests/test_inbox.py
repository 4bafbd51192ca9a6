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


def test_line_endings_are_kept_exactly_from_proposal_to_note(tmp_path, vault):
    inbox = Inbox(tmp_path / "home")
    text = "---\r\ncolour: red\r\n---\r\nWindows line\r\nold Mac line\rlast\u2028line\n"
    pid = inbox.propose("Endings", text).id
    assert inbox.get(pid).text == text and [p.text for p in inbox.pending()] == [text]
    note = inbox.approve(pid, vault)
    assert note.read_bytes().endswith("Windows line\r\nold Mac line\rlast\u2028line\n".encode())
    assert b"colour: red\r\n" in note.read_bytes()


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
if where.startswith("while writing"):
    # The first file approve writes is the record of where the note goes (in the inbox), the second the note.
    real_fsync, calls = os.fsync, []
    def fsync(fd):
        calls.append(fd)
        if len(calls) == (1 if where == "while writing the record" else 2):
            os.write(fd, b"half")
            die()
        return real_fsync(fd)
    box.os.fsync = fsync
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


@pytest.mark.parametrize("where", ["while writing the record", "while writing", "after linking the note",
                                   "before removing the proposal"])
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
    assert notes == ([] if where.startswith("while writing") else ["Killed.md"])  # no half-written note under a name
    note = inbox.approve(pid, vault)  # at once: the killed run's temporary file goes too, seconds old
    # The note says when it was approved, to the second: the killed run may have written it a second before this
    # test's own copy is made.
    undated = lambda text: re.sub(r'(?m)^approved: ".*"$', 'approved: ""', text)  # noqa: E731
    assert note == folder / "Killed.md"
    assert undated(note.read_text(encoding="utf-8")) == undated(approved_note(proposal))
    assert re.search(r'(?m)^approved: "\d{4}-\d\d-\d\dT[\d:]{8}Z"$', note.read_text(encoding="utf-8"))
    assert vault_files(vault) == before | {"inbox/Killed.md"} and inbox.pending() == []
    assert not [name for name in os.listdir(inbox.dir) if not name.endswith(".md") and name != ".lock"]



# -- the audit's findings (issue 14): each test failed before its fix --------------------------------------------


def _name_fits(name: str) -> bool:
    """A file name every common file system takes: at most 255 UTF-8 bytes (Linux, APFS) and 255 UTF-16 units in
    decomposed form (HFS+)."""
    import unicodedata

    return len(name.encode("utf-8")) <= 255 and len(unicodedata.normalize("NFD", name).encode("utf-16-le")) // 2 <= 255


@pytest.mark.parametrize("title", ["猫" * 200, "猫🐈" * 100, "한국어" * 70, "é" * 150 + "x", "e\u0301" * 120,
                                   "Ж" * 99 + "e\u0301\u0301"])
def test_a_long_non_latin_title_makes_a_name_that_fits_in_255_bytes_whole_characters_only(title):
    import unicodedata

    stem = safe_stem(title, fallback="proposal-ID")
    assert stem and _name_fits(f"{stem} 9999.md")
    nfc = unicodedata.normalize("NFC", title)
    assert nfc.startswith(stem)  # a prefix of whole characters, never a cut one
    rest = nfc[len(stem):]
    assert not rest or unicodedata.category(rest[0])[0] != "M"  # no accent cut off its letter


def test_the_cli_approves_a_200_character_cjk_title_and_a_long_name(capsys, vault, configured):
    one = configured.propose("猫" * 200, "cats\n").id
    two = configured.propose("Dogs", "dogs\n").id
    code, out, err = run(capsys, "inbox", "approve", one)
    assert code == 0, err
    (note,) = (vault / "inbox").iterdir()
    assert note.name.startswith("猫" * 10) and _name_fits(note.name) and note.read_text(encoding="utf-8").endswith("cats\n")
    code, out, err = run(capsys, "inbox", "approve", two, "--name", "犬" * 300)
    assert code == 0, err
    assert [p.name for p in (vault / "inbox").iterdir() if p.name.startswith("犬")] and configured.pending() == []


def test_a_name_with_nothing_usable_is_refused(capsys, vault, configured):
    pid = configured.propose("T", "text").id
    code, out, err = run(capsys, "inbox", "approve", pid, "--name", "?!/..")
    assert code == 2 and err.startswith("error:") and "name" in err and [p.id for p in configured.pending()] == [pid]


def test_an_os_error_while_approving_is_one_error_line_and_the_proposal_stays(capsys, vault, configured, monkeypatch):
    import errno

    pid = configured.propose("Full disk", "text").id

    def no_space(src, dst, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(os, "link", no_space)
    code, out, err = run(capsys, "inbox", "approve", pid)
    assert code == 2 and err.startswith("error:") and "No space left on device" in err and "Traceback" not in err
    assert "still pending" in err and len(err.strip().splitlines()) <= 2
    assert [p.id for p in configured.pending()] == [pid]
    assert [p.name for p in (vault / "inbox").iterdir()] == []  # no temporary file left behind


_INJECTIONS = [
    '"title": evil', "'source': forged", '"ti\\x74le": evil', '"ti\\u0074le": evil', "? title\n: evil",
    "colour: &k title\n*k : evil", "<<: {title: evil}", "!!str title: evil", "Title: evil", "title   : evil",
    "TAGS:\n- evil", "tags:\n- evil\n-   evil", "colour: red\rtitle: evil", "colour: red\u2028title: evil",
    "colour: red\x85title: evil", 'colour: "red\ntitle: evil"', "colour: [red,\ntitle: evil]", "{title: evil}",
    "inbox_id: forged", "approved: 2020-01-01", "proposed_by: evil", "\ufefftitle: evil", "ｔｉｔｌｅ: evil",
    "? |\n  title\n: evil", "colour: red\n\ttitle: evil",
]


@pytest.mark.parametrize("injected", _INJECTIONS)
def test_frontmatter_in_the_proposed_text_cannot_set_pureMinds_keys(tmp_path, injected):
    yaml = pytest.importorskip("yaml")
    inbox = Inbox(tmp_path / "home")
    text = f"---\nkept: yes\n{injected}\nalso_kept: [a, b]\n---\nBody.\n"
    proposal = inbox.get(inbox.propose("Real title", text, tags=["real"], client="agent 1").id)
    written = approved_note(proposal)
    assert written.startswith("---\n") and written.endswith("\n---\nBody.\n")
    front = written[4:written.index("\n---\nBody.")]
    values = yaml.safe_load(front)
    own = {"title": "Real title", "tags": ["real"], "source": "pureMind inbox", "inbox_id": proposal.id,
           "proposed_by": "agent 1", "proposed": proposal.proposed}
    assert {k: values[k] for k in own} == own and isinstance(values["approved"], str)
    assert values["kept"] is True and values["also_kept"] == ["a", "b"]
    assert "evil" not in front and "forged" not in front


def test_a_refused_folder_leaves_nothing_behind_outside_or_in_a_hidden_folder(tmp_path, vault):
    outside = tmp_path / "outside"
    outside.mkdir()
    (vault / "link").symlink_to(outside)
    (vault / ".obsidian").mkdir()
    (vault / "tohidden").symlink_to(vault / ".obsidian")
    (vault / "dangling").symlink_to(tmp_path / "nowhere")
    inbox = Inbox(tmp_path / "home")
    pid = inbox.propose("T", "text").id
    before = sorted(str(p) for p in vault.rglob("*"))
    for folder, match in [("link/newdir", "leads out"), ("link/a/b", "leads out"), ("tohidden/x", "hidden"),
                          ("dangling/x", "leads out"), ("dangling", "leads out")]:
        with pytest.raises(InboxError, match=match):
            inbox.approve(pid, vault, folder=folder)
    assert list(outside.iterdir()) == [] and list((vault / ".obsidian").iterdir()) == []
    assert not (tmp_path / "nowhere").exists() and sorted(str(p) for p in vault.rglob("*")) == before
    assert [p.id for p in inbox.pending()] == [pid]


def test_a_folder_through_a_symlink_inside_the_vault_is_written_where_the_index_finds_it(tmp_path, vault):
    (vault / "work").mkdir()
    (vault / "w").symlink_to(vault / "work")
    inbox = Inbox(tmp_path / "home")
    note = inbox.approve(inbox.propose("T", "text").id, vault, folder="w/new")
    assert note == vault / "work" / "new" / "T.md" and note.is_file()


def _show(capsys, pid: str) -> tuple[str, str]:
    code, out, err = run(capsys, "inbox", "show", pid)
    assert code == 0, err
    head, sep, note = out.partition("-" * 40 + "\n")
    assert sep
    return head, note


def test_show_prints_the_note_exactly_as_approve_writes_it(capsys, vault, configured):
    text = "---\n'title': forged\ncolour: red\n---\nUse the \x1b[31mred\x1b[0m kettle.\n"
    pid = configured.propose("Kettle", text, tags=["tea"], reason="asked twice", client="codex 0.9").id
    (vault / "inbox").mkdir()
    (vault / "inbox" / "Kettle.md").write_text("mine\n", encoding="utf-8")
    head, shown = _show(capsys, pid)
    assert "inbox/Kettle 2.md" in head and "asked twice" in head and pid in head
    assert "forged" not in shown and "\x1b" not in shown and "\\x1b[31mred" in shown
    code, out, err = run(capsys, "inbox", "approve", pid)
    assert code == 0 and "inbox/Kettle 2.md" in out
    written = (vault / "inbox" / "Kettle 2.md").read_text(encoding="utf-8")
    undated = lambda text: re.sub(r'(?m)^approved: ".*"$', 'approved: ""', text)  # noqa: E731
    assert undated(shown) == undated(written.replace("\x1b", "\\x1b"))


_KILL_AFTER_LINK = """
import os, signal, sys
from pathlib import Path
from puremind import inbox as box

real_link = os.link
box.os.link = lambda src, dst: (real_link(src, dst), os.kill(os.getpid(), signal.SIGKILL))
box.Inbox(Path(sys.argv[1])).approve(sys.argv[2], Path(sys.argv[3]))
"""


def _killed_after_linking(home: Path, pid: str, vault: Path) -> None:
    import signal
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _KILL_AFTER_LINK, str(home), pid, str(vault)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_an_approve_killed_then_run_again_elsewhere_makes_no_second_note(capsys, vault, configured, puremind_home):
    pid = configured.propose("Killed", "the text\n").id
    _killed_after_linking(puremind_home, pid, vault)
    assert (vault / "inbox" / "Killed.md").is_file() and [p.id for p in configured.pending()] == [pid]
    head, _ = _show(capsys, pid)
    assert "inbox/Killed.md" in head and "already" in head
    code, out, err = run(capsys, "inbox", "approve", pid, "--to", "other", "--name", "Other name")
    assert code == 0, err
    assert "inbox/Killed.md" in out and "already" in out
    assert vault_files(vault) - {"coffee.md"} >= {"inbox/Killed.md"} and not (vault / "other").exists()
    assert not [p for p in vault.rglob("*") if p.name.startswith(".puremind-approve-")]
    assert configured.pending() == []


def test_rejecting_a_proposal_a_killed_approve_already_wrote_keeps_the_note_and_says_where(capsys, vault, configured,
                                                                                          puremind_home):
    pid = configured.propose("Half done", "the text\n").id
    _killed_after_linking(puremind_home, pid, vault)
    code, out, err = run(capsys, "inbox", "reject", pid)
    assert code == 0, err
    assert "inbox/Half done.md" in out + err and "kept" in out + err
    assert (vault / "inbox" / "Half done.md").is_file() and configured.pending() == []


def test_a_killed_approves_temporary_file_is_removed_by_the_next_command_unless_an_approve_runs(
        capsys, vault, configured, puremind_home):
    pid = configured.propose("Left over", "the text\n").id
    _killed_after_linking(puremind_home, pid, vault)
    temps = lambda: [p.name for p in (vault / "inbox").iterdir() if p.name.startswith(".puremind-approve-")]  # noqa: E731
    assert temps()  # the killed run left its temporary file, seconds old
    with configured._locked():  # an approve is running: its temporary files are not touched
        assert run(capsys, "inbox")[0] == 0
        assert temps()
    assert run(capsys, "inbox")[0] == 0
    assert temps() == [] and (vault / "inbox" / "Left over.md").is_file()


def test_two_proposals_with_one_title_approved_through_the_cli_get_two_names(capsys, vault, configured):
    a = configured.propose("Same title", "first\n").id
    b = configured.propose("Same title", "second\n").id
    code, out, err = run(capsys, "inbox", "approve", a)
    assert code == 0 and "inbox/Same title.md" in out
    code, out, err = run(capsys, "inbox", "approve", b, "--to", "inbox")
    assert code == 0 and "inbox/Same title 2.md" in out
    assert (vault / "inbox" / "Same title.md").read_text(encoding="utf-8").endswith("first\n")
    assert (vault / "inbox" / "Same title 2.md").read_text(encoding="utf-8").endswith("second\n")


def test_a_custom_inbox_folder_from_the_config(capsys, vault, configured, puremind_home):
    config = puremind_home / "config.toml"
    text = config.read_text(encoding="utf-8")
    assert '# folder = "inbox"' in text
    config.write_text(text.replace('# folder = "inbox"', 'folder = "agents/proposed"'), encoding="utf-8")
    pid = configured.propose("Configured", "text\n").id
    code, out, err = run(capsys, "inbox", "approve", pid)
    assert code == 0 and "agents/proposed/Configured.md" in out and (vault / "agents/proposed/Configured.md").is_file()
    assert not (vault / "inbox").exists()


def _propose_while_approving(home: str, started, n: int) -> None:
    inbox = Inbox(Path(home))
    for i in range(n):
        inbox.propose(f"during {i}", f"proposed during the approves {i}")
        started.set()


def test_approving_while_another_process_proposes_keeps_both(capsys, vault, configured, puremind_home):
    first = [configured.propose(f"before {i}", f"text {i}").id for i in range(8)]
    ctx = multiprocessing.get_context("spawn")
    started = ctx.Event()
    proc = ctx.Process(target=_propose_while_approving, args=(str(puremind_home), started, 40))
    proc.start()
    try:
        assert started.wait(60), "the proposing process did not start"
        code, out, err = run(capsys, "inbox", "approve", *first)
        assert code == 0, err
    finally:
        proc.join(60)
    assert proc.exitcode == 0
    assert {p.title for p in configured.pending()} == {f"during {i}" for i in range(40)}
    assert {p.name for p in (vault / "inbox").iterdir()} == {f"before {i}.md" for i in range(8)}
