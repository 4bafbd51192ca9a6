"""Credential redaction (issue 35): how often it alters ordinary notes, and what it adds to a search.

    python bench/redaction.py --data ../shared/data [--queries 200] [--write-results]

False alarms: `puremind.redact.redact` on every tldr-pages page, all 39 languages (38,404 pages of command lines
full of `--password {{password}}`, `curl -u user:password`, `--token {{token}}`): how many pages come back
altered (target: at most 0.2%), with the first altered pages, the kinds and the altered line, to judge by eye.

Cost, in the same run: the English pages indexed by pureMind's indexer (keyword lists only, no model), then
`--queries` searches (a page's description, every k-th page), each timed inside the Searcher (hybrid with no
model, no reranker, limit 10) and then the redaction of what an agent receives for it (every hit's passage and
excerpt) timed apart. Reported: p50 of each, and (search + redact) / search over all queries. Also the
redaction of a fixed payload of 10 passages of 1,500 characters (tldr pages run together), the size the MCP
server returns.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
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

SECTION = "redaction"
TARGET = 0.2  # percent of ordinary pages that may be altered


def all_pages(archive: Path) -> list[tuple[str, str]]:
    """(archive path, text) of every page of every language, by path."""
    with tarfile.open(archive) as tar:
        return sorted((m.name, tar.extractfile(m).read().decode("utf-8", "replace"))
                      for m in tar if m.isfile() and m.name.endswith(".md"))


def first_changed_line(before: str, after: str, width: int = 110) -> str:
    """The first line of `before` that redaction changed, cut to `width` characters."""
    for old, new in zip(before.splitlines(), after.splitlines()):
        if old != new:
            return old.strip()[:width] + ("…" if len(old.strip()) > width else "")
    return ""


def false_alarms(pages: list[tuple[str, str]], show: int) -> tuple[list[str], float]:
    """Table rows on the altered pages, and the seconds redaction took over all pages."""
    from puremind.redact import redact

    altered = []
    kinds: Counter = Counter()
    start = time.perf_counter()
    for name, text in pages:
        out, found = redact(text)
        if out != text:
            altered.append((name, found, first_changed_line(text, out)))
            kinds.update(found)
    seconds = time.perf_counter() - start
    share = 100 * len(altered) / len(pages)
    rows = [
        "| pages scanned | altered | altered % | target | kinds found |",
        "|---|---|---|---|---|",
        f"| {len(pages):,} | {len(altered)} | {share:.3f}% | <= {TARGET}% "
        f"| {', '.join(f'{k} {n}' for k, n in kinds.most_common()) or 'none'} |",
        "",
    ]
    if altered:
        rows += [f"The first {min(show, len(altered))} altered pages (the line before redaction):", "",
                 "| page | kinds | line |", "|---|---|---|"]
        rows += [f"| {name.removeprefix('pages/')} | {', '.join(found)} | `{line.replace('|', '/').replace('`', '')}` |"
                 for name, found, line in altered[:show]]
    return rows, seconds


def payload(pages: list[tuple[str, str]], passages: int = 10, chars: int = 1500) -> list[str]:
    """`passages` passages of `chars` characters: English pages run together, cut."""
    text = "\n".join(t for name, t in pages if name.startswith("pages/pages/"))
    return [text[i * chars:(i + 1) * chars] for i in range(passages)]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def cost(pages: list[tuple[str, str]], queries: int) -> list[str]:
    """Table rows on what redaction adds to a search (see the module docstring)."""
    from puremind.config import load_settings
    from puremind.indexer import index_vault
    from puremind.models.lazy import Models
    from puremind.redact import redact
    from puremind.retrieval.pipeline import RetrievalParams, Searcher
    from puremind.store import Store

    english = [(name.removeprefix("pages/pages/"), t) for name, t in pages if name.startswith("pages/pages/")]
    descriptions = [next((line[1:].strip() for line in t.splitlines() if line.startswith(">")), "")
                    for _, t in english]
    asked = [d for d in descriptions[:: max(1, len(descriptions) // queries)] if d][:queries]
    with tempfile.TemporaryDirectory(prefix="puremind-redact-") as tmp:
        vault = Path(tmp) / "vault"
        for rel, text in english:
            (vault / rel).parent.mkdir(parents=True, exist_ok=True)
            (vault / rel).write_text(text, encoding="utf-8")
        settings = load_settings({"vault": vault, "db": Path(tmp) / "index.sqlite"})
        with Store.open(settings.db) as store:
            index_vault(store, vault, embedder=None)
        searcher = Searcher(settings.db, Models(None, None), RetrievalParams(rerank=False))
        try:
            searcher.search(asked[0], 10)  # open the store, warm the page cache
            search_s, redact_s, chars = [], [], []
            for q in asked:
                start = time.perf_counter()
                hits = searcher.search(q, 10).hits
                search_s.append(time.perf_counter() - start)
                start = time.perf_counter()
                for hit in hits:
                    redact(hit.text)
                    redact(hit.excerpt)
                redact_s.append(time.perf_counter() - start)
                chars.append(sum(len(h.text) + len(h.excerpt) for h in hits))
        finally:
            searcher.close()
    fixed = payload(pages)
    fixed_s = []
    for _ in range(200):
        start = time.perf_counter()
        for passage in fixed:
            redact(passage)
        fixed_s.append(time.perf_counter() - start)
    ms = 1000
    search_p50, redact_p50 = statistics.median(search_s), statistics.median(redact_s)
    return [
        f"Search: {len(english):,} English pages indexed (keyword lists only), {len(asked)} queries (page "
        f"descriptions), hybrid with no model, no reranker, limit 10; redaction of every hit's passage and excerpt "
        f"(p50 {statistics.median(chars):,.0f} characters a search).",
        "",
        "| what | p50 (ms) | p95 (ms) |",
        "|---|---|---|",
        f"| search | {search_p50 * ms:.2f} | {pct(search_s, 0.95) * ms:.2f} |",
        f"| redact its hits | {redact_p50 * ms:.3f} | {pct(redact_s, 0.95) * ms:.3f} |",
        f"| redact 10 passages of 1,500 characters (tldr pages; 200 times) | {statistics.median(fixed_s) * ms:.3f} "
        f"| {pct(fixed_s, 0.95) * ms:.3f} |",
        "",
        f"(search + redact) / search: {(search_p50 + redact_p50) / search_p50:.3f} at the p50s, "
        f"{(sum(search_s) + sum(redact_s)) / sum(search_s):.3f} over all queries; with the 10 x 1,500-character "
        f"payload at the search p50: {(search_p50 + statistics.median(fixed_s)) / search_p50:.3f} (target <= 1.05).",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True, help="the shared data folder (holds tldr-pages/)")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--show", type=int, default=20, help="altered pages to list")
    p.add_argument("--write-results", action="store_true")
    args = p.parse_args(argv)

    pages = all_pages(args.data / "tldr-pages" / "tldr-pages.tar.gz")
    alarms, seconds = false_alarms(pages, args.show)
    print(f"redacted {len(pages):,} pages in {seconds:.1f} s", file=sys.stderr, flush=True)
    costs = cost(pages, args.queries)
    lines = [
        f"`puremind.redact` (detect-secrets plugins, no high-entropy detectors). {os.cpu_count()} CPUs "
        f"({platform.machine()}, load average {os.getloadavg()[0]:.1f} at the end), Python "
        f"{platform.python_version()}. Medians are the figures to compare: on a shared machine the p95 holds "
        f"the scheduler's time slices (a few ms) more than the work.",
        "",
        f"False alarms: every tldr-pages page, all languages ({seconds:.1f} s for all of them).",
        "",
        *alarms,
        "",
        *costs,
    ]
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        from bench.index_speed import write_section

        given = sys.argv[1:] if argv is None else argv
        write_section(SECTION, "python bench/redaction.py " + " ".join(shlex.quote(a) for a in given), table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
