"""Keyword indexing speed on a many-small-files vault (tldr-pages), against a plain-reading baseline.

    python bench/index_speed.py ../shared/data/tldr-pages/tldr-pages.tar.gz [--write-results]

Extracts the archive into a temporary folder, then measures in one run:
- baseline: os.walk + read + SHA-256 of every .md file (the floor any content-hashing indexer pays);
- pureMind first keyword index (walk, safe reads, chunking, FTS5, commits, compaction), files per second;
- pureMind re-run with nothing changed (size + mtime check only), files per second.
Prints a table and, with --write-results, replaces its section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import resource
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from puremind.indexer import index_vault  # noqa: E402
from puremind.store import Store  # noqa: E402

SECTION = "index-speed"


def baseline_read_and_hash(root: Path) -> int:
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.endswith(".md"):
                with open(os.path.join(dirpath, name), "rb") as fh:
                    hashlib.sha256(fh.read()).digest()
                count += 1
    return count


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archive", type=Path, help="tldr-pages.tar.gz (or a folder of Markdown notes)")
    parser.add_argument("--write-results", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="puremind-bench-") as tmp:
        tmp_path = Path(tmp)
        if args.archive.is_dir():
            vault = args.archive
        else:
            vault = tmp_path / "vault"
            with tarfile.open(args.archive) as tar:
                tar.extractall(vault, filter="data")
        # Warm the page cache so both sides read from memory.
        files, _ = timed(lambda: baseline_read_and_hash(vault))
        _, base_s = timed(lambda: baseline_read_and_hash(vault))

        store = Store.open(tmp_path / "index.sqlite")
        first, first_s = timed(lambda: index_vault(store, vault))
        again, again_s = timed(lambda: index_vault(store, vault))
        counts = store.counts()
        store.close()
        db_mb = (tmp_path / "index.sqlite").stat().st_size / 1e6
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    rows = [
        ("baseline: walk + read + SHA-256", files, base_s, 1.0),
        ("pureMind first keyword index", first.added, first_s, base_s / first_s),
        ("pureMind re-run, nothing changed", again.unchanged, again_s, base_s / again_s),
    ]
    lines = [
        f"Vault: {args.archive.name}, {files} Markdown files; {counts['chunks']} chunks; index {db_mb:.1f} MB; "
        f"peak RSS {peak_mb:.0f} MB; {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}.",
        "",
        "| run | files | seconds | files/s | speed vs baseline |",
        "|---|---|---|---|---|",
    ]
    for name, n, secs, ratio in rows:
        lines.append(f"| {name} | {n} | {secs:.2f} | {n / secs:,.0f} | {ratio:.2f}x |")
    lines.append("")
    lines.append(f"First run: {first.summary()}")
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        write_section(SECTION, f"python bench/index_speed.py {args.archive} --write-results", table)


def write_section(name: str, command: str, body: str) -> None:
    """Replace (or append) one named section of bench/RESULTS.md."""
    path = Path(__file__).with_name("RESULTS.md")
    text = path.read_text() if path.exists() else "# Benchmark results\n\nEach section is written by the command it names.\n"
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    block = f"{start}\n## {name}\n\nCommand: `{command}` ({time.strftime('%Y-%m-%d')})\n\n{body}\n{end}"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        _, after = rest.split(end, 1)
        text = before + block + after
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    main()
