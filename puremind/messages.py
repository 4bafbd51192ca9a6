"""The few helpers every layer uses to talk to the user: a notice that goes nowhere, one that goes to stderr, and
a message squeezed onto one line. Nothing else here; nothing imported."""

from __future__ import annotations

import sys


def quiet(_: str) -> None:
    """A notice that goes nowhere (the default where the caller did not ask for notices)."""


def to_stderr(message: str) -> None:
    """A notice on stderr, flushed: progress and warnings never go to stdout (in `serve` it belongs to JSON-RPC)."""
    print(message, file=sys.stderr, flush=True)


def one_line(text: object, limit: int | None = None) -> str:
    """`text` (a message, or an exception's) on one line, whitespace runs squeezed, cut to `limit` characters."""
    squeezed = " ".join(str(text).split())
    if limit is not None and len(squeezed) > limit:
        return squeezed[: limit - 3] + "..."
    return squeezed
