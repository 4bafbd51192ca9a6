"""Run bench/quality.py and write what it prints as a named section of bench/RESULTS.md, not as `quality`.

    python bench/quality_as.py SECTION [--note TEXT] [bench/quality.py arguments, without --write-results]

`--write-results` of bench/quality.py always replaces the section `quality` (the full run: LongMemEval, SciFact,
six-language, every variant). A run on one data set or with another embedder (issue 33: multilingual-e5-small
beside MiniLM) belongs beside it, not in its place. This calls `bench.quality.main` unchanged, keeps what it
prints on stdout (the tables; progress goes to stderr as before) and writes that under SECTION, with this
command line. `--note TEXT` is written above the tables (what the model is, where it came from).
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


class _Tee(io.TextIOBase):
    """Writes to the real stdout and keeps a copy."""

    def __init__(self, out):
        self.out = out
        self.kept = io.StringIO()

    def write(self, s: str) -> int:
        self.kept.write(s)
        return self.out.write(s)

    def flush(self) -> None:
        self.out.flush()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-") or "--write-results" in argv:
        print(__doc__, file=sys.stderr)
        return 2
    section, rest = argv[0], argv[1:]
    note = ""
    if rest[:1] == ["--note"] and len(rest) > 1:
        note, rest = rest[1], rest[2:]
    from bench import quality
    from bench.index_speed import write_section

    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        rc = quality.main(rest)
    if rc == 0:
        home = os.environ.get("PUREMIND_HOME")
        command = (f"PUREMIND_HOME={home} " if home else "") + "python bench/quality_as.py " + " ".join(
            shlex.quote(a) for a in argv)
        body = tee.kept.getvalue().rstrip("\n")
        write_section(section, command, f"{note}\n\n{body}" if note else body)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
