"""Keyword matching by single characters and overlapping pairs for scripts written without spaces between
words: Chinese, Japanese and Korean (CJK), and Thai, Lao, Khmer and Burmese.

FTS5's unicode61 tokenizer treats an unspaced run of such characters as one word, so a query word only matches
the exact same run. For hybrid search each run is also indexed as its characters and overlapping pairs
("京都駅" -> 京 都 駅 京都 都駅), in a second FTS5 index, and a query is expanded the same way and matched with OR.
The names keep "cjk" (the index column, the list) from when these were the only scripts.
"""

from __future__ import annotations

import re

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


def cjk_match_expression(query: str) -> str | None:
    """An FTS5 MATCH expression (quoted grams joined with OR) for the CJK part of a query, or None without one.
    The query comes as the Searcher searches it (`retrieval.lexical.searchable_query`: NFC, as the index)."""
    seen: dict[str, None] = {}
    for run in cjk_runs(query):
        for g in grams(run):
            seen.setdefault(g, None)
            if len(seen) >= MAX_QUERY_GRAMS:
                break
    if not seen:
        return None
    return " OR ".join(f'"{g}"' for g in seen)
