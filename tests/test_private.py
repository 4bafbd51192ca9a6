"""Private notes (README, Private notes): frontmatter `private: true` or a folder of `[agents] private` keeps a note
from agents. It stays indexed and the terminal's search finds it, marked; the MCP tools never return it, and the
store leaves it out of every list before ranking, so an agent still gets `limit` results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import FakeEmbedder, mcp_calls, write
from puremind.cli import app
from puremind.config import ConfigError, load_settings, read_config_file
from puremind.indexer import index_vault
from puremind.models.lazy import Models
from puremind.retrieval.pipeline import RetrievalParams, Searcher
from puremind.services import get_note, recent_notes, run_index, run_search
from puremind.store import Store
from puremind.folders import in_folders

REPO = Path(__file__).resolve().parent.parent
UNIQUE = "zanzibarquokka"  # a word only the private notes hold


def _vault(root: Path) -> Path:
    vault = root / "vault"
    vault.mkdir()
    # The private notes say the query's word most often and in their titles: they would rank first.
    write(vault, "diary.md", f"---\ntitle: {UNIQUE} diary\nprivate: true\n---\n\n# {UNIQUE}\n\n"
          f"{UNIQUE} {UNIQUE} {UNIQUE} is what I told the doctor, and the espresso was bad.\n")
    write(vault, "Journal/2026-12-01.md", f"# {UNIQUE} day\n\n{UNIQUE} {UNIQUE} espresso with my sister.\n")
    for n in range(6):
        write(vault, f"notes/coffee{n}.md", f"# Coffee {n}\n\nThe espresso grinder note number {n}, {UNIQUE} once.\n")
    return vault


def _env(root: Path, vault: Path, **extra: str) -> dict[str, str]:
    return {"PUREMIND_HOME": str(root / "home"), "PUREMIND_EMBED_MODEL": "none", "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(REPO), "PUREMIND_VAULT": str(vault), "PUREMIND_DB": str(root / "home" / "index.sqlite"),
            **extra}


def _config(root: Path, folders: list[str]) -> None:
    home = root / "home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(f"[agents]\nprivate = {json.dumps(folders)}\n", encoding="utf-8")


@pytest.fixture
def world(tmp_path: Path) -> dict:
    vault = _vault(tmp_path)
    _config(tmp_path, ["Journal/"])
    env = _env(tmp_path, vault)
    settings = load_settings(env=env)
    run_index(settings)
    return {"vault": vault, "env": env, "settings": settings, "root": tmp_path}


PRIVATE = {"diary.md", "Journal/2026-12-01.md"}


def test_the_private_folders_setting_reads_a_list_of_folders_and_refuses_anything_else(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[agents]\nprivate = ["Journal/", "Health"]\n', encoding="utf-8")
    assert read_config_file(config) == {"private_folders": ("Journal/", "Health")}
    for bad in ('"Journal/"', '[1]', '["/"]', '[""]'):
        config.write_text(f"[agents]\nprivate = {bad}\n", encoding="utf-8")
        with pytest.raises(ConfigError):
            read_config_file(config)


def test_a_folder_matches_its_notes_in_any_case_or_normalisation_and_not_a_longer_name():
    assert in_folders("Journal/a.md", ("Journal/",)) and in_folders("journal/deep/a.md", ("Journal",))
    assert in_folders("Tagebuch/Ä.md", ("./tagebuch/",))
    assert not in_folders("Journalism/a.md", ("Journal",)) and not in_folders("a.md", ("Journal/",))


def test_an_agent_search_never_finds_a_private_note_and_still_gets_limit_results(world):
    searcher = Searcher(world["settings"].db, Models(None, None), RetrievalParams(rerank=False), agent=True)
    try:
        for query in (UNIQUE, f"{UNIQUE} diary", "doctor", "sister espresso", f"{UNIQUE} day", "espresso"):
            for lexical_only in (False, True):
                hits = searcher.search(query, 5, lexical_only=lexical_only).hits
                assert not {h.path for h in hits} & PRIVATE, (query, lexical_only)
        assert len(searcher.search(UNIQUE, 5).hits) == 5
        assert len(searcher.search(UNIQUE, 5, lexical_only=True).hits) == 5
    finally:
        searcher.close()


def test_the_terminal_search_finds_a_private_note_first_and_marks_it(world):
    result = run_search(world["settings"], UNIQUE, limit=5, rerank=False)
    assert result.results[0].path in PRIVATE and result.results[0].private
    assert {p.path for p in result.results if p.private} == PRIVATE
    assert not any(p.private for p in result.results if p.path not in PRIVATE)
    out = CliRunner().invoke(app, ["search", UNIQUE, "--limit", "5"], env=world["env"])
    assert out.exit_code == 0, out.output
    first = out.output.splitlines()[0]
    assert first.startswith("1. ") and first.endswith("  private")
    shown = CliRunner().invoke(app, ["search", UNIQUE, "--limit", "5", "--json"], env=world["env"])
    assert json.loads(shown.stdout)["results"][0]["private"] is True


def test_get_refuses_a_private_note_with_the_message_of_a_missing_one_and_recent_omits_it(world):
    settings = world["settings"]
    missing = None
    try:
        get_note(settings, "nothing.md", agent=True)
    except Exception as exc:  # noqa: BLE001
        missing = (type(exc), exc.message.replace("'nothing.md'", "PATH"), exc.hint)
    for path in ("diary.md", "Journal/2026-12-01.md", "./diary.md", "notes/../diary.md"):
        with pytest.raises(Exception) as caught:
            get_note(settings, path, agent=True)
        refused = (type(caught.value), caught.value.message.replace(repr(path), "PATH"), caught.value.hint)
        assert refused == missing, path
    assert UNIQUE in get_note(settings, "diary.md").text  # the user's own get
    assert not {n.path for n in recent_notes(settings, 7, 50, agent=True).notes} & PRIVATE
    assert {n.path for n in recent_notes(settings, 7, 50).notes} >= PRIVATE


def test_a_note_made_private_since_the_last_run_is_refused_by_get_already(world):
    write(world["vault"], "notes/coffee0.md", "---\nprivate: yes\n---\n# Coffee 0\n\nNow private.\n")
    with pytest.raises(Exception) as caught:
        get_note(world["settings"], "notes/coffee0.md", agent=True)
    assert caught.value.message == "no note 'notes/coffee0.md' in the vault"


def test_a_change_of_the_private_folders_takes_effect_at_the_next_run_without_reading_or_embedding(tmp_path):
    vault = _vault(tmp_path)
    embedder = FakeEmbedder()
    db = tmp_path / "index.sqlite"
    store = Store.open(db)
    try:
        index_vault(store, vault, embedder=embedder, private_folders=("Journal/",))
        assert {p for p in store.file_states() if store.is_private(p)} == PRIVATE
        embedded, states = len(embedder.embedded), store.file_states()
        report = index_vault(store, vault, embedder=embedder, private_folders=("notes/",))
        assert report.changed == 0 and report.added == 0 and len(embedder.embedded) == embedded
        assert store.file_states() == states  # no note read and stored again
        assert {p for p in states if store.is_private(p)} == {"diary.md"} | {f"notes/coffee{n}.md" for n in range(6)}
        index_vault(store, vault, embedder=embedder)
        assert {p for p in states if store.is_private(p)} == {"diary.md"}  # the frontmatter still counts
        assert len(embedder.embedded) == embedded
    finally:
        store.close()


def test_every_list_of_a_store_that_serves_an_agent_leaves_private_notes_out(tmp_path):
    vault = _vault(tmp_path)
    db = tmp_path / "index.sqlite"
    store = Store.open(db)
    try:
        index_vault(store, vault, embedder=FakeEmbedder(), private_folders=("Journal/",))
        all_ids, _ = store.vectors()
        private_files = {store.search_titles(f'"{UNIQUE}"', 10)[0].file_id}
    finally:
        store.close()
    agent = Store.open(db, create=False, hide_private=True)
    user = Store.open(db, create=False)
    try:
        match = f'"{UNIQUE}"'
        for s, hidden in ((agent, True), (user, False)):
            paths = {h.path for h in s.search_lexical(match, 50)}
            assert bool(paths & PRIVATE) != hidden
            assert bool({t.path for t in s.search_titles(match, 50)} & PRIVATE) != hidden
            assert bool({t.path for t in s.notes_titled([f"{UNIQUE} diary"])} & PRIVATE) != hidden
            ids, matrix = s.vectors()
            shown = {h.path for h in s.chunks_by_ids([int(i) for i in ids])}
            assert bool(shown & PRIVATE) != hidden and matrix.shape[0] == len(ids)
            assert bool(set(s.note_scores(sorted(PRIVATE), match))) != hidden
            assert bool({p.path for p in s.recent_files(0, 50)} & PRIVATE) != hidden
            assert bool(s.best_chunk_of(sorted(private_files))) != hidden
        assert len(agent.vectors()[0]) < len(all_ids)
        assert {h.path for h in agent.chunks_by_ids([int(i) for i in all_ids])}.isdisjoint(PRIVATE)
        assert len(agent.chunk_files([int(i) for i in all_ids])) == len(agent.vectors()[0])
    finally:
        agent.close()
        user.close()


def test_an_agent_search_with_vectors_never_finds_a_private_note(tmp_path):
    vault = _vault(tmp_path)
    db = tmp_path / "index.sqlite"
    embedder = FakeEmbedder()
    store = Store.open(db)
    try:
        index_vault(store, vault, embedder=embedder, private_folders=("Journal/",))
    finally:
        store.close()
    searcher = Searcher(db, Models(embedder, None), RetrievalParams(rerank=False), agent=True)
    try:
        for query in (UNIQUE, "what I told the doctor", "sister espresso"):
            outcome = searcher.search(query, 5)
            assert outcome.mode == "hybrid" and len(outcome.hits) == 5
            assert not {h.path for h in outcome.hits} & PRIVATE, query
    finally:
        searcher.close()



def test_through_mcp_private_notes_are_absent_from_search_refused_by_get_and_left_out_of_recent(world):
    queries = [UNIQUE, f"{UNIQUE} diary", "doctor", "sister", f"{UNIQUE} day"]
    gets = ["diary.md", "Diary.md", "Journal/2026-12-01.md", "journal/2026-12-01.md", "Journal/../diary.md",
            "nothing.md"]
    results = mcp_calls(world["env"], [("puremind_search", {"query": q, "limit": 5}) for q in queries]
                    + [("puremind_get", {"path": p}) for p in gets]
                    + [("puremind_recent", {"days": 30, "limit": 100})])
    searches, got, recent = results[: len(queries)], results[len(queries): -1], results[-1]
    for query, result in zip(queries, searches):
        text = "\n".join(b.text for b in result.content if b.type == "text")
        passages = result.structured_content["results"]
        assert not {p["path"] for p in passages} & PRIVATE, query
        assert "told the doctor" not in text and "with my sister" not in text, query
    assert len(searches[0].structured_content["results"]) == 5
    texts = ["\n".join(b.text for b in r.content if b.type == "text") for r in got]
    assert all(r.is_error for r in got)
    expected = texts[-1].replace(repr("nothing.md"), "PATH")
    for path, text in zip(gets, texts):
        assert text.replace(repr(path), "PATH") == expected, path
    assert not {n["path"] for n in recent.structured_content["notes"]} & PRIVATE
    assert len(recent.structured_content["notes"]) == 6
