"""`puremind demo`: index the sample vault shipped with the package into a temporary index and search it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from puremind.config import load_settings, replace
from puremind.errors import ModelError

SAMPLE_VAULT = Path(__file__).with_name("sample_vault")
DEMO_QUERIES = (
    "how did I set up the espresso grinder",
    "roll back a production deploy",
    "flaky test sqlite write transaction",
)


def run_demo(notice: Callable[[str], None]) -> Iterator[str]:
    """Copy the sample vault to a temporary folder, index it into a temporary index file, run DEMO_QUERIES.

    The user's own vault and index are neither read nor written; exported models under PUREMIND_HOME are used
    when they are there. When the embedding model is not available, one line says so and the demo uses
    keyword search. Yields the lines to print.
    """
    from puremind.cli import render_search_lines
    from puremind.services import run_index, run_search

    with tempfile.TemporaryDirectory(prefix="puremind-demo-") as tmp:
        vault = Path(tmp) / "vault"
        shutil.copytree(SAMPLE_VAULT, vault)
        settings = load_settings(flags={"vault": vault, "db": Path(tmp) / "index.sqlite"})
        yield f"sample vault: {len(list(vault.rglob('*.md')))} notes copied to {vault}"
        lexical = not settings.semantic
        if lexical:
            notice('note: semantic search is off (embedder = "none"): using keyword search')
        else:
            try:
                report = run_index(settings, notice=notice)
            except ModelError as exc:
                notice(f"note: the embedding model is not available here ({exc.message}): using keyword search")
                lexical = True
        if lexical:
            settings = replace(settings, embedder="none")
            report = run_index(settings, notice=notice)
        yield report.summary()
        for query in DEMO_QUERIES:
            # The search the user then runs (keyword search fuses the keyword lists when semantic search is off),
            # printed by the same function: the same scores, with the same labels, as `puremind search` shows.
            outcome = run_search(settings, query, limit=3, notice=notice)
            yield ""
            yield f"$ puremind search {query!r} --limit 3"
            yield from render_search_lines(outcome)
        yield ""
        yield "next: `puremind init <your notes folder>`, then `puremind index` and `puremind search \"...\"`"
