"""The excerpt of a search hit: the part of the passage that matches the query, cut at word boundaries."""

from __future__ import annotations

import pytest
from conftest import write
from hypothesis import given, settings
from hypothesis import strategies as st

from puremind.retrieval.excerpt import best_excerpt, match_key, query_keys
from puremind.store.store import clip_excerpt, without_frontmatter

FILLER = "Filler words about milk steaming, latte art and the cleaning routine of the machine. " * 6
PASSAGE = (
    "## Grinder setup\n\nThe grinder is a flat-burr single-dose model with a stepless dial. "
    + FILLER
    + "To roll back production, run the deploy script with the previous image tag printed at the end. "
    + FILLER
)


def whole_words(excerpt: str, text: str) -> bool:
    """True when `excerpt`, without its "…", is a piece of `text` (whitespace collapsed) that starts and ends
    at word boundaries, and "…" marks exactly the ends where text was left out."""
    flat = " ".join(text.split())
    piece = excerpt.removeprefix("…").removesuffix("…")
    at = flat.find(piece)
    if at < 0:
        return False
    end = at + len(piece)
    starts_clean = at == 0 or not (flat[at - 1].isalnum() and flat[at].isalnum())
    ends_clean = end == len(flat) or not (flat[end - 1].isalnum() and flat[end].isalnum())
    marks = excerpt.startswith("…") == (at > 0) and excerpt.endswith("…") == (end < len(flat))
    return starts_clean and ends_clean and marks


def test_the_excerpt_shows_the_part_of_the_passage_that_matches_not_its_start():
    excerpt = best_excerpt(PASSAGE, "roll back a production deploy")
    assert "roll back production" in excerpt and "deploy script" in excerpt
    assert excerpt.startswith("…") and excerpt.endswith("…") and len(excerpt) <= 200
    assert whole_words(excerpt, PASSAGE)


def test_the_excerpt_is_cut_at_word_boundaries_with_an_ellipsis_at_each_cut():
    for query in ("previous image tag", "cleaning routine", "stepless dial", "zeppelin", "end"):
        excerpt = best_excerpt(PASSAGE, query)
        assert len(excerpt) <= 200 and whole_words(excerpt, PASSAGE), (query, excerpt)


def test_a_short_passage_is_shown_whole_on_one_line():
    assert best_excerpt("# Title\n\nA short\tnote.\n", "note") == "# Title A short note."


def test_without_a_matching_word_the_excerpt_is_the_start_of_the_passage():
    excerpt = best_excerpt(PASSAGE, "zeppelin")
    assert excerpt.startswith("## Grinder setup The grinder") and excerpt.endswith("…") and not excerpt.startswith("…")


def test_words_match_without_case_accents_or_common_endings():
    assert match_key("Grinders") == match_key("grinder")
    assert match_key("setting") == match_key("set") and match_key("stopped") == match_key("stop")
    assert match_key("CAFÉ") == match_key("cafe")
    text = FILLER + "The Café serves espresso. " + FILLER
    assert "Café serves" in best_excerpt(text, "cafe")
    assert "deploy script" in best_excerpt(PASSAGE, "DEPLOYING scripts")


def test_common_words_do_not_choose_the_window():
    assert query_keys("how did I set up the espresso grinder") == ["set", "espresso", "grinder"]
    assert query_keys("the") == ["the"]  # a query of nothing else still matches
    text = "The the the the of the and the. " * 10 + "Espresso grinder notes live here. " + FILLER
    assert "Espresso grinder" in best_excerpt(text, "the espresso grinder")


def test_the_window_with_the_most_distinct_query_words_wins_over_one_word_repeated():
    text = "alpha " * 60 + FILLER + "alpha and beta together. " + FILLER
    excerpt = best_excerpt(text, "alpha beta")
    assert "alpha and beta together" in excerpt


def test_cjk_queries_match_by_character_pairs():
    assert query_keys("東京の天気") == ["東京", "京の", "の天", "天気"]
    text = "今日は京都駅で友達と会いました。" * 8 + "東京の天気は晴れです。" + "これは関係のない文章です。" * 12
    excerpt = best_excerpt(text, "東京の天気", 60)
    assert "東京の天気は晴れです" in excerpt and len(excerpt) <= 60 and excerpt.startswith("…")


def test_a_single_word_longer_than_the_room_is_cut_inside():
    text = "see https://example.com/" + "a" * 400 + " for more"
    excerpt = best_excerpt(text, "zeppelin")
    assert len(excerpt) <= 200 and excerpt.endswith("…")


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab cdé\n.京都-")), max_size=600),
    query=st.text(alphabet=st.sampled_from(list("ab cdé京都")), max_size=12),
    size=st.integers(min_value=10, max_value=250),
)
def test_every_excerpt_fits_and_is_a_piece_of_the_passage(text, query, size):
    excerpt = best_excerpt(text, query, size)
    assert len(excerpt) <= size
    flat = " ".join(without_frontmatter(text).split())
    assert excerpt.removeprefix("…").removesuffix("…") in flat


def test_the_keyword_snippet_fallback_is_cut_after_a_whole_word():
    text = "word " * 30 + "antidisestablishmentarianism " * 5
    clipped = clip_excerpt(text)
    assert len(clipped) <= 200 and clipped.endswith("…")
    assert whole_words(clipped, text)
    assert clip_excerpt("short  text\n") == "short text"
    assert len(clip_excerpt("京" * 500)) <= 200


# -- frontmatter: never shown as YAML (issue 32) -----------------------------------------------------------------

DANA = (
    "---\ntitle: Dana Fischer\naliases: [Dana, DF]\ntags:\n  - person\n  - mentor\ncreated: 2024-03-01\n---\n"
    "# Dana\n\nDana runs the platform team and reviews every production deploy. " + FILLER
)
YAML_SYNTAX = ("---", "title:", "aliases:", "tags:", "created:", "[Dana", "- person")


def shows_no_yaml(excerpt: str) -> bool:
    return not any(piece in excerpt for piece in YAML_SYNTAX)


def test_an_excerpt_shows_the_frontmatter_title_and_aliases_as_plain_words_never_the_yaml():
    for query in ("dana", "Dana Fischer", "production deploy", "zeppelin", "mentor"):
        excerpt = best_excerpt(DANA, query)
        assert shows_no_yaml(excerpt), (query, excerpt)
        assert len(excerpt) <= 200, (query, excerpt)
    assert best_excerpt(DANA, "dana").startswith("Dana Fischer (Dana, DF) — # Dana Dana runs the platform team")
    assert clip_excerpt(DANA).startswith("Dana Fischer (Dana, DF) — # Dana Dana runs")
    short = "---\ntitle: Dana Fischer\naliases: [Dana, DF]\n---\n# Dana\n\nShort note.\n"
    assert best_excerpt(short, "dana") == clip_excerpt(short) == "Dana Fischer (Dana, DF) — # Dana Short note."


def test_frontmatter_without_a_title_is_dropped_and_a_passage_of_frontmatter_alone_shows_its_values():
    assert best_excerpt("---\ntags: [coffee]\n---\n# Beans\n\nLight roast.\n", "beans") == "# Beans Light roast."
    alone = "---\ntitle: Dana Fischer\naliases:\n  - Dana\n  - DF\nrole: \"platform lead\"  \nnotes: |\n  Likes tea.\n...\n"
    assert clip_excerpt(alone) == best_excerpt(alone, "tea") == "Dana Fischer · Dana · DF · platform lead · Likes tea."


def test_text_that_only_looks_like_frontmatter_is_shown_as_it_is():
    for text in ("---\nNo closing line, so a thematic break.\n", "# Title\n\n---\ntitle: x\n---\n", "Text\n---\n"):
        assert best_excerpt(text, "title") == clip_excerpt(text) == " ".join(text.split())


def test_a_keyword_snippet_that_reaches_into_the_frontmatter_shows_the_passage_without_it():
    # FTS5 snippets are pieces of the passage, with "…" where it was cut.
    snippet = "…Fischer\naliases: [Dana, DF]\ntags:\n  - person…"
    clipped = clip_excerpt(snippet, passage=DANA)
    assert clipped.startswith("Dana Fischer (Dana, DF) — # Dana Dana runs") and shows_no_yaml(clipped)
    assert clip_excerpt("---\ntitle: Dana Fischer…", passage=DANA).startswith("Dana Fischer (Dana, DF) — ")
    body = "…reviews every production deploy. Filler words…"
    assert clip_excerpt(body, passage=DANA) == body  # a snippet of the text below the frontmatter stays


@settings(max_examples=150, deadline=None)
@given(
    keys=st.lists(st.text(alphabet="abkxyz_", min_size=1, max_size=6).filter(lambda k: not k.startswith("_")),
                  min_size=1, max_size=5, unique=True),
    values=st.lists(st.text(alphabet="ab cd", max_size=12), min_size=5, max_size=5),
    body=st.text(alphabet=st.sampled_from(list("ab cdé\n.京都")), max_size=400),
    query=st.text(alphabet=st.sampled_from(list("ab cdxyz")), max_size=12),
    listed=st.booleans(),
)
def test_no_excerpt_of_a_passage_with_frontmatter_shows_its_fences_or_keys(keys, values, body, query, listed):
    lines = []
    for key, value in zip(keys, values):
        lines += [f"{key}:", f"  - {value}"] if listed else [f"{key}: {value}"]
    text = "---\n" + "\n".join(lines) + "\n---\n" + body
    for excerpt in (best_excerpt(text, query), clip_excerpt(text), clip_excerpt(text[4:40] + "…", passage=text)):
        assert "---" not in excerpt and not any(f"{key}:" in excerpt for key in keys), excerpt


@pytest.mark.parametrize("lexical_only", [True, False], ids=["lexical-only", "keyword-hybrid"])
def test_search_results_of_a_note_with_frontmatter_show_no_yaml_but_keep_it_in_the_passage(tmp_path, lexical_only):
    from puremind.config import load_settings
    from puremind.services import run_index, run_search

    vault = tmp_path / "vault"
    write(vault, "people/dana.md", DANA)
    write(vault, "coffee.md", "# Coffee\n\nThe grinder setting is 2.4 for an espresso dose.\n")
    settings = load_settings(flags={"vault": vault})
    run_index(settings)
    # "mentor" is written only in the frontmatter: keyword matching of frontmatter values stays.
    for query in ("Dana Fischer", "mentor", "production deploy"):
        result = run_search(settings, query, limit=5, lexical_only=lexical_only)
        hits = [p for p in result.results if p.path == "people/dana.md"]
        assert hits, (query, result)
        for hit in hits:
            assert shows_no_yaml(hit.excerpt) and hit.excerpt, (query, hit.excerpt)
            assert "title: Dana Fischer" in hit.text  # the passage itself is as written
        assert hits[0].excerpt.startswith("Dana Fischer (Dana, DF) — ") or query == "production deploy"
