"""Many processes opening the same new indexes at once: how many opens fail, with and without the retried setup.

    python bench/open_stress.py [--indexes 600] [--processes 6] [--rounds 3] [--write-results]

Each round makes `--indexes` new index paths and starts `--processes` processes that each open every one of them
in the same order (`Store.open(path).close()`), so they collide on the first connection's setup. The baseline is
the setup as it was before issue 19, one try (connect, switch to WAL, migrate), run the same way in the same
round. Prints a table and, with --write-results, replaces its section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import sqlite3
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index_speed import write_section  # noqa: E402

from puremind.store import Store  # noqa: E402
from puremind.store import files, schema  # noqa: E402
from puremind.store import store as store_module  # noqa: E402

SECTION = "open-stress"


def open_once(path: Path) -> None:
    """The setup before issue 19: one try, an error on the first SQLITE_BUSY that skipped the busy handler."""
    files.make_parent(path)
    files.create_file(path)
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=rw"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=store_module.BUSY_TIMEOUT_MS / 1000)
    try:
        store_module._configure(conn)
        schema.migrate(conn)
    finally:
        conn.close()


def worker(kind: str, paths: list[str], results) -> None:
    failures = 0
    started = time.perf_counter()
    for p in paths:
        try:
            if kind == "baseline":
                open_once(Path(p))
            else:
                Store.open(Path(p)).close()
        except Exception:
            failures += 1
    results.put((failures, time.perf_counter() - started))


def one_round(kind: str, indexes: int, processes: int) -> tuple[int, float]:
    with tempfile.TemporaryDirectory(prefix="puremind-open-") as tmp:
        paths = [str(Path(tmp) / f"i{n}" / "index.db") for n in range(indexes)]
        ctx = multiprocessing.get_context("fork")
        results = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(kind, paths, results)) for _ in range(processes)]
        for proc in procs:
            proc.start()
        got = [results.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join()
        return sum(f for f, _ in got), max(s for _, s in got)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--indexes", type=int, default=600)
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write-results", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args()
    rows = {"baseline": [], "pureMind": []}
    for _ in range(args.rounds):
        for kind in rows:
            rows[kind].append(one_round(kind, args.indexes, args.processes))
    opens = args.indexes * args.processes
    base_s = sum(s for _, s in rows["baseline"])
    lines = [f"{args.rounds} rounds of {args.indexes} new indexes, each opened by {args.processes} processes at once "
             f"({opens} opens a round); {platform.machine()}, Python {platform.python_version()}, SQLite "
             f"{sqlite3.sqlite_version}.", "",
             "| setup | failed opens per round | failed share | seconds per round (slowest process) | time vs baseline |",
             "|---|---|---|---|---|"]
    for kind, label in (("baseline", "baseline: one try (before issue 19)"), ("pureMind", "pureMind: retried setup")):
        fails = [f for f, _ in rows[kind]]
        secs = sum(s for _, s in rows[kind])
        lines.append(f"| {label} | {', '.join(map(str, fails))} | {sum(fails) / (opens * args.rounds):.2%} | "
                     f"{secs / args.rounds:.2f} | {secs / base_s:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        command = (f"python bench/open_stress.py --indexes {args.indexes} --processes {args.processes} "
                   f"--rounds {args.rounds} --write-results")
        write_section(SECTION, command, table)


if __name__ == "__main__":
    main()
