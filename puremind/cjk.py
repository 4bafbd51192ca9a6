"""Keyword matching by single characters and overlapping pairs for scripts written without spaces between
words: Chinese, Japanese and Korean (CJK), and Thai, Lao, Khmer and Burmese.

FTS5's unicode61 tokenizer treats an unspaced run of such characters as one word, so a query word only matches
the exact same run. For hybrid search each run is also indexed as its characters and overlapping pairs
("京都駅" -> 京 都 駅 京都 都駅), in a second FTS5 index, and a query is expanded the same way and matched with OR.
The names keep "cjk" (the index column, the list) from when these were the only scripts.

A long query holds many grams, and in Thai most of them are in almost every note: matching them all made one
search of 10,000 notes take seconds (issue 33). Past `MAX_MATCH_TERMS` grams, only the rarest are matched, judged
by how many passages hold each one (`rarest_grams`), and the next rarest while their passages fit `MATCH_BUDGET`
(so a small vault keeps them all); the common ones add next to nothing to BM25 anyway.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Callable, Mapping

#: Han (CJK Unified Ideographs + extension A + compatibility), Hiragana, Katakana (+ phonetic extensions,
#: half-width), Hangul syllables and jamo. Extension B+ ideographs are astral and rare in notes.
CJK_CHARS = (
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f"
    "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"
)
#: Thai, Lao, Khmer (+ symbols) and Myanmar (+ extended A and B): letters, vowel signs and tone marks alike, so a
#: run is not cut inside a syllable. Their digits are in these blocks too and count like letters.
SOUTHEAST_ASIAN_CHARS = "\u0e00-\u0e7f\u0e80-\u0eff\u1780-\u17ff\u19e0-\u19ff\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff"
#: Every character matched by characters and pairs (a regular-expression class body).
UNSPACED_CHARS = CJK_CHARS + SOUTHEAST_ASIAN_CHARS
_CJK_RUN = re.compile(f"[{UNSPACED_CHARS}]+")
MAX_QUERY_GRAMS = 128
#: A query of more grams than this is matched by this many of them, the rarest (bench/RESULTS.md, cjk-terms).
MAX_MATCH_TERMS = 8
#: Beyond the MAX_MATCH_TERMS rarest grams, the next rarest are matched too while the passages they all hold add
#: up to no more than this (each gram counted exactly, so held by fewer than TERM_COUNT_CAP passages): a small
#: vault keeps every gram of a long query, a large one the bound (bench/RESULTS.md, cjk-budget).
MATCH_BUDGET = 1000
#: How many passages holding a gram are counted, at most, to judge how rare it is: the count costs no more than
#: this per gram, however large the index.
TERM_COUNT_CAP = 500
#: Counts the passages that hold each of the given grams, each up to a cap (`Store.cjk_term_counts`).
TermCounts = Callable[[list[str]], Mapping[str, int]]


def cjk_runs(text: str) -> list[str]:
    """The maximal runs of unspaced-script characters in `text`, in order."""
    return _CJK_RUN.findall(text)


def grams(run: str) -> list[str]:
    """Single characters and overlapping pairs of one run, in reading order."""
    out = list(run)
    out += [run[i : i + 2] for i in range(len(run) - 1)]
    return out


def cjk_terms(text: str) -> str:
    """The text indexed for CJK matching: every gram of every run, space-separated ('' when there is none)."""
    return " ".join(g for run in cjk_runs(text) for g in grams(run))


def query_grams(query: str) -> list[str]:
    """The distinct grams of the unspaced runs of a query, in reading order, at most MAX_QUERY_GRAMS of them."""
    seen: dict[str, None] = {}
    for run in cjk_runs(query):
        for g in grams(run):
            seen.setdefault(g, None)
            if len(seen) >= MAX_QUERY_GRAMS:
                break
    return list(seen)


def as_indexed(gram: str) -> str:
    """A gram as the index's tokenizer (FTS5 unicode61) reads it: its letters, digits and private-use characters.
    The others, Thai vowel signs and tone marks among them, separate words there, so "สั" and "ัส" are both
    searched as "ส", and a lone mark as nothing."""
    return "".join(ch for ch in gram if unicodedata.category(ch)[0] in "LN" or unicodedata.category(ch) == "Co")


def rarest_grams(found: list[str], count: TermCounts, max_terms: int, budget: int = 0) -> list[str]:
    """The `max_terms` of a query's grams `found`, each as the index reads it (`as_indexed`, no two alike), held by
    the fewest passages (`count`), pairs before single characters among equal counts, then in reading order; then
    the next rarest while the passages of all kept grams add up to at most `budget` (each held by fewer than
    TERM_COUNT_CAP passages); listed in reading order. A gram no passage holds is left out: it matches nothing
    (when none is held, the first `max_terms` grams, which match nothing, so that the query still has its list of
    character matches).

    Raises:
        whatever `count` raises (the store's QueryError, StoreError).
    """
    terms = list(dict.fromkeys(t for t in map(as_indexed, found) if t))
    counts = count(terms)
    order = {t: i for i, t in enumerate(terms)}
    held = [t for t in terms if counts.get(t, 0) > 0]
    if not held:
        return found[: max(1, max_terms)]
    ranked = sorted(held, key=lambda t: (counts[t], -len(t), order[t]))
    kept = set(ranked[: max(1, max_terms)])
    spent = sum(counts[t] for t in kept)
    for t in ranked[max(1, max_terms):]:
        if counts[t] >= TERM_COUNT_CAP or spent + counts[t] > budget:
            break
        kept.add(t)
        spent += counts[t]
    return [t for t in terms if t in kept]


def cjk_match_expression(query: str, count: TermCounts | None = None, max_terms: int = MAX_MATCH_TERMS,
                         budget: int = MATCH_BUDGET) -> str | None:
    """An FTS5 MATCH expression (quoted grams joined with OR) for the CJK part of a query, or None without one.
    The query comes as the Searcher searches it (`retrieval.lexical.searchable_query`: NFC, as the index).

    With `count` (how many passages hold each gram, `Store.cjk_term_counts`) and a query of more than `max_terms`
    grams, only the rarest `max_terms` are matched, and more of the rarest while the passages they hold add up to
    at most `budget` (`rarest_grams`): the cost of the search is bounded whatever the query's length. Without
    `count`, or with `max_terms` 0, every gram is (up to MAX_QUERY_GRAMS), as before issue 33.

    Raises:
        whatever `count` raises.
    """
    found = query_grams(query)
    if count is not None and 0 < max_terms < len(found):
        found = rarest_grams(found, count, max_terms, budget)
    if not found:
        return None
    return " OR ".join(f'"{g}"' for g in found)
