"""`puremind demo`: index the sample vault shipped with the package into a temporary home and search it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from puremind.config import load_settings

SAMPLE_VAULT = Path(__file__).with_name("sample_vault")
DEMO_QUERIES = (
    "how did I set up the espresso grinder",
    "roll back a production deploy",
    "flaky test sqlite write transaction",
)


def run_demo(notice: Callable[[str], None]) -> Iterator[str]:
    """Copy the sample vault to a temporary folder, index it with a temporary home, run DEMO_QUERIES.

    Nothing under the user's own ~/.puremind is read or written. Yields the lines to print.
    """
    from puremind.services import run_index, run_search

    seen: set[str] = set()

    def notice_once(message: str) -> None:
        # The index and every search would each say the models are missing; once is enough.
        key = "semantic" if "semantic search is not available" in message else message
        if key not in seen:
            seen.add(key)
            notice(message)

    with tempfile.TemporaryDirectory(prefix="puremind-demo-") as tmp:
        vault = Path(tmp) / "vault"
        shutil.copytree(SAMPLE_VAULT, vault)
        home = Path(tmp) / "home"
        settings = load_settings(flags={"vault": vault, "db": home / "index.sqlite"}, env={"PUREMIND_HOME": str(home)})
        yield f"sample vault: {len(list(vault.rglob('*.md')))} notes copied to {vault}"
        report = run_index(settings, notice=notice_once)
        yield report.summary()
        for query in DEMO_QUERIES:
            outcome = run_search(settings, query, limit=3, notice=notice_once)
            yield ""
            yield f"$ puremind search {query!r} --limit 3"
            yield from outcome.render_text()
        yield ""
        yield "next: `puremind init <your notes folder>`, then `puremind index` and `puremind search \"...\"`"
