"""Watch latency: the time from saving a note to the first search that finds its new text.

    python bench/watch_latency.py [--notes 2000] [--archive ../shared/data/tldr-pages/tldr-pages.tar.gz]
                                  [--saves 30] [--debounce 2.0] [--write-results]

For each vault (a synthetic one of --notes small notes, and the archive's notes when given), starts the real
command, `python -m puremind watch VAULT --debounce SECONDS`, in a subprocess with keyword search only
(PUREMIND_EMBED_MODEL=none) and a temporary PUREMIND_HOME, and waits for its first run. Then, --saves times: appends
a new unique word to a random note (one write, as an editor's save), and from this process searches the index
for that word every 5 ms (a reader connection, `puremind search --lexical-only`'s query path) until a search
finds the note. Latency = time from the end of the write to the first search that finds it. It includes the
debounce, the walk and the run, so "over debounce" is what the watch adds. Prints a table and, with
--write-results, replaces its section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import queue
import random
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.index_speed import write_section  # noqa: E402
from puremind.retrieval.lexical import search_lexical  # noqa: E402
from puremind.store import Store  # noqa: E402

SECTION = "watch-latency"
POLL = 0.005


def synthetic_vault(root: Path, n: int) -> None:
    words = "grinder deploy rollback kettle espresso sqlite transaction flaky tag image script note".split()
    rng = random.Random(7)
    for i in range(n):
        folder = root / f"area{i % 20}" / f"topic{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        body = " ".join(rng.choice(words) for _ in range(60))
        (folder / f"note{i}.md").write_text(f"# Note {i}\n\n## Part\n\n{body}\n", encoding="utf-8")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def measure(name: str, vault: Path, home: Path, saves: int, debounce: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUREMIND_")}
    env.update(PUREMIND_HOME=str(home), PUREMIND_EMBED_MODEL="none", PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "puremind", "watch", str(vault), "--debounce", str(debounce)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in iter(proc.stdout.readline, "")], daemon=True).start()
    try:
        first = lines.get(timeout=600)
        first_s = float(re.search(r"in ([\d.]+)s$", first.strip()).group(1))
        notes = sorted(p for p in vault.rglob("*.md") if not any(part.startswith(".") for part in p.relative_to(vault).parts))
        store = Store.open(home / "index.sqlite", create=False)
        rng = random.Random(11)
        latencies: list[float] = []
        run_seconds: list[float] = []
        for i in range(saves):
            note = rng.choice(notes)
            rel = note.relative_to(vault).as_posix()
            word = f"latencyprobe{i}z{rng.randrange(10**9)}"
            with open(note, "a", encoding="utf-8") as fh:
                fh.write(f"\n{word}\n")
            saved = time.perf_counter()
            deadline = saved + 120
            while True:
                hits = search_lexical(store, word, 5)
                if any(h.path == rel for h in hits):
                    latencies.append(time.perf_counter() - saved)
                    break
                if time.perf_counter() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"save {i} of {rel} was never found (watch exit {proc.poll()})")
                time.sleep(POLL)
            while True:  # the run's summary line, for its duration
                try:
                    line = lines.get(timeout=5)
                except queue.Empty:
                    break
                m = re.search(r" 1 changed, .* in ([\d.]+)s$", line.strip())
                if m:
                    run_seconds.append(float(m.group(1)))
                    break
            time.sleep(rng.uniform(0.1, 0.5))  # a person does not save again at once
        store.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {
        "name": name,
        "notes": len(notes),
        "first_s": first_s,
        "saves": saves,
        "debounce": debounce,
        "median": statistics.median(latencies),
        "p95": percentile(latencies, 0.95),
        "min": min(latencies),
        "max": max(latencies),
        "run_median": statistics.median(run_seconds) if run_seconds else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=2000, help="notes in the synthetic vault (0: none)")
    parser.add_argument("--archive", type=Path, help="a .tar.gz of notes (tldr-pages) or a folder, measured too")
    parser.add_argument("--saves", type=int, default=30)
    parser.add_argument("--debounce", type=float, default=2.0, help="the watch's --debounce (default: the CLI's)")
    parser.add_argument("--write-results", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="puremind-watch-bench-") as tmp:
        tmp_path = Path(tmp)
        if args.notes:
            vault = tmp_path / "synthetic"
            synthetic_vault(vault, args.notes)
            rows.append(measure(f"synthetic, {args.notes} notes", vault, tmp_path / "home-synthetic", args.saves, args.debounce))
        if args.archive:
            if args.archive.is_dir():
                vault = tmp_path / "archive"
                # A copy: the benchmark writes into its notes.
                subprocess.run(["cp", "-r", str(args.archive), str(vault)], check=True)
            else:
                vault = tmp_path / "archive"
                with tarfile.open(args.archive) as tar:
                    tar.extractall(vault, filter="data")
            rows.append(measure(args.archive.name, vault, tmp_path / "home-archive", args.saves, args.debounce))

    lines = [
        f"`puremind watch --debounce {args.debounce:g}` in a subprocess, keyword search only; {args.saves} saves per vault, "
        f"each found by polling a lexical search every {POLL * 1000:.0f} ms; {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.2f} at the end.",
        "",
        "| vault | notes | first run s | median s | p95 s | min s | max s | median over debounce s | median run s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['notes']} | {r['first_s']:.1f} | {r['median']:.2f} | {r['p95']:.2f} | {r['min']:.2f} | "
            f"{r['max']:.2f} | {r['median'] - r['debounce']:.2f} | {r['run_median']:.2f} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        command = "python bench/watch_latency.py"
        if args.notes != 2000:
            command += f" --notes {args.notes}"
        if args.archive:
            command += f" --archive {args.archive}"
        if args.saves != 30:
            command += f" --saves {args.saves}"
        if args.debounce != 2.0:
            command += f" --debounce {args.debounce:g}"
        write_section(SECTION, command + " --write-results", table)


if __name__ == "__main__":
    main()
