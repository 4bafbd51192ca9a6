"""Finding a note by what it is called, and by its one-line description, on tldr-pages.

    python bench/titles.py ../shared/data/tldr-pages/tldr-pages.tar.gz [--langs en de es ...] [--queries N]
                           [--write-results]

One vault per language (`pages/` is en, `pages.<lang>/` the others), indexed by pureMind's own indexer with
semantic search off (keyword lists only: this measures the title list, not an embedder). For N pages per
language (every k-th page by path, so the sample is the same in every run):
- "name": the query is the page's file name (`tar`, `git-commit`); hit@1 and MRR@10, relevant = the page;
- "description": the query is the page's first `>` line; MRR@10, relevant = every page whose first `>` line is
  that same line (alias pages all read "This command is an alias of `X`.": no search can tell them apart by it,
  and which of them comes first is a coin flip, not a measure).
Three configurations in the same run: keyword (`--lexical-only`, the spec's BM25 over chunks), hybrid without the
title list (the Searcher before titles), and hybrid with it (today). Several pages share a name across platforms
(`common/tar.md`, `linux/tar.md`): a hit on any page of that name counts for "name".

`--semantic` indexes with the configured embedder (PUREMIND_EMBED_MODEL) and compares keyword search, hybrid
without the language gate, hybrid without the all-words list, and hybrid as configured. `--fragments` replaces the description query by the middle
half of the description's longest unspaced run (pages whose fragment no other page shares): what a question in
Thai or Chinese holds, a piece of a run that never equals a whole run of the note. `--fusion FIELD=VALUE,...`
adds a row with those RetrievalParams; `--workdir DIR` keeps each language's vault and index there for the next
run.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SECTION = "titles"
SECTION_SEMANTIC = "titles-semantic"


def mrr(ranked: list[str], relevant: set[str], k: int = 10) -> float:
    for rank, path in enumerate(ranked[:k], 1):
        if path in relevant:
            return 1.0 / rank
    return 0.0


def extract(archive: Path, lang: str, dest: Path) -> int:
    folder = "pages/pages" if lang == "en" else f"pages/pages.{lang}"
    count = 0
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.isfile() and member.name.startswith(folder + "/") and member.name.endswith(".md"):
                rel = member.name[len(folder) + 1:]
                out = dest / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(tar.extractfile(member).read())
                count += 1
    return count


def queries_for(vault: Path, n: int) -> list[tuple[str, str, str]]:
    """(path, name, description) for every k-th page by path."""
    pages = sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*.md"))
    step = max(1, len(pages) // n)
    out = []
    for rel in pages[::step][:n]:
        text = (vault / rel).read_text(encoding="utf-8", errors="replace")
        out.append((rel, rel.rsplit("/", 1)[-1][:-3], description_of(text)))
    return out


def description_of(text: str) -> str:
    """A page's first `>` line, without the `>`."""
    return next((line[1:].strip() for line in text.splitlines() if line.startswith(">")), "")


def pages_by_description(vault: Path) -> dict[str, set[str]]:
    """Every description line of the vault -> the pages that have it as their first `>` line."""
    out: dict[str, set[str]] = defaultdict(set)
    for page in vault.rglob("*.md"):
        out[description_of(page.read_text(encoding="utf-8", errors="replace"))].add(page.relative_to(vault).as_posix())
    return out


def pages_by_name(vault: Path) -> dict[str, set[str]]:
    """Every page name of the vault (the file name without `.md`) -> the pages of that name (one per platform
    folder: common/tar.md, linux/tar.md)."""
    out: dict[str, set[str]] = defaultdict(set)
    for page in vault.rglob("*.md"):
        rel = page.relative_to(vault).as_posix()
        out[rel.rsplit("/", 1)[-1][:-3]].add(rel)
    return out


def fragment(description: str) -> str:
    """The middle half of the description's longest whitespace-separated run ('' when that run is under 8
    characters)."""
    runs = description.split()
    run = max(runs, key=len) if runs else ""
    return run[len(run) // 4: len(run) * 3 // 4] if len(run) >= 8 else ""


def fragment_queries(vault: Path, n: int) -> list[tuple[str, str, str]]:
    """(path, name, fragment) for up to n pages (by path) whose description fragment no other page shares."""
    from collections import Counter

    every = queries_for(vault, 10 ** 9)
    counts = Counter(fragment(d) for _, _, d in every)
    return [(rel, name, fragment(d)) for rel, name, d in every if fragment(d) and counts[fragment(d)] == 1][:n]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("archive", type=Path)
    p.add_argument("--langs", nargs="+", default=["en", "de", "es", "ko", "th", "zh"])
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--write-results", action="store_true")
    p.add_argument("--semantic", action="store_true",
                   help="index and search with the configured embedder too (PUREMIND_EMBED_MODEL), with and "
                        "without the language gate")
    p.add_argument("--fragments", action="store_true",
                   help="query a fragment of the description's longest run instead of the whole line")
    p.add_argument("--fusion", default="", metavar="FIELD=VALUE,...", help="add a row with these RetrievalParams")
    p.add_argument("--workdir", type=Path, help="keep each language's vault and index here (reused next run)")
    args = p.parse_args(argv)

    import contextlib
    import dataclasses
    import os

    from bench.quality import _fusion_value

    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    from puremind.config import load_settings
    from puremind.indexer import index_vault
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import RetrievalParams, Searcher
    from puremind.store import Store

    configs = {
        "keyword (--lexical-only)": (RetrievalParams(rerank=False), True),
        "hybrid, no title list": (RetrievalParams(rerank=False, titles=False), False),
        "hybrid, title list": (RetrievalParams(rerank=False), False),
    }
    if args.semantic:
        configs = {
            "keyword (--lexical-only)": (RetrievalParams(rerank=False), True),
            "hybrid, no language gate": (RetrievalParams(rerank=False, language_gate=False), False),
            "hybrid, no all-words list": (RetrievalParams(rerank=False, all_words_weight=0.0), False),
            "hybrid": (RetrievalParams(rerank=False), False),
        }
    if args.fusion:
        trial = {k.strip(): _fusion_value(v.strip()) for k, _, v in
                 (item.partition("=") for item in args.fusion.split(",") if item)}
        configs[f"hybrid, {args.fusion}"] = (dataclasses.replace(RetrievalParams(rerank=False), **trial), False)
    rows = []
    for lang in args.langs:
        with contextlib.ExitStack() as stack:
            if args.workdir:
                tmp = str(args.workdir / lang)
                Path(tmp).mkdir(parents=True, exist_ok=True)
            else:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="puremind-titles-"))
            vault = Path(tmp) / "vault"
            pages = extract(args.archive, lang, vault) if not vault.is_dir() else sum(1 for _ in vault.rglob("*.md"))
            if not pages:
                print(f"{lang}: no pages", file=sys.stderr)
                continue
            settings = load_settings({"vault": vault, "db": Path(tmp) / "index.sqlite"})
            embedder = None
            if args.semantic:
                from puremind.services import build_models

                embedder = build_models(settings).embedder()
            store = Store.open(settings.db)
            started = time.monotonic()
            index_vault(store, vault, embedder=embedder)
            store.close()
            seconds = time.monotonic() - started
            sample = fragment_queries(vault, args.queries) if args.fragments else queries_for(vault, args.queries)
            by_name = pages_by_name(vault)
            # A description that several pages share counts a hit on any of them (fragments are unique already).
            by_desc = {} if args.fragments else pages_by_description(vault)
            shared = sum(len(by_desc.get(desc, ())) > 1 for _, _, desc in sample if desc)
            for label, (params, lexical) in configs.items():
                searcher = Searcher(settings.db, Models.given(embedder) if embedder else Models(None, None), params)
                hit1 = name_mrr = desc_mrr = 0.0
                n_desc = 0
                for rel, name, desc in sample:
                    try:
                        ranked = [h.path for h in searcher.search(name, 10, lexical_only=lexical).hits]
                    except Exception:  # a name with no searchable word
                        ranked = []
                    hit1 += float(bool(ranked) and ranked[0] in by_name[name])
                    name_mrr += mrr(ranked, by_name[name])
                    if desc:
                        ranked = [h.path for h in searcher.search(desc, 10, lexical_only=lexical).hits]
                        desc_mrr += mrr(ranked, by_desc.get(desc) or {rel})
                        n_desc += 1
                searcher.close()
                n = max(len(sample), 1)
                rows.append((lang, pages, label, n, shared, hit1 / n, name_mrr / n, desc_mrr / max(n_desc, 1)))
                print(f"{lang:3} {label:26} name hit@1 {hit1 / n:.3f} MRR@10 {name_mrr / n:.3f}  "
                      f"description MRR@10 {desc_mrr / max(n_desc, 1):.3f}", file=sys.stderr)

    what_desc = "fragment MRR@10" if args.fragments else "description MRR@10"
    header = (f"| language | pages | configuration | queries | shared descriptions | name hit@1 | name MRR@10 "
              f"| {what_desc} |")
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for lang, pages, label, n, shared, h1, nm, dm in rows:
        lines.append(f"| {lang} | {pages} | {label} | {n} | {shared} | {h1:.3f} | {nm:.3f} | {dm:.3f} |")
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        import shlex

        from bench.index_speed import write_section

        command = "python bench/titles.py " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
        what = ("Semantic search on (PUREMIND_EMBED_MODEL, int8 on the CPU)"
                if args.semantic else "Semantic search off (keyword lists only)")
        if args.fragments:
            what += ("; the description query is the middle half of its longest run, on the pages whose fragment "
                     "no other page shares")
        body = (f"{what}; {args.queries} pages per language (every k-th by path); \"shared descriptions\": the "
                f"queries whose description line other pages have too (a hit on any of them counts); "
                f"{platform.machine()}, Python {platform.python_version()}.\n\n{table}")
        section = SECTION_SEMANTIC if args.semantic else SECTION
        write_section(section + ("-fragments" if args.fragments else ""), command, body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
