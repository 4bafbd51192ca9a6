"""`puremind eval`: how well each search configuration finds known items in the user's own vault.

A vault holds its own known-item questions: a note's title or alias asks for that note, a heading for its section,
a distinctive sentence with a third of its words left out for its note, and a link's text for the note it links
to. These favour keyword search (their words are in the notes), and they are not the paraphrased questions an
agent asks: the figures compare configurations on this vault, they do not say how good search is.

Every query runs through each configuration that can run here (keyword, hybrid, hybrid + reranker), query by query,
so that a time budget cuts them all at the same query and the comparison stays paired. The figures per
configuration and kind are hit@1, hit@5 and MRR@10 with 95% bootstrap intervals (queries resampled with a fixed
seed), and the median and 95th percentile of the search time. The reranker against hybrid is judged by the
bootstrap interval of the paired difference of MRR@10 (puremind.retrieval.gate reads it for `rerank = "auto"`).

Queries and answers never leave this module: the summary it returns holds figures only.
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence
from urllib.parse import unquote

from puremind.chunker import chunk_markdown, note_title
from puremind.retrieval.gate import reranker_name, verdict
from puremind.retrieval.pipeline import RetrievalParams, Searcher

if TYPE_CHECKING:
    from pathlib import Path

    from puremind.models.lazy import Models

KINDS = ("title", "heading", "sentence", "link")
DEFAULT_SEED = 34
DEFAULT_QUERIES = 300
RESAMPLES = 1000
#: results read per query (MRR@10)
DEPTH = 10
MEASURES = ("known-item queries built from your notes (title or alias -> its note, heading -> its section, a "
            "distinctive sentence with a third of its words left out -> its note, a link's text -> its target). "
            "They favour keyword search, and they are not the paraphrased questions an agent asks: compare "
            "configurations with them, not search quality in general.")
#: a sentence query comes from a note of at least this many characters of text, from its middle half
LONG_NOTE_CHARS = 400
SENTENCE_WORDS = (8, 40)

Progress = Callable[[str, int, int, str], None]


@dataclass(frozen=True)
class Query:
    """One known-item query: its kind, its text, the note that answers it and, for a heading, the heading that a
    passage of that note must be under."""

    kind: str
    text: str
    path: str
    heading: str | None = None


# -- building the queries ----------------------------------------------------------------------------------------

_WORD = re.compile(r"\w+")
_WIKILINK = re.compile(r"\[\[([^\]|#\n]+)(?:#[^\]|\n]*)?(?:\|([^\]\n]+))?\]\]")
_MDLINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(<?([^)>\s]+?\.md)>?(?:#[^)\s]*)?\)")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n\s*\n")


def _key(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass
class _Note:
    rel: str
    names: tuple[str, ...]  # title first
    headings: tuple[str, ...]
    body: str  # section text without heading lines


def _parse(rel: str, text: str) -> _Note:
    named = note_title(text, rel)
    chunks = chunk_markdown(text)
    title = _key(named.title)
    headings = dict.fromkeys(h for c in chunks for h in c.heading_path if h.strip() and _key(h) != title)
    body = "\n".join(line for c in chunks if c.kind == "section" for line in c.text.split("\n")
                     if not line.lstrip().startswith("#"))
    return _Note(rel, (named.title, *named.aliases), tuple(headings), body)


def _unique(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """name key -> the one note it names; names that several notes have are left out (they ask for no one note)."""
    owners: dict[str, set[str]] = {}
    for name, rel in pairs:
        owners.setdefault(_key(name), set()).add(rel)
    return {k: next(iter(v)) for k, v in owners.items() if len(v) == 1 and k}


def _sentence(note: _Note, idf: dict[str, float], rng: random.Random) -> str | None:
    """The rarest sentence of the note's middle half (mean IDF of its words), with a third of its words dropped."""
    body = note.body
    if len(body) < LONG_NOTE_CHARS:
        return None
    best: tuple[float, str] | None = None
    pos = 0
    for part in _SENTENCE_END.split(body):
        start = body.find(part, pos)
        pos = start + len(part)
        if not (len(body) * 0.25 <= start + len(part) / 2 <= len(body) * 0.75):
            continue
        words = part.split()
        if not SENTENCE_WORDS[0] <= len(words) <= SENTENCE_WORDS[1]:
            continue
        tokens = [w.casefold() for w in _WORD.findall(part)]
        rarity = sum(idf.get(t, 0.0) for t in tokens) / max(1, len(tokens))
        if best is None or rarity > best[0]:
            best = (rarity, part)
    if best is None:
        return None
    words = best[1].split()
    dropped = set(rng.sample(range(len(words)), len(words) // 3))
    return " ".join(w for i, w in enumerate(words) if i not in dropped)


def _links(note: _Note, text: str, by_stem: dict[str, str], paths: set[str]) -> list[tuple[str, str]]:
    """(link text, target path) of each link in the note to another note of the vault."""
    found = []
    for match in _WIKILINK.finditer(text):
        target, shown = match.group(1).strip(), (match.group(2) or match.group(1)).strip()
        rel = target if target in paths else target + ".md" if target + ".md" in paths else by_stem.get(_key(target))
        if rel is not None:
            found.append((shown, rel))
    for match in _MDLINK.finditer(text):
        rel = posixpath.normpath(posixpath.join(posixpath.dirname(note.rel), unquote(match.group(2))))
        if rel in paths:
            found.append((match.group(1).strip(), rel))
    return [(shown, rel) for shown, rel in found if rel != note.rel and len(shown) >= 3]


def build_queries(notes: Sequence[tuple[str, str]], *, seed: int = DEFAULT_SEED, limit: int = DEFAULT_QUERIES) -> list[Query]:
    """Up to `limit` known-item queries from `notes` ((vault-relative path, text) pairs), shared about evenly among
    the kinds the vault has; the same notes and seed give the same queries."""
    parsed = [_parse(rel, text) for rel, text in sorted(notes)]
    texts = dict(notes)
    paths = {n.rel for n in parsed}
    names = _unique((name, n.rel) for n in parsed for name in n.names)
    headings = _unique((h, n.rel) for n in parsed for h in n.headings)
    by_stem = _unique((posixpath.splitext(posixpath.basename(n.rel))[0], n.rel) for n in parsed)
    df = Counter(t for n in parsed for t in {w.casefold() for w in _WORD.findall(n.body)})
    idf = {t: math.log(len(parsed) / c) for t, c in df.items()}

    pools: dict[str, list[Query]] = {kind: [] for kind in KINDS}
    rng = random.Random(f"{seed}:build")
    for n in parsed:
        own = [name for name in n.names if names.get(_key(name)) == n.rel]
        if own:
            pools["title"].append(Query("title", rng.choice(own), n.rel))
        pools["heading"] += [Query("heading", h, n.rel, h) for h in n.headings if headings.get(_key(h)) == n.rel]
        sentence = _sentence(n, idf, rng)
        if sentence:
            pools["sentence"].append(Query("sentence", sentence, n.rel))
        seen = set()
        for shown, rel in _links(n, texts[n.rel], by_stem, paths):
            if (_key(shown), rel) not in seen:
                seen.add((_key(shown), rel))
                pools["link"].append(Query("link", shown, rel))
    for kind in KINDS:
        random.Random(f"{seed}:{kind}").shuffle(pools[kind])
    # Share `limit` among the kinds the vault has; what a small kind cannot use goes to the others.
    take = dict.fromkeys(KINDS, 0)
    left = limit
    while left > 0:
        open_kinds = [k for k in KINDS if take[k] < len(pools[k])]
        if not open_kinds:
            break
        share = max(1, left // len(open_kinds))
        for k in open_kinds:
            add = min(share, len(pools[k]) - take[k], left)
            take[k] += add
            left -= add
    return [q for kind in KINDS for q in pools[kind][: take[kind]]]


# -- scoring -----------------------------------------------------------------------------------------------------


def rank_of(query: Query, hits: Sequence[Any]) -> int | None:
    """The 1-based rank of the first hit that answers `query` (its note; for a heading, a passage of its note under
    that heading), None when none of `hits` does."""
    for rank, hit in enumerate(hits, 1):
        if hit.path == query.path and (query.heading is None
                                       or _key(query.heading) in {_key(h) for h in hit.heading_path}):
            return rank
    return None


def _figures(rank: int | None) -> tuple[float, float, float]:
    """hit@1, hit@5, reciprocal rank within DEPTH."""
    if rank is None:
        return 0.0, 0.0, 0.0
    return float(rank == 1), float(rank <= 5), 1.0 / rank if rank <= DEPTH else 0.0


def _interval(values: Any, samples: Any) -> dict[str, float]:
    import numpy as np

    means = values[samples].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return {"value": round(float(values.mean()), 4), "low": round(float(low), 4), "high": round(float(high), 4)}


def _samples(n: int, seed: int, kind: str) -> Any:
    import numpy as np

    rng = np.random.default_rng([seed, KINDS.index(kind) if kind in KINDS else len(KINDS)])
    return rng.integers(0, n, size=(RESAMPLES, n))


# -- running -----------------------------------------------------------------------------------------------------


@dataclass
class Configuration:
    """One way of searching that eval measures: its name, its searcher (None: skipped, and why)."""

    name: str
    searcher: Searcher | None
    skipped: str | None = None
    rerank_budget: float | None = None
    ranks: list[int | None] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def configurations(db: "Path", models: "Models", params: RetrievalParams, *, has_vectors: bool) -> list[Configuration]:
    """Keyword (no model), hybrid (no reranker) and hybrid + reranker under `params.rerank_budget` (0: unbounded),
    each skipped, with the reason, where its model cannot be had here.

    Raises:
        ModelError: a configured model is broken (not merely unavailable here).
    """
    from puremind.models import ModelsUnavailable
    from puremind.models.lazy import Models as _Models

    params = dataclasses.replace(params, excerpts=False)  # eval reads paths and headings only
    out = [Configuration("keyword", Searcher(db, _Models.given(), dataclasses.replace(params, rerank=False)))]
    budget = float(params.rerank_budget)
    rerank_name = f"hybrid + reranker ({f'budget {budget:g} s' if budget > 0 else 'unbounded'})"
    hybrid_skip = None
    if not models.semantic:
        hybrid_skip = 'no embedder (embedder = "none")'
    elif not has_vectors:
        hybrid_skip = "the index holds no vectors (run `puremind index`)"
    else:
        try:
            models.embedder()
        except ModelsUnavailable as exc:
            hybrid_skip = f"the embedder cannot be had here: {exc.message}"
    if hybrid_skip:
        out.append(Configuration("hybrid", None, hybrid_skip))
        out.append(Configuration(rerank_name, None, "needs hybrid search: " + hybrid_skip, budget))
        return out
    out.append(Configuration("hybrid", Searcher(db, models, dataclasses.replace(params, rerank=False))))
    rerank_skip = None
    if not models.has("reranker"):
        rerank_skip = "no reranker is configured"
    else:
        try:
            models.reranker()
        except ModelsUnavailable as exc:
            rerank_skip = f"the reranker cannot be had here: {exc.message}"
    searcher = None if rerank_skip else Searcher(db, models, dataclasses.replace(params, rerank=True))
    out.append(Configuration(rerank_name, searcher, rerank_skip, budget))
    return out


def run_queries(queries: Sequence[Query], configs: Sequence[Configuration], *, time_budget: float = 0.0,
                progress: Progress | None = None, clock: Callable[[], float] = time.perf_counter) -> int:
    """Each query through every configuration that runs, query by query, until the queries or `time_budget`
    seconds (0: none) run out; returns how many queries ran. Each configuration first answers one query untimed,
    so that loading its models is not counted as a search."""
    running = [c for c in configs if c.searcher is not None]
    start = clock()
    if queries:
        for c in running:
            c.searcher.search(queries[0].text, DEPTH)
    done = 0
    for query in queries:
        if time_budget > 0 and clock() - start >= time_budget:
            break
        for c in running:
            t0 = clock()
            outcome = c.searcher.search(query.text, DEPTH)
            c.seconds.append(clock() - t0)
            c.ranks.append(rank_of(query, outcome.hits))
        done += 1
        if progress is not None:
            progress("evaluating", done, len(queries), "")
    return done


def summarise(queries: Sequence[Query], configs: Sequence[Configuration], *, seed: int, notes: int,
              models: dict[str, Any], elapsed: float, planned: int, date: str) -> dict[str, Any]:
    """The figures of a run (no query text): per configuration and kind, hit@1, hit@5 and MRR@10 with 95%
    bootstrap intervals and the median and p95 latency; and the reranker against hybrid (paired difference)."""
    import numpy as np

    ran = len(next((c.ranks for c in configs if c.searcher is not None), []))
    queries = list(queries[:ran])
    kinds = [k for k in KINDS if any(q.kind == k for q in queries)]
    groups = {k: np.array([i for i, q in enumerate(queries) if q.kind == k]) for k in kinds}
    groups["all"] = np.arange(len(queries))
    samples = {k: _samples(len(idx), seed, k) for k, idx in groups.items() if len(idx)}
    out_configs = []
    table: dict[str, Any] = {}
    for c in configs:
        entry: dict[str, Any] = {"name": c.name, "ran": c.searcher is not None, "skipped": c.skipped}
        if c.rerank_budget is not None:
            entry["rerank_budget"] = c.rerank_budget
        if c.searcher is not None and queries:
            figures = np.array([_figures(r) for r in c.ranks])
            seconds = np.array(c.seconds)
            table[c.name] = figures
            entry["kinds"] = {}
            for k, idx in groups.items():
                if not len(idx):
                    continue
                sub = figures[idx]
                entry["kinds"][k] = {
                    "queries": int(len(idx)),
                    "hit@1": _interval(sub[:, 0], samples[k]),
                    "hit@5": _interval(sub[:, 1], samples[k]),
                    "mrr@10": _interval(sub[:, 2], samples[k]),
                    "latency_ms": {"median": round(float(np.median(seconds[idx])) * 1000, 1),
                                   "p95": round(float(np.percentile(seconds[idx], 95)) * 1000, 1)},
                }
        out_configs.append(entry)
    comparison = None
    reranked = next((c.name for c in configs if c.rerank_budget is not None and c.name in table), None)
    if reranked is not None and "hybrid" in table:
        diff = table[reranked][:, 2] - table["hybrid"][:, 2]
        comparison = {"measure": "mrr@10", "interval": "95% paired bootstrap interval of the difference "
                      "(reranked minus hybrid, the same resampled queries)",
                      "hybrid": round(float(table["hybrid"][:, 2].mean()), 4),
                      "reranked": round(float(table[reranked][:, 2].mean()), 4),
                      "difference": _interval(diff, samples["all"])}
        comparison["verdict"] = verdict(comparison)
    return {
        "date": date, "seed": seed, "notes": notes, "resamples": RESAMPLES,
        "queries": {"planned": planned, "ran": len(queries), **{k: int(len(groups[k])) for k in kinds}},
        "stopped_by_time_budget": len(queries) < planned,
        "elapsed_s": round(elapsed, 1), "measures": MEASURES, "models": models,
        "configurations": out_configs, "rerank_vs_hybrid": comparison,
    }


def model_summary(models: "Models", configs: Sequence[Configuration]) -> dict[str, Any]:
    """The models and variants eval measured (names and precisions only; a model no configuration ran is None)."""
    from puremind.fingerprint import model_label

    ran = {c.name for c in configs if c.searcher is not None}
    out: dict[str, Any] = {"embedder": None, "reranker": None}
    if "hybrid" in ran:
        embedder = models.embedder()
        out["embedder"] = {"name": model_label(getattr(embedder, "fingerprint", "") or type(embedder).__name__),
                           "precision": getattr(embedder, "precision", None)}
    if any(c.rerank_budget is not None for c in configs if c.name in ran):
        reranker = models.reranker()
        fingerprint = getattr(reranker, "fingerprint", None)
        out["reranker"] = {"name": reranker_name(models), "model": model_label(fingerprint) if fingerprint else None,
                           "precision": getattr(reranker, "precision", None)}
    return out


__all__ = ["Configuration", "DEFAULT_QUERIES", "DEFAULT_SEED", "KINDS", "MEASURES", "Query", "build_queries",
           "configurations", "model_summary", "rank_of", "run_queries", "summarise"]
