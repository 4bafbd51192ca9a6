"""`puremind doctor`: is pureMind working here, and how fast will it be?

Each check returns data (`Check`: section, name, status ok/warn/fail, message, hint, figures); the CLI renders it.
Nothing here writes a file, takes over a lock or loads a model (no onnxruntime session, no torch) unless `speed`
is asked for: files are read, the index is opened read-only (`mode=ro`), agent configs are only parsed. Every
section is guarded: whatever it meets (a broken config.toml, random bytes for an index, an unreadable folder), it
ends as a `fail` or `warn` line, never as an exception.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from puremind.config import (DEFAULT_EMBEDDER, DEFAULT_EMBEDDER_REVISION, DEFAULT_RERANKER,
                             DEFAULT_RERANKER_REVISION, Settings, expand, home_dir, load_settings)
from puremind.errors import PuremindError

OK, WARN, FAIL = "ok", "warn", "fail"
#: the sections in report order, with the heading the terminal shows
SECTIONS = {"config": "config and vault", "index": "index", "models": "models", "privacy": "privacy",
            "agents": "agents", "watch": "watch", "speed": "speed on this machine"}
#: seconds the vault walk may take before the count is given up (the rest of the checks must fit in 10 s)
WALK_SECONDS = 3.0
#: seconds `PRAGMA quick_check` may take before it is interrupted
QUICK_CHECK_SECONDS = 3.0
#: HF endpoints that are the Hugging Face hub itself
HUB_ENDPOINTS = ("https://huggingface.co", "https://huggingface.co/")
_TRUE = ("1", "ON", "YES", "TRUE")


@dataclass(frozen=True)
class Check:
    """One line of the report: its section, a short name, ok/warn/fail, what was found, what to do, figures."""

    section: str
    name: str
    status: str
    message: str
    hint: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    """Every check, in section order."""

    checks: list[Check]

    @property
    def failed(self) -> bool:
        return any(c.status == FAIL for c in self.checks)

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in (OK, WARN, FAIL)}

    def to_json(self) -> dict[str, Any]:
        return {"ok": not self.failed, "counts": self.counts(), "checks": [asdict(c) for c in self.checks]}


def run_doctor(*, cwd: Path | None = None, speed: bool = False) -> Report:
    """Run every check (and, with `speed`, load the configured models and time them) and return the report.

    Never raises for what it finds: a problem is a `fail` or `warn` check.
    """
    cwd = Path.cwd() if cwd is None else cwd
    checks: list[Check] = []
    settings, config_checks = _config_checks()
    checks += config_checks
    index: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], list[Check]]]] = [
        ("config", lambda: _vault_checks(settings, index)),
        ("index", lambda: _index_checks(settings, index)),
        ("models", lambda: _model_checks(settings)),
        ("privacy", _privacy_checks),
        ("agents", lambda: _agent_checks(cwd) + _reading_checks(settings, index)),
        ("watch", lambda: _watch_checks(settings)),
    ]
    if speed:
        steps.append(("speed", lambda: _speed_checks(settings, index)))
    for section, step in steps:
        checks += _guarded(section, step)
    return Report(checks)


def _guarded(section: str, step: Callable[[], list[Check]]) -> list[Check]:
    """A section's checks; anything it did not expect becomes one `fail` line instead of a traceback."""
    try:
        return step()
    except PuremindError as exc:
        return [Check(section, "error", FAIL, exc.message, exc.hint)]
    except Exception as exc:  # noqa: BLE001 - the doctor must report, not crash
        from puremind.messages import one_line

        return [Check(section, "error", FAIL, f"could not check: {type(exc).__name__}: {one_line(exc, 300)}",
                      "this is a bug in pureMind's doctor: please report this line")]


# -- 1. config and vault ------------------------------------------------------------------------------------------


def _config_checks() -> tuple[Settings | None, list[Check]]:
    """The config file read as every command reads it; on failure, the settings of the environment and defaults
    (so that the other sections can still look)."""
    try:
        home = home_dir()
    except PuremindError as exc:
        return None, [Check("config", "config file", FAIL, exc.message, exc.hint)]
    path = home / "config.toml"
    try:
        settings = load_settings()
    except PuremindError as exc:
        fallback = _fallback_settings(home)
        note = "; the other checks use the defaults and PUREMIND_* variables" if fallback is not None else ""
        return fallback, [Check("config", "config file", FAIL, exc.message + note, exc.hint, {"path": str(path)})]
    if path.is_file():
        return settings, [Check("config", "config file", OK, f"{path} read", figures={"path": str(path)})]
    return settings, [Check("config", "config file", WARN,
                            f"no config file at {path}: defaults and PUREMIND_* variables apply",
                            "run `puremind init <vault_dir>` to write one", {"path": str(path)})]


def _fallback_settings(home: Path) -> Settings | None:
    """Settings without the config file: the vault, index and embedder from the environment, the rest defaults."""
    env = os.environ
    try:
        vault = expand(env["PUREMIND_VAULT"]) if env.get("PUREMIND_VAULT", "").strip() else None
        db = expand(env["PUREMIND_DB"]) if env.get("PUREMIND_DB", "").strip() else home / "index.sqlite"
    except (OSError, ValueError):
        return None
    embedder = env.get("PUREMIND_EMBED_MODEL", "").strip() or DEFAULT_EMBEDDER
    reranker = env.get("PUREMIND_RERANK_MODEL", "").strip() or DEFAULT_RERANKER
    return Settings(home=home, config_path=home / "config.toml", vault=vault, db=db, embedder=embedder,
                    embedder_revision=DEFAULT_EMBEDDER_REVISION if embedder == DEFAULT_EMBEDDER else None,
                    reranker=reranker,
                    reranker_revision=DEFAULT_RERANKER_REVISION if reranker == DEFAULT_RERANKER else None)


def _vault_checks(settings: Settings | None, index: dict[str, Any]) -> list[Check]:
    if settings is None:
        return [Check("config", "vault", FAIL, "not checked: the settings cannot be read")]
    vault = settings.vault
    if vault is None:
        return [Check("config", "vault", FAIL, "no vault directory is set",
                      "run `puremind init <vault_dir>` (or set PUREMIND_VAULT)")]
    if not vault.exists():
        return [Check("config", "vault", FAIL, f"the vault {vault} does not exist",
                      "run `puremind init <vault_dir>` with the right folder", {"path": str(vault)})]
    if not vault.is_dir():
        return [Check("config", "vault", FAIL, f"the vault {vault} is not a folder",
                      "run `puremind init <vault_dir>` with the right folder", {"path": str(vault)})]
    done, result, error = _timed(lambda: _walk(vault), WALK_SECONDS)
    if not done:
        return [Check("config", "vault", WARN, f"{vault}: still counting notes after {WALK_SECONDS:g} s, count left out",
                      "a vault this slow to list (a network drive?) makes every index run slow",
                      {"path": str(vault)})]
    if error is not None:
        if isinstance(error, PuremindError):
            return [Check("config", "vault", FAIL, error.message, error.hint, {"path": str(vault)})]
        raise error
    notes, skipped, unlisted = result
    index["vault_notes"] = notes
    figures = {"path": str(vault), "notes": notes, "skipped": skipped, "unlisted_folders": unlisted}
    if notes == 0:
        return [Check("config", "vault", WARN, f"{vault} holds no notes (.md, .markdown)",
                      "check that this is the folder of your notes", figures)]
    extra = f", {sum(skipped.values())} files skipped" if skipped else ""
    checks = [Check("config", "vault", OK, f"{vault}: {notes} notes{extra}", figures=figures)]
    if unlisted:
        checks.append(Check("config", "vault folders", WARN, f"{len(unlisted)} folders of the vault cannot be listed",
                            "check their permissions; notes in them are not indexed", {"folders": unlisted[:20]}))
    return checks


def _walk(vault: Path) -> tuple[int, dict[str, int], list[str]]:
    from puremind.vault import walk_vault

    found = walk_vault(vault)
    return len(found.notes), dict(found.skipped), list(found.unlisted)


def _timed(fn: Callable[[], Any], seconds: float) -> tuple[bool, Any, BaseException | None]:
    """(finished, result, error) of `fn` run in a daemon thread for at most `seconds` (it is left to finish)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name="puremind-doctor", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        return False, None, None
    return True, box.get("result"), box.get("error")


# -- 2. index -----------------------------------------------------------------------------------------------------



def _open_ro(db: Path) -> sqlite3.Connection:
    """A read-only connection (SQLite's mode=ro): the doctor never writes, checkpoints or upgrades the index."""
    import urllib.parse

    conn = sqlite3.connect(f"file:{urllib.parse.quote(str(db))}?mode=ro", uri=True, timeout=1.0,
                           isolation_level=None)
    conn.execute("PRAGMA query_only = ON")
    return conn


def _index_checks(settings: Settings | None, index: dict[str, Any]) -> list[Check]:
    from puremind.store.errors import from_sqlite

    if settings is None:
        return [Check("index", "index file", FAIL, "not checked: the settings cannot be read")]
    db = settings.db
    if not db.exists():
        return [Check("index", "index file", FAIL, f"no index at {db}", "run `puremind index` to build it",
                      {"path": str(db)})]
    if not db.is_file():
        return [Check("index", "index file", FAIL, f"{db} is not a file", "set [db] (or PUREMIND_DB) to a file path",
                      {"path": str(db)})]
    size = db.stat().st_size
    checks = [Check("index", "index file", OK, f"{db} ({_size(size)})", figures={"path": str(db), "bytes": size})]
    try:
        conn = _open_ro(db)
    except sqlite3.Error as exc:
        err = from_sqlite(db, exc, "open")
        return checks + [Check("index", "integrity", FAIL, err.message, err.hint)]
    try:
        checks.append(_quick_check(conn, db))
        if checks[-1].status == FAIL:
            return checks
        checks += _index_content(conn, db, settings, index)
    except sqlite3.Error as exc:
        err = from_sqlite(db, exc, "read")
        checks.append(Check("index", "contents", FAIL, err.message, err.hint))
    finally:
        conn.close()
    return checks


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"  # pragma: no cover


def _quick_check(conn: sqlite3.Connection, db: Path) -> Check:
    """`PRAGMA quick_check`, interrupted after QUICK_CHECK_SECONDS (a huge index: a warning, not a verdict)."""
    from puremind.store.errors import REPAIR_HINT, from_sqlite

    deadline = time.monotonic() + QUICK_CHECK_SECONDS
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 10_000)
    try:
        rows = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.OperationalError as exc:
        if "interrupt" in str(exc).lower():
            return Check("index", "integrity", WARN, f"quick_check did not finish within {QUICK_CHECK_SECONDS:g} s",
                         "run `sqlite3 <index> 'PRAGMA quick_check'` to check it whole")
        err = from_sqlite(db, exc, "read")
        return Check("index", "integrity", FAIL, err.message, err.hint)
    except sqlite3.DatabaseError as exc:
        err = from_sqlite(db, exc, "read")
        return Check("index", "integrity", FAIL, err.message, err.hint)
    finally:
        conn.set_progress_handler(None, 0)
    if rows == ["ok"]:
        return Check("index", "integrity", OK, "PRAGMA quick_check: ok")
    return Check("index", "integrity", FAIL, f"the index is damaged: {'; '.join(map(str, rows[:3]))}", REPAIR_HINT,
                 {"problems": len(rows)})


def _index_content(conn: sqlite3.Connection, db: Path, settings: Settings, index: dict[str, Any]) -> list[Check]:
    from puremind.indexer import META_LAST_RUN, META_PRECISION, META_VAULT
    from puremind.store.errors import REBUILD_HINT
    from puremind.store.schema import LATEST_VERSION, current_version
    from puremind.store.store import META_FINGERPRINT

    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"meta", "files", "chunks"} <= tables:
        return [Check("index", "schema", FAIL, f"{db} is an SQLite database, but not a pureMind index", REBUILD_HINT)]
    checks: list[Check] = []
    version = current_version(conn)
    if version > LATEST_VERSION:
        checks.append(Check("index", "schema", FAIL,
                            f"written by a newer pureMind (schema {version}; this version knows up to {LATEST_VERSION})",
                            "upgrade pureMind, or delete the index file to rebuild it with this version"))
        return checks
    if version < LATEST_VERSION:
        checks.append(Check("index", "schema", OK, f"schema {version}: upgraded to {LATEST_VERSION} on the next run",
                            figures={"schema": version}))
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    files_n, chunks_n, vectors_n = conn.execute(
        "SELECT (SELECT count(*) FROM files), (SELECT count(*) FROM chunks),"
        " (SELECT count(*) FROM chunks WHERE vector IS NOT NULL)").fetchone()
    index.update(notes=files_n, chunks=chunks_n, vectors=vectors_n)
    columns = {r[1] for r in conn.execute("PRAGMA table_info(files)")}
    if "private" in columns:
        index["private"] = conn.execute("SELECT count(*) FROM files WHERE private").fetchone()[0]
    figures = {"notes": files_n, "chunks": chunks_n, "vectors": vectors_n}
    checks.append(Check("index", "contents", OK if files_n else WARN,
                        f"{files_n} notes, {chunks_n} chunks, {vectors_n} with a vector",
                        None if files_n else "run `puremind index` once the vault holds notes", figures))
    checks.append(_fingerprint_check(settings, meta.get(META_FINGERPRINT), meta.get(META_PRECISION),
                                     chunks_n, vectors_n))
    indexed_vault = meta.get(META_VAULT)
    if indexed_vault and settings.vault is not None and Path(indexed_vault) != settings.vault:
        checks.append(Check("index", "indexed vault", WARN,
                            f"the index holds the vault {indexed_vault}, the configured one is {settings.vault}",
                            "run `puremind index --rebuild` to switch the index to the configured vault"))
    last = meta.get(META_LAST_RUN)
    if last:
        try:
            at = float(last)
        except ValueError:
            at = None
        if at is not None:
            stamp = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(at))
            checks.append(Check("index", "last run", OK, f"last index run {stamp} ({_ago(time.time() - at)})",
                                figures={"last_run": at}))
    checks.append(_eval_check(settings, meta))
    return checks


def _eval_check(settings: Settings, meta: dict[str, str]) -> Check:
    """The vault's last `puremind eval` (figures only) and the rerank gate's state: one line."""
    from puremind.retrieval.gate import META_EVAL, read_summary, rerank_gate

    summary = read_summary(meta.get(META_EVAL))
    gate = None
    if not settings.semantic:
        state = 'no reranker (embedder = "none")'
    elif not settings.has_reranker:
        state = 'no reranker (reranker = "none")'
    elif settings.rerank == "auto":
        gate = rerank_gate(summary, settings.reranker)
        state = f'rerank = "auto": the reranker {"runs" if gate.run else "is off"} ({gate.reason})'
    else:
        state = f"rerank = {'true' if settings.rerank else 'false'}"
    if summary is None:
        return Check("index", "eval", OK, f"no eval on this vault yet; {state.split(' (', 1)[0]}",
                     "`puremind eval` measures keyword, hybrid and reranked search on your own notes")
    mrr = []
    for config in summary.get("configurations", []):
        value = ((config.get("kinds") or {}).get("all") or {}).get("mrr@10", {}).get("value")
        if value is not None:
            mrr.append(f"{config.get('name')} {value:.2f}")
    ran = (summary.get("queries") or {}).get("ran", 0)
    line = f"last eval {str(summary.get('date', ''))[:10]}: {ran} queries, MRR@10 {', '.join(mrr) or 'none'}; {state}"
    return Check("index", "eval", OK, line, figures={"eval": summary})


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} seconds ago"


def _fingerprint_check(settings: Settings, stored: str | None, precision: str | None, chunks: int,
                       vectors: int) -> Check:
    """The embedder that wrote the vectors against the configured one (loader.check_index_embedder)."""
    from puremind.errors import FingerprintMismatch
    from puremind.fingerprint import model_label
    from puremind.models.loader import check_index_embedder
    from puremind.services import model_choice

    figures = {"stored": stored, "precision": precision}
    if not settings.semantic:
        note = f"; the index's {vectors} vectors are not used" if vectors else ""
        return Check("index", "embedder", OK, f"keyword search only (embedder = \"none\"){note}", figures=figures)
    if stored is None or vectors == 0:
        if chunks == 0:
            return Check("index", "embedder", OK, "no vectors yet (the index holds no chunks)", figures=figures)
        return Check("index", "embedder", WARN, "the index holds no vectors: searches are keyword-only",
                     "run `puremind index` to embed the notes with the configured embedder", figures)
    try:
        check_index_embedder(model_choice(settings, "embedder"), stored, doing="searches are refused")
    except FingerprintMismatch as exc:
        return Check("index", "embedder", FAIL, exc.message, exc.hint, figures)
    label = model_label(stored)
    how = f" ({precision})" if precision else ""
    if vectors < chunks:
        return Check("index", "embedder", WARN, f"vectors of {label}{how}, but {chunks - vectors} of {chunks} chunks "
                     "have none (indexed while the embedder was unavailable)", "run `puremind index`", figures)
    return Check("index", "embedder", OK, f"vectors of {label}{how} match the configured embedder", figures=figures)


# -- 3. models ----------------------------------------------------------------------------------------------------


def _model_checks(settings: Settings | None) -> list[Check]:
    import importlib.util

    if settings is None:
        return [Check("models", "models", FAIL, "not checked: the settings cannot be read")]
    if not settings.semantic:
        return [Check("models", "models", OK, "keyword search only (embedder = \"none\"): no model is used")]
    checks: list[Check] = []
    if settings.backend == "onnx" and importlib.util.find_spec("onnxruntime") is None:
        checks.append(Check("models", "runtime", FAIL, "onnxruntime is not installed", "pip install onnxruntime"))
    checks += _role_checks(settings, "embedder")
    if settings.has_reranker:
        checks += _role_checks(settings, "reranker")
    else:
        checks.append(Check("models", "reranker", OK, 'reranker = "none": no reranker; searches end at the fusion'))
    checks += _provider_verdicts(settings)
    return checks


def _figures_text(figures: Any) -> str:
    if not isinstance(figures, Mapping):
        return ""
    parts = []
    for key, value in figures.items():
        if isinstance(value, float):
            parts.append(f"{key} {value:.4g}")
        elif isinstance(value, (int, str)):
            parts.append(f"{key} {value}")
    return ", ".join(parts)


def _role_checks(settings: Settings, role: str) -> list[Check]:
    from puremind.models import hub
    from puremind.models.artefacts import META_NAME, artefact_dir, list_variants, model_dir
    from puremind.models.fidelity import describe_shortfalls, kept_out
    from puremind.models.loader import resolve
    from puremind.models.manifest import load_manifest
    from puremind.services import model_choice

    choice = model_choice(settings, role)
    name = f"{role} {choice.name}"
    off = " (reranking is off: [retrieval] rerank = false)" if role == "reranker" and not settings.rerank else ""
    if choice.backend == "torch":
        return [Check("models", role, OK, f"{name}: torch backend, runs from the Hugging Face cache{off}")]
    if not hub.is_local_name(choice.name) and load_manifest().by_hub_id(choice.name) is None:
        return [Check("models", role, OK, f"{name}: not pinned in the models manifest; its exports are not looked "
                      f"up here (that could download it){off}")]
    try:
        resolved = resolve(choice)
    except PuremindError as exc:
        return [Check("models", role, FAIL, f"{name}: {exc.message}", exc.hint)]
    except OSError as exc:
        return [Check("models", role, FAIL, f"{name}: cannot read the model folder: {exc.strerror or exc}")]
    spec, revision = resolved.spec, resolved.revision
    try:
        folder = model_dir(settings.home, spec.key, revision)
        present = list_variants(settings.home, spec.key, revision)
    except PuremindError as exc:
        return [Check("models", role, FAIL, f"{name}: {exc.message}", exc.hint)]
    except OSError as exc:
        return [Check("models", role, FAIL, f"{name}: cannot read the models folder {folder}: {exc.strerror or exc}",
                      "check the folder's permissions (it must be readable by you)")]
    if not present:
        return [Check("models", role, WARN, f"{name}: not exported{off}",
                      "run `puremind export-models` (or `puremind index` with the [export] extra exports it)",
                      {"folder": str(folder)})]
    checks: list[Check] = []
    out: list[str] = []
    for variant in present:
        label = f"{spec.hub_id} {variant}"
        try:
            meta = json.loads((artefact_dir(settings.home, spec.key, revision, variant) / META_NAME)
                              .read_text(encoding="utf-8"))
            if not isinstance(meta, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            checks.append(Check("models", f"{role} {variant}", WARN, f"{label}: unreadable metadata ({exc})",
                                "run `puremind export-models --force` to export it again"))
            continue
        fid = meta.get("fidelity")
        if not isinstance(fid, Mapping):
            checks.append(Check("models", f"{role} {variant}", WARN, f"{label}: never compared with the source model",
                                "`puremind export-models` checks it (`--force` exports it again)"))
            continue
        figures = fid.get("figures") if isinstance(fid.get("figures"), Mapping) else {}
        status = fid.get("status")
        if kept_out(meta):
            out.append(variant)
            checks.append(Check("models", f"{role} {variant}", WARN,
                                f"{label}: kept out, below the source model ({describe_shortfalls(meta)})",
                                f"the next variant serves instead; `[models] variant = \"{variant}\"` forces it",
                                {"fidelity": status, **figures}))
        elif status == "ok":
            checks.append(Check("models", f"{role} {variant}", OK,
                                f"{label}: matches the source model ({_figures_text(figures)})",
                                figures={"fidelity": status, **figures}))
        elif status == "pending":
            checks.append(Check("models", f"{role} {variant}", OK,
                                f"{label}: checked on its first use on this machine ({fid.get('reason', 'pending')})",
                                figures={"fidelity": status}))
        else:
            checks.append(Check("models", f"{role} {variant}", WARN, f"{label}: unknown fidelity status {status!r}",
                                "run `puremind export-models --force` to check it again"))
    checks.insert(0, _serving(settings, choice, spec, present, out, name, off))
    return checks


def _serving(settings: Settings, choice: Any, spec: Any, present: list[str], out: list[str], name: str,
             off: str) -> Check:
    """Which variant runs on the CPU (the provider list itself needs onnxruntime, which the doctor does not load)."""
    from puremind.models.providers import choose_variant

    role = choice.role
    figures = {"exported": present, "kept_out": out}
    if choice.variant != "auto":
        if choice.variant not in present:
            return Check("models", role, WARN, f"{name}: [models] variant = \"{choice.variant}\" is not exported",
                         f"run `puremind export-models --variant {choice.variant}`", figures)
        return Check("models", role, OK, f"{name}: exported {', '.join(present)}; {choice.variant} forced by "
                     f"[models] variant{off}", figures=figures)
    onnx = [v for v in present if v != "coreml"]
    try:
        serving = choose_variant(["CPUExecutionProvider"], onnx, spec.default_variant, kept_out=out)
    except PuremindError as exc:
        return Check("models", role, FAIL if onnx else WARN, f"{name}: {exc.message}", exc.hint, figures)
    figures["cpu_variant"] = serving
    return Check("models", role, OK, f"{name}: exported {', '.join(present)}; {serving} runs on the CPU{off}",
                 figures=figures)


def _provider_verdicts(settings: Settings) -> list[Check]:
    """The verdicts of provider_check cached on this machine for the configured models."""
    import hashlib

    from puremind.models.provider_check import CACHE_NAME, machine_id, read_cache

    here = hashlib.sha256(machine_id().encode()).hexdigest()[:12]
    wanted = {settings.embedder.casefold(), settings.reranker.casefold()}
    checks: list[Check] = []
    for key, verdict in sorted(read_cache(settings.home).items()):
        if not isinstance(verdict, dict) or not isinstance(key, str) or key.rsplit("|", 1)[-1] != here:
            continue
        model = str(verdict.get("model") or "?")
        if model.casefold() not in wanted:
            continue
        provider = str(verdict.get("provider") or "?")
        what = f"{model} {verdict.get('variant') or '?'} on {provider}"
        figures = verdict.get("figures") if isinstance(verdict.get("figures"), Mapping) else {}
        if verdict.get("ok"):
            checks.append(Check("models", "provider", OK, f"{what}: computes as the source model ({_figures_text(figures)})",
                                figures={"provider": provider, **figures}))
        else:
            shortfalls = "; ".join(map(str, verdict.get("shortfalls") or [])) or "below the thresholds"
            checks.append(Check("models", "provider", WARN, f"{what}: computes differently from the source model "
                                f"({shortfalls}); it runs on the CPU instead",
                                f"set [models] device = \"cpu\" to skip {provider}; delete "
                                f"{settings.home / 'models' / CACHE_NAME} to check it again",
                                {"provider": provider, **figures}))
    return checks


# -- 4. privacy ---------------------------------------------------------------------------------------------------


def _privacy_checks() -> list[Check]:
    """The telemetry switches as pureMind leaves them in its processes, and the Hugging Face variables set."""
    import puremind  # noqa: F401 - sets ORT_DISABLE_TELEMETRY on import
    from puremind.models.hub import ensure_telemetry_off

    ensure_telemetry_off()
    checks: list[Check] = []
    for var, what in (("ORT_DISABLE_TELEMETRY", "onnxruntime telemetry"),
                      ("HF_HUB_DISABLE_TELEMETRY", "Hugging Face telemetry")):
        value = os.environ.get(var, "")
        if value.strip().upper() in _TRUE:
            checks.append(Check("privacy", var, OK, f"{what} off ({var}={value})"))
        else:
            checks.append(Check("privacy", var, WARN, f"{what} on: {var}={value!r} is set in your environment",
                                f"unset {var}: pureMind then sets it to 1"))
    hf = {k: v for k, v in sorted(os.environ.items()) if k.startswith(("HF_", "HUGGING_FACE_", "HUGGINGFACE_"))
          or k == "TRANSFORMERS_OFFLINE"}
    hf.pop("HF_HUB_DISABLE_TELEMETRY", None)
    shown = {k: ("(set)" if "TOKEN" in k.upper() else v) for k, v in hf.items()}
    for key, value in shown.items():
        if key == "HF_ENDPOINT" and value.rstrip("/") not in (e.rstrip("/") for e in HUB_ENDPOINTS):
            checks.append(Check("privacy", key, WARN, f"HF_ENDPOINT={value}: model downloads go there, not to "
                                "huggingface.co", "unset HF_ENDPOINT unless you mean to use that mirror"))
        elif "TOKEN" in key.upper():
            checks.append(Check("privacy", key, OK, f"{key} is set: sent to the hub only when a model is downloaded"))
        else:
            checks.append(Check("privacy", key, OK, f"{key}={value}"))
    if not shown:
        checks.append(Check("privacy", "HF variables", OK, "no Hugging Face variables set"))
    return checks


# -- 5. agents ----------------------------------------------------------------------------------------------------


def _mentions_puremind(server: Any) -> bool:
    if not isinstance(server, Mapping):
        return False
    args = server.get("args")
    words = [server.get("command"), *(args if isinstance(args, list) else [])]
    return any(isinstance(w, str) and "puremind" in w.lower() for w in words)


def _servers(table: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(table, Mapping):
        yield from ((str(k), v) for k, v in table.items())


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _read_toml(path: Path) -> Any:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _agent_checks(cwd: Path) -> list[Check]:
    home = Path.home()
    codex_home = os.environ.get("CODEX_HOME", "").strip()
    codex_dir = expand(codex_home) if codex_home else home / ".codex"
    cwd_key = str(cwd)
    agents: list[tuple[str, str, list[tuple[Path, Callable[[Path], Any], Callable[[Any], Iterator[tuple[str, Any]]]]]]] = [
        ("claude-code", "Claude Code", [(home / ".claude.json", _read_json, lambda d: _claude_servers(d, cwd_key)),
                                        (cwd / ".mcp.json", _read_json, _mcp_servers)]),
        ("codex", "Codex", [(codex_dir / "config.toml", _read_toml, lambda d: _mcp_servers(d, "mcp_servers"))]),
        ("cursor", "Cursor", [(home / ".cursor" / "mcp.json", _read_json, _mcp_servers),
                              (cwd / ".cursor" / "mcp.json", _read_json, _mcp_servers)]),
    ]
    checks: list[Check] = []
    for key, label, sources in agents:
        found: list[str] = []
        missing_command: list[str] = []
        problems: list[str] = []
        for path, read, servers in sources:
            try:
                data = read(path)
            except FileNotFoundError:
                continue
            except (OSError, ValueError, UnicodeDecodeError) as exc:
                from puremind.messages import one_line

                problems.append(f"cannot read {path}: {one_line(exc, 200)}")
                continue
            for name, server in servers(data):
                if _mentions_puremind(server):
                    scope = _scope_of(server)
                    found.append(f"{name} in {path}, reads " + (", ".join(scope) if scope else "the whole vault"))
                    command = server.get("command")
                    if isinstance(command, str) and os.path.isabs(command) and not os.path.exists(command):
                        missing_command.append(command)
        hint = f"run `puremind connect {key}` and follow what it prints"
        if problems:
            checks.append(Check("agents", key, WARN, f"{label}: {'; '.join(problems)}",
                                "fix or remove that file; pureMind only reads it"))
        if found and missing_command:
            checks.append(Check("agents", key, WARN, f"{label}: registered ({', '.join(found)}), but its command "
                                f"{missing_command[0]} does not exist", hint, {"registered": found}))
        elif found:
            checks.append(Check("agents", key, OK, f"{label}: registered ({', '.join(found)})",
                                figures={"registered": found}))
        elif not problems:
            checks.append(Check("agents", key, WARN, f"{label}: pureMind is not registered", hint))
    return checks


def _scope_of(server: Mapping[str, Any]) -> list[str]:
    """The folders of the `--scope FOLDER` (or `--scope=FOLDER`) arguments of a registered server's command."""
    args = server.get("args")
    words = [w for w in (args if isinstance(args, list) else []) if isinstance(w, str)]
    scope = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--scope"]
    return scope + [w.partition("=")[2] for w in words if w.startswith("--scope=")]


def _reading_checks(settings: Settings | None, index: dict[str, Any]) -> list[Check]:
    """What agents may read: private notes in the index, the scope of `[agents] scope`, whether credentials are
    redacted in what they receive."""
    if settings is None:
        return []
    from puremind.services import agent_scope

    checks = []
    private = index.get("private")
    if private is not None:
        folders = f"; private folders: {', '.join(settings.private_folders)}" if settings.private_folders else ""
        checks.append(Check("agents", "private notes", OK,
                            f"{private} of {index.get('notes', 0)} notes are private: no agent receives them{folders}",
                            figures={"private": private}))
    if settings.scope:
        try:
            agent_scope(settings)
            checks.append(Check("agents", "scope", OK, f"[agents] scope: agents read only {', '.join(settings.scope)} "
                                "(a server's --scope replaces it)", figures={"scope": list(settings.scope)}))
        except PuremindError as exc:
            checks.append(Check("agents", "scope", FAIL, exc.message, exc.hint))
    if settings.redact:
        checks.append(Check("agents", "redaction", OK, "credentials in what agents receive are replaced by "
                            "[redacted: <kind>]", figures={"redact": True}))
    else:
        checks.append(Check("agents", "redaction", WARN, "redaction is off ([agents] redact = false): agents receive "
                            "tokens and passwords written in notes as they are",
                            "remove `redact = false` from [agents] in config.toml", {"redact": False}))
    return checks


def _mcp_servers(data: Any, key: str = "mcpServers") -> Iterator[tuple[str, Any]]:
    """The servers of an `{"mcpServers": {name: {...}}}` file (Cursor, a project's .mcp.json) or of Codex's table."""
    if isinstance(data, Mapping):
        yield from _servers(data.get(key))


def _claude_servers(data: Any, project: str) -> Iterator[tuple[str, Any]]:
    """Claude Code's ~/.claude.json: user-scope servers, then the local-scope ones of this project folder."""
    yield from _mcp_servers(data)
    projects = data.get("projects") if isinstance(data, Mapping) else None
    if isinstance(projects, Mapping):
        yield from _mcp_servers(projects.get(project))


# -- 6. watch -----------------------------------------------------------------------------------------------------


def _watch_checks(settings: Settings | None) -> list[Check]:
    """Whether an index run holds the index lock now, and (Linux) which `puremind watch` processes serve this index.

    A watch takes the index lock only while it indexes, so the lock alone cannot tell an idle watch; the process
    list can, where /proc shows the other processes' command lines and environments (one's own user's).
    """
    if settings is None:
        return [Check("watch", "watch", FAIL, "not checked: the settings cannot be read")]
    checks: list[Check] = []
    busy = _lock_held(settings.db)
    if busy:
        checks.append(Check("watch", "index lock", OK, "an index run (`puremind index` or a watch) is writing the "
                            "index now"))
    proc = Path("/proc")
    if not proc.is_dir():
        checks.append(Check("watch", "watch", OK, "cannot tell whether a `puremind watch` is running on this system "
                            "(a watch holds the index lock only while it indexes)"))
        return checks
    pids = [pid for pid in _watch_pids(proc) if _serves(proc / str(pid), settings)]
    if pids:
        checks.append(Check("watch", "watch", OK, f"`puremind watch` is running for this index (pid "
                            f"{', '.join(map(str, pids))})", figures={"pids": pids}))
    else:
        checks.append(Check("watch", "watch", OK, "no `puremind watch` is running for this index: it changes only "
                            "when `puremind index` runs", "run `puremind watch` to index notes as you write them"))
    return checks


def _lock_held(db: Path) -> bool:
    """Whether another process holds the index lock (indexer.IndexLock): a non-blocking shared lock on a separate
    descriptor, released at once; the lock file is never created here."""
    from puremind.retrieval.pipeline import index_run_going

    return index_run_going(db)


def _watch_pids(proc: Path) -> list[int]:
    """Processes of this system whose command line is `... puremind ... watch ...` (not this one)."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode("utf-8", "replace") for a in argv if a]
        at = next((i for i, w in enumerate(words) if os.path.basename(w) == "puremind" or w == "puremind"), None)
        if at is not None and "watch" in words[at + 1:]:
            found.append(int(entry.name))
    return sorted(found)


def _serves(proc_dir: Path, settings: Settings) -> bool:
    """Whether the watch in `proc_dir` uses this index: its PUREMIND_DB, else its home's index (its
    config.toml may name another db: then it is judged by its home). Unreadable environment: assumed to."""
    try:
        raw = (proc_dir / "environ").read_bytes()
        cwd = os.readlink(proc_dir / "cwd")
    except OSError:
        return True
    env = dict(item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item)

    def absolute(text: str) -> Path:
        return Path(os.path.normpath(os.path.join(cwd, os.path.expanduser(text))))

    if env.get("PUREMIND_DB", "").strip():
        return absolute(env["PUREMIND_DB"].strip()) == settings.db
    home = env.get("PUREMIND_HOME", "").strip()
    their_home = absolute(home) if home else Path(env.get("HOME", str(Path.home()))) / ".puremind"
    return their_home == settings.home or (their_home / "index.sqlite") == settings.db


# -- speed (only with --speed: the one place the doctor loads models) ---------------------------------------------

_WORDS = ("the index keeps each note as chunks with a heading path and a line span so that an agent can cite "
          "where it read a fact; searches fuse keyword and vector lists then rerank the best candidates within a "
          "budget of seconds measured on this machine while notes change the watcher runs again after a quiet "
          "spell deploy grinder espresso database migration release checklist").split()
SPEED_PASSAGES = 32
SPEED_PAIRS = 16


def speed_passages(n: int, words: int = 200) -> list[str]:
    """`n` different passages of about `words` words (deterministic)."""
    size = len(_WORDS)
    return [" ".join(_WORDS[(i * 7 + j * (i + 3)) % size] for j in range(words)) for i in range(n)]


def _speed_checks(settings: Settings | None, index: dict[str, Any]) -> list[Check]:
    """Load the configured models as `index` and `search` do (without exporting a missing one) and time them."""
    from puremind.models.lazy import Models
    from puremind.services import indexing_threads, model_choice

    if settings is None:
        return [Check("speed", "speed", FAIL, "not measured: the settings cannot be read")]
    if not settings.semantic:
        return [Check("speed", "speed", OK, "keyword search only: no model to time")]
    checks: list[Check] = []
    embed_models = Models(model_choice(settings, "embedder", threads=indexing_threads(settings)), None)
    checks.append(_time_embedder(embed_models, settings, index))
    if settings.has_reranker:
        rerank_models = Models(None, model_choice(settings, "reranker"))
        checks.append(_time_reranker(rerank_models, settings, settings.rerank_candidates))
    return checks


def _load(models: Any, role: str) -> tuple[Any, float]:
    started = time.perf_counter()
    model = models.embedder() if role == "embedder" else models.reranker()
    return model, time.perf_counter() - started


def _time_embedder(models: Any, settings: Settings, index: dict[str, Any]) -> Check:
    """Time a first index of a sample of this vault's notes, spread evenly over it, through the real indexer into a
    temporary index (read, chunk, embed one note per call, write), and estimate a first index of the whole vault
    from it: its chunks at the sample's pace. Without a vault, the embedder alone on synthetic passages of about
    200 words, and the index's chunk count."""
    try:
        embedder, load_s = _load(models, "embedder")
        embedder.embed(speed_passages(2))  # the first call opens the session (and checks the provider once)
        notes = _vault_chunks(settings)
        if notes:
            sample = _sample_notes(notes, SPEED_PASSAGES)
            seconds = _index_sample(settings.vault, [rel for rel, _ in sample], embedder)
            timed = sum(len(texts) for _, texts in sample)
        else:
            passages = speed_passages(SPEED_PASSAGES)
            started = time.perf_counter()
            embedder.embed(passages)
            seconds, timed = time.perf_counter() - started, len(passages)
    except PuremindError as exc:
        return Check("speed", "embedder", WARN, f"embedder not timed: {exc.message}", exc.hint)
    rate = timed / max(seconds, 1e-9)
    precision = getattr(embedder, "precision", None) or "?"
    if notes:
        chunks, where = sum(len(texts) for _, texts in notes), f"{len(notes)} notes of the vault"
        on = f"a first index of {len(sample)} notes of the vault ({timed} chunks) into a temporary index"
    else:
        chunks, where = (int(index["chunks"]), "from the index") if index.get("chunks") else (None, "")
        on = f"{timed} passages of ~200 words"
    figures = {"variant": precision, "load_s": round(load_s, 2), "passages_per_s": round(rate, 2),
               "sampled_chunks": timed, "chunks": chunks,
               "estimated_index_s": round(chunks / rate, 1) if chunks else None}
    estimate = f"; a first index of its {chunks} chunks ({where}) takes about {_duration(chunks / rate)}" \
        if chunks else ""
    return Check("speed", "embedder", OK, f"{settings.embedder} ({precision}): {rate:.1f} chunks/s on {on} "
                 f"(loaded in {load_s:.1f} s){estimate}", figures=figures)


def _index_sample(vault: Path, rels: list[str], embedder: Any) -> float:
    """Seconds a first index of the notes `rels` of `vault` takes, copied into a temporary vault and indexed into a
    temporary index that is removed afterwards (the real index is not touched)."""
    import shutil
    import tempfile

    from puremind.indexer import index_vault
    from puremind.store import Store

    with tempfile.TemporaryDirectory(prefix="puremind-doctor-") as tmp:
        sample = Path(tmp) / "vault"
        for rel in rels:
            (sample / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(vault / rel, sample / rel)
        store = Store.open(Path(tmp) / "index.sqlite")
        try:
            started = time.perf_counter()
            index_vault(store, sample, embedder=embedder)
            return time.perf_counter() - started
        finally:
            store.close()


def _vault_chunks(settings: Settings) -> list[tuple[str, list[str]]]:
    """(path in the vault, its chunk texts as the indexer embeds them) for every note; [] without a vault."""
    if settings.vault is None or not settings.vault.is_dir():
        return []
    from puremind import chunker
    from puremind.indexer import embed_text
    from puremind.vault import read_note, walk_vault

    out = []
    for note in walk_vault(settings.vault).notes:
        try:
            text = read_note(settings.vault, note).decode("utf-8", errors="replace")
        except PuremindError:
            continue
        title = chunker.note_title(text, note.rel).title
        texts = [embed_text(c, title) for c in chunker.chunk_markdown(text)]
        if texts:
            out.append((note.rel, texts))
    return out


def _sample_notes(notes: list, chunks: int) -> list:
    """About `chunks` chunks' worth of notes ((path, chunk texts) pairs), spread evenly over the vault (all notes
    if they hold fewer)."""
    total = sum(len(texts) for _, texts in notes)
    if total <= chunks:
        return notes
    k = max(1, min(len(notes), round(chunks * len(notes) / total)))
    return [notes[(i * len(notes)) // k] for i in range(k)]


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _time_reranker(models: Any, settings: Settings, candidates: int) -> Check:
    try:
        reranker, load_s = _load(models, "reranker")
        passages = [p[: settings.rerank_chars] for p in speed_passages(SPEED_PAIRS)]
        query = "how does the index cite where a fact was read"
        reranker.score(query, passages[:2])
        started = time.perf_counter()
        reranker.score(query, passages)
        seconds = time.perf_counter() - started
    except PuremindError as exc:
        return Check("speed", "reranker", WARN, f"reranker not timed: {exc.message}", exc.hint)
    rate = SPEED_PAIRS / max(seconds, 1e-9)
    needed = candidates / rate
    budget = settings.rerank_budget
    reached = min(candidates, int(budget * rate)) if budget > 0 else candidates
    precision = getattr(reranker, "precision", None) or "?"
    figures = {"variant": precision, "load_s": round(load_s, 2), "pairs_per_s": round(rate, 2),
               "budget_for_candidates": candidates, "budget_s_needed": round(needed, 2),
               "rerank_budget": budget, "candidates_reached": reached}
    hint = None
    if budget > 0 and reached < candidates:
        hint = (f"a budget of {needed:.1f} s reranks all {candidates}: `--rerank-budget {needed:.1f}` or [retrieval] "
                "rerank_budget; or search with --no-rerank")
    return Check("speed", "reranker", OK, f"{settings.reranker} ({precision}): {rate:.1f} pairs/s of "
                 f"{settings.rerank_chars} characters (loaded in {load_s:.1f} s); {candidates} candidates need "
                 f"{needed:.1f} s; the budget of {budget:g} s reaches about {reached}", hint, figures)
