"""Reranked search within a time budget (issue 13), with the full-size random-weight models on this CPU.

    python bench/rerank_speed.py WORKDIR TLDR_ARCHIVE [--size 10000] [--queries 5] [--torch-queries 1]
                                 [--first-runs 3] [--write-results]

WORKDIR holds (or gets: about 10 minutes) the int8 exports of full-size stand-ins of both pinned models, filed
under their pinned revisions in WORKDIR/home, as bench/models_speed.py makes them, and an index of `--size`
chunks of tldr-pages text with random 1024-d vectors (bench/search_speed.py's). Through pureMind's own Searcher,
with the product's default settings unless the row says otherwise, in one run:

- reranked search with no budget (`rerank_budget = 0`, all 50 candidates: the behaviour before issue 13);
- reranked search with the default budget (`[retrieval] rerank_budget`);
- the same queries again in the same searcher (the score and query-vector caches);
- the first reranked search of a fresh process (as a fresh server's: imports and models loading, the reranker
  beside the lists), the median of `--first-runs` processes;
- the torch reranker scoring the same 50 candidates (`--torch-queries`; the issue's baseline for the ratio).

Passages are cut to the characters that give the stand-in's tokenizer as many tokens as 800 characters give
the real one (bench/search_speed.py). Random weights: these are costs, not ranking quality.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.search_speed import QUERIES, build_index, calibrated_rerank_chars, load_pages, pct  # noqa: E402

SECTION = "rerank-budget"


def build_int8(workdir: Path) -> Path:
    """The int8 exports of both full-size stand-ins in WORKDIR/home (made once); the torch reranker's folder."""
    from bench.models_speed import build

    return build(workdir, ("int8",))["reranker"]["torch"]


def timed(searcher, query: str, *, expect: str = "reranked"):
    start = time.perf_counter()
    outcome = searcher.search(query, 10)
    took = time.perf_counter() - start
    if outcome.mode != expect:
        raise SystemExit(f"error: {query!r} ran as {outcome.mode!r} ({outcome.notes})")
    note = next((n for n in outcome.notes if n.startswith("reranked ")), "")
    print(f"  {query!r}: {took:.2f} s  {note}", file=sys.stderr, flush=True)
    outcome.scored = reranked_count(outcome.notes)
    return took, outcome


def reranked_count(notes: list[str]) -> int:
    """How many candidates a search's reranker scored, from its note "reranked N of M candidates ..." (0: none)."""
    note = next((n for n in notes if n.startswith("reranked ")), "reranked 0")
    return int(note.split()[1])


_FIRST_SEARCH = """
import json, sys, time
start = time.perf_counter()
from puremind.config import load_settings, replace
from puremind.services import make_searcher
from pathlib import Path
settings = replace(load_settings(), db=Path(sys.argv[1]), vault=Path(sys.argv[1]).parent, rerank_chars=int(sys.argv[2]))
outcome = make_searcher(settings).search(sys.argv[3], 10)
took = time.perf_counter() - start
print(json.dumps([took, outcome.notes, outcome.mode]))
"""


def first_search(db: Path, rerank_chars: int, query: str) -> tuple[float, int, list[str]]:
    """(seconds from the start of a fresh Python process to its first reranked answer, candidates reranked,
    its notes), through pureMind's Searcher with the default settings."""
    import json
    import subprocess

    done = subprocess.run([sys.executable, "-c", _FIRST_SEARCH, str(db), str(rerank_chars), query],
                          capture_output=True, text=True, env=os.environ, cwd=REPO, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"error: the first-search process failed: {done.stderr[-2000:]}")
    took, notes, mode = json.loads(done.stdout.strip().splitlines()[-1])
    scored = reranked_count(notes)
    if mode != "reranked":
        raise SystemExit(f"error: the first search ran as {mode!r} ({notes})")
    print(f"  first {query!r}: {took:.2f} s  {'; '.join(notes)}", file=sys.stderr, flush=True)
    return took, scored, notes


def row(name: str, times: list[float], reranked: list[int], note: str = "") -> tuple:
    return name, statistics.median(times), pct(times, 0.95), len(times), statistics.median(reranked), note


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("archive", type=Path, help="tldr-pages.tar.gz")
    parser.add_argument("--size", type=int, default=10000)
    parser.add_argument("--queries", type=int, default=5)
    parser.add_argument("--torch-queries", type=int, default=1)
    parser.add_argument("--first-runs", type=int, default=3, help="fresh processes for the first-search row")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    torch_src = build_int8(args.workdir)
    home = args.workdir / "home"
    os.environ.update({"PUREMIND_HOME": str(home), "HF_HUB_OFFLINE": "1", "PUREMIND_DEVICE": "cpu"})
    for key in ("PUREMIND_EMBED_MODEL", "PUREMIND_DB", "PUREMIND_VAULT"):
        os.environ.pop(key, None)
    from puremind.config import load_settings, replace
    from puremind.models.loader import fingerprint, resolve
    from puremind.services import make_searcher, model_choice

    pages = load_pages(args.archive)
    base = load_settings()
    base = replace(base, rerank_chars=calibrated_rerank_chars(home, pages[:500]))
    choice = model_choice(base, "embedder")
    db = args.workdir / f"search-{args.size}.sqlite"
    if not db.exists():
        print(f"building a {args.size}-chunk index ...", file=sys.stderr, flush=True)
        build_index(db, pages, args.size, fingerprint(resolve(choice), choice))
    settings = replace(base, db=db, vault=args.workdir)
    queries = QUERIES[: args.queries]
    rows = []

    # The first search of a fresh process, as a fresh server's: imports, both models load (the reranker beside
    # the lists), then the search within the budget. Median of --first-runs processes.
    print("first search of a fresh process, models loading ...", file=sys.stderr, flush=True)
    firsts = [first_search(db, settings.rerank_chars, QUERIES[-1 - i]) for i in range(args.first_runs)]
    loads = "; ".join(n for n in sorted(firsts)[len(firsts) // 2][2] if n.startswith("loaded "))
    rows.append(row(f"first search of a fresh process, models loading (budget {settings.rerank_budget:g} s)",
                    [t for t, _, _ in firsts], [n for _, n, _ in firsts], f"median run: {loads}"))

    # Default budget, then the same queries again (caches), in the same warm searcher.
    print("default budget ...", file=sys.stderr, flush=True)
    fresh = make_searcher(settings)
    timed(fresh, QUERIES[-1])  # its models loading (the row above measures that)
    budget_runs = [timed(fresh, q) for q in queries]
    rows.append(row(f"default budget ({settings.rerank_budget:g} s)", [t for t, _ in budget_runs],
                    [o.scored for _, o in budget_runs]))
    again = [timed(fresh, q) for q in queries]
    rows.append(row("the same queries again, same searcher", [t for t, _ in again], [o.scored for _, o in again]))
    fresh.close()

    # No budget: every one of the 50 candidates (the behaviour before issue 13).
    print("no budget ...", file=sys.stderr, flush=True)
    unbounded = make_searcher(replace(settings, rerank_budget=0.0))
    timed(unbounded, QUERIES[-2])  # warm: load the models
    full = [timed(unbounded, q) for q in queries]
    rows.append(row("no budget (rerank_budget = 0), 50 candidates", [t for t, _ in full],
                    [o.scored for _, o in full]))
    unbounded.close()

    torch_s = None
    if args.torch_queries:
        print("torch reranker, 50 candidates ...", file=sys.stderr, flush=True)
        torch_s = torch_rerank(settings, torch_src, queries[: args.torch_queries])
        rows.append(row("torch fp32 reranker, the same 50 candidates (reranking alone)", torch_s,
                        [50] * len(torch_s)))

    budget_median = rows[1][1]
    lines = [
        f"Full-size random-weight stand-ins of both pinned models, ONNX int8 on CPU, {os.cpu_count()} CPUs "
        f"({platform.machine()}); {args.size:,} chunks of tldr-pages text with random 1024-d vectors; "
        f"{len(queries)} queries; limit 10, 50 candidates; reranker passages cut at {base.rerank_chars} characters "
        "(the stand-in tokenizer's equivalent of 800 real ones, ~200 tokens). Each row is the whole search "
        "(keyword, dense, fusion, reranking) unless it says otherwise.",
        "",
        "| search | median (s) | p95 (s) | queries | reranked (median of 50) | vs default budget | notes |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, med, p95, n, rr, note in rows:
        lines.append(f"| {name} | {med:.2f} | {p95:.2f} | {n} | {rr:g} | {med / budget_median:.2f}x | {note} |")
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        from bench.index_speed import write_section

        write_section(SECTION, "python bench/rerank_speed.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]), table)


def torch_rerank(settings, src: Path, queries: list[str]) -> list[float]:
    """Seconds for the torch backend to score each query's 50 fused candidates (the model loaded first)."""
    from puremind.retrieval.pipeline import rerank_text
    from puremind.services import make_searcher

    from puremind.models.manifest import load_manifest
    from puremind.models.torch_backend import TorchReranker

    spec = load_manifest().get("bge-reranker-v2-m3")
    model = TorchReranker(src, spec, max_chars=settings.rerank_chars, threads=os.cpu_count(), device="cpu")
    out = []
    lister = make_searcher(settings, rerank=False)
    for i, q in enumerate(queries):
        hits = lister.search(q, 50).hits
        texts = [rerank_text(h)[: settings.rerank_chars] for h in hits]
        if i == 0:
            model.score(q, texts[:1])  # load
        start = time.perf_counter()
        model.score(q, texts)
        out.append(time.perf_counter() - start)
        print(f"  torch {q!r}: {out[-1]:.1f} s", file=sys.stderr, flush=True)
    lister.close()
    return out


if __name__ == "__main__":
    main()
