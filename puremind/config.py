"""Settings: flags > PUREMIND_* environment > config.toml > defaults, frozen once resolved."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from puremind.errors import ConfigError

DEFAULT_EMBEDDER = "Qwen/Qwen3-Embedding-0.6B"
DEFAULT_EMBEDDER_REVISION = "97b0c614be4d77ee51c0cef4e5f07c00f9eb65b3"
#: the light profile's embedder (`puremind init --light`): pinned in the models manifest, about 100 languages,
#: about 10 times the pinned embedder's speed on a CPU (bench/RESULTS.md, light-profile)
LIGHT_EMBEDDER = "intfloat/multilingual-e5-small"
DEFAULT_RERANKER = "BAAI/bge-reranker-v2-m3"
DEFAULT_RERANKER_REVISION = "953dc6f6f85a1b2dbfca4c34a2796e7dde08d41e"
DEVICES = ("auto", "coreml", "mps", "cuda", "cpu")
BACKENDS = ("onnx", "torch")
VARIANTS = ("auto", "fp32", "fp16", "int8")
POOLINGS = ("auto", "last_token", "mean", "cls")
#: Seconds a search's reranking may take (README, Search 7). A whole search (lists, fusion, reranking) then ends
#: within about 2.6 s on a 2-core CPU with the int8 bge-reranker-v2-m3, under the 3 s that some MCP clients wait
#: (3.0 made it 3.07 s); about 17 of the 50 candidates there, all 50 on a GPU (bench/RESULTS.md, rerank-budget).
DEFAULT_RERANK_BUDGET = 2.5
#: how deep into each retriever's list the fusion reads first, in distinct notes (puremind.retrieval.fusion.
#: fuse_at_depth; bench/RESULTS.md, issue-12-fusion-trials)
DEFAULT_FUSION_DEPTH = 7
#: `[retrieval] rerank` beside true and false: the reranker runs where the vault's last `puremind eval` found
#: that it raises MRR@10 beyond the bootstrap interval (or where no eval was run yet)
RERANK_AUTO = "auto"
RERANK_CHOICES = (RERANK_AUTO,)
#: `[models] embedder = "none"` turns semantic search off: keyword search only, no model is loaded.
NO_EMBEDDER = "none"
#: `[models] reranker = "none"`: no reranker model at all; searches end at the fusion, as with `rerank = false`,
#: which it implies whatever `[retrieval] rerank` says.
NO_RERANKER = "none"


@dataclass(frozen=True)
class Field:
    """One setting: where it lives in config.toml, its environment variable and its type."""

    name: str
    section: str | None  # None = top level of config.toml
    key: str
    env: str | None
    kind: type
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] | None = None
    allow_empty: bool = False


FIELDS: tuple[Field, ...] = (
    Field("vault", None, "vault", "PUREMIND_VAULT", Path),
    Field("db", None, "db", "PUREMIND_DB", Path),
    Field("embedder", "models", "embedder", "PUREMIND_EMBED_MODEL", str),
    Field("embedder_revision", "models", "embedder_revision", "PUREMIND_EMBED_REVISION", str),
    Field("reranker", "models", "reranker", "PUREMIND_RERANK_MODEL", str),
    Field("reranker_revision", "models", "reranker_revision", "PUREMIND_RERANK_REVISION", str),
    Field("device", "models", "device", "PUREMIND_DEVICE", str, choices=DEVICES),
    Field("backend", "models", "backend", "PUREMIND_BACKEND", str, choices=BACKENDS),
    Field("variant", "models", "variant", "PUREMIND_VARIANT", str, choices=VARIANTS),
    Field("pooling", "models", "pooling", None, str, choices=POOLINGS),
    Field("query_prefix", "models", "query_prefix", None, str, allow_empty=True),
    Field("embed_max_seq", "models", "embed_max_seq", None, int, 16, 32768),
    Field("threads", "models", "threads", "PUREMIND_THREADS", int, 0, 1024),
    Field("candidates", "retrieval", "candidates", None, int, 1, 1000),
    Field("rrf_k", "retrieval", "rrf_k", None, int, 1, 100000),
    Field("fusion_depth", "retrieval", "fusion_depth", None, int, 0, 1000),
    # true, false or "auto" (puremind.retrieval.gate: the reranker runs where the vault's last eval found it helps)
    Field("rerank", "retrieval", "rerank", "PUREMIND_RERANK", bool, choices=RERANK_CHOICES),
    Field("rerank_chars", "retrieval", "rerank_chars", None, int, 50, 100000),
    Field("rerank_candidates", "retrieval", "rerank_candidates", None, int, 1, 1000),
    Field("rerank_budget", "retrieval", "rerank_budget", None, float, 0, 86400),
    Field("inbox_folder", "inbox", "folder", None, str),
    Field("proposals", "server", "proposals", None, bool),
    # vault-relative folders whose notes agents never receive (like frontmatter `private: true`)
    Field("private_folders", "agents", "private", None, tuple),
    # vault-relative folders the MCP server serves (empty: the whole vault); `serve --scope` sets it per agent
    Field("scope", "agents", "scope", None, tuple),
    # credential-shaped text in what agents receive is replaced by [redacted: <kind>] (puremind/redact.py)
    Field("redact", "agents", "redact", None, bool),
)
FIELD_BY_NAME = {f.name: f for f in FIELDS}


@dataclass(frozen=True)
class Settings:
    """Every setting pureMind reads, resolved. Build it with `load_settings`."""

    home: Path
    config_path: Path
    vault: Path | None
    db: Path
    embedder: str = DEFAULT_EMBEDDER
    embedder_revision: str | None = None
    reranker: str = DEFAULT_RERANKER
    reranker_revision: str | None = None
    device: str = "auto"
    backend: str = "onnx"
    variant: str = "auto"
    pooling: str = "auto"
    query_prefix: str | None = None  # None: the model's own (manifest or sentence-transformers prompts)
    embed_max_seq: int = 2048
    #: threads of the models while `index` and `watch` embed (0: every core but one on machines with more than two)
    threads: int = 0
    candidates: int = 50
    rrf_k: int = 60
    #: the fusion reads each list down to its `fusion_depth`-th distinct note first, then orders the rest by the
    #: whole lists (0: whole lists)
    fusion_depth: int = DEFAULT_FUSION_DEPTH
    #: True, False or "auto" (RERANK_AUTO)
    rerank: bool | str = True
    rerank_chars: int = 800
    rerank_candidates: int = 50
    #: seconds the cross-encoder may take per search (0 = no bound); see puremind.retrieval.rerank
    rerank_budget: float = DEFAULT_RERANK_BUDGET
    #: the vault folder `puremind inbox approve` writes into
    inbox_folder: str = "inbox"
    #: offer the MCP tool puremind_propose (agents propose notes to the inbox)
    proposals: bool = False
    #: vault-relative folders ("Journal/") whose notes are kept from agents: indexed and found by the terminal's
    #: search, never returned by the MCP tools (see puremind.vault.in_folders)
    private_folders: tuple[str, ...] = ()
    #: vault-relative folders the MCP server serves ("Work/"); empty: the whole vault (see services.agent_scope)
    scope: tuple[str, ...] = ()
    #: replace credentials in what the MCP server returns with [redacted: <kind>]; the terminal is never redacted
    redact: bool = True

    @property
    def semantic(self) -> bool:
        """False when the user turned semantic search off (`embedder = "none"`)."""
        return self.embedder.lower() != NO_EMBEDDER

    @property
    def has_reranker(self) -> bool:
        """False when the user configured no reranker (`reranker = "none"`) or turned semantic search off."""
        return self.semantic and self.reranker.lower() != NO_RERANKER

    def configures(self, role: str) -> bool:
        """Whether a model is configured for `role` ("embedder" or "reranker"): False for one set to "none"."""
        return self.semantic if role == "embedder" else self.has_reranker

    def require_vault(self) -> Path:
        """The vault directory. Raises ConfigError when none is set."""
        if self.vault is None:
            raise ConfigError(
                "no vault directory is set",
                hint="run `puremind init <vault_dir>` or pass the vault directory to this command",
            )
        return self.vault


def home_dir(env: Mapping[str, str] | None = None) -> Path:
    """The config directory: PUREMIND_HOME, else ~/.puremind."""
    env = os.environ if env is None else env
    raw = env.get("PUREMIND_HOME")
    if raw:
        _require_utf8(raw, "environment variable PUREMIND_HOME")
    return expand(raw) if raw else Path.home() / ".puremind"


def _require_utf8(text: str, where: str) -> None:
    """Paths are stored in config.toml and in the index as text: a name that is not UTF-8 cannot be."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(
            f"{where}: the path {text.encode('utf-8', 'surrogateescape')!r} is not valid UTF-8",
            hint="rename the folder, or use a symlink with a UTF-8 name",
        ) from None


def expand(raw: str | os.PathLike[str]) -> Path:
    """A user path, with ~ expanded, made absolute (not resolved: symlinks are the vault's business)."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(raw))))


def read_config_file(path: Path) -> dict[str, Any]:
    """The flat {field name: raw value} of a config.toml; {} when it does not exist.

    Raises:
        ConfigError: the file is unreadable, is not valid TOML (the message names file and line),
            or holds an unknown key or a value of the wrong type.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text") from exc
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line L, column C)".
        raise ConfigError(
            f"broken config file {path}: {exc}",
            hint="fix that line, or run `puremind init <vault_dir> --force` to write a fresh file (the broken one is kept beside it)",
        ) from exc
    flat: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            for sub, subvalue in value.items():
                field = next((f for f in FIELDS if f.section == key and f.key == sub), None)
                if field is None:
                    raise ConfigError(f"config file {path}: unknown setting [{key}] {sub}", hint=_known_keys())
                flat[field.name] = _coerce(field, subvalue, f"config file {path}: [{key}] {sub}")
        else:
            field = next((f for f in FIELDS if f.section is None and f.key == key), None)
            if field is None:
                raise ConfigError(f"config file {path}: unknown setting {key}", hint=_known_keys())
            flat[field.name] = _coerce(field, value, f"config file {path}: {key}")
    return flat


def _known_keys() -> str:
    names = [f.key if f.section is None else f"[{f.section}] {f.key}" for f in FIELDS]
    return "known settings: " + ", ".join(names)


def _coerce(field: Field, value: Any, where: str) -> Any:
    """Check and convert one raw value (from TOML, the environment or a flag)."""
    if field.kind is bool:
        if isinstance(value, bool):
            return value
        if field.choices and isinstance(value, str) and value.strip().lower() in field.choices:
            return value.strip().lower()
        if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.strip().lower() in ("1", "true", "yes", "on")
        allowed = "true or false" + "".join(f', or "{choice}"' for choice in field.choices or ())
        raise ConfigError(f"{where} must be {allowed}, not {value!r}")
    if field.kind is tuple:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings, not {value!r}")
        items = tuple(v.strip() for v in value)
        if any(not v or v.strip("/.\\ ") == "" for v in items):
            raise ConfigError(f"{where} must name folders of the vault, not {value!r}",
                              hint='for example ["Journal/", "Health/"]')
        return items
    if field.kind in (int, float):
        noun = "a whole number" if field.kind is int else "a number"
        if isinstance(value, str):
            try:
                value = field.kind(value.strip())
            except ValueError:
                raise ConfigError(f"{where} must be {noun}, not {value!r}") from None
        accepted = (int,) if field.kind is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, accepted) or value != value:  # value != value: NaN
            raise ConfigError(f"{where} must be {noun}, not {value!r}")
        if field.minimum is not None and value < field.minimum or field.maximum is not None and value > field.maximum:
            raise ConfigError(f"{where} must be between {field.minimum} and {field.maximum}, not {value}")
        return field.kind(value)
    if not isinstance(value, (str, os.PathLike)):
        raise ConfigError(f"{where} must be a string, not {value!r}")
    if field.allow_empty:
        return os.fspath(value)  # a prefix keeps its exact spacing; "" means none
    text = os.fspath(value).strip()
    if not text:
        raise ConfigError(f"{where} is empty")
    if field.kind is Path:
        _require_utf8(text, where)
        return expand(text)
    if field.choices is not None and text.lower() not in field.choices:
        raise ConfigError(f"{where} must be one of {', '.join(field.choices)}, not {text!r}")
    return text.lower() if field.choices is not None else text


def load_settings(flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Resolve every setting: flags > PUREMIND_* environment > config.toml > defaults.

    `flags` maps field names to values given on the command line (None values are ignored).

    Raises:
        ConfigError: a broken config file or a bad value anywhere.
    """
    env = os.environ if env is None else env
    home = home_dir(env)
    config_path = home / "config.toml"
    values: dict[str, Any] = read_config_file(config_path)
    for field in FIELDS:
        if field.env and env.get(field.env, "").strip():
            values[field.name] = _coerce(field, env[field.env], f"environment variable {field.env}")
    for name, value in (flags or {}).items():
        if value is None:
            continue
        field = FIELD_BY_NAME[name]
        values[name] = _coerce(field, value, f"--{name.replace('_', '-')}")
    values.setdefault("db", home / "index.sqlite")
    values.setdefault("vault", None)
    # A model given without a revision: the pinned revision only belongs to the pinned default.
    if "embedder_revision" not in values and values.get("embedder", DEFAULT_EMBEDDER) == DEFAULT_EMBEDDER:
        values["embedder_revision"] = DEFAULT_EMBEDDER_REVISION
    if "reranker_revision" not in values and values.get("reranker", DEFAULT_RERANKER) == DEFAULT_RERANKER:
        values["reranker_revision"] = DEFAULT_RERANKER_REVISION
    if str(values.get("reranker", "")).lower() == NO_RERANKER:
        values["rerank"] = False  # no reranker model: nothing can rerank, whatever [retrieval] rerank says
    return Settings(home=home, config_path=config_path, **values)


def render_config(values: Mapping[str, Any]) -> str:
    """config.toml text for the given field values; unset settings appear as comments with their default."""
    defaults = {f.name: getattr(Settings, f.name, None) for f in FIELDS}
    defaults["db"] = "~/.puremind/index.sqlite"
    defaults["embedder_revision"] = DEFAULT_EMBEDDER_REVISION
    defaults["reranker_revision"] = DEFAULT_RERANKER_REVISION
    notes = {
        "embedder_revision": "pinned for the default model",
        "reranker_revision": "pinned for the default model",
        "query_prefix": "default: the model's own",
        "embedder": '"none" turns semantic search off',
        "reranker": '"none": no reranker (searches end at the fusion)',
    }
    lines = ["# pureMind configuration. Environment variables (PUREMIND_*) override it; flags override both.", ""]
    section: str | None = None
    for field in FIELDS:
        if field.section != section:
            section = field.section
            lines += ["", f"[{section}]"]
        extra = [notes[field.name]] if field.name in notes else []
        extra += [f"env {field.env}"] if field.env else []
        env_note = f"  ({'; '.join(extra)})" if extra else ""
        if field.name in values and values[field.name] is not None:
            lines.append(f"{field.key} = {_toml_value(values[field.name])}{'' if not env_note else '  #' + env_note[1:]}")
        else:
            default = defaults[field.name]
            lines.append(f"# {field.key} = {_toml_value(default) if default is not None else ''}{env_note}")
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(f"\\u{ord(ch):04x}" if (ch < " " and ch != "\t") or ch == "\x7f" else ch for ch in escaped)
    return f'"{escaped}"'


def setting_names() -> list[str]:
    """Field names in table order (used by docs and tests)."""
    return [f.name for f in FIELDS]


def replace(settings: Settings, **changes: Any) -> Settings:
    """A copy of settings with some fields changed."""
    return dataclasses.replace(settings, **changes)


def _tighten(path: Path, mode: int) -> None:
    """chmod `path` down to `mode` when it is more open; a missing path is fine."""
    try:
        current = path.stat().st_mode & 0o777
    except FileNotFoundError:
        return
    if current & ~mode:
        try:
            os.chmod(path, current & mode)
        except OSError:
            pass


def secure_home(settings: Settings) -> None:
    """Tighten a config directory (0700) and config.toml (0600) that an earlier version left more open."""
    _tighten(settings.home, 0o700)
    _tighten(settings.config_path, 0o600)


def write_config(vault_dir: Path, *, force: bool = False, light: bool = False,
                 env: Mapping[str, str] | None = None) -> tuple[Path, Path | None]:
    """Write config.toml naming `vault_dir`; with `force`, rewrite an existing one keeping its settings. With
    `light`, `[models] embedder` is the light profile's (LIGHT_EMBEDDER).

    A broken file cannot be kept: with `force` it is moved aside to `config.toml.broken` (or `.broken-N`) and
    a fresh file is written. Returns (the config path, where a broken file was moved or None).

    Raises:
        VaultError: the vault is not a directory.
        ConfigError: the file exists and `force` is not given, or the config directory cannot be written.
    """
    from puremind.errors import VaultError

    vault = expand(vault_dir)
    _require_utf8(str(vault), "the vault")
    if not vault.is_dir():
        raise VaultError(
            f"the vault {vault} {'is not a directory' if vault.exists() else 'does not exist'}",
            hint="create the folder first, or give the folder that holds your Markdown notes",
        )
    home = home_dir(env)
    path = home / "config.toml"
    values: dict[str, Any] = {}
    moved: Path | None = None
    if path.exists():
        if not force:
            raise ConfigError(f"{path} already exists", hint="use `puremind init <vault_dir> --force` to rewrite it; your settings are kept")
        try:
            values = read_config_file(path)
        except ConfigError:
            moved = _move_aside(path)
    values["vault"] = vault
    if light:
        values["embedder"] = LIGHT_EMBEDDER
        values.pop("embedder_revision", None)  # the manifest pins it
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        _tighten(home, 0o700)
        tmp = path.with_name(f".config.toml.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(render_config(values))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise ConfigError(
            f"cannot write the config file {path}: {exc.strerror or exc}",
            hint="set PUREMIND_HOME to a folder you can write",
        ) from None
    return path, moved


def _move_aside(path: Path) -> Path:
    """Rename a broken config file out of the way (never overwriting an earlier one) and return its new name."""
    for n in range(1000):
        target = path.with_name(path.name + (".broken" if n == 0 else f".broken-{n}"))
        if not target.exists():
            os.replace(path, target)
            return target
    raise ConfigError(f"too many broken copies of {path}", hint="delete the old config.toml.broken-* files")
