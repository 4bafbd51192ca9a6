"""Shared fixtures: every test gets its own PUREMIND_HOME and no PUREMIND_* setting from the outside."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(autouse=True)
def puremind_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(os.environ):
        if key.startswith("PUREMIND_"):
            monkeypatch.delenv(key)
    home = tmp_path / "home"
    monkeypatch.setenv("PUREMIND_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # Keyword-only unless a test hands in a model: the real models cannot be downloaded here.
    monkeypatch.setenv("PUREMIND_EMBED_MODEL", "none")
    return home


def meta(db: Path, key: str) -> str | None:
    """One value of the index's meta table, read without writing (None when the key is not set)."""
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]
    finally:
        con.close()


def default_sigint() -> None:
    """A Popen preexec_fn: give the child the default SIGINT handling. A shell starts background jobs (`cmd &`)
    with SIGINT ignored, and Python keeps an ignored SIGINT, so a test that sends Ctrl-C needs this."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


class FakeEmbedder:
    """A deterministic embedder: hashed bag of words, L2-normalised. Counts what it embeds."""

    def __init__(self, fingerprint: str = "fake-embedder-v1", dim: int = 64):
        self.fingerprint = fingerprint
        self.dim = dim
        self.embedded: list[str] = []

    def embed(self, texts, is_query: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            self.embedded.append(text)
            for word in re.findall(r"\w+", text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                out[row, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            norm = np.linalg.norm(out[row])
            out[row] = out[row] / norm if norm else out[row]
            if not norm:
                out[row, 0] = 1.0
        return out


@pytest.fixture
def fake_embedder() -> FakeEmbedder:
    return FakeEmbedder()


#: for searcher_with: load this model from the settings (as a command would) instead of handing one in
CONFIGURED = object()


def searcher_with(settings, *, embedder=None, reranker=None, rerank=None, models_class=None):
    """A Searcher over settings.db with these models handed in (None leaves one out; CONFIGURED loads it from the
    settings, as a command would). `models_class` is a Models subclass (e.g. one that counts loads)."""
    from puremind.models.lazy import Models
    from puremind.retrieval.pipeline import Searcher
    from puremind.services import export_if_missing, model_choice, retrieval_params

    def pick(role, model):
        return model_choice(settings, role) if model is CONFIGURED else model

    models = (models_class or Models)(pick("embedder", embedder), pick("reranker", reranker), obtain=export_if_missing)
    return Searcher(settings.db, models, retrieval_params(settings, rerank=rerank))


@pytest.fixture(autouse=True)
def _index_runs_keep_the_test_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    """`index` and `watch` lower their process's CPU priority (services.lower_priority): the CLI tests that run
    them in this process must not lower pytest's, nor start themselves again in a session of their own
    (tests/test_polite.py checks the real ones in children)."""
    monkeypatch.setattr("puremind.services.lower_priority", lambda: False)
    monkeypatch.setattr("puremind.services.needs_own_session", lambda: False)


def write(root: Path, rel: str, text: str) -> Path:
    """Write a note (creating folders) and return its path."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    root.mkdir()
    write(root, "coffee.md", "# Coffee\n\n## Grinder\n\nThe grinder setting is 2.4 for an 18 g dose of espresso, purge two grams after changes.\n")
    write(root, "projects/deploy.md", "# Deploy\n\nRoll back production with the deploy script and the previous image tag printed at the end.\n")
    write(root, "journal/day.md", "# Day\n\nDebugged a flaky test: two tests shared one SQLite file and a write transaction stayed open.\n")
    return root


def http_failures() -> tuple[type[Exception], type[Exception]]:
    """(connection error, read timeout) of the HTTP library the installed huggingface_hub raises from: requests
    before 1.0, httpx in 1.x, httpx2 in 2.x (the runtime-only install has no requests)."""
    import importlib
    import importlib.util

    for name, connect, timeout in (("requests", "ConnectionError", "ReadTimeout"), ("httpx2", "ConnectError", "ReadTimeout"),
                                   ("httpx", "ConnectError", "ReadTimeout")):
        if importlib.util.find_spec(name) is not None:
            module = importlib.import_module(name)
            return getattr(module, connect), getattr(module, timeout)
    pytest.skip("no HTTP library for huggingface_hub is installed")


def hf_http_error(cls: type[Exception], message: str, status: int = 404) -> Exception:
    """A huggingface_hub HTTP error as the installed release builds it (2.x requires the response)."""
    try:
        return cls(message)
    except TypeError:
        import importlib
        import importlib.util

        http = importlib.import_module("httpx2" if importlib.util.find_spec("httpx2") else "httpx")
        request = http.Request("GET", "https://huggingface.co/api/models/org/tiny")
        return cls(message, response=http.Response(status, request=request))


def mcp_calls(env: dict[str, str], calls: list[tuple[str, dict]], *serve_args: str, timeout: float = 60) -> list:
    """Start `puremind serve --no-rerank [serve_args]` with `env` through the MCP SDK's real stdio client, make each
    (tool, arguments) call in order in one session, and return the results (the server's stderr goes to
    err.log in PUREMIND_HOME)."""
    import sys

    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "puremind", "serve", "--no-rerank", *serve_args],
                                   env=env, cwd=str(Path(__file__).resolve().parent.parent))
    out: list = []

    async def scenario() -> None:
        with anyio.fail_after(timeout), open(Path(env["PUREMIND_HOME"]) / "err.log", "w") as err:
            async with stdio_client(params, errlog=err) as (read, write_stream):
                async with ClientSession(read, write_stream) as session:
                    await session.initialize()
                    for name, args in calls:
                        out.append(await session.call_tool(name, args))

    anyio.run(scenario)
    return out
