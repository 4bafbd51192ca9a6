"""`puremind connect <agent>`: the printed command or entry must work as printed, carry the right variables,
and nothing may be written anywhere."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from puremind.connect import AGENTS, carried_env, connect_snippet, resolve_executable
from puremind.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent
EXE = "/opt/pure mind/bin/puremind"  # a space, so quoting matters
ENV = {
    "PUREMIND_VAULT": "/home/me/My Notes",
    "PUREMIND_EMBED_MODEL": "none",
    "HF_HUB_OFFLINE": "1",
    "HF_HOME": "/data/hf",
    "HF_ENDPOINT": "https://hf.example/mirror",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_TOKEN": "hf_secret",  # never carried: a token does not belong in an agent's config file
    "HOME": "/home/me",
    "PATH": "/usr/bin",
    "OPENAI_API_KEY": "sk-nope",
}
CARRIED = {k: v for k, v in ENV.items() if k.startswith("PUREMIND_") or k in (
    "HF_HUB_OFFLINE", "HF_HOME", "HF_ENDPOINT", "TRANSFORMERS_OFFLINE")}


def shell_part(snippet: str) -> str:
    """The command lines of a snippet: from the first line that is not a comment up to a blank line."""
    lines = snippet.splitlines()
    start = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[start:end])


def argv_through_bash(command: str, program: str, tmp_path: Path) -> list[str]:
    """Run the printed command in bash with a stand-in `program` that reports the arguments it received."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / program
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env={"PATH": f"{bindir}:/usr/bin:/bin"}, check=True
    )
    return json.loads(done.stdout)


def test_claude_code_snippet_is_a_user_scope_claude_mcp_add_with_the_name_before_the_env_flags(tmp_path):
    snippet = connect_snippet("claude-code", ENV, EXE)
    argv = argv_through_bash(shell_part(snippet), "claude", tmp_path)
    assert argv[:5] == ["mcp", "add", "--scope", "user", "puremind"]
    # -e takes several values in Claude Code, so it must come after the name and end at `--`.
    env_flags = argv[5 : argv.index("--")]
    assert env_flags[0::2] == ["-e"] * len(CARRIED)
    assert dict(pair.split("=", 1) for pair in env_flags[1::2]) == CARRIED
    assert argv[argv.index("--") + 1 :] == [EXE, "serve"]
    assert "~/.claude.json" in snippet and "does not edit" in snippet


def test_codex_snippet_gives_a_codex_mcp_add_command_and_the_config_toml_entry(tmp_path):
    snippet = connect_snippet("codex", ENV, EXE)
    argv = argv_through_bash(shell_part(snippet), "codex", tmp_path)
    assert argv[:3] == ["mcp", "add", "puremind"]
    env_flags = argv[3 : argv.index("--")]
    assert env_flags[0::2] == ["--env"] * len(CARRIED)
    assert dict(pair.split("=", 1) for pair in env_flags[1::2]) == CARRIED
    assert argv[argv.index("--") + 1 :] == [EXE, "serve"]

    entry = snippet[snippet.index("[mcp_servers.puremind]") :]
    assert tomllib.loads(entry) == {"mcp_servers": {"puremind": {"command": EXE, "args": ["serve"], "env": CARRIED}}}
    assert "~/.codex/config.toml" in snippet


def test_codex_snippet_names_the_config_file_under_codex_home_when_it_is_set():
    snippet = connect_snippet("codex", {"CODEX_HOME": "/srv/codex"}, EXE)
    assert "/srv/codex/config.toml" in snippet and "~/.codex" not in snippet


def test_cursor_snippet_is_the_mcp_json_entry():
    snippet = connect_snippet("cursor", ENV, EXE)
    document = json.loads(snippet[snippet.index("{") :])
    assert document == {"mcpServers": {"puremind": {"command": EXE, "args": ["serve"], "env": CARRIED}}}
    assert "~/.cursor/mcp.json" in snippet and "restart Cursor" in snippet


def test_snippets_carry_only_puremind_and_hugging_face_variables_and_say_which():
    for agent in AGENTS:
        snippet = connect_snippet(agent, ENV, EXE)
        for name in CARRIED:
            assert name in snippet
        for name in ("HF_TOKEN", "hf_secret", "OPENAI_API_KEY", "sk-nope", "PATH", "/usr/bin"):
            assert name not in snippet, (agent, name)
        assert f"It carries {', '.join(sorted(CARRIED))} from this shell." in snippet


def test_relative_and_home_paths_are_carried_as_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    carried, _ = carried_env({
        "PUREMIND_VAULT": "notes", "PUREMIND_HOME": "~/pm", "PUREMIND_DB": "./db/index.sqlite",
        "HF_HUB_CACHE": "~/cache", "PUREMIND_DEVICE": "cpu", "HF_ENDPOINT": "https://x", "PUREMIND_VARIANT": " ",
    })
    home = Path.home()
    assert carried == {
        "HF_ENDPOINT": "https://x",
        "HF_HUB_CACHE": str(home / "cache"),
        "PUREMIND_DB": str(tmp_path / "db" / "index.sqlite"),
        "PUREMIND_DEVICE": "cpu",
        "PUREMIND_HOME": str(home / "pm"),
        "PUREMIND_VAULT": str(tmp_path / "notes"),
    }  # an empty value sets nothing, so it is not carried


def test_awkward_values_survive_the_shell_toml_and_json_exactly(tmp_path):
    tricky = "/notes/it's \"here\" $HOME `x` \\ tab\there é 🧠"
    env = {"PUREMIND_VAULT": tricky, "PUREMIND_QUERY_NOTE": "a\nb\x7fc"}
    argv = argv_through_bash(shell_part(connect_snippet("claude-code", env, EXE)), "claude", tmp_path)
    assert f"PUREMIND_VAULT={tricky}" in argv and "PUREMIND_QUERY_NOTE=a\nb\x7fc" in argv
    codex = connect_snippet("codex", env, EXE)
    assert tomllib.loads(codex[codex.index("[mcp_servers.puremind]") :])["mcp_servers"]["puremind"]["env"] == env
    cursor = connect_snippet("cursor", env, EXE)
    assert json.loads(cursor[cursor.index("{") :])["mcpServers"]["puremind"]["env"] == env


def test_a_value_that_is_not_utf8_is_left_out_and_named():
    bad = b"/notes/\xff".decode("utf-8", "surrogateescape")
    for agent in AGENTS:
        snippet = connect_snippet(agent, {"PUREMIND_VAULT": bad, "PUREMIND_DEVICE": "cpu"}, EXE)
        assert "Not carried (value is not valid UTF-8): PUREMIND_VAULT." in snippet
        snippet.encode("utf-8")  # printable


def test_without_variables_the_snippet_says_the_config_file_is_used():
    snippet = connect_snippet("claude-code", {"HOME": "/home/me"}, EXE)
    assert "-e" not in shell_part(snippet) and "config.toml" in snippet


def test_a_python_m_launcher_is_split_into_command_and_args():
    snippet = connect_snippet("cursor", {}, ["/venv/bin/python", "-m", "puremind"])
    entry = json.loads(snippet[snippet.index("{") :])["mcpServers"]["puremind"]
    assert entry == {"command": "/venv/bin/python", "args": ["-m", "puremind", "serve"]}


def test_an_unknown_agent_is_an_error_listing_the_known_ones():
    with pytest.raises(ConfigError) as caught:
        connect_snippet("vim", ENV, EXE)
    assert "vim" in caught.value.message
    assert caught.value.hint == "known agents: claude-code, codex, cursor"
    assert connect_snippet(" Claude-Code ", ENV, EXE) == connect_snippet("claude-code", ENV, EXE)


def test_the_executable_is_the_absolute_puremind_on_path_with_its_symlink_kept(tmp_path, monkeypatch):
    real = tmp_path / "Cellar" / "0.2.0" / "puremind"
    real.parent.mkdir(parents=True)
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "puremind").symlink_to(real)
    monkeypatch.setenv("PATH", str(bindir))
    assert resolve_executable() == [str(bindir / "puremind")]


def test_the_executable_falls_back_to_the_running_program_then_to_python_m(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    running = tmp_path / "venv" / "bin" / "puremind"
    running.parent.mkdir(parents=True)
    running.write_text("#!/bin/sh\n")
    running.chmod(0o755)
    monkeypatch.chdir(running.parent)
    monkeypatch.setattr(sys, "argv", ["puremind", "connect", "codex"])
    assert resolve_executable() == [str(running)]
    monkeypatch.setattr(sys, "argv", [str(REPO / "puremind" / "__main__.py"), "connect", "codex"])
    assert resolve_executable() == [os.path.abspath(sys.executable), "-m", "puremind"]


AUDITED = textwrap.dedent(
    """
    import os, sys
    writes = []
    WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def audit(event, args):
        if event == "open":
            path, mode, flags = args
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & WRITE_FLAGS):
                writes.append((event, str(path)))
        elif event in ("os.rename", "os.replace", "os.remove", "os.mkdir", "os.symlink", "os.link",
                       "os.truncate", "os.chmod", "os.rmdir", "shutil.copyfile", "shutil.rmtree"):
            writes.append((event, str(args[0])))

    sys.addaudithook(audit)
    from puremind.connect import AGENTS, connect_command
    for agent in AGENTS:
        sys.stdout.write(connect_command(agent))
    if writes:
        sys.stderr.write(repr(writes))
        sys.exit(3)
    """
)


def test_connect_writes_no_file_anywhere(tmp_path):
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    (home / ".cursor").mkdir()
    home.chmod(stat.S_IRUSR | stat.S_IXUSR)  # read-only (root ignores it: the audit hook is the real check)
    before = sorted((p, p.stat().st_mtime_ns) for p in home.rglob("*"))
    try:
        done = subprocess.run(
            [sys.executable, "-c", AUDITED],
            capture_output=True, text=True, cwd=REPO,
            env={"HOME": str(home), "PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1",
                 "PUREMIND_VAULT": str(tmp_path / "notes"), "CODEX_HOME": str(home / ".codex")},
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("puremind") >= 9 and "Traceback" not in done.stderr
        assert sorted((p, p.stat().st_mtime_ns) for p in home.rglob("*")) == before
    finally:
        home.chmod(0o755)
