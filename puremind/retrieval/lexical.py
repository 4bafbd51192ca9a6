"""Keyword search over the FTS5 index, safe for any text an agent may send."""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING

from puremind.errors import QueryError

if TYPE_CHECKING:
    from puremind.store import Hit, Store

MAX_QUERY_TERMS = 64
MAX_TERM_CHARS = 256


def searchable_query(query: str) -> str:
    """`query` as it is searched: lone surrogates (undecodable argv bytes, JSON escapes; SQLite cannot take
    them) as spaces, then Unicode NFC, the form the index holds text in (puremind.chunker; a Mac may send
    decomposed letters)."""
    return unicodedata.normalize("NFC", "".join(" " if "\ud800" <= ch <= "\udfff" else ch for ch in query))


def query_terms(query: str) -> list[str]:
    """The distinct searchable words of a query, in order, at most MAX_QUERY_TERMS.

    A "word" is a whitespace-separated run that holds at least one letter or digit; FTS5's own
    tokenizer splits it further (so `foo:bar` searches the phrase "foo bar").
    """
    seen: dict[str, None] = {}
    # Control characters (NUL ends an FTS5 string) and lone surrogates separate words.
    query = "".join(" " if unicodedata.category(ch) == "Cc" else ch for ch in searchable_query(query))
    for raw in query.split():
        word = raw[:MAX_TERM_CHARS]
        if not any(ch.isalnum() for ch in word):
            continue
        key = word.casefold()
        if key not in seen:
            seen[key] = None
            if len(seen) >= MAX_QUERY_TERMS:
                break
    return list(seen)


def fts_match_expression(query: str) -> str:
    """An FTS5 MATCH expression for a user query: every word quoted as a phrase, joined with OR.

    Quoting turns FTS5 syntax (`NEAR`, `AND`, `*`, `:`, `-`, parentheses, column filters) into plain words, so
    no query can raise an SQL error; OR lets BM25 rank notes that match more of the words first instead of
    returning nothing when one word is missing.

    Raises:
        QueryError: the query holds no letter or digit at all.
    """
    terms = query_terms(query)
    if not terms:
        if not query.strip():
            raise QueryError("the search query is empty")
        raise QueryError(f"the search query {_preview(query)} has no words to search for")
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def fts_all_words_expression(query: str) -> str | None:
    """An FTS5 MATCH expression that only passages holding every searchable word of the query match (the quoted
    words joined with AND); None for a query of fewer than two words, where it would be the OR expression."""
    terms = query_terms(query)
    if len(terms) < 2:
        return None
    return " AND ".join('"' + term.replace('"', '""') + '"' for term in terms)


def search_lexical(store: "Store", query: str, limit: int) -> list["Hit"]:
    """BM25 results for `query`, best first, at most `limit`.

    Raises:
        QueryError: the query has nothing to search for.
    """
    return store.search_lexical(fts_match_expression(query), limit)


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= 40 else text[:37] + "...")
