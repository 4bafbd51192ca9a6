"""Which writing systems a model reads, and whether it can read a given query.

An English-only embedder (all-MiniLM-L6-v2, for one) turns a Korean or Chinese query into a vector that points
at notes in the same script rather than at notes on the same subject. Fused with keyword search, such a list
pulls the right note down (measured on the six-language set: hybrid search with MiniLM fell below keyword search
for Korean questions about English notes). So a model declares its languages (the manifest's `languages`, or the
`language:` list of a model card's front matter), and a search leaves a model out for a query whose letters are
mostly in scripts none of those languages use. A model that declares nothing, or "multilingual", reads anything.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Iterable

MULTILINGUAL = "multilingual"

#: ISO 639-1 code -> the scripts its text is written in (Unicode character-name prefixes, see `script_of`).
#: A language missing here is assumed to read anything (no query is ever left out for it).
LANGUAGE_SCRIPTS: dict[str, frozenset[str]] = {}
for _codes, _scripts in (
    ("en de es fr it pt nl sv da no nb nn fi is pl cs sk sl hr bs sq ro hu tr az uz vi id ms tl et lv lt eu ca gl "
     "cy ga mt af sw so ha yo ig zu xh la eo lb fo br oc", ("LATIN",)),
    ("sr", ("CYRILLIC", "LATIN")),
    ("ru uk be bg mk kk ky tg mn", ("CYRILLIC",)),
    ("el", ("GREEK",)),
    ("ar fa ur ps ug sd ku", ("ARABIC",)),
    ("he yi", ("HEBREW",)),
    ("hi mr ne sa", ("DEVANAGARI",)),
    ("bn as", ("BENGALI",)),
    ("pa", ("GURMUKHI",)),
    ("gu", ("GUJARATI",)),
    ("ta", ("TAMIL",)),
    ("te", ("TELUGU",)),
    ("kn", ("KANNADA",)),
    ("ml", ("MALAYALAM",)),
    ("si", ("SINHALA",)),
    ("th", ("THAI",)),
    ("lo", ("LAO",)),
    ("km", ("KHMER",)),
    ("my", ("MYANMAR",)),
    ("ka", ("GEORGIAN",)),
    ("hy", ("ARMENIAN",)),
    ("am ti", ("ETHIOPIC",)),
    ("zh", ("CJK",)),
    ("ja", ("CJK", "HIRAGANA", "KATAKANA")),
    ("ko", ("HANGUL", "CJK")),
):
    for _code in _codes.split():
        LANGUAGE_SCRIPTS[_code] = frozenset(_scripts)

_SCRIPT_PREFIXES = tuple(sorted({s for scripts in LANGUAGE_SCRIPTS.values() for s in scripts}))
_CODE_RE = re.compile(r"[a-z]{2,3}(?:[-_][A-Za-z0-9]+)*")


def normalize_languages(values: Iterable[str]) -> tuple[str, ...]:
    """Lower-case base codes ("en-US" -> "en"), "multilingual" kept, duplicates dropped, order kept."""
    out: dict[str, None] = {}
    for value in values:
        v = str(value).strip().lower()
        if v == MULTILINGUAL:
            out[v] = None
        elif _CODE_RE.fullmatch(v):
            out[re.split(r"[-_]", v)[0]] = None
    return tuple(out)


def card_languages(text: str) -> tuple[str, ...]:
    """The `language:` of a Hugging Face model card's YAML front matter (a string, a [flow] list or a block list).

    Returns () when the card has no front matter or no language key (nothing is known)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return ()
    body: list[str] = []
    for line in lines[1:]:
        if line.strip() == "---":
            break
        body.append(line)
    else:
        return ()
    for i, line in enumerate(body):
        m = re.match(r"language\s*:\s*(.*)$", line)
        if not m:
            continue
        value = m.group(1).split(" #", 1)[0].strip()
        if value.startswith("["):
            items = value.strip("[]").split(",")
        elif value:
            items = [value]
        else:  # a block list on the following lines: "- en"
            items = []
            for nxt in body[i + 1 :]:
                item = re.match(r"\s*-\s*(.+)$", nxt)
                if not item:
                    if nxt.strip():
                        break
                    continue
                items.append(item.group(1))
        return normalize_languages(x.strip().strip("'\"") for x in items)
    return ()


def script_of(char: str) -> str | None:
    """The script of a letter as a Unicode character-name prefix ("LATIN", "HANGUL", "CJK", ...); "OTHER" for
    a letter of a script not in the table; None for anything that is not a letter (digits, punctuation)."""
    if not unicodedata.category(char).startswith("L"):
        return None
    name = unicodedata.name(char, "")
    for prefix in _SCRIPT_PREFIXES:
        if name.startswith(prefix):
            return prefix
    if name.startswith("FULLWIDTH LATIN") or name.startswith("HALFWIDTH HANGUL"):
        return "LATIN" if "LATIN" in name else "HANGUL"
    if name.startswith("HALFWIDTH KATAKANA"):
        return "KATAKANA"
    return "OTHER"


def script_counts(text: str) -> Counter[str]:
    """How many letters of `text` are in each script."""
    counts: Counter[str] = Counter()
    for ch in text:
        script = script_of(ch)
        if script is not None:
            counts[script] += 1
    return counts


def _readable_scripts(languages: Iterable[str]) -> frozenset[str] | None:
    """The scripts a model declared for `languages` reads; None when it reads anything (no declared languages,
    "multilingual", or a language outside LANGUAGE_SCRIPTS)."""
    langs = tuple(languages)
    if not langs or MULTILINGUAL in langs or any(lang not in LANGUAGE_SCRIPTS for lang in langs):
        return None
    return frozenset().union(*(LANGUAGE_SCRIPTS[lang] for lang in langs))


def _main_unread(counts: Counter[str], readable: frozenset[str]) -> str | None:
    """The name of the script most of the letters outside `readable` are in ("Hangul", "Han"), or None."""
    unread = Counter({s: n for s, n in counts.items() if s not in readable})
    if not unread:
        return None
    script = unread.most_common(1)[0][0]
    return "Han" if script == "CJK" else script.capitalize()


def unread_script(languages: Iterable[str], query: str) -> str | None:
    """The script that keeps a model declared for `languages` from reading `query`, or None when it can read it.

    A model cannot read a query when fewer than half of the query's letters are in scripts its languages use.
    No declared languages, "multilingual" or a language outside LANGUAGE_SCRIPTS: it reads anything.
    """
    readable = _readable_scripts(languages)
    if readable is None:
        return None
    counts = script_counts(query)
    total = sum(counts.values())
    if total == 0:
        return None
    read = sum(n for script, n in counts.items() if script in readable)
    if read * 2 >= total:
        return None
    return _main_unread(counts, readable)


def readable_words(languages: Iterable[str], query: str) -> tuple[str, str | None]:
    """For a query that mixes scripts: (the words of `query`, split at spaces, whose letters are all in scripts a
    model declared for `languages` reads, joined by spaces; the script most of the other letters are in). ("",
    None) when every letter is in a script the model reads (nothing to leave out: a Spanish question stays
    whole, and the language rule decides), and when the model reads anything."""
    readable = _readable_scripts(languages)
    script = None if readable is None else _main_unread(script_counts(query), readable)
    if readable is None or script is None:
        return "", None
    words = [w for w in query.split() if (scripts := script_counts(w)) and all(s in readable for s in scripts)]
    return " ".join(words), script


def minority_words(query: str) -> str:
    """For a query that mixes scripts: the words of `query`, split at spaces, whose letters are all outside the
    script most of its letters are in ("VPN" of a Korean question), joined by spaces; "" for a query of one script."""
    counts = script_counts(query)
    if len(counts) < 2:
        return ""
    main = counts.most_common(1)[0][0]
    return " ".join(w for w in query.split() if (scripts := script_counts(w)) and main not in scripts)


#: How sure the language identifier must be before a model is left out of a query for its language.
LANGUAGE_CONFIDENCE = 0.9
_NAMES = {"en": "English", "de": "German", "es": "Spanish", "fr": "French", "it": "Italian", "pt": "Portuguese",
          "nl": "Dutch", "ro": "Romanian", "tr": "Turkish", "vi": "Vietnamese", "pl": "Polish", "sv": "Swedish",
          "da": "Danish", "no": "Norwegian", "nb": "Norwegian", "fi": "Finnish", "cs": "Czech", "id": "Indonesian",
          "ca": "Catalan", "hu": "Hungarian", "ru": "Russian", "uk": "Ukrainian", "ja": "Japanese", "ko": "Korean",
          "zh": "Chinese", "ar": "Arabic", "hi": "Hindi", "th": "Thai", "el": "Greek", "he": "Hebrew"}
_identifier = None


def identify_language(text: str) -> tuple[str, float]:
    """(ISO 639-1 code, probability) of the language `text` is written in, by py3langid (naive Bayes over byte
    n-grams, 97 languages; its model ships in the package: nothing is downloaded). Loaded once (~0.5 s)."""
    global _identifier
    if _identifier is None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    code, probability = _identifier.classify(text)
    return str(code), float(probability)


def unread_language(languages: Iterable[str], query: str) -> str | None:
    """The language that keeps a model declared for `languages` from reading `query` ("Spanish (es)"), or None.

    Only a model with a finite list of languages is ever left out, and only when the identifier is at least
    LANGUAGE_CONFIDENCE sure the query is in a language outside that list: a short keyword query (`tar`, a
    name, a version) is rarely that certain, and keeps every model.
    """
    langs = tuple(languages)
    if not langs or MULTILINGUAL in langs or not any(ch.isalpha() for ch in query):
        return None
    code, probability = identify_language(query)
    if probability < LANGUAGE_CONFIDENCE or code in langs:
        return None
    return f"{_NAMES.get(code, code)} ({code})"
