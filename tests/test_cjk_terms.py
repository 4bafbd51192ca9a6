"""A long query in an unspaced script is matched by its rarest character grams only (issue 33); a short one as
before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from puremind.cjk import MAX_MATCH_TERMS, TERM_COUNT_CAP, as_indexed, cjk_match_expression, query_grams, rarest_grams
from puremind.models.lazy import Models
from puremind.retrieval.pipeline import RetrievalParams, Searcher
from puremind.store import ChunkRow, Store

# 60 characters of Thai, a question about the note below in other words.
LONG_THAI = "ฉันอยากรู้ว่าร้านกาแฟที่อยู่ใกล้สถานีรถไฟเปิดกี่โมงในวันอาทิตย์และมีที่จอดรถไหม"
LONG_CHINESE = "我想知道离火车站最近的那家咖啡店星期天几点开门，附近有没有停车场，可以带狗进去吗，还有没有无线网络和插座可以用来工作一下午呢"


def terms(expression: str) -> list[str]:
    return [t.strip('"') for t in expression.split(" OR ")]


def note(i: int, text: str) -> ChunkRow:
    return ChunkRow(0, (), text, 1, 1, "section", f"sha-{i}", None)


@pytest.fixture
def thai_store(tmp_path: Path):
    db = tmp_path / "index.sqlite"
    with Store.open(db) as store, store.batch():
        station = "ร้านกาแฟใกล้สถานีรถไฟเปิดทุกวันตั้งแต่เจ็ดโมงเช้า มีที่จอดรถ"
        store.put_file("station.md", "h0", 1, 0, [note(0, station)])
        for i in range(1, 40):  # notes that share the query's common letters and pairs, not its rare ones
            store.put_file(f"n{i}.md", f"h{i}", 1, 0, [note(i, f"ฉันอยากรู้ว่าวันนี้ที่ไหนมีอะไรและในวันอาทิตย์ {i}")])
    return db


def test_a_long_thai_or_chinese_query_matches_at_most_the_bound_of_grams():
    rare = lambda grams: {g: 1 for g in grams}  # noqa: E731
    common = lambda grams: {g: TERM_COUNT_CAP for g in grams}  # noqa: E731  (as in a large vault)
    for query in (LONG_THAI, LONG_CHINESE, LONG_CHINESE * 3):
        assert len(query_grams(query)) > MAX_MATCH_TERMS
        assert len(terms(cjk_match_expression(query, common))) <= MAX_MATCH_TERMS  # the budget adds none
        assert len(terms(cjk_match_expression(query, rare, 8, 0))) <= 8
        # rare grams, as in a small vault: the budget keeps every one of them (their passages add up to little)
        assert len(terms(cjk_match_expression(query, rare))) == len({as_indexed(g) for g in query_grams(query)} - {""})


def test_beyond_the_bound_the_next_rarest_grams_are_kept_while_their_passages_fit_the_budget():
    found = ["a", "b", "c", "d", "e", "f"]
    counts = {"a": 5, "b": 1, "c": 300, "d": 200, "e": TERM_COUNT_CAP, "f": 100}
    assert rarest_grams(found, lambda grams: counts, 2) == ["a", "b"]  # no budget: the bound alone
    assert rarest_grams(found, lambda grams: counts, 2, 305) == ["a", "b", "f"]  # 6 + 100 fits, 106 + 200 not
    assert rarest_grams(found, lambda grams: counts, 2, 306) == ["a", "b", "d", "f"]  # in reading order
    assert rarest_grams(found, lambda grams: counts, 2, 10_000) == ["a", "b", "c", "d", "f"]  # never a capped gram
    assert rarest_grams(found, lambda grams: {"a": 900, "b": 900}, 2, 1000) == ["a", "b"]  # the bound's grams always


def test_the_rarest_grams_are_kept_pairs_before_single_characters_among_equal_counts():
    counts = {"京": 50, "都": 50, "駅": 3, "京都": 50, "都駅": 0}
    assert rarest_grams(["京", "都", "駅", "京都", "都駅"], lambda grams: counts, 2) == ["駅", "京都"]


def test_a_gram_is_counted_as_the_index_reads_it_thai_vowel_signs_and_tone_marks_separating_words():
    assert as_indexed("สั") == as_indexed("ัส") == "ส"
    assert as_indexed("่") == ""
    assert as_indexed("京都") == "京都"
    counted: list[str] = []
    rarest_grams(["ส", "สั", "ัส", "ั"], lambda grams: counted.extend(grams) or {}, 4)
    assert counted == ["ส"]


def test_a_short_query_is_matched_by_every_gram_as_before():
    counts = lambda grams: pytest.fail("a short query needs no counts")  # noqa: E731
    assert cjk_match_expression("京都駅", counts) == cjk_match_expression("京都駅") == (
        '"京" OR "都" OR "駅" OR "京都" OR "都駅"')
    assert cjk_match_expression("no unspaced script", counts) is None


def test_the_store_counts_the_passages_that_hold_a_gram_up_to_the_cap(thai_store):
    with Store.open(thai_store, create=False) as store:
        assert store.cjk_term_counts(["สถ", "วั", "ฉั"], cap=10) == {"สถ": 1, "วั": 10, "ฉั": 10}
        assert store.cjk_term_counts(["ฉั"]) == {"ฉั": 39}  # read as "ฉ": in the 39 other notes
        assert store.cjk_term_counts(["京都"]) == {"京都": 0}


def test_a_long_thai_query_searches_the_pair_index_with_its_rarest_grams_and_finds_the_note(thai_store, monkeypatch):
    seen: list[str] = []
    search_cjk = Store.search_cjk
    monkeypatch.setattr(Store, "search_cjk",
                        lambda self, match, limit: seen.append(match) or search_cjk(self, match, limit))
    params = RetrievalParams(rerank=False, cjk_terms=8, cjk_budget=0)
    hits = Searcher(thai_store, Models(None, None), params).search(LONG_THAI, 5).hits
    assert len(terms(seen[-1])) <= 8
    assert "สถ" in terms(seen[-1])  # held by one note only
    assert hits[0].path == "station.md"
    every = Searcher(thai_store, Models(None, None), dataclasses.replace(params, cjk_terms=0)).search(LONG_THAI, 5)
    assert len(terms(seen[-1])) == len(query_grams(LONG_THAI))  # 0: every gram, as before
    assert every.hits[0].path == "station.md"


def test_results_for_a_short_query_are_the_same_with_and_without_the_bound(thai_store):
    for query in ("สถาน", "วันอ", "กาแฟ", "京都"):
        assert len(query_grams(query)) <= MAX_MATCH_TERMS
        bounded, every = (Searcher(thai_store, Models(None, None), RetrievalParams(rerank=False, cjk_terms=k))
                          .search(query, 10) for k in (MAX_MATCH_TERMS, 0))
        assert [(h.chunk_id, h.score, h.excerpt) for h in bounded.hits] == [
            (h.chunk_id, h.score, h.excerpt) for h in every.hits]
        assert bounded.hits or query == "京都"


def test_keyword_search_ranks_first_then_reads_only_the_passages_it_returns(thai_store):
    with Store.open(thai_store, create=False) as store:
        hits = store.search_cjk('"วั" OR "สถ"', 5)
        assert len(hits) == 5
        assert hits[0].path == "station.md"  # holds both grams
        rest = hits[1:]
        assert [h.score for h in rest] == sorted((h.score for h in rest), reverse=True)
        tied = [h.chunk_id for h in rest if h.score == rest[0].score]
        assert tied == sorted(tied)  # equal scores in passage order, as one ORDER BY did
        assert all(h.excerpt and h.text for h in hits)
