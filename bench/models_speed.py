"""Model speed and memory: torch against ONNX fp32, fp16 and 8-bit, on the real configurations with random weights.

    python bench/models_speed.py WORKDIR [--threads 2] [--passages 16] [--candidates 50] [--write-results]

Builds full-size stand-ins of Qwen3-Embedding-0.6B and bge-reranker-v2-m3 (the real configs, random weights:
the same work per token as the real models) in WORKDIR, exports them with pureMind's own export code, then runs
every (model, backend/variant) in a fresh subprocess and measures: load time (first call included, as a
server's first search pays it), passages per second for 300-token passages (embedder), seconds to rerank
`--candidates` passages of 200 tokens (reranker; what the real tokenizer makes of 800 characters of English), and peak resident memory. Ratios are to torch in the same
run. Needs the [export] extra (torch, Optimum). Takes about 15 minutes and ~10 GB of disk on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SECTION = "models-speed"
WORDS = (
    "the index keeps every note as chunks with a heading path and a line span so that an agent can open "
    "the exact place where an answer was written down last week while debugging the deploy script "
).split()


def passage(i: int, words: int) -> str:
    return " ".join(WORDS[(i * 7 + j) % len(WORDS)] + (str(j % 13) if j % 5 == 0 else "") for j in range(words))


def worker(args: argparse.Namespace) -> None:
    """One measurement in a fresh process, printed as one JSON line."""
    import numpy as np

    from puremind.models.manifest import load_manifest

    manifest = load_manifest()
    spec = manifest.get("qwen3-embedding-0.6b" if args.role == "embedder" else "bge-reranker-v2-m3")
    t0 = time.perf_counter()
    if args.role == "embedder":
        texts = [passage(i, 400) for i in range(args.passages)]
        if args.variant == "torch":
            from puremind.models.torch_backend import TorchEmbedder

            model = TorchEmbedder(Path(args.dir), spec, max_tokens=300, threads=args.threads, fingerprint="bench", device="cpu")
        else:
            from puremind.models.onnx_backend import OnnxEmbedder

            model = OnnxEmbedder(Path(args.dir), providers=["CPUExecutionProvider"], max_tokens=300, threads=args.threads, fingerprint="bench")
        model.embed(texts[:1])
        load_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        out = model.embed(texts)
        secs = time.perf_counter() - t1
        result = {"load_s": load_s, "per_s": len(texts) / secs, "secs": secs, "sample": np.asarray(out[:4]).tolist()}
    else:
        passages = passages_of_tokens(Path(args.dir) / "tokenizer.json", args.candidates, 200)
        query = "where did I write down how the deploy script was debugged"
        if args.variant == "torch":
            from puremind.models.torch_backend import TorchReranker

            model = TorchReranker(Path(args.dir), spec, max_chars=100_000, threads=args.threads, device="cpu")
        else:
            from puremind.models.onnx_backend import OnnxReranker

            model = OnnxReranker(Path(args.dir), providers=["CPUExecutionProvider"], max_chars=100_000, threads=args.threads)
        model.score(query, passages[:1])
        load_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        scores = model.score(query, passages)
        secs = time.perf_counter() - t1
        result = {"load_s": load_s, "per_s": len(passages) / secs, "secs": secs, "sample": np.asarray(scores).tolist()}
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


def peak_rss_mb() -> float:
    """This process's peak resident memory. VmHWM, not ru_maxrss: Linux carries the parent's peak into
    ru_maxrss across fork and exec, so every worker would report the parent's export peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def passages_of_tokens(tokenizer_json: Path, count: int, tokens: int) -> list[str]:
    """`count` passages that tokenize to about `tokens` tokens each. The stand-ins' tokenizers are trained on a
    tiny corpus and split text far finer than the real ones, so a fixed character length would give the
    random-weight models several times the real work; a real 800-character English passage is ~200 tokens."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.no_truncation()
    tok.no_padding()
    out = []
    for i in range(count):
        text = passage(i, 600)
        ids = tok.encode(text).offsets
        cut = ids[min(tokens, len(ids)) - 1][1]
        out.append(text[:cut])
    return out


def build(workdir: Path, variants: tuple[str, ...] = ("fp32", "fp16", "int8")) -> dict[str, dict[str, Path]]:
    """Full-size stand-ins exported by pureMind's export code: {role: {"torch": src, variant: artefact dir}}."""
    from puremind.export import export_model
    from puremind.models.hub import ModelSource
    from puremind.models.manifest import load_manifest
    from scripts.standins import build_qwen3, build_xlmr_reranker

    manifest = load_manifest()
    out: dict[str, dict[str, Path]] = {}
    for role, key, builder in (
        ("embedder", "qwen3-embedding-0.6b", build_qwen3),
        ("reranker", "bge-reranker-v2-m3", build_xlmr_reranker),
    ):
        src = workdir / f"src-{role}"
        if not (src / "model.safetensors").exists():
            print(f"building full-size {role} stand-in ...", file=sys.stderr, flush=True)
            builder(src, full_size=True)
        spec = manifest.get(key)
        # Filed under the pinned revision, so a PUREMIND_HOME holding these exports serves the default
        # configuration (bench/search_speed.py runs `puremind serve` on it).
        source = ModelSource(name=spec.hub_id, path=src, revision=spec.revision, local=False)
        paths = export_model(spec, source, workdir / "home", list(variants))
        out[role] = {"torch": src, **paths}
    return out


def cosine(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--passages", type=int, default=16)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--worker", nargs=3, metavar=("ROLE", "VARIANT", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.role, args.variant, args.dir = args.worker
        worker(args)
        return

    args.workdir.mkdir(parents=True, exist_ok=True)
    dirs = build(args.workdir)
    rows = []
    for role in ("embedder", "reranker"):
        base = None
        for variant in ("torch", "fp32", "fp16", "int8"):
            cmd = [sys.executable, __file__, str(args.workdir), "--threads", str(args.threads), "--passages",
                   str(args.passages), "--candidates", str(args.candidates), "--worker", role, variant, str(dirs[role][variant])]
            print(f"measuring {role} {variant} ...", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
            if proc.returncode != 0:
                raise SystemExit(f"{role} {variant} failed:\n{proc.stderr[-2000:]}")
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            if variant == "torch":
                base = res
            agree = cosine(res["sample"], base["sample"]) if role == "embedder" else max(
                abs(a - b) for a, b in zip(res["sample"], base["sample"]))
            rows.append((role, variant, res, base, agree))

    lines = [
        f"Full-size random-weight stand-ins (Qwen3-Embedding-0.6B and bge-reranker-v2-m3 configurations), "
        f"{args.threads} threads, {platform.machine()}, {os.cpu_count()} CPUs. Embedder: {args.passages} passages "
        f"of 300 tokens. Reranker: {args.candidates} candidates of 200 tokens (what 800 characters of English give the real tokenizer). Each row is a fresh process.",
        "",
        "| model | backend | load + first call (s) | throughput | vs torch | peak RSS (MB) | RSS vs torch | agreement with torch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for role, variant, res, base, agree in rows:
        unit = "passages/s" if role == "embedder" else f"s for {args.candidates} candidates"
        value = f"{res['per_s']:.2f} {unit}" if role == "embedder" else f"{res['secs']:.1f} {unit}"
        speed = res["per_s"] / base["per_s"]
        agreement = f"cos {agree:.5f}" if role == "embedder" else f"max |Δp| {agree:.4f}"
        name = "torch fp32" if variant == "torch" else f"ONNX {variant}"
        lines.append(
            f"| {role} | {name} | {res['load_s']:.1f} | {value} | {speed:.2f}x | {res['peak_rss_mb']:.0f} | "
            f"{res['peak_rss_mb'] / base['peak_rss_mb']:.2f}x | {agreement} |"
        )
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        from bench.index_speed import write_section

        write_section(SECTION, "python bench/models_speed.py WORKDIR --write-results", table)


if __name__ == "__main__":
    main()
