"""The plain records the store takes and gives back."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field

import numpy


@dataclass(frozen=True)
class FileState:
    """What the index knows about one note file (paths are vault-relative POSIX strings)."""

    path: str
    sha256: str
    size: int
    mtime_ns: int
    indexed_at: float  # seconds since the epoch when the note's content was last stored
    # "dev:ino:ctime_ns" of the file that was read ("" when unknown): size and mtime alone miss a note
    # swapped for another file of the same size and mtime (`mv`, `rsync -a`, a retargeted symlink).
    identity: str = ""


@dataclass(frozen=True)
class ChunkRow:
    """One chunk of a note as it is stored."""

    ord: int
    heading_path: tuple[str, ...]
    text: str
    start_line: int
    end_line: int
    kind: str
    text_sha256: str  # sha256 hex of the exact text that was (or would be) embedded
    # 1-D float32 or float16; stored as float16 bytes; None = not embedded.
    # Left out of ==/hash: comparing arrays with == gives an array, which breaks dataclass equality.
    vector: numpy.ndarray | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Hit:
    """A chunk found by a search (or fetched by id), with its note path and line span."""

    chunk_id: int
    path: str
    heading_path: tuple[str, ...]
    start_line: int
    end_line: int
    score: float
    text: str
    excerpt: str
    #: the note's title (see puremind.chunker.note_title)
    title: str = ""
    #: the note is kept from agents (frontmatter `private: true` or a private folder; see Store.refresh_private)
    private: bool = False


@dataclass(frozen=True)
class TitleHit:
    """A note found by its title or one of its aliases."""

    file_id: int
    path: str
    title: str
    aliases: tuple[str, ...]
    score: float


def title_key(name: str) -> str:
    """How titles are compared for an exact match: NFC, casefolded, whitespace runs as one space."""
    return unicodedata.normalize("NFC", " ".join(name.split())).casefold()
