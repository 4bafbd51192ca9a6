"""ONNX Runtime's transformer graph optimiser (fused attention, layer norm, GELU) on the exported models.

    python bench/ort_optimize.py WORKDIR [--threads 2] [--candidates 50] [--passages 16] [--write-results]

Measures whether `onnxruntime.transformers.optimizer.optimize_model` makes the exported models faster per
candidate than today's int8 exports, on full-size random-weight stand-ins of bge-reranker-v2-m3 and
Qwen3-Embedding-0.6B (the same work per token as the real models). WORKDIR is the bench folder of
bench/models_speed.py: `build(WORKDIR, ("fp32", "int8"))` exports fp32 and today's int8 with pureMind's own export
code (skipped when already there and verified). Variants, each written under WORKDIR/ort-optimize/:

- int8: today's export (dynamic per-channel QInt8, export/quantize.py `quantize_int8`);
- fp32: the plain Optimum export, the reference for outputs;
- fp32-opt: fp32 through `optimize_model` (reranker: model_type "bert", 16 heads, hidden 1024; embedder:
  model_type "qwen3", 16 heads, hidden 1024), default opt_level and fusion options;
- fp32-opt-int8: fp32-opt quantized as today's int8 (`quantize_int8` with the manifest's method and
  exclude_ops); when quantize_dynamic cannot type the fused ops' outputs ("Unable to find data type"), the same
  call again with `extra_options` DefaultTensorType = FLOAT added (the table's notes say so);
- int8-opt: today's int8 through `optimize_model`.

For each: the fused-operator counts `get_fused_operator_statistics()` reports (or the optimiser's error), the
file size, then, in a fresh subprocess each, the product's runtime (OnnxReranker / OnnxEmbedder: ORT_ENABLE_ALL,
one inter-op thread, sequential) with `--threads` intra-op threads: a warm-up call, then the median of 3 timed
runs over `--candidates` (query, passage) pairs of ~200 tokens (reranker) or `--passages` passages of 300 tokens
(embedder); ratio to today's int8; agreement with fp32 on the same inputs (reranker: max |Δp| of the sigmoid
probabilities; embedder: min cosine of the vectors). Embedder variants are timed only when the optimiser fused
something in them. Needs the [export] extra; ~10 GB of disk more and 20-30 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.models_speed import build, cosine, passage, passages_of_tokens, peak_rss_mb  # noqa: E402

SECTION = "ort-optimize"
KEYS = {"reranker": "bge-reranker-v2-m3", "embedder": "qwen3-embedding-0.6b"}
#: optimize_model arguments per role: both stand-ins have 16 attention heads and hidden size 1024.
OPTIMIZER = {
    "reranker": {"model_type": "bert", "num_heads": 16, "hidden_size": 1024},
    "embedder": {"model_type": "qwen3", "num_heads": 16, "hidden_size": 1024},
}
VARIANTS = ("int8", "fp32", "fp32-opt", "fp32-opt-int8", "int8-opt")
HOW = {
    "int8": "today's export (quantize_dynamic per-channel)",
    "fp32": "plain Optimum export",
    "fp32-opt": "optimize_model(fp32)",
    "fp32-opt-int8": "optimize_model(fp32), then today's int8 quantisation",
    "int8-opt": "optimize_model(today's int8)",
}
QUERY = "where did I write down how the deploy script was debugged"
MODEL_FILES = ("model.onnx", "model.onnx_data")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def size_bytes(folder: Path) -> int:
    return sum((folder / n).stat().st_size for n in MODEL_FILES if (folder / n).is_file())


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


# --- preparing the variants ---------------------------------------------------------------------------------


def new_variant_dir(dest: Path, like: Path, variant: str) -> None:
    """A folder the product's ONNX classes can load: tokenizer files and puremind_model.json from `like`."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json"):
        if (like / name).is_file():
            shutil.copyfile(like / name, dest / name)
    meta = json.loads((like / "puremind_model.json").read_text())
    meta["variant"] = variant
    meta.pop("files", None)  # not an artefact: nothing verifies checksums here
    (dest / "puremind_model.json").write_text(json.dumps(meta, indent=2))


def optimize(src: Path, dst_dir: Path, role: str) -> dict:
    """`optimize_model` on src, saved as dst_dir/model.onnx (weights beside it over 2 GB); returns fused counts."""
    import logging

    from onnxruntime.transformers.optimizer import optimize_model

    from puremind.export.quantize import save_onnx

    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    model = optimize_model(str(src), **OPTIMIZER[role])
    stats = {k: int(v) for k, v in model.get_fused_operator_statistics().items() if v}
    save_onnx(model.model, dst_dir / "model.onnx")
    return stats


def quantize_like_today(src: Path, dst_dir: Path, role: str) -> dict:
    """Today's int8 quantisation (the manifest's method and exclude_ops) of `src`."""
    from puremind.export.quantize import quantize_int8
    from puremind.models.manifest import load_manifest

    import onnx

    vspec = load_manifest().get(KEYS[role]).variants["int8"]
    method = vspec.method or "dynamic-per-channel"
    note = None
    graph = onnx.load(str(src), load_external_data=False)
    if not any(o.domain == "com.microsoft" for o in graph.opset_import) and any(
            n.domain == "com.microsoft" for n in graph.graph.node):
        # The qwen3 fusions add com.microsoft ops (RotaryEmbedding) without declaring the domain, which onnx
        # shape inference inside quantize_dynamic rejects; declare it in a copy of the graph file.
        graph.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
        fixed = src.parent / "declared.onnx"  # beside src, so its external weights are found
        onnx.save_model(graph, str(fixed))
        note = "com.microsoft opset declared before quantizing"
        src = fixed
    del graph
    try:
        quantize_int8(src, dst_dir / "model.onnx", method, vspec.exclude_ops)
    except RuntimeError as exc:
        if "Unable to find data type" not in str(exc) or not method.startswith("dynamic-"):
            raise
        # The fused contrib ops (Attention, SkipLayerNormalization) have no ONNX shape inference, so
        # quantize_dynamic cannot type their outputs (toolchain.md section 4). The same call as
        # puremind.export.quantize._dynamic with one more extra option, DefaultTensorType = FLOAT.
        from onnxruntime.quantization import QuantType, quantize_dynamic

        from puremind.export.quantize import nodes_matching

        log(f"  quantize_int8 failed ({one_line(exc)[:90]}...); again with DefaultTensorType=FLOAT")
        quantize_dynamic(
            model_input=str(src), model_output=str(dst_dir / "model.onnx"),
            per_channel=method != "dynamic-per-tensor", weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"] if method.endswith("-matmul") else None,
            nodes_to_exclude=nodes_matching(src, vspec.exclude_ops),
            extra_options={"MatMulConstBOnly": True, "DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        note = "; ".join(x for x in (note, "quantize_int8's quantize_dynamic call + extra_options "
                                           "DefaultTensorType=FLOAT") if x)

    ops: dict[str, int] = {}
    for node in onnx.load(str(dst_dir / "model.onnx"), load_external_data=False).graph.node:
        if node.op_type in ("QAttention", "Attention", "MultiHeadAttention", "QEmbedLayerNormalization",
                            "EmbedLayerNormalization", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                            "BiasGelu", "Gelu", "FastGelu", "RotaryEmbedding", "GroupQueryAttention",
                            "SimplifiedLayerNormalization", "LayerNormalization", "MatMulInteger",
                            "DynamicQuantizeMatMul"):
            ops[node.op_type] = ops.get(node.op_type, 0) + 1
    if note:
        ops["_note"] = note
    return ops


def prepare(role: str, dirs: dict[str, Path], out: Path) -> dict[str, dict]:
    """Make every variant of one role under `out`; {variant: {"dir", "fused", "error", "seconds"}}.

    A variant whose folder holds a `prepared.json` from an earlier run is reused."""
    int8_dir, fp32_dir = dirs["int8"], dirs["fp32"]
    info: dict[str, dict] = {
        "int8": {"dir": str(int8_dir), "fused": {}, "error": None},
        "fp32": {"dir": str(fp32_dir), "fused": {}, "error": None},
    }
    steps = {
        "fp32-opt": lambda d: optimize(fp32_dir / "model.onnx", d, role),
        "fp32-opt-int8": lambda d: quantize_like_today(out / f"{role}-fp32-opt" / "model.onnx", d, role),
        "int8-opt": lambda d: optimize(int8_dir / "model.onnx", d, role),
    }
    for variant, step in steps.items():
        dest = out / f"{role}-{variant}"
        done = dest / "prepared.json"
        if done.is_file():
            info[variant] = json.loads(done.read_text())
            log(f"{role} {variant}: reusing {dest}")
            continue
        if variant == "fp32-opt-int8" and info["fp32-opt"]["error"]:
            info[variant] = {"dir": str(dest), "fused": {}, "error": "fp32-opt failed", "seconds": 0.0}
            continue
        log(f"{role} {variant}: {HOW[variant]} ...")
        new_variant_dir(dest, int8_dir, variant)
        start = time.perf_counter()
        try:
            fused, error = step(dest), None
        except Exception as exc:  # noqa: BLE001 - the optimiser's failure is a result
            fused, error = {}, one_line(exc)
            log(f"  failed: {error}")
        note = fused.pop("_note", None)
        info[variant] = {"dir": str(dest), "fused": fused, "error": error, "note": note,
                         "seconds": round(time.perf_counter() - start, 1)}
        log(f"  {info[variant]}")
        done.write_text(json.dumps(info[variant]))
    return info


# --- timing, in a fresh process -----------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    """Load one variant with the product's ONNX classes, warm up, time 3 runs; one JSON line on stdout."""
    import numpy as np

    folder = Path(args.dir)
    t0 = time.perf_counter()
    if args.role == "reranker":
        from puremind.models.onnx_backend import OnnxReranker

        texts = passages_of_tokens(folder / "tokenizer.json", args.candidates, 200)
        model = OnnxReranker(folder, providers=["CPUExecutionProvider"], max_chars=100_000, threads=args.threads)
        call = lambda: model.score(QUERY, texts)  # noqa: E731
        model.score(QUERY, texts[:16])  # warm-up: loads the session and runs one full batch
    else:
        from puremind.models.onnx_backend import OnnxEmbedder

        texts = [passage(i, 400) for i in range(args.passages)]
        model = OnnxEmbedder(folder, providers=["CPUExecutionProvider"], max_tokens=300, threads=args.threads,
                             fingerprint="bench")
        call = lambda: model.embed(texts)  # noqa: E731
        model.embed(texts[:1])
    load_s = time.perf_counter() - t0
    secs, cpu, out = [], [], None
    for _ in range(3):
        t1, c1 = time.perf_counter(), time.process_time()
        out = call()
        secs.append(time.perf_counter() - t1)
        cpu.append(time.process_time() - c1)
    median = statistics.median(secs)
    print(json.dumps({"load_s": load_s, "secs": secs, "cpu_secs": cpu, "per_s": len(texts) / median,
                      "per_cpu_s": len(texts) / statistics.median(cpu),
                      "finite": bool(np.all(np.isfinite(np.asarray(out)))),
                      "sample": np.asarray(out, dtype=np.float64).tolist(), "peak_rss_mb": peak_rss_mb()}))


def measure(args: argparse.Namespace, role: str, folder: str) -> dict:
    cmd = [sys.executable, __file__, str(args.workdir), "--threads", str(args.threads), "--candidates",
           str(args.candidates), "--passages", str(args.passages), "--worker", role, folder]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "ORT_DISABLE_TELEMETRY": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def agreement(role: str, res: dict, ref: dict) -> float:
    import numpy as np

    a, b = np.asarray(res["sample"]), np.asarray(ref["sample"])
    if role == "reranker":
        return float(np.max(np.abs(a - b)))
    return min(cosine(x, y) for x, y in zip(a, b))


def fmt_fused(fused: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(fused.items())) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--passages", type=int, default=16)
    parser.add_argument("--write-results", action="store_true")
    parser.add_argument("--worker", nargs=2, metavar=("ROLE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.role, args.dir = args.worker
        worker(args)
        return

    import onnxruntime

    args.workdir.mkdir(parents=True, exist_ok=True)
    dirs = build(args.workdir, ("fp32", "int8"))
    out = args.workdir / "ort-optimize"
    out.mkdir(exist_ok=True)
    rows = []
    for role in ("embedder", "reranker"):
        info = prepare(role, dirs[role], out)
        fused_any = any(sum(info[v]["fused"].values()) for v in ("fp32-opt", "int8-opt") if not info[v]["error"])
        timed = {}
        for variant in VARIANTS:
            item = info[variant]
            if item["error"]:
                continue
            if role == "embedder" and not fused_any:
                continue  # nothing fused: no optimised embedder to compare
            log(f"measuring {role} {variant} ...")
            timed[variant] = measure(args, role, item["dir"])
            log(f"  {({k: v for k, v in timed[variant].items() if k != 'sample'})}")
        base, ref = timed.get("int8"), timed.get("fp32")
        for variant in VARIANTS:
            item = info[variant]
            res = timed.get(variant, {})
            size = size_bytes(Path(item["dir"])) if not item["error"] else 0
            fused = fmt_fused(item["fused"]) if variant not in ("int8", "fp32") else "–"
            if item["error"]:
                note = f"optimiser/quantiser failed: {item['error']}"
            elif "error" in res:
                note = f"does not run: {res['error']}"
            elif not res:
                note = "not timed (nothing fused)"
            else:
                note = "" if res.get("finite", True) else "non-finite outputs"
            if item.get("note"):
                note = "; ".join(x for x in (note, item["note"]) if x)
            ok = res and "error" not in res
            speed = f"{res['per_s']:.2f}" if ok else "–"
            ratio = f"{res['per_s'] / base['per_s']:.2f}x" if ok and base and "error" not in base else "–"
            per_cpu = f"{res['per_cpu_s']:.2f}" if ok else "–"
            cpu_ratio = (f"{res['per_cpu_s'] / base['per_cpu_s']:.2f}x" if ok and base and "error" not in base
                         else "–")
            agree = "–"
            if ok and ref and "error" not in ref:
                value = agreement(role, res, ref)
                agree = f"max abs Δp {value:.4f}" if role == "reranker" else f"min cos {value:.5f}"
            rss = f"{res['peak_rss_mb']:.0f}" if ok else "–"
            rows.append((role, variant, HOW[variant], f"{size / 1e6:.0f}" if size else "–", fused, speed, ratio,
                         per_cpu, cpu_ratio, agree, rss, note))

    unit = {"reranker": "pairs/s", "embedder": "passages/s"}
    lines = [
        f"Full-size random-weight stand-ins (bge-reranker-v2-m3 and Qwen3-Embedding-0.6B configurations), "
        f"onnxruntime {onnxruntime.__version__}, {args.threads} intra-op threads, {platform.machine()}, "
        f"{os.cpu_count()} CPUs. Reranker: {args.candidates} (query, passage) pairs of ~200 tokens; embedder: "
        f"{args.passages} passages of 300 tokens. Each row is a fresh process running the product's ONNX backend "
        "(ORT_ENABLE_ALL): a warm-up call, then the median of 3 runs. Optimiser: `optimize_model` with "
        f"{OPTIMIZER['reranker']} (reranker) and {OPTIMIZER['embedder']} (embedder), default opt_level and fusion "
        "options; int8 everywhere is today's `quantize_int8` (dynamic per-channel QInt8, the manifest's "
        "exclude_ops). Agreement is with fp32 on the same inputs; fused ops are the optimiser's counts (for "
        "fp32-opt-int8, the fused and quantized ops in the quantized graph). Per CPU-second: items per second of "
        "the worker's process CPU time, steadier than wall time when another job shares the cores.",
        "",
        "| model | variant | how | size (MB) | fused ops | throughput | vs today's int8 | per CPU-second "
        "| vs today's int8 (CPU) | agreement with fp32 | peak RSS (MB) | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for role, variant, how, size, fused, speed, ratio, per_cpu, cpu_ratio, agree, rss, note in rows:
        speed = f"{speed} {unit[role]}" if speed != "–" else speed
        lines.append(f"| {role} | {variant} | {how} | {size} | {fused} | {speed} | {ratio} | {per_cpu} | {cpu_ratio} "
                     f"| {agree} | {rss} | {note} |")
    table = "\n".join(lines)
    print(table)
    if args.write_results:
        from bench.index_speed import write_section

        write_section(SECTION, "python bench/ort_optimize.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]), table)


if __name__ == "__main__":
    main()
