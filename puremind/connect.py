"""`puremind connect <agent>`: the exact command or config entry that registers pureMind with a coding agent.

It only prints. Agents rewrite their own config files while they run, and the person should see what goes
where, so pureMind never edits them. Only the command or entry goes to stdout (`puremind connect cursor >
~/.cursor/mcp.json` must give valid JSON); where it goes, what it carries and any warning go to stderr.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from puremind.config import DEFAULT_RERANK_BUDGET, expand
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


@dataclass(frozen=True)
class Snippet:
    """What `puremind connect <agent>` prints. Only `text` goes to stdout, so that it can be pasted, piped to
    `sh` or redirected into a file as it is; `guide` (where it goes) is printed on stderr before it and `notes`
    (what it carries, warnings, advice) on stderr after it."""

    text: str
    guide: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def connect_snippet(
    agent: str,
    env: Mapping[str, str],
    executable: str | Sequence[str],
    *,
    no_rerank: bool = False,
    toml: bool = False,
    proposals: bool = False,
    scope: Sequence[str] = (),
) -> Snippet:
    """The command or config entry that registers pureMind with `agent`, and the lines that explain it.

    `executable` is the program that starts pureMind (a path), or a program followed by its leading
    arguments (e.g. [python, "-m", "puremind"]); "serve" is appended (and "--no-rerank" with `no_rerank`,
    "--proposals" with `proposals`: the server then offers puremind_propose; "--scope F" for each folder of
    `scope`: the server serves only the notes under them).
    `toml` (Codex only) gives the `[mcp_servers.puremind]` entry for config.toml instead of the command.

    Raises:
        ConfigError: an unknown agent (the message lists the known ones), or `toml` for another agent.
    """
    key = agent.strip().lower()
    if key not in AGENTS:
        raise ConfigError(f"unknown agent {agent!r}", hint=f"known agents: {', '.join(AGENTS)}")
    if toml and key != "codex":
        raise ConfigError("--toml is only for codex", hint=f"`puremind connect {key}` prints what {key} needs")
    program = [executable] if isinstance(executable, str) else list(executable)
    command = [*program, "serve", *(["--no-rerank"] if no_rerank else []), *(["--proposals"] if proposals else []),
               *(arg for folder in scope for arg in ("--scope", folder))]
    carried, unusable = carried_env(env)
    if key == "claude-code":
        guide, text = _claude_code(command, carried)
    elif key == "codex":
        guide, text = _codex(command, carried, env, toml=toml, no_rerank=no_rerank, proposals=proposals, scope=scope)
    else:
        guide, text = _cursor(command, carried)
    return Snippet(text=text, guide=guide, notes=_env_notes(carried, unusable))


def connect_command(agent: str, *, no_rerank: bool = False, toml: bool = False, proposals: bool = False,
                    scope: Sequence[str] = ()) -> Snippet:
    """`puremind connect <agent>`: the snippet for this shell's environment and executable, with warnings about
    this setup (no config or index yet, a config file the server cannot read, reranking that would be slow).

    Raises:
        ConfigError: an unknown agent, `toml` for another agent than codex, or a scope folder that is not a
            folder of the configured vault.
    """
    scope_notes = check_scope(os.environ, scope)
    snippet = connect_snippet(agent, os.environ, resolve_executable(), no_rerank=no_rerank, toml=toml,
                              proposals=proposals, scope=scope)
    notes = scope_notes + setup_notes(os.environ, agent=agent.strip().lower(), no_rerank=no_rerank, toml=toml)
    return Snippet(text=snippet.text, guide=snippet.guide, notes=[*snippet.notes, *notes])


def check_scope(env: Mapping[str, str], scope: Sequence[str]) -> list[str]:
    """Check the scope folders against the vault the server will read; a note when there is no vault to check
    them against yet.

    Raises:
        ConfigError: a folder that is empty, outside the vault or not a folder of it.
    """
    from puremind.config import load_settings
    from puremind.errors import PuremindError
    from puremind.folders import scope_folders

    if not scope:
        return []
    try:
        load_settings(env=env)
    except PuremindError:
        return []  # setup_notes says what is wrong with the settings
    settings = load_settings({"scope": tuple(scope)}, env=env)  # now only the folders given can be wrong
    if settings.vault is None:
        return ["note: the scope folders are checked when the server starts: no vault is set yet"]
    if not scope_folders(settings.vault, settings.scope):
        return ["note: the scope names the whole vault: the server serves every note that is not private"]
    return []


def setup_notes(env: Mapping[str, str], *, agent: str, no_rerank: bool, toml: bool = False) -> list[str]:
    """Warnings about the setup the server will find (read with this environment, which the snippet carries):
    a config file it cannot read, no vault or no index yet, and whether `--no-rerank` would help here."""
    from puremind.config import load_settings
    from puremind.errors import PuremindError

    try:
        settings = load_settings(env=env)
    except PuremindError as exc:
        lines = [f"warning: {' '.join(exc.message.split())}"]
        if exc.hint:
            lines.append(f"hint: {' '.join(exc.hint.split())}")
        lines.append("until that is fixed, the server starts but answers every tool call with this error")
        return lines
    lines = []
    if settings.vault is None:
        where = f"no config file at {settings.config_path}" if not settings.config_path.exists() else "no vault is set"
        lines.append(f"warning: {where} yet: run `puremind init <vault_dir>`, then `puremind index`")
    elif not settings.db.exists():
        lines.append(f"warning: no index at {settings.db} yet: run `puremind index` before your agent searches")
    if not no_rerank and settings.rerank and settings.backend == "onnx":
        reasons = rerank_reasons(_offered_providers(settings), _reranker_exported(settings))
        if reasons:
            again = f"puremind connect {agent}{' --toml' if toml else ''} --no-rerank"
            lines.append(f"note: reranking would be slow here: {'; '.join(reasons)}")
            lines.append(f"hint: `{again}` registers `serve --no-rerank`, which skips the cross-encoder (searches stay under a second)")
    return lines


def rerank_reasons(providers: Sequence[str] | None, exported: bool | None) -> list[str]:
    """Why the cross-encoder would slow this machine's searches down: the onnxruntime execution providers
    pureMind would use (None: unknown) and whether the reranker is exported (None: unknown)."""
    reasons = []
    if providers is not None and not any(p in ("CUDAExecutionProvider", "CoreMLExecutionProvider") for p in providers):
        reasons.append("there is no GPU provider (CUDA or Core ML), so the cross-encoder runs on the CPU and reads "
                       f"only part of the candidates within its time budget ({DEFAULT_RERANK_BUDGET:g} s by default)")
    if exported is False:
        reasons.append(
            "the reranker is not exported yet: the first search would export it (minutes; needs the [export] "
            "extra) or go on without it"
        )
    return reasons


def _offered_providers(settings) -> list[str] | None:
    """The providers a search would run on (imports onnxruntime: 0.08 s), or None when that is unknown."""
    import platform

    from puremind.errors import PuremindError
    from puremind.models.providers import available_providers, select_providers

    try:
        return select_providers(settings.device, available_providers(), platform.system(), platform.machine())
    except PuremindError:
        return None


def _reranker_exported(settings) -> bool | None:
    """Whether a pinned reranker has an exported variant here; None for a model outside the manifest (finding
    out would mean looking it up on the hub)."""
    from puremind.errors import PuremindError
    from puremind.models.artefacts import list_variants
    from puremind.models.manifest import load_manifest

    try:
        spec = load_manifest().by_hub_id(settings.reranker)
        if spec is None:
            return None
        return bool(list_variants(settings.home, spec.key, settings.reranker_revision or spec.revision))
    except PuremindError:
        return None


def _env_notes(carried: Mapping[str, str], unusable: Sequence[str]) -> list[str]:
    if carried:
        lines = [f"It carries {', '.join(carried)} from this shell."]
    else:
        lines = ["No PUREMIND_* or Hugging Face variables are set in this shell; the server reads ~/.puremind/config.toml."]
    if unusable:
        lines.append(f"Not carried (value is not valid UTF-8): {', '.join(unusable)}.")
    return lines


def _shell_line(words: Sequence[str], groups: Sequence[Sequence[str]]) -> str:
    """`words`, then each group of words on its own continuation line, all shell-quoted."""
    parts = [" ".join(shlex.quote(w) for w in words)]
    parts += ["  " + " ".join(shlex.quote(w) for w in group) for group in groups]
    return " \\\n".join(parts)


_Rendered = tuple[list[str], str]  # (guide lines for stderr, the text for stdout)


def _claude_code(command: list[str], carried: Mapping[str, str]) -> _Rendered:
    groups = [["-e", f"{name}={value}"] for name, value in carried.items()]
    groups.append(["--", *command])
    guide = [
        "Claude Code: run this command once in a terminal (or pipe it to sh). It registers pureMind for all your",
        "projects (user scope); Claude Code keeps the entry in ~/.claude.json. pureMind does not edit that file.",
    ]
    return guide, _shell_line(["claude", "mcp", "add", "--scope", "user", SERVER_NAME], groups) + "\n"


def _codex(command: list[str], carried: Mapping[str, str], env: Mapping[str, str], *, toml: bool, no_rerank: bool,
           proposals: bool = False, scope: Sequence[str] = ()) -> _Rendered:
    codex_home = env.get("CODEX_HOME", "").strip()
    config = os.path.join(os.fspath(expand(codex_home)), "config.toml") if codex_home else "~/.codex/config.toml"
    if toml:
        lines = [
            f"[mcp_servers.{SERVER_NAME}]",
            f"command = {_toml_string(command[0])}",
            f"args = [{', '.join(_toml_string(a) for a in command[1:])}]",
        ]
        if carried:
            lines += ["", f"[mcp_servers.{SERVER_NAME}.env]"]
            lines += [f"{_toml_key(name)} = {_toml_string(value)}" for name, value in carried.items()]
        guide = [
            f"Codex: add this entry to {config} yourself (pureMind does not edit that file). Appending it with `>>`",
            f"works only when the file has no [mcp_servers.{SERVER_NAME}] entry yet; otherwise replace that entry.",
        ]
        return guide, "\n".join(lines) + "\n"
    groups = [["--env", f"{name}={value}"] for name, value in carried.items()]
    groups.append(["--", *command])
    toml_command = shlex.join(["puremind", "connect", "codex", "--toml", *(["--no-rerank"] if no_rerank else []),
                               *(["--proposals"] if proposals else []),
                               *(arg for folder in scope for arg in ("--scope", folder))])
    guide = [
        f"Codex: run this command once in a terminal (or pipe it to sh); Codex writes the entry to {config}.",
        f"To edit that file yourself instead, `{toml_command}` prints the entry.",
    ]
    return guide, _shell_line(["codex", "mcp", "add", SERVER_NAME], groups) + "\n"


def _cursor(command: list[str], carried: Mapping[str, str]) -> _Rendered:
    entry: dict[str, object] = {"command": command[0], "args": command[1:]}
    if carried:
        entry["env"] = dict(carried)
    document = json.dumps({"mcpServers": {SERVER_NAME: entry}}, indent=2, ensure_ascii=False)
    guide = [
        "Cursor: this JSON goes in ~/.cursor/mcp.json (all projects) or .cursor/mcp.json (one project);",
        "`puremind connect cursor > ~/.cursor/mcp.json` writes a new file. If the file already has",
        f'"mcpServers", add only the "{SERVER_NAME}" entry inside it. Then restart Cursor. pureMind does not edit that file.',
    ]
    return guide, document + "\n"


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
