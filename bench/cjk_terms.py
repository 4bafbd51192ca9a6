"""What bounding a long query's character grams costs and saves (issue 33): hybrid search with no model (keyword
lists only) in scripts written without spaces, every gram of the query matched (before) against the rarest
`cjk_terms` of them (after), in the same run.

    python bench/cjk_terms.py TLDR_ARCHIVE WORKDIR [--langs th zh] [--notes 1000 10000] [--queries 20]
                              [--query-chars 60] [--quality-langs th zh ja ko] [--quality-queries 300]
                              [--multilingual DIR] [--cjk-terms 24] [--write-results]

Speed: per language, vaults of `--notes` generated notes, indexed in WORKDIR by pureMind's chunker and store
(keyword only), kept for the next run. A note is a title and 3 to 12 lines, each line one to three phrases (the
runs between spaces) drawn at random from every description and example line of tldr-pages in that language:
real text of that script, recombined so that a larger vault is not the same notes over again. A query is the
description of one page (those that are not "an alias of" pages) and its examples' descriptions, cut to
`--query-chars` characters; `--queries` of them, each searched 3 times, limit 10. Timed inside the Searcher
(`Searcher.search`), p50 and p95.

Quality: MRR@10 with and without the bound, hybrid search with no model:
- tldr-pages, one vault per language of `--quality-langs` (the language's pages, indexed by pureMind's indexer):
  "description", the page's first `>` line (relevant: every page with that line, as bench/titles.py),
  "fragment", the middle half of the description's longest run (pages whose fragment no other page has;
  bench/titles.py --fragments), and "long", the speed queries' form (description and examples, cut to
  `--query-chars`; relevant: the page), for
  `--quality-queries` pages (every k-th by path);
- the six-language set (`--multilingual`, dev split): the 160 gold notes, siblings dropped before scoring.
"bounded" counts the queries with more grams than `cjk_terms`: the others search exactly as before.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import platform
import random
import shlex
import sqlite3
import statistics
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.titles import fragment  # noqa: E402

SECTION = "cjk-terms"


def tldr_pages(archive: Path, lang: str) -> list[tuple[str, str]]:
    """(path under the language folder, text) of every page of `lang`, by path."""
    folder = "pages/pages" if lang == "en" else f"pages/pages.{lang}"
    out = []
    with tarfile.open(archive) as tar:
        for m in tar:
            if m.isfile() and m.name.startswith(folder + "/") and m.name.endswith(".md"):
                out.append((m.name[len(folder) + 1:], tar.extractfile(m).read().decode("utf-8", "replace")))
    return sorted(out)


def description_of(text: str) -> str:
    return next((line[1:].strip() for line in text.splitlines() if line.startswith(">")), "")


def examples_of(text: str) -> list[str]:
    return [line[2:].strip().rstrip(":：") for line in text.splitlines() if line.startswith("- ")]


def long_query(text: str, chars: int) -> str:
    """A page's description and its examples' descriptions, cut to `chars` characters (a long question)."""
    return " ".join([description_of(text), *examples_of(text)])[:chars].strip()


def proper_pages(pages: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pages whose description no other page has and names no command (not "an alias of `x`")."""
    counts = Counter(description_of(t) for _, t in pages)
    return [(p, t) for p, t in pages if description_of(t) and counts[description_of(t)] == 1
            and "`" not in description_of(t)]


def every_kth(items: list, n: int) -> list:
    return items[:: max(1, len(items) // max(n, 1))][:n]


def generated_notes(pages: list[tuple[str, str]], n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """`n` notes (path, title, Markdown) recombined from the phrases of `pages` (see the module docstring)."""
    phrases = sorted({p for _, t in pages for line in (description_of(t), *examples_of(t)) for p in line.split()})
    titles = [t.split("\n", 1)[0].lstrip("# ").strip() for _, t in pages]
    rng = random.Random(seed)
    out = []
    for i in range(n):
        title = f"{titles[i % len(titles)]} {i}"
        lines = [" ".join(rng.choices(phrases, k=rng.randint(1, 3))) for _ in range(rng.randint(3, 12))]
        body = "\n\n".join(f"- {x}" for x in lines)
        out.append((f"g{i // 1000:02d}/{i:05d}.md", title, f"# {title}\n\n{body}\n"))
    return out


def build(db: Path, notes: list[tuple[str, str, str]]) -> None:
    from puremind.chunker import chunk_markdown
    from puremind.store import ChunkRow, Store

    with Store.open(db) as store:
        with store.batch():
            for path, title, text in notes:
                rows = [ChunkRow(i, c.heading_path, c.text, c.start_line, c.end_line, c.kind,
                                 hashlib.sha256(c.text.encode()).hexdigest(), None)
                        for i, c in enumerate(chunk_markdown(text))]
                store.put_file(path, hashlib.sha256(text.encode()).hexdigest(), len(text), 0, rows, title=title)
        store.compact()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def speed_vaults(archive: Path, langs: list[str], notes: list[int], n_queries: int, chars: int, workdir: Path):
    """(language, notes, index, 60-character questions) for each generated vault of the speed table, the index
    built in `workdir` when it is not there yet."""
    for lang in langs:
        pages = tldr_pages(archive, lang)
        queries = [long_query(t, chars) for _, t in every_kth(proper_pages(pages), n_queries)]
        for n in notes:
            db = workdir / f"cjk-{lang}-{n}.sqlite"
            if not db.exists():
                workdir.mkdir(parents=True, exist_ok=True)
                print(f"{lang} {n}: building {db} ...", file=sys.stderr, flush=True)
                build(db, generated_notes(pages, n))
            yield lang, n, db, queries


def timings(db: Path, params, queries: list[str], rounds: int = 3) -> list[float]:
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import Searcher

    searcher = Searcher(db, Models(None, None), params)
    try:
        searcher.search(queries[0], 10)  # open the store, warm the page cache
        out = []
        for _ in range(rounds):
            for q in queries:
                start = time.perf_counter()
                searcher.search(q, 10)
                out.append(time.perf_counter() - start)
        return out
    finally:
        searcher.close()


def mrr(ranked: list[str], relevant: set[str], k: int = 10) -> float:
    for rank, path in enumerate(ranked[:k], 1):
        if path in relevant:
            return 1.0 / rank
    return 0.0


def ranked_paths(searcher, query: str) -> list[str]:
    return list(dict.fromkeys(h.path for h in searcher.search(query, 50).hits))


def bounded(query: str, max_terms: int) -> bool:
    from puremind.cjk import query_grams
    from puremind.retrieval.lexical import searchable_query

    return len(query_grams(searchable_query(query))) > max_terms


def tldr_quality(archive: Path, lang: str, n: int, chars: int, configs: dict) -> list[tuple]:
    """Rows (lang, pages, query kind, queries, bounded, MRR@10 per config) on one language's tldr-pages vault."""
    from puremind.config import load_settings
    from puremind.indexer import index_vault
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import Searcher
    from puremind.store import Store

    pages = tldr_pages(archive, lang)
    with tempfile.TemporaryDirectory(prefix="puremind-cjk-") as tmp:
        vault = Path(tmp) / "vault"
        for rel, text in pages:
            (vault / rel).parent.mkdir(parents=True, exist_ok=True)
            (vault / rel).write_text(text, encoding="utf-8")
        settings = load_settings({"vault": vault, "db": Path(tmp) / "index.sqlite"})
        with Store.open(settings.db) as store:
            index_vault(store, vault, embedder=None)
        by_desc: dict[str, set[str]] = {}
        for rel, text in pages:
            by_desc.setdefault(description_of(text), set()).add(rel)
        sample = every_kth(pages, n)
        long_sample = every_kth(proper_pages(pages), n)
        by_long: dict[str, set[str]] = {}
        for rel, text in pages:
            by_long.setdefault(long_query(text, chars), set()).add(rel)
        # The middle half of the description's longest run, on the pages no other page shares it with: a piece of
        # a run, which only the character lists find (bench/titles.py --fragments).
        frags = Counter(fragment(description_of(t)) for _, t in pages)
        unique = [(fragment(description_of(t)), {rel}) for rel, t in pages
                  if fragment(description_of(t)) and frags[fragment(description_of(t))] == 1]
        kinds = {
            "description": [(description_of(t), by_desc[description_of(t)]) for _, t in sample if description_of(t)],
            "fragment": every_kth(unique, n),
            f"long ({chars} characters)": [(long_query(t, chars), by_long[long_query(t, chars)])
                                             for _, t in long_sample],
        }
        rows = []
        for kind, qs in kinds.items():
            scores = {}
            for label, params in configs.items():
                searcher = Searcher(settings.db, Models(None, None), params)
                scores[label] = statistics.fmean(mrr(ranked_paths(searcher, q), rel) for q, rel in qs) if qs else 0.0
                searcher.close()
            rows.append((f"tldr-pages {lang}", len(pages), kind, len(qs),
                         sum(bounded(q, configs["after"].cjk_terms) for q, _ in qs), scores))
    return rows


def multilingual_quality(folder: Path, configs: dict) -> list[tuple]:
    """Rows per language of the six-language set's dev split (and all), MRR@10 per config, siblings dropped."""
    from bench.quality import beir_markdown, dedupe, known_item_metrics, load_multilingual
    from puremind.config import load_settings
    from puremind.indexer import index_vault
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import Searcher
    from puremind.store import Store

    notes, queries = load_multilingual(folder, "dev")
    slug = {f"{n.lang}/{n.slug}.md": n.slug for n in notes}
    with tempfile.TemporaryDirectory(prefix="puremind-cjk-") as tmp:
        vault = Path(tmp) / "vault"
        for n in notes:
            (vault / n.lang).mkdir(parents=True, exist_ok=True)
            (vault / n.lang / f"{n.slug}.md").write_text(beir_markdown(n.title, n.body), encoding="utf-8")
        settings = load_settings({"vault": vault, "db": Path(tmp) / "index.sqlite"})
        with Store.open(settings.db) as store:
            index_vault(store, vault, embedder=None)
        per: dict[str, dict[str, list[float]]] = {}
        for label, params in configs.items():
            searcher = Searcher(settings.db, Models(None, None), params)
            for q in queries:
                ranked = dedupe(slug[p] for p in ranked_paths(searcher, q.text))
                m = known_item_metrics(ranked, q.gold, q.siblings)["MRR"]
                for group in (q.lang, "all"):
                    per.setdefault(group, {}).setdefault(label, []).append(m)
            searcher.close()
    langs = sorted({q.lang for q in queries}) + ["all"]
    max_terms = configs["after"].cjk_terms
    return [(f"six-language dev, {g}", len(notes), "exact, para, mixed",
             len(per[g]["after"]), sum(bounded(q.text, max_terms) for q in queries if g in (q.lang, "all")),
             {label: statistics.fmean(v) for label, v in per[g].items()}) for g in langs]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("archive", type=Path, help="tldr-pages.tar.gz")
    p.add_argument("workdir", type=Path, help="the generated vaults' indexes are kept here")
    p.add_argument("--langs", nargs="+", default=["th", "zh"])
    p.add_argument("--notes", nargs="+", type=int, default=[1000, 10000])
    p.add_argument("--queries", type=int, default=20)
    p.add_argument("--query-chars", type=int, default=60)
    p.add_argument("--quality-langs", nargs="*", default=["th", "zh", "ja", "ko"])
    p.add_argument("--quality-queries", type=int, default=300)
    p.add_argument("--multilingual", type=Path, help="birkin-mnemosyne folder (dev split scored)")
    p.add_argument("--cjk-terms", type=int, default=None, help="the bound to try (default: RetrievalParams')")
    p.add_argument("--cjk-budget", type=int, default=None,
                   help="the passages the grams beyond the bound may hold together (default: RetrievalParams')")
    p.add_argument("--write-results", action="store_true")
    args = p.parse_args(argv)

    from puremind.retrieval.pipeline import RetrievalParams

    after = RetrievalParams(rerank=False)
    if args.cjk_terms is not None:
        after = dataclasses.replace(after, cjk_terms=args.cjk_terms)
    if args.cjk_budget is not None:
        after = dataclasses.replace(after, cjk_budget=args.cjk_budget)
    configs = {"before": dataclasses.replace(after, cjk_terms=0), "after": after}
    args.workdir.mkdir(parents=True, exist_ok=True)

    speed = []
    for lang, n, db, queries in speed_vaults(args.archive, args.langs, args.notes, args.queries, args.query_chars,
                                             args.workdir):
        runs = {label: timings(db, params, queries) for label, params in configs.items()}
        speed.append((lang, n, len(queries), runs))
        b, a = runs["before"], runs["after"]
        print(f"{lang} {n}: before p50 {statistics.median(b) * 1000:.1f} ms p95 {pct(b, 0.95) * 1000:.1f} ms; "
              f"after p50 {statistics.median(a) * 1000:.1f} ms p95 {pct(a, 0.95) * 1000:.1f} ms",
              file=sys.stderr, flush=True)

    quality = []
    for lang in args.quality_langs:
        quality += tldr_quality(args.archive, lang, args.quality_queries, args.query_chars, configs)
        print(quality[-1], file=sys.stderr, flush=True)
    if args.multilingual:
        quality += multilingual_quality(args.multilingual, configs)

    k = configs["after"].cjk_terms
    lines = [
        f"Hybrid search with no model (keyword, all-words, character-pair and title lists, RRF; no reranker). "
        f"Before: every gram of the query (up to 128); after: a query of more than {k} grams matched by its {k} "
        f"rarest (`RetrievalParams.cjk_terms`). Both read the passages and snippets of the hits only, after "
        f"ranking (`Store._search_fts`, same issue), so before is not the code before issue 33. "
        f"{os.cpu_count()} CPUs ({platform.machine()}), Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}.",
        "",
        f"Speed inside the Searcher: generated notes (tldr-pages phrases recombined), {args.query_chars}-character "
        f"queries, each searched 3 times, limit 10.",
        "",
        "| script | notes | queries | before p50 (ms) | before p95 (ms) | after p50 (ms) | after p95 (ms) "
        "| after / before p50 | after / before p95 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for lang, n, nq, runs in speed:
        b, a = runs["before"], runs["after"]
        lines.append(f"| {lang} | {n:,} | {nq} | {statistics.median(b) * 1000:.1f} | {pct(b, 0.95) * 1000:.1f} "
                     f"| {statistics.median(a) * 1000:.1f} | {pct(a, 0.95) * 1000:.1f} "
                     f"| {statistics.median(a) / statistics.median(b):.3f} | {pct(a, 0.95) / pct(b, 0.95):.3f} |")
    if quality:
        lines += ["", "Quality, MRR@10 (\"bounded\": queries of more grams than the bound; the others search as "
                      "before).", "",
                  "| set | notes | queries | n | bounded | MRR@10 before | MRR@10 after | after - before |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, notes, kind, n, nb, scores in quality:
            lines.append(f"| {name} | {notes:,} | {kind} | {n} | {nb} | {scores['before']:.4f} | {scores['after']:.4f} "
                         f"| {scores['after'] - scores['before']:+.4f} |")
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        from bench.index_speed import write_section

        given = sys.argv[1:] if argv is None else argv
        command = "python bench/cjk_terms.py " + " ".join(shlex.quote(a) for a in given)
        write_section(SECTION, command, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
