"""Credentials redacted in what agents receive (README, Credentials): through the real MCP client, no credential of
the test corpus (tests/test_redact.py) reaches an agent in passage text, excerpts, headings or `puremind_get`;
`[agents] redact = false` turns it off; the terminal's own search is never redacted; `inbox show` flags a proposal
that holds one."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import mcp_calls, write
from puremind import cli
from puremind.config import load_settings
from puremind.inbox import Inbox
from puremind.services import run_index, run_search
from test_redact import CASES

REPO = Path(__file__).resolve().parent.parent


def _note(i: int) -> tuple[str, str, list[tuple[str, str]]]:
    template, found = CASES[i]
    return f"creds/note{i:02d}.md", f"# Note {i} marmotcred{i}\n\n" + template.format(*(c for _, c in found)), found


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("agent-redaction")
    vault = root / "vault"
    for i in range(len(CASES)):
        rel, text, _ = _note(i)
        write(vault, rel, text)
    env = {"PUREMIND_HOME": str(root / "home"), "PUREMIND_EMBED_MODEL": "none", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(REPO), "PUREMIND_VAULT": str(vault), "PUREMIND_DB": str(root / "home" / "index.sqlite")}
    settings = load_settings(env=env)
    run_index(settings)
    return {"vault": vault, "env": env, "settings": settings, "root": root}



def _everything(result) -> str:
    """All an agent receives of one tool call: the text blocks and the structured content."""
    import json

    return "\n".join(b.text for b in result.content if b.type == "text") + json.dumps(
        result.structured_content, ensure_ascii=False)


def _pieces(credential: str) -> list[str]:
    """The credential, or for a multi-line one (a key block) each of its long lines."""
    lines = [line.strip() for line in credential.replace("\\n", "\n").splitlines()]
    return [line for line in lines if len(line) >= 16 and "PRIVATE KEY" not in line] or [credential]


def test_no_credential_reaches_an_agent_through_search_or_get(world):
    n = len(CASES)
    searches = [("puremind_search", {"query": f"marmotcred{i}", "limit": 3}) for i in range(n)]
    topics = [("puremind_search", {"query": q, "limit": 50}) for q in
              ("token", "password", "key", "secret", "deploy key", "curl Authorization Bearer", "webhook")]
    gets = [("puremind_get", {"path": _note(i)[0]}) for i in range(n)]
    results = mcp_calls(world["env"], searches + topics + gets, timeout=120)
    assert not any(r.is_error for r in results)
    for i in range(n):
        rel, _, found = _note(i)
        search, get = results[i], results[n + len(topics) + i]
        assert search.structured_content["results"][0]["path"] == rel
        for kind, credential in found:
            for piece in _pieces(credential):
                for result in (search, get, *results[n:n + len(topics)]):
                    assert piece not in _everything(result), (rel, kind)
            assert f"[redacted: {kind}]" in get.structured_content["text"], (rel, kind)
            passages = [q for r in (search, *results[n:n + len(topics)]) for q in r.structured_content["results"]
                        if q["path"] == rel]
            assert any(f"[redacted: {kind}]" in q["text"] for q in passages), (rel, kind)


def test_redaction_off_gives_agents_the_text_as_written_and_the_terminal_never_redacts(world, tmp_path):
    rel, text, found = _note(4)  # servers.md with a pasted GitHub token
    credential = found[0][1]
    home = Path(world["env"]["PUREMIND_HOME"])
    (home / "config.toml").write_text("[agents]\nredact = false\n", encoding="utf-8")
    try:
        search, get = mcp_calls(world["env"], [("puremind_search", {"query": "GitHub token mirror job", "limit": 3}),
                                            ("puremind_get", {"path": rel})])
    finally:
        (home / "config.toml").unlink()
    assert any(credential in q["text"] for q in search.structured_content["results"])
    assert credential in get.structured_content["text"]
    terminal = run_search(world["settings"], "GitHub token mirror job", limit=3, rerank=False)
    assert any(credential in q.text for q in terminal.results)


def test_inbox_show_flags_a_proposal_that_holds_credential_shaped_text(world, capsys, monkeypatch):
    for key, value in world["env"].items():
        monkeypatch.setenv(key, value)
    box = Inbox(world["settings"].home)
    flagged = box.propose("Server notes", _note(4)[1], client="agent").id
    plain = box.propose("Coffee", "The grinder setting is 12.", client="agent").id
    assert cli.run(["inbox", "show", flagged]) == 0
    assert "warning: the proposal holds credential-shaped text (github-token)" in capsys.readouterr().out
    assert cli.run(["inbox", "show", plain]) == 0
    assert "credential" not in capsys.readouterr().out
