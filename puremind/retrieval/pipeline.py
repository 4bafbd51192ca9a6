"""Hybrid retrieval: BM25 + CJK grams + dense cosine, fused by RRF, then re-scored by the cross-encoder.

One `Searcher` serves many searches (the CLI makes one per command, the MCP server one per process): it owns
the store connection and the dense matrix cache, and is handed the models object (puremind.models.lazy.Models)
and its retrieval parameters. Every search reads one consistent snapshot of the index, even while `puremind
index` or `watch` writes. It returns data (SearchOutcome); puremind.results turns that into the one result schema
that `search --json` prints and the MCP server returns.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Callable

from puremind.cjk import MATCH_BUDGET, MAX_MATCH_TERMS, cjk_match_expression, cjk_runs, query_grams
from puremind.config import DEFAULT_FUSION_DEPTH, DEFAULT_RERANK_BUDGET
from puremind.errors import FingerprintMismatch
from puremind.fingerprint import model_label
from puremind.messages import one_line
from puremind.messages import quiet as _quiet
from puremind.langs import minority_words, readable_words, unread_language, unread_script
from puremind.retrieval.dense import DenseIndex
from puremind.retrieval.excerpt import best_excerpt
from puremind.retrieval.fusion import Ranked, before_cut_tie, fuse_at_depth, shared_ranks
from puremind.retrieval.lexical import fts_all_words_expression, fts_match_expression, searchable_query
from puremind.retrieval.rerank import QueryVectors, RerankRun, Reranking
from puremind.chunker import breadcrumb
from puremind.store import Hit, Store, keyword_words, title_key

if TYPE_CHECKING:
    from puremind.models.lazy import Models

Notice = Callable[[str], None]
#: How long a model that cannot be had (not cached and offline, hub out of reach, not exported) is not asked
#: for again: a long-lived server retries now and then instead of waiting on an unreachable hub every search.
UNAVAILABLE_RETRY_S = 60.0


#: The share of a query's words that a note's title (or one alias) must hold for the note to be in the title list.
TITLE_COVERAGE = 0.75

#: Keyword search (`--lexical-only`, and hybrid's keyword and all-words lists): the weight of a passage's whole
#: note's BM25 beside the passage's own (issue 12: keyword-only LongMemEval with pureMind's chunker, Session
#: Recall@5 0.947 -> 0.954, and at or above a plain BM25 over whole notes on every question type from 1.5 to 4;
#: SciFact train nDCG@10 0.698 -> 0.702; for hybrid, bench/RESULTS.md, issue-12-fusion-trials, 2026-12-06).
NOTE_WEIGHT = 2.0


@dataclass(frozen=True)
class RetrievalParams:
    """How a search is run: how many candidates each list gives to the fusion (`candidates`), the RRF constant,
    whether the cross-encoder re-scores the fused list, and how much of each passage it reads."""

    candidates: int = 50
    rrf_k: int = 60
    #: True, False, or "auto": the reranker runs where the vault's last `puremind eval` found that it helps
    #: (puremind.retrieval.gate)
    rerank: bool | str = True
    rerank_chars: int = 800
    #: how many of the fused candidates the cross-encoder may read, best first
    rerank_candidates: int = 50
    #: seconds the cross-encoder may take per search, its load aside (0 = no bound); see
    #: puremind.retrieval.rerank
    rerank_budget: float = DEFAULT_RERANK_BUDGET
    #: search the notes' titles and aliases as a list of their own (hybrid mode), with this weight in the fusion;
    #: a note whose title or alias is exactly the query leads the list
    titles: bool = True
    title_weight: float = 1.0
    #: the share of the query's words that a title (or one alias) must hold for the note to be in the title list
    title_coverage: float = TITLE_COVERAGE
    #: leave a model out of a query in a language it does not declare (puremind.langs.unread_language); the
    #: script rule always holds
    language_gate: bool = True
    #: each list's weight in the fusion
    lexical_weight: float = 1.0
    cjk_weight: float = 1.0
    #: the character-pair list's weight when the embedder reads the whole query, the pairs' script included (as the
    #: model declares its languages): beside a dense list of the same text the pairs are a second, weaker voice.
    #: Where the embedder does not read that script (an English-only model, a Korean question or one Korean word
    #: in an English query) they keep `cjk_weight`, the main voice for unspaced scripts (bench/RESULTS.md,
    #: cjk-weight-read)
    cjk_weight_read: float = 0.5
    #: a query of more character grams than this (unspaced scripts) is matched by this many, those the fewest
    #: passages hold (puremind.cjk.rarest_grams; 0 = every gram, as before issue 33)
    cjk_terms: int = MAX_MATCH_TERMS
    #: and more of the rarest grams while the passages they hold add up to at most this (puremind.cjk.MATCH_BUDGET;
    #: 0 = the `cjk_terms` rarest only)
    cjk_budget: int = MATCH_BUDGET
    dense_weight: float = 1.0
    #: the list of passages that hold every word of the query (a query of two words or more)
    all_words_weight: float = 1.5
    #: keyword search (`--lexical-only`, and hybrid's keyword and all-words lists): a passage's BM25 plus this
    #: times its whole note's BM25 among the notes of the passages found (0 = the passage's own BM25 alone); see
    #: `with_note_evidence`
    note_weight: float = NOTE_WEIGHT
    #: how deep into each list the fusion reads first, in distinct notes (0 = the whole lists): the fused order is
    #: the RRF of each list's passages down to its `fusion_depth`-th note, then the rest in the RRF of the whole
    #: lists (`fuse_at_depth`)
    fusion_depth: int = DEFAULT_FUSION_DEPTH
    #: a query the embedder is left out of that mixes scripts: embed its words in the scripts the embedder reads
    #: (`Searcher._readable_part`)
    readable_part: bool = True
    #: a query mixing scripts that the embedder reads whole: its words outside the query's main script ("VPN" of a
    #: Korean question) embedded alone as a second dense list of this weight (0 = off): a small multilingual model
    #: leans to notes in the question's language (bench/RESULTS.md, mixed-part)
    mixed_part_weight: float = 0.5
    #: beside a dense list that reads the pairs' script (`cjk_weight_read`): the pair list's weight times the share
    #: of the query's grams that the best of its first 3 passages holds, to this power (0 = off). A paraphrased
    #: question shares only common pairs with any note, a quoted one all of its own (bench/RESULTS.md,
    #: pair-coverage)
    pair_coverage_power: float = 2.0
    #: a title or alias that is the query's words in the query's order (emoji, accents, case and separators
    #: aside: "Launch plan" for "🚀 Launch plan") counts as exactly the query, as the exact title does
    title_words_exact: bool = True
    #: a title or alias that holds every word of the query, of whose own words (numbers aside) the query says at
    #: least this share ("Kubernetes (k8s)" for `kubernetes`), outweighs the other lists together, below an exact
    #: title (0 = off)
    title_near: float = 0.5
    #: skip the reranker on a strong signal: one note alone is titled (or named) exactly as the query, and it leads
    #: the fused list (measured on tldr-pages names: bench/strong_signal.py)
    strong_signal: bool = True
    #: cut each hit's excerpt around the query's words (`puremind eval` reads paths only and turns it off)
    excerpts: bool = True


@dataclass
class SearchOutcome:
    """Results of one search and how their scores read: "lexical" (BM25), "hybrid" (RRF) or "reranked"
    (cross-encoder probability 0..1). `notes` says what was left out: a model that is not available, or one
    that cannot read the query's script."""

    query: str
    mode: str
    hits: list[Hit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: in "reranked" mode, how many of the first hits carry a cross-encoder probability; the rest (not reached
    #: within the rerank budget) carry their fusion value, in fused order
    reranked: int = 0


def _languages(model: Any) -> tuple[str, ...]:
    """The languages a model declares it reads (empty: not declared, so every query)."""
    return tuple(getattr(model, "languages", ()) or ())


def _reads(model: Any, query: str, part: str, notes: list[str], *, by_language: bool = True) -> bool:
    """Whether `model` can read `query` (see puremind.langs): its script, then its language; when not, says so
    in `notes`."""
    languages = _languages(model)
    script = unread_script(languages, query)
    if script is not None:
        notes.append(f"{part} left out for this query: the model reads {', '.join(languages)}, and most of the "
                     f"query is in {script} script")
        return False
    language = unread_language(languages, query) if by_language else None
    if language is not None:
        notes.append(f"{part} left out for this query: the model reads {', '.join(languages)}, and the query is "
                     f"in {language}")
        return False
    return True


def _title_matches(query: str, names_of: list[tuple[str, ...]]) -> list[tuple[float, bool, float]]:
    """For each note's names (title, aliases): the largest share of the query's words that one of them holds;
    whether one of them is the query's words in the query's order (numbers that lead a title aside, see
    `_unnumbered`); and, of the names that hold every word of the query, the largest share of the name's own words
    (numbers aside) that the query says ("Kubernetes (k8s)" for `kubernetes`: 0.5). Words as the keyword index
    splits and folds them (`keyword_words` without stems): "cafe menu" is covered by "Café menu", `qm move_disk`
    by "qm-move-disk"; "menus" does not cover "menu"; "Launch plan" is the words of "🚀 Launch plan"."""
    every = [name for names in names_of for name in names if name]
    if not every:
        return [(0.0, False, 0.0)] * len(names_of)
    asked, *words = keyword_words([query, *every], stems=False)
    if not asked:
        return [(0.0, False, 0.0)] * len(names_of)
    wanted = set(asked)
    of = dict(zip(every, words))

    def said(name_words: tuple[str, ...]) -> float:
        own = {w for w in name_words if not w.isdigit()} or set(name_words)
        return len(own & wanted) / len(own) if wanted <= set(name_words) else 0.0

    return [(max((len(wanted & set(of[n])) / len(wanted) for n in names if n), default=0.0),
             any(asked in (of[n], _unnumbered(of[n])) for n in names if n),
             max((said(of[n]) for n in names if n), default=0.0)) for names in names_of]


def _gram_coverage(query: str, hits: list[Hit], top: int = 3) -> float:
    """The largest share of the query's character grams (`query_grams`) that one of the first `top` passages holds
    (its text in NFC, as the query is searched); 1.0 when there are no grams or no passages (nothing to judge)."""
    wanted = set(query_grams(unicodedata.normalize("NFC", query)))
    if not hits or not wanted:
        return 1.0
    texts = [unicodedata.normalize("NFC", h.text) for h in hits[:top]]
    return max(sum(g in text for g in wanted) / len(wanted) for text in texts)


def _a_word(text: str) -> bool:
    """Whether a part of a query is worth embedding alone: two letters or more."""
    return sum(ch.isalpha() for ch in text) >= 2


def _unnumbered(words: tuple[str, ...]) -> tuple[str, ...]:
    """A title's words without the numbers that lead them, as notes are numbered to sort ("01 Introduction",
    "11.01 Project brief", "2024-03-15 Standup"); a title of numbers only ("1.1.5") keeps them."""
    rest = tuple(itertools.dropwhile(str.isdigit, words))
    return rest or words


def with_note_evidence(hits: list[Hit], note_scores: dict[str, float], weight: float) -> list[Hit]:
    """Keyword hits re-scored with their whole note's evidence: each passage's BM25 plus `weight` times its note's
    (Store.note_scores), best first (ties keep their order). Evidence spread over several sections of one note
    then counts, while each result stays the passage that matches best where it is."""
    scored = [dataclasses.replace(h, score=h.score + weight * note_scores.get(h.path, 0.0)) for h in hits]
    return sorted(scored, key=lambda h: -h.score)


def _uncut(hits: list[Hit], limit: int) -> list[Hit]:
    """A BM25 list fetched one past `limit`, cut at `limit`, without the run of equal scores that cut goes
    through (`before_cut_tie`)."""
    return hits[: before_cut_tie([h.score for h in hits], limit)]


def _bm25_ranking(hits: list[Hit], weight: float) -> Ranked:
    """A BM25 list for the fusion, in which passages of equal score share a rank."""
    return Ranked([h.chunk_id for h in hits], weight, shared_ranks([h.score for h in hits]))


def rerank_text(hit: Hit) -> str:
    """What the cross-encoder reads of a passage: its breadcrumb (the note's title, then its headings) and text,
    as the embedder read it."""
    crumbs = breadcrumb(hit.title, hit.heading_path)
    return (" > ".join(crumbs) + "\n\n" + hit.text) if crumbs else hit.text


def _lexical_hint(exc: FingerprintMismatch) -> FingerprintMismatch:
    return FingerprintMismatch(exc.message, hint=f"{exc.hint} (or search with --lexical-only meanwhile)")


def _rerank_note(run: RerankRun) -> str:
    """What `notes` says of one reranking: how many of how many candidates, in how long, and why not all."""
    parts = [f"reranked {run.reranked} of {run.candidates} candidates in {run.seconds:.1f} s"]
    if run.cached:
        parts.append(f"{run.cached} from the cache")
    if run.repeated:
        parts.append(f"{run.repeated} repeating another's text, scored once")
    note = parts[0] + (f" ({', '.join(parts[1:])})" if len(parts) > 1 else "")
    if run.cut_by_budget:
        note += (f"; rerank_budget {run.budget:g} s reached: the other {run.candidates - run.reranked} follow in fused "
                 "order with their fusion values")
    return note


#: a note about a model that cannot be had is one line of at most this many characters as the terminal shows it
#: ("note: " included), then one hint line
NOTE_CHARS = 160
UNAVAILABLE_HINTS = {
    "embedder": "hint: `puremind export-models` (with network) gets it; `puremind doctor` says more; keyword search "
                "answers meanwhile",
    "reranker": "hint: --no-rerank (or [retrieval] rerank = false) skips it; `puremind export-models` (with network) "
                "gets it; `puremind doctor` says more",
}
_REVISION = re.compile(r"\b([0-9a-f]{7})[0-9a-f]{33}\b")


def unavailable_note(label: str, message: str) -> str:
    """`label: why`, on one line of at most NOTE_CHARS characters (a 40-digit revision shortened to 7)."""
    short = _REVISION.sub(r"\1", message)
    return one_line(f"{label}: {short}", NOTE_CHARS - len("note: "))


def index_run_going(db: Path) -> bool:
    """Whether a `puremind index` or `watch` holds the index's lock now (the lock file is only read, never made)."""
    import fcntl

    try:
        fd = os.open(Path(db).with_name(Path(db).name + ".lock"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def _load_now(model: Any) -> bool:
    """Load a model that loads on first use (an onnxruntime session, a torch module) now, when it has not loaded
    yet; whether it did. A model without `load` (handed in ready) is left as it is."""
    load = getattr(model, "load", None)
    if model is None or not callable(load) or bool(getattr(model, "loaded", True)):
        return False
    load()
    return True


def _loaded_note(role: str, seconds: float, beside: str = "") -> str:
    return f"loaded the {role} in {seconds:.1f} s (its first use in this process){beside}"


class _Preload:
    """The reranker, fetched and loaded in a thread of its own while the search's lists run; `result` waits for
    it and hands over its notes (and its error, raised in the caller's thread)."""

    def __init__(self, get: Callable[[list[str]], Any], loaded: bool):
        self._get = get
        self._notes: list[str] = []
        self._model: Any = None
        self._error: BaseException | None = None
        self._seconds = 0.0
        self._was_loaded = loaded
        self._thread = threading.Thread(target=self._run, name="puremind-reranker-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        start = time.perf_counter()
        try:
            model = self._get(self._notes)
            if _load_now(model):
                self._was_loaded = False
            self._model = model
        except BaseException as exc:  # handed to the searching thread
            self._error = exc
        self._seconds = time.perf_counter() - start

    def result(self, notes: list[str]) -> Any:
        self._thread.join()
        notes.extend(self._notes)
        if self._error is not None:
            raise self._error
        if self._model is not None and not self._was_loaded:
            notes.append(_loaded_note("reranker", self._seconds, ", beside the keyword and dense search"))
        return self._model


class Searcher:
    """Searches one index with the models it is handed (each loaded on first use by the models object).

    Thread-safe: overlapping searches run one at a time.
    """

    def __init__(self, db: Path, models: "Models", params: RetrievalParams = RetrievalParams(), *,
                 notice: Notice = _quiet, reranking: Reranking | None = None, agent: bool = False,
                 scope: tuple[str, ...] = ()):
        """`reranking` holds the cross-encoder's score cache and measured speed (default: a new one, kept as long
        as this searcher). `agent`: the searches serve an agent (the MCP server), so every list leaves out the
        notes marked private, in the store (Store.open's `hide_private`), before it is ranked and cut; `scope`
        (folder keys, see services.agent_scope) leaves out every note outside those folders the same way."""
        self.db = Path(db)
        self.agent = agent
        self.scope = scope
        self.models = models
        self.params = params
        self._notice = notice
        self._unavailable: dict[str, tuple[float, list[str]]] = {}  # role -> (retry after, monotonic; the notes)
        self._store: Store | None = None
        self._identity: tuple[int, int] | None = None
        self._dense = DenseIndex()
        self._lock = threading.Lock()
        self._reranking = reranking if reranking is not None else Reranking()
        self._query_vectors = QueryVectors()
        self._coverage: tuple[int, tuple[int, int]] | None = None  # (change counter, vector_coverage())

    # -- lazily opened parts -------------------------------------------------------------------------------

    def _store_open(self) -> Store:
        """The open index; reopened when the file was deleted and made again (a long-lived server must not go on
        reading a deleted file, old text included).

        Raises:
            StoreError: there is no index file.
        """
        try:
            st = os.stat(self.db)
            identity: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            identity = None
        if self._store is not None and identity != self._identity:
            self._store.close()
            self._store = None
            self._dense = DenseIndex()  # a new file's change counter says nothing about the old matrix
        if self._store is None:
            self._store = Store.open(self.db, create=False, hide_private=self.agent, scope=self.scope)
            self._identity = identity
        return self._store

    def _embedder_or_none(self, store: Store, notes: list[str]):
        """The embedder; None when semantic search is off or the model cannot be had here (noted in `notes`).

        The configured model is compared with the index's vectors before it is fetched, exported or loaded.

        Raises:
            FingerprintMismatch: the index holds vectors of another embedder (both are named).
            ModelError: the model is broken or cannot be found (a mistyped name).
        """
        models = self.models
        if not models.semantic:
            self._note_vectors_unused(store, notes)
            return None
        if not models.loaded("embedder"):
            if self._still_unavailable("embedder", notes):
                return None
            try:
                models.check_index(store.vectors_fingerprint())
            except FingerprintMismatch as exc:
                raise _lexical_hint(exc) from None
        return self._load("embedder", models.embedder, "semantic search unavailable", notes)

    def _reranker_or_none(self, notes: list[str]):
        """The reranker; None when it cannot be had here (noted in `notes`, with the ways forward).

        Raises:
            ModelError: the model is broken or cannot be found (a mistyped name).
        """
        if not self.models.loaded("reranker") and self._still_unavailable("reranker", notes):
            return None
        return self._load("reranker", self.models.reranker, "reranking skipped", notes)

    def _load(self, role: str, get: Callable[[], Any], label: str, notes: list[str]):
        """`get()`; None, with a note, when the model cannot be had here (not cached and no network, or not
        exported and no [export] extra): search answers without it, as the spec asks. Broken stays an error."""
        from puremind.models import ModelsUnavailable

        try:
            return get()
        except ModelsUnavailable as exc:
            said = [unavailable_note(label, exc.message), UNAVAILABLE_HINTS[role]]
            self._unavailable[role] = (time.monotonic() + UNAVAILABLE_RETRY_S, said)
            notes.extend(said)
            return None

    def _still_unavailable(self, role: str, notes: list[str]) -> bool:
        """True (and the note repeated) while a model found unavailable is not asked for again."""
        entry = self._unavailable.get(role)
        if entry is None:
            return False
        if time.monotonic() >= entry[0]:
            del self._unavailable[role]
            return False
        notes.extend(entry[1])
        return True

    def _note_vectors_unused(self, store: Store, notes: list[str]) -> None:
        """`embedder = "none"` on an index that holds vectors: never silent."""
        stored = store.vectors_fingerprint()
        if stored is not None:
            notes.append(
                f'keyword search only (embedder = "none"), though this index holds vectors of {model_label(stored)}: '
                "set [models] embedder back to use them"
            )

    def _note_coverage(self, store: Store, notes: list[str]) -> None:
        """While an index run has not embedded every note yet (or could not load the model): how many notes meaning
        search covers. The others are found by keyword only."""
        counter = store.change_counter()
        if self._coverage is None or self._coverage[0] != counter:
            self._coverage = (counter, store.vector_coverage())
        covered, total = self._coverage[1]
        if covered < total:
            going = "indexing goes on" if index_run_going(self.db) else "run `puremind index` to embed the rest"
            notes.append(f"meaning search covers {covered:,} of {total:,} notes; {going}")

    # -- searching -------------------------------------------------------------------------------------------

    def search(self, query: str, limit: int = 10, *, lexical_only: bool = False) -> SearchOutcome:
        """Up to `limit` passages for `query`, best first (no relevance cut-off).

        Raises:
            QueryError: the query has nothing to search for.
            StoreError: there is no index yet, or it cannot be read.
            FingerprintMismatch: the configured embedder is not the one the index was built with.
            ModelError: a configured model cannot be loaded.
        """
        match = fts_match_expression(query)  # refuse an empty query before any work
        query = searchable_query(query)  # what the keyword lists search, for every list and model
        with self._lock:
            store = self._store_open()
            if lexical_only:
                with store.snapshot():
                    hits = store.search_lexical(match, max(limit, self.params.candidates))
                    if self.params.note_weight > 0 and hits:
                        hits = with_note_evidence(hits, store.note_scores([h.path for h in hits], match),
                                                  self.params.note_weight)
                    return SearchOutcome(query, "lexical", hits[:limit])
            notes: list[str] = []
            embedder = self._embedder_or_none(store, notes)  # the index's embedder checked first
            if embedder is not None:
                self._check_fingerprint(store, embedder)
            left_out: list[str] = []  # why the embedder cannot read the query, unless it reads part of it
            reads = embedder is not None and _reads(embedder, query, "semantic search", left_out,
                                                    by_language=self.params.language_gate)
            text = query if reads else self._readable_part(embedder, query, notes)
            if not text:
                notes += left_out
            start = time.perf_counter()
            if text and _load_now(embedder):
                notes.append(_loaded_note("embedder", time.perf_counter() - start))
            # The reranker loads beside the query's embedding and the lists. Not beside the embedder's own load:
            # two threads importing one backend at once (torch, transformers) is not safe.
            rerank = self._gate(store, notes) if self.params.rerank == "auto" else bool(self.params.rerank)
            preload = self._preload_reranker() if rerank and self.models.has("reranker") else None
            qvec = self._query_vectors.get(embedder, text) if text else None
            if embedder is not None:
                self._note_coverage(store, notes)
            pairs_read, pvec = False, None
            if reads and qvec is not None:  # the embedder read the whole query
                languages = _languages(embedder)
                # The character pairs are a second voice only where the embedder reads their script too.
                pairs_read = unread_script(languages, "".join(cjk_runs(query))) is None
                part = minority_words(query) if self.params.mixed_part_weight > 0 else ""
                if _a_word(part) and unread_script(languages, part) is None:
                    pvec = self._query_vectors.get(embedder, part)
            hits, fused, exact_leads = self._fuse(store, match, query, qvec, pairs_read=pairs_read, pvec=pvec)
            # `embedder = "none"` is keyword search with no model: the application layer then configures no
            # reranker either (one handed in is still used).
            reranker = preload.result(notes) if preload is not None and hits else None
            pool = hits[: max(1, self.params.rerank_candidates)]
            if reranker is not None and len({h.text for h in pool}) < 2:  # a reranker implies hits
                notes.append("reranking skipped: one candidate passage, nothing to reorder")
                reranker = None
            if reranker is not None and self.params.strong_signal and exact_leads:
                notes.append("reranking skipped: strong signal: the query is exactly the title of the first note")
                reranker = None
            if reranker is not None and _reads(reranker, query, "reranking", notes,
                                               by_language=self.params.language_gate):
                return self._reranked(query, limit, reranker, pool, hits, fused, notes)
            # Found by meaning or by any of the words: show the part of the passage that matches the query.
            out = [
                dataclasses.replace(h, score=fused[h.chunk_id], excerpt=self._excerpt(h, query)) for h in hits[:limit]
            ]
            return SearchOutcome(query, "hybrid", out, notes)

    def _gate(self, store: Store, notes: list[str]) -> bool:
        """`rerank = "auto"`: whether the reranker runs, from the vault's last eval (puremind.retrieval.gate); when it
        does not, `notes` says why."""
        from puremind.retrieval.gate import META_EVAL, read_summary, rerank_gate, reranker_name

        if not self.models.has("reranker"):
            return False
        gate = rerank_gate(read_summary(store.get_meta(META_EVAL)), reranker_name(self.models))
        if not gate.run:
            notes.append(f'reranker not run (rerank = "auto"): {gate.reason}')
        return gate.run

    def _readable_part(self, embedder: Any, query: str, notes: list[str]) -> str:
        """For a query the embedder was left out of that mixes scripts: the words in scripts it reads (an English
        term in a Korean question), which it then embeds alone; "" when there are none, when `readable_part` is
        off, or when every word is in a script it reads (a Spanish question left out for its language).
        Measured (bench/RESULTS.md, issue-12-fusion-trials): an English note asked for in Korean with one English
        word was found by keyword search and lost in hybrid search, where only the Korean notes had a second
        list (the character pairs)."""
        if embedder is None or not self.params.readable_part:
            return ""
        languages = _languages(embedder)
        part, script = readable_words(languages, query)
        if not _a_word(part):
            return ""
        notes.append(f"semantic search read only {part!r} of this query: the model reads {', '.join(languages)}, "
                     f"and the rest of the query is in {script} script")
        return part

    def _reranked(self, query: str, limit: int, reranker: Any, pool: list[Hit], hits: list[Hit],
                  fused: dict[int, float], notes: list[str]) -> SearchOutcome:
        """The candidates in `pool` re-scored by the cross-encoder within the budget, best first, then those it
        did not reach (in `pool` or after it) in fused order with their fusion values."""
        cut = self.params.rerank_chars
        budget = max(0.0, float(self.params.rerank_budget))
        run = self._reranking.run(reranker, query, [rerank_text(h)[:cut] for h in pool], budget)
        notes.append(_rerank_note(run))
        scored = sorted(run.scores.items(), key=lambda item: -item[1])
        out = [dataclasses.replace(pool[i], score=float(s), excerpt=self._excerpt(pool[i], query))
               for i, s in scored[:limit]]
        rest = [h for i, h in enumerate(hits) if i not in run.scores]
        out += [dataclasses.replace(h, score=fused[h.chunk_id], excerpt=self._excerpt(h, query))
                for h in rest[: max(0, limit - len(out))]]
        return SearchOutcome(query, "reranked", out, notes, reranked=min(len(scored), limit))

    def _excerpt(self, hit: Hit, query: str) -> str:
        """The part of the passage that matches the query (`best_excerpt`), unless excerpts are off."""
        return best_excerpt(hit.text, query) if self.params.excerpts else hit.excerpt

    def _preload_reranker(self) -> "_Preload":
        return _Preload(self._reranker_or_none, self.models.loaded("reranker"))

    def _fuse(self, store: Store, match: str, query: str, qvec, *, pairs_read: bool = False, pvec=None
              ) -> tuple[list[Hit], dict[int, float], bool]:
        """The fused top `candidates`, read in one snapshot: (hits in fused order, chunk id -> RRF score, whether
        the first hit belongs to the one note titled or named exactly as the query: False when there is no such
        note, or several). `pairs_read`: `qvec` embeds the whole query, and its embedder reads the script of the
        query's character pairs (the pair list then weighs `cjk_weight_read`). `pvec`: the query's words outside its
        main script, embedded alone (a second dense list of weight `mixed_part_weight`), or None."""
        p = self.params
        cand = p.candidates
        every = fts_all_words_expression(query) if p.all_words_weight > 0 else None
        with store.snapshot():
            # A long query's rarest grams only (counting them costs a bounded read of each gram's list).
            cjk = cjk_match_expression(query, store.cjk_term_counts, p.cjk_terms, p.cjk_budget)
            # One past the limit, to see whether the cut goes through a run of equal scores (`before_cut_tie`).
            found = [store.search_lexical(match, cand + 1),
                     store.search_lexical(every, cand + 1) if every is not None else [],
                     store.search_cjk(cjk, cand + 1) if cjk is not None else []]
            keyword, every_hits, cjk_hits = (_uncut(hits, cand) for hits in found)
            found = [hits[:cand] for hits in found]
            if qvec is None and not (keyword or every_hits or cjk_hits):
                keyword, every_hits, cjk_hits = found  # only ties, and nothing else to go by: keep them
            if p.note_weight > 0 and (keyword or every_hits):
                # The keyword lists weigh whole notes as keyword search does (see `with_note_evidence`), each
                # note judged among the notes of every passage found.
                by_note = store.note_scores([h.path for h in found[0] + found[1]], match)
                keyword, every_hits = (with_note_evidence(hits, by_note, p.note_weight) for hits in (keyword, every_hits))
            lists = [_bm25_ranking(keyword, p.lexical_weight)]
            if cjk is not None:
                pair_weight = p.cjk_weight_read if pairs_read else p.cjk_weight
                if pairs_read and p.pair_coverage_power > 0:  # a second voice: as strong as what it found
                    pair_weight *= _gram_coverage(query, cjk_hits) ** p.pair_coverage_power
                lists.append(_bm25_ranking(cjk_hits, pair_weight))
            if every is not None:
                lists.append(_bm25_ranking(every_hits, p.all_words_weight))
            if qvec is not None:
                self._dense.refresh(store)
                lists.append(Ranked([cid for cid, _ in self._dense.search(qvec, cand)], p.dense_weight))
                if pvec is not None:
                    lists.append(Ranked([cid for cid, _ in self._dense.search(pvec, cand)], p.mixed_part_weight))
            # Each passage's note: the fusion's depth counts notes, and the title lists show a note by a passage.
            note_of = store.chunk_files(list(dict.fromkeys(cid for r in lists for cid in r.ids)))
            exact_chunk = None
            if p.titles:
                titled, near, exact = self._title_rankings(store, match, query, [list(r.ids) for r in lists], note_of)
                # A title that is mostly the query outweighs the other lists together; an exact title outweighs
                # them all (the title lists too): that note comes first.
                near_weight = sum(r.weight for r in lists)
                exact_weight = near_weight + p.title_weight + near_weight + 1.0
                lists += [Ranked(ids, w) for ids, w in ((titled, p.title_weight), (near, near_weight)) if ids]
                if exact.ids:
                    lists.append(dataclasses.replace(exact, weight=exact_weight))
                # tiers 1 and 2: named or titled exactly as asked (not merely the query's words in its order)
                named = [cid for cid, rank in zip(exact.ids, exact.ranks or ()) if rank <= 2]
                exact_chunk = named[0] if len(named) == 1 else None
            fused = fuse_at_depth(lists, p.rrf_k, p.fusion_depth, note_of)[:cand]
            hits = store.chunks_by_ids([cid for cid, _ in fused])
            # note_of holds every chunk of the lists, the exact title's chunk too (added by _title_rankings)
            exact_leads = bool(exact_chunk is not None and hits
                               and note_of.get(hits[0].chunk_id) == note_of.get(exact_chunk))
        return hits, dict(fused), exact_leads

    def _title_rankings(self, store: Store, match: str, query: str, rankings: list[list[int]],
                        note_of: dict[int, int]) -> tuple[list[int], list[int], Ranked]:
        """The notes found by title or alias (BM25), those of them whose title is mostly the query (`title_near`),
        and those whose title or alias is exactly the query (ranked by tier), each as the chunk that shows the note:
        its best-ranked chunk in the other lists, else its first one (added to `note_of`, chunk id -> file id,
        which holds every chunk of `rankings`)."""
        # A title counts when it says most of what the query asks: a long question that names a command in
        # passing does not make every note named after that command a match (measured on tldr-pages).
        found = store.search_titles(match, self.params.candidates)
        matches = _title_matches(query, [(t.title, *t.aliases) for t in found])
        titled = [t for t, (share, _, _) in zip(found, matches) if share >= self.params.title_coverage]
        # Exactly the query, or the query's words in its order (a title's emoji, accents and separators aside).
        key = title_key(query)
        exact = store.notes_titled([key])
        titled_exactly = {t.file_id for t in exact}
        if self.params.title_words_exact:
            exact += [t for t, (_, words, _) in zip(found, matches) if words and t.file_id not in titled_exactly]
        # Of several such notes: first those whose file is named exactly as asked (`qm-move_disk` before its twin
        # `qm-move-disk`, `open.md` before `open.fish.md`), then those titled exactly, then those with the query's
        # words; the notes of one tier share a rank, so the other lists order them.
        tier = {t.file_id: 1 if title_key(PurePosixPath(t.path).stem) == key else 2 if t.file_id in titled_exactly
                else 3 for t in exact}
        exact.sort(key=lambda t: tier[t.file_id])
        have = set(tier)
        near = [t for t, (_, _, said) in zip(found, matches)
                if self.params.title_near > 0 and said >= self.params.title_near and t.file_id not in have]
        if not titled and not near and not exact:
            return [], [], Ranked([])
        shown: dict[int, int] = {}
        for cid in (cid for ranking in rankings for cid in ranking):  # the lists in order, each best first
            shown.setdefault(note_of.get(cid, -1), cid)
        wanted = [t.file_id for t in (*titled, *near, *exact) if t.file_id not in shown]
        first = store.best_chunk_of(wanted)
        shown.update(first)
        note_of.update((cid, file_id) for file_id, cid in first.items())
        as_chunks = lambda notes: [shown[t.file_id] for t in notes if t.file_id in shown]  # noqa: E731
        shown_exact = [t for t in exact if t.file_id in shown]
        return (as_chunks(titled), as_chunks(near),
                Ranked(as_chunks(shown_exact), ranks=[tier[t.file_id] for t in shown_exact]))

    def _check_fingerprint(self, store: Store, embedder: Any) -> None:
        """The loaded embedder against the index's vectors (another process may have rebuilt it meanwhile).
        The precision is not compared: fp32, fp16 and int8 of one model embed into the same space."""
        try:
            store.check_vectors(embedder.fingerprint, doing="searches are refused")
        except FingerprintMismatch as exc:
            raise _lexical_hint(exc) from None

    @property
    def dense_loads(self) -> int:
        return self._dense.loads

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
