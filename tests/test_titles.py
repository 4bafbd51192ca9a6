"""Notes are found by what they are called: the title (frontmatter `title`, first `#` heading, file name) and the
frontmatter aliases are searched as a list of their own in hybrid search, an exact title leads, and the title
leads the breadcrumb the embedder and the reranker read."""

from __future__ import annotations

import sqlite3

import pytest

from conftest import FakeEmbedder, searcher_with, write
from puremind.chunker import MAX_ALIASES, breadcrumb, note_title
from puremind.config import load_settings
from puremind import indexer
from puremind.indexer import embed_text, index_vault
from puremind.store import Store
from puremind.store import schema


@pytest.mark.parametrize(("text", "rel", "title", "aliases"), [
    ("---\ntitle: \"Espresso at home\"\naliases: [coffee, 'brew']\n---\n# Heading\n", "a/b.md",
     "Espresso at home", ("coffee", "brew", "b")),
    ("---\naliases:\n  - Kaffee\n  - \"café\"\ntags: x\n---\n# Heading one\n\ntext", "a/b.md", "Heading one",
     ("Kaffee", "café", "b")),
    ("---\nalias: Solo  # a comment\n---\nno heading here", "notes/1.1.5.md", "1.1.5", ("Solo",)),
    ("```\n# not a heading\n```\n## second level\n", "x.markdown", "x", ()),
    ("#tag is not a heading\n", ".hidden-name", ".hidden-name", ()),
    ("---\ntitle:\n---\n# From the heading\n", "n.md", "From the heading", ("n",)),
    ("---\ntitle: Same\naliases: [same, SAME, other]\n---\n", "n.md", "Same", ("other", "n")),
])
def test_a_notes_title_is_its_frontmatter_title_else_its_first_h1_else_its_file_name(text, rel, title, aliases):
    assert note_title(text, rel) == (note_title(text, rel).__class__(title, aliases))


@pytest.mark.parametrize(("text", "rel", "title", "aliases"), [
    ("---\ntitle: 1.8.9\n---\nFixed the sync.\n", "releases/v1.8.9.md", "1.8.9", ("v1.8.9",)),
    ("# Meeting with Dana\n\nAgenda.\n", "2024-03-15.md", "Meeting with Dana", ("2024-03-15",)),
    # The file name is no second name when it is the title or an alias as titles are compared (case, spacing).
    ("---\ntitle: release  NOTES\n---\n", "Release Notes.md", "release  NOTES", ()),
    ("# Tea\n", "tea.md", "Tea", ()),
    ("---\ntitle: 1.8.9\naliases: [V1.8.9]\n---\n", "v1.8.9.md", "1.8.9", ("V1.8.9",)),
    # Still a name when the frontmatter already gives the most aliases that count.
    ("---\ntitle: T\naliases: [" + ", ".join(f"a{i}" for i in range(30)) + "]\n---\n", "file.md", "T",
     (*(f"a{i}" for i in range(MAX_ALIASES)), "file")),
])
def test_a_notes_file_name_stays_one_of_its_names_when_it_is_not_the_title(text, rel, title, aliases):
    assert note_title(text, rel) == (note_title(text, rel).__class__(title, aliases))


def test_aliases_are_bounded_in_number_and_length():
    many = "---\naliases:\n" + "".join(f"  - alias {i} {'x' * 400}\n" for i in range(50)) + "---\n"
    named = note_title(many, "n.md")
    assert len(named.aliases) == MAX_ALIASES and all(len(a) <= 300 for a in named.aliases)


def test_the_title_leads_the_breadcrumb_once():
    assert breadcrumb("Coffee", ("Coffee", "Grinder")) == ("Coffee", "Grinder")
    assert breadcrumb("1.1.5", ("Fixes",)) == ("1.1.5", "Fixes")
    assert breadcrumb("", ()) == ()
    from puremind.chunker import chunk_markdown

    (chunk,) = chunk_markdown("Fixed the crash on start.\n")
    assert embed_text(chunk, "1.1.5").startswith("1.1.5\n\n")


@pytest.fixture
def release_vault(tmp_path):
    root = tmp_path / "vault"
    # Release notes named by version only, no heading; other notes say "1.1.5" in their text, often.
    write(root, "releases/1.1.5.md", "Fixed the crash on start and the slow sync.\n")
    write(root, "releases/1.1.4.md", "Added dark mode.\n")
    write(root, "planning.md", "# Planning\n\n1.1.5 ships after 1.1.4; 1.1.5 needs the sync fix; 1.1.5 is late.\n")
    write(root, "coffee.md", "---\naliases: [Kaffee, morning brew]\n---\n# Espresso\n\nThe grinder is at 2.4.\n")
    write(root, "espresso-notes.md", "# Notes\n\nespresso espresso espresso, dialled in every morning.\n")
    return root


def _settings(tmp_path, vault):
    return load_settings({"vault": vault, "db": tmp_path / "index.sqlite"})


def _index(settings, vault, embedder=None):
    store = Store.open(settings.db)
    try:
        index_vault(store, vault, embedder=embedder)
    finally:
        store.close()


def _paths(searcher, query, **kw):
    return [h.path for h in searcher.search(query, 5, **kw).hits]


def test_a_query_for_a_notes_exact_title_finds_that_note_first(tmp_path, release_vault):
    settings = _settings(tmp_path, release_vault)
    _index(settings, release_vault)
    searcher = searcher_with(settings)
    assert _paths(searcher, "1.1.5")[0] == "releases/1.1.5.md"
    assert _paths(searcher, "Espresso")[0] == "coffee.md"  # the title, over a note that repeats the word
    assert _paths(searcher, "KAFFEE")[0] == "coffee.md"  # an alias, in any case
    assert _paths(searcher, "morning brew")[0] == "coffee.md"
    # --lexical-only keeps the spec's BM25 over chunks: a file name is not text
    assert "releases/1.1.5.md" not in _paths(searcher, "1.1.5", lexical_only=True)
    searcher.close()


def test_without_the_title_list_the_file_name_is_not_found_which_is_what_it_fixes(tmp_path, release_vault):
    import dataclasses

    settings = _settings(tmp_path, release_vault)
    _index(settings, release_vault)
    searcher = searcher_with(settings)
    searcher.params = dataclasses.replace(searcher.params, titles=False)
    assert "releases/1.1.5.md" not in _paths(searcher, "1.1.5")
    searcher.close()


def test_a_title_word_ranks_a_note_found_in_its_text_higher(tmp_path, release_vault):
    settings = _settings(tmp_path, release_vault)
    write(release_vault, "sync.md", "# Sync\n\nThe slow sync is fixed by batching.\n")
    _index(settings, release_vault)
    searcher = searcher_with(settings)
    assert _paths(searcher, "slow sync")[0] == "sync.md"
    searcher.close()


def test_a_changed_title_is_searched_and_the_old_one_is_forgotten(tmp_path, release_vault):
    settings = _settings(tmp_path, release_vault)
    _index(settings, release_vault)
    write(release_vault, "coffee.md", "# Tea\n\nThe kettle is at 80 degrees.\n")
    _index(settings, release_vault)
    searcher = searcher_with(settings)
    assert _paths(searcher, "Tea")[0] == "coffee.md"
    assert "coffee.md" not in _paths(searcher, "Kaffee")
    searcher.close()
    (release_vault / "coffee.md").unlink()
    _index(settings, release_vault)
    store = Store.open(settings.db, create=False)
    try:
        assert store.search_titles('"tea"', 5) == []  # a removed note leaves no title behind
    finally:
        store.close()


def test_the_embedder_and_the_reranker_read_the_title_first(tmp_path, release_vault):
    settings = _settings(tmp_path, release_vault)
    embedder = FakeEmbedder()
    _index(settings, release_vault, embedder)
    assert any(t.startswith("1.1.5\n\nFixed the crash") for t in embedder.embedded)

    class Recording:
        languages = ()

        def __init__(self):
            self.passages = []

        def score(self, query, passages):
            self.passages.extend(passages)
            return [0.5] * len(passages)

    reranker = Recording()
    searcher = searcher_with(settings, embedder=embedder, reranker=reranker, rerank=True)
    searcher.search("crash on start", 5)
    assert any(p.startswith("1.1.5\n\nFixed the crash") for p in reranker.passages)
    searcher.close()


def test_an_older_index_gets_its_notes_file_names_as_titles_and_its_next_run_the_real_ones(tmp_path, release_vault):
    db = tmp_path / "old.sqlite"
    conn = sqlite3.connect(db, isolation_level=None)
    schema.migrate(conn, schema.MIGRATIONS[:4])  # an index of the release before titles
    conn.execute("INSERT INTO files (path, sha256, size, mtime_ns, indexed_at) VALUES ('releases/1.1.5.md', 'x', 1, 1, 0)")
    conn.execute("INSERT INTO files (path, sha256, size, mtime_ns, indexed_at) VALUES ('coffee.md', 'y', 1, 1, 0)")
    conn.close()
    store = Store.open(db)
    try:
        assert [t.path for t in store.search_titles('"1.1.5"', 5)] == ["releases/1.1.5.md"]
        assert [t.title for t in store.search_titles('"coffee"', 5)] == ["coffee"]
        index_vault(store, release_vault)  # the chunker signature changed: every note is read again
        titled = {t.path: (t.title, t.aliases) for t in store.search_titles('"espresso"', 5)}
        # espresso-notes.md, titled "Notes", keeps its file name as a name
        assert titled == {"coffee.md": ("Espresso", ("Kaffee", "morning brew", "coffee")),
                          "espresso-notes.md": ("Notes", ("espresso-notes",))}
    finally:
        store.close()


def _searcher_over(tmp_path, notes: dict[str, str]):
    """A Searcher (no models) over a fresh vault of `notes` (path -> text), indexed."""
    vault = tmp_path / "vault"
    for rel, text in notes.items():
        write(vault, rel, text)
    settings = _settings(tmp_path, vault)
    _index(settings, vault)
    return searcher_with(settings)


def _assert_first(tmp_path, notes: dict[str, str], first: dict[str, str]) -> None:
    """Over a fresh vault of `notes`, each query of `first` finds its path first."""
    searcher = _searcher_over(tmp_path, notes)
    try:
        for query, path in first.items():
            assert _paths(searcher, query)[0] == path, query
    finally:
        searcher.close()


def test_a_question_that_names_a_note_in_passing_is_not_taken_for_its_title(tmp_path):
    searcher = _searcher_over(tmp_path, {"git.md": "# git\n\n> Distributed version control system.\n",
                                         "tig.md": "# tig\n\n> A text-mode interface for git to browse commits.\n"})
    assert _paths(searcher, "text-mode interface for git to browse commits")[0] == "tig.md"
    assert _paths(searcher, "git")[0] == "git.md"
    searcher.close()


def test_a_title_is_compared_with_the_query_as_the_keyword_index_reads_both(tmp_path):
    from puremind.store import keyword_words

    assert [frozenset(w) for w in keyword_words(["Café menus", "qm-move_disk", "がき 파일"])] == [
        frozenset({"cafe", "menu"}), frozenset({"qm", "move", "disk"}), frozenset({"がき", "파일"})]
    assert [frozenset(w) for w in keyword_words(["Café menus"], stems=False)] == [frozenset({"cafe", "menus"})]
    searcher = _searcher_over(tmp_path, {
        "Café menu.md": "Espresso, flat white, croissant.\n",
        "drinks.md": "# Drinks\n\nThe cafe menu lists the drinks; the cafe menu has the prices.\n"})
    # Found by title although the query has no accent: the title list's coverage rule compares words as FTS5
    # splits and folds them, not raw words ("cafe" against "café" covered nothing before).
    assert "Café menu.md" in _paths(searcher, "cafe menu")
    assert "Café menu.md" in _paths(searcher, "CAFE  MENU")
    assert "Café menu.md" not in _paths(searcher, "cafe menu", lexical_only=True)  # a file name is not text
    searcher.close()


def test_a_title_with_the_querys_words_in_its_order_counts_as_exact(tmp_path):
    from puremind.store import keyword_words

    assert keyword_words(["🚀 Café-menus launch", "", "qm-move_disk"], stems=False) == [
        ("cafe", "menus", "launch"), (), ("qm", "move", "disk")]
    daily = "Daily log. Launch plan review; launch plan follow-up. Kickoff.\n"
    searcher = _searcher_over(tmp_path, {
        "Projects/🚀 Launch plan.md": "Rockets and the schedule.\n",
        "Projects/Plan launch.md": "The other order.\n",
        **{f"Daily/2024-03-{day}.md": daily for day in range(10, 16)},
        "linux/qm-move-disk.md": "# qm move_disk\n\n> This command is an alias of `qm disk move`.\n",
        "linux/qm-move_disk.md": "# qm move_disk\n\n> This command is an alias of `qm disk move`.\n",
    })
    # The title's emoji is no word: asked for by its words, the note comes first, above the daily notes that
    # say "launch plan" twice each; the same words in another order are not its title.
    assert _paths(searcher, "Launch plan")[0] == "Projects/🚀 Launch plan.md"
    assert _paths(searcher, "launch  PLAN")[0] == "Projects/🚀 Launch plan.md"
    assert _paths(searcher, "plan launch")[0] == "Projects/Plan launch.md"
    # Two notes with one title: the one whose file is named as asked comes first, whichever way it is asked.
    assert _paths(searcher, "qm-move_disk")[0] == "linux/qm-move_disk.md"
    assert _paths(searcher, "qm-move-disk")[0] == "linux/qm-move-disk.md"
    searcher.close()


def test_numbers_that_lead_a_title_to_sort_it_are_not_asked_for(tmp_path):
    chapters = {f"Chapter {i}.md": "See the introduction first; the introduction explains the setup.\n" for i in range(6)}
    _assert_first(tmp_path, {
        "01 Introduction.md": "What this book covers and who it is for.\n",
        "11.01 Project brief.md": "Due on Friday.\n",
        "1.1.5.md": "Fixed the crash.\n",
        "Introduction to birds.md": "Sparrows.\n",
        **chapters,
    }, {
        "Introduction": "01 Introduction.md",
        "project brief": "11.01 Project brief.md",
        "1.1.5": "1.1.5.md",  # a title of numbers only is its numbers
    })


def test_a_title_that_is_mostly_the_query_outranks_notes_that_only_say_it(tmp_path):
    log = "Moved the service to kubernetes; kubernetes upgrade; deep work session; standup notes.\n"
    # The title holds every word asked, and the query says at least half of the title's own words (numbers
    # aside): asked for by the main part of its title, the note comes first.
    _assert_first(tmp_path, {
        "Kubernetes (k8s).md": "Cluster notes, kubectl tips.\n",
        "Book - Deep Work.md": "Ideas from the book.\n",
        "Standup - 2024-03-15.md": "Weekly sync items.\n",
        **{f"Log {i}.md": log for i in range(6)},
    }, {"Kubernetes": "Kubernetes (k8s).md", "deep work": "Book - Deep Work.md", "standup": "Standup - 2024-03-15.md"})


def test_of_several_notes_with_the_querys_title_the_one_named_so_comes_first(tmp_path):
    _assert_first(tmp_path, {
        "common/open.fish.md": "# open\n\n> Opens files, directories and URIs with their default applications.\n",
        "common/open.md": "# open\n\n> `open` can refer to several commands with the same name.\n",
    }, {"open": "common/open.md"})


@pytest.fixture
def versions_vault(tmp_path):
    root = tmp_path / "vault"
    # Release notes named for their tag, titled by the version alone; other notes say the version often.
    write(root, "releases/v1.8.9.md", "---\ntitle: 1.8.9\n---\n\nFixed the crash on start.\n")
    write(root, "releases/v1.8.8.md", "---\ntitle: 1.8.8\n---\n\nAdded dark mode.\n")
    write(root, "roadmap.md", "# Roadmap\n\nv1.8.9 ships the crash fix; v1.8.9 before v1.9; 1.8.9 is late.\n")
    write(root, "2024-03-15.md", "# Meeting with Dana\n\nAgenda: the v1.8.9 release.\n")
    write(root, "daily.md", "# Daily\n\n2024-03-15 meeting; 2024-03-15 follow-up; 2024-03-15 notes.\n")
    return root


def test_a_note_is_found_by_its_file_name_when_its_title_is_another(tmp_path, versions_vault):
    settings = _settings(tmp_path, versions_vault)
    _index(settings, versions_vault)
    searcher = searcher_with(settings)
    try:
        assert _paths(searcher, "v1.8.9")[0] == "releases/v1.8.9.md"  # the file name, dots and all
        assert _paths(searcher, "V1.8.9")[0] == "releases/v1.8.9.md"
        assert _paths(searcher, "1.8.9")[0] == "releases/v1.8.9.md"  # the title still
        assert _paths(searcher, "2024-03-15")[0] == "2024-03-15.md"  # a heading is the title; the file name too
        assert _paths(searcher, "Meeting with Dana")[0] == "2024-03-15.md"
        # --lexical-only keeps the spec's BM25 over chunks: a file name is not text
        assert "releases/v1.8.9.md" not in _paths(searcher, "v1.8.9", lexical_only=True)
    finally:
        searcher.close()


def test_the_file_name_as_a_name_changes_no_text_the_embedder_reads(tmp_path, versions_vault):
    # An index of the release before: the same chunks and vectors, no file name among the aliases.
    settings = _settings(tmp_path, versions_vault)
    embedder = FakeEmbedder()
    _index(settings, versions_vault, embedder)
    # The breadcrumb is the title alone: the file name, an alias, is no part of it.
    assert "1.8.9\n\n---\ntitle: 1.8.9\n---\n\nFixed the crash on start." in embedder.embedded
    conn = sqlite3.connect(settings.db, isolation_level=None)
    conn.execute("UPDATE files SET aliases = ''")
    conn.execute("UPDATE meta SET value = ? WHERE key = ?",
                 (indexer.chunker_signature().replace(";titles=2", ";titles=1"), indexer.META_CHUNKER))
    conn.close()
    searcher = searcher_with(settings)
    assert _paths(searcher, "v1.8.9")[0] != "releases/v1.8.9.md"
    searcher.close()
    embedded = len(embedder.embedded)
    store = Store.open(settings.db)
    try:
        report = index_vault(store, versions_vault, embedder=embedder)
    finally:
        store.close()
    # Every note is read again for its names; no text changed, so every vector is reused.
    assert (report.changed, report.unchanged) == (5, 0)
    assert report.chunks_embedded == 0 and len(embedder.embedded) == embedded
    searcher = searcher_with(settings)
    assert _paths(searcher, "v1.8.9")[0] == "releases/v1.8.9.md"
    searcher.close()
