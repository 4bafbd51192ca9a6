"""The `puremind` command: parse, call one service, render, map errors to exit codes.

Heavy libraries (onnxruntime, torch, numpy-backed model code) are imported inside commands, never at import
time, so `puremind --help` starts fast; a test holds us to it.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer
import typer.core

from puremind.errors import PuremindError

EXIT_OK = 0
EXIT_NOTHING_FOUND = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

class _Commands(typer.core.TyperGroup):
    """The command list of `puremind --help` with each command's whole description: Click would cut it after
    the first sentence or about 45 characters ("Write ~/.puremind/config.toml (PUREMIND_HOME overrides...")."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            text = command.short_help or (command.help or "").split("\n\n")[0]
            rows.append((name, " ".join(text.split())))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


app = typer.Typer(
    name="puremind",
    help="One local memory for coding agents: Markdown notes you own, one SQLite index, search over MCP.",
    cls=_Commands,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _installed_version() -> str:
    """The version in the package metadata (what pip installed), else the source tree's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("puremind")
    except PackageNotFoundError:
        from puremind import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"puremind {_installed_version()}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", is_eager=True, expose_value=False, callback=_print_version, help="Print the version and exit."),
) -> None:
    pass


class NothingFound(Exception):
    """A search that ran fine and found nothing: exit 1, no error line."""


class _Interrupted(Exception):
    """Ctrl-C inside a command (Typer would turn a KeyboardInterrupt into a silent exit)."""


class _PipeClosed(Exception):
    """The reader of stdout went away (`puremind search ... | head`); Typer would exit 1 = "nothing found"."""


def _guarded(fn):
    """Let `run` map Ctrl-C and a closed stdout itself, with its own messages and exit codes."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            raise _Interrupted() from None
        except BrokenPipeError:
            raise _PipeClosed() from None

    return wrapper


def _settings(**flags: Any):
    from puremind.config import load_settings, secure_home

    settings = load_settings(flags)
    secure_home(settings)
    return settings


@app.command()
@_guarded
def init(
    vault_dir: Path = typer.Argument(..., help="The folder of Markdown notes to index (an Obsidian vault works as is)."),
    force: bool = typer.Option(False, "--force", help="Rewrite an existing config.toml, keeping its settings."),
    light: bool = typer.Option(False, "--light", help="The light profile for a CPU: the small multilingual embedder intfloat/multilingual-e5-small."),
) -> None:
    """Write ~/.puremind/config.toml (PUREMIND_HOME overrides the folder)."""
    from puremind.config import write_config

    path, moved = write_config(vault_dir, force=force, light=light)
    if moved is not None:
        _notice(f"warning: the old config file could not be read; it was kept as {moved}")
    typer.echo(f"wrote {path}")
    typer.echo("next: `puremind index` to build the index, then `puremind search \"...\"`")


@app.command()
@_guarded
def index(
    vault_dir: Optional[Path] = typer.Argument(None, help="The vault to index (default: the configured one)."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Embed every note again; needed after changing the embedding model."),
    allow_removals: bool = typer.Option(False, "--allow-removals", help="Remove missing notes even when the vault looks empty or most of it is missing (held back otherwise)."),
) -> None:
    """Index the vault incrementally: only notes whose content changed are read and embedded again."""
    from puremind.progress import progress_display
    from puremind.services import build_models, lower_priority, run_index

    _in_own_session()
    settings = _settings(vault=vault_dir)
    lower_priority()  # an index run yields the CPU to the user's other work
    models = build_models(settings, progress=_notice, indexing=True)  # loaded only when the run needs one
    global _display
    display = _display = progress_display()
    try:
        report = run_index(settings, rebuild=rebuild, allow_removals=allow_removals, progress=display,
                           notice=_notice, models=models)
    except PuremindError as exc:
        # The model could not be had after the keyword phase: say what the run did, then the error.
        if display is not None:
            display.close()
        if getattr(exc, "report", None) is not None:
            _report_lines(exc.report)
        raise
    finally:
        if display is not None:
            display.close()
    _report_lines(report)


def _report_lines(report) -> None:
    for warning in report.warnings:
        _notice(f"warning: {warning}")
    typer.echo(report.summary())


@app.command()
@_guarded
def search(
    query: str = typer.Argument(..., help="What to look for, in plain words."),
    limit: int = typer.Option(10, "--limit", "-n", min=1, max=50, help="How many passages to show, 1 to 50."),
    no_rerank: bool = typer.Option(False, "--no-rerank", help="Skip the cross-encoder re-scoring."),
    rerank_budget: Optional[float] = typer.Option(None, "--rerank-budget", metavar="SECONDS", help="Seconds the cross-encoder may take (0 = no bound; default [retrieval] rerank_budget)."),
    lexical_only: bool = typer.Option(False, "--lexical-only", help="BM25 keyword search only."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Search the index from the terminal. Exit 1 when nothing is found."""
    from puremind.services import run_search

    settings = _settings(rerank=False if no_rerank else None, rerank_budget=rerank_budget)
    result = run_search(settings, query, limit=limit, lexical_only=lexical_only, notice=_notice)
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json"), ensure_ascii=False, indent=2))
    else:
        for line in render_search_lines(result):
            typer.echo(line)
    if not result.results:
        raise NothingFound()


def render_search_lines(result) -> list[str]:
    """The terminal's lines for one search (a puremind.results.SearchResult): `puremind search` and `puremind demo`
    print these, each score with the label of its kind (puremind.results.score_text), as the MCP text block does."""
    from puremind.results import score_text

    if not result.results:
        return [f"nothing found for {result.query!r}"]
    lines: list[str] = []
    for p in result.results:
        crumb = " > ".join(p.heading_path)
        path = p.path.replace("\n", "\\n")
        lines.append(f"{p.rank}. {path}:{p.start_line}  (lines {p.start_line}-{p.end_line})  "
                     f"{score_text(p.score_kind, p.score)}{'  private' if p.private else ''}")
        if crumb:
            lines.append(f"   {crumb}")
        excerpt = " ".join(p.excerpt.split())
        if excerpt:
            lines.append(f"   {excerpt}")
    return lines


@app.command()
@_guarded
def serve(
    no_rerank: bool = typer.Option(False, "--no-rerank", help="Skip the cross-encoder re-scoring."),
    rerank_budget: Optional[float] = typer.Option(None, "--rerank-budget", metavar="SECONDS", help="Seconds the cross-encoder may take per search (0 = no bound; default [retrieval] rerank_budget)."),
    proposals: bool = typer.Option(False, "--proposals", help="Offer puremind_propose: agents propose notes to the inbox (default [server] proposals)."),
    scope: Optional[list[str]] = typer.Option(None, "--scope", metavar="FOLDER", help="Serve only the notes under this vault folder (repeatable; default [agents] scope, else the whole vault)."),
) -> None:
    """Run the MCP server on stdio (your agent starts this; models load on the first search)."""
    from puremind.server import serve_command

    # The settings are read by the server: a broken config.toml (or a bad --rerank-budget) must not stop it
    # before the MCP handshake.
    serve_command(lambda: _settings(rerank_budget=rerank_budget, proposals=True if proposals else None,
                                    scope=tuple(scope) if scope else None),
                  rerank=False if no_rerank else None)


@app.command()
@_guarded
def connect(
    agent: str = typer.Argument(..., help="claude-code, codex or cursor."),
    no_rerank: bool = typer.Option(False, "--no-rerank", help="Register `serve --no-rerank`: fast searches without the cross-encoder (for a machine without a GPU)."),
    toml: bool = typer.Option(False, "--toml", help="Codex only: print the config.toml entry instead of the `codex mcp add` command."),
    proposals: bool = typer.Option(False, "--proposals", help="Register `serve --proposals`: the agent may propose notes to your inbox (you approve them)."),
    scope: Optional[list[str]] = typer.Option(None, "--scope", metavar="FOLDER", help="Register `serve --scope FOLDER`: this agent reads only the notes under that vault folder (repeatable)."),
) -> None:
    """Print the command or snippet that registers pureMind with an agent (stdout), and where it goes (stderr); never edits a file."""
    from puremind.connect import connect_command

    snippet = connect_command(agent, no_rerank=no_rerank, toml=toml, proposals=proposals, scope=tuple(scope or ()))
    for line in snippet.guide:
        _notice(line)
    typer.echo(snippet.text, nl=False)
    for line in snippet.notes:
        _notice(line)


@app.command()
@_guarded
def watch(
    vault_dir: Optional[Path] = typer.Argument(None, help="The vault to watch (default: the configured one)."),
    debounce: float = typer.Option(
        2.0, "--debounce", min=0.05, max=3600, metavar="SECONDS", help="Re-index once the vault has been quiet this long after a change."
    ),
) -> None:
    """Index the vault, then again each time it has been quiet for --debounce seconds after a change; Ctrl-C stops."""
    from puremind.progress import progress_display
    from puremind.services import build_models, lower_priority, run_watch

    _in_own_session()
    settings = _settings(vault=vault_dir)
    lower_priority()  # a watcher yields the CPU to the user's other work
    global _display
    display = _display = progress_display()

    def say(line: str) -> None:
        if display is not None:
            display.close()  # a run's summary replaces its bar
        typer.echo(line)

    try:
        run_watch(settings, debounce=debounce, say=say, notice=_notice, progress=display,
                  models=build_models(settings, progress=_notice, indexing=True))
    finally:
        if display is not None:
            display.close()


@app.command("export-models")
@_guarded
def export_models(
    variant: Optional[list[str]] = typer.Option(None, "--variant", metavar="NAME", help="Only this variant (fp32, fp16, int8); repeatable. Default: all."),
    coreml: Optional[bool] = typer.Option(None, "--coreml/--no-coreml", help="Also convert to Core ML (default: on Apple Silicon only)."),
    only: Optional[str] = typer.Option(None, "--only", metavar="ROLE", help="Only the 'embedder' or the 'reranker'."),
    force: bool = typer.Option(False, "--force", help="Export again even when a verified export exists."),
) -> None:
    """Fetch the configured models at their pinned revisions and export them once to ONNX (needs the [export] extra)."""
    from puremind.errors import ConfigError
    from puremind.services import export_models as export_configured

    if only not in (None, "embedder", "reranker"):
        raise ConfigError(f"--only must be 'embedder' or 'reranker', not {only!r}")
    settings = _settings()
    roles = (only,) if only else ("embedder", "reranker")
    if only is not None and not settings.configures(only):
        raise ConfigError(f'no {only} is configured ([models] {only} = "none"): nothing to export')
    rows = export_configured(settings, variants=variant or None, coreml=coreml, roles=roles, force=force, progress=_notice)
    for model, name, folder in rows:
        typer.echo(f"{model}  {name:<7} {folder}")


@app.command("eval")
@_guarded
def eval_(
    queries: Optional[int] = typer.Option(None, "--queries", min=1, max=100_000, metavar="N", help="At most N known-item queries (default 300), shared among the kinds."),
    seed: Optional[int] = typer.Option(None, "--seed", help="The seed that picks the queries and the bootstrap resamples (default 34)."),
    time_budget: float = typer.Option(0.0, "--time-budget", min=0.0, metavar="SECONDS", help="Stop starting queries after this many seconds (0 = no bound)."),
    rerank_budget: Optional[float] = typer.Option(None, "--rerank-budget", metavar="SECONDS", help="Seconds the cross-encoder may take per search (0 = no bound; default [retrieval] rerank_budget)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Measure keyword, hybrid and reranked search on your own notes with known-item queries (they stay here)."""
    from puremind.progress import progress_display
    from puremind.services import run_eval

    settings = _settings(rerank_budget=rerank_budget)
    global _display
    display = _display = progress_display()
    try:
        summary = run_eval(settings, seed=seed, queries=queries, time_budget=time_budget, progress=display,
                           notice=_notice)
    finally:
        if display is not None:
            display.close()
        _display = None
    if as_json:
        typer.echo(json.dumps(summary, ensure_ascii=False, indent=2))
    else:
        for line in render_eval_lines(summary):
            typer.echo(line)


def render_eval_lines(summary: dict) -> list[str]:
    """The terminal's lines for an eval summary: what it measured, one row per configuration and query kind, the
    reranker against hybrid."""
    q = summary["queries"]
    kinds = ", ".join(f"{q[k]} {k}" for k in ("title", "heading", "sentence", "link") if q.get(k))
    stopped = f" (--time-budget reached: {q['ran']} of {q['planned']})" if summary["stopped_by_time_budget"] else ""
    lines = [f"{q['ran']} known-item queries from {summary['notes']:,} notes ({kinds}; seed {summary['seed']}) in "
             f"{summary['elapsed_s']:.1f} s{stopped}",
             f"measures: {summary['measures']}", ""]

    def cell(f: dict) -> str:
        return f"{f['value']:.3f} [{f['low']:.2f}-{f['high']:.2f}]"

    lines.append(f"{'configuration':<32} {'kind':<9} {'n':>4}  {'hit@1':<18} {'hit@5':<18} {'MRR@10':<18} "
                 f"{'median':>8} {'p95':>8}")
    for config in summary["configurations"]:
        if not config["ran"]:
            lines.append(f"{config['name']:<32} skipped: {config['skipped']}")
            continue
        for kind, f in config.get("kinds", {}).items():
            lat = f["latency_ms"]
            lines.append(f"{config['name']:<32} {kind:<9} {f['queries']:>4}  {cell(f['hit@1']):<18} "
                         f"{cell(f['hit@5']):<18} {cell(f['mrr@10']):<18} {lat['median']:>6.0f}ms {lat['p95']:>6.0f}ms")
    lines.append("")
    lines.append("[low-high]: 95% bootstrap interval (1,000 resamples of the queries); latency: one search, models loaded")
    cmp = summary.get("rerank_vs_hybrid")
    if cmp:
        d = cmp["difference"]
        said = {"helps": "raises it beyond the interval: rerank = \"auto\" runs it",
                "hurts": "lowers it beyond the interval: rerank = \"auto\" turns it off",
                "unclear": "does not raise it beyond the interval: rerank = \"auto\" turns it off"}[cmp["verdict"]]
        lines.append(f"reranker against hybrid: MRR@10 {cmp['hybrid']:.3f} -> {cmp['reranked']:.3f}, difference "
                     f"{d['value']:+.3f} [{d['low']:+.3f} to {d['high']:+.3f}] (paired bootstrap): the reranker {said}")
    lines.append("stored in the index (figures only; no query or answer): `puremind doctor` shows it")
    return lines


@app.command()
@_guarded
def demo() -> None:
    """Index a small sample vault into a temporary home and run a few searches."""
    from puremind.demo import run_demo

    for line in run_demo(notice=_notice):
        typer.echo(line)


@app.command()
@_guarded
def doctor(
    speed: bool = typer.Option(False, "--speed", help="Also load the configured models and time them on this machine (slower)."),
    as_json: bool = typer.Option(False, "--json", help="Print the checks as JSON."),
) -> None:
    """Check that pureMind works here: config, vault, index, models, privacy, agents, watch. Exit 2 when a check fails."""
    from puremind.doctor import run_doctor

    report = run_doctor(speed=speed)
    if as_json:
        typer.echo(json.dumps(report.to_json(), ensure_ascii=False, indent=2))
    else:
        for line in render_doctor_lines(report):
            typer.echo(line)
    if report.failed:
        raise typer.Exit(EXIT_ERROR)


def render_doctor_lines(report) -> list[str]:
    """The terminal's lines for a doctor report: a heading per section, then `status  message` and `hint:` lines."""
    from puremind.doctor import SECTIONS

    lines: list[str] = []
    section = None
    for check in report.checks:
        if check.section != section:
            section = check.section
            lines += ([""] if lines else []) + [SECTIONS.get(section, section)]
        lines.append(f"  {check.status:<4}  {' '.join(check.message.split())}")
        if check.hint:
            lines.append(f"        hint: {' '.join(check.hint.split())}")
    counts = report.counts()
    lines += ["", f"{counts['ok']} ok, {counts['warn']} warnings, {counts['fail']} failed"]
    return lines


#: the progress display of the running `index` or `watch`, cleared before a notice is printed
_display = None


def _notice(message: str) -> None:
    """A line for the person at the terminal, on stderr so that stdout stays parseable."""
    if _display is not None:
        _display.close()
    typer.echo(message, err=True)


inbox_app = typer.Typer(
    help="Notes agents proposed: list them, then show, edit, approve or reject each (nothing is in the vault until approved).",
    cls=_Commands,
    add_completion=False,
    rich_markup_mode=None,
)
app.add_typer(inbox_app, name="inbox")


def _inbox():
    from puremind.inbox import Inbox

    settings = _settings()
    return settings, Inbox(settings.home)


def _line(text: str, limit: int) -> str:
    """Agent text on one terminal line: control characters (escape sequences included) become spaces; cut."""
    import unicodedata

    text = " ".join("".join(" " if unicodedata.category(c)[0] == "C" else c for c in text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _visible(text: str) -> str:
    """Agent text for the terminal, line for line: a control character other than a line break or a tab is
    shown as its escape (\\x1b), so a proposal cannot drive the terminal."""
    import unicodedata

    return "".join(c if c in "\n\t" or unicodedata.category(c)[0] != "C" else
                   (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}") for c in text)


def _age(proposed: str) -> str:
    from datetime import datetime, timezone

    try:
        then = datetime.fromisoformat(proposed.replace("Z", "+00:00"))
    except ValueError:
        return "?"
    seconds = max(0, int((datetime.now(timezone.utc) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _ids(inbox, ids: list[str], every: bool, verb: str) -> list[str]:
    from puremind.inbox import InboxError

    if every and ids:
        raise InboxError(f"give proposal ids or --all to {verb}, not both")
    if every:
        return [p.id for p in inbox.pending()]
    if not ids:
        raise InboxError(f"name the proposals to {verb} (their ids) or pass --all", hint="`puremind inbox` lists them")
    return ids


@inbox_app.callback(invoke_without_command=True)
@_guarded
def inbox(ctx: typer.Context) -> None:
    """Notes agents proposed: list them, then show, edit, approve or reject each (nothing is in the vault until approved)."""
    if ctx.invoked_subcommand is not None:
        return
    _, box = _inbox()
    box.tidy()  # what killed approves left, unless an approve runs now
    pending = box.pending()
    if not pending:
        typer.echo("the inbox is empty")
        return
    for p in pending:
        typer.echo(f"{p.id}  {_age(p.proposed):>4}  {_line(p.client or 'unknown', 30)}  {_line(p.title, 80)}")
        typer.echo(f"    {_line(p.first_line, 100)}")
    typer.echo(f"{len(pending)} pending; `puremind inbox show ID`, then `approve ID` or `reject ID`")


def _in_vault(path: Path, vault: Path | None) -> str:
    """A note's path as the person knows it: vault-relative where it is in the vault."""
    if vault is not None:
        try:
            return str(path.relative_to(vault))
        except ValueError:
            pass
    return str(path)


@inbox_app.command("show")
@_guarded
def inbox_show(pid: str = typer.Argument(..., metavar="ID", help="The proposal's id (from `puremind inbox`).")) -> None:
    """Print one proposal as the note approve would write: pureMind's frontmatter, then the proposed text (control characters shown escaped)."""
    from puremind.redact import credential_kinds

    settings, box = _inbox()
    p = box.get(pid)
    preview = box.preview(p.id, settings.vault, folder=p.folder_for(settings.inbox_folder))
    typer.echo(f"proposal {p.id}, from {_line(p.client or 'unknown', 100)}")
    if p.scope:
        typer.echo(f"scope: {_line(', '.join(p.scope), 2000)} (the agent's `serve --scope`: approve writes only there)")
    if p.reason:
        typer.echo(f"reason: {_line(p.reason, 2000)}")
    kinds = credential_kinds(p.title + "\n" + p.text)
    if kinds:
        typer.echo(f"warning: the proposal holds credential-shaped text ({', '.join(dict.fromkeys(kinds))}): read it "
                   "before approving; the note would keep it as written")
    if preview.earlier and preview.path is not None:
        typer.echo(f"already written to {_line(_in_vault(preview.path, settings.vault), 2000)} by an approve that was "
                   f"interrupted; `puremind inbox approve {p.id}` finishes it")
    elif preview.path is not None:
        typer.echo(f"approve writes: {_line(_in_vault(preview.path, settings.vault), 2000)} "
                   "(--to FOLDER and --name NAME choose another)")
    else:
        typer.echo(f"approve cannot write it as configured: {_line(preview.problem, 2000)}")
    typer.echo("-" * 40)
    typer.echo(_visible(preview.text), nl=not preview.text.endswith("\n"))


@inbox_app.command("approve")
@_guarded
def inbox_approve(
    ids: Optional[list[str]] = typer.Argument(None, metavar="ID...", help="The proposals to approve."),
    every: bool = typer.Option(False, "--all", help="Approve every pending proposal."),
    to: Optional[str] = typer.Option(None, "--to", metavar="FOLDER", help="The vault folder to write into (default [inbox] folder)."),
    name: Optional[str] = typer.Option(None, "--name", metavar="NAME", help="The note's file name (default: from its title; made safe the same way)."),
) -> None:
    """Write proposals into the vault as new notes (never over an existing file), then drop them from the inbox."""
    from puremind.inbox import InboxError

    settings, box = _inbox()
    chosen = _ids(box, ids or [], every, "approve")
    if name is not None and len(chosen) > 1:
        raise InboxError("--name names one note: approve one proposal with it")
    vault = settings.require_vault()
    for pid in chosen:
        folder = to if to is not None else box.get(pid).folder_for(settings.inbox_folder)
        done = box.approve_note(pid, vault, folder=folder, name=name)
        where = _in_vault(done.path, vault)
        if done.earlier:
            typer.echo(f"approved {pid}: {where} (already written by an approve that was interrupted; "
                       "that note is kept and no other is written)")
        else:
            typer.echo(f"approved {pid}: {where}")
    typer.echo("next: `puremind index` (a running `puremind watch` indexes it at once)")


@inbox_app.command("reject")
@_guarded
def inbox_reject(
    ids: Optional[list[str]] = typer.Argument(None, metavar="ID...", help="The proposals to reject."),
    every: bool = typer.Option(False, "--all", help="Reject every pending proposal."),
) -> None:
    """Drop proposals from the inbox; the vault is not touched."""
    settings, box = _inbox()
    for pid in _ids(box, ids or [], every, "reject"):
        done = box.reject_note(pid)
        typer.echo(f"rejected {pid}")
        if done.note is not None:
            _notice(f"warning: an approve of {pid} that was interrupted had already written "
                    f"{_in_vault(done.note, settings.vault)}; that note is kept: delete it if you do not want it")


@inbox_app.command("edit")
@_guarded
def inbox_edit(pid: str = typer.Argument(..., metavar="ID", help="The proposal's id.")) -> None:
    """Open a proposal's text in $EDITOR (else vi); what you save is what approve will write."""
    import shlex
    import subprocess
    import tempfile

    from puremind.inbox import InboxError

    _, box = _inbox()
    p = box.get(pid)
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.TemporaryDirectory(prefix="puremind-edit-") as tmp:
        path = Path(tmp) / f"{p.id}.md"
        with open(path, "w", encoding="utf-8", newline="") as fh:  # line endings as they are, both ways
            fh.write(p.text)
        if subprocess.run([*shlex.split(editor), str(path)]).returncode != 0:
            raise InboxError(f"the editor ({editor}) failed; the proposal is unchanged")
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    if text == p.text:
        typer.echo(f"{p.id}: unchanged")
        return
    box.replace_text(p.id, text)
    typer.echo(f"{p.id}: text updated; `puremind inbox approve {p.id}` writes it")


#: The command line of this run (`run`'s argv), for `_in_own_session`.
_argv: list[str] = []


def _in_own_session() -> None:
    """`index` and `watch`: where niceness alone would not yield the CPU (Linux autogroup scheduling), run this
    command line again as the leader of a session of its own, and end with its exit code (or go on here, when
    this interpreter cannot be started again)."""
    from puremind import services

    if services.needs_own_session():
        code = services.run_in_own_session([sys.executable, "-m", "puremind", *_argv])
        if code is not None:
            raise typer.Exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app and turn every outcome into the spec's exit codes."""
    sys.exit(run(argv))


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return the exit code (0 ok, 1 nothing found, 2 error, 130 Ctrl-C)."""
    global _argv
    command = typer.main.get_command(app)
    _argv = list(sys.argv[1:] if argv is None else argv)
    try:
        result = command.main(args=argv, prog_name="puremind", standalone_mode=False)
        if result == EXIT_INTERRUPTED:  # Typer's own mapping of a Ctrl-C outside our commands
            _error("interrupted", None)
        return result if isinstance(result, int) else EXIT_OK
    except NothingFound:
        return EXIT_NOTHING_FOUND
    except PuremindError as exc:
        _error(exc.message, exc.hint)
        return exc.exit_code
    except (_Interrupted, typer.Abort, KeyboardInterrupt):
        if sys.stderr.isatty():
            sys.stderr.write("\n")  # end a progress bar line
        _error("interrupted", None)
        return EXIT_INTERRUPTED
    except _PipeClosed:
        # The reader went away (`| head`): not an error, and not "nothing found" either.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
    except typer.Exit as exc:
        return exc.exit_code
    except typer.TyperException as exc:
        # Usage errors (bad option, missing argument, value out of range) from Typer's parser.
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
            typer.echo(ctx.get_help(), err=True)
            return EXIT_ERROR
        hint = f"see `{ctx.command_path} --help`" if ctx is not None else None
        if type(exc).__name__ == "NoSuchOption" and ctx is not None and ctx.info_name == "search":
            hint = (
                "to search for text that starts with '-', put `--` before the query, after any option: "
                "puremind search --limit 5 -- '-text'"
            )
        _error(exc.format_message(), hint)
        return EXIT_ERROR
    except OSError as exc:
        # A file system problem no layer below turned into a PuremindError: still one line, exit 2.
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        _error(f"{exc.strerror or exc}{where}", None)
        return EXIT_ERROR
    except Exception as exc:
        # A bug, not a user error: still one line and exit 2 (an uncaught exception would print a traceback and
        # exit 1, which reads as "nothing found").
        _error(f"unexpected {type(exc).__name__}: {_one_line(exc)}", _bug_hint(argv))
        return EXIT_ERROR


def _one_line(exc: BaseException) -> str:
    from puremind.messages import one_line

    return one_line(exc, 300) or "(no message)"


def _bug_hint(argv: list[str] | None) -> str:
    """Ask for a report naming the command (only its name: the rest may be a private query or path)."""
    args = sys.argv[1:] if argv is None else argv
    command = next((a for a in args if not a.startswith("-")), None)
    ran = f"`puremind {command}`" if command else "the command you ran"
    return f"this is a bug in pureMind: please report it, with {ran} and this error line"


def _error(message: str, hint: str | None) -> None:
    line = " ".join(str(message).split())
    sys.stderr.write(f"error: {line}\n")
    if hint:
        sys.stderr.write(f"hint: {' '.join(str(hint).split())}\n")
    sys.stderr.flush()
