"""Markdown note -> chunks, each with a heading breadcrumb and a line span.

Pure: text in, data out; no files, no IO, no globals that change.

The pipeline, one small function per step:

1. `_normalise`: CRLF and lone CR -> LF, drop a leading byte-order mark.
2. `_scan`: find the YAML frontmatter, the fenced code blocks and the ATX headings (# to ####) outside them.
3. `_split_sections`: one section per heading (plus the text before the first heading), with its breadcrumb.
4. `_join_empty_headings`: a heading with no text of its own joins the deeper section under it.
5. `_place_frontmatter`: long frontmatter becomes its own chunk, short frontmatter joins the first section.
6. `_merge_short_sections`: sections under `min_chars` merge with the one before, when they fit.
7. `_section_chunks`: a section over `max_chars` is cut into near-even, overlapping windows; a window that starts
   or ends inside a code fence (or the frontmatter) gets that block's opening / closing line back.

A line longer than `max_chars` is cut inside the line (after a space or CJK punctuation when it can), at places
where neither the line's start up to the cut nor the rest reads as a fence or frontmatter line on its own.
Known limit: a line of more than `max_chars` made only of fence characters and spaces (or an opening fence with
that many spaces before its info string) leaves no such place; it is cut anyway, and a chunk holding a piece of
it may not balance its fences.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass, field, replace

__all__ = ["CHUNKER_VERSION", "Chunk", "NoteTitle", "breadcrumb", "chunk_markdown", "note_title"]

#: bump when output for the same input changes (part of the chunker signature: a change re-cuts every note;
#: vectors of unchanged text are reused). 2: text, headings and titles in Unicode NFC.
CHUNKER_VERSION = "2"

# Headings deeper than this are ordinary text: ##### sections are usually too small to stand alone.
_MAX_HEADING_LEVEL = 4

# Smallest window we accept: below this a window cannot hold a heading line and a sentence.
_MIN_MAX_CHARS = 16
_MAX_OVERLAP = 0.5

# Windows are planned at this share of max_chars, so that a cut can move forward to a better place.
_PLAN_FILL = 0.85

# Cost of cutting at each kind of place (lower is better). Added to a squared-distance cost, so a window moves
# about a quarter of its length to reach a blank line, and about a third to keep a code block whole.
_COST_PARAGRAPH = 0.0  # at a blank line
_COST_BLOCK_EDGE = 0.05  # just before a fence opens or just after it closes
_COST_LINE = 0.3  # between two lines of a paragraph or list
_COST_IN_BLOCK = 0.6  # inside a code fence or the frontmatter (its fence lines must be repeated)
_COST_IN_LINE = 1.0  # inside one over-long line
_END_DISTANCE_WEIGHT = 5.0
# Starts stay closer to the planned overlap, so that consecutive windows overlap by about `overlap`.
_START_DISTANCE_WEIGHT = 8.0

# A repeated opening fence line keeps its info string, but not a pathological one that would crowd every part.
_MAX_REOPEN_CHARS = 256

_ZWJ = "\u200d"
_ZWNJ = "\u200c"

_HEADING_RE = re.compile(r" {0,3}(#{1,6})(?:[ \t](.*))?")
_CLOSING_HASHES_RE = re.compile(r"[ \t]+#+\Z")
_FENCE_OPEN_RE = re.compile(r"( {0,3})(`{3,}|~{3,})(.*)")
_FRONTMATTER_OPEN_RE = re.compile(r"---[ \t]*")
_FRONTMATTER_CLOSE_RE = re.compile(r"(?:---|\.\.\.)[ \t]*")
# A line start that could read as a fence or a frontmatter delimiter (see _cut_guard, _tolerable_cut).
_FENCE_LIKE_RE = re.compile(r" {0,3}([`~.\-])\1{2,}")
_FENCE_RUN_RE = re.compile(r" {0,3}([`~])\1{2,}")
# Where a long line may be cut with the least harm: after whitespace or CJK sentence / clause punctuation.
_BREAK_AFTER_RE = re.compile(r"[\s\u3001\u3002\uff0c\uff1b\uff1a\uff01\uff1f\uff09\u300d\u300f\u3011\u3009\u300b]")
# A piece must not start with these: it would read as a fence, a heading or a frontmatter delimiter.
_RISKY_PIECE_STARTS = "`~#-."


@dataclass(frozen=True)
class Chunk:
    """One passage of a note, ready to embed and to show.

    `text` is the note's text from `start_line` to `end_line` (normalised to LF); when the chunk starts or ends
    inside a code fence or the frontmatter, the block's opening / closing line is added back so that fences
    balance. A chunk of an over-long line may start or end inside that line.
    """

    text: str  # the chunk's text as in the note (+ re-added fence lines for a cut block)
    heading_path: tuple[str, ...]  # breadcrumb, e.g. ("Project", "Setup"); () before the first heading
    start_line: int  # 1-based first line of the note this chunk covers
    end_line: int  # 1-based last line covered (inclusive)
    kind: str  # "frontmatter" or "section"


@dataclass(frozen=True)
class _Block:
    """Lines that read differently when cut: a fenced code block or the frontmatter."""

    first: int  # 0-based line of the opening line
    last: int | None  # 0-based line of the closing line; None = unclosed, runs to the end of the note
    opener: str  # put back on top of a part that starts inside the block
    closer: str  # put back under a part that ends inside the block


@dataclass(frozen=True)
class _Doc:
    lines: list[str]
    frontmatter: _Block | None
    blocks: list[_Block]  # frontmatter first (if any), then fences, in note order
    block_of: list[int]  # per line: index into `blocks`, or -1
    headings: dict[int, tuple[int, str]]  # line -> (level, title), levels 1.._MAX_HEADING_LEVEL only


@dataclass(frozen=True)
class _Section:
    start: int  # 0-based first line, never blank
    end: int  # 0-based last line (inclusive), never blank
    path: tuple[str, ...]
    lead_level: int  # level of the heading on its first line; 0 when it does not start with one
    kind: str = "section"


def chunk_markdown(text: str, *, max_chars: int = 2048, min_chars: int = 100, overlap: float = 0.2) -> list[Chunk]:
    """Cut a Markdown note into heading-aware chunks, in note order.

    Args:
        text: the note, any of LF / CRLF line endings.
        max_chars: most characters of note text in one chunk (re-added fence lines come on top).
        min_chars: sections (and frontmatter) shorter than this are not chunks of their own.
        overlap: share of a window repeated at the start of the next one when a long section is cut.

    Returns:
        The chunks; [] for an empty or whitespace-only note. No chunk is whitespace-only.

    Raises:
        ValueError: max_chars under 16, min_chars negative, or overlap outside 0..0.5.
    """
    _check_args(max_chars, min_chars, overlap)
    lines = _normalise(text).split("\n")
    if not any(line.strip() for line in lines):
        return []
    doc = _scan(lines)
    sections = _split_sections(doc)
    sections = _join_empty_headings(sections)
    sections = _place_frontmatter(doc, sections, min_chars)
    sections = _merge_short_sections(lines, sections, min_chars, max_chars)
    chunks: list[Chunk] = []
    for section in sections:
        chunks.extend(_section_chunks(doc, section, max_chars, overlap))
    return chunks


def _check_args(max_chars: int, min_chars: int, overlap: float) -> None:
    if max_chars < _MIN_MAX_CHARS:
        raise ValueError(f"max_chars must be at least {_MIN_MAX_CHARS}, got {max_chars}")
    if min_chars < 0:
        raise ValueError(f"min_chars must not be negative, got {min_chars}")
    if not 0 <= overlap <= _MAX_OVERLAP:
        raise ValueError(f"overlap must be between 0 and {_MAX_OVERLAP}, got {overlap}")


def _normalise(text: str) -> str:
    """LF line endings (CRLF, and a lone CR as old Mac files have it, are line breaks); no byte-order mark (a
    decoded BOM would hide frontmatter or a heading on line 1); Unicode NFC, as queries are searched: text
    written on a Mac may be decomposed (NFD), and the keyword index would hold Hangul as loose jamo that no
    composed query matches."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))


# --- recognising lines -----------------------------------------------------------------------------------------


def _parse_heading(line: str) -> tuple[int, str] | None:
    """(level, title) of an ATX heading line, else None. `#tag` is not a heading: a space or the end must follow."""
    match = _HEADING_RE.fullmatch(line)
    if match is None:
        return None
    rest = (match.group(2) or "").strip(" \t")
    if rest.strip("#") == "":
        rest = ""  # `## ##` is an empty heading: the whole text is its closing sequence
    else:
        rest = _CLOSING_HASHES_RE.sub("", rest)  # `## Setup ##` -> Setup, but `# C#` keeps its #
    return len(match.group(1)), rest.strip()


def _parse_fence_open(line: str) -> tuple[str, str] | None:
    """(indent, marker) of an opening code fence, else None."""
    match = _FENCE_OPEN_RE.fullmatch(line)
    if match is None:
        return None
    indent, marker, info = match.groups()
    if marker[0] == "`" and "`" in info:
        return None  # CommonMark: a backtick fence's info string has no backticks (it is inline code instead)
    return indent, marker


def _closes_fence(line: str, marker: str) -> bool:
    """True when `line` closes a fence opened with `marker`: same character, at least as long, nothing after."""
    body = line.lstrip(" ")
    if len(line) - len(body) > 3:
        return False
    run = len(body) - len(body.lstrip(marker[0]))
    return run >= len(marker) and body[run:].strip(" \t") == ""


def _reopen_line(line: str, indent: str, marker: str) -> str:
    """The opening fence line to repeat on top of each later part of a cut block."""
    keep = max(len(indent) + len(marker), _MAX_REOPEN_CHARS)
    return line[:keep]


def _find_frontmatter(lines: list[str]) -> _Block | None:
    """YAML frontmatter: `---` on line 1 up to a closing `---` or `...`. Without a closing line it is not one."""
    if not _FRONTMATTER_OPEN_RE.fullmatch(lines[0]):
        return None
    for index in range(1, len(lines)):
        if _FRONTMATTER_CLOSE_RE.fullmatch(lines[index]):
            return _Block(first=0, last=index, opener=lines[0], closer=lines[index])
    return None


def _scan(lines: list[str]) -> _Doc:
    """Find frontmatter, fences and headings. Headings inside the frontmatter or a fence do not count."""
    blocks: list[_Block] = []
    block_of = [-1] * len(lines)
    headings: dict[int, tuple[int, str]] = {}

    def add_block(block: _Block) -> int:
        last = len(lines) - 1 if block.last is None else block.last
        for index in range(block.first, last + 1):
            block_of[index] = len(blocks)
        blocks.append(block)
        return last

    frontmatter = _find_frontmatter(lines)
    index = add_block(frontmatter) + 1 if frontmatter else 0
    while index < len(lines):
        line = lines[index]
        fence = _parse_fence_open(line)
        if fence is not None:
            indent, marker = fence
            close = next((k for k in range(index + 1, len(lines)) if _closes_fence(lines[k], marker)), None)
            block = _Block(index, close, _reopen_line(line, indent, marker), indent + marker)
            index = add_block(block) + 1  # an unclosed fence runs to the end of the note
            continue
        heading = _parse_heading(line)
        if heading is not None and heading[0] <= _MAX_HEADING_LEVEL:
            headings[index] = heading
        index += 1
    return _Doc(lines, frontmatter, blocks, block_of, headings)


# --- sections ----------------------------------------------------------------------------------------------------


def _is_blank(line: str) -> bool:
    return not line.strip()


def _trimmed(lines: list[str], start: int, end: int) -> tuple[int, int] | None:
    """The line range without blank lines at either end; None when every line is blank."""
    while start <= end and _is_blank(lines[start]):
        start += 1
    while end >= start and _is_blank(lines[end]):
        end -= 1
    return (start, end) if start <= end else None


def _split_sections(doc: _Doc) -> list[_Section]:
    """One section per heading, plus the text before the first heading; breadcrumb from the heading stack."""
    lines = doc.lines
    body_start = doc.frontmatter.last + 1 if doc.frontmatter else 0
    raw: list[tuple[int, int, tuple[str, ...], int]] = []
    stack: list[tuple[int, str]] = []
    start, path, level = body_start, (), 0
    for index in sorted(doc.headings):
        if index > start:
            raw.append((start, index - 1, path, level))
        heading_level, title = doc.headings[index]
        while stack and stack[-1][0] >= heading_level:
            stack.pop()
        stack.append((heading_level, title))
        # An empty heading (`#` alone) still closes deeper levels, but adds nothing readable to the breadcrumb.
        start, path, level = index, tuple(t for _, t in stack if t), heading_level
    if start < len(lines):
        raw.append((start, len(lines) - 1, path, level))

    sections = []
    for start, end, path, level in raw:
        span = _trimmed(lines, start, end)
        if span is not None:
            sections.append(_Section(span[0], span[1], path, level))
    return sections


def _join_empty_headings(sections: list[_Section]) -> list[_Section]:
    """A heading with no text of its own joins the section right under it, when that one is deeper.

    `# Project` directly followed by `## Setup` gives one chunk from the `# Project` line with the breadcrumb
    Project > Setup. Walking backwards makes a chain (# A, ## B, ### C) collapse into one.
    """
    out = list(sections)
    for k in range(len(out) - 2, -1, -1):
        section, below = out[k], out[k + 1]
        heading_only = section.lead_level > 0 and section.start == section.end
        if heading_only and below.lead_level > section.lead_level:
            out[k] = replace(below, start=section.start, lead_level=section.lead_level)
            del out[k + 1]
    return out


def _place_frontmatter(doc: _Doc, sections: list[_Section], min_chars: int) -> list[_Section]:
    """Frontmatter of min_chars or more is a chunk of its own; shorter frontmatter joins the first section."""
    fm = doc.frontmatter
    if fm is None:
        return sections
    assert fm.last is not None  # frontmatter always has its closing line
    size = len("\n".join(doc.lines[fm.first : fm.last + 1]).strip())
    if size >= min_chars or not sections:
        return [_Section(fm.first, fm.last, (), 0, kind="frontmatter"), *sections]
    return [replace(sections[0], start=fm.first), *sections[1:]]


def _merge_short_sections(lines: list[str], sections: list[_Section], min_chars: int, max_chars: int) -> list[_Section]:
    """Sections under min_chars (stripped) merge with the one before; the merge keeps the earlier breadcrumb.

    Not when there is no section before, not into frontmatter, and not when the merge would exceed max_chars.
    """
    ends = [0]  # ends[i] = characters in lines[:i] plus their newlines, for O(1) span lengths
    for line in lines:
        ends.append(ends[-1] + len(line) + 1)

    def span_len(start: int, end: int) -> int:
        return ends[end + 1] - ends[start] - 1

    out: list[_Section] = []
    for section in sections:
        before = out[-1] if out else None
        if (
            before is not None
            and before.kind == "section"
            and section.kind == "section"
            and len("\n".join(lines[section.start : section.end + 1]).strip()) < min_chars
            and span_len(before.start, section.end) <= max_chars
        ):
            out[-1] = replace(before, end=section.end)
        else:
            out.append(section)
    return out


# --- units: lines, or pieces of over-long lines -------------------------------------------------------------------


@dataclass
class _Units:
    """A section as cut candidates: whole lines, and pieces of lines longer than max_chars.

    `start[u]` / `end[u]` are offsets of unit u in `source`, the section's lines joined with newlines; pieces of
    one line sit next to each other with no newline between them.
    """

    source: str
    text: list[str] = field(default_factory=list)
    line: list[int] = field(default_factory=list)  # 0-based note line of each unit
    opens_line: list[bool] = field(default_factory=list)  # first unit of its line
    closes_line: list[bool] = field(default_factory=list)  # last unit of its line
    start: list[int] = field(default_factory=list)
    end: list[int] = field(default_factory=list)
    blank_line: list[bool] = field(default_factory=list)  # the whole line is blank
    block: list[int] = field(default_factory=list)  # index into _Doc.blocks, or -1
    block_first: dict[int, int] = field(default_factory=dict)  # block -> first unit (start of its opening line)
    block_last: dict[int, int] = field(default_factory=dict)  # block -> last unit (end of its closing line)
    barriers: list[int] = field(default_factory=list)  # units after which every window must end

    def __len__(self) -> int:
        return len(self.text)

    def starts_inside_block(self, u: int) -> bool:
        """A window starting at u misses its block's opening line."""
        b = self.block[u]
        return b >= 0 and u > self.block_first[b]

    def ends_inside_block(self, u: int) -> bool:
        """A window ending at u misses its block's closing line (always so for an unclosed fence)."""
        b = self.block[u]
        return b >= 0 and u < self.block_last.get(b, len(self.text))


def _build_units(doc: _Doc, section: _Section, max_chars: int) -> _Units:
    piece_len = min(max_chars, max(16, max_chars // 8))
    units = _Units(source="\n".join(doc.lines[section.start : section.end + 1]))
    offset = 0
    for index in range(section.start, section.end + 1):
        line = doc.lines[index]
        block = doc.block_of[index]
        opens_block = block >= 0 and doc.blocks[block].first == index
        if opens_block:
            units.block_first[block] = len(units.text)
        if len(line) <= max_chars:
            pieces, walled = [line], 0
        else:
            opens_fence = opens_block and doc.blocks[block] is not doc.frontmatter
            pieces, walled = _split_long_line(line, piece_len, max_chars, opens_fence)
        units.barriers.extend(range(len(units.text), len(units.text) + walled))
        for k, piece in enumerate(pieces):
            units.text.append(piece)
            units.line.append(index)
            units.opens_line.append(k == 0)
            units.closes_line.append(k == len(pieces) - 1)
            units.start.append(offset)
            offset += len(piece)
            units.end.append(offset)
            units.blank_line.append(_is_blank(line))
            units.block.append(block)
        if block >= 0 and doc.blocks[block].last == index:
            units.block_last[block] = len(units.text) - 1
        offset += 1  # the newline
    return units


def _split_long_line(line: str, piece_len: int, max_chars: int, opens_fence: bool) -> tuple[list[str], int]:
    """Cut a line longer than a window into pieces, preferring cuts after spaces.

    A chunk that ends inside the line ends with the line's start up to the cut, and is read on its own; that
    start must not read as a fence or frontmatter line where the whole line does not. Returns the pieces, and
    how many leading pieces no window may run on past (see below).
    """
    guard = _cut_guard(line)
    pieces: list[str] = []
    pos = 0
    walled = 0
    run = _FENCE_RUN_RE.match(line)
    if guard > max_chars and run is not None and not opens_fence:
        # "``` alpha ... `b`" is no fence only thanks to a backtick more than a window away, so every window
        # holding the line's start would read as an opening fence. Instead the marker run is cut into pieces of
        # two marks (which read as text), each a window of its own; the rest then starts with at most two.
        pos = run.start(1) + 2
        pieces.append(line[:pos])
        while run.end() - pos > 2:
            pieces.append(line[pos : pos + 2])
            pos += 2
        walled = len(pieces)
    while len(line) - pos > piece_len:
        lo = pos + max(1, piece_len // 2)
        hi = pos + piece_len
        if guard > lo and not walled:
            lo, hi = guard, max(hi, min(guard, max_chars))  # the first piece may grow up to a window
        cut = _find_cut(line, lo, hi)
        pieces.append(line[pos:cut])
        pos = cut
    pieces.append(line[pos:])
    return pieces, walled


def _cut_guard(line: str) -> int:
    """Smallest cut that keeps the line's start (up to the cut) reading like the whole line.

    For a line that starts with ``` or ~~~ that means the marker and a character after it (else it could read
    as a closing fence) and, when a backtick follows the marker (which makes the line no fence), that backtick.
    For a line starting with --- or ... it means more than the bare delimiter.
    """
    match = _FENCE_LIKE_RE.match(line)
    if match is None:
        return 1
    guard = match.end()
    if match.group(1) == "`":
        tick = line.find("`", guard)
        if tick != -1:
            return tick + 1
    while guard < len(line) and line[guard] in " \t":
        guard += 1
    return guard + 1


def _joins_previous(line: str, pos: int) -> bool:
    """Cutting before line[pos] would split a user-perceived character (accent, emoji sequence, flag)."""
    ch = line[pos]
    return (
        unicodedata.category(ch) in ("Mn", "Mc", "Me")
        or ch in (_ZWJ, _ZWNJ)
        or "\U0001f3fb" <= ch <= "\U0001f3ff"  # emoji skin-tone modifiers
        or line[pos - 1] == _ZWJ
        or _is_regional_indicator(ch)
        and _is_regional_indicator(line[pos - 1])  # a flag is two of these
    )


def _is_regional_indicator(ch: str) -> bool:
    return "\U0001f1e6" <= ch <= "\U0001f1ff"


def _clean_cut(line: str, pos: int) -> bool:
    """The piece starting at pos begins with a visible character that cannot start a fence or heading."""
    ch = line[pos]
    return not ch.isspace() and ch not in _RISKY_PIECE_STARTS and not _joins_previous(line, pos)


def _tolerable_cut(line: str, pos: int) -> bool:
    """The piece starting at pos cannot read as a fence or frontmatter line (it may start with a space)."""
    return _FENCE_LIKE_RE.match(line, pos) is None and not _joins_previous(line, pos)


def _whole_characters_cut(line: str, pos: int) -> bool:
    """The last resort before a blind cut: at least do not split an accent or emoji sequence."""
    return not _joins_previous(line, pos)


def _find_cut(line: str, lo: int, hi: int) -> int:
    """A cut position in [lo, hi]: the latest of the best kind found."""
    if lo > hi:
        return hi  # pathological line (see module notes): cut where we must
    window = line[lo - 1 : hi]
    for match in reversed(list(_BREAK_AFTER_RE.finditer(window))):
        pos = lo - 1 + match.end()
        if lo <= pos <= hi and _clean_cut(line, pos):
            return pos
    for acceptable in (_clean_cut, _tolerable_cut, _whole_characters_cut):
        for pos in range(hi, lo - 1, -1):
            if acceptable(line, pos):
                return pos
    return hi


# --- windows ------------------------------------------------------------------------------------------------------


def _end_cost(units: _Units, u: int, last: int) -> float:
    """Cost of a window ending after unit u, in a run of units ending at `last`."""
    if u == last:
        return 0.0
    if not units.closes_line[u]:
        return _COST_IN_LINE
    if units.ends_inside_block(u):
        return _COST_IN_BLOCK
    if units.blank_line[u] or units.blank_line[u + 1]:
        return _COST_PARAGRAPH
    next_block = units.block[u + 1]
    if units.block[u] >= 0 or (next_block >= 0 and units.block_first[next_block] == u + 1):
        return _COST_BLOCK_EDGE  # u closes a block, or the next unit opens one
    return _COST_LINE


def _start_cost(units: _Units, u: int) -> float:
    """Cost of a window starting at unit u (not the first of its run)."""
    if not units.opens_line[u]:
        return _COST_IN_LINE
    if units.starts_inside_block(u):
        return _COST_IN_BLOCK
    if units.blank_line[u] or units.blank_line[u - 1]:
        return _COST_PARAGRAPH
    if units.block[u] >= 0 or units.block[u - 1] >= 0:
        return _COST_BLOCK_EDGE  # u opens a block, or the unit before closes one
    return _COST_LINE


def _window_size(remaining: float, count: int, overlap: float) -> float:
    """Length of each of `count` equal windows covering `remaining` characters with the given overlap."""
    return remaining / (count - (count - 1) * overlap)


def _plan_windows(units: _Units, first: int, last: int, max_chars: int, overlap: float) -> list[tuple[int, int]]:
    """Unit ranges (inclusive) of near-even overlapping windows over units first..last, each <= max_chars.

    The window count is planned from the run's length; each window then re-plans the rest, so that snapping
    cuts to blank lines does not leave a stub at the end.
    """
    total = units.end[last] - units.start[first]
    if total <= max_chars:
        return [(first, last)]
    planned = 2
    while _window_size(total, planned, overlap) > max_chars * _PLAN_FILL:
        planned += 1

    windows: list[tuple[int, int]] = []
    previous_end = first - 1
    while True:
        remaining = units.end[last] - units.start[first]
        count = max(1, planned - len(windows))
        while _window_size(remaining, count, overlap) > max_chars:
            count += 1
        if count == 1:
            windows.append((first, last))
            return windows
        size = _window_size(remaining, count, overlap)
        end = _best_end(units, first, previous_end, last, units.start[first] + size, size, max_chars)
        windows.append((first, end))
        if end == last:
            return windows
        target = units.end[end] - overlap * (units.end[end] - units.start[first])
        first = _best_start(units, first, end, target, size, max_chars)
        previous_end = end


def _best_end(
    units: _Units, first: int, previous_end: int, last: int, target: float, size: float, max_chars: int
) -> int:
    """Last unit of the window starting at `first`: near `target`, at a good place, past the previous window."""
    lowest = max(first, previous_end + 1)
    highest = min(last, bisect.bisect_right(units.end, units.start[first] + max_chars) - 1)
    return min(
        range(lowest, highest + 1),
        key=lambda u: _END_DISTANCE_WEIGHT * ((units.end[u] - target) / size) ** 2 + _end_cost(units, u, last),
    )


def _best_start(units: _Units, first: int, end: int, target: float, size: float, max_chars: int) -> int:
    """First unit of the next window: near `target`, after `first`, no gap, and able to reach past `end`."""
    lowest = max(first + 1, bisect.bisect_left(units.start, units.end[end + 1] - max_chars))
    return min(
        range(lowest, end + 2),
        key=lambda u: _START_DISTANCE_WEIGHT * ((units.start[u] - target) / size) ** 2 + _start_cost(units, u),
    )


def _trim_window(units: _Units, first: int, last: int) -> tuple[int, int] | None:
    """The window without whitespace-only units at either end; None when nothing else is left."""
    while first <= last and not units.text[first].strip():
        first += 1
    while last >= first and not units.text[last].strip():
        last -= 1
    return (first, last) if first <= last else None


def _render(doc: _Doc, units: _Units, first: int, last: int) -> str:
    """The window's text, with the fence lines of a block it cuts put back so that fences balance."""
    text = units.source[units.start[first] : units.end[last]]
    if units.starts_inside_block(first):
        text = doc.blocks[units.block[first]].opener + "\n" + text
    if units.ends_inside_block(last):
        text = text + "\n" + doc.blocks[units.block[last]].closer
    return text


def _section_chunks(doc: _Doc, section: _Section, max_chars: int, overlap: float) -> list[Chunk]:
    units = _build_units(doc, section, max_chars)
    windows: list[tuple[int, int]] = []
    run_start = 0
    for run_end in [*units.barriers, len(units) - 1]:
        windows.extend(_plan_windows(units, run_start, run_end, max_chars, overlap))
        run_start = run_end + 1
    chunks: list[Chunk] = []
    previous_last = -1
    for first, last in windows:
        window = _trim_window(units, first, last)
        if window is None or window[1] <= previous_last:
            continue  # only blank lines, or nothing the previous window did not already hold
        first, last = window
        previous_last = last
        chunks.append(
            Chunk(
                text=_render(doc, units, first, last),
                heading_path=section.path,
                start_line=units.line[first] + 1,
                end_line=units.line[last] + 1,
                kind=section.kind,
            )
        )
    return chunks


# --- titles ------------------------------------------------------------------------------------------------------

#: At most this many frontmatter aliases of a note are searchable, each cut to MAX_TITLE_CHARS (the file name, when
#: it is not the title, is one more).
MAX_ALIASES = 20
MAX_TITLE_CHARS = 300


@dataclass(frozen=True)
class NoteTitle:
    """What a note is called: its title (frontmatter `title`, else its first `#` heading, else its file name
    without the extension) and its other names: its frontmatter `aliases` (Obsidian's key; `alias` too), then its
    file name without the extension when that is not the title."""

    title: str
    aliases: tuple[str, ...] = ()
    #: frontmatter `private: true` (or yes, on): the note is kept from agents (README, Private notes)
    private: bool = False


#: frontmatter values of `private` that keep a note from agents (YAML's true, and YAML 1.1's yes and on; a
#: quoted "true" counts too: when in doubt, a note stays private)
PRIVATE_VALUES = ("true", "yes", "on")


def note_title(text: str, rel: str) -> NoteTitle:
    """The title and aliases of the note at vault-relative path `rel` with content `text`. The file name stays a
    name of the note whatever the frontmatter or the heading call it (`v1.8.9.md` titled "1.8.9" is found by
    `v1.8.9`: people ask for a note by the name their file browser shows); a name is left out when it repeats
    one before it, compared as titles are (case and runs of whitespace aside)."""
    lines = _normalise(text).split("\n")
    doc = _scan(lines)
    fields = _frontmatter_fields(lines, doc.frontmatter) if doc.frontmatter else {}
    name = unicodedata.normalize("NFC", rel.rsplit("/", 1)[-1])
    stem, dot, _ = name.rpartition(".")
    stem = (stem if dot and stem else name)[:MAX_TITLE_CHARS]
    title = next((v for v in fields.get("title", []) if v), "")
    if not title:
        title = next((t for _, (level, t) in sorted(doc.headings.items()) if level == 1 and t), "")
    title = (title or stem)[:MAX_TITLE_CHARS]
    seen = {_name_key(title)}
    aliases = []
    for alias in [*fields.get("aliases", []), *fields.get("alias", [])]:
        alias = alias[:MAX_TITLE_CHARS]
        if alias and _name_key(alias) not in seen and len(aliases) < MAX_ALIASES:
            seen.add(_name_key(alias))
            aliases.append(alias)
    if stem.strip() and _name_key(stem) not in seen:
        aliases.append(stem)
    private = any(v.casefold() in PRIVATE_VALUES for v in fields.get("private", [])[:1])
    return NoteTitle(title, tuple(aliases), private)


def _name_key(name: str) -> str:
    """A name as titles are compared (puremind.store.title_key; names here are NFC already): casefolded, runs of
    whitespace as one space."""
    return " ".join(name.split()).casefold()


_FIELD_RE = re.compile(r"([A-Za-z_][\w-]*)[ \t]*:(?:[ \t]+(.*))?")
_ITEM_RE = re.compile(r"[ \t]*-[ \t]+(.*)")


def _frontmatter_fields(lines: list[str], fm: _Block) -> dict[str, list[str]]:
    """The top-level `key: value`, `key: [a, b]` and `key:` + `- item` entries of YAML frontmatter, as strings
    (quotes removed). Enough for `title` and `aliases`; anything else YAML can say is left alone."""
    fields: dict[str, list[str]] = {}
    key: str | None = None
    for line in lines[fm.first + 1 : fm.last]:
        item = _ITEM_RE.fullmatch(line)
        if item is not None and key is not None:
            fields[key].append(_scalar(item.group(1)))
            continue
        match = _FIELD_RE.fullmatch(line.rstrip())
        if match is None:
            key = None if not line.startswith((" ", "\t")) else key
            continue
        key = match.group(1).casefold()
        value = (match.group(2) or "").strip()
        if value.startswith("[") and value.endswith("]"):
            fields[key] = [_scalar(v) for v in value[1:-1].split(",")]
        else:
            fields[key] = [_scalar(value)] if value else []
    return fields


def _scalar(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1].strip()
    if " #" in value:  # a YAML comment after a plain value
        value = value.split(" #", 1)[0].rstrip()
    return value


def breadcrumb(title: str, heading_path: tuple[str, ...]) -> tuple[str, ...]:
    """The note's title, then the headings above a chunk (the title once, when the first heading repeats it):
    what the embedder and the reranker read before a chunk's text."""
    if title and not (heading_path and heading_path[0].casefold() == title.casefold()):
        return (title, *heading_path)
    return tuple(heading_path)
