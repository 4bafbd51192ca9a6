"""`puremind connect <agent>`: the exact command or config entry that registers pureMind with a coding agent.

It only prints. Agents rewrite their own config files while they run, and the person should see what goes
where, so pureMind never edits them.

The snippet names the puremind executable by its absolute path and carries the settings of this shell
(every PUREMIND_* variable plus the Hugging Face ones), because an agent started from a GUI, such as Cursor,
does not inherit the shell's environment. Path-valued variables are made absolute, since the agent starts the
server from another working folder.

Syntax notes, checked against the agents' own sources and issue trackers:
- Claude Code: `claude mcp add [options] <name> -- <command> [args...]`. Its `-e/--env` option takes several
  values, so `-e KEY=VALUE` written before the name swallows the name ("Invalid environment variable format",
  anthropics/claude-code issues 23365, 46121, 62332). The name therefore comes first, then each `-e`, then `--`.
- Codex: `codex mcp add <name> [--env KEY=VALUE]... -- <command>...` writes `[mcp_servers.<name>]` with
  `command`, `args` and `env` to `$CODEX_HOME/config.toml` (default ~/.codex/config.toml).
- Cursor: `~/.cursor/mcp.json` (or `.cursor/mcp.json` in a project) holds
  `{"mcpServers": {"<name>": {"command": ..., "args": [...], "env": {...}}}}`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Mapping, Sequence

from puremind.config import expand
from puremind.errors import ConfigError

SERVER_NAME = "puremind"
AGENTS = ("claude-code", "codex", "cursor")
CARRIED_PREFIX = "PUREMIND_"
CARRIED_NAMES = ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT")
# Relative or ~ paths would be read from the agent's working folder, or not expanded at all by a GUI app.
PATH_VARIABLES = frozenset({"PUREMIND_HOME", "PUREMIND_VAULT", "PUREMIND_DB", "HF_HOME", "HF_HUB_CACHE"})


def carried_env(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The variables a snippet carries, sorted by name, and the names left out because their value is not
    valid UTF-8 (no agent config file can hold it). Empty values are not carried: they set nothing."""
    carried: dict[str, str] = {}
    unusable: list[str] = []
    for name in sorted(env):
        if not (name.startswith(CARRIED_PREFIX) or name in CARRIED_NAMES):
            continue
        value = env[name]
        if not value.strip():
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            unusable.append(name)
            continue
        carried[name] = os.fspath(expand(value)) if name in PATH_VARIABLES else value
    return carried, unusable


def resolve_executable() -> list[str]:
    """How an agent should start pureMind: the absolute path of the `puremind` executable on PATH, else the
    one running now (sys.argv[0]), else `<this python> -m puremind`.

    Absolute, but symlinks are kept: a package manager's link (e.g. Homebrew's bin/puremind) survives an
    upgrade, while the versioned folder it points into does not.
    """
    found = shutil.which("puremind")
    if found:
        return [os.path.abspath(found)]
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 and Path(argv0).name == "puremind" and os.path.isfile(argv0) and os.access(argv0, os.X_OK):
        return [os.path.abspath(argv0)]
    # sys.executable is not resolved either: a virtual environment's python is a symlink whose target
    # would run without the environment's packages.
    return [os.path.abspath(sys.executable), "-m", "puremind"]


def connect_snippet(agent: str, env: Mapping[str, str], executable: str | Sequence[str]) -> str:
    """The text `puremind connect <agent>` prints: where it goes, then the command or config entry.

    `executable` is the program that starts pureMind (a path), or a program followed by its leading
    arguments (e.g. [python, "-m", "puremind"]); "serve" is appended.

    Raises:
        ConfigError: an unknown agent (the message lists the known ones).
    """
    key = agent.strip().lower()
    if key not in AGENTS:
        raise ConfigError(f"unknown agent {agent!r}", hint=f"known agents: {', '.join(AGENTS)}")
    program = [executable] if isinstance(executable, str) else list(executable)
    command = [*program, "serve"]
    carried, unusable = carried_env(env)
    render = {"claude-code": _claude_code, "codex": _codex, "cursor": _cursor}[key]
    header, body = render(command, carried, env)
    return "\n".join([*header, *_env_comment(carried, unusable), *body]) + "\n"


def connect_command(agent: str) -> str:
    """`puremind connect <agent>`: the snippet for this shell's environment and executable (the CLI prints it).

    Raises:
        ConfigError: an unknown agent.
    """
    return connect_snippet(agent, os.environ, resolve_executable())


def _env_comment(carried: Mapping[str, str], unusable: Sequence[str]) -> list[str]:
    if carried:
        lines = [f"# It carries {', '.join(carried)} from this shell."]
    else:
        lines = ["# No PUREMIND_* or Hugging Face variables are set in this shell; the server reads ~/.puremind/config.toml."]
    if unusable:
        lines.append(f"# Not carried (value is not valid UTF-8): {', '.join(unusable)}.")
    return lines


def _shell_line(words: Sequence[str], groups: Sequence[Sequence[str]]) -> str:
    """`words`, then each group of words on its own continuation line, all shell-quoted."""
    parts = [" ".join(shlex.quote(w) for w in words)]
    parts += ["  " + " ".join(shlex.quote(w) for w in group) for group in groups]
    return " \\\n".join(parts)


_Lines = tuple[list[str], list[str]]  # (header comment lines, the command or entry itself)


def _claude_code(command: list[str], carried: Mapping[str, str], env: Mapping[str, str]) -> _Lines:
    groups = [["-e", f"{name}={value}"] for name, value in carried.items()]
    groups.append(["--", *command])
    header = [
        "# Claude Code: run this once in a terminal. It registers pureMind for all your projects (user scope);",
        "# Claude Code keeps the entry in ~/.claude.json. pureMind does not edit that file.",
    ]
    return header, [_shell_line(["claude", "mcp", "add", "--scope", "user", SERVER_NAME], groups)]


def _codex(command: list[str], carried: Mapping[str, str], env: Mapping[str, str]) -> _Lines:
    codex_home = env.get("CODEX_HOME", "").strip()
    config = os.path.join(os.fspath(expand(codex_home)), "config.toml") if codex_home else "~/.codex/config.toml"
    groups = [["--env", f"{name}={value}"] for name, value in carried.items()]
    groups.append(["--", *command])
    header = [f"# Codex: run this once in a terminal; Codex writes the entry to {config}."]
    lines = [
        _shell_line(["codex", "mcp", "add", SERVER_NAME], groups),
        "",
        f"# Or add this entry to {config} yourself (pureMind does not edit that file):",
        f"[mcp_servers.{SERVER_NAME}]",
        f"command = {_toml_string(command[0])}",
        f"args = [{', '.join(_toml_string(a) for a in command[1:])}]",
    ]
    if carried:
        lines += ["", f"[mcp_servers.{SERVER_NAME}.env]"]
        lines += [f"{_toml_key(name)} = {_toml_string(value)}" for name, value in carried.items()]
    return header, lines


def _cursor(command: list[str], carried: Mapping[str, str], env: Mapping[str, str]) -> _Lines:
    entry: dict[str, object] = {"command": command[0], "args": command[1:]}
    if carried:
        entry["env"] = dict(carried)
    document = json.dumps({"mcpServers": {SERVER_NAME: entry}}, indent=2, ensure_ascii=False)
    header = [
        "# Cursor: put this in ~/.cursor/mcp.json (all projects) or .cursor/mcp.json (one project). If the file",
        f'# already has "mcpServers", add only the "{SERVER_NAME}" entry inside it, then restart Cursor.',
        "# pureMind does not edit that file.",
    ]
    return header, ["", document]


def _toml_string(text: str) -> str:
    """A TOML basic string: backslash, quote and control characters (tab aside) escaped."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif (ch < " " and ch != "\t") or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(name: str) -> str:
    """A bare key when TOML allows one (A-Z a-z 0-9 _ -), else a quoted key."""
    if name and all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in name):
        return name
    return _toml_string(name)
