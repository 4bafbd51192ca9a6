"""What whole-note evidence costs keyword search (issue 12): `--lexical-only` latency with the passages' own
BM25 alone (note_weight 0, what it did before) and with each passage's whole note weighed in (the default); the
same for hybrid search's keyword lists (hybrid mode with no embedder: the lists that whole-note evidence changes,
the dense list aside, which it does not touch).

    python bench/keyword_speed.py WORKDIR TLDR_ARCHIVE [--chunks 100000] [--write-results]

Two indexes of real text (tldr-pages), built in WORKDIR by pureMind's own chunker and store, keyword only:

- short notes: one note per page, `--chunks` of them (pages repeated under new paths past tldr-pages' 38k);
- long notes: pages joined into notes of about 60,000 characters (about 30 chunks each, past the 50,000
  characters of each note that whole-note evidence reads: its worst case), `--chunks` chunks in all.

Median and 95th percentile over bench/search_speed.py's 20 queries, each searched 3 times, limit 10.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.search_speed import QUERIES, load_pages  # noqa: E402

SECTION = "keyword-speed"
LONG_NOTE_CHARS = 60_000


def build(db: Path, notes: list[tuple[str, str]], chunks: int) -> int:
    """Index `notes` (path, Markdown) with pureMind's chunker, keyword only, until `chunks` chunks are stored
    (repeating them under new paths); returns the number of notes."""
    from puremind.chunker import chunk_markdown
    from puremind.store import ChunkRow, Store

    with Store.open(db) as store:
        n, files, rep = 0, 0, 0
        while n < chunks:
            with store.batch():
                for path, text in notes:
                    if n >= chunks:
                        break
                    parts = chunk_markdown(text)
                    rows = [ChunkRow(i, c.heading_path, c.text, c.start_line, c.end_line, c.kind,
                                     hashlib.sha256(c.text.encode()).hexdigest(), None) for i, c in enumerate(parts)]
                    store.put_file(f"r{rep}/{path}", hashlib.sha256(text.encode()).hexdigest(), len(text), 0, rows)
                    n += len(rows)
                    files += 1
            rep += 1
        store.compact()
    return files


def long_notes(pages: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pages joined, in order, into notes of about LONG_NOTE_CHARS characters, each page a section."""
    out, parts, size = [], [], 0
    for path, text in pages:
        body = text.split("\n", 1)[1] if text.startswith("# ") else text
        parts.append(f"## {path}\n{body}")
        size += len(parts[-1])
        if size >= LONG_NOTE_CHARS:
            out.append((f"long/{len(out):05d}.md", f"# Long note {len(out)}\n\n" + "\n\n".join(parts)))
            parts, size = [], 0
    return out


def measure(db: Path, note_weight: float, lexical_only: bool = True) -> list[float]:
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import RetrievalParams, Searcher

    searcher = Searcher(db, Models(None, None), RetrievalParams(note_weight=note_weight, rerank=False))
    searcher.search("warm the page cache", 10, lexical_only=lexical_only)
    times = []
    for _ in range(3):
        for q in QUERIES:
            start = time.perf_counter()
            searcher.search(q, 10, lexical_only=lexical_only)
            times.append(time.perf_counter() - start)
    searcher.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("archive", type=Path, help="tldr-pages.tar.gz")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    from puremind.retrieval.pipeline import NOTE_WEIGHT

    args.workdir.mkdir(parents=True, exist_ok=True)
    pages = load_pages(args.archive)
    rows = []
    for kind, notes in (("short notes (one page each)", pages), ("long notes (about 60,000 characters)", long_notes(pages))):
        db = args.workdir / f"keyword-{'short' if kind.startswith('short') else 'long'}-{args.chunks}.sqlite"
        if not db.exists():
            print(f"{kind}: building {db} ...", file=sys.stderr, flush=True)
            build(db, notes, args.chunks)
        for mode, lexical_only in (("keyword", True), ("hybrid's keyword lists", False)):
            alone, weighed = measure(db, 0.0, lexical_only), measure(db, NOTE_WEIGHT, lexical_only)
            for label, times in (("passages alone (before)", alone),
                                 (f"with whole-note evidence (weight {NOTE_WEIGHT:g})", weighed)):
                rows.append((kind, f"{mode}: {label}", statistics.median(times), statistics.quantiles(times, n=20)[-1]))
            rows.append((kind, f"{mode}: with / without", statistics.median(weighed) / statistics.median(alone), None))
    lines = [
        f"Keyword search (`--lexical-only`), and hybrid search with no embedder (its keyword, all-words and title "
        f"lists, RRF; no reranker), {args.chunks:,} chunks of tldr-pages text cut by pureMind's chunker; "
        f"{len(QUERIES)} queries x 3, limit 10; {os.cpu_count()} CPUs ({platform.machine()}), SQLite "
        f"{__import__('sqlite3').sqlite_version}.",
        "",
        "| notes | search | median (s) | p95 (s) |",
        "|---|---|---|---|",
    ]
    for kind, label, med, p95 in rows:
        if p95 is None:
            lines.append(f"| {kind} | {label} | {med:.2f}x | |")
        else:
            lines.append(f"| {kind} | {label} | {med:.4f} | {p95:.4f} |")
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        from bench.index_speed import write_section

        write_section(SECTION, "python bench/keyword_speed.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]), table)


if __name__ == "__main__":
    main()
