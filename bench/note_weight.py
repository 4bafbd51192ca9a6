"""Whole-note evidence in keyword search, language by language: tldr-pages description MRR@10 of `--lexical-only`
at several `note_weight` values (RetrievalParams; 0 = a passage's own BM25 alone, 2 = today, NOTE_WEIGHT).

    python bench/note_weight.py ARCHIVE [--langs en de ...] [--weights 0,0.5,1,1.5,2] [--queries 200]
                                [--workdir DIR] [--json FILE]

The same vault per language and the same sample of queries as bench/tldr_descriptions.py (bench/titles.py's
`extract`, `queries_for`, `pages_by_description`, `mrr`). The index is keyword-only (no model); with --workdir a
language's vault and index are kept there and reused, and a folder that bench/tldr_descriptions.py left there
(its index holds vectors too) serves as well: keyword search reads only the keyword index. Issue 33, item 5 (what
lowered Vietnamese keyword search): whole-note evidence is one of the suspects.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.titles import extract, mrr, pages_by_description, queries_for  # noqa: E402


def keyword_mrr(db: Path, vault: Path, weights: list[float], queries: int) -> dict[float, float]:
    """Description MRR@10 of keyword search over the index `db` of `vault`, for each note weight."""
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import RetrievalParams, Searcher

    sample = [(rel, desc) for rel, _, desc in queries_for(vault, queries) if desc]
    by_desc = pages_by_description(vault)
    out: dict[float, float] = {}
    for weight in weights:
        searcher = Searcher(db, Models(None, None), RetrievalParams(rerank=False, note_weight=weight))
        try:
            total = sum(mrr([h.path for h in searcher.search(desc, 10, lexical_only=True).hits],
                            by_desc.get(desc) or {rel}) for rel, desc in sample)
        finally:
            searcher.close()
        out[weight] = total / max(len(sample), 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("archive", type=Path)
    p.add_argument("--langs", nargs="+", default=["en", "de", "es", "id", "it", "ko", "th", "zh"])
    p.add_argument("--weights", default="0,0.5,1,1.5,2")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--workdir", type=Path, help="keep each language's vault and index here (reused next run)")
    p.add_argument("--json", type=Path, help="language -> weight -> MRR@10")
    args = p.parse_args(argv)
    try:
        weights = [float(w) for w in args.weights.split(",") if w.strip()]
    except ValueError:
        p.error(f"--weights: numbers separated by commas, not {args.weights!r}")

    from puremind.config import load_settings
    from puremind.indexer import index_vault
    from puremind.store import Store

    results: dict[str, dict[float, float]] = {}
    print("| language | " + " | ".join(f"note_weight {w:g}" for w in weights) + " |")
    print("|---|" + "---|" * len(weights))
    for lang in args.langs:
        with tempfile.TemporaryDirectory(prefix="puremind-nw-") as scratch:
            tmp = Path(scratch) if args.workdir is None else args.workdir / lang
            tmp.mkdir(parents=True, exist_ok=True)
            vault = tmp / "vault"
            if not vault.is_dir() and not extract(args.archive, lang, vault):
                print(f"{lang}: no pages", file=sys.stderr)
                continue
            settings = load_settings({"vault": vault, "db": tmp / "index.sqlite"})
            if not settings.db.exists():
                with Store.open(settings.db) as store:
                    index_vault(store, vault)
            results[lang] = keyword_mrr(settings.db, vault, weights, args.queries)
        print(f"| {lang} | " + " | ".join(f"{results[lang][w]:.3f}" for w in weights) + " |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
