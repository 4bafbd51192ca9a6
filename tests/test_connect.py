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


def everything(snippet) -> str:
    """All a snippet prints, stdout and stderr together."""
    return "\n".join([*snippet.guide, snippet.text, *snippet.notes])


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
    argv = argv_through_bash(snippet.text, "claude", tmp_path)
    assert argv[:5] == ["mcp", "add", "--scope", "user", "puremind"]
    # -e takes several values in Claude Code, so it must come after the name and end at `--`.
    env_flags = argv[5 : argv.index("--")]
    assert env_flags[0::2] == ["-e"] * len(CARRIED)
    assert dict(pair.split("=", 1) for pair in env_flags[1::2]) == CARRIED
    assert argv[argv.index("--") + 1 :] == [EXE, "serve"]
    assert "~/.claude.json" in everything(snippet) and "does not edit" in everything(snippet)


def test_codex_snippet_gives_a_codex_mcp_add_command_and_with_toml_the_config_toml_entry(tmp_path):
    snippet = connect_snippet("codex", ENV, EXE)
    argv = argv_through_bash(snippet.text, "codex", tmp_path)
    assert argv[:3] == ["mcp", "add", "puremind"]
    env_flags = argv[3 : argv.index("--")]
    assert env_flags[0::2] == ["--env"] * len(CARRIED)
    assert dict(pair.split("=", 1) for pair in env_flags[1::2]) == CARRIED
    assert argv[argv.index("--") + 1 :] == [EXE, "serve"]

    assert "~/.codex/config.toml" in everything(snippet) and "puremind connect codex --toml" in everything(snippet)

    entry = connect_snippet("codex", ENV, EXE, toml=True)
    assert tomllib.loads(entry.text) == {"mcp_servers": {"puremind": {"command": EXE, "args": ["serve"], "env": CARRIED}}}
    assert "~/.codex/config.toml" in everything(entry)


def test_codex_snippet_names_the_config_file_under_codex_home_when_it_is_set():
    for toml in (False, True):
        snippet = everything(connect_snippet("codex", {"CODEX_HOME": "/srv/codex"}, EXE, toml=toml))
        assert "/srv/codex/config.toml" in snippet and "~/.codex" not in snippet


def test_cursor_snippet_is_the_mcp_json_entry():
    snippet = connect_snippet("cursor", ENV, EXE)
    document = json.loads(snippet.text)  # the whole of stdout is the JSON document
    assert document == {"mcpServers": {"puremind": {"command": EXE, "args": ["serve"], "env": CARRIED}}}
    assert "~/.cursor/mcp.json" in everything(snippet) and "restart Cursor" in everything(snippet)


def test_snippets_carry_only_puremind_and_hugging_face_variables_and_say_which():
    for agent in AGENTS:
        snippet = everything(connect_snippet(agent, ENV, EXE))
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
    argv = argv_through_bash(connect_snippet("claude-code", env, EXE).text, "claude", tmp_path)
    assert f"PUREMIND_VAULT={tricky}" in argv and "PUREMIND_QUERY_NOTE=a\nb\x7fc" in argv
    codex = connect_snippet("codex", env, EXE, toml=True).text
    assert tomllib.loads(codex)["mcp_servers"]["puremind"]["env"] == env
    cursor = connect_snippet("cursor", env, EXE).text
    assert json.loads(cursor)["mcpServers"]["puremind"]["env"] == env


def test_a_value_that_is_not_utf8_is_left_out_and_named():
    bad = b"/notes/\xff".decode("utf-8", "surrogateescape")
    for agent in AGENTS:
        snippet = everything(connect_snippet(agent, {"PUREMIND_VAULT": bad, "PUREMIND_DEVICE": "cpu"}, EXE))
        assert "Not carried (value is not valid UTF-8): PUREMIND_VAULT." in snippet
        snippet.encode("utf-8")  # printable


def test_without_variables_the_snippet_says_the_config_file_is_used():
    snippet = connect_snippet("claude-code", {"HOME": "/home/me"}, EXE)
    assert "-e" not in snippet.text and "config.toml" in everything(snippet)


def test_a_python_m_launcher_is_split_into_command_and_args():
    snippet = connect_snippet("cursor", {}, ["/venv/bin/python", "-m", "puremind"])
    entry = json.loads(snippet.text)["mcpServers"]["puremind"]
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
    for snippet in [*(connect_command(agent) for agent in AGENTS), connect_command("codex", toml=True)]:
        sys.stdout.write("\\n".join([*snippet.guide, snippet.text, *snippet.notes]))
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


# -- what goes to stdout, what goes to stderr --------------------------------------------------------------------


def connect_cli(capsys, *args: str) -> tuple[int, str, str]:
    from puremind import cli

    code = cli.run(["connect", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_connect_cursor_prints_only_the_json_document_on_stdout(capsys):
    code, out, err = connect_cli(capsys, "cursor")
    assert code == 0, err
    document = json.loads(out)  # `puremind connect cursor > ~/.cursor/mcp.json` gives valid JSON
    assert document["mcpServers"]["puremind"]["args"][-1] == "serve"
    assert "~/.cursor/mcp.json" in err and "restart Cursor" in err


@pytest.mark.parametrize("agent, program", [("claude-code", "claude"), ("codex", "codex")])
def test_connect_prints_only_the_command_on_stdout_and_the_explanation_on_stderr(capsys, tmp_path, agent, program):
    code, out, err = connect_cli(capsys, agent)
    assert code == 0, err
    assert out.startswith(f"{program} mcp add ") and "#" not in out and "does not edit" not in out
    argv = argv_through_bash(out, program, tmp_path)  # stdout as a whole is one runnable command
    assert argv[argv.index("--") + 1 :][-1] == "serve"
    assert "once in a terminal" in err and "It carries" in err


def test_connect_codex_toml_prints_only_the_config_entry_on_stdout(capsys):
    code, out, err = connect_cli(capsys, "codex", "--toml")
    assert code == 0, err
    assert tomllib.loads(out)["mcp_servers"]["puremind"]["args"][-1] == "serve"
    assert "config.toml" in err
    code, out, err = connect_cli(capsys, "cursor", "--toml")
    assert code == 2 and out == "" and err.startswith("error: --toml is only for codex")


def test_no_rerank_registers_serve_no_rerank_for_every_agent(tmp_path):
    for agent, program in (("claude-code", "claude"), ("codex", "codex")):
        argv = argv_through_bash(connect_snippet(agent, ENV, EXE, no_rerank=True).text, program, tmp_path)
        assert argv[argv.index("--") + 1 :] == [EXE, "serve", "--no-rerank"]
    toml = tomllib.loads(connect_snippet("codex", ENV, EXE, no_rerank=True, toml=True).text)
    assert toml["mcp_servers"]["puremind"]["args"] == ["serve", "--no-rerank"]
    cursor = json.loads(connect_snippet("cursor", ENV, EXE, no_rerank=True).text)
    assert cursor["mcpServers"]["puremind"]["args"] == ["serve", "--no-rerank"]


def test_proposals_register_serve_proposals_for_every_agent(tmp_path):
    for agent, program in (("claude-code", "claude"), ("codex", "codex")):
        argv = argv_through_bash(connect_snippet(agent, ENV, EXE, proposals=True).text, program, tmp_path)
        assert argv[argv.index("--") + 1 :] == [EXE, "serve", "--proposals"]
    toml = tomllib.loads(connect_snippet("codex", ENV, EXE, no_rerank=True, proposals=True, toml=True).text)
    assert toml["mcp_servers"]["puremind"]["args"] == ["serve", "--no-rerank", "--proposals"]
    cursor = json.loads(connect_snippet("cursor", ENV, EXE, proposals=True).text)
    assert cursor["mcpServers"]["puremind"]["args"] == ["serve", "--proposals"]
    assert "--proposals" not in connect_snippet("cursor", ENV, EXE).text


def test_rerank_reasons_name_a_cpu_only_machine_and_a_reranker_not_exported_yet():
    from puremind.connect import rerank_reasons

    assert rerank_reasons(["CPUExecutionProvider"], True) == [
        "there is no GPU provider (CUDA or Core ML), so the cross-encoder runs on the CPU and reads only part of the candidates within its time budget (2.5 s by default)"
    ]
    assert rerank_reasons(["CUDAExecutionProvider", "CPUExecutionProvider"], True) == []
    assert rerank_reasons(["CoreMLExecutionProvider", "CPUExecutionProvider"], None) == []
    assert len(rerank_reasons(["CUDAExecutionProvider"], False)) == 1 and "not exported" in rerank_reasons(None, False)[0]
    assert rerank_reasons(None, None) == []


def test_connect_recommends_no_rerank_when_reranking_would_be_slow_and_not_once_it_is_given(capsys, monkeypatch):
    import puremind.connect

    monkeypatch.setattr(puremind.connect, "_offered_providers", lambda settings: ["CPUExecutionProvider"])
    code, out, err = connect_cli(capsys, "codex")
    assert code == 0 and "runs on the CPU" in err
    assert "`puremind connect codex --no-rerank` registers `serve --no-rerank`" in err
    code, out, err = connect_cli(capsys, "codex", "--no-rerank")
    assert code == 0 and "--no-rerank" in out and "runs on the CPU" not in err
    monkeypatch.setattr(puremind.connect, "_offered_providers", lambda settings: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(puremind.connect, "_reranker_exported", lambda settings: True)
    code, out, err = connect_cli(capsys, "codex")
    assert code == 0 and "--no-rerank" not in err


def test_connect_warns_when_there_is_no_config_or_no_index_yet(capsys, puremind_home, tmp_path):
    code, out, err = connect_cli(capsys, "claude-code")
    assert code == 0 and f"warning: no config file at {puremind_home / 'config.toml'} yet" in err
    assert "puremind init <vault_dir>" in err and "warning" not in out
    notes = tmp_path / "notes"
    notes.mkdir()
    from puremind import cli

    assert cli.run(["init", str(notes)]) == 0
    capsys.readouterr()
    code, out, err = connect_cli(capsys, "claude-code")
    assert code == 0 and f"warning: no index at {puremind_home / 'index.sqlite'} yet: run `puremind index`" in err
    assert "no config file" not in err
    assert cli.run(["index"]) == 0
    capsys.readouterr()
    code, out, err = connect_cli(capsys, "claude-code")
    assert code == 0 and "warning" not in err


def test_connect_with_a_broken_config_still_prints_the_snippet_and_warns(capsys, puremind_home):
    puremind_home.mkdir()
    (puremind_home / "config.toml").write_text("vault = \n")
    code, out, err = connect_cli(capsys, "cursor")
    assert code == 0 and json.loads(out)["mcpServers"]["puremind"]
    assert "warning: broken config file" in err and "answers every tool call with this error" in err
