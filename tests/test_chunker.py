"""Tests for puremind.chunker: example tests for each rule, then hypothesis properties over random Markdown.

The properties check every chunk against a reference reading of the note made here, independently of the
chunker: a plain line-by-line scanner for frontmatter, fences and headings.
"""

from __future__ import annotations

import base64
import bisect
import random
import re
import time
import unicodedata
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from puremind.chunker import CHUNKER_VERSION, Chunk, chunk_markdown

# --- reference reading of a note (independent of the chunker) ---------------------------------------------------


def ref_heading(line: str) -> tuple[int, str] | None:
    """(level, title) for a heading that splits sections (# to ####), else None."""
    body = line.lstrip(" ")
    if len(line) - len(body) > 3:
        return None
    hashes = len(body) - len(body.lstrip("#"))
    if not 1 <= hashes <= 4:
        return None
    rest = body[hashes:]
    if rest and rest[0] not in " \t":
        return None
    title = rest.strip(" \t")
    if title and set(title) == {"#"}:
        title = ""
    else:
        without = title.rstrip("#")
        if without != title and without[-1:] in (" ", "\t"):
            title = without
    return hashes, title.strip()


def ref_fence_open(line: str) -> tuple[str, int] | None:
    """(fence character, marker length) of an opening fence line, else None."""
    body = line.lstrip(" ")
    if len(line) - len(body) > 3 or body[:1] not in ("`", "~"):
        return None
    char = body[0]
    size = len(body) - len(body.lstrip(char))
    if size < 3 or (char == "`" and "`" in body[size:]):
        return None
    return char, size


def ref_fence_closes(line: str, char: str, size: int) -> bool:
    body = line.lstrip(" ")
    run = len(body) - len(body.lstrip(char))
    return len(line) - len(body) <= 3 and run >= size and body[run:].strip(" \t") == ""


def is_fm_open(line: str) -> bool:
    return re.fullmatch(r"---[ \t]*", line) is not None


def is_fm_close(line: str) -> bool:
    return re.fullmatch(r"(---|\.\.\.)[ \t]*", line) is not None


@dataclass
class RefBlock:
    first: int  # 0-based
    last: int | None  # None: unclosed
    opener: str
    char: str  # "`", "~" or "-" (frontmatter)
    size: int


@dataclass
class RefNote:
    text: str
    lines: list[str]
    starts: list[int]  # offset of each line
    fm_end: int | None  # 0-based closing line of the frontmatter
    block_at: list[RefBlock | None]
    heading_at: list[tuple[int, str] | None]
    path_at: list[tuple[str, ...]]  # breadcrumb in force after each line

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset) - 1

    def blank(self, index: int) -> bool:
        return not self.lines[index].strip()


def read_note(raw: str) -> RefNote:
    text = unicodedata.normalize("NFC", raw.replace("\r\n", "\n"))  # the chunker's text is NFC
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    fm_end = None
    if is_fm_open(lines[0]):
        fm_end = next((k for k in range(1, len(lines)) if is_fm_close(lines[k])), None)
    block_at: list[RefBlock | None] = [None] * len(lines)
    heading_at: list[tuple[int, str] | None] = [None] * len(lines)
    path_at: list[tuple[str, ...]] = []
    stack: list[tuple[int, str]] = []
    fence: RefBlock | None = None
    if fm_end is not None:
        fm = RefBlock(0, fm_end, lines[0], "-", 3)
        for k in range(fm_end + 1):
            block_at[k] = fm
    for i, line in enumerate(lines):
        if fm_end is not None and i <= fm_end:
            pass
        elif fence is not None:
            block_at[i] = fence
            if ref_fence_closes(line, fence.char, fence.size):
                fence.last = i
                fence = None
        elif (opened := ref_fence_open(line)) is not None:
            fence = RefBlock(i, None, line, opened[0], opened[1])
            block_at[i] = fence
        elif (heading := ref_heading(line)) is not None:
            heading_at[i] = heading
            stack = [entry for entry in stack if entry[0] < heading[0]] + [heading]
        path_at.append(tuple(title for _, title in stack if title))
    return RefNote(text, lines, starts, fm_end, block_at, heading_at, path_at)


def expected_path(note: RefNote, chunk: Chunk) -> tuple[str, ...]:
    """The breadcrumb a chunk should carry: the heading stack at its first line of its own text.

    Frontmatter and blank lines are skipped; a heading whose next non-blank line is a deeper heading hands over
    to that heading (it has no text of its own, so it joined the section under it).
    """
    if chunk.kind == "frontmatter":
        return ()
    i = chunk.start_line - 1
    while i < len(note.lines) and (note.fm_end is not None and i <= note.fm_end or note.blank(i)):
        i += 1
    while note.heading_at[i] is not None:
        j = i + 1
        while j < len(note.lines) and note.blank(j):
            j += 1
        below = note.heading_at[j] if j < len(note.lines) else None
        if below is None or below[0] <= note.heading_at[i][0]:
            break
        i = j
    return note.path_at[i]


@dataclass
class Core:
    start: int  # offset in the note
    end: int
    reopened: bool
    reclosed: bool


def place_core(note: RefNote, chunk: Chunk, limit: int) -> Core | None:
    """Where the chunk sits in the note: (re-added opening line) + a slice of the note + (re-added closing line).

    The slice must begin on start_line, at or before offset `limit`, and end on end_line; its fence lines must be
    re-added exactly when it cuts a block. Repeated text can match in several places: the latest one wins, which
    is the most the chunks could cover (see check_chunks).
    """
    parts = chunk.text.split("\n")
    first = chunk.start_line - 1
    lo = note.starts[first]
    hi = min(lo + len(note.lines[first]), limit)
    best = None
    for reopened in (False, True):
        for reclosed in (False, True):
            body = parts[int(reopened) : len(parts) - int(reclosed)]
            if not body:
                continue
            if reopened and not (ref_fence_open(parts[0]) or is_fm_open(parts[0])):
                continue
            if reclosed and not (re.fullmatch(r" {0,3}(`{3,}|~{3,})", parts[-1]) or is_fm_close(parts[-1])):
                continue
            core = "\n".join(body)
            if not core.strip():
                continue  # the chunker trims blank lines, so a real slice always has text
            pos = note.text.rfind(core, lo, hi + len(core))
            while pos != -1:
                candidate = Core(pos, pos + len(core), reopened, reclosed)
                if note.line_of(pos + len(core) - 1) == chunk.end_line - 1 and core_is_consistent(
                    note, chunk, candidate
                ):
                    if best is None or candidate.start > best.start:
                        best = candidate
                    break
                pos = note.text.rfind(core, lo, pos - 1 + len(core))
    return best


def core_is_consistent(note: RefNote, chunk: Chunk, core: Core) -> bool:
    """Fence lines are re-added exactly when the slice starts / ends inside a block, and they fit that block."""
    parts = chunk.text.split("\n")
    start_block = note.block_at[note.line_of(core.start)]
    starts_inside = start_block is not None and core.start > note.starts[start_block.first]
    if starts_inside != core.reopened:
        return False
    if core.reopened and not start_block.opener.startswith(parts[0]):
        return False
    end_line = note.line_of(core.end - 1)
    end_block = note.block_at[end_line]
    block_end = None
    if end_block is not None and end_block.last is not None:
        block_end = note.starts[end_block.last] + len(note.lines[end_block.last])
    ends_inside = end_block is not None and (block_end is None or core.end < block_end)
    if ends_inside != core.reclosed:
        return False
    if core.reclosed:
        closer = parts[-1]
        if end_block.char == "-":
            return is_fm_close(closer)
        return ref_fence_closes(closer, end_block.char, end_block.size)
    return True


def fences_balance(note: RefNote, chunk: Chunk) -> bool:
    """Reading the chunk's text alone, no code fence (or frontmatter) is left open at its end."""
    parts = chunk.text.split("\n")
    i = 0
    if note.fm_end is not None and chunk.start_line - 1 <= note.fm_end:
        if not is_fm_open(parts[0]):
            return False
        close = next((k for k in range(1, len(parts)) if is_fm_close(parts[k])), None)
        if close is None:
            return False
        i = close + 1
    fence = None
    for line in parts[i:]:
        if fence is None:
            fence = ref_fence_open(line)
        elif ref_fence_closes(line, *fence):
            fence = None
    return fence is None


def check_chunks(raw: str, chunks: list[Chunk], max_chars: int, min_chars: int | None = None) -> None:
    """Every property the chunker promises, checked against the reference reading.

    Coverage: walking the chunks in order, each must start no later than the first non-blank character not yet
    covered, and together they must cover every non-whitespace character of the note. Where repeated text lets
    a chunk match in several places the latest admissible one is taken; the real place is never later, so a
    gap found this way is a real gap.
    """
    note = read_note(raw)
    if min_chars is not None and note.fm_end is not None and chunks:
        frontmatter = "\n".join(note.lines[: note.fm_end + 1]).strip()
        body_blank = all(note.blank(i) for i in range(note.fm_end + 1, len(note.lines)))
        own_chunk = len(frontmatter) >= min_chars or body_blank
        assert (chunks[0].kind == "frontmatter") == own_chunk, "frontmatter placed wrongly"
        assert chunks[0].start_line == 1
    ink = [i for i, ch in enumerate(note.text) if not ch.isspace()]  # offsets that must be covered
    covered = 0  # every non-whitespace character before this offset is in some chunk
    previous = (0, 0)
    for chunk in chunks:
        assert chunk.text.strip(), f"whitespace-only chunk {chunk!r}"
        assert chunk.kind in ("section", "frontmatter")
        assert 1 <= chunk.start_line <= chunk.end_line <= len(note.lines), chunk
        assert (chunk.start_line, chunk.end_line) >= previous, "chunks out of note order"
        previous = (chunk.start_line, chunk.end_line)
        assert chunk.heading_path == expected_path(note, chunk), chunk
        if chunk.kind == "frontmatter":
            assert note.fm_end is not None and chunk.end_line - 1 <= note.fm_end
        assert fences_balance(note, chunk), f"unbalanced fence in {chunk.text!r}"
        k = bisect.bisect_left(ink, covered)
        next_ink = ink[k] if k < len(ink) else len(note.text)
        core = place_core(note, chunk, next_ink)
        if core is None:
            anywhere = place_core(note, chunk, len(note.text))
            assert anywhere is not None, f"chunk text is not a slice of the note (plus fence lines): {chunk!r}"
            raise AssertionError(f"text before this chunk is in no chunk: {note.text[next_ink:][:60]!r}")
        assert core.end - core.start <= max_chars, f"chunk over {max_chars}: {chunk!r}"
        covered = max(covered, core.end)
    k = bisect.bisect_left(ink, covered)
    assert k == len(ink), f"text not in any chunk: {note.text[ink[k]:][:60]!r}" if k < len(ink) else ""


def spans(chunks: list[Chunk]) -> list[tuple[int, int]]:
    return [(c.start_line, c.end_line) for c in chunks]


def paths(chunks: list[Chunk]) -> list[tuple[str, ...]]:
    return [c.heading_path for c in chunks]


def words(count: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


# --- empty input and arguments -----------------------------------------------------------------------------------


def test_empty_and_whitespace_only_notes_give_no_chunks():
    assert chunk_markdown("") == []
    assert chunk_markdown(" \n\t\n\r\n\u3000\n") == []


def test_chunker_version_is_a_string():
    assert isinstance(CHUNKER_VERSION, str) and CHUNKER_VERSION


@pytest.mark.parametrize(
    "kwargs", [{"max_chars": 15}, {"max_chars": 0}, {"min_chars": -1}, {"overlap": -0.1}, {"overlap": 0.6}]
)
def test_nonsense_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        chunk_markdown("# A\ntext", **kwargs)


def test_a_note_without_headings_is_one_chunk_with_an_empty_breadcrumb():
    text = "Just a thought.\n\nAnd another one, a bit longer than the first.\n"
    assert chunk_markdown(text) == [Chunk(text.rstrip("\n"), (), 1, 3, "section")]


# --- headings and breadcrumbs ------------------------------------------------------------------------------------


def test_headings_split_sections_and_build_the_breadcrumb():
    body = words(30)
    text = f"# Project\n{body}\n## Setup\n{body}\n### Linux\n{body}\n## Usage\n{body}\n# Other\n{body}"
    chunks = chunk_markdown(text, min_chars=0)
    assert paths(chunks) == [
        ("Project",),
        ("Project", "Setup"),
        ("Project", "Setup", "Linux"),
        ("Project", "Usage"),
        ("Other",),
    ]
    assert spans(chunks) == [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]
    assert chunks[1].text == f"## Setup\n{body}"


def test_text_before_the_first_heading_has_an_empty_breadcrumb():
    chunks = chunk_markdown(f"{words(30)}\n\n# Title\n{words(30)}", min_chars=0)
    assert paths(chunks) == [(), ("Title",)]


def test_skipped_heading_levels_keep_the_breadcrumb_shallow():
    chunks = chunk_markdown(f"# A\n{words(30)}\n### C\n{words(30)}\n## B\n{words(30)}", min_chars=0)
    assert paths(chunks) == [("A",), ("A", "C"), ("A", "B")]


def test_level_five_and_six_headings_are_body_text():
    text = f"## Four\n{words(30)}\n##### Five\n{words(30)}\n###### Six\n{words(30)}"
    chunks = chunk_markdown(text, min_chars=0)
    assert len(chunks) == 1 and chunks[0].heading_path == ("Four",)


@pytest.mark.parametrize(
    "line",
    [
        "#hashtag at the start of a line",
        "#tag1 #tag2",
        "####### seven hashes",
        "    # indented four spaces is code",
        "\t# a tab before is code",
        "\\# escaped",
        "- # inside a list item",
        "> # inside a quote",
    ],
)
def test_lines_that_are_not_headings_do_not_split(line):
    chunks = chunk_markdown(f"# Top\n{words(30)}\n{line}\n{words(30)}", min_chars=0)
    assert len(chunks) == 1 and chunks[0].heading_path == ("Top",)


@pytest.mark.parametrize(
    ("line", "title"),
    [
        ("## Setup ##", "Setup"),
        ("## Setup ##   ", "Setup"),
        ("## Setup#", "Setup#"),
        ("## C#", "C#"),
        ("### Setup \\#", "Setup \\#"),
        ("   ## Three spaces", "Three spaces"),
        ("##\tTabbed", "Tabbed"),
        ("## Mixed # inside ##", "Mixed # inside"),
        ("## [[Wiki link]] and `code`", "[[Wiki link]] and `code`"),
        ("## 日本語の見出し", "日本語の見出し"),
    ],
)
def test_heading_titles_are_trimmed_and_lose_closing_hashes(line, title):
    chunks = chunk_markdown(f"# Top\n{words(30)}\n{line}\n{words(30)}", min_chars=0)
    assert chunks[-1].heading_path == ("Top", title)


def test_an_empty_heading_closes_deeper_levels_but_adds_no_breadcrumb_entry():
    text = f"# A\n{words(30)}\n## B\n{words(30)}\n##\n{words(30)}\n## ##\n{words(30)}"
    chunks = chunk_markdown(text, min_chars=0)
    assert paths(chunks) == [("A",), ("A", "B"), ("A",), ("A",)]
    assert [c.start_line for c in chunks] == [1, 3, 5, 7]


# --- fences ------------------------------------------------------------------------------------------------------


def test_headings_inside_backtick_and_tilde_fences_do_not_split():
    text = (
        f"# Script\n{words(30)}\n```bash\n# install it\npip install x\n```\n" f"~~~\n## not a heading\n~~~\n{words(30)}"
    )
    chunks = chunk_markdown(text, min_chars=0)
    assert len(chunks) == 1 and chunks[0].heading_path == ("Script",)


def test_a_fence_closes_only_with_the_same_character_at_least_as_long():
    text = f"# A\n{words(30)}\n````md\n```\n# still code\n~~~~\n# still code\n````\n" f"# B\n{words(30)}"
    chunks = chunk_markdown(text, min_chars=0)
    assert paths(chunks) == [("A",), ("B",)]
    assert chunks[1].start_line == 9


def test_a_closing_fence_may_be_longer_and_indented_but_carries_no_info_string():
    text = f"# A\n```\n# code\n``` not a close\n   `````\n# B\n{words(30)}"
    chunks = chunk_markdown(text, min_chars=0)
    assert paths(chunks) == [("A",), ("B",)]


def test_a_fence_line_indented_four_spaces_does_not_close_the_fence():
    text = f"# A\n```\n    ```\n# still code\n```\n# B\n{words(30)}"
    assert spans(chunk_markdown(text, min_chars=0)) == [(1, 5), (6, 7)]


def test_backticks_in_the_info_string_make_it_inline_code_not_a_fence():
    text = f"# A\n``` inline `code` ```\n# B\n{words(30)}"
    assert paths(chunk_markdown(text, min_chars=0)) == [("A",), ("B",)]


def test_an_unclosed_fence_runs_to_the_end_of_the_note_and_is_closed_in_the_chunk():
    text = f"# A\n{words(30)}\n~~~~python\nx = 1\n# comment\n\n## also code\n"
    chunks = chunk_markdown(text, min_chars=0)
    assert len(chunks) == 1
    assert chunks[0].heading_path == ("A",)
    assert chunks[0].end_line == 7
    assert chunks[0].text.endswith("## also code\n~~~~")


def test_a_code_block_that_fits_a_window_is_kept_whole():
    code = "```python\n" + "\n".join(f"value_{i} = compute({i})" for i in range(20)) + "\n```"
    paragraphs = "\n\n".join(words(25, f"p{i}_") for i in range(12))
    text = f"# Guide\n\n{paragraphs}\n\n{code}\n\n{paragraphs}"
    chunks = chunk_markdown(text, max_chars=1200)
    assert len(chunks) > 3
    for chunk in chunks:
        if "value_" in chunk.text:
            assert code in chunk.text, f"the code block was cut although it fits a window: {chunk.text!r}"


def test_a_window_moves_its_cut_out_of_a_code_block_that_fits():
    intro = "\n\n".join(words(12, f"i{k}_") for k in range(10))
    code = "```sh\n" + "\n".join(f"run step-{k:02d}" for k in range(28)) + "\n```"
    tail = "\n\n".join(words(12, f"t{k}_") for k in range(25))
    text = f"# Deploy\n\n{intro}\n\n{code}\n\n{tail}"
    chunks = chunk_markdown(text, max_chars=1200)
    # an even cut of this section would fall inside the code block
    assert len(chunks) == 4 and text.index("```") < len(text) / 4 < text.index("```", text.index("```") + 3)
    assert any(code in c.text for c in chunks)
    assert not any("step" in c.text and code not in c.text for c in chunks)


def test_every_part_of_a_cut_fence_keeps_its_opening_line_and_a_closing_line():
    opener = '```python title="setup.py"'
    code = "\n".join(f"line_{i} = {i}  # step {i} of the build" for i in range(80))
    text = f"# Build\n\nIntro.\n\n{opener}\n{code}\n```\n\nAfter."
    chunks = chunk_markdown(text, max_chars=400)
    assert len(chunks) >= 6
    in_code = [c for c in chunks if "line_" in c.text]
    for chunk in in_code:
        body = chunk.text.split("\n")
        fence_lines = [line for line in body if line.startswith("```")]
        assert fence_lines[0] == opener, chunk.text
        assert fence_lines[-1] == "```", chunk.text
        assert len(fence_lines) == 2, chunk.text
    check_chunks(text, chunks, 400)


def test_a_cut_tilde_fence_is_closed_with_tildes_of_the_same_length():
    code = "\n".join(f"print({i})  # {words(6)}" for i in range(60))
    text = f"# T\n~~~~~ py\n{code}\n~~~~~"
    chunks = chunk_markdown(text, max_chars=300)
    assert len(chunks) > 3
    for chunk in chunks:
        assert chunk.text.split("\n")[-1] == "~~~~~"
    assert all(c.text.split("\n")[0] == "~~~~~ py" for c in chunks[1:])


# --- frontmatter -------------------------------------------------------------------------------------------------


def test_headings_inside_frontmatter_do_not_count():
    text = f"---\ntitle: x\n# comment: yes\n---\n{words(30)}"
    chunks = chunk_markdown(text)
    assert len(chunks) == 1 and chunks[0].heading_path == ()


def test_short_frontmatter_stays_with_the_first_section():
    text = f"---\ntags: [a]\n---\n\n# Project\n{words(30)}\n## Setup\n{words(30)}"
    chunks = chunk_markdown(text)
    assert chunks[0].kind == "section"
    assert chunks[0].start_line == 1
    assert chunks[0].heading_path == ("Project",)
    assert chunks[0].text.startswith("---\ntags: [a]\n---\n\n# Project")


def test_frontmatter_of_min_chars_or_more_is_a_chunk_of_its_own():
    fm = "---\ntitle: A long enough title for this note\ntags: [alpha, beta, gamma]\naliases: [one, two, three]\n---"
    assert len(fm) >= 100
    text = f"{fm}\n# Short\nTiny."
    chunks = chunk_markdown(text)
    assert chunks[0] == Chunk(fm, (), 1, 5, "frontmatter")
    # the short section after it has no section before it to merge into, and never merges into frontmatter
    assert chunks[1] == Chunk("# Short\nTiny.", ("Short",), 6, 7, "section")


def test_frontmatter_may_close_with_three_dots():
    text = f"---\nkey: value\n# not a heading\n...\n# Real\n{words(30)}"
    chunks = chunk_markdown(text)
    assert chunks[0].heading_path == ("Real",)
    assert chunks[0].text.startswith("---\nkey: value")


def test_frontmatter_without_a_closing_line_is_ordinary_text():
    text = f"---\ntitle: x\n# Heading\n{words(30)}"
    chunks = chunk_markdown(text, min_chars=0)
    assert [(c.heading_path, c.kind) for c in chunks] == [((), "section"), (("Heading",), "section")]


def test_frontmatter_must_start_on_line_one():
    text = f"\n---\ntitle: x\n---\n# Heading\n{words(30)}"
    chunks = chunk_markdown(text, min_chars=0)
    assert all(c.kind == "section" for c in chunks)
    assert chunks[-1].heading_path == ("Heading",)


def test_a_note_that_is_only_frontmatter_is_one_frontmatter_chunk():
    assert chunk_markdown("---\na: 1\n---\n") == [Chunk("---\na: 1\n---", (), 1, 3, "frontmatter")]


def test_every_part_of_long_frontmatter_keeps_its_delimiters():
    fm = "---\n" + "\n".join(f"key_{i}: {words(5)}" for i in range(40)) + "\n---"
    chunks = chunk_markdown(f"{fm}\n# Body\n{words(30)}", max_chars=300)
    fm_chunks = [c for c in chunks if c.kind == "frontmatter"]
    assert len(fm_chunks) > 3
    for chunk in fm_chunks:
        body = chunk.text.split("\n")
        assert body[0] == "---" and body[-1] == "---" and chunk.heading_path == ()
        assert chunk.text.count("---") == 2


# --- empty headings and short sections ---------------------------------------------------------------------------


def test_a_heading_without_text_joins_the_subsection_under_it():
    text = f"# Project\n\n## Setup\n{words(30)}\n## Usage\n{words(30)}"
    chunks = chunk_markdown(text)
    assert paths(chunks) == [("Project", "Setup"), ("Project", "Usage")]
    assert spans(chunks) == [(1, 4), (5, 6)]
    assert chunks[0].text.startswith("# Project\n\n## Setup\n")


def test_a_chain_of_empty_headings_joins_the_deepest():
    text = f"# A\n## B\n\n### C\n{words(30)}"
    assert chunk_markdown(text) == [Chunk(text, ("A", "B", "C"), 1, 5, "section")]


def test_an_empty_heading_does_not_join_a_sibling():
    text = f"# Top\n{words(30)}\n## Empty\n## Sibling\n{words(30)}"
    chunks = chunk_markdown(text, min_chars=0)
    assert paths(chunks) == [("Top",), ("Top", "Empty"), ("Top", "Sibling")]


def test_short_sections_merge_with_the_one_before_and_keep_its_breadcrumb():
    text = f"# Notes\n{words(30)}\n## Tiny\nok\n## Also tiny\nfine\n## Long\n{words(30)}"
    chunks = chunk_markdown(text)
    assert paths(chunks) == [("Notes",), ("Notes", "Long")]
    assert spans(chunks) == [(1, 6), (7, 8)]
    assert chunks[0].text == "\n".join(text.split("\n")[:6])


def test_a_short_first_section_has_nothing_to_merge_into():
    text = f"# Tiny\nok\n# Long\n{words(30)}"
    chunks = chunk_markdown(text)
    assert paths(chunks) == [("Tiny",), ("Long",)]


def test_a_short_section_does_not_merge_when_the_merge_would_exceed_max_chars():
    text = f"# Big\n{words(60)}\n## Tiny\nok"
    assert len(chunk_markdown(text, max_chars=len(text))) == 1
    chunks = chunk_markdown(text, max_chars=len(text) - 1)
    assert paths(chunks) == [("Big",), ("Big", "Tiny")]


def test_min_chars_zero_keeps_every_section_apart():
    text = "# A\na\n# B\nb\n# C\nc"
    assert spans(chunk_markdown(text, min_chars=0)) == [(1, 2), (3, 4), (5, 6)]
    assert spans(chunk_markdown(text)) == [(1, 6)]


# --- windows -----------------------------------------------------------------------------------------------------


def window_lengths(chunks: list[Chunk]) -> list[int]:
    return [len(c.text) for c in chunks]


def test_a_long_section_is_cut_into_near_even_overlapping_windows_at_blank_lines():
    paragraphs = [f"Paragraph {i}. " + " ".join(f"w{i}_{k}" for k in range(8)) for i in range(200)]
    text = "# Long\n\n" + "\n\n".join(paragraphs)
    chunks = chunk_markdown(text)
    lengths = window_lengths(chunks)
    assert len(chunks) > 5 and max(lengths) <= 2048
    assert max(lengths) / min(lengths) < 1.25, lengths
    assert all(c.heading_path == ("Long",) for c in chunks)
    for chunk in chunks:
        body = chunk.text.split("\n")
        assert body[0].startswith(("Paragraph", "# Long")) and body[-1].startswith("Paragraph")
    for before, after in zip(chunks, chunks[1:]):
        shared = before.end_line - after.start_line + 1
        assert shared > 0, "consecutive windows do not overlap"
        share = len("\n".join(text.split("\n")[after.start_line - 1 : before.end_line])) / len(before.text)
        assert 0.1 <= share <= 0.35, share
    check_chunks(text, chunks, 2048)


def test_windows_start_and_end_at_blank_lines_when_paragraphs_have_several_lines():
    paragraphs = ["\n".join(f"p{i} line {k} " + words(6) for k in range(4)) for i in range(40)]
    text = "# Notes\n\n" + "\n\n".join(paragraphs)
    lines = text.split("\n")
    chunks = chunk_markdown(text, max_chars=800)
    assert len(chunks) > 5
    for chunk in chunks:
        assert chunk.start_line == 1 or lines[chunk.start_line - 2] == "", chunk.text
        assert chunk.end_line == len(lines) or lines[chunk.end_line] == "", chunk.text
    check_chunks(text, chunks, 800)


def test_windows_of_a_section_without_blank_lines_cut_at_line_ends():
    text = "# List\n" + "\n".join(f"- item {i}: {words(6)}" for i in range(300))
    chunks = chunk_markdown(text, max_chars=500)
    lengths = window_lengths(chunks)
    assert max(lengths) <= 500 and max(lengths) / min(lengths) < 1.3, lengths
    assert all(c.text.split("\n")[-1].startswith("- item") for c in chunks)
    check_chunks(text, chunks, 500)


def test_no_overlap_when_overlap_is_zero():
    text = "# List\n" + "\n".join(f"- item {i}: {words(6)}" for i in range(100))
    chunks = chunk_markdown(text, max_chars=400, overlap=0.0)
    for before, after in zip(chunks, chunks[1:]):
        assert after.start_line == before.end_line + 1
    check_chunks(text, chunks, 400)


def test_a_section_just_over_max_chars_becomes_two_even_windows():
    text = "# S\n" + "\n".join(f"line {i} " + words(10) for i in range(60))
    assert len(text) > 2048
    chunks = chunk_markdown(text)
    lengths = window_lengths(chunks)
    assert len(chunks) == 2 and abs(lengths[0] - lengths[1]) < 0.15 * max(lengths), lengths


def test_a_line_longer_than_a_window_is_cut_inside_the_line_at_spaces():
    line = " ".join(f"token{i}" for i in range(3000))
    chunks = chunk_markdown(f"# One line\n{line}")
    assert len(chunks) > 10
    assert all(len(c.text) <= 2048 for c in chunks)
    lengths = window_lengths(chunks)
    assert max(lengths) / min(lengths) < 1.4, lengths
    for chunk in chunks[1:]:
        assert chunk.text.startswith("token") and chunk.start_line == chunk.end_line == 2
    for before, after in zip(chunks, chunks[1:]):
        first_token = after.text.split()[0]
        assert first_token in before.text.split(), "pieces of a long line do not overlap"
    check_chunks(f"# One line\n{line}", chunks, 2048)


def test_a_long_cjk_line_is_cut_after_sentence_punctuation():
    sentence = "今日は天気がとても良いので、公園まで散歩に行きました。"
    line = sentence * 200
    chunks = chunk_markdown(line)
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk.text) <= 2048
        assert chunk.text.endswith(("。", "、")) or chunk is chunks[-1]
    check_chunks(line, chunks, 2048)


@pytest.mark.parametrize("shift", range(9))
def test_long_lines_are_not_cut_inside_accented_letters_or_emoji_sequences(shift):
    # 9 code points: every shift puts cuts elsewhere (q + acute has no composed form: NFC keeps it two)
    pieces = ["q\u0301", "👩\u200d💻", "👍🏽", "🇯🇵"]
    line = "x" * shift + "".join(pieces[i % 4] for i in range(300))
    chunks = chunk_markdown(line, max_chars=16)  # one piece of the line per chunk: every cut shows
    for chunk in chunks:
        assert not chunk.text.startswith(("\u0301", "\u200d", "💻", "🏽", "🇵"))
        assert not chunk.text.endswith(("\u200d", "🇯"))
    check_chunks(line, chunks, 16)


def test_a_huge_single_line_note_is_chunked_quickly():
    # a pasted image: one line of about half a megabyte, no spaces
    line = "data:image/png;base64," + base64.b64encode(random.Random(7).randbytes(360_000)).decode()
    started = time.perf_counter()
    chunks = chunk_markdown(f"![pasted]({line})")
    assert time.perf_counter() - started < 5
    assert all(len(c.text) <= 2048 for c in chunks)
    check_chunks(f"![pasted]({line})", chunks, 2048)


def test_a_long_line_that_opens_a_fence_keeps_fences_balanced():
    text = "```" + "x" * 500 + "\ncode\n```\nafter"
    chunks = chunk_markdown(text, max_chars=100)
    check_chunks(text, chunks, 100)


def test_a_long_line_that_only_looks_like_a_fence_is_cut_after_the_backtick_that_unmakes_it():
    # the backtick sits beyond where an even cut of this line would fall, but within one window
    text = "``` " + words(410) + " `inline` " + words(40, "x")
    chunks = chunk_markdown(text)
    assert 2048 < len(text) < 2500 and len(chunks) == 2
    assert "`" in chunks[0].text[3:], "the first chunk would read as an opening fence"
    check_chunks(text, chunks, 2048)


@pytest.mark.parametrize("marks", [3, 4, 5, 6, 9])
def test_a_long_line_that_only_looks_like_a_fence_far_beyond_a_window_stays_text(marks):
    text = "`" * marks + " alpha" * 40 + " `code`"
    chunks = chunk_markdown(text, max_chars=16)
    check_chunks(text, chunks, 16)


def test_pieces_of_a_long_line_never_read_as_fence_or_frontmatter_lines():
    text = "---\nnote: " + "--- ... ``` ~~~ # " * 60 + "\n---\n# H\n" + "``` x `y` " + "~~~ ``` --- " * 60
    chunks = chunk_markdown(text, max_chars=80)
    check_chunks(text, chunks, 80)


# --- line endings and real-world notes ---------------------------------------------------------------------------


def test_crlf_notes_chunk_like_lf_notes():
    text = f"---\ntitle: x\n---\n# A\n{words(30)}\n\n```\n# code\n```\n## B\n{words(300)}\n"
    assert chunk_markdown(text.replace("\n", "\r\n"), max_chars=500) == chunk_markdown(text, max_chars=500)


def test_lone_cr_line_endings_of_old_mac_notes_are_line_breaks():
    text = f"---\ntitle: x\n---\n# A\n{words(30)}\n\n```\n# code\n```\n## B\n{words(300)}\n"
    old_mac = chunk_markdown(text.replace("\n", "\r"), max_chars=500)
    assert old_mac == chunk_markdown(text, max_chars=500)
    assert [c.heading_path for c in old_mac][:2] == [("A",), ("A", "B")] and old_mac[1].start_line == 10


def test_a_byte_order_mark_does_not_hide_frontmatter():
    chunks = chunk_markdown("\ufeff---\ntags: [x]\n---\n# Title\nbody")
    assert chunks[0].heading_path == ("Title",) and chunks[0].text.startswith("---")


def test_line_numbers_are_one_based_and_count_blank_lines():
    text = "\n\n# A\n\nalpha " + words(30) + "\n\n\n# B\nbeta " + words(30) + "\n\n"
    chunks = chunk_markdown(text)
    assert spans(chunks) == [(3, 5), (8, 9)]


TLDR_PAGE = """# tar

> Archiving utility.
> Often combined with a compression method, such as `gzip` or `bzip2`.
> More information: <https://www.gnu.org/software/tar/manual/tar.html>.

- [c]reate an archive and write it to a [f]ile:

`tar cf {{path/to/target.tar}} {{path/to/file1 path/to/file2 ...}}`

- E[x]tract a (compressed) archive [f]ile into the current directory [v]erbosely:

`tar xvf {{path/to/source.tar[.gz|.bz2|.xz]}}`

- [l]is[t] the contents of a tar [f]ile [v]erbosely:

`tar tvf {{path/to/source.tar}}`
"""


def test_a_tldr_page_is_one_chunk():
    assert chunk_markdown(TLDR_PAGE) == [Chunk(TLDR_PAGE.rstrip("\n"), ("tar",), 1, 17, "section")]


OBSIDIAN_NOTE = """---
created: 2024-05-01
tags: [daily, work]
---
# 2024-05-01

## Tasks
- [ ] review #pr-123 with [[Alice]]
- [x] fix the #bug in `parser.py`

#meeting #important

## Log
> [!note] Callout
> Deployed v2 to staging; see [[Deploy checklist#Rollback]].

```dataviewjs
# not a heading
dv.list(dv.pages("#project"))
```
%% hidden comment %%
"""


def test_an_obsidian_daily_note_keeps_tags_in_the_body_and_headings_in_the_breadcrumb():
    chunks = chunk_markdown(OBSIDIAN_NOTE)
    assert paths(chunks) == [("2024-05-01", "Tasks"), ("2024-05-01", "Log")]
    assert spans(chunks) == [(1, 11), (13, 21)]
    assert chunks[0].text.startswith("---\ncreated:") and "#meeting #important" in chunks[0].text
    assert "dv.list" in chunks[1].text
    check_chunks(OBSIDIAN_NOTE, chunks, 2048)


# --- properties over random Markdown -----------------------------------------------------------------------------

WORDS = [
    "alpha", "beta", "setup", "naïve", "café", "日本語のテキスト", "中文。", "한국어", "🙂", "👍🏽", "e\u0301",
    "C#", "#tag", "##", "---", "...", "`code`", "```", "~~~", "**bold**", "[[Link]]", "|", "-", ">", "\\#",
]  # fmt: skip

word = st.sampled_from(WORDS)
plain_line = st.lists(word, min_size=1, max_size=10).map(" ".join)
raw_line = st.text(st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=40)
text_line = st.one_of(plain_line, plain_line.map(lambda s: "- " + s), raw_line)
long_line = st.one_of(
    st.lists(word, min_size=60, max_size=300).map(" ".join),
    st.tuples(st.sampled_from(["```", "~~~", "--- ", "...", "``` a `b`", "~~~~"]), st.lists(word, min_size=40)).map(
        lambda t: t[0] + " ".join(t[1])
    ),
    st.integers(20, 150).map(lambda n: "中文文本没有空格，" * n),
    st.integers(200, 2500).map(lambda n: "x" * n),
)
blank_run = st.lists(st.sampled_from(["", " ", "\t", "   "]), min_size=1, max_size=3)


@st.composite
def heading(draw) -> list[str]:
    indent = " " * draw(st.sampled_from([0, 0, 0, 1, 3, 4]))  # four spaces: indented code, not a heading
    hashes = "#" * draw(st.sampled_from([1, 1, 2, 2, 3, 3, 4, 4, 5, 6, 7]))  # five and more: body text
    title = draw(st.one_of(plain_line, raw_line, st.just("")))
    closing = draw(st.sampled_from(["", " ##", " #", "#"]))
    return [f"{indent}{hashes} {title}{closing}".rstrip(" ") if title or closing else indent + hashes]


@st.composite
def heading_run(draw) -> list[str]:
    """Headings with at most blank lines between them: empty headings that join the one under them."""
    lines: list[str] = []
    for _ in range(draw(st.integers(2, 4))):
        lines.extend(draw(heading()))
        lines.extend(draw(st.one_of(st.just([]), blank_run)))
    return lines


@st.composite
def fence(draw) -> list[str]:
    char = draw(st.sampled_from("`~"))
    other = "~" if char == "`" else "`"
    marker = char * draw(st.integers(3, 5))
    indent = " " * draw(st.integers(0, 3))
    info = draw(st.sampled_from(["", "python", 'js title="x"', "   "]))
    lookalikes = [
        "# fake heading", "", char * (len(marker) - 1), other * 3, marker + " not a close", "    " + marker, "---"
    ]  # fmt: skip
    body = draw(st.lists(st.one_of(text_line, st.sampled_from(lookalikes), long_line), max_size=8))
    closing = draw(st.sampled_from([marker, marker, marker, " " + marker + char + "  ", None]))  # None: unclosed
    return [indent + marker + info, *body, *([closing] if closing is not None else [])]


block = st.one_of(
    heading(),
    heading_run(),
    st.lists(text_line, min_size=1, max_size=4),
    blank_run,
    fence(),
    long_line.map(lambda line: [line]),
    st.sampled_from([["---"], ["#hashtag #two"], ["##### five"]]),
)


@st.composite
def markdown_note(draw) -> str:
    lines: list[str] = []
    if draw(st.booleans()):
        lines.append("---")
        lines.extend(draw(st.lists(st.one_of(plain_line, long_line, st.just("# yaml comment")), max_size=6)))
        closing = draw(st.sampled_from(["---", "...", None]))
        if closing:
            lines.append(closing)
    for part in draw(st.lists(block, max_size=14)):
        lines.extend(part)
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return newline.join(lines) + draw(st.sampled_from(["", newline]))


chunk_settings = st.fixed_dictionaries(
    {
        "max_chars": st.one_of(st.sampled_from([16, 60, 2048]), st.integers(16, 400)),
        "min_chars": st.sampled_from([0, 30, 100]),
        "overlap": st.sampled_from([0.0, 0.2, 0.5]),
    }
)

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(markdown_note(), chunk_settings)
def test_random_markdown_chunks_keep_every_promise(note, options):
    chunks = chunk_markdown(note, **options)
    check_chunks(note, chunks, options["max_chars"], options["min_chars"])


@settings(PROPERTY_SETTINGS, max_examples=100)
@given(markdown_note(), chunk_settings)
def test_random_markdown_chunks_the_same_with_crlf_and_lf(note, options):
    lf = note.replace("\r\n", "\n")
    assert chunk_markdown(lf.replace("\n", "\r\n"), **options) == chunk_markdown(lf, **options)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(5, 120), min_size=30, max_size=120), st.integers(600, 2000))
def test_random_prose_sections_get_near_even_windows(paragraph_sizes, max_chars):
    paragraphs = [" ".join(["word"] * (size // 5)) for size in paragraph_sizes]
    text = "# Prose\n\n" + "\n\n".join(paragraphs)
    chunks = chunk_markdown(text, max_chars=max_chars)
    check_chunks(text, chunks, max_chars)
    if len(text) > max_chars:
        lengths = window_lengths(chunks)
        # the last window takes what is left, so compare the others with each other and bound the last
        assert max(lengths) <= max_chars
        assert min(lengths[:-1]) >= 0.5 * max(lengths), lengths
