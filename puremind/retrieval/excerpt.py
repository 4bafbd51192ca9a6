"""The excerpt shown for a search hit: the part of the passage that matches the query, cut at word boundaries.

A hybrid or reranked hit may have been found by meaning, anywhere in a passage of a thousand characters or more;
its first 200 characters often do not show why it was found. `best_excerpt` picks the window of the passage
that holds the most distinct query words (case-folded, accents and a few English endings ignored, so
"grinders" finds "grinder" and "setting" finds "set"; each Chinese, Japanese or Korean character of the query
counts as a word), and cuts it at word boundaries with "…" wherever text was left out. A passage that starts
with YAML frontmatter is read as `without_frontmatter` shows it: its title and aliases as plain words, never its
fences or `key:` lines. Pure: text in, text out.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from puremind.cjk import UNSPACED_CHARS
from puremind.store.store import without_frontmatter

EXCERPT_CHARS = 200
ELLIPSIS = "…"

# The same characters as puremind.cjk: written without spaces, so each one is a word of its own here.
_CJK = UNSPACED_CHARS
_TOKEN = re.compile(f"[{_CJK}]|(?:(?![{_CJK}])\\w)+")
_CJK_CHAR = re.compile(f"[{_CJK}]")
# Words too common to say where a passage matches (when the query has other words).
_STOPWORDS = frozenset(
    "a an and are as at be by can did do does for from had has have how i in is it its me my of on or so that "
    "the this to up was we were what when where which who why with you your".split()
)
_ENDINGS = ("ing", "ed", "es", "s")


@functools.lru_cache(maxsize=8192)
def match_key(word: str) -> str:
    """The form two words are compared in: case-folded, without accents, one common English ending removed
    (and a doubled last consonant undone: "setting" -> "set")."""
    key = "".join(ch for ch in unicodedata.normalize("NFKD", word.casefold()) if not unicodedata.combining(ch))
    for ending in _ENDINGS:
        if key.endswith(ending) and len(key) - len(ending) >= 3:
            key = key[: -len(ending)]
            if ending in ("ing", "ed") and len(key) >= 4 and key[-1] == key[-2] and key[-1] not in "aeiousl":
                key = key[:-1]
            break
    return key


def _cjk_pairs(tokens: list[tuple[int, int]], text: str) -> list[tuple[int, int]]:
    """The spans of adjacent pairs of CJK characters among `tokens` (CJK is matched by pairs, as in puremind.cjk)."""
    return [
        (s, tokens[i + 1][1])
        for i, (s, e) in enumerate(tokens[:-1])
        if e == tokens[i + 1][0] and _CJK_CHAR.fullmatch(text[s:e]) and _CJK_CHAR.fullmatch(text[e : tokens[i + 1][1]])
    ]


def query_keys(query: str) -> list[str]:
    """The distinct match keys of a query's words, in order: a word's `match_key`, each pair of adjacent CJK
    characters (a CJK character on its own when it has no neighbour). Common words are left out unless the
    query has nothing else."""
    tokens = [(m.start(), m.end()) for m in _TOKEN.finditer(query)]
    pairs = _cjk_pairs(tokens, query)
    paired = {pos for s, e in pairs for pos in (s, e - 1)}
    words = [query[s:e] for s, e in tokens if not (_CJK_CHAR.fullmatch(query[s:e]) and s in paired)]
    keys = list(dict.fromkeys([*(match_key(w) for w in words), *(query[s:e] for s, e in pairs)]))
    keys = [k for k in keys if k]
    content = [k for k in keys if k not in _STOPWORDS]
    return content or keys


def _matches(key: str, wanted: set[str], prefixes: tuple[str, ...]) -> str | None:
    """The query key `key` stands for: the same key, or one of at least 4 letters that starts it or that it starts."""
    if key in wanted:
        return key
    if len(key) >= 4:
        for q in prefixes:
            if key.startswith(q) or q.startswith(key):
                return q
    return None


def best_excerpt(text: str, query: str, max_chars: int = EXCERPT_CHARS) -> str:
    """At most `max_chars` characters of `text` on one line: the window holding the most distinct words of
    `query` (then the most matches), with a little context before the first match, cut at word boundaries
    and marked with "…" where text was left out. With no word of the query in the text, its start. Frontmatter
    shows as plain words (see `without_frontmatter`)."""
    flat = " ".join(without_frontmatter(text).split())
    if len(flat) <= max_chars:
        return flat
    keys = query_keys(query)
    wanted = set(keys)
    prefixes = tuple(k for k in keys if len(k) >= 4)
    tokens = [(m.start(), m.end()) for m in _TOKEN.finditer(flat)]
    hits: list[tuple[int, int, str]] = []  # (start, end, query key) of each matching word
    if wanted:
        seen: dict[str, str | None] = {}  # a word -> the query key it matches, once per distinct word
        for start, end in tokens:
            word = flat[start:end]
            if word not in seen:
                seen[word] = _matches(match_key(word), wanted, prefixes)
            key = seen[word]
            if key is not None:
                hits.append((start, end, key))
        if any(_CJK_CHAR.match(k) for k in wanted):
            hits += [(s, e, flat[s:e]) for s, e in _cjk_pairs(tokens, flat) if flat[s:e] in wanted]
            hits.sort()
    budget = max_chars - 2 * len(ELLIPSIS)
    if not hits:
        return _cut(flat, tokens, 0, budget, budget)
    first, last = _best_window(hits, budget)
    span_start, span_end = hits[first][0], hits[last][1]
    slack = budget - (span_end - span_start)
    return _cut(flat, tokens, max(0, span_start - slack // 3), span_start, budget, keep_to=span_end)


def _best_window(hits: list[tuple[int, int, str]], budget: int) -> tuple[int, int]:
    """Indices (first, last) in `hits` of the run of matches that fits in `budget` characters and holds the most
    distinct keys; the earliest such run. Two pointers over the matches: O(len(hits))."""
    best = (0, 0, 0)  # (distinct keys, first, last)
    counts: dict[str, int] = {}
    last = -1
    for first in range(len(hits)):
        while last + 1 < len(hits) and hits[last + 1][1] - hits[first][0] <= budget:
            last += 1
            counts[hits[last][2]] = counts.get(hits[last][2], 0) + 1
        if last < first:  # this word alone is longer than the budget
            if best[0] == 0:
                best = (1, first, first)
            last = first
            continue
        if len(counts) > best[0]:
            best = (len(counts), first, last)
        key = hits[first][2]
        counts[key] -= 1
        if not counts[key]:
            del counts[key]
    return best[1], best[2]


def _cut(flat: str, tokens: list[tuple[int, int]], start: int, latest_start: int, budget: int, keep_to: int = 0) -> str:
    """At most `budget` characters of `flat` from about `start`, on word boundaries, with "…" where text was
    cut off. The start moves forward to the next word (never past `latest_start`); the end moves back to the
    end of a word (never before `keep_to`); a window that reaches the end of `flat` takes in more of the text
    before it instead. Only a single word longer than the budget is cut inside."""
    n = len(flat)
    start = max(0, min(start, n - budget))
    if start > 0:
        start = next((s for s, _ in tokens if s >= start), latest_start)
        start = min(start, latest_start)
    end = min(n, start + budget)
    if end < n:
        ends = [e for _, e in tokens if max(keep_to, start) < e <= end]
        if ends:
            end = ends[-1]
    piece = flat[start:end].strip()
    return (ELLIPSIS if start > 0 else "") + piece + (ELLIPSIS if end < n else "")
