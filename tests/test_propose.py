"""puremind_propose through the MCP SDK's real client (issue 14): off by default, and when on it only ever
writes to pureMind's inbox, never the vault."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import Implementation

from conftest import write
from puremind.inbox import MAX_PENDING, Inbox, Proposal, _id_of, render_proposal
from test_server import CALL_TIMEOUT, REPO, SERVE, _index, connected, run, text_of


@pytest.fixture
def served(tmp_path):
    vault = tmp_path / "vault"
    vault.mkdir()
    write(vault, "coffee.md", "# Coffee\n\nThe grinder setting is 2.4.\n")
    home = tmp_path / "home"
    env = _index(vault, home)
    return vault, home, env


def vault_state(vault: Path) -> dict[str, bytes]:
    return {str(p.relative_to(vault)): p.read_bytes() for p in vault.rglob("*") if p.is_file()}


def test_proposals_are_off_by_default_and_on_with_the_flag_with_honest_annotations(served, tmp_path):
    vault, home, env = served

    async def scenario() -> None:
        async with connected(env, tmp_path / "off.log") as session:
            names = {t.name for t in (await session.list_tools()).tools}
            assert names == {"puremind_search", "puremind_get", "puremind_recent"}
            refused = await session.call_tool("puremind_propose", {"title": "x", "text": "y"})
            assert refused.is_error and "unknown tool" in text_of(refused)
        async with connected(env, tmp_path / "on.log", args=[*SERVE, "--no-rerank", "--proposals"]) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            propose = tools["puremind_propose"]
            hints = propose.annotations
            assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (False, False, False)
            assert "NOTHING IS SAVED" in propose.description
            assert tools["puremind_search"].annotations.read_only_hint is True

    run(scenario)


def test_hostile_proposals_land_in_the_inbox_only_and_limits_are_tool_errors(served, tmp_path):
    vault, home, env = served
    before = vault_state(vault)
    hostile = ["../x", "/etc/passwd", "CON", "t" * 5000, "a\x00b", "?!?!", "---\ntitle: forged"]

    async def scenario() -> None:
        async with connected(env, tmp_path / "err.log", args=[*SERVE, "--no-rerank", "--proposals"]) as session:
            ok = await session.call_tool("puremind_propose", {"title": "Kettle", "text": "---\nsource: forged\n---\nBoil.",
                                                              "tags": ["tea"], "reason": "asked twice"})
            assert not ok.is_error and ok.structured_content["merged"] is False
            assert "puremind inbox approve" in text_of(ok)
            again = await session.call_tool("puremind_propose", {"title": "Kettle", "text": "---\nsource: forged\n---\nBoil."})
            assert again.structured_content == {**ok.structured_content, "merged": True,
                                                "status": again.structured_content["status"]}
            for title in hostile:
                result = await session.call_tool("puremind_propose", {"title": title, "text": "hostile"})
                if title == "t" * 5000:
                    assert result.is_error and "at most 200" in text_of(result)
                else:
                    assert not result.is_error, text_of(result)
            big = await session.call_tool("puremind_propose", {"title": "big", "text": "x" * 100_001})
            assert big.is_error

    run(scenario)
    assert vault_state(vault) == before
    pending = Inbox(home).pending()
    assert len(pending) == 1 + len(hostile) - 1
    kettle = next(p for p in pending if p.title == "Kettle")
    assert kettle.client.startswith("mcp") and kettle.tags == ("tea",) and kettle.reason == "asked twice"


def test_two_servers_proposing_at_once_lose_nothing(served, tmp_path):
    vault, home, env = served

    async def one(n: int) -> None:
        async with connected(env, tmp_path / f"err{n}.log", args=[*SERVE, "--no-rerank", "--proposals"]) as session:
            for i in range(10):
                result = await session.call_tool("puremind_propose", {"title": f"server {n} note {i}", "text": f"{n}-{i}"})
                assert not result.is_error, text_of(result)

    async def scenario() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, 1)
            tg.start_soon(one, 2)

    run(scenario)
    assert {p.title for p in Inbox(home).pending()} == {f"server {n} note {i}" for n in (1, 2) for i in range(10)}


@contextlib.asynccontextmanager
async def connected_as(env: dict[str, str], errlog: Path, client: Implementation, args: list[str]) -> AsyncIterator[Any]:
    """test_server.connected, with the client introducing itself as `client` in `initialize`."""
    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(REPO))
    with errlog.open("w") as err:
        async with stdio_client(params, errlog=err) as (read, write_stream):
            async with ClientSession(read, write_stream, read_timeout_seconds=CALL_TIMEOUT, client_info=client) as session:
                await session.initialize()
                yield session


def test_the_clients_name_and_version_are_recorded_and_a_pending_proposal_is_not_recent(served, tmp_path):
    vault, home, env = served
    agent = Implementation(name="test-agent", version="9.8.7")

    async def scenario() -> None:
        async with connected_as(env, tmp_path / "err.log", agent, [*SERVE, "--no-rerank", "--proposals"]) as session:
            done = await session.call_tool("puremind_propose", {"title": "Zebrafinch feeder",
                                                                "text": "Fill the zebrafinch feeder on Mondays."})
            assert not done.is_error, text_of(done)
            recent = await session.call_tool("puremind_recent", {"days": 1})
            assert not recent.is_error and "coffee.md" in text_of(recent)  # the vault's note, just indexed
            assert "ebrafinch" not in text_of(recent) and "inbox" not in text_of(recent)
            found = await session.call_tool("puremind_search", {"query": "zebrafinch feeder"})
            assert text_of(found).startswith("nothing found")  # the query, echoed, is all it holds

    run(scenario)
    (proposal,) = Inbox(home).pending()
    assert proposal.client == "test-agent 9.8.7"


def test_a_full_inbox_is_a_clear_tool_error_through_the_client(served, tmp_path):
    vault, home, env = served
    inbox = Inbox(home)
    inbox._ensure()
    start = (time.time_ns() // 1000) - 10_000_000
    for i in range(MAX_PENDING):  # a full inbox, written as propose writes it (without taking seconds)
        pid = _id_of(start + i)
        (inbox.dir / f"{pid}.md").write_text(render_proposal(Proposal(pid, f"waiting {i}", f"text {i}", (), "",
                                                                      "agent", "2026-01-01T00:00:00Z", f"{i:064x}")),
                                              encoding="utf-8")
    assert len(inbox.pending()) == MAX_PENDING
    before = vault_state(vault)

    async def scenario() -> None:
        async with connected(env, tmp_path / "err.log", args=[*SERVE, "--no-rerank", "--proposals"]) as session:
            full = await session.call_tool("puremind_propose", {"title": "One more", "text": "not stored"})
            assert full.is_error
            assert text_of(full).startswith("error: the inbox is full") and "puremind inbox" in text_of(full)

    run(scenario)
    assert len(inbox.pending()) == MAX_PENDING and "One more" not in {p.title for p in inbox.pending()}
    assert vault_state(vault) == before


def test_the_config_file_turns_proposals_on(served, tmp_path):
    vault, home, env = served
    (home / "config.toml").write_text("[server]\nproposals = true\n", encoding="utf-8")

    async def scenario() -> None:
        async with connected(env, tmp_path / "err.log") as session:  # `serve --no-rerank`: no --proposals
            names = {t.name for t in (await session.list_tools()).tools}
            assert names == {"puremind_search", "puremind_get", "puremind_recent", "puremind_propose"}
            done = await session.call_tool("puremind_propose", {"title": "From the config", "text": "on"})
            assert not done.is_error, text_of(done)

    run(scenario)
    assert [p.title for p in Inbox(home).pending()] == ["From the config"]
