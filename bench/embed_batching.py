"""Does an int8 embedder's vector depend on the texts batched with it, and what does embedding one text per call
cost?

    python bench/embed_batching.py LABEL=DIR [LABEL=DIR ...] [--threads 2] [--passages 48]
                                   [--tokens 40 120 300] [--runs 3] [--write-results]

Each DIR holds a model exported by pureMind (`fp32/` and `int8/` beside each other, as
`<home>/models/<model>@<revision>/`). int8 is dynamic quantisation (`quantize_dynamic`): each weight matmul
quantises its input with one scale for the whole batch tensor, padding included, so a text's activations are
rounded on a grid set by its batch mates. The indexer embeds in calls sized by time, so with batches the same
vault indexed twice gets other vectors (section rerank-batching measured the same for the cross-encoder).

Each (model, passage length, variant, batch size) runs in a fresh process with the product's OnnxEmbedder: a
warm-up call, then `--runs` calls embedding the same `--passages` passages of ~N tokens; then the same passages in
three groupings (one call; one call per passage; 3 then the rest): the largest 1 - cosine between groupings, and
each vector's cosine to fp32 in batches of 16.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.models_speed import passages_of_tokens  # noqa: E402
from bench.ort_optimize import log  # noqa: E402
from bench.rerank_batching import fresh_worker, publish  # noqa: E402

SECTION = "embed-batching"
ROWS = (("int8", 16), ("int8", 1), ("fp32", 16), ("fp32", 1))


def worker(args: argparse.Namespace) -> None:
    """One (variant folder, batch size, length) in a fresh process; one JSON line on stdout."""
    import numpy as np

    from puremind.models.onnx_backend import OnnxEmbedder

    folder, batch, tokens = Path(args.worker[0]), int(args.worker[1]), int(args.worker[2])
    texts = passages_of_tokens(folder / "tokenizer.json", args.passages, tokens)
    model = OnnxEmbedder(folder, providers=["CPUExecutionProvider"], max_tokens=512, threads=args.threads,
                         fingerprint="bench", batch_size=batch)
    model.embed(texts[:4])  # warm-up: session load
    times = []
    vectors = None
    for _ in range(args.runs):
        t0 = time.perf_counter()
        vectors = model.embed(texts)
        times.append(time.perf_counter() - t0)
    one_by_one = np.concatenate([model.embed([t]) for t in texts])
    split = np.concatenate([model.embed(texts[:3]), model.embed(texts[3:])])

    def worst(a, b) -> float:
        return float(np.max(1.0 - np.sum(a * b, axis=1)))

    print(json.dumps({"median_s": statistics.median(times), "vectors": vectors.tolist(),
                      "vs_one_by_one": worst(vectors, one_by_one), "vs_split": worst(vectors, split)}))


def run_worker(args: argparse.Namespace, folder: Path, batch: int, tokens: int) -> dict:
    return fresh_worker(__file__, ["--threads", str(args.threads), "--passages", str(args.passages), "--runs",
                                   str(args.runs), "--worker", str(folder), str(batch), str(tokens)], args.threads,
                        f"{folder}, batch {batch}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", metavar="LABEL=DIR")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--passages", type=int, default=48)
    parser.add_argument("--tokens", type=int, nargs="+", default=[40, 120, 300])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--worker", nargs=3, metavar=("DIR", "BATCH", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    import numpy as np

    rows = []
    for spec in args.models:
        label, _, root = spec.partition("=")
        for tokens in args.tokens:
            results = {}
            for variant, batch in ROWS:
                log(f"{label}, ~{tokens} tokens, {variant}, batch {batch} ...")
                results[(variant, batch)] = run_worker(args, Path(root) / variant, batch, tokens)
            fp32 = np.asarray(results[("fp32", 16)]["vectors"])
            for (variant, batch), r in results.items():
                base = results[(variant, 16)]
                cos = np.sum(np.asarray(r["vectors"]) * fp32, axis=1)
                rows.append(f"| {label} | {tokens} | {variant} | {batch} | {args.passages / r['median_s']:.1f} | "
                            f"{base['median_s'] / r['median_s']:.2f}x | {r['vs_one_by_one']:.5f} | "
                            f"{r['vs_split']:.5f} | {cos.min():.5f} | {cos.mean():.5f} |")
    header = (f"pureMind's exports, onnxruntime CPU, {args.threads} intra-op threads, {platform.machine()}, "
              f"{os.cpu_count()} CPUs; {args.passages} passages of about the given number of tokens; each row a "
              f"fresh process with the product's OnnxEmbedder (length-sorted batches), median of {args.runs} calls "
              "after a warm-up. Groupings: the same passages embedded in one call, one call per passage, and 3 then "
              "the rest; the columns give the largest 1 - cosine between the vectors of two groupings, and the "
              "cosine of each vector to fp32 in batches of 16.\n\n"
              "| model | tokens | variant | batch size | passages/s | vs batch 16 | max 1-cos vs one per call | "
              "max 1-cos vs 3-then-rest | min cos to fp32 | mean cos to fp32 |\n"
              "|---|---|---|---|---|---|---|---|---|---|")
    publish(header + "\n" + "\n".join(rows), SECTION, args.write_results)


if __name__ == "__main__":
    main()
