"""Does an int8 cross-encoder's score depend on the passages batched with it, and what does scoring one pair
per call cost?

    python bench/rerank_batching.py WORKDIR [--threads 2] [--candidates 50] [--tokens 200] [--runs 3]
                                    [--write-results]

int8 here is dynamic quantisation (`quantize_dynamic`): each weight matmul quantises its input with one scale
for the whole batch tensor, so a pair's activations are rounded on a grid set by its batch mates, and its score
moves with them. The reranking budget (puremind/retrieval/rerank.py) scores candidates in fused order in batches
sized by time, so with int8 and batches a non-binding budget would not give exactly the scores of no budget.

The model is the full-size random-weight stand-in of bge-reranker-v2-m3, exported fp32 and int8 by pureMind's
own export code (bench/ort_profile.py's `reranker_dirs`, reused when WORKDIR holds it). Each (variant, batch
size) runs in a fresh process with the product's OnnxReranker: a warm-up call, then `--runs` calls scoring the
same `--candidates` (query, passage) pairs of ~`--tokens` tokens; then the same pairs in three groupings (one
call; one call per pair; a probe of 4 then the rest, as the budget's first search does): the largest score
difference between groupings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.index_speed import write_section  # noqa: E402
from bench.models_speed import passages_of_tokens  # noqa: E402
from bench.ort_optimize import QUERY, log  # noqa: E402
from bench.ort_profile import reranker_dirs  # noqa: E402

SECTION = "rerank-batching"


def worker(args: argparse.Namespace) -> None:
    """One (variant folder, batch size) in a fresh process; one JSON line on stdout."""
    from puremind.models.onnx_backend import OnnxReranker

    folder, batch = Path(args.worker[0]), int(args.worker[1])
    texts = passages_of_tokens(folder / "tokenizer.json", args.candidates, args.tokens)
    rr = OnnxReranker(folder, providers=["CPUExecutionProvider"], max_chars=100_000, threads=args.threads,
                      batch_size=batch)
    rr.score(QUERY, texts[:4])  # warm-up: session load
    times, cpu = [], []
    scores = None
    for _ in range(args.runs):
        t0, c0 = time.perf_counter(), time.process_time()
        scores = [float(s) for s in rr.score(QUERY, texts)]
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    one_by_one = [float(rr.score(QUERY, [t])[0]) for t in texts]
    probe = [float(s) for s in rr.score(QUERY, texts[:4])] + [float(s) for s in rr.score(QUERY, texts[4:])]
    print(json.dumps({
        "median_s": statistics.median(times), "cpu_s": statistics.median(cpu), "scores": scores,
        "vs_one_by_one": max(abs(a - b) for a, b in zip(scores, one_by_one)),
        "vs_probe": max(abs(a - b) for a, b in zip(scores, probe)),
        "same_order": sorted(range(len(texts)), key=lambda i: -scores[i])
        == sorted(range(len(texts)), key=lambda i: -probe[i]),
    }))


def fresh_worker(script: str, argv: list[str], threads: int, what: str) -> dict:
    """`script` run with `argv` in a fresh process (`threads` OpenMP threads): its last line of stdout, as JSON."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, script, *argv], capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"worker failed ({what}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def publish(body: str, section: str, write: bool) -> None:
    """Print a bench's table; with `write`, also into its section of bench/RESULTS.md with the command run."""
    print(body)
    if write:
        script = Path(sys.argv[0]).name
        write_section(section, f"python bench/{script} " + " ".join(shlex.quote(a) for a in sys.argv[1:]), body)


def run_worker(args: argparse.Namespace, folder: Path, batch: int) -> dict:
    return fresh_worker(__file__, [str(args.workdir), "--threads", str(args.threads), "--candidates",
                                   str(args.candidates), "--tokens", str(args.tokens), "--runs", str(args.runs),
                                   "--worker", str(folder), str(batch)], args.threads, f"{folder}, batch {batch}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--worker", nargs=2, metavar=("DIR", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    dirs = reranker_dirs(args.workdir)
    rows, results = [], {}
    for variant, batch in (("int8", 16), ("int8", 1), ("fp32", 16), ("fp32", 1)):
        log(f"{variant}, batch {batch} ...")
        results[(variant, batch)] = r = run_worker(args, dirs[variant], batch)
        log(f"  {r['median_s']:.2f} s")
    for (variant, batch), r in results.items():
        base = results[(variant, 16)]
        fp32 = results[("fp32", 16)]["scores"]
        rows.append(
            f"| {variant} | {batch} | {r['median_s']:.2f} | {args.candidates / r['median_s']:.2f} | "
            f"{base['median_s'] / r['median_s']:.2f}x | {base['cpu_s'] / r['cpu_s']:.2f}x | "
            f"{r['vs_one_by_one']:.4f} | {r['vs_probe']:.4f} | {'yes' if r['same_order'] else 'no'} | "
            f"{max(abs(a - b) for a, b in zip(r['scores'], fp32)):.4f} |")
    header = (f"Full-size random-weight stand-in of bge-reranker-v2-m3 (XLM-R large), pureMind's exports, "
              f"onnxruntime CPU, {args.threads} intra-op threads, {platform.machine()}, {os.cpu_count()} CPUs; "
              f"{args.candidates} (query, passage) pairs of ~{args.tokens} tokens; each row a fresh process with "
              f"the product's OnnxReranker (length-sorted batches), median of {args.runs} calls after a warm-up. "
              "Groupings: the same pairs scored in one call, one call per pair, and a probe of 4 then the rest "
              "(the budget's first search); the columns give the largest difference in score (probability).\n\n"
              "| variant | batch size | seconds for all | pairs/s | vs batch 16 (wall) | vs batch 16 (CPU) | "
              "max Δp vs one call per pair | max Δp vs probe-then-rest | same order as probe-then-rest | "
              "max Δp vs fp32 batch 16 |\n|---|---|---|---|---|---|---|---|---|---|")
    publish(header + "\n" + "\n".join(rows), SECTION, args.write_results)


if __name__ == "__main__":
    main()
