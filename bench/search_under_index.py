"""Search while an index run embeds: the polite indexer against an impolite one and an idle machine (issue 13).

    python bench/search_under_index.py WORKDIR TLDR_ARCHIVE [--pages 3000] [--queries 6] [--write-results]

WORKDIR is bench/rerank_speed.py's (the int8 exports of the full-size stand-ins of both pinned models in
WORKDIR/home, made there when missing, and its 10,000-chunk index). Searches run in this process through
pureMind's Searcher on that index, with the models loaded once: hybrid without the reranker (median latency over
`--queries` queries, each searched once per row: the query-vector cache never answers), and reranked with the
default budget (how many of the 50 candidates the reranker reaches: the budget holds the time, so load shows as
fewer candidates). Rows:

- idle: nothing else runs;
- beside an impolite index run: a child process indexes `--pages` tldr-pages into a fresh index with the same
  embedder at normal priority and on every core (what `puremind index` did before issue 13);
- beside `puremind index`: the real command, which lowers its priority (niceness +10, for itself and, in a session of
  its own, for that session's group) and runs on
  `[models] threads` threads (default: every core but one on machines with more than two; all of them here
  when this machine has two).

The child runs in a session of its own, as a command in another terminal does (`puremind index` as the child of a
shell that leads that session): on Linux with autogroup scheduling (most desktop distributions), niceness orders
processes only within a session, so `index` starts itself again as the leader of a session of its own and lowers
that session's group (issue 13). A row starts once the child has used 10 s of CPU (its model loaded, embedding under way) and the child is
stopped after it. Random weights: costs, not ranking quality.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.rerank_speed import build_int8, reranked_count  # noqa: E402
from bench.search_speed import QUERIES, build_index, calibrated_rerank_chars, load_pages  # noqa: E402

SECTION = "search-under-index"
BUSY_CPU_S = 10.0
START_DEADLINE_S = 300.0

#: `puremind index` as typed in another terminal: a shell leads that session and runs the command as its child
#: (which then starts itself again in a session of its own, as it does under Linux autogroup scheduling).
IN_A_TERMINAL = ["sh", "-c", '"$@"; exit $?', "sh", sys.executable, "-m", "puremind", "index"]

IMPOLITE = (
    "import sys; from puremind.config import load_settings; from puremind.services import build_models, run_index; "
    "s = load_settings(); run_index(s, models=build_models(s))"  # no lower_priority, every core
)


def _processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, user + system CPU seconds with its finished children) of every process."""
    stats: dict[int, tuple[int, float]] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = (int(fields[1]), sum(int(v) for v in fields[11:15]) / ticks)
    return stats


def tree(pid: int, stats: dict[int, tuple[int, float]]) -> list[int]:
    """`pid` and all its descendants that are alive: `puremind index` started from a shell runs as the shell's
    child, and then again in a session of its own, as a grandchild."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        if current in stats:
            found.append(current)
        todo += [child for child, (parent, _) in stats.items() if parent == current]
    return found


def cpu_seconds(pid: int) -> float:
    """CPU seconds used by a process and all its descendants (0 when they are gone)."""
    stats = _processes()
    return sum(stats[p][1] for p in tree(pid, stats))


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the child's process group (a shell and the command it runs, which passes it on to its own
    session), and wait until every process of the tree has ended."""
    pids = tree(proc.pid, _processes())
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{p}").exists() for p in pids[1:]):
        if time.monotonic() > deadline:
            raise SystemExit("error: the index child did not stop within a minute of SIGTERM")
        time.sleep(0.1)


def wait_busy(proc: subprocess.Popen) -> None:
    """Until the child has used BUSY_CPU_S of CPU (its model loaded and embedding), with a deadline."""
    deadline = time.monotonic() + START_DEADLINE_S
    while cpu_seconds(proc.pid) < BUSY_CPU_S:
        if proc.poll() is not None:
            raise SystemExit(f"error: the index child ended early (exit {proc.returncode}): {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            raise SystemExit("error: the index child did not get busy within the deadline")
        time.sleep(0.2)


def measure(searchers, queries: list[str]) -> tuple[list[float], list[int]]:
    """(hybrid latencies, candidates reranked within the budget) over `queries`, each searched once per searcher."""
    plain, reranked = searchers
    times, counts = [], []
    for q in queries:
        start = time.perf_counter()
        plain.search(q, 10)
        times.append(time.perf_counter() - start)
        counts.append(reranked_count(reranked.search(q, 10).notes))
    return times, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("archive", type=Path, help="tldr-pages.tar.gz")
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=6)
    parser.add_argument("--index-threads", type=int, nargs="*", default=[],
                        help="more rows: `puremind index` with [models] threads = N (PUREMIND_THREADS)")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    build_int8(args.workdir)
    home = args.workdir / "home"
    os.environ.update({"PUREMIND_HOME": str(home), "HF_HUB_OFFLINE": "1", "PUREMIND_DEVICE": "cpu"})
    for key in ("PUREMIND_EMBED_MODEL", "PUREMIND_DB", "PUREMIND_VAULT", "PUREMIND_THREADS"):
        os.environ.pop(key, None)
    from puremind.config import load_settings, replace
    from puremind.models.lazy import Models
    from puremind.models.loader import fingerprint, resolve
    from puremind.retrieval.pipeline import Searcher
    from puremind.services import build_models, model_choice, retrieval_params

    pages = load_pages(args.archive)
    base = load_settings()
    base = replace(base, rerank_chars=calibrated_rerank_chars(home, pages[:500]))
    db = args.workdir / "search-10000.sqlite"
    if not db.exists():
        choice = model_choice(base, "embedder")
        build_index(db, pages, 10000, fingerprint(resolve(choice), choice))
    settings = replace(base, db=db, vault=args.workdir)

    vault = args.workdir / "bg-vault"
    if not vault.exists():
        for name, text in pages[: args.pages]:
            path = vault / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")

    models = build_models(settings)
    ready = Models.given(models.embedder(), models.reranker())
    ready.embedder().load()
    ready.reranker().load()
    queries = QUERIES[: args.queries]
    n_rounds = 3 + len(args.index_threads)
    if len(QUERIES) < args.queries * n_rounds:
        raise SystemExit(f"error: at most {len(QUERIES) // n_rounds} queries")

    def searchers():
        plain = Searcher(db, ready, retrieval_params(replace(settings, rerank=False)))
        reranked = Searcher(db, ready, retrieval_params(settings))
        plain.search("warm the dense matrix", 10)
        reranked.search("warm the dense matrix", 10)
        return plain, reranked

    def child(cmd: list[str], **extra: str) -> subprocess.Popen:
        bg_db = args.workdir / "bg-index.sqlite"
        for suffix in ("", "-wal", "-shm", ".lock"):
            Path(str(bg_db) + suffix).unlink(missing_ok=True)
        env = {**os.environ, "PUREMIND_DB": str(bg_db), "PUREMIND_VAULT": str(vault), **extra}
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    rows = []
    conditions = [
        ("idle", None),
        ("beside an impolite index run (normal priority, every core)", [sys.executable, "-c", IMPOLITE]),
        ("beside `puremind index` from another terminal (own session, niceness +10, [models] threads)", IN_A_TERMINAL, {}),
    ]
    conditions[:2] = [(name, cmd, {}) for name, cmd in conditions[:2]]
    conditions += [(f"beside `puremind index`, [models] threads = {n}", IN_A_TERMINAL,
                    {"PUREMIND_THREADS": str(n)}) for n in args.index_threads]
    for i, (name, cmd, extra) in enumerate(conditions):
        proc = child(cmd, **extra) if cmd else None
        if proc is not None:
            print(f"{name}: waiting for the index child to get busy ...", file=sys.stderr, flush=True)
            wait_busy(proc)
        try:
            round_queries = QUERIES[i * args.queries:(i + 1) * args.queries]
            times, counts = measure(searchers(), round_queries)
        finally:
            if proc is not None:
                still = proc.poll() is None
                stop(proc)
                if not still:
                    raise SystemExit(f"error: the index child finished during the row {name!r}: use more --pages")
        rows.append((name, statistics.median(times), max(times), statistics.median(counts)))
        print(f"{name}: hybrid median {rows[-1][1]:.3f} s, reranked {rows[-1][3]:g} of 50", file=sys.stderr, flush=True)
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(str(args.workdir / "bg-index.sqlite") + suffix).unlink(missing_ok=True)

    idle = rows[0][1]
    lines = [
        f"Full-size random-weight stand-ins of both pinned models, ONNX int8 on CPU, {os.cpu_count()} CPUs "
        f"({platform.machine()}); searches on a 10,000-chunk index, {args.queries} queries a row (other queries in "
        f"each row); the index child embeds {args.pages} tldr-pages with the same embedder. Reranked searches "
        f"use the default budget ({settings.rerank_budget:g} s).",
        "",
        "| condition | hybrid search, no reranker: median (s) | max (s) | vs idle | candidates reranked within the budget (median of 50) |",
        "|---|---|---|---|---|",
    ]
    for name, med, worst, count in rows:
        lines.append(f"| {name} | {med:.3f} | {worst:.3f} | {med / idle:.2f}x | {count:g} |")
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        from bench.index_speed import write_section

        write_section(SECTION, "python bench/search_under_index.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
                      table)


if __name__ == "__main__":
    main()
