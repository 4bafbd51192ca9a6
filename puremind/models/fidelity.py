"""Does an exported variant compute what the published model computes? The probe set, the figures, the verdict.

A probe set ships with the package (`probe_set.json`: passages and queries in many languages and scripts, code
and Markdown with frontmatter, each query with its known answers). At export, torch runs the source model in
fp32 on it (the reference); every variant runs the same texts and is compared with the reference:
- an embedder: the cosine of each text's vector to the reference (minimum and mean), and the ranking of each
  query's passages: the share of the reference's top 5 the variant keeps, and whether each query's known answer
  keeps its rank (among the queries whose answer the reference ranks first, "answered": whether the variant
  ranks it first too; near-ties, closer than TIE, are no order to keep);
- a reranker: each pair's probability against the reference (max |delta|), and the ranking of each query's
  candidates (the top candidate kept, and the share of candidate pairs kept in the same order).
A variant below a threshold is kept out: never chosen automatically (`choose_variant`), though `[models]
variant` can still force it. The figures, the verdict and the reference outputs (float16) go into the variant's
`puremind_model.json` under "fidelity", so the runtime can check a provider on the user's machine against the
same reference (`puremind.models.provider_check`).

Only numpy and the standard library: the runtime reads verdicts without loading a model.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

PROBE_FILE = Path(__file__).with_name("probe_set.json")
FORMAT = 1

#: What a variant must reach against the torch fp32 reference to be chosen automatically. Measured on the real
#: trained models available here (bench/RESULTS.md, section fidelity-thresholds): all-MiniLM-L6-v2 and
#: multilingual-e5-small (4-bit-rounded weights, see shared/tools/multilingual-e5), every variant and int8 method;
#: the README says why each value.
EMBEDDER_THRESHOLDS = {
    "min_cosine": 0.95,
    "mean_cosine": 0.98,
    "top5_overlap": 0.85,
    "answer_rank_kept": 0.85,
}
RERANKER_THRESHOLDS = {
    "max_abs_dprob": 0.10,
    "top1_kept": 0.90,
    "pair_order_kept": 0.90,
}
#: figures that must be at least their threshold; the others (max |delta p|) at most
_AT_MOST = ("max_abs_dprob",)
#: candidates scored per query by a reranker: its known answers, then other passages (see `reranker_pairs`)
RERANK_CANDIDATES = 6
#: tokens a probe text (or query-passage pair) may use at export: a model with 512 positions (XLM-R: 514, two
#: taken by the padding offset) can take it; the runtime's check leaves out any text it would cut
PROBE_MAX_TOKENS = 510
#: characters of each passage a reranker reads on the probe, whatever `rerank_chars` the user set, so that the
#: runtime's check reads what the reference read (every probe passage is shorter: nothing is cut)
PROBE_CHARS = 800


@dataclass(frozen=True)
class Probe:
    """The probe set as the checks use it: texts in file order, answers as passage indexes."""

    passage_ids: tuple[str, ...]
    passages: tuple[str, ...]
    queries: tuple[str, ...]
    answers: tuple[tuple[int, ...], ...]
    languages: tuple[str, ...]
    scripts: tuple[str, ...]
    passage_scripts: tuple[str, ...] = ()


@lru_cache(maxsize=2)
def load_probe(path: Path = PROBE_FILE) -> Probe:
    """Read and check the probe set (every answer names a passage).

    Raises:
        ValueError: the file is malformed (a packaging bug: it ships with pureMind).
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    passages = data["passages"]
    index = {p["id"]: i for i, p in enumerate(passages)}
    answers = []
    for q in data["queries"]:
        missing = [a for a in q["answers"] if a not in index]
        if missing or not q["answers"]:
            raise ValueError(f"probe query {q['id']} names unknown or no answers: {missing}")
        answers.append(tuple(index[a] for a in q["answers"]))
    items = passages + data["queries"]
    return Probe(
        passage_ids=tuple(p["id"] for p in passages),
        passages=tuple(p["text"] for p in passages),
        queries=tuple(q["text"] for q in data["queries"]),
        answers=tuple(answers),
        languages=tuple(sorted({i["lang"] for i in items})),
        scripts=tuple(sorted({i["script"] for i in items})),
        passage_scripts=tuple(p["script"] for p in passages),
    )


def probe_digest(path: Path = PROBE_FILE) -> str:
    """A short hash of the probe set: a variant checked on another probe set is checked again."""
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


# -- running a model on the probe ------------------------------------------------------------------


def embed_probe(embedder: Any, probe: Probe) -> dict[str, np.ndarray]:
    """{"passages": (n, dim), "queries": (m, dim)} float32 from any Embedder."""
    return {
        "passages": np.asarray(embedder.embed(list(probe.passages)), dtype=np.float32),
        "queries": np.asarray(embedder.embed(list(probe.queries), is_query=True), dtype=np.float32),
    }


def reranker_pairs(probe: Probe, candidates: int = RERANK_CANDIDATES) -> list[tuple[int, list[int]]]:
    """(query index, candidate passage indexes) for every query: its answers first, then the passages that
    follow its first answer in the file (neighbours share topics there), up to `candidates`."""
    out = []
    n = len(probe.passages)
    for qi, answers in enumerate(probe.answers):
        chosen = list(dict.fromkeys(answers))[:candidates]
        step = 1
        while len(chosen) < min(candidates, n):
            idx = (answers[0] + step) % n
            if idx not in chosen:
                chosen.append(idx)
            step += 1
        out.append((qi, chosen))
    return out


def score_probe(reranker: Any, probe: Probe, *, queries: int | None = None) -> dict[str, np.ndarray]:
    """{"scores": (queries, candidates)} probabilities from any Reranker; `queries` limits the check to the
    first ones (the runtime's subset)."""
    pairs = reranker_pairs(probe)[:queries]
    rows = [np.asarray(reranker.score(probe.queries[qi], [probe.passages[i] for i in cands], max_chars=PROBE_CHARS),
                       dtype=np.float64)
            for qi, cands in pairs]
    return {"scores": np.vstack(rows).astype(np.float32)}


def run_probe(model: Any, role: str, probe: Probe | None = None) -> dict[str, np.ndarray]:
    """The outputs of an embedder or a reranker on the whole probe set."""
    probe = probe or load_probe()
    return embed_probe(model, probe) if role == "embedder" else score_probe(model, probe)


# -- comparing with the reference ------------------------------------------------------------------


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


def row_cosines(reference: np.ndarray, variant: np.ndarray) -> np.ndarray:
    """Cosine of each row of `variant` to the same row of `reference`; a non-finite row counts as -1."""
    ref, var = _unit(reference), _unit(variant)
    cos = np.sum(ref * var, axis=1)
    bad = ~np.all(np.isfinite(np.asarray(variant, dtype=np.float64)), axis=1)
    return np.where(bad | ~np.isfinite(cos), -1.0, cos)


#: two similarities (or probabilities) closer than this are a tie: no variant is asked to keep their order, which
#: float16 rounding alone can swap (a random stand-in's scores are all near-ties)
TIE = 0.005


#: queries whose known answer the reference ranks first, below which "answer_rank_kept" is not judged: trained
#: models answer 29 (all-MiniLM-L6-v2) and 43 (multilingual-e5-small) of the probe's 47; a random stand-in answers
#: about 10 by chance, and its int8 variant kept 9 or 8 of them depending on how its texts were batched
MIN_ANSWERED = 20


def _clear_rank(scores: np.ndarray, item: int) -> int:
    """How many entries score above `item` by more than a tie."""
    return int(np.sum(scores > scores[item] + TIE))


def compare_embeddings(reference: Mapping[str, np.ndarray], variant: Mapping[str, np.ndarray],
                       answers: Sequence[Sequence[int]]) -> dict[str, float]:
    """Figures of an embedder variant against the reference (see the module docstring)."""
    cos = np.concatenate([row_cosines(reference["passages"], variant["passages"]),
                          row_cosines(reference["queries"], variant["queries"])])
    ref_sim = _unit(reference["queries"]) @ _unit(reference["passages"]).T
    var = {k: np.nan_to_num(np.asarray(v, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
           for k, v in variant.items()}
    var_sim = _unit(var["queries"]) @ _unit(var["passages"]).T
    k = min(5, ref_sim.shape[1])
    overlap, kept = [], []
    for qi in range(ref_sim.shape[0]):
        ref_order = np.argsort(-ref_sim[qi], kind="stable")
        var_order = np.argsort(-var_sim[qi], kind="stable")
        # a passage the variant puts in its top k is kept when the reference has it there, or within a tie of
        # the reference's k-th score
        floor = ref_sim[qi, ref_order[k - 1]] - TIE
        overlap.append(float(np.sum(ref_sim[qi, var_order[:k]] >= floor)) / k)
        best = max(answers[qi], key=lambda i: ref_sim[qi, i])
        if _clear_rank(ref_sim[qi], best) == 0:
            # Only a query the model answers counts: where the reference itself ranks the known answer lower (a
            # language the model does not read, or a random stand-in), its place among near-equal scores is noise.
            kept.append(_clear_rank(var_sim[qi], best) == 0)
    return {
        "min_cosine": round(float(cos.min()), 6),
        "mean_cosine": round(float(cos.mean()), 6),
        "top5_overlap": round(float(np.mean(overlap)), 4),
        # too few answered queries say nothing: the figure is then left out of the verdict
        "answer_rank_kept": round(float(np.mean(kept)), 4) if len(kept) >= MIN_ANSWERED else None,
        "answered": len(kept),
    }


def compare_scores(reference: Mapping[str, np.ndarray], variant: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Figures of a reranker variant against the reference (rows: queries, columns: their candidates)."""
    ref = np.asarray(reference["scores"], dtype=np.float64)
    var = np.asarray(variant["scores"], dtype=np.float64)
    ref = ref[: var.shape[0]]
    delta = np.abs(ref - var)
    delta = np.where(np.isfinite(delta), delta, 1.0)
    var = np.nan_to_num(var, nan=-1.0)
    # the variant's first candidate is kept when the reference puts it first too, or within a tie of the first
    top1 = ref[np.arange(len(ref)), np.argmax(var, axis=1)] >= ref.max(axis=1) - TIE
    same, total = 0, 0
    for r, v in zip(ref, var):
        for i in range(len(r)):
            for j in range(i + 1, len(r)):
                if abs(r[i] - r[j]) <= TIE:
                    continue  # a tie in the reference has no order to keep
                total += 1
                same += (r[i] > r[j]) == (v[i] > v[j])
    return {
        "max_abs_dprob": round(float(delta.max()), 6),
        "top1_kept": round(float(np.mean(top1)), 4),
        "pair_order_kept": round(same / total, 4) if total else 1.0,
    }


def thresholds_for(role: str) -> dict[str, float]:
    return dict(EMBEDDER_THRESHOLDS if role == "embedder" else RERANKER_THRESHOLDS)


def shortfalls(figures: Mapping[str, float], thresholds: Mapping[str, float]) -> list[str]:
    """One phrase per figure on the wrong side of its threshold, e.g. "min_cosine 0.8975 < 0.95"."""
    out = []
    for name, limit in thresholds.items():
        if figures.get(name) is None:
            continue
        value = figures[name]
        if name in _AT_MOST:
            if not value <= limit:
                out.append(f"{name} {value:.4g} > {limit:g}")
        elif not value >= limit:
            out.append(f"{name} {value:.4g} < {limit:g}")
    return out


def compare(role: str, reference: Mapping[str, np.ndarray], variant: Mapping[str, np.ndarray],
            probe: Probe | None = None) -> dict[str, float]:
    if role == "embedder":
        return compare_embeddings(reference, variant, (probe or load_probe()).answers)
    return compare_scores(reference, variant)


# -- what goes into puremind_model.json ------------------------------------------------------------


def encode_arrays(arrays: Mapping[str, np.ndarray]) -> dict[str, dict]:
    """Arrays as JSON: float16, base64, with their shapes (a 1024-dim Qwen3 reference is about 240 KB)."""
    out = {}
    for name, value in arrays.items():
        arr = np.ascontiguousarray(np.asarray(value, dtype="<f2"))
        out[name] = {"shape": list(arr.shape), "dtype": "float16",
                     "data": base64.b64encode(arr.tobytes()).decode("ascii")}
    return out


def decode_arrays(data: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The inverse of `encode_arrays`, as float32.

    Raises:
        ValueError: malformed data.
    """
    out = {}
    for name, entry in data.items():
        raw = base64.b64decode(entry["data"], validate=True)
        arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        out[name] = arr.reshape([int(n) for n in entry["shape"]])
    return out


#: what the reference of an export is, as its metadata says it; a folder that ships its own ONNX model has no torch
#: reference, and its fp32 ONNX file is the reference instead (`puremind.export.from_onnx`)
TORCH_REFERENCE = "torch fp32 of the source model"


def fidelity_record(role: str, reference: Mapping[str, np.ndarray], variant: Mapping[str, np.ndarray], *,
                    provider: str, probe: Probe | None = None, reference_label: str = TORCH_REFERENCE
                    ) -> dict[str, Any]:
    """The "fidelity" entry of a variant's metadata: figures, thresholds, verdict, and the reference outputs
    (`reference_label` says what computed them)."""
    probe = probe or load_probe()
    figures = compare(role, reference, variant, probe)
    thresholds = thresholds_for(role)
    failed = shortfalls(figures, thresholds)
    return {
        "format": FORMAT,
        "status": "kept-out" if failed else "ok",
        "checked_on": provider,
        "reference": reference_label,
        "probe": {"passages": len(probe.passages), "queries": len(probe.queries),
                  "languages": len(probe.languages), "scripts": len(probe.scripts)},
        "figures": figures,
        "thresholds": thresholds,
        "shortfalls": failed,
        "reference_outputs": encode_arrays(reference),
    }


def pending_record(reason: str) -> dict[str, Any]:
    """The "fidelity" entry of a variant that cannot be checked where it was made (Core ML on Linux)."""
    return {"format": FORMAT, "status": "pending", "reason": reason}


def kept_out(meta: Mapping[str, Any]) -> bool:
    """True when a variant's metadata says it failed its fidelity check at export."""
    fid = meta.get("fidelity")
    return isinstance(fid, Mapping) and fid.get("status") == "kept-out"


def describe_shortfalls(meta: Mapping[str, Any]) -> str:
    fid = meta.get("fidelity") or {}
    return "; ".join(fid.get("shortfalls") or []) or "below its thresholds"
