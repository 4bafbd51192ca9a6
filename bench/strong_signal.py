"""The reranker's strong-signal skip (RetrievalParams.strong_signal), measured on tldr-pages.

    python bench/strong_signal.py ../shared/data/tldr-pages/tldr-pages.tar.gz [--langs en de ...] [--queries N]
                                  [--semantic] [--write-results]

The rule: the reranker is skipped when one note alone is named or titled exactly as the query and it leads the
fused list. Skipping it can only cost quality on a query where that first note is not the answer: there the
reranker might have put the answer first. On a query where it is the answer, the reranker can at best keep it
first. So, for each query set, the most the skip can cost is bounded without any reranker:
- hit@1: the share of all queries where the rule fires and the first note is not relevant;
- MRR@10: the sum over those queries of (1 - their reciprocal rank), over all queries.
Both are measured here on every page's name ("name" queries: relevant = every page of that name) and on its first
`>` line ("description" queries: relevant = every page with that line), per language, with the product's own
Searcher (hybrid, no reranker; keyword lists only unless `--semantic`, which uses PUREMIND_EMBED_MODEL). The
share of name queries the rule skips is the saving, counted among those where the reranker would run at all (a
query that finds one passage is never reranked). `--semantic` writes section strong-signal-semantic. Pages are
sampled as bench/titles.py samples them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.titles import extract, mrr, pages_by_description, queries_for  # noqa: E402

SECTION = "strong-signal"
SKIP_NOTE = "strong signal"
ONE_CANDIDATE = "one candidate passage"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("archive", type=Path)
    p.add_argument("--langs", nargs="+", default=["en", "de", "es", "ko", "th", "zh"])
    p.add_argument("--queries", type=int, default=500)
    p.add_argument("--semantic", action="store_true", help="index and search with PUREMIND_EMBED_MODEL")
    p.add_argument("--write-results", action="store_true")
    args = p.parse_args(argv)

    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    from puremind.config import load_settings
    from puremind.indexer import index_vault
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import RetrievalParams, Searcher
    from puremind.store import Store

    class Marker:
        """A reranker that is never asked to score: the search must have skipped it or gone without it."""

        fingerprint = "marker|strong-signal"
        languages = ()

        def score(self, query: str, passages: list[str]) -> list[float]:
            return [0.0] * len(passages)

    rows = []
    for lang in args.langs:
        with tempfile.TemporaryDirectory(prefix="puremind-strong-") as tmp, contextlib.ExitStack() as stack:
            vault = Path(tmp) / "vault"
            if not extract(args.archive, lang, vault):
                print(f"{lang}: no pages", file=sys.stderr)
                continue
            settings = load_settings({"vault": vault, "db": Path(tmp) / "index.sqlite"})
            embedder = None
            if args.semantic:
                from puremind.services import build_models

                embedder = build_models(settings).embedder()
            store = Store.open(settings.db)
            index_vault(store, vault, embedder=embedder)
            store.close()
            sample = queries_for(vault, args.queries)
            by_name: dict[str, set[str]] = defaultdict(set)
            for rel in (q.relative_to(vault).as_posix() for q in vault.rglob("*.md")):
                by_name[rel.rsplit("/", 1)[-1][:-3]].add(rel)
            by_desc = pages_by_description(vault)
            # rerank_budget 0 and a marker reranker: the notes say whether the rule skipped it; its scores are
            # never used for a figure here (the hybrid order is what a skip keeps).
            searcher = stack.enter_context(contextlib.closing(Searcher(
                settings.db, Models(embedder, Marker()), RetrievalParams(rerank=True, rerank_budget=0))))
            plain = stack.enter_context(contextlib.closing(Searcher(
                settings.db, Models(embedder, None), RetrievalParams(rerank=False))))
            for kind, queries in (("name", [(name, by_name[name]) for _, name, _ in sample]),
                                  ("description", [(d, by_desc.get(d) or {rel}) for rel, _, d in sample if d])):
                fired = wrong = single = 0
                hit_cost = mrr_cost = 0.0
                for query, relevant in queries:
                    try:
                        outcome = searcher.search(query, 10)
                        ranked = [h.path for h in plain.search(query, 10).hits]
                    except Exception:  # a name with no searchable word
                        continue
                    if any(ONE_CANDIDATE in n for n in outcome.notes):
                        single += 1  # one passage found: never reranked, rule or not
                    if not any(SKIP_NOTE in n for n in outcome.notes):
                        continue
                    fired += 1
                    if ranked[0] not in relevant:
                        wrong += 1
                        hit_cost += 1.0
                        mrr_cost += 1.0 - mrr(ranked, relevant)
                n = max(len(queries), 1)
                rows.append((lang, kind, len(queries), single, fired, wrong, hit_cost / n, mrr_cost / n))
                print(f"{lang:3} {kind:12} {len(queries)} queries, {single} with one passage, skipped {fired} "
                      f"({fired / max(n - single, 1):.0%} of the rest), first note not relevant in {wrong}: bound "
                      f"hit@1 {hit_cost / n:.4f} MRR@10 {mrr_cost / n:.4f}", file=sys.stderr)

    lines = ["| language | query | count | one passage found (never reranked) | reranker skipped by the rule "
             "(share of the others) | skipped, first note not relevant | most the skip can cost: hit@1 | MRR@10 |",
             "|---|---|---|---|---|---|---|---|"]
    for lang, kind, n, single, fired, wrong, hit_cost, mrr_cost in rows:
        lines.append(f"| {lang} | {kind} | {n} | {single} | {fired} ({fired / max(n - single, 1):.0%}) | {wrong} "
                     f"| {hit_cost:.4f} | {mrr_cost:.4f} |")
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        from bench.index_speed import write_section

        command = "python bench/strong_signal.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
        what = ("Semantic search on (PUREMIND_EMBED_MODEL)" if args.semantic
                else "Semantic search off (keyword and title lists)")
        write_section(SECTION + ("-semantic" if args.semantic else ""), command, f"{what}; hybrid fusion as configured. The rule skips the reranker when one "
                      "note alone is named or titled exactly as the query and leads the fused list; the bound is "
                      "what a perfect reranker could have gained on the skipped queries (first note not relevant), "
                      "over all queries of the set.\n\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
