"""Reranking within a time budget (issue 13): best first in fused order, stopped before the budget is exceeded,
identical texts scored once, scores and query vectors cached per process, the reranker loaded beside the lists.

Time is a fake clock that the fake reranker advances, so nothing here depends on this machine's speed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conftest import FakeEmbedder, searcher_with, write
from puremind.config import load_settings
from puremind.indexer import index_vault
from puremind.models.lazy import Models
from puremind.results import search_result
from puremind.retrieval.pipeline import RetrievalParams, Searcher
from puremind.retrieval.rerank import PROBE_BATCH, BoundedCache, Reranking
from puremind.store import Store


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TimedReranker:
    """Scores by the number of the passage's characters that are digits ("9" scores highest); each pair costs
    `per_pair` seconds of the fake clock. Records every call."""

    def __init__(self, clock: Clock, per_pair: float = 0.1):
        self.clock = clock
        self.per_pair = per_pair
        self.calls: list[list[str]] = []
        self.fingerprint = "timed-reranker"

    def score(self, query, passages):
        self.calls.append(list(passages))
        self.clock.now += self.per_pair * len(passages)
        return np.array([sum(c.isdigit() for c in p) / 10 for p in passages], dtype=np.float64)

    @property
    def pairs(self) -> int:
        return sum(len(c) for c in self.calls)


def test_the_bounded_cache_drops_the_least_recently_used():
    cache: BoundedCache[int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (1, None, 3, 2)


def test_without_a_budget_every_candidate_is_scored_in_one_call():
    clock = Clock()
    model = TimedReranker(clock)
    run = Reranking(clock=clock).run(model, "q", [f"text {i}" for i in range(30)], budget=0)
    assert (run.reranked, run.candidates, run.computed, len(model.calls)) == (30, 30, 30, 1)
    assert not run.cut_by_budget and run.seconds == pytest.approx(3.0)


def test_a_budget_stops_before_it_is_exceeded_best_first_in_fused_order():
    clock = Clock()
    model = TimedReranker(clock, per_pair=0.1)
    texts = [f"passage number {i:02d} with the same length" for i in range(40)]
    run = Reranking(clock=clock).run(model, "query", texts, budget=1.0)
    # the first batch probes the speed; the next ones fill what is left, never beyond it
    assert len(model.calls[0]) == PROBE_BATCH
    assert run.seconds <= 1.0 + 1e-9
    assert run.cut_by_budget and 0 < run.reranked < 40
    assert sorted(run.scores) == list(range(run.reranked))  # the best-fused ones, none skipped
    assert run.reranked >= 9  # 1.0 s at 0.1 s a pair: all but a rounding's worth of it used


def test_identical_texts_are_scored_once_and_a_repeated_query_comes_from_the_cache():
    clock = Clock()
    model = TimedReranker(clock)
    reranking = Reranking(clock=clock)
    texts = ["a 1", "b 22", "a 1", "c 333", "b 22"]
    first = reranking.run(model, "q", texts, budget=0)
    assert (first.computed, first.repeated, first.reranked) == (3, 2, 5)
    assert first.scores[0] == first.scores[2] and first.scores[1] == first.scores[4]
    again = reranking.run(model, "q", texts, budget=0)
    assert (again.computed, again.cached, again.scores) == (0, 5, first.scores)
    other = reranking.run(model, "another query", texts, budget=0)
    assert other.computed == 3  # the query is part of the key


def test_the_cache_tells_models_apart():
    clock = Clock()
    reranking = Reranking(clock=clock)
    one, two = TimedReranker(clock), TimedReranker(clock)
    two.fingerprint = "another-reranker"
    reranking.run(one, "q", ["x 1", "y 2"], budget=0)
    assert reranking.run(two, "q", ["x 1", "y 2"], budget=0).computed == 2


@pytest.fixture
def many(tmp_path, fake_embedder):
    """Thirty notes about espresso: thirty candidates for every query about it."""
    vault = tmp_path / "vault"
    for i in range(30):
        write(vault, f"n{i:02d}.md", f"# Note {i}\n\nespresso grinder setting {'9' * (i % 7)} and dose {i}\n")
    db = tmp_path / "index.sqlite"
    with Store.open(db) as store:
        index_vault(store, vault, embedder=fake_embedder)
    return replace(load_settings(), vault=vault, db=db)


def _searcher(settings, embedder, reranker, clock, **params):
    return Searcher(settings.db, Models.given(embedder, reranker), RetrievalParams(**params),
                    reranking=Reranking(clock=clock))


def test_a_search_within_its_budget_says_how_many_were_reranked_and_marks_each_score(many, fake_embedder):
    clock = Clock()
    model = TimedReranker(clock, per_pair=0.1)
    s = _searcher(many, fake_embedder, model, clock, rerank_budget=1.0)
    out = s.search("espresso grinder", 20)
    assert out.mode == "reranked" and 0 < out.reranked < 20
    reranked, rest = out.hits[: out.reranked], out.hits[out.reranked:]
    assert [h.score for h in reranked] == sorted((h.score for h in reranked), reverse=True)
    fused = _searcher(many, fake_embedder, model, clock, rerank=False).search("espresso grinder", 30).hits
    fused_rest = [h for h in fused if h.chunk_id not in {r.chunk_id for r in reranked}]
    # the rest: in fused order, with their fusion values
    assert [(h.chunk_id, h.score) for h in rest] == [(h.chunk_id, h.score) for h in fused_rest[: len(rest)]]
    note = next(n for n in out.notes if n.startswith("reranked "))
    assert f"reranked {out.reranked} of 30 candidates" in note and "rerank_budget 1 s reached" in note
    result = search_result(out)
    assert [p.score_kind for p in result.results] == ["reranked"] * out.reranked + ["hybrid"] * len(rest)
    assert f"the first {out.reranked}:" in result.score_meaning
    from puremind.server import render_search

    headers = [line for line in render_search(result).splitlines() if line.startswith("[")]
    marked = ["not reranked" in line for line in headers]
    assert marked == [False] * out.reranked + [True] * len(rest)
    s.close()


def test_a_budget_that_does_not_bind_gives_the_results_of_no_budget(many, fake_embedder):
    clock = Clock()
    unbounded = _searcher(many, fake_embedder, TimedReranker(clock), clock, rerank_budget=0)
    roomy = _searcher(many, fake_embedder, TimedReranker(clock), clock, rerank_budget=1000)
    a, b = unbounded.search("espresso grinder", 10), roomy.search("espresso grinder", 10)
    assert a.reranked == b.reranked == 10
    assert [(h.path, h.score) for h in a.hits] == [(h.path, h.score) for h in b.hits]
    assert not any("reached" in n for n in a.notes + b.notes)
    unbounded.close()
    roomy.close()


def test_rerank_candidates_caps_what_the_reranker_reads(many, fake_embedder):
    clock = Clock()
    model = TimedReranker(clock)
    s = _searcher(many, fake_embedder, model, clock, rerank_budget=0, rerank_candidates=5)
    out = s.search("espresso grinder", 10)
    assert model.pairs == 5 and out.reranked == 5 and len(out.hits) == 10
    assert any("reranked 5 of 5 candidates" in n for n in out.notes)
    s.close()


def test_a_repeated_query_costs_neither_the_reranker_nor_the_embedder(many):
    clock = Clock()
    model = TimedReranker(clock)
    embedder = FakeEmbedder()
    s = _searcher(many, embedder, model, clock, rerank_budget=0)
    first = s.search("espresso grinder", 10)
    pairs, embedded = model.pairs, len(embedder.embedded)
    again = s.search("espresso grinder", 10)
    assert (model.pairs, len(embedder.embedded)) == (pairs, embedded)
    assert [(h.path, h.score) for h in again.hits] == [(h.path, h.score) for h in first.hits]
    assert any("from the cache" in n for n in again.notes)
    s.close()


def test_one_candidate_is_not_reranked_and_the_notes_say_why(tmp_path, vault, fake_embedder):
    db = tmp_path / "one.sqlite"
    with Store.open(db) as store:
        index_vault(store, vault, embedder=fake_embedder)
    settings = replace(load_settings(), vault=vault, db=db)
    clock = Clock()
    model = TimedReranker(clock)
    s = _searcher(settings, fake_embedder, model, clock, candidates=1)
    out = s.search("grinder", 5)
    assert out.mode == "hybrid" and model.calls == []
    assert any("nothing to reorder" in n for n in out.notes)
    s.close()


class LoadingReranker(TimedReranker):
    """Loads on first use, as the ONNX and torch rerankers do; `load()` loads now."""

    def __init__(self, clock):
        super().__init__(clock)
        self.loaded = False

    def load(self):
        self.loaded = True

    def score(self, query, passages):
        assert self.loaded, "the reranker must be loaded before the budget's clock starts"
        return super().score(query, passages)


def test_the_reranker_is_loaded_before_its_budget_starts_and_the_notes_say_so(many, fake_embedder):
    clock = Clock()
    model = LoadingReranker(clock)
    s = _searcher(many, fake_embedder, model, clock, rerank_budget=0)
    out = s.search("espresso grinder", 5)
    assert model.loaded and any(n.startswith("loaded the reranker in") for n in out.notes)
    assert not any(n.startswith("loaded the reranker") for n in s.search("espresso dose", 5).notes)
    s.close()


def test_the_configured_budget_and_candidates_reach_the_searcher(many, monkeypatch, tmp_path):
    from puremind.services import retrieval_params

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("[retrieval]\nrerank_budget = 2.5\nrerank_candidates = 12\n", encoding="utf-8")
    monkeypatch.setenv("PUREMIND_HOME", str(home))
    p = retrieval_params(load_settings())
    assert (p.rerank_budget, p.rerank_candidates) == (2.5, 12)
    assert retrieval_params(load_settings({"rerank_budget": "0"})).rerank_budget == 0.0


@pytest.mark.parametrize("value, message", [("-1", "between 0 and 86400"), ("soon", "must be a number"),
                                            ("nan", "must be a number")])
def test_a_bad_rerank_budget_is_a_config_error(value, message):
    from puremind.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_settings({"rerank_budget": value})


def test_the_budget_is_the_querys_so_a_repeat_answers_from_the_cache_with_the_same_ranking():
    clock = Clock()
    model = TimedReranker(clock, per_pair=0.1)
    reranking = Reranking(clock=clock)
    texts = [f"passage {i:02d} " + "7" * (i % 5) for i in range(40)]
    first = reranking.run(model, "query", texts, budget=1.0)
    assert first.cut_by_budget
    again = reranking.run(model, "query", texts, budget=1.0)
    assert again.computed == 0 and again.scores == first.scores and again.seconds < 0.1
    other = reranking.run(model, "another query", texts, budget=1.0)
    assert other.computed > 0  # a new query has a budget of its own


def test_once_the_candidates_change_a_repeated_query_has_a_budget_again():
    """After the index changed (a note edited, a new one written), the same query's new candidates are reranked
    within a budget of their own; what was scored before comes from the cache."""
    clock = Clock()
    model = TimedReranker(clock, per_pair=0.1)
    reranking = Reranking(clock=clock)
    texts = [f"passage {i:02d} " + "7" * (i % 5) for i in range(40)]
    first = reranking.run(model, "query", texts, budget=1.0)
    changed = ["a new note 999999999"] + texts[:-1]
    again = reranking.run(model, "query", changed, budget=1.0)
    assert 0 in again.scores and again.scores[0] == pytest.approx(0.9)  # the new passage, first in fused order
    assert again.computed >= 1 and again.cached >= first.reranked - 1
    assert again.seconds <= 1.0 + 1e-9


def test_a_strong_signal_skips_the_reranker_only_for_a_note_titled_exactly_as_asked_that_leads(tmp_path, fake_embedder):
    vault = tmp_path / "vault"
    write(vault, "tools/tar.md", "# tar\n\nArchive files: tar -czf out.tar.gz folder 1\n")
    write(vault, "notes/backup.md", "# Backups\n\nI archive with tar every night, tar and more tar 99\n")
    write(vault, "a/rsync.md", "# rsync\n\nCopy files over ssh 1\n")
    write(vault, "b/rsync.md", "# rsync\n\nThe rsync daemon 2\n")  # two notes named alike: no strong signal
    write(vault, "notes/espresso.md", "---\naliases: [coffee]\n---\n# Espresso\n\nThe grinder, the tar of coffee 3\n")
    db = tmp_path / "index.sqlite"
    with Store.open(db) as store:
        index_vault(store, vault, embedder=fake_embedder)
    settings = replace(load_settings(), vault=vault, db=db)
    clock = Clock()
    model = TimedReranker(clock)
    s = _searcher(settings, fake_embedder, model, clock)
    for query, path in (("tar", "tools/tar.md"), ("TAR", "tools/tar.md"), ("coffee", "notes/espresso.md")):
        out = s.search(query, 5)
        assert out.mode == "hybrid" and out.hits[0].path == path and model.calls == [], query
        assert "reranking skipped: strong signal: the query is exactly the title of the first note" in out.notes
    for query in ("rsync", "tar archive", "grinder"):  # two exact titles; no exact title
        model.calls.clear()
        out = s.search(query, 5)
        assert out.mode == "reranked" and model.calls, query
        assert not any("strong signal" in n for n in out.notes)
    s.close()
    off = _searcher(settings, fake_embedder, model, clock, strong_signal=False)
    assert off.search("tar", 5).mode == "reranked"
    off.close()
