"""puremind_propose through the MCP SDK's real client (issue 14): off by default, and when on it only ever
writes to pureMind's inbox, never the vault."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from conftest import write
from puremind.inbox import Inbox
from test_server import SERVE, _index, connected, run, text_of


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
