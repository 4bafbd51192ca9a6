"""bench/quality.py: the metric functions, the data loaders and the keyword / dense paths on tiny synthetic data.

The metrics are checked against values worked out by hand; the end-to-end tests index a few notes through
pureMind's own indexer and Searcher (no model: a bag-of-words stand-in embedder where a vector is needed).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import quality as q  # noqa: E402
from puremind.config import load_settings  # noqa: E402


# ---- metrics ------------------------------------------------------------------------------------------------------


def test_dedupe_keeps_first_positions():
    assert q.dedupe(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]


def test_recall_at_k_is_the_share_of_relevant_found():
    ranked = ["x1", "e1", "x2", "x3", "x4", "x5", "e2"]
    assert q.recall_at_k(ranked, {"e1", "e2"}, 5) == 0.5
    assert q.recall_at_k(ranked, {"e1", "e2"}, 7) == 1.0
    assert q.recall_at_k(ranked, {"e1", "e2"}, 1) == 0.0
    assert q.recall_at_k(["e1"], {"e1", "e2", "e3"}, 10) == pytest.approx(1 / 3)


def test_recall_of_a_query_without_relevant_documents_is_refused():
    with pytest.raises(ValueError):
        q.recall_at_k(["a"], set(), 5)


def test_recall_any_and_all():
    ranked = ["x", "e1", "y", "z", "w", "e2"]
    assert q.recall_any_at_k(ranked, {"e1", "e2"}, 5) == 1.0
    assert q.recall_all_at_k(ranked, {"e1", "e2"}, 5) == 0.0
    assert q.recall_all_at_k(ranked, {"e1", "e2"}, 6) == 1.0
    assert q.recall_any_at_k(ranked, {"e9"}, 10) == 0.0


def test_ndcg_binary_by_hand():
    # one relevant at rank 2: DCG = 1/log2(3), IDCG = 1
    assert q.ndcg_at_k(["x", "a"], {"a"}, 10) == pytest.approx(1 / math.log2(3))
    assert q.ndcg_at_k(["a", "b", "x"], {"a", "b"}, 10) == pytest.approx(1.0)
    # two relevant, found at ranks 1 and 3: (1 + 1/2) / (1 + 1/log2(3))
    assert q.ndcg_at_k(["a", "x", "b"], {"a", "b"}, 10) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    # cut at k: the relevant doc at rank 11 does not count
    assert q.ndcg_at_k(["x"] * 10 + ["a"], {"a"}, 10) == 0.0
    assert q.ndcg_at_k(["a"], set(), 10) == 0.0


def test_ndcg_ideal_is_capped_at_k():
    # 12 relevant, the first 10 ranks all relevant: a perfect @10 even though two are not shown
    rel = {f"r{i}" for i in range(12)}
    assert q.ndcg_at_k([f"r{i}" for i in range(10)], rel, 10) == pytest.approx(1.0)


def test_ndcg_graded():
    gains = {"a": 2.0, "b": 1.0}
    dcg = 1.0 / 1 + 2.0 / math.log2(3)
    idcg = 2.0 / 1 + 1.0 / math.log2(3)
    assert q.ndcg_at_k(["b", "a"], gains, 10) == pytest.approx(dcg / idcg)


def test_mrr_at_k():
    assert q.mrr_at_k(["x", "y", "a", "b"], {"a", "b"}, 10) == pytest.approx(1 / 3)
    assert q.mrr_at_k(["x"] * 10 + ["a"], {"a"}, 10) == 0.0
    assert q.mrr_at_k(["a"], {"a"}, 10) == 1.0


def test_lme_metrics_on_distinct_sessions():
    m = q.lme_metrics(["s1", "a1", "s2", "s3", "s4", "s5", "a2"], ["a1", "a2"])
    assert m["R@5"] == 0.5 and m["R@10"] == 1.0 and m["any@5"] == 1.0 and m["all@5"] == 0.0
    assert m["NDCG@10"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(8)) / (1 + 1 / math.log2(3)))


def test_beir_metrics_use_qrels():
    ranked = ["d3", "d1"] + [f"x{i}" for i in range(120)] + ["d2"]
    m = q.beir_metrics(ranked, {"d1": 1, "d2": 1, "d9": 0})
    assert m["MRR@10"] == 0.5
    assert m["R@100"] == 0.5  # d2 is past rank 100; d9 has relevance 0 and does not count
    assert m["nDCG@10"] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))


def test_known_item_metrics_drop_siblings_first():
    m = q.known_item_metrics(["sib", "x", "gold"], "gold", ["sib"])
    assert m == {"R@1": 0.0, "R@5": 1.0, "R@10": 1.0, "MRR": 0.5}
    # without the drop the sibling costs a rank
    assert q.known_item_metrics(["sib", "x", "gold"], "gold")["MRR"] == pytest.approx(1 / 3)
    # the gold note is never dropped, even if listed among the siblings
    assert q.known_item_metrics(["gold"], "gold", ["gold"])["R@1"] == 1.0


def test_mean_by_and_slices_below():
    recs = {
        "keyword (BM25)": [{"lang": "en", "metrics": {"R@5": 1.0}}, {"lang": "zh", "metrics": {"R@5": 0.0}}],
        "hybrid": [{"lang": "en", "metrics": {"R@5": 0.0}}, {"lang": "zh", "metrics": {"R@5": 1.0}}],
    }
    assert q.mean_by(recs["hybrid"], "R@5") == {None: 0.5}
    assert q.mean_by(recs["hybrid"], "R@5", lambda r: r["lang"]) == {"en": 0.0, "zh": 1.0}
    below = q.slices_below(recs, "keyword (BM25)", "R@5", {"lang": lambda r: r["lang"], "all": lambda r: "all"})
    assert below == [("hybrid", "lang", "en", 0.0, 1.0)]  # equal overall means are not "below"


# ---- loaders -----------------------------------------------------------------------------------------------------


def _lme_record(qid, qtype, question, evidence, sessions):
    return {
        "question_id": qid, "question_type": qtype, "question": question, "question_date": "2023/05/30 (Tue) 23:40",
        "answer": "x", "answer_session_ids": evidence,
        "haystack_session_ids": [s[0] for s in sessions], "haystack_dates": ["2023/05/01"] * len(sessions),
        "haystack_sessions": [s[1] for s in sessions],
    }


def _turns(*pairs):
    out = []
    for user, assistant in pairs:
        out.append({"role": "user", "content": user})
        out.append({"role": "assistant", "content": assistant})
    return out


LME = [
    _lme_record("q1", "single-session-user", "Which breed is my dog Biscuit?", ["answer_1"], [
        ("s_a", _turns(("How do I repot a cactus?", "Use gritty soil and a terracotta pot."))),
        ("answer_1", _turns(("My dog Biscuit is a beagle and loves walks.", "Beagles need plenty of exercise."))),
        ("s_b", _turns(("Recommend a thriller novel.", "Try a classic detective story."))),
    ]),
    _lme_record("q2_abs", "single-session-user", "What is my cat called?", [], [
        ("s_c", _turns(("Tell me about volcanoes.", "Volcanoes vent magma."))),
    ]),
    _lme_record("q3", "multi-session", "How many marathons did I run with my sister?", ["answer_2", "answer_3"], [
        ("answer_2", _turns(("I ran the Berlin marathon with my sister.", "Congratulations on Berlin!"))),
        ("s_d", _turns(("What is a good pasta recipe?", "Carbonara with eggs and pecorino."))),
        ("answer_3", _turns(("My sister and I finished the Boston marathon too.", "Two marathons together!"))),
    ]),
]


def test_load_longmemeval_and_abstention_exclusion(tmp_path):
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(LME))
    questions = q.load_longmemeval(path)
    assert [x.id for x in questions] == ["q1", "q2_abs", "q3"]
    assert questions[1].abstention and not questions[0].abstention
    assert questions[0].sessions[1].id == "answer_1" and questions[0].sessions[1].turns[0][0] == "user"
    assert [x.id for x in q.scored_questions(questions)] == ["q1", "q3"]


def test_load_longmemeval_refuses_uneven_lists(tmp_path):
    bad = dict(LME[0], haystack_dates=["d"])
    (tmp_path / "bad.json").write_text(json.dumps([bad]))
    with pytest.raises(ValueError):
        q.load_longmemeval(tmp_path / "bad.json")


def test_exchanges_group_a_user_turn_with_the_assistant_turns_after_it():
    turns = [("assistant", "Welcome!"), ("user", "hi"), ("assistant", "hello"), ("assistant", "anything else?"),
             ("user", "bye")]
    assert q.exchanges(turns) == [
        "Assistant: Welcome!",
        "User: hi\n\nAssistant: hello\n\nAssistant: anything else?",
        "User: bye",
    ]


def test_session_markdown_one_paragraph_per_turn():
    assert q.session_markdown([("user", " hi "), ("assistant", "hello")]) == "**User:** hi\n\n**Assistant:** hello\n"


def test_load_beir(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(
        json.dumps({"_id": "10", "title": "T", "text": "body"}) + "\n" + json.dumps({"_id": "11", "text": "b2"}) + "\n")
    (tmp_path / "queries.jsonl").write_text(
        "\n".join(json.dumps({"_id": i, "text": f"query {i}"}) for i in ("1", "2", "3")) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t10\t1\n1\t11\t1\n3\t11\t2\n")
    data = q.load_beir(tmp_path)
    assert data.corpus == {"10": ("T", "body"), "11": ("", "b2")}
    assert data.queries == {"1": "query 1", "3": "query 3"}  # only the queries that have qrels
    assert data.qrels == {"1": {"10": 1.0, "11": 1.0}, "3": {"11": 2.0}}
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n9\t10\t1\n")
    with pytest.raises(ValueError):
        q.load_beir(tmp_path)


def test_beir_markdown():
    assert q.beir_markdown(" A  title\n", "Text.") == "# A title\n\nText.\n"
    assert q.beir_markdown("", "Text.") == "Text.\n"


ML_NOTES = [
    {"slug": "g-en01", "lang": "en", "title": "Orchard VPN rollout", "body": "The VPN switched to split tunneling.",
     "split": "dev", "siblings": ["g-zh01"]},
    {"slug": "g-zh01", "lang": "zh", "title": "果园VPN上线", "body": "果园VPN改为分离隧道，只有内网流量走隧道。",
     "split": "test", "siblings": ["g-en01"]},
    {"slug": "g-zh02", "lang": "zh", "title": "季度预算冻结", "body": "财务部冻结了第三季度的可支配支出。",
     "split": "test", "siblings": []},
]
ML_QUERIES = [
    {"qid": "g-zh01:exact", "text": "果园VPN分离隧道", "gold": "g-zh01", "kind": "exact", "lang": "zh", "split": "test",
     "siblings": ["g-en01"]},
    {"qid": "g-zh02:exact", "text": "冻结支出", "gold": "g-zh02", "kind": "exact", "lang": "zh", "split": "test",
     "siblings": []},
    {"qid": "g-en01:exact", "text": "Orchard VPN split tunneling", "gold": "g-en01", "kind": "exact", "lang": "en",
     "split": "dev", "siblings": ["g-zh01"]},
]


def _write_ml(folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "gold_notes.jsonl").write_text("\n".join(json.dumps(n, ensure_ascii=False) for n in ML_NOTES) + "\n")
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in ML_QUERIES) + "\n")
    return folder


def test_load_multilingual_filters_the_split_and_keeps_every_note(tmp_path):
    notes, queries = q.load_multilingual(_write_ml(tmp_path / "ml"))
    assert [n.slug for n in notes] == ["g-en01", "g-zh01", "g-zh02"]
    assert [x.qid for x in queries] == ["g-zh01:exact", "g-zh02:exact"]
    assert queries[0].siblings == ("g-en01",)
    assert len(q.load_multilingual(tmp_path / "ml", None)[1]) == 3


# ---- through pureMind's own code ----------------------------------------------------------------------------------


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.setenv("PUREMIND_HOME", str(tmp_path / "home"))
    return load_settings(env={"PUREMIND_HOME": str(tmp_path / "home")})


def test_longmemeval_keyword_only_both_chunkings(tmp_path, base):
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(LME))
    questions = q.load_longmemeval(path)
    for chunking in ("exchange", "chunker"):
        results = q.bench_longmemeval(questions, [], base, chunking)
        recs = results[q.CONFIG_LABELS[q.KEYWORD]]
        assert [r["qid"] for r in recs] == ["q1", "q3"]  # the abstention question is not scored
        by_id = {r["qid"]: r for r in recs}
        assert by_id["q1"]["top"][0] == "answer_1"
        assert by_id["q1"]["metrics"]["R@5"] == 1.0
        assert set(by_id["q3"]["top"][:2]) == {"answer_2", "answer_3"}
        assert by_id["q3"]["metrics"]["all@5"] == 1.0


class BagOfWords:
    """A stand-in embedder: hashed word counts, L2-normalised (words shared = similar)."""

    fingerprint = "test-bag-of-words"
    dim = 64

    def __init__(self):
        self.calls = 0

    def embed(self, texts, is_query=False):
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().replace("?", " ").replace(".", " ").split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1
            out[i] /= max(np.linalg.norm(out[i]), 1e-9)
        return out


def _model_run(base, embedder, cache):
    choice = q.ModelChoice("bow", "bag of words", "BoW", None)
    return q.ModelRun(choice, "fp32", base, q.CachedEmbedder(embedder, cache), None)


def test_dense_and_hybrid_paths_with_a_stand_in_embedder(tmp_path, base):
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(LME))
    cache = q.EmbedCache(tmp_path / "memo.sqlite")
    run = _model_run(base, BagOfWords(), cache)
    results = q.bench_longmemeval(q.load_longmemeval(path), [run], base, "exchange")
    assert set(results) == {"keyword (BM25)", "dense only · BoW fp32", "hybrid RRF · BoW fp32"}
    for recs in results.values():
        assert {r["qid"] for r in recs} == {"q1", "q3"}
    dense = {r["qid"]: r for r in results["dense only · BoW fp32"]}
    assert dense["q1"]["top"][0] == "answer_1"
    cache.close()


def test_cached_embedder_returns_the_same_vectors_without_asking_again(tmp_path):
    inner = BagOfWords()
    cache = q.EmbedCache(tmp_path / "memo.sqlite")
    emb = q.CachedEmbedder(inner, cache)
    first = emb.embed(["alpha beta", "gamma"])
    again = emb.embed(["gamma", "alpha beta"])
    assert inner.calls == 1 and emb.computed == 2
    np.testing.assert_array_equal(again, first[::-1])
    # a query is kept apart from a passage with the same text
    emb.embed(["gamma"], is_query=True)
    assert inner.calls == 2
    cache.close()
    assert q.CachedEmbedder(inner, q.EmbedCache(None)).embed(["x"]).shape == (1, 64)


def test_the_probe_tells_a_real_model_from_random_weights():
    class Random:
        fingerprint, dim = "random", 32

        def embed(self, texts, is_query=False):
            rng = np.random.default_rng(7 + int(is_query))
            v = rng.normal(size=(len(texts), self.dim)).astype(np.float32)
            return v / np.linalg.norm(v, axis=1, keepdims=True)

    class Oracle:  # maps each probe query and its passage to the same axis
        fingerprint, dim = "oracle", 8

        def embed(self, texts, is_query=False):
            out = np.zeros((len(texts), self.dim), dtype=np.float32)
            for i, t in enumerate(texts):
                j = next(k for k, pair in enumerate(q.PROBE) if t in pair)
                out[i, j] = 1.0
            return out

    assert not q.embedder_passes_probe(Random())
    assert q.embedder_passes_probe(Oracle())


def test_multilingual_keyword_configs_drop_siblings(tmp_path, base):
    notes, queries = q.load_multilingual(_write_ml(tmp_path / "ml"), None)
    results = q.bench_multilingual(notes, queries, [], base)
    assert set(results) == {"keyword (BM25)", "keyword + CJK grams"}
    grams = {r["qid"]: r for r in results["keyword + CJK grams"]}
    # the unspaced Chinese query matches through character pairs; BM25 alone sees one long word
    assert grams["g-zh02:exact"]["metrics"]["R@1"] == 1.0
    assert grams["g-zh01:exact"]["metrics"]["R@1"] == 1.0
    # siblings are dropped after ranking: the English VPN note never stands in front of the Chinese one
    for r in results["keyword + CJK grams"]:
        if r["qid"] == "g-en01:exact":
            assert r["metrics"]["R@1"] == 1.0


def test_beir_keyword_only_and_the_report_renders(tmp_path, base):
    (tmp_path / "b" / "qrels").mkdir(parents=True)
    docs = [("1", "Aspirin and heart attacks", "Aspirin lowers the risk of myocardial infarction."),
            ("2", "Coffee and sleep", "Caffeine delays sleep onset."),
            ("3", "Vitamin D", "Vitamin D supports bone health.")]
    (tmp_path / "b" / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in docs))
    (tmp_path / "b" / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "aspirin infarction risk"}) + "\n")
    (tmp_path / "b" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\t1\t1\n")
    results = q.bench_beir(q.load_beir(tmp_path / "b"), [], base, "tiny")
    m = results["keyword (BM25)"][0]["metrics"]
    assert m == {"nDCG@10": 1.0, "MRR@10": 1.0, "R@100": 1.0}
    report = {"beir": results, "model_line": "none", "setup": "setup", "below": [], "variants": [], "model_short": ""}
    report["comparison"] = q.comparison(report)
    text = q.render(report)
    assert "| keyword (BM25) | 1 | 1.000 | 1.000 | 1.000 |" in text
    assert "| SciFact test | nDCG@10 | 0.687 | 0.645 | 0.718 | 1.000 |" in text
    # a run on the train claims is not set beside the test split's baselines
    assert "SciFact test" not in q.comparison({**report, "scifact_split": "train"})


def test_lme_variants_option(tmp_path):
    import argparse

    parser = argparse.ArgumentParser()
    assert q._lme_variants([["exchange=fp32,int8"], ["chunker=int8"]], q.VARIANTS, parser) == {
        "exchange": ["fp32", "int8"], "chunker": ["int8"]}
    with pytest.raises(SystemExit):
        q._lme_variants([["sessions=int8"]], q.VARIANTS, parser)


def test_the_memo_keeps_precisions_apart(tmp_path):
    # the fingerprint leaves the precision out, so fp32 and int8 runs of one model must not share vectors
    cache = q.EmbedCache(tmp_path / "memo.sqlite")
    fp32, int8 = BagOfWords(), BagOfWords()
    fp32.precision, int8.precision = "fp32", "int8"
    q.CachedEmbedder(fp32, cache).embed(["alpha beta"])
    q.CachedEmbedder(int8, cache).embed(["alpha beta"])
    assert (fp32.calls, int8.calls) == (1, 1)
    cache.close()


def test_tldr_descriptions_that_several_pages_share_count_a_hit_on_any_of_them(tmp_path):
    from bench import titles

    pages = {"common/jco.md": "# jco\n\n> This command is an alias of `autojump`.\n",
             "common/jo.md": "# jo\n\n> This command is an alias of `autojump`.\n",
             "common/tar.md": "# tar\n\n> Archiving utility.\n> More information: <https://x>.\n"}
    for rel, text in pages.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    by_desc = titles.pages_by_description(tmp_path)
    assert by_desc["This command is an alias of `autojump`."] == {"common/jco.md", "common/jo.md"}
    assert by_desc["Archiving utility."] == {"common/tar.md"}
    assert titles.mrr(["common/jo.md", "common/jco.md"], by_desc["This command is an alias of `autojump`."]) == 1.0
    assert [d for _, _, d in titles.queries_for(tmp_path, 3)] == [
        "This command is an alias of `autojump`.", "This command is an alias of `autojump`.", "Archiving utility."]


def test_note_weight_bench_scores_keyword_search_at_each_weight(tmp_path):
    import io
    import tarfile

    from bench import note_weight

    pages = {"common/tar.md": "# tar\n\n> Archiving utility.\n\n- Create an archive:\n\n`tar cf out.tar files`\n",
             "common/grep.md": "# grep\n\n> Find patterns in files using regular expressions.\n",
             "common/ls.md": "# ls\n\n> List directory contents.\n",
             "linux/free.md": "# free\n\n> Display amount of free and used memory in the system.\n"}
    archive = tmp_path / "pages.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for rel, text in pages.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"pages/pages.xx/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = tmp_path / "nw.json"
    assert note_weight.main([str(archive), "--langs", "xx", "--weights", "0,2", "--json", str(out),
                             "--workdir", str(tmp_path / "work")]) == 0
    # every description is one page's own: keyword search finds each first, with or without whole-note evidence
    assert json.loads(out.read_text()) == {"xx": {"0.0": 1.0, "2.0": 1.0}}
    assert (tmp_path / "work" / "xx" / "index.sqlite").exists()
    with pytest.raises(SystemExit):
        note_weight.main([str(archive), "--weights", "a,b"])
