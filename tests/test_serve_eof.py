"""`puremind serve` answers every request it has read before its standard input closes, then exits (issue 32): a
client that pipes its requests and closes stdin at once (`printf ... | puremind serve`) gets every answer.

A real `python -m puremind serve` on a small vault indexed keyword-only (embedder "none": no model is needed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write
from puremind.config import load_settings
from puremind.services import run_index

REPO = Path(__file__).resolve().parent.parent
DEADLINE_S = 60  # a hung server fails the test instead of the whole run


@pytest.fixture
def served(tmp_path: Path, vault: Path) -> dict[str, str]:
    """The environment of a server over `vault`, indexed keyword-only into its own home."""
    home = tmp_path / "serve-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUREMIND_")}
    env.update(PUREMIND_HOME=str(home), PUREMIND_EMBED_MODEL="none", PUREMIND_VAULT=str(vault),
               PUREMIND_DB=str(home / "index.sqlite"), HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    run_index(load_settings(env=env))
    return env


def _initialize(request_id: int) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "0"}}}


def _search(request_id: int, query: str) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "puremind_search", "arguments": {"query": query}}}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _pipe(env: dict[str, str], requests: list[dict]) -> tuple[int, dict, bytes]:
    """Write every request to a fresh server at once, close its stdin, read until it exits (within DEADLINE_S):
    (exit status, answers by id, stderr)."""
    payload = b"".join((json.dumps(r) + "\n").encode() for r in requests)
    proc = subprocess.Popen([sys.executable, "-m", "puremind", "serve", "--no-rerank"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO)
    try:
        out, err = proc.communicate(payload, timeout=DEADLINE_S)  # writes, closes stdin, waits for the exit
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    answers = {}
    for line in out.splitlines():
        message = json.loads(line)  # every line is JSON-RPC
        assert "id" in message and message["id"] not in answers, message
        answers[message["id"]] = message
    return proc.returncode, answers, err


def test_a_search_piped_just_before_stdin_closes_is_answered_before_the_server_exits(served):
    code, answers, err = _pipe(served, [_initialize(1), INITIALIZED, _search(2, "grinder")])
    assert code == 0, err.decode(errors="replace")
    assert set(answers) == {1, 2}, err.decode(errors="replace")
    result = answers[2]["result"]
    assert result["isError"] is False and result["structuredContent"]["results"][0]["path"] == "coffee.md"


def test_every_request_piped_before_stdin_closes_gets_its_answer(served):
    requests = [_initialize(1), INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                _search(3, "grinder"), _search("four", "roll back production"),
                {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                 "params": {"name": "puremind_get", "arguments": {"path": "journal/day.md"}}}]
    code, answers, err = _pipe(served, requests)
    assert code == 0, err.decode(errors="replace")
    assert set(answers) == {1, 2, 3, "four", 5}, err.decode(errors="replace")
    assert all("result" in a for a in answers.values()), answers
    assert {t["name"] for t in answers[2]["result"]["tools"]} >= {"puremind_search", "puremind_get"}
    assert answers["four"]["result"]["structuredContent"]["results"][0]["path"] == "projects/deploy.md"
    assert "flaky test" in answers[5]["result"]["structuredContent"]["text"]
