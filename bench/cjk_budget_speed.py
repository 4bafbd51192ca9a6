"""The character-gram budget's cost (issue 33): hybrid search with no model on the generated Thai and Chinese
vaults of bench/cjk_terms.py, each query searched with `cjk_budget` 0 (the bound's rarest grams only) and with
the others given, interleaved query by query so that every budget meets the same load.

    python bench/cjk_budget_speed.py ARCHIVE WORKDIR [--budgets 0 1000] [--queries 20] [--rounds 3]

WORKDIR holds the vaults' indexes that bench/cjk_terms.py built (cjk-th-1000.sqlite, ...); missing ones are built.
Prints p50 and p95 per budget (milliseconds inside the Searcher) and each budget's p95 against budget 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.cjk_terms import pct, speed_vaults  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("archive", type=Path)
    p.add_argument("workdir", type=Path)
    p.add_argument("--langs", nargs="+", default=["th", "zh"])
    p.add_argument("--notes", nargs="+", type=int, default=[1000, 10000])
    p.add_argument("--budgets", nargs="+", type=int, default=[0, 1000])
    p.add_argument("--queries", type=int, default=20)
    p.add_argument("--chars", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)

    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import RetrievalParams, Searcher

    budgets = list(dict.fromkeys([0, *args.budgets]))
    print("| script | notes | budget | p50 (ms) | p95 (ms) | p95 / budget 0 |\n|---|---|---|---|---|---|")
    for lang, n, db, queries in speed_vaults(args.archive, args.langs, args.notes, args.queries, args.chars,
                                             args.workdir):
        searchers = {b: Searcher(db, Models(None, None), RetrievalParams(rerank=False, cjk_budget=b)) for b in budgets}
        times: dict[int, list[float]] = {b: [] for b in budgets}
        for _ in range(args.rounds):
            for query in queries:
                for b, searcher in searchers.items():
                    started = time.perf_counter()
                    searcher.search(query, 10)
                    times[b].append((time.perf_counter() - started) * 1000)
        for searcher in searchers.values():
            searcher.close()
        base = pct(times[0], 0.95)
        for b in budgets:
            print(f"| {lang} | {n:,} | {b} | {pct(times[b], 0.5):.1f} | {pct(times[b], 0.95):.1f} | "
                  f"{pct(times[b], 0.95) / base:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
