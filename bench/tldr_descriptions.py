"""tldr-pages descriptions: keyword search against hybrid with one given embedder, language by language.

    python bench/tldr_descriptions.py ARCHIVE --embedder FOLDER|HUB_ID [--variant int8] [--langs en de ...]
                                      [--queries 200] [--workdir DIR] [--json FILE] [--note TEXT]
                                      [--names] [--fusion FIELD=VALUE,...] [--write-results [SECTION]]

The description part of bench/titles.py (its `extract`, `queries_for`, `pages_by_description` and `mrr`: the
same vault per language, the same sample of every k-th page by path, the same rule that a hit on any page whose
first `>` line is the query's line counts), for an embedder named here rather than the configured one, and with
two configurations only: keyword search (`--lexical-only`) and hybrid as configured (RRF of the keyword lists and
the dense list, no reranker). The embedder is loaded the way bench/quality.py loads it (exported into
PUREMIND_HOME on first use, then the relevance probe). Languages run in the order given; with --write-results
the section is rewritten after each language, so a run stopped part way keeps what it measured. --json keeps
every query's rank in both configurations (0: not in the top 10); --note is written above the table (what the
model is, where it came from). --names also asks each sampled page's file name (hit@1; any page of that name
counts, as in bench/titles.py); --fusion adds a third configuration, hybrid with other RetrievalParams (a trial),
searched on the same index.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.titles import extract, mrr, pages_by_description, pages_by_name, queries_for  # noqa: E402

SECTION = "tldr-descriptions"
KEYWORD = "keyword (--lexical-only)"
HYBRID = "hybrid"


def rank_of(ranked: list[str], relevant: set[str], k: int = 10) -> int:
    """1-based rank of the first relevant page in the top k, 0 when none is there."""
    return next((i for i, path in enumerate(ranked[:k], 1) if path in relevant), 0)


def load_embedder(name: str, variant: str):
    """(embedder, label) loaded as bench/quality.py loads it; SystemExit when it fails the relevance probe."""
    from bench.quality import describe_model, embedder_passes_probe, progress
    from puremind.config import load_settings, replace
    from puremind.models.loader import load_embedder as load
    from puremind.services import export_if_missing, model_choice

    choice = describe_model(name, None)
    settings = replace(load_settings(), embedder=name, embedder_revision=None, variant=variant)
    embedder = load(model_choice(settings, "embedder"), obtain=export_if_missing, progress=progress)
    if not embedder_passes_probe(embedder):
        raise SystemExit(f"error: {choice.label} ({variant}) fails the relevance probe")
    return embedder, f"{choice.label} {variant}"


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("archive", type=Path)
    p.add_argument("--embedder", required=True, help="a local model folder or a hub id")
    p.add_argument("--variant", default="int8", choices=["fp32", "fp16", "int8"])
    p.add_argument("--langs", nargs="+", default=["en", "de", "es", "ko", "th", "zh"])
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--workdir", type=Path, help="keep each language's vault and index here (reused next run)")
    p.add_argument("--json", type=Path, help="every query's rank in both configurations")
    p.add_argument("--note", default="", help="written above the table in bench/RESULTS.md")
    p.add_argument("--write-results", nargs="?", const=SECTION, default=None, metavar="SECTION")
    p.add_argument("--names", action="store_true",
                   help="also each sampled page's file name as a query: hit@1 (any page of that name counts)")
    p.add_argument("--fusion", default="", metavar="FIELD=VALUE,...",
                   help="a third configuration: hybrid with these RetrievalParams (a trial)")
    args = p.parse_args(argv)

    from puremind.config import load_settings
    from puremind.errors import QueryError
    from puremind.indexer import index_vault
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import RetrievalParams, Searcher
    from puremind.store import Store

    from bench.quality import _fusion_value

    trial = {k.strip(): _fusion_value(v.strip()) for k, _, v in
             (item.partition("=") for item in args.fusion.split(",") if item)}
    trial_label = f"hybrid, {args.fusion}"
    embedder, label = load_embedder(args.embedder, args.variant)
    command = ((f"PUREMIND_HOME={os.environ['PUREMIND_HOME']} " if os.environ.get("PUREMIND_HOME") else "")
               + "python bench/tldr_descriptions.py "
               + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)))
    rows: list[tuple] = []
    records: list[dict] = []
    for lang in args.langs:
        with tempfile.TemporaryDirectory(prefix="puremind-tldr-") as scratch:
            tmp = Path(scratch) if args.workdir is None else args.workdir / lang
            tmp.mkdir(parents=True, exist_ok=True)
            vault = tmp / "vault"
            pages = extract(args.archive, lang, vault) if not vault.is_dir() else sum(1 for _ in vault.rglob("*.md"))
            if not pages:
                print(f"{lang}: no pages", file=sys.stderr)
                continue
            settings = load_settings({"vault": vault, "db": tmp / "index.sqlite"})
            started = time.monotonic()
            store = Store.open(settings.db)
            index_vault(store, vault, embedder=embedder)
            store.close()
            index_s = time.monotonic() - started
            sample = [(rel, name, desc) for rel, name, desc in queries_for(vault, args.queries) if desc]
            by_desc = pages_by_description(vault)
            by_name = pages_by_name(vault)
            shared = sum(len(by_desc.get(desc, ())) > 1 for _, _, desc in sample)
            # keyword search is the hybrid searcher asked with lexical_only
            hybrid = Searcher(settings.db, Models.given(embedder), RetrievalParams(rerank=False))
            searchers = {KEYWORD: (hybrid, True), HYBRID: (hybrid, False)}
            if trial:
                searchers[trial_label] = (Searcher(settings.db, Models.given(embedder),
                                                   dataclasses.replace(RetrievalParams(rerank=False), **trial)), False)
            scores = dict.fromkeys(searchers, 0.0)
            hits1 = dict.fromkeys(searchers, 0.0)
            for rel, name, desc in sample:
                relevant = by_desc.get(desc) or {rel}
                record = {"lang": lang, "page": rel, "query": desc, "relevant": sorted(relevant)}
                for config, (searcher, lexical) in searchers.items():
                    ranked = [h.path for h in searcher.search(desc, 10, lexical_only=lexical).hits]
                    scores[config] += mrr(ranked, relevant)
                    record[config] = {"rank": rank_of(ranked, relevant), "top3": ranked[:3]}
                    if args.names:
                        try:
                            named = [h.path for h in searcher.search(name, 10, lexical_only=lexical).hits]
                        except QueryError:  # a name with no searchable word ('((' in en): a miss, as in titles.py
                            named = []
                        hits1[config] += float(bool(named) and named[0] in by_name[name])
                        record[config]["name_top3"] = named[:3]
                records.append(record)
            hybrid.close()
            if trial:
                searchers[trial_label][0].close()
        n = max(len(sample), 1)
        kw, hy = scores[KEYWORD] / n, scores[HYBRID] / n
        extra = {"trial": scores[trial_label] / n if trial else None,
                 "names": {c: v / n for c, v in hits1.items()} if args.names else None}
        rows.append((lang, pages, len(sample), shared, kw, hy, index_s, extra))
        print(f"{lang:5} pages {pages:5} queries {len(sample):3} keyword {kw:.3f} hybrid {hy:.3f} "
              f"({hy - kw:+.3f}; indexed in {index_s:.0f} s)"
              + (f" trial {extra['trial']:.3f} ({extra['trial'] - kw:+.3f})" if trial else "")
              + (" names hit@1 " + " / ".join(f"{v:.3f}" for v in extra["names"].values()) if args.names else ""),
              file=sys.stderr, flush=True)
        if args.json:
            args.json.write_text(json.dumps(records, ensure_ascii=False, indent=0), encoding="utf-8")
        if args.write_results:
            write(args, command, label, rows)
    print(render(rows, args.fusion))
    return 0


def render(rows: list[tuple], trial: str = "") -> str:
    """The table; a trial's MRR@10 and the names' hit@1 (keyword / hybrid / trial) get columns when measured."""
    names = any(extra["names"] for *_, extra in rows)
    head = ["language", "pages", "queries", "shared descriptions", "keyword MRR@10", "hybrid MRR@10", "hybrid - keyword"]
    head += [f"{trial} MRR@10", "trial - keyword"] if trial else []
    head += ["name hit@1 keyword / hybrid" + (" / trial" if trial else "")] if names else []
    lines = ["| " + " | ".join(head + ["index time (s)"]) + " |", "|" + "---|" * (len(head) + 1)]
    for lang, pages, n, shared, kw, hy, index_s, extra in rows:
        cells = [lang, str(pages), str(n), str(shared), f"{kw:.3f}", f"{hy:.3f}", f"{hy - kw:+.3f}"]
        cells += [f"{extra['trial']:.3f}", f"{extra['trial'] - kw:+.3f}"] if trial else []
        cells += [" / ".join(f"{v:.3f}" for v in extra["names"].values())] if names else []
        lines.append("| " + " | ".join(cells + [f"{index_s:.0f}"]) + " |")
    return "\n".join(lines)


def write(args: argparse.Namespace, command: str, label: str, rows: list[tuple]) -> None:
    from bench.index_speed import write_section

    body = (f"{args.note}\n\n" if args.note else "") + (f"Embedder: {label}, ONNX on the CPU ({os.cpu_count()} cores, shared with other work: index times are "
            f"not speed figures; 0 where --workdir held the index already); no reranker. tldr-pages description MRR@10 (the query is a page's first `>` "
            f"line; a hit on any page with that same line counts); {args.queries} pages per language, every k-th "
            f"by path (bench/titles.py's sample); {len(rows)} of the {len(args.langs)} languages asked for "
            f"measured; {platform.machine()}, Python {platform.python_version()}.\n\n{render(rows, args.fusion)}")
    write_section(args.write_results, command, body)


if __name__ == "__main__":
    raise SystemExit(main())
