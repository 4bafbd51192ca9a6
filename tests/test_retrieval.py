"""Hybrid retrieval: RRF arithmetic, CJK grams, dense search, the Searcher's modes and snapshots."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import FakeEmbedder, searcher_with, write
from puremind.cjk import cjk_match_expression, cjk_terms, grams
from puremind.config import load_settings, replace
from puremind.errors import FingerprintMismatch, QueryError
from puremind.indexer import index_vault
from puremind.retrieval.dense import DenseIndex
from puremind.models.lazy import Models
from puremind.retrieval.fusion import reciprocal_rank_fusion
from puremind.retrieval.lexical import fts_all_words_expression
from puremind.retrieval.pipeline import RetrievalParams, Searcher
from puremind.store import Store


def test_rrf_sums_one_over_k_plus_rank_across_lists():
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["b", "d"]], k=60))
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 63)
    assert fused["d"] == pytest.approx(1 / 62)


def test_rrf_orders_best_first_and_breaks_ties_by_first_appearance():
    out = reciprocal_rank_fusion([["x", "y"], ["y", "x"]], k=0)
    assert [i for i, _ in out] == ["x", "y"]  # both 1/1 + 1/2: first seen wins
    assert out[0][1] == pytest.approx(1.5)
    assert reciprocal_rank_fusion([], k=60) == []


def test_rrf_counts_a_duplicate_in_one_list_once_at_its_best_rank():
    assert dict(reciprocal_rank_fusion([["a", "a", "b"]], k=1)) == {"a": pytest.approx(1 / 2), "b": pytest.approx(1 / 4)}


def test_rrf_refuses_a_negative_k():
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"]], k=-1)


def test_rrf_gives_ids_their_own_ranks_where_a_list_has_them():
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"]], k=60, ranks=[[1, 1, 3]]))
    assert fused == {"a": pytest.approx(1 / 61), "b": pytest.approx(1 / 61), "c": pytest.approx(1 / 63)}
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"], ["b"]], ranks=[[1]])


def test_equal_scores_share_the_best_rank_among_them():
    from puremind.retrieval.fusion import shared_ranks

    assert shared_ranks([9.0, 7.0, 7.0, 5.0, 5.0, 5.0, 1.0]) == [1, 2, 2, 4, 4, 4, 7]
    assert shared_ranks([2.0, 2.0]) == [1, 1] and shared_ranks([]) == []
    assert shared_ranks([3.0, 2.9999999]) == [1, 2]  # only equal scores tie


def test_a_list_cut_inside_a_run_of_equal_scores_leaves_that_run_out():
    from puremind.retrieval.fusion import before_cut_tie

    # the list is fetched one past the limit, to see whether the cut goes through a run of equal scores
    assert before_cut_tie([9.0, 5.0, 5.0, 5.0], limit=3) == 1  # which 5.0s made the cut is arbitrary
    assert before_cut_tie([9.0, 5.0, 5.0, 5.0], limit=4) == 4  # not cut: every match is here
    assert before_cut_tie([9.0, 8.0, 7.0, 7.0], limit=3) == 2
    assert before_cut_tie([9.0, 8.0, 7.0, 6.0], limit=3) == 3  # cut between different scores
    assert before_cut_tie([4.0, 4.0, 4.0], limit=2) == 0 and before_cut_tie([], limit=2) == 0


def test_fusion_at_a_depth_reads_each_list_only_that_deep_then_orders_the_rest_by_the_whole_lists():
    from puremind.retrieval.fusion import Ranked, fuse, fuse_at_depth

    # "x" is 4th in three lists; "a" is 1st in one. Whole-list RRF puts x first; at depth 3 it has no say there.
    lists = [Ranked(["a", "b", "c", "x", "d"]), Ranked(["e", "f", "g", "x"]), Ranked(["h", "i", "j", "x"])]
    assert fuse(lists, 60)[0][0] == "x"
    deep = fuse_at_depth(lists, 60, 3)
    order = [item for item, _ in deep]
    assert set(order[:9]) == set("abcefghij") and order[9:] == ["x", "d"]  # the rest: in whole-list order
    assert order[:3] == ["a", "e", "h"]  # ties among firsts keep the lists' order
    scores = [score for _, score in deep]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    assert fuse_at_depth(lists, 60, 0) == fuse(lists, 60)  # 0: the whole lists
    assert fuse_at_depth(lists, 60, 5) == fuse(lists, 60)  # every list within the depth


def test_a_fusion_depth_in_notes_reads_each_list_down_to_its_nth_distinct_note():
    from puremind.retrieval.fusion import Ranked, fuse_at_depth, head_by_group

    note = {"a1": "A", "a2": "A", "a3": "A", "b1": "B", "c1": "C"}
    assert head_by_group(["a1", "a2", "a3", "b1", "c1"], 2, note) == 4  # A's three passages, then B
    assert head_by_group(["a1", "x", "y"], 2, note) == 2  # an id of no known note counts as a note of its own
    assert head_by_group(["a1", "a2"], 5, note) == 2 and head_by_group([], 1, note) == 0
    # Depth 2 in passages: b1 (3rd in the first list) has no say, and c1, 1st in the other, leads alone.
    lists = [Ranked(["a1", "a2", "b1"]), Ranked(["c1", "b1"])]
    assert [i for i, _ in fuse_at_depth(lists, 60, 2)][:2] == ["a1", "c1"]
    # Depth 2 in notes: the first list reads A and B, so b1 (in both lists) comes first.
    assert [i for i, _ in fuse_at_depth(lists, 60, 2, note)][0] == "b1"
    # Ties are read all or none: depth 1 reaches every passage that shares the first rank.
    tied = [Ranked(["a1", "b1", "c1"], ranks=[1, 1, 3]), Ranked(["c1"])]
    out = fuse_at_depth(tied, 60, 1)
    assert [i for i, _ in out] == ["c1", "a1", "b1"] and out[1][1] == out[2][1] > 0.01  # b1 is not cut off


def test_the_searcher_counts_the_fusion_depth_in_notes(monkeypatch, tmp_path, vault, fake_embedder):
    from puremind.retrieval import pipeline

    write(vault, "long.md", "# Long\n\n" + "\n\n".join(f"## Part {i}\n\nrsync {_filler(300, f'p{i}w')}" for i in range(4)))
    write(vault, "short.md", "# Short\n\nrsync once.\n")
    db = tmp_path / "depth.sqlite"
    with Store.open(db) as store:
        index_vault(store, vault, embedder=fake_embedder)
    seen: list = []
    real = pipeline.fuse_at_depth

    def spy(lists, k, depth, group=None):
        seen.append((depth, [list(r.ids) for r in lists], dict(group or {})))
        return real(lists, k, depth, group)

    monkeypatch.setattr(pipeline, "fuse_at_depth", spy)
    s = Searcher(db, Models.given(fake_embedder), RetrievalParams(rerank=False, fusion_depth=1))
    try:
        hits = s.search("rsync", 10).hits
    finally:
        s.close()
    (depth, lists, group), = seen
    assert depth == 1 and group  # every passage of every list is mapped to its note
    assert all(cid in group for ids in lists for cid in ids)
    notes = {path: {group[h.chunk_id] for h in hits if h.path == path} for path in ("long.md", "short.md")}
    assert len([h for h in hits if h.path == "long.md"]) > 1  # a note of several passages: one note in the map
    assert len(notes["long.md"]) == 1 and len(notes["short.md"]) == 1 and notes["long.md"] != notes["short.md"]


def test_the_fusion_depth_is_configured_and_reaches_the_searcher(monkeypatch, tmp_path):
    import dataclasses

    from puremind.config import Settings, load_settings
    from puremind.errors import ConfigError
    from puremind.retrieval.pipeline import RetrievalParams
    from puremind.services import retrieval_params

    assert RetrievalParams().fusion_depth == next(f.default for f in dataclasses.fields(Settings) if f.name == "fusion_depth") == 7
    (tmp_path / "config.toml").write_text("[retrieval]\nfusion_depth = 0\n", encoding="utf-8")
    monkeypatch.setenv("PUREMIND_HOME", str(tmp_path))
    assert retrieval_params(load_settings()).fusion_depth == 0
    (tmp_path / "config.toml").write_text("[retrieval]\nfusion_depth = -1\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        load_settings()


def test_cjk_runs_become_characters_and_overlapping_pairs():
    assert grams("京都駅") == ["京", "都", "駅", "京都", "都駅"]
    assert cjk_terms("Trip to 京都 and 서울역!") == "京 都 京都 서 울 역 서울 울역"
    assert cjk_terms("plain English") == ""
    assert cjk_match_expression("nothing here") is None
    assert cjk_match_expression("京都") == '"京" OR "都" OR "京都"'


def test_thai_lao_khmer_and_burmese_runs_become_characters_and_pairs_too():
    assert cjk_terms("Cafe กาแฟ!") == "ก า แ ฟ กา าแ แฟ"
    assert cjk_terms("ລາວ") == "ລ າ ວ ລາ າວ"
    assert cjk_terms("ខ្មែរ").split()[:2] == ["ខ", "្"]
    assert cjk_terms("မြန်") .startswith("မ ြ")
    assert cjk_terms("Привет, мир") == ""  # spaced scripts keep to BM25


def test_dense_search_returns_the_most_similar_ids_best_first():
    ids = np.array([10, 20, 30], dtype=np.int64)
    m = np.eye(3, dtype=np.float16)

    class FakeStore:
        def change_counter(self):
            return 1

        def vectors(self):
            return ids, m

    dense = DenseIndex()
    dense.refresh(FakeStore())
    dense.refresh(FakeStore())
    assert dense.loads == 1, "an unchanged counter must not reload the matrix"
    q = np.array([0.1, 0.9, 0.3], dtype=np.float32)
    assert [i for i, _ in dense.search(q, 2)] == [20, 30]
    with pytest.raises(FingerprintMismatch):
        dense.search(np.ones(4, dtype=np.float32), 2)


class FakeReranker:
    """Scores by the share of query words in the passage; records what it read."""

    def __init__(self):
        self.passages: list[str] = []

    def score(self, query, passages):
        self.passages += list(passages)
        words = set(query.lower().split())
        return np.array([len(words & set(p.lower().split())) / max(len(words), 1) for p in passages], dtype=np.float32)


@pytest.fixture
def indexed(tmp_path: Path, vault: Path, fake_embedder: FakeEmbedder):
    write(vault, "japan.md", "# 旅行\n\n京都駅から歩いて十分の旅館に二泊した。\n")
    write(vault, "korea.md", "# 여행\n\n서울역 근처 호텔에 묵었다.\n")
    db = tmp_path / "index.sqlite"
    store = Store.open(db)
    index_vault(store, vault, embedder=fake_embedder)
    store.close()
    settings = replace(load_settings(), vault=vault, db=db)
    return settings


def test_hybrid_search_with_the_reranker_gives_probabilities(indexed, fake_embedder):
    reranker = FakeReranker()
    s = searcher_with(indexed, embedder=fake_embedder, reranker=reranker)
    out = s.search("grinder espresso dose", 3)
    assert out.mode == "reranked" and out.hits[0].path == "coffee.md"
    assert all(0.0 <= h.score <= 1.0 for h in out.hits)
    assert [h.score for h in out.hits] == sorted((h.score for h in out.hits), reverse=True)
    s.close()


def test_the_reranker_reads_only_the_first_rerank_chars_of_each_candidate(indexed, fake_embedder):
    reranker = FakeReranker()
    s = searcher_with(replace(indexed, rerank_chars=20), embedder=fake_embedder, reranker=reranker)
    s.search("grinder", 5)
    assert reranker.passages and all(len(p) <= 20 for p in reranker.passages)


def test_without_the_reranker_scores_are_rrf_values(indexed, fake_embedder):
    s = searcher_with(indexed, rerank=False, embedder=fake_embedder)
    out = s.search("grinder espresso", 5)
    assert out.mode == "hybrid" and out.hits[0].path == "coffee.md"
    p = RetrievalParams()  # a first place in each list the query feeds: keyword, all words, dense, titles
    assert 0 < out.hits[0].score <= (p.lexical_weight + p.all_words_weight + p.dense_weight + p.title_weight) / 61


def test_lexical_only_gives_bm25_scores(indexed, fake_embedder):
    out = searcher_with(indexed, embedder=fake_embedder).search("grinder", 5, lexical_only=True)
    assert out.mode == "lexical" and out.hits[0].score > 0.0


def test_hybrid_search_matches_cjk_text_that_keyword_search_alone_misses(indexed, fake_embedder):
    s = searcher_with(indexed, rerank=False, embedder=fake_embedder)
    assert s.search("京都 旅館", 5, lexical_only=True).hits == []
    assert s.search("京都 旅館", 5).hits[0].path == "japan.md"
    assert s.search("서울", 5).hits[0].path == "korea.md"


def test_hybrid_search_finds_a_thai_note_by_part_of_an_unspaced_run(tmp_path, vault, fake_embedder):
    write(vault, "thai.md", "# ร้านกาแฟ\n\nร้านกาแฟใกล้สถานีรถไฟเปิดทุกวันตั้งแต่เจ็ดโมงเช้า\n")
    write(vault, "other.md", "# Notes\n\nA note about trains in English.\n")
    db = tmp_path / "thai.sqlite"
    with Store.open(db) as store:
        index_vault(store, vault, embedder=fake_embedder)
    s = searcher_with(replace(load_settings(), vault=vault, db=db), rerank=False, embedder=fake_embedder)
    assert s.search("สถานีรถไฟ", 5, lexical_only=True).hits == []  # the spec's BM25: one run is one word
    assert s.search("สถานีรถไฟ", 5).hits[0].path == "thai.md"


def test_a_changed_embedder_is_refused(indexed):
    with pytest.raises(FingerprintMismatch, match="searches are refused"):
        searcher_with(indexed, embedder=FakeEmbedder(fingerprint="other"), rerank=False).search("grinder", 5)


def test_an_empty_query_is_refused_before_any_model_loads(indexed):
    s = searcher_with(indexed)
    with pytest.raises(QueryError):
        s.search("  ", 5)


def test_the_dense_matrix_reloads_only_when_the_index_changed(indexed, fake_embedder, vault):
    s = searcher_with(indexed, rerank=False, embedder=fake_embedder)
    s.search("grinder", 5)
    s.search("deploy", 5)
    assert s.dense_loads == 1
    write(vault, "new.md", "# New\n\nA fresh note about the burr grinder.\n")
    store = Store.open(indexed.db)
    index_vault(store, vault, embedder=fake_embedder)
    store.close()
    assert any(h.path == "new.md" for h in s.search("burr grinder", 5).hits)
    assert s.dense_loads == 2


def test_searches_during_writes_read_consistent_snapshots(indexed, fake_embedder, vault):
    s = searcher_with(indexed, rerank=False, embedder=fake_embedder)
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer():
        try:
            for i in range(15):
                write(vault, f"w{i}.md", f"# W{i}\n\ngrinder note number {i} " + "filler words " * 30 + "\n")
                store = Store.open(indexed.db)
                index_vault(store, vault, embedder=fake_embedder, batch_files=1)
                store.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            stop.set()

    t = threading.Thread(target=writer)
    t.start()
    seen = 0
    while not stop.is_set():
        out = s.search("grinder note", 10)
        # Every hit must be a complete chunk of the snapshot it came from: text present, path known.
        assert all(h.text and h.path for h in out.hits)
        seen += 1
    t.join()
    assert not errors and seen > 0


def test_a_long_lived_searcher_follows_an_index_file_that_was_deleted_and_made_again(indexed, fake_embedder, vault):
    s = searcher_with(indexed, rerank=False, embedder=fake_embedder)
    assert s.search("grinder", 5).hits
    for suffix in ("", "-wal", "-shm"):
        Path(str(indexed.db) + suffix).unlink(missing_ok=True)
    from puremind.errors import StoreError

    with pytest.raises(StoreError, match="no index"):
        s.search("grinder", 5)
    (vault / "coffee.md").unlink()
    store = Store.open(indexed.db)
    index_vault(store, vault, embedder=fake_embedder)
    store.close()
    assert [h.path for h in s.search("grinder", 5, lexical_only=True).hits] == []
    assert s.search("deploy", 5).hits[0].path == "projects/deploy.md"


def test_fts_all_words_expression_needs_every_word():
    assert fts_all_words_expression("rsync") is None
    assert fts_all_words_expression('rsync "delete" Rsync') == '"rsync" AND """delete"""'


def test_a_passage_with_every_word_of_the_query_is_lifted_by_the_all_words_list(tmp_path, vault, fake_embedder):
    write(vault, "all.md", "# Sync\n\nUse rsync to delete files on the remote side, with care and a dry run first.\n")
    write(vault, "b.md", "# Copy\n\nrsync rsync rsync delete delete delete.\n")
    write(vault, "c.md", "# Far\n\nremote remote remote rsync rsync rsync.\n")
    db = tmp_path / "words.sqlite"
    with Store.open(db) as store:
        index_vault(store, vault, embedder=fake_embedder)
    query = "rsync delete remote"

    def first(**params) -> str:
        s = Searcher(db, Models.given(fake_embedder), RetrievalParams(rerank=False, **params))
        try:
            return s.search(query, 3).hits[0].path
        finally:
            s.close()

    assert first(all_words_weight=0.0) != "all.md"  # BM25 and the embedder both prefer the repeated words
    assert first() == "all.md"


# -- keyword-only search weighs each passage's whole note (issue 12) ----------------------------------------------


def _filler(n: int, seed: str) -> str:
    return " ".join(f"{seed}{i % 97}" for i in range(n))


@pytest.fixture
def spread(tmp_path: Path, vault: Path):
    """`spread.md` holds the query's two words in two sections (two chunks, one word each); `short.md` holds one
    of them in one short passage, which BM25 prefers passage by passage."""
    write(vault, "spread.md", f"# Spread\n\n## One\n\nkettle {_filler(330, 'x')}\n\n## Two\n\ndescaling {_filler(330, 'y')}\n")
    write(vault, "short.md", f"# Short\n\nthe kettle {_filler(120, 's')}\n")
    write(vault, "descale.md", f"# Descale\n\ndescaling {_filler(400, 'd')}\n")
    for word in ("vinegar", "citric", "lemon", "water"):  # other notes the search finds: a whole note is judged
        write(vault, f"{word}.md", f"# {word.title()}\n\n{word} {_filler(250, 'z')}\n")  # among the notes found
    db = tmp_path / "spread.sqlite"
    with Store.open(db) as store:
        index_vault(store, vault)
    con = sqlite3.connect(db)
    try:
        chunks = con.execute("SELECT COUNT(*) FROM chunks JOIN files ON files.id = chunks.file_id"
                             " WHERE files.path = 'spread.md'").fetchone()[0]
    finally:
        con.close()
    assert chunks >= 2, "the fixture needs spread.md cut into two chunks"
    return replace(load_settings(), vault=vault, db=db)


def test_keyword_search_adds_each_passage_s_whole_note_evidence_to_its_bm25(spread):
    from puremind.retrieval.lexical import fts_match_expression
    from puremind.retrieval.pipeline import NOTE_WEIGHT

    query = "kettle descaling vinegar citric lemon water"
    alone = Searcher(spread.db, Models(None, None), RetrievalParams(note_weight=0.0)).search(query, 50, lexical_only=True)
    out = searcher_with(spread).search(query, 50, lexical_only=True)
    with Store.open(spread.db, create=False) as store:
        notes = store.note_scores([h.path for h in alone.hits], fts_match_expression(query))
    by_chunk = {h.chunk_id: h.score for h in alone.hits}
    assert out.mode == "lexical" and len(out.hits) == len(alone.hits) == 8  # 7 notes, spread.md in two
    assert [h.score for h in out.hits] == pytest.approx(
        [by_chunk[h.chunk_id] + NOTE_WEIGHT * notes.get(h.path, 0.0) for h in out.hits])
    scores = [h.score for h in out.hits]
    assert scores == sorted(scores, reverse=True) and scores[-1] > 0  # still BM25 scores, best first
    assert searcher_with(spread).search(query, 3, lexical_only=True).hits == out.hits[:3]  # the limit cuts last


def test_note_evidence_can_lift_a_passage_above_a_better_one_of_a_weaker_note():
    from puremind.retrieval.pipeline import with_note_evidence
    from puremind.store import Hit

    def hit(cid: int, path: str, score: float) -> Hit:
        return Hit(chunk_id=cid, path=path, heading_path=(), start_line=1, end_line=1, score=score, text="", excerpt="")

    hits = [hit(1, "one-word.md", 3.0), hit(2, "every-word.md", 2.0), hit(3, "every-word.md", 1.5), hit(4, "x.md", 1.0)]
    out = with_note_evidence(hits, {"every-word.md": 1.0, "one-word.md": 0.2}, 2.0)
    assert [(h.chunk_id, h.score) for h in out] == [(2, 4.0), (3, 3.5), (1, 3.4), (4, 1.0)]


def test_note_scores_judge_whole_notes_among_the_notes_asked_for(spread):
    from puremind.retrieval.lexical import fts_match_expression

    with Store.open(spread.db, create=False) as store:
        notes = ["short.md", "spread.md", "short.md", "descale.md", "vinegar.md", "citric.md", "lemon.md", "water.md"]
        scores = store.note_scores(notes, fts_match_expression("kettle descaling"))
        assert set(scores) == {"short.md", "spread.md", "descale.md"}
        assert scores["spread.md"] > max(scores["short.md"], scores["descale.md"]) > 0
        assert store.note_scores(["short.md", "lemon.md"], fts_match_expression("descaling")) == {}
        few = ["spread.md", "short.md", "lemon.md"]
        assert set(store.note_scores(few, fts_match_expression("descaling"))) == {"spread.md"}
        assert store.note_scores(few, fts_match_expression("descaling"), max_chars=100) == {}  # read: 100 characters
        assert store.note_scores([], fts_match_expression("kettle")) == {}
        with pytest.raises(QueryError):
            store.note_scores(["short.md"], "kettle AND")


# -- ties in the fusion (issue 12: tldr-pages' alias pages share one sentence) -----------------------------------


@pytest.fixture
def boilerplate(tmp_path: Path):
    """Eight notes that say only the same sentence, one that says it of `quux`, and one about quux alone."""
    root = tmp_path / "boiler"
    for i in range(8):
        write(root, f"alias-{i}.md", "# Alias\n\nThis zorb command is an alias.\n")
    write(root, "gquux.md", "# Alias\n\nThis zorb command is an alias of quux.\n")
    write(root, "quux.md", "# Quux\n\nquux lists files; quux -l lists them long.\n")
    db = tmp_path / "boiler.sqlite"
    with Store.open(db) as store:
        index_vault(store, root)
    return db


def _fused(db: Path, query: str, **params) -> list[tuple[str, float]]:
    s = Searcher(db, Models(None, None), RetrievalParams(rerank=False, **params))
    try:
        return [(h.path, h.score) for h in s.search(query, 10).hits]
    finally:
        s.close()


def test_passages_a_list_cannot_tell_apart_share_a_rank_in_the_fusion(boilerplate):
    out = _fused(boilerplate, "zorb command alias")
    assert len(out) == 9  # gquux.md matches too, with a longer passage: below the eight
    assert len({score for path, score in out if path.startswith("alias-")}) == 1
    assert out[-1][0] == "gquux.md" and out[-1][1] < out[0][1]


def test_a_run_of_equal_scores_cut_by_the_candidate_limit_lifts_none_of_its_passages(boilerplate):
    query = "zorb command alias quux"
    out = _fused(boilerplate, query, candidates=5)
    # The keyword list holds gquux.md, quux.md and three of the eight equal alias notes, in file order: those
    # three are left out, so that they do not pass the other five by their order in the index alone.
    assert [p for p, _ in out][:2] == ["gquux.md", "quux.md"]
    assert not [p for p, _ in out if p.startswith("alias-")]
    assert [p for p, _ in _fused(boilerplate, query, candidates=20)][:2] == ["gquux.md", "quux.md"]


def test_only_ties_and_no_other_list_still_find_them(boilerplate):
    out = _fused(boilerplate, "zorb", candidates=3)  # every list is one cut run of equal scores
    assert len(out) == 3 and len({score for _, score in out}) == 1


def test_decomposed_and_composed_unicode_find_each_other(tmp_path):
    """Text written on a Mac may be decomposed (NFD): Hangul as loose jamo, kana with a separate voicing mark.
    The index holds NFC and queries are searched as NFC, so either form finds the other."""
    import unicodedata

    from puremind.chunker import chunk_markdown, note_title
    from puremind.indexer import index_vault

    nfd = lambda s: unicodedata.normalize("NFD", s)  # noqa: E731
    assert chunk_markdown(nfd("# 장애 보고\n\n서버 재시작 절차.\n"))[0].text == "# 장애 보고\n\n서버 재시작 절차."
    assert note_title("no heading", nfd("회의록.md")).title == "회의록"
    vault = tmp_path / "vault"
    write(vault, "b.md", nfd("# 장애 보고\n\n서버 재시작 절차를 기록했다.\n"))
    write(vault, "c.md", "# Notes\n\nがぎぐ and more\n")
    write(vault, nfd("회의록.md"), "배포 일정.\n")
    settings = load_settings({"vault": vault, "db": tmp_path / "index.sqlite"})
    store = Store.open(settings.db)
    index_vault(store, vault)
    store.close()
    searcher = searcher_with(settings)
    for lexical_only in (True, False):
        assert [h.path for h in searcher.search("재시작 절차", 3, lexical_only=lexical_only).hits][:1] == ["b.md"]
        assert [h.path for h in searcher.search(nfd("がぎぐ"), 3, lexical_only=lexical_only).hits][:1] == ["c.md"]
    # an exact title in either form leads: the note named in NFD on disk, asked for in NFC
    assert unicodedata.normalize("NFC", searcher.search("회의록", 3).hits[0].path) == "회의록.md"
    searcher.close()


def test_a_lone_surrogate_in_a_query_separates_words_instead_of_failing(tmp_path):
    """An argv byte that is not UTF-8 arrives as a lone surrogate (and JSON may escape one): SQLite cannot take
    it, and hybrid search failed with an unexpected UnicodeEncodeError."""
    vault = tmp_path / "vault"
    write(vault, "Café menu.md", "Espresso.\n")
    write(vault, "b.md", "The cafe menu list.\n")
    for i in range(4):
        write(vault, f"other-{i}.md", "Plain words about rain.\n")
    settings = load_settings({"vault": vault, "db": tmp_path / "index.sqlite"})
    with Store.open(settings.db) as store:
        index_vault(store, vault)
    searcher = searcher_with(settings)
    assert [h.path for h in searcher.search("caf\udce9 menu", 5).hits] == ["b.md"]
    assert "Café menu.md" in [h.path for h in searcher.search("menu\udce9", 5).hits]
    searcher.close()
