"""`puremind eval` (puremind.evaluate, services.run_eval) and the rerank gate it feeds (`rerank = "auto"`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from conftest import FakeEmbedder, meta, write
from puremind import cli
from puremind.config import load_settings
from puremind.evaluate import KINDS, build_queries
from puremind.models.lazy import Models
from puremind.retrieval.gate import META_EVAL
from puremind.retrieval.pipeline import RetrievalParams, Searcher
from puremind.services import run_eval, run_index

WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ra", "si", "tu", "ve", "zo") for b in
         ("bar", "cel", "dun", "fim", "gor", "hap", "jix", "kel", "mop", "nur", "pyl", "quo", "rint", "sab", "tov")]


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def make_vault(root: Path, pairs: int = 24) -> dict[str, str]:
    """Twin notes (a and b of each pair share most of their text, so a sentence asks for one of two notes), each
    with a unique heading, and links between pairs. Returns path -> title."""
    rng = random.Random(7)
    titles = {}
    for i in range(pairs):
        shared = [_sentence(rng, rng.randint(10, 16)) for _ in range(8)]
        for twin in "ab":
            rel = f"pair{i:02d}/{twin}.md"
            title = f"Field report {i} {twin.upper()}"
            titles[rel] = title
            body = list(shared)
            body[0] = _sentence(rng, 12)  # the twins differ in a sentence or two
            link = f"See [[pair{(i + 1) % pairs:02d}/{twin}|report {(i + 1) % pairs} {twin} notes]]."
            write(root, rel, f"# {title}\n\n{' '.join(body[:4])}\n\n## Section {i}{twin} {rng.choice(WORDS)}\n\n"
                             f"{' '.join(body[4:])}\n\n{link}\n")
    return titles


class PlantedReranker:
    """Scores by planted relevance: 1 for a passage of the note that answers the query (its title first in the
    breadcrumb the reranker reads), 0 otherwise."""

    languages = ()
    fingerprint = "test/planted@1|fp32|chars=800"

    def __init__(self, answers: dict[str, str]):
        self.answers = answers  # query text -> the title of the note that answers it

    def score(self, query, passages):
        want = self.answers.get(query)
        return np.array([1.0 if want is not None and p.startswith(want + " >") or p.startswith(f"{want}\n")
                         else 0.0 for p in passages], dtype=np.float32)


class AdversarialReranker(PlantedReranker):
    """Scores the answering note lowest, the others at random."""

    fingerprint = "test/adversarial@1|fp32|chars=800"

    def score(self, query, passages):
        planted = super().score(query, passages)
        rng = np.random.default_rng(len(query))
        return np.where(planted > 0, 0.0, 0.5 + 0.5 * rng.random(len(passages))).astype(np.float32)


@pytest.fixture
def indexed(tmp_path: Path):
    vault = tmp_path / "vault"
    titles = make_vault(vault)
    settings = load_settings({"vault": vault, "rerank_budget": 0})
    run_index(settings, models=Models.given(FakeEmbedder()))
    return settings, titles


def _notes(vault: Path) -> list[tuple[str, str]]:
    return [(p.relative_to(vault).as_posix(), p.read_text()) for p in sorted(vault.rglob("*.md"))]


def _answers(settings, titles, seed=34, limit=300) -> dict[str, str]:
    return {q.text: titles[q.path] for q in build_queries(_notes(settings.vault), seed=seed, limit=limit)}


def _not_a_title(reranker, titles) -> str:
    """A query of the eval that is no note's title: a title query leads with its note and skips the reranker on
    that strong signal (tests/test_rerank.py), whatever the gate decides."""
    return next(q for q in reranker.answers if q not in set(titles.values()))


def _all(summary, name):
    config = next(c for c in summary["configurations"] if c["name"].startswith(name))
    return config["kinds"]["all"]


def test_queries_are_the_same_for_a_seed_and_every_kind_is_built(tmp_path):
    make_vault(tmp_path / "v")
    notes = _notes(tmp_path / "v")
    first = build_queries(notes, seed=5, limit=80)
    assert first == build_queries(list(reversed(notes)), seed=5, limit=80)
    assert first != build_queries(notes, seed=6, limit=80)
    assert {q.kind for q in first} == set(KINDS)
    assert len(first) == 80
    heading = next(q for q in first if q.kind == "heading")
    assert heading.heading == heading.text and heading.text.startswith("Section")
    link = next(q for q in first if q.kind == "link")
    assert link.text.startswith("report ") and link.path.endswith(".md")
    sentence = next(q for q in first if q.kind == "sentence")
    assert 5 <= len(sentence.text.split()) <= 27  # a third of 8 to 40 words left out


def test_eval_figures_match_an_independent_scoring_of_the_same_queries(indexed):
    settings, titles = indexed
    embedder = FakeEmbedder()
    summary = run_eval(settings, queries=60, seed=3, models=Models.given(embedder))
    queries = build_queries(_notes(settings.vault), seed=3, limit=60)
    assert summary["queries"]["ran"] == len(queries) == 60
    for name, models in (("keyword", Models.given()), ("hybrid", Models.given(embedder))):
        searcher = Searcher(settings.db, models, RetrievalParams(rerank=False))
        rr, top1, top5 = [], [], []
        for q in queries:
            paths = [(h.path, h.heading_path) for h in searcher.search(q.text, 10).hits]
            ok = [p == q.path and (q.heading is None or q.heading in hp) for p, hp in paths]
            first = ok.index(True) + 1 if True in ok else None
            rr.append(1 / first if first else 0.0)
            top1.append(first == 1)
            top5.append(first is not None and first <= 5)
        searcher.close()
        got = _all(summary, name)
        assert got["mrr@10"]["value"] == pytest.approx(np.mean(rr), abs=1e-4)
        assert got["hit@1"]["value"] == pytest.approx(np.mean(top1), abs=1e-4)
        assert got["hit@5"]["value"] == pytest.approx(np.mean(top5), abs=1e-4)
        assert got["mrr@10"]["low"] <= got["mrr@10"]["value"] <= got["mrr@10"]["high"]
    assert json.loads(meta(settings.db, META_EVAL)) == summary


def test_a_reranker_that_scores_by_planted_relevance_helps_and_auto_keeps_it(indexed):
    settings, titles = indexed
    embedder, reranker = FakeEmbedder(), PlantedReranker(_answers(settings, titles))
    summary = run_eval(settings, models=Models.given(embedder, reranker))
    cmp = summary["rerank_vs_hybrid"]
    assert cmp["verdict"] == "helps" and cmp["difference"]["low"] > 0 and cmp["reranked"] > cmp["hybrid"]
    auto = Searcher(settings.db, Models.given(embedder, reranker), RetrievalParams(rerank="auto", rerank_budget=0))
    outcome = auto.search(_not_a_title(reranker, titles), 5)
    assert outcome.mode == "reranked"
    assert not any("not run" in n for n in outcome.notes)


def test_an_adversarial_reranker_hurts_and_auto_turns_it_off_saying_why(indexed):
    settings, titles = indexed
    embedder, reranker = FakeEmbedder(), AdversarialReranker(_answers(settings, titles))
    summary = run_eval(settings, models=Models.given(embedder, reranker))
    cmp = summary["rerank_vs_hybrid"]
    assert cmp["verdict"] == "hurts" and cmp["difference"]["high"] < 0
    auto = Searcher(settings.db, Models.given(embedder, reranker), RetrievalParams(rerank="auto"))
    outcome = auto.search(_not_a_title(reranker, titles), 5)
    assert outcome.mode == "hybrid"
    said = next(n for n in outcome.notes if n.startswith('reranker not run (rerank = "auto")'))
    assert f"the reranker lowered MRR@10 {cmp['hybrid']:.2f} -> {cmp['reranked']:.2f}" in said
    # true keeps its meaning whatever the eval found
    forced = Searcher(settings.db, Models.given(embedder, reranker), RetrievalParams(rerank=True, rerank_budget=0))
    assert forced.search(_not_a_title(reranker, titles), 5).mode == "reranked"


def test_doctor_says_what_auto_decides_from_the_last_eval(indexed, monkeypatch):
    from puremind.doctor import _eval_check
    from puremind.retrieval.gate import rerank_gate

    settings, titles = indexed
    monkeypatch.setenv("PUREMIND_RERANK", "auto")
    monkeypatch.setenv("PUREMIND_EMBED_MODEL", "some/embedder")
    settings = load_settings({"vault": settings.vault})
    assert "no eval on this vault yet" in _eval_check(settings, {}).message
    summary = {"date": "2026-12-07T10:00:00Z", "queries": {"ran": 50}, "configurations": [],
               "models": {"reranker": {"name": settings.reranker}},
               "rerank_vs_hybrid": {"hybrid": 0.71, "reranked": 0.64,
                                    "difference": {"value": -0.07, "low": -0.1, "high": -0.04}}}
    check = _eval_check(settings, {META_EVAL: json.dumps(summary)})
    assert 'rerank = "auto": the reranker is off' in check.message and "lowered MRR@10 0.71 -> 0.64" in check.message
    # an eval of another reranker says nothing about this one; one whose interval holds zero turns it off
    assert rerank_gate(summary, "other/reranker").run
    summary["rerank_vs_hybrid"]["difference"].update(low=-0.01, high=0.03)
    assert not rerank_gate(summary, settings.reranker).run


def test_auto_runs_the_reranker_when_no_eval_was_run(indexed):
    settings, titles = indexed
    reranker = AdversarialReranker({})
    auto = Searcher(settings.db, Models.given(FakeEmbedder(), reranker), RetrievalParams(rerank="auto"))
    assert auto.search("field report", 5).mode == "reranked"


def test_ctrl_c_inside_a_query_leaves_no_summary_written(indexed):
    settings, titles = indexed

    class Interrupting(PlantedReranker):
        calls = 0

        def score(self, query, passages):
            Interrupting.calls += 1
            if Interrupting.calls == 6:
                raise KeyboardInterrupt
            return super().score(query, passages)

    with pytest.raises(KeyboardInterrupt):
        run_eval(settings, models=Models.given(FakeEmbedder(), Interrupting({})))
    assert meta(settings.db, META_EVAL) is None


def test_eval_json_prints_the_summary_and_runs_keyword_only_with_no_model(capsys, tmp_path):
    make_vault(tmp_path / "v", pairs=6)
    assert cli.run(["init", str(tmp_path / "v")]) == 0
    assert cli.run(["index"]) == 0
    capsys.readouterr()
    code = cli.run(["eval", "--json", "--queries", "20", "--seed", "9"])
    out = capsys.readouterr().out
    assert code == 0
    summary = json.loads(out)
    assert set(summary) >= {"date", "seed", "notes", "queries", "measures", "models", "configurations",
                            "rerank_vs_hybrid", "elapsed_s", "stopped_by_time_budget"}
    assert summary["seed"] == 9 and summary["queries"]["ran"] == 20 and summary["models"]["embedder"] is None
    keyword, hybrid, reranked = summary["configurations"]
    assert keyword["ran"] and set(keyword["kinds"]["all"]) == {"queries", "hit@1", "hit@5", "mrr@10", "latency_ms"}
    assert set(keyword["kinds"]["all"]["mrr@10"]) == {"value", "low", "high"}
    assert not hybrid["ran"] and "embedder" in hybrid["skipped"] and not reranked["ran"]
    assert summary["rerank_vs_hybrid"] is None
    text = json.dumps(summary)
    assert "Field report" not in text and "Section" not in text  # no query or answer is stored or printed
    assert cli.run(["eval", "--queries", "5"]) == 0
    shown = capsys.readouterr().out
    assert "keyword" in shown and "hybrid" in shown and "skipped" in shown
    cli.run(["doctor"])
    line = next(l for l in capsys.readouterr().out.splitlines() if "last eval" in l)
    assert "5 queries, MRR@10 keyword" in line and 'no reranker (embedder = "none")' in line


def test_eval_without_an_index_is_one_error_line(capsys, tmp_path):
    (tmp_path / "v").mkdir()
    assert cli.run(["init", str(tmp_path / "v")]) == 0
    capsys.readouterr()
    assert cli.run(["eval"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no index at")


def test_rerank_accepts_auto_in_config_and_environment(tmp_path, monkeypatch):
    from puremind.errors import ConfigError

    assert load_settings({"rerank": "auto"}).rerank == "auto"
    monkeypatch.setenv("PUREMIND_RERANK", "AUTO")
    assert load_settings().rerank == "auto"
    monkeypatch.setenv("PUREMIND_RERANK", "false")
    assert load_settings().rerank is False
    monkeypatch.setenv("PUREMIND_RERANK", "sometimes")
    with pytest.raises(ConfigError, match='true or false, or "auto"'):
        load_settings()


def test_the_random_weight_stand_in_reranker_is_found_to_hurt_and_auto_turns_it_off(indexed, tmp_path):
    """The stand-in for bge-reranker-v2-m3 (random weights, the architecture and tokenizer scheme of the real one):
    eval must find that it lowers MRR@10 beyond the interval, and `auto` must then leave it out."""
    from puremind.export import export_available

    if not export_available():
        pytest.skip("building the stand-in reranker needs torch and transformers (the [export] extra)")
    from puremind.models.folder_spec import generic_spec
    from puremind.models.torch_backend import TorchReranker
    from scripts.standins import build_xlmr_reranker

    settings, titles = indexed
    src = build_xlmr_reranker(tmp_path / "xlmr")
    reranker = TorchReranker(src, generic_spec(str(src), src, role="reranker"), device="cpu",
                             fingerprint="standin/xlmr@random|torch-fp32|chars=800")
    embedder = FakeEmbedder()
    try:
        summary = run_eval(settings, queries=80, models=Models.given(embedder, reranker))
        cmp = summary["rerank_vs_hybrid"]
        assert cmp["verdict"] == "hurts" and cmp["difference"]["high"] < 0, cmp
        auto = Searcher(settings.db, Models.given(embedder, reranker), RetrievalParams(rerank="auto"))
        outcome = auto.search("field report notes sample", 5)
        auto.close()
        assert outcome.mode == "hybrid"
        assert any(n.startswith('reranker not run (rerank = "auto")') for n in outcome.notes)
    finally:
        reranker.close()
