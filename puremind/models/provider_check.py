"""The first time a variant runs on an execution provider on a machine, it proves itself against the reference.

The export checks every variant on the CPU of the machine that exported it (`puremind.models.fidelity`). CUDA and
Core ML compute differently (fp16 kernels, fused operators) and run only where the user runs pureMind, and a
models folder can be copied to another machine. So when an onnxruntime session is first made for a variant on a
provider here, part of the probe set runs through it (about 2 s for an embedder: the texts go in, a few at a
time, until the time is up; a reranker scores the first queries' candidates) and is compared with the reference
outputs stored at export, against the export's thresholds. A provider that disagrees is not used: the session
is made again on the CPU with one `warning:` line. On the CPU there is nothing to fall back to, so a
disagreement there is an error.

The verdict is cached in `<home>/models/.provider-checks.json`, keyed by the artefact's hash, the provider, the
onnxruntime version and the machine; a change of any of them checks again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from puremind.errors import ModelError
from puremind.models import fidelity

CACHE_NAME = ".provider-checks.json"
#: seconds an embedder's check may take; at least MIN_TEXTS texts are compared whatever the speed
BUDGET_S = 2.0
MIN_TEXTS = 4
BATCH = 4
#: the figures a partial probe can give, with the export's thresholds
EMBEDDER_FIGURES = ("min_cosine", "mean_cosine")
RERANKER_FIGURES = ("max_abs_dprob",)
#: how far below its export figures a variant may fall here before its provider is judged to disagree
MARGIN = 0.01


def machine_id() -> str:
    """This machine as the cache knows it: host name, system, architecture, processor."""
    return "|".join((platform.node(), platform.system(), platform.machine(), platform.processor()))


def artefact_hash(meta: Mapping[str, Any]) -> str:
    """A hash of the artefact's files as its metadata lists them (the model and everything beside it)."""
    files = meta.get("files") or {}
    joined = "|".join(f"{rel}:{entry.get('sha256')}" for rel, entry in sorted(files.items()))
    return hashlib.sha256(joined.encode()).hexdigest()[:16]


def cache_key(meta: Mapping[str, Any], provider: str, ort_version: str, machine: str) -> str:
    return "|".join((artefact_hash(meta), provider, ort_version, hashlib.sha256(machine.encode()).hexdigest()[:12]))


def read_cache(home: Path) -> dict:
    try:
        data = json.loads((Path(home) / "models" / CACHE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_verdict(home: Path, key: str, verdict: dict) -> None:
    """Add one verdict to the cache, written whole and renamed into place (best effort: a read-only home checks
    again next time)."""
    folder = Path(home) / "models"
    tmp = folder / f"{CACHE_NAME}.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        data = read_cache(home)
        data[key] = verdict
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, folder / CACHE_NAME)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def check_order(probe: fidelity.Probe) -> list[tuple[str, int]]:
    """The probe's texts in the order a time-limited check reads them: the shortest passage of each script first
    (so even four texts span scripts), then queries and passages alternating."""
    scripts = probe.passage_scripts
    first: list[tuple[str, int]] = []
    for script in sorted(set(scripts)):
        idx = min((i for i, s in enumerate(scripts) if s == script), key=lambda i: len(probe.passages[i]))
        first.append(("passages", idx))
    rest_p = [("passages", i) for i in range(len(probe.passages)) if ("passages", i) not in first]
    rest_q = [("queries", i) for i in range(len(probe.queries))]
    mixed: list[tuple[str, int]] = []
    for a, b in zip(rest_q, rest_p):
        mixed += [a, b]
    longer = rest_q if len(rest_q) > len(rest_p) else rest_p
    mixed += longer[min(len(rest_q), len(rest_p)):]
    return first + mixed


def probe_embedder(model: Any, reference: Mapping[str, np.ndarray], *, budget_s: float = BUDGET_S,
                   clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Embed probe texts a few at a time until `budget_s` is spent (at least MIN_TEXTS), compare each with the
    reference; returns {"min_cosine", "mean_cosine", "texts"}."""
    probe = fidelity.load_probe()
    order = check_order(probe)
    started = clock()
    cosines: list[float] = []
    done = 0
    while done < len(order) and (len(cosines) < MIN_TEXTS or clock() - started < budget_s):
        part = order[done:done + BATCH]
        done += len(part)
        for kind in ("queries", "passages"):
            texts = probe.queries if kind == "queries" else probe.passages
            idx = [i for k, i in part if k == kind and _fits(model, texts[i], kind == "queries")]
            if idx:
                vectors = model.embed([texts[i] for i in idx], is_query=kind == "queries")
                cosines += list(fidelity.row_cosines(reference[kind][idx], vectors))
    if not cosines:  # every text over this model's token limit here: nothing comparable, nothing judged
        return {"texts": 0}
    cos = np.asarray(cosines)
    return {"min_cosine": round(float(cos.min()), 6), "mean_cosine": round(float(cos.mean()), 6),
            "texts": len(cosines)}


def probe_reranker(model: Any, reference: Mapping[str, np.ndarray], *, budget_s: float = BUDGET_S,
                   clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Score the first queries' candidates until `budget_s` is spent (at least one query); returns
    {"max_abs_dprob", "texts"} (texts: pairs scored)."""
    probe = fidelity.load_probe()
    pairs = fidelity.reranker_pairs(probe)
    started = clock()
    worst, scored, n = 0.0, 0, 0
    while n < len(pairs) and (scored < 1 or clock() - started < budget_s):
        qi, cands = pairs[n]
        keep = [j for j, i in enumerate(cands) if _pair_fits(model, probe.queries[qi], probe.passages[i])]
        n += 1
        if not keep:
            continue
        passages = [probe.passages[cands[j]] for j in keep]
        scores = np.asarray(model.score(probe.queries[qi], passages, max_chars=fidelity.PROBE_CHARS), dtype=np.float64)
        delta = np.abs(scores - np.asarray(reference["scores"][n - 1][keep], dtype=np.float64))
        worst = max(worst, float(np.max(np.where(np.isfinite(delta), delta, 1.0))))
        scored += len(keep)
    return {"max_abs_dprob": round(worst, 6), "texts": scored}


def _limit(model: Any) -> int:
    encoder = getattr(model, "encoder", None)
    return min(int(getattr(encoder, "max_length", fidelity.PROBE_MAX_TOKENS)), fidelity.PROBE_MAX_TOKENS)


def _fits(model: Any, text: str, is_query: bool) -> bool:
    """Whether the model reads `text` whole, as the reference did: a text cut by a lower token limit here
    (`embed_max_seq`) or by the reference's would differ for that reason alone, so the check leaves it out."""
    encoder = getattr(model, "encoder", None)
    if encoder is None:
        return True
    return len(encoder.encode([text], is_query=is_query)[0].ids) < _limit(model)


def _pair_fits(model: Any, query: str, passage: str) -> bool:
    encoder = getattr(model, "encoder", None)
    if encoder is None:
        return True
    return len(encoder.encode_pairs(query, [passage], max_chars=fidelity.PROBE_CHARS)[0].ids) < _limit(model)


class ProviderCheck:
    """Called by an ONNX model's session holder once a session exists (see `onnx_backend._LazySession`): returns
    True to keep the session, False to make it again on the CPU.

    `home` holds the cache; `meta` is the variant's verified metadata (no "fidelity" reference: nothing to check
    against, the session is kept); `warn` gets the one warning line.
    """

    def __init__(self, home: Path, meta: Mapping[str, Any], role: str, *, label: str,
                 warn: Callable[[str], None], budget_s: float = BUDGET_S):
        self.home = Path(home)
        self.meta = meta
        self.role = role
        self.label = label
        self.warn = warn
        self.budget_s = budget_s

    def reference(self) -> dict[str, np.ndarray] | None:
        fid = self.meta.get("fidelity")
        if not isinstance(fid, Mapping) or not isinstance(fid.get("reference_outputs"), Mapping):
            return None
        try:
            return fidelity.decode_arrays(fid["reference_outputs"])
        except (ValueError, KeyError, TypeError):
            return None

    def __call__(self, model: Any, active: Sequence[str]) -> bool:
        """Check `model` (an OnnxEmbedder or OnnxReranker whose session runs on `active`, best first).

        Raises:
            ModelError: the CPU itself disagrees with the reference.
        """
        reference = self.reference()
        if reference is None or not active:
            return True
        provider = active[0]
        key = cache_key(self.meta, provider, _ort_version(), machine_id())
        verdict = read_cache(self.home).get(key)
        if not isinstance(verdict, dict) or "ok" not in verdict:
            verdict = self.run(model, reference, provider)
            write_verdict(self.home, key, verdict)
        if verdict["ok"]:
            return True
        if provider == "CPUExecutionProvider":
            raise ModelError(
                f"{self.label} computes differently from the source model on this machine's CPU "
                f"({'; '.join(verdict['shortfalls'])} on the probe set)",
                hint="run `puremind export-models --force` to export it again, or set [models] variant to another one",
            )
        self.warn(f"warning: {provider} computes {self.label} differently from the source model on this machine "
                  f"({'; '.join(verdict['shortfalls'])} on the probe set); running on the CPU")
        return False

    def bars(self, names: Sequence[str]) -> dict[str, float]:
        """The export's thresholds, or, where the variant came closer to a threshold at export, what it reached
        then less MARGIN: int8 is quantised per batch, so a check that batches texts otherwise (four at a time
        here, sixteen at export) moves its figures a little, and must not fail a variant the export passed."""
        reached = (self.meta.get("fidelity") or {}).get("figures") or {}
        out = {}
        for name, limit in fidelity.thresholds_for(self.role).items():
            if name not in names:
                continue
            value = reached.get(name)
            if isinstance(value, (int, float)):
                limit = max(limit, value + MARGIN) if name == "max_abs_dprob" else min(limit, value - MARGIN)
            out[name] = round(limit, 6)
        return out

    def run(self, model: Any, reference: Mapping[str, np.ndarray], provider: str) -> dict:
        started = time.perf_counter()
        if self.role == "embedder":
            figures = probe_embedder(model, reference, budget_s=self.budget_s)
            names = EMBEDDER_FIGURES
        else:
            figures = probe_reranker(model, reference, budget_s=self.budget_s)
            names = RERANKER_FIGURES
        failed = fidelity.shortfalls(figures, self.bars(names))
        return {
            "ok": not failed,
            "provider": provider,
            "variant": self.meta.get("variant"),
            "model": self.meta.get("hub_id"),
            "figures": figures,
            "shortfalls": failed,
            "seconds": round(time.perf_counter() - started, 3),
            "checked": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }


def _ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)
