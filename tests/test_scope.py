"""A scope per agent (README, What agents may read): `serve --scope FOLDER` serves only the notes under those
folders; the store leaves every other note out of each list before ranking (so an agent still gets `limit`
results), `puremind_get` refuses them like a missing note, `puremind_recent` omits them, a scoped agent's
proposal is approved only into its scope, and `connect --scope` carries the folders into the printed command."""

from __future__ import annotations

import json
import os
import sqlite3
import unicodedata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import FakeEmbedder, mcp_calls, write
from puremind import cli
from puremind.cli import app
from puremind.config import load_settings
from puremind.errors import ConfigError
from puremind.inbox import Inbox, InboxError, parse_proposal, render_proposal
from puremind.indexer import index_vault
from puremind.models.lazy import Models
from puremind.retrieval.pipeline import RetrievalParams, Searcher
from puremind.services import agent_scope, get_note, recent_notes, run_index, scope_folders
from puremind.store import Store
from puremind.store.schema import MIGRATIONS, migrate

REPO = Path(__file__).resolve().parent.parent
WORD = "quetzalbanjo"  # in every note; the out-of-scope ones say it most and in their titles


def _vault(root: Path) -> Path:
    vault = root / "vault"
    vault.mkdir()
    write(vault, "Home/finances.md", f"# {WORD} budget\n\n{WORD} {WORD} {WORD}: the mortgage rate and my salary.\n")
    write(vault, "Home/Ärzte/visit.md", f"# {WORD} visit\n\n{WORD} {WORD} the cardiologist said rest.\n")
    write(vault, "top.md", f"# {WORD} top\n\n{WORD} {WORD} a note at the top of the vault, the salary too.\n")
    for n in range(6):
        write(vault, f"Work/proj{n}.md", f"# Project {n}\n\nThe deploy checklist number {n}, {WORD} once.\n")
    # a link inside the scope to a note outside it: its text is the outside note's
    os.symlink("../Home/finances.md", vault / "Work" / "link.md")
    return vault


OUTSIDE = {"Home/finances.md", "Home/Ärzte/visit.md", "top.md", "Work/link.md"}
INSIDE = {f"Work/proj{n}.md" for n in range(6)}


def _env(root: Path, vault: Path, **extra: str) -> dict[str, str]:
    return {"PUREMIND_HOME": str(root / "home"), "PUREMIND_EMBED_MODEL": "none", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(REPO), "PUREMIND_VAULT": str(vault), "PUREMIND_DB": str(root / "home" / "index.sqlite"),
            **extra}


@pytest.fixture
def world(tmp_path: Path) -> dict:
    vault = _vault(tmp_path)
    env = _env(tmp_path, vault)
    settings = load_settings(env=env)
    run_index(settings)
    return {"vault": vault, "env": env, "settings": settings, "root": tmp_path}


def _scoped(settings, *folders: str):
    return load_settings({"scope": folders}, env=_env(settings.home.parent, settings.vault))


# -- the scope setting ----------------------------------------------------------------------------------------------


def test_scope_folders_are_vault_folders_matched_in_any_case_and_refused_outside_it(world):
    settings, vault = world["settings"], world["vault"]
    assert agent_scope(_scoped(settings, "Work")) == ("work/",)
    assert agent_scope(_scoped(settings, "./work/", str(vault / "Home"))) == ("work/", "home/")
    assert scope_folders(_scoped(settings, str(vault / "Home" / "Ärzte"))) == ("Home/Ärzte",)
    assert agent_scope(_scoped(settings, unicodedata.normalize("NFD", "home/ärzte"))) == ("home/ärzte/",)
    assert agent_scope(_scoped(settings, str(vault))) == ()  # the vault itself: everything
    for bad, says in (("Wrok", "is not a folder of the vault"), ("Work/../Home", "climbs out"),
                      (str(world["root"]), "lies outside the vault"), ("top.md", "is not a folder")):
        with pytest.raises(ConfigError, match=says):
            agent_scope(_scoped(settings, bad))


# -- the store and the searcher -------------------------------------------------------------------------------------


def test_every_list_of_a_scoped_store_leaves_other_folders_out_and_a_link_out_of_the_scope_too(tmp_path):
    vault = _vault(tmp_path)
    db = tmp_path / "index.sqlite"
    store = Store.open(db)
    try:
        index_vault(store, vault, embedder=FakeEmbedder())
        all_ids, _ = store.vectors()
        outside_files = {t.file_id for t in store.search_titles(f'"{WORD}"', 50) if t.path in OUTSIDE}
    finally:
        store.close()
    agent = Store.open(db, create=False, scope=("work/",))
    user = Store.open(db, create=False)
    try:
        match = f'"{WORD}"'
        for s, scoped in ((agent, True), (user, False)):
            paths = {h.path for h in s.search_lexical(match, 50)}
            assert bool(paths & OUTSIDE) != scoped and paths & INSIDE
            assert bool({t.path for t in s.search_titles(match, 50)} & OUTSIDE) != scoped
            assert bool({t.path for t in s.notes_titled([f"{WORD} budget"])} & OUTSIDE) != scoped
            ids, matrix = s.vectors()
            shown = {h.path for h in s.chunks_by_ids([int(i) for i in ids])}
            assert bool(shown & OUTSIDE) != scoped and matrix.shape[0] == len(ids)
            assert bool(set(s.note_scores(sorted(OUTSIDE), match))) != scoped
            assert bool({p.path for p in s.recent_files(0, 50)} & OUTSIDE) != scoped
            assert bool(s.best_chunk_of(sorted(outside_files))) != scoped
        assert {h.path for h in agent.chunks_by_ids([int(i) for i in all_ids])} == INSIDE
        assert len(agent.chunk_files([int(i) for i in all_ids])) == len(agent.vectors()[0])
    finally:
        agent.close()
        user.close()
    with pytest.raises(ValueError):
        Store.open(db, create=False, scope=("Work/",))  # keys only, as services.agent_scope makes them


def test_a_scoped_search_with_vectors_still_gets_limit_results_from_the_scope(tmp_path):
    vault = _vault(tmp_path)
    db = tmp_path / "index.sqlite"
    embedder = FakeEmbedder()
    store = Store.open(db)
    try:
        index_vault(store, vault, embedder=embedder)
    finally:
        store.close()
    searcher = Searcher(db, Models(embedder, None), RetrievalParams(rerank=False), agent=True, scope=("work/",))
    try:
        for query in (WORD, "mortgage rate salary", "cardiologist", f"{WORD} top"):
            for lexical_only in (False, True):
                outcome = searcher.search(query, 5, lexical_only=lexical_only)
                assert {h.path for h in outcome.hits} <= INSIDE, (query, lexical_only)
        assert len(searcher.search(WORD, 5).hits) == 5
    finally:
        searcher.close()


def test_a_link_in_a_shared_folder_to_a_private_note_is_private(tmp_path):
    vault = _vault(tmp_path)
    db = tmp_path / "index.sqlite"
    store = Store.open(db)
    try:
        index_vault(store, vault, embedder=FakeEmbedder(), private_folders=("Home/",))
        assert store.is_private("Work/link.md") and not store.is_private("Work/proj0.md")
        os.unlink(vault / "Work" / "link.md")
        os.symlink("proj0.md", vault / "Work" / "link.md")  # retargeted to a shared note with other text
        index_vault(store, vault, embedder=FakeEmbedder(), private_folders=("Home/",))
        assert not store.is_private("Work/link.md")
    finally:
        store.close()


def test_an_index_of_the_previous_schema_gets_its_path_keys(tmp_path):
    db = tmp_path / "old.sqlite"
    conn = sqlite3.connect(db, isolation_level=None)
    migrate(conn, MIGRATIONS[:7])
    conn.execute("INSERT INTO files (path, sha256, size, mtime_ns, indexed_at) VALUES ('Home/Ärzte/a.md', 'x', 1, 1, 1)")
    conn.close()
    Store.open(db).close()
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT path_key, target FROM files").fetchall() == [("home/ärzte/a.md", "")]
    conn.close()


# -- get, recent, the MCP server ------------------------------------------------------------------------------------


def test_get_and_recent_of_a_scoped_agent_refuse_and_omit_what_lies_outside(world):
    settings = _scoped(world["settings"], "Work")
    with pytest.raises(Exception) as caught:
        get_note(settings, "nothing.md", agent=True)
    missing = (type(caught.value), caught.value.message.replace("'nothing.md'", "PATH"))
    for path in ("Home/finances.md", "home/finances.md", "Work/../Home/finances.md", "Work/link.md", "top.md",
                 unicodedata.normalize("NFD", "Home/Ärzte/visit.md")):
        with pytest.raises(Exception) as caught:
            get_note(settings, path, agent=True)
        assert (type(caught.value), caught.value.message.replace(repr(path), "PATH")) == missing, path
    assert "deploy checklist" in get_note(settings, "Work/proj1.md", agent=True).text
    assert {n.path for n in recent_notes(settings, 7, 50, agent=True).notes} == INSIDE
    assert "mortgage" in get_note(settings, "Work/link.md").text  # the user's own get reads it



def test_through_mcp_a_scoped_server_serves_its_folders_only(world):
    queries = [WORD, f"{WORD} budget", "mortgage rate", "cardiologist said rest", "salary", f"{WORD} top"]
    gets = ["Home/finances.md", "HOME/finances.md", "Work/../Home/finances.md", "Work/link.md", "top.md",
            unicodedata.normalize("NFD", "Home/Ärzte/visit.md"), "../vault/top.md", "nothing.md"]
    results = mcp_calls(world["env"], [("puremind_search", {"query": q, "limit": 5}) for q in queries]
                    + [("puremind_get", {"path": p}) for p in gets]
                    + [("puremind_get", {"path": "Work/proj2.md"})]
                    + [("puremind_recent", {"days": 30, "limit": 100})], "--scope", "Work")
    searches = results[: len(queries)]
    got, inside, recent = results[len(queries): -2], results[-2], results[-1]
    for query, result in zip(queries, searches):
        text = "\n".join(b.text for b in result.content if b.type == "text")
        assert {p["path"] for p in result.structured_content["results"]} <= INSIDE, query
        assert "and my salary" not in text and "the cardiologist" not in text and "top of the vault" not in text, query
    assert len(searches[0].structured_content["results"]) == 5
    texts = ["\n".join(b.text for b in r.content if b.type == "text") for r in got]
    assert all(r.is_error for r in got)
    expected = texts[-1].replace(repr("nothing.md"), "PATH")
    for path, text in zip(gets, texts):
        assert text.replace(repr(path), "PATH") == expected, path
    assert not inside.is_error and "deploy checklist number 2" in inside.structured_content["text"]
    assert {n["path"] for n in recent.structured_content["notes"]} == INSIDE


def test_a_server_with_a_scope_that_is_no_vault_folder_answers_every_call_with_the_error(world):
    (result,) = mcp_calls(world["env"], [("puremind_search", {"query": WORD})], "--scope", "Wrok")
    text = "\n".join(b.text for b in result.content if b.type == "text")
    assert result.is_error and "the scope folder 'Wrok' is not a folder of the vault" in text


# -- proposals, connect, doctor ------------------------------------------------------------------------------------


def test_a_scoped_agents_proposal_is_approved_only_into_its_scope(world, tmp_path):
    settings = world["settings"]
    box = Inbox(settings.home)
    pid = box.propose("Deploy notes", "Roll back with the script.", client="agent", scope=("Work",)).id
    proposal = box.get(pid)
    assert proposal.scope == ("Work",) and parse_proposal(render_proposal(proposal)) == proposal
    assert proposal.folder_for("inbox") == "Work" and proposal.folder_for("work/inbox") == "work/inbox"
    with pytest.raises(InboxError, match="scoped to Work; 'inbox' lies outside it"):
        box.approve_note(pid, world["vault"], "inbox")
    with pytest.raises(InboxError):
        box.approve_note(pid, world["vault"], "Work/../Home")
    out = CliRunner().invoke(app, ["inbox", "approve", pid], env=world["env"])
    assert out.exit_code == 0, out.output
    assert (world["vault"] / "Work" / "Deploy notes.md").is_file() or list((world["vault"] / "Work").glob("Deploy*"))
    # a proposal of an unscoped agent reads as before (no scope line: files of earlier versions parse the same)
    plain = box.get(box.propose("Other", "text", client="agent").id)
    assert "scope" not in render_proposal(plain) and plain.folder_for("inbox") == "inbox"


@pytest.mark.parametrize("agent", ["claude-code", "codex", "cursor"])
def test_connect_carries_the_scope_into_the_printed_command(world, agent, capsys, monkeypatch):
    for key, value in world["env"].items():
        monkeypatch.setenv(key, value)
    assert cli.run(["connect", agent, "--scope", "Work", "--scope", "Home/Ärzte"]) == 0
    out = capsys.readouterr().out
    if agent == "cursor":
        args = json.loads(out)["mcpServers"]["puremind"]["args"]
        assert args[args.index("serve"):] == ["serve", "--scope", "Work", "--scope", "Home/Ärzte"]
    else:
        assert "serve --scope Work --scope 'Home/Ärzte'" in out  # shell-quoted: a line to paste


def test_connect_refuses_a_scope_that_is_no_folder_of_the_vault(world, capsys, monkeypatch):
    for key, value in world["env"].items():
        monkeypatch.setenv(key, value)
    assert cli.run(["connect", "cursor", "--scope", "Wrok"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: the scope folder 'Wrok' is not a folder of the vault")


def test_doctor_shows_private_notes_the_scope_of_each_registered_agent_and_redaction(world, tmp_path, monkeypatch):
    from puremind.doctor import run_doctor

    vault = world["vault"]
    write(vault, "diary.md", "---\nprivate: true\n---\n# Diary\n")
    run_index(world["settings"])
    home = tmp_path / "user"
    home.mkdir()
    (home / ".cursor").mkdir()
    (home / ".cursor" / "mcp.json").write_text(json.dumps({"mcpServers": {"puremind": {
        "command": "/usr/bin/puremind", "args": ["serve", "--scope", "Work"]}}}))
    monkeypatch.setenv("HOME", str(home))
    for key, value in world["env"].items():
        monkeypatch.setenv(key, value)
    checks = {(c.section, c.name): c for c in run_doctor(cwd=tmp_path).checks}
    assert "reads Work" in checks[("agents", "cursor")].message
    assert checks[("agents", "private notes")].message.startswith("1 of 11 notes are private")
    assert checks[("agents", "redaction")].status == "ok"
    (world["settings"].home / "config.toml").write_text("[agents]\nredact = false\n")
    checks = {(c.section, c.name): c for c in run_doctor(cwd=tmp_path).checks}
    assert checks[("agents", "redaction")].status == "warn"
