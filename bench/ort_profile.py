"""Where the int8 cross-encoder's time goes, per ONNX operator type: onnxruntime's own profiler.

    python bench/ort_profile.py WORKDIR [--threads 2] [--pairs 16] [--tokens 200] [--batches 3]
                                [--optimised] [--int8-dir DIR] [--out FILE]

Explains the ceiling on graph-level fusion (bench/ort_optimize.py, section "ort-optimize" of bench/RESULTS.md):
fused attention, layer norm and GELU can only shrink the time spent outside the big weight matmuls, so if those
take a share s of the node time, no fusion can do better than 1/s (Amdahl).

The model is the full-size random-weight stand-in of bge-reranker-v2-m3 (XLM-R large: 24 layers, hidden 1024),
exported fp32 and int8 by pureMind's own export code into WORKDIR the way bench/models_speed.py's `build` lays it
out (WORKDIR/src-reranker, WORKDIR/home; only the reranker is built here, skipped when already exported and
verified), or the int8 folder given with --int8-dir. With --optimised, also the variant bench/ort_optimize.py
calls fp32-opt-int8 (`optimize_model` on fp32, then today's int8), prepared by its `prepare` under
WORKDIR/ort-optimize (reused when there).

Each variant runs in a fresh process with the product's runtime (OnnxReranker, the session options of
puremind/models/onnx_backend.py: ORT_ENABLE_ALL, sequential, one inter-op thread, `--threads` intra-op threads)
plus `SessionOptions.enable_profiling`: one warm-up call, then `--batches` calls of `--pairs` (query, passage)
pairs of ~`--tokens` tokens (one batch each, the product's batch size is 16). The warm-up run is dropped from the
profile; the node events ("*_kernel_time") of the others are summed per op type of the graph onnxruntime
actually ran (after its own level-2 fusions, e.g. MatMulInteger + DynamicQuantizeLinear + Cast + Mul ->
DynamicQuantizeMatMul). Families: quantized weight matmuls (MatMulInteger, DynamicQuantizeLinear,
DynamicQuantizeMatMul, MatMulIntegerToFloat, QGemm, QLinearMatMul), fused quantized attention (QAttention:
the QKV projection and the attention itself in one kernel), float matmuls (MatMul, FusedMatMul, Gemm: the
attention score and context products, which quantize_dynamic leaves in float), everything else.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.models_speed import passages_of_tokens  # noqa: E402
from bench.ort_optimize import HOW, QUERY, log, prepare  # noqa: E402

KEY = "bge-reranker-v2-m3"
QUANT_MATMUL = {"MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QGemm",
                "QLinearMatMul", "MatMulNBits"}
QUANT_ATTENTION = {"QAttention"}
FLOAT_MATMUL = {"MatMul", "FusedMatMul", "Gemm"}
FAMILIES = ("quantized weight matmuls", "fused quantized attention (QAttention)", "float matmuls",
            "everything else")


def family(op: str) -> str:
    if op in QUANT_MATMUL:
        return FAMILIES[0]
    if op in QUANT_ATTENTION:
        return FAMILIES[1]
    if op in FLOAT_MATMUL:
        return FAMILIES[2]
    return FAMILIES[3]


def reranker_dirs(workdir: Path) -> dict[str, Path]:
    """The reranker half of bench.models_speed.build: the full-size stand-in, exported fp32 and int8."""
    from puremind.export import export_model
    from puremind.models.hub import ModelSource
    from puremind.models.manifest import load_manifest
    from scripts.standins import build_xlmr_reranker

    src = workdir / "src-reranker"
    if not (src / "model.safetensors").exists():
        log("building full-size reranker stand-in ...")
        build_xlmr_reranker(src, full_size=True)
    spec = load_manifest().get(KEY)
    source = ModelSource(name=spec.hub_id, path=src, revision=spec.revision, local=False)
    return export_model(spec, source, workdir / "home", ["fp32", "int8"])


# --- the profiled run, in a fresh process -------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    """Profile one variant with the product's OnnxReranker; one JSON line on stdout."""
    from puremind.models import onnx_backend
    from puremind.models.onnx_backend import OnnxReranker

    product_options = onnx_backend.session_options
    prefix = str(Path(args.profile_dir) / "ort_profile")

    def profiled_options(threads):
        options = product_options(threads)
        options.enable_profiling = True
        options.profile_file_prefix = prefix
        return options

    onnx_backend.session_options = profiled_options  # create_session looks the name up at call time
    folder = Path(args.dir)
    texts = passages_of_tokens(folder / "tokenizer.json", args.pairs, args.tokens)
    model = OnnxReranker(folder, providers=["CPUExecutionProvider"], max_chars=100_000, threads=args.threads,
                         batch_size=max(16, args.pairs))
    t0 = time.perf_counter()
    model.score(QUERY, texts)  # warm-up: loads the session and runs one batch (dropped from the profile)
    load_s = time.perf_counter() - t0
    secs, cpu = [], []
    for _ in range(args.batches):
        t1, c1 = time.perf_counter(), time.process_time()
        model.score(QUERY, texts)
        secs.append(time.perf_counter() - t1)
        cpu.append(time.process_time() - c1)
    lengths = [len(e.ids) for e in model.encoder.encode_pairs(QUERY, texts, max_chars=100_000)]
    path = model._lazy.get().end_profiling()
    print(json.dumps({"profile": path, "load_s": load_s, "secs": secs, "cpu_secs": cpu,
                      "pair_tokens": [min(lengths), max(lengths)]}))


def summarise(profile: Path) -> dict:
    """Per op type: summed kernel time (µs) and node count over the runs after the first (the warm-up)."""
    events = json.loads(Path(profile).read_text())
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    if len(runs) < 2:
        raise SystemExit(f"{profile}: {len(runs)} model_run events, expected a warm-up and timed runs")
    start = runs[0]["ts"] + runs[0]["dur"]  # the end of the warm-up run
    timed = runs[1:]
    per_op: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time") or e["ts"] < start:
            continue
        op = e.get("args", {}).get("op_name", "?")
        per_op[op][0] += e["dur"]
        per_op[op][1] += 1
    return {"per_op": {k: (v[0], v[1]) for k, v in per_op.items()}, "runs": len(timed),
            "run_us": sum(r["dur"] for r in timed)}


def measure(args: argparse.Namespace, variant: str, folder: Path) -> dict:
    prof_dir = args.profile_dir / variant
    prof_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, __file__, str(args.workdir), "--threads", str(args.threads), "--pairs", str(args.pairs),
           "--tokens", str(args.tokens), "--batches", str(args.batches), "--profile-dir", str(prof_dir),
           "--worker", str(folder)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "ORT_DISABLE_TELEMETRY": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{proc.stderr[-2000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res.update(summarise(Path(res["profile"])))
    return res


def table(variant: str, res: dict, pairs: int) -> tuple[list[str], dict[str, float]]:
    per_op = res["per_op"]
    total = sum(us for us, _ in per_op.values())
    runs = res["runs"]
    fam: dict[str, float] = defaultdict(float)
    for op, (us, _) in per_op.items():
        fam[family(op)] += us / total
    lines = [
        f"**{variant}** ({HOW.get(variant, variant)}): {runs} profiled batches of {pairs} pairs "
        f"({res['pair_tokens'][0]}-{res['pair_tokens'][1]} tokens each), node time "
        f"{total / runs / 1e3:.0f} ms per batch of {res['run_us'] / runs / 1e3:.0f} ms run time "
        f"({total / res['run_us']:.1%} inside kernels); wall {sorted(res['secs'])[len(res['secs']) // 2]:.2f} s "
        f"per batch (median), {pairs / sorted(res['secs'])[len(res['secs']) // 2]:.2f} pairs/s with profiling on.",
        "",
        "| op type | family | nodes per batch | ms per batch | share of node time |",
        "|---|---|---|---|---|",
    ]
    for op, (us, n) in sorted(per_op.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"| {op} | {family(op)} | {n // runs} | {us / runs / 1e3:.1f} | {us / total:.1%} |")
    lines += ["", "| family | share of node time |", "|---|---|"]
    for name in FAMILIES:
        if fam.get(name):
            lines.append(f"| {name} | {fam[name]:.1%} |")
    q = fam[FAMILIES[0]] + fam[FAMILIES[1]]
    qf = q + fam[FAMILIES[2]]
    lines += [
        "",
        f"Amdahl bound on fusing/speeding up everything but the quantized weight matmuls"
        f"{' and QAttention' if fam[FAMILIES[1]] else ''}: 1 / {q:.3f} = **{1 / q:.2f}x**; "
        f"if the float attention matmuls cannot get faster either: 1 / {qf:.3f} = **{1 / qf:.2f}x**.",
    ]
    return lines, dict(fam)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--optimised", action="store_true", help="also profile ort_optimize's fp32-opt-int8")
    parser.add_argument("--int8-dir", type=Path, help="an int8 reranker export to profile instead of building one")
    parser.add_argument("--profile-dir", type=Path, help="where onnxruntime writes its JSON (default WORKDIR/profiles)")
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument("--worker", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.dir = args.worker
        worker(args)
        return

    import onnxruntime

    started = time.perf_counter()
    args.workdir.mkdir(parents=True, exist_ok=True)
    args.profile_dir = args.profile_dir or args.workdir / "profiles"
    variants: dict[str, Path] = {}
    if args.int8_dir and not args.optimised:
        variants["int8"] = args.int8_dir
    else:
        dirs = reranker_dirs(args.workdir)
        variants["int8"] = args.int8_dir or dirs["int8"]
        if args.optimised:
            out = args.workdir / "ort-optimize"
            out.mkdir(exist_ok=True)
            info = prepare("reranker", dirs, out)
            if info["fp32-opt-int8"]["error"]:
                log(f"fp32-opt-int8 could not be made: {info['fp32-opt-int8']['error']}")
            else:
                variants["fp32-opt-int8"] = Path(info["fp32-opt-int8"]["dir"])
    command = "python bench/ort_profile.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = [
        f"Command: `{command}`",
        "",
        f"Full-size random-weight stand-in of bge-reranker-v2-m3 (XLM-R large), onnxruntime "
        f"{onnxruntime.__version__}, CPU EP, {args.threads} intra-op threads, {platform.machine()}, "
        f"{os.cpu_count()} CPUs; the product's session options plus enable_profiling. Each variant in a fresh "
        f"process: a warm-up call (dropped), then {args.batches} batches of {args.pairs} (query, passage) pairs of "
        f"~{args.tokens} tokens. Shares are of the summed kernel time of the graph onnxruntime ran.",
        "",
    ]
    shares = {}
    for variant, folder in variants.items():
        log(f"profiling {variant} ({folder}) ...")
        res = measure(args, variant, folder)
        part, shares[variant] = table(variant, res, args.pairs)
        lines += part + [""]
    lines.append(f"Total wall time of this script: {time.perf_counter() - started:.0f} s.")
    text = "\n".join(lines)
    print(text)
    print(f"\n{command}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
