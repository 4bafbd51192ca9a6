"""The light profile against the pinned embedder: passages per second on this machine's CPU, int8, and what a first
index of a 10,000-chunk vault costs with each.

    python bench/light_profile.py WORKDIR --e5 DIR [--threads 2] [--passages 16] [--write-results]

Builds the full-size Qwen3-Embedding-0.6B stand-in (its real configuration, random weights: the same work per
token as the real model) in WORKDIR, and takes multilingual-e5-small from DIR (the rebuilt copy that
../shared/tools/multilingual-e5 writes: the real architecture and weights, 4-bit rounded). Both are exported to
int8 by pureMind's own export code with the manifest's settings, then each runs in a fresh process: passages of
300 tokens (both models cut at 300 of their own tokens, so the work per passage is comparable), `--threads`
threads, one call of `--passages` passages after a warm-up call. The ratio is to the Qwen3 stand-in in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from index_speed import write_section  # noqa: E402
from models_speed import passage, peak_rss_mb  # noqa: E402

SECTION = "light-profile"
CHUNKS = 10_000


def worker(folder: Path, threads: int, passages: int) -> None:
    from puremind.models.onnx_backend import OnnxEmbedder

    texts = [passage(i, 400) for i in range(passages)]
    t0 = time.perf_counter()
    model = OnnxEmbedder(folder, providers=["CPUExecutionProvider"], max_tokens=300, threads=threads, fingerprint="bench")
    model.embed(texts[:1])
    load_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    model.embed(texts)
    secs = time.perf_counter() - t1
    print(json.dumps({"load_s": load_s, "per_s": len(texts) / secs, "peak_rss_mb": peak_rss_mb()}))


def export(workdir: Path, e5: Path) -> dict[str, Path]:
    from puremind.export import export_model
    from puremind.models.hub import ModelSource
    from puremind.models.manifest import load_manifest
    from scripts.standins import build_qwen3

    manifest = load_manifest()
    qwen_src = workdir / "src-qwen3-full"
    if not (qwen_src / "model.safetensors").exists():
        print("building the full-size Qwen3 stand-in ...", file=sys.stderr, flush=True)
        build_qwen3(qwen_src, full_size=True)
    out = {}
    for label, key, src in (("Qwen3-Embedding-0.6B (full-size stand-in)", "qwen3-embedding-0.6b", qwen_src),
                            ("multilingual-e5-small (rebuilt copy)", "multilingual-e5-small", e5)):
        spec = manifest.get(key)
        source = ModelSource(name=spec.hub_id, path=src, revision=spec.revision, local=False)
        print(f"exporting {label} to int8 ...", file=sys.stderr, flush=True)
        out[label] = export_model(spec, source, workdir / "home", ["int8"], progress=lambda _: None)["int8"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--e5", type=Path, required=False)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--passages", type=int, default=16)
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.threads, args.passages)
        return
    if args.e5 is None:
        parser.error("--e5 DIR is required (build it with ../shared/tools/multilingual-e5 DIR)")
    args.workdir.mkdir(parents=True, exist_ok=True)
    folders = export(args.workdir, args.e5)
    rows = {}
    for label, folder in folders.items():
        done = subprocess.run([sys.executable, __file__, str(args.workdir), "--worker", str(folder),
                               "--threads", str(args.threads), "--passages", str(args.passages)],
                              capture_output=True, text=True, check=True)
        rows[label] = json.loads(done.stdout.strip().splitlines()[-1])
        print(label, rows[label], flush=True)
    base = rows["Qwen3-Embedding-0.6B (full-size stand-in)"]["per_s"]
    lines = [
        f"int8 (dynamic per-channel, the manifest's), {args.threads} threads, {args.passages} passages of 300 tokens "
        f"after a warm-up call, each model in a fresh process; {os.cpu_count()} CPUs. A first index of "
        f"{CHUNKS:,} chunks is the embedding time alone at this rate (real chunks are often shorter than 300 "
        "tokens, so this is an upper bound).",
        "",
        "| embedder | load + first call (s) | passages/s | vs Qwen3 | first index of 10,000 chunks | peak RSS (MB) |",
        "|---|---|---|---|---|---|",
    ]
    from puremind.eta import clock

    for label, row in rows.items():
        lines.append(f"| {label} | {row['load_s']:.1f} | {row['per_s']:.2f} | {row['per_s'] / base:.1f}x "
                     f"| {clock(CHUNKS / row['per_s'])} | {row['peak_rss_mb']:.0f} |")
    text = "\n".join(lines)
    print(text)
    if args.write_results:
        command = "python bench/light_profile.py WORKDIR --e5 DIR " + " ".join(
            a for a in sys.argv[1:] if a.startswith("--") and a not in ("--e5",) and not a.startswith("--e5"))
        write_section(SECTION, command.strip(), text)


if __name__ == "__main__":
    main()
