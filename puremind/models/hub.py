"""Model files: a local folder as the user gave it, or a hub model from the Hugging Face cache.

A hub model is looked up in the cache first, with no network request; only a model (or a file) that is not there
is downloaded, and never while HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE is set. huggingface_hub is imported inside
`fetch`: it reads its settings (telemetry, offline mode, cache folder) into constants when it is imported, so
telemetry is switched off before that, and the offline setting and cache folder are read here, at call time.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from puremind.errors import ModelError
from puremind.messages import to_stderr as _to_stderr
from puremind.models.base import ModelsUnavailable

#: A model name starting with one of these is a local folder; anything else is a hub id. Exactly these, so that
#: a folder in the working directory that happens to be named like a hub id is never picked up.
LOCAL_PREFIXES = ("/", "./", "../", "~")

#: What a model that is not in the manifest is fetched with: config and tokenizer files, safetensors weights (for
#: the ONNX runtime its fp32 ONNX model instead, when the repository ships one: ONNX_PATTERNS). No *.bin (pickles
#: run code when loaded), no *.py (pureMind never runs a model's own code), no TF copies.
GENERIC_PATTERNS = ("*.json", "*.safetensors", "*.txt", "*.model", "README.md")  # the card declares languages
#: GENERIC_PATTERNS without the weights: config, tokenizer and the model card.
META_PATTERNS = tuple(p for p in GENERIC_PATTERNS if p != "*.safetensors")
#: A repository's fp32 ONNX model (sentence-transformers repositories ship one under onnx/) and its external
#: data, as `puremind.models.onnx_folder.FP32_FILES` reads them. Quantized copies beside it are not fetched.
ONNX_PATTERNS = ("onnx/model.onnx", "onnx/model.onnx_data", "onnx/model.onnx.data",
                 "model.onnx", "model.onnx_data", "model.onnx.data")

#: huggingface_hub's own truthy values (constants._is_true), so both agree on what "offline" means.
_TRUE_VALUES = {"1", "ON", "YES", "TRUE"}

# huggingface_hub's repo id rules (validate_repo_id): optional namespace, names of 1-96 word characters, '-' or '.',
# starting and ending with a word character, no '--' or '..'.
_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
_HUB_ID_RE = re.compile(rf"(?:{_HUB_PART}/)?{_HUB_PART}")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ModelSource:
    """Where a model's files are, and which version they are.

    `revision` is the commit hash of a hub snapshot, or "local-" plus a short hash of a local folder's file
    names, sizes and modification times (it changes when the files change).
    """

    name: str
    path: Path
    revision: str
    local: bool


def is_local_name(name: str) -> bool:
    """True when `name` names a local folder: it starts with "/", "./", "../" or "~" (exactly these)."""
    return name.startswith(LOCAL_PREFIXES)


def looks_like_hub_id(name: str) -> bool:
    """True when `name` has the form of a Hugging Face model id ("org/name" or a plain "name")."""
    return bool(_HUB_ID_RE.fullmatch(name)) and "--" not in name and ".." not in name and not name.endswith(".git")


def ensure_telemetry_off() -> None:
    """Set HF_HUB_DISABLE_TELEMETRY=1 unless the user set it (to anything); call before importing huggingface_hub.

    huggingface_hub reads the variable once, at import; when something imported it earlier, its constant is
    switched off too, since the user did not ask for telemetry.
    """
    if "HF_HUB_DISABLE_TELEMETRY" in os.environ:
        return
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_DISABLE_TELEMETRY = True


def offline_variable() -> str | None:
    """The environment variable that puts the hub offline now (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE), or None.

    Read at call time, the way huggingface_hub reads it at import: HF_HUB_OFFLINE, when set to anything, decides;
    TRANSFORMERS_OFFLINE only counts when HF_HUB_OFFLINE is unset or empty.
    """
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        value = os.environ.get(var)
        if value:
            return var if value.strip().upper() in _TRUE_VALUES else None
    return None


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache folder, from the environment now (HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME)."""
    env = os.environ
    raw = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not raw:
        xdg = env.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        home = env.get("HF_HOME") or os.path.join(xdg, "huggingface")
        raw = os.path.join(home, "hub")
    return Path(os.path.expandvars(os.path.expanduser(raw)))


def fetch(
    name: str, revision: str | None, files: Sequence[str] | None, *, progress: Progress | None = None,
    weights: str = "onnx",
) -> ModelSource:
    """The folder holding model `name`, downloading into the Hugging Face cache only what is not there.

    A local name (see `is_local_name`) must be a folder holding config.json (and `files`, when given); nothing is
    downloaded for it. A hub id is looked up in the cache at `revision` (a commit, branch or tag; None = what the
    cache holds for "main", so a model without a pin stays at its first download) and `files` (None: config.json
    and safetensors weights, fetched with GENERIC_PATTERNS) are checked; what is missing is downloaded unless
    HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE is set. `revision` is ignored for a local folder. Model code is never
    fetched or run.

    `weights` (for `files` None): "onnx" (the ONNX runtime) takes the repository's fp32 ONNX model when it ships
    one and its safetensors weights only when it does not, so a runtime-only install needs no torch and nothing is
    downloaded twice; "safetensors" (the torch backend, the export) needs the safetensors weights.

    Raises:
        ModelError: a local folder that does not exist or is not a model folder; a name that is neither local
            nor a hub id; offline with the model (or some of its files) not cached; a download that fails
            (network, unknown repository or revision, gated model) or a repository that lacks a needed file.
    """
    if not name:
        raise ModelError("no model name given")
    if is_local_name(name):
        return _fetch_local(name, files)
    if not looks_like_hub_id(name):
        raise ModelError(
            f"{name!r} is neither a Hugging Face model id (org/name) nor a local folder",
            hint=f"a local folder must start with /, ./, ../ or ~ (for example ./{name})",
        )
    if weights not in ("onnx", "safetensors"):
        raise ValueError(f"weights must be 'onnx' or 'safetensors', not {weights!r}")
    return _fetch_hub(name, revision, tuple(files) if files else None, progress, weights)


def _fetch_local(name: str, files: Sequence[str] | None) -> ModelSource:
    expanded = os.path.expanduser(name)
    if expanded.startswith("~"):
        # An unknown ~user stays unexpanded; made absolute it would quietly point into the working directory.
        raise ModelError(f"cannot expand {name!r}: no such user's home folder")
    path = Path(os.path.abspath(expanded))
    if not path.is_dir():
        raise ModelError(f"the model folder {path} {'is not a folder' if path.exists() else 'does not exist'}")
    if not (path / "config.json").is_file():
        raise ModelError(
            f"{path} holds no config.json, so it is not a model folder",
            hint="give the folder that holds config.json, the weights and the tokenizer files",
        )
    missing = _missing(path, tuple(files) if files else ("config.json",))
    if missing:
        raise ModelError(f"the model folder {path} lacks {', '.join(missing)}")
    return ModelSource(name=name, path=path, revision="local-" + _folder_stamp(path), local=True)


def _folder_stamp(root: Path) -> str:
    """A short hash of (relative path, size, mtime_ns) of the folder's files: cheap (stat only), and it changes
    when a file is replaced or edited. Hidden files and folders (.git, .cache) are left out."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for filename in sorted(f for f in filenames if not f.startswith(".")):
            full = os.path.join(dirpath, filename)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            try:
                st = os.stat(full)
            except OSError:
                digest.update(f"{rel}\0missing\n".encode("utf-8", "surrogateescape"))
                continue
            digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()[:12]


def _missing(folder: Path, files: tuple[str, ...] | None, weights: str = "onnx") -> list[str]:
    """The needed files that `folder` lacks (a dangling cache symlink counts as missing)."""
    if files:
        return [f for f in files if not (folder / f).is_file()]
    from puremind.models.onnx_folder import find_onnx

    missing = [] if (folder / "config.json").is_file() else ["config.json"]
    # For the ONNX runtime a snapshot that holds the model as ONNX (onnx/model.onnx) needs no safetensors weights.
    if not any(p.is_file() for p in folder.glob("*.safetensors")) and (weights != "onnx" or find_onnx(folder) is None):
        missing.append("model weights (*.safetensors)")
    return missing


def _unreachable(exc: BaseException) -> bool:
    """True when `exc` says the hub could not be reached at all (no connection, no answer in time)."""
    return _network_failure(exc) is not None


#: Transport errors of requests/urllib3 (huggingface_hub 0.x) and httpx/httpx2 (1.x, 2.x) that mean "no
#: connection", matched by class name anywhere in the exception's MRO, so that no HTTP library has to be installed
#: (hub 2.x no longer brings requests) or imported to tell them apart.
_UNREACHABLE_NAMES = frozenset(
    {"ConnectionError", "ConnectError", "NetworkError", "ProxyError", "NewConnectionError", "NameResolutionError",
     "MaxRetryError", "gaierror"}
)


def _network_failure(exc: BaseException) -> str | None:
    """"timeout" (no answer in time), "unreachable" (no connection) or None (not a transport failure)."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if isinstance(exc, TimeoutError) or any("Timeout" in n for n in names):
        return "timeout"
    if isinstance(exc, ConnectionError) or names & _UNREACHABLE_NAMES:
        return "unreachable"
    return None


def _fetch_hub(
    name: str, revision: str | None, files: tuple[str, ...] | None, progress: Progress | None, weights: str = "onnx"
) -> ModelSource:
    ensure_telemetry_off()
    import huggingface_hub
    from huggingface_hub import errors as hf_errors

    cache = hub_cache_dir()
    offline = offline_variable()
    label = f"{name} at revision {revision}" if revision else name

    try:
        folder: Path | None = Path(
            huggingface_hub.snapshot_download(name, revision=revision, cache_dir=str(cache), local_files_only=True)
        )
    except hf_errors.LocalEntryNotFoundError:
        folder = None
    except hf_errors.HFValidationError as exc:
        raise ModelError(f"{name!r} is not a valid Hugging Face model id: {_first_line(exc)}") from exc

    if folder is not None:
        missing = _missing(folder, files, weights)
        if not missing:
            return ModelSource(name=name, path=folder, revision=folder.name, local=False)
    if offline:
        setting = f"{offline}={os.environ[offline]}"
        # Cannot be had here (not a broken model): searches go on without it, `index` says what to do.
        if folder is None:
            raise ModelsUnavailable(
                f"{label} is not in the Hugging Face cache ({cache}) and {setting} forbids downloading it",
                hint=f"unset {offline} where there is network to download it once, or point HF_HUB_CACHE at a cache that holds it",
            )
        raise ModelsUnavailable(
            f"the cached copy of {name} ({folder.name[:12]}) lacks {', '.join(missing)}, "
            f"and {setting} forbids downloading {'it' if len(missing) == 1 else 'them'}",
            hint=f"unset {offline} where there is network to complete it",
        )

    # A model without a file list: config and tokenizer with its ONNX model if the repository ships one (a second
    # request, at the same commit, fetches the safetensors weights where it does not); for torch the safetensors.
    generic = list(META_PATTERNS + ONNX_PATTERNS) if weights == "onnx" else list(GENERIC_PATTERNS)
    if folder is not None:
        # Complete the snapshot that is there: its commit, not the branch head, so an unpinned model is not moved.
        target, patterns = folder.name, (missing if files else generic)
        what = f"missing {', '.join(missing)}"
    else:
        target, patterns = revision, list(files) if files else generic
        what = f"{len(files)} files" if files else (
            "config, tokenizer and its ONNX model, else its safetensors weights" if weights == "onnx"
            else "config, tokenizer and safetensors weights")
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        # Read once, when huggingface_hub was imported: it would refuse every request now.
        raise ModelsUnavailable(
            f"cannot download {label}: huggingface_hub was imported while HF_HUB_OFFLINE was set",
            hint="start pureMind without HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) to download it",
        )
    (progress or _to_stderr)(f"downloading {name} ({what}) from the Hugging Face hub into {cache}")
    try:
        got = Path(
            huggingface_hub.snapshot_download(name, revision=target, cache_dir=str(cache), allow_patterns=patterns)
        )
        if not files and _missing(got, None, weights) == ["model weights (*.safetensors)"]:
            # No ONNX model in the repository: its safetensors weights, at the commit just fetched.
            got = Path(huggingface_hub.snapshot_download(name, revision=got.name, cache_dir=str(cache),
                                                         allow_patterns=["*.safetensors"]))
    except hf_errors.GatedRepoError as exc:
        raise ModelError(
            f"{name} is gated on the Hugging Face hub",
            hint="accept its licence on huggingface.co and log in with `hf auth login`",
        ) from exc
    except hf_errors.RepositoryNotFoundError as exc:
        raise ModelError(
            f"{name} was not found on the Hugging Face hub",
            hint="check the spelling (org/name); a private model needs `hf auth login`",
        ) from exc
    except hf_errors.RevisionNotFoundError as exc:
        raise ModelError(f"{name} has no revision {target!r} on the Hugging Face hub") from exc
    except hf_errors.OfflineModeIsEnabled as exc:
        raise ModelsUnavailable(
            f"cannot download {label}: huggingface_hub was imported while HF_HUB_OFFLINE was set",
            hint="start pureMind without HF_HUB_OFFLINE to download it",
        ) from exc
    except Exception as exc:
        # httpx's errors (huggingface_hub 1.x, 2.x) are no OSErrors and may come unwrapped; anything else goes up.
        if not isinstance(exc, (hf_errors.HfHubHTTPError, OSError, ValueError)) and _network_failure(exc) is None:
            raise
        # requests' errors are OSErrors. LocalEntryNotFoundError here means the hub could not be reached; the
        # network error it wraps says why.
        reason = exc.__cause__ if isinstance(exc, hf_errors.LocalEntryNotFoundError) and exc.__cause__ else exc
        # The hub out of reach: the model cannot be had here (searches go on without it); any other failure
        # (an HTTP error, a bad answer) is an error.
        unreachable = isinstance(exc, hf_errors.LocalEntryNotFoundError) or _unreachable(reason)
        raise (ModelsUnavailable if unreachable else ModelError)(
            f"cannot download {label} from the Hugging Face hub: {_describe(reason)}",
            hint="check the network connection (and proxy settings)",
        ) from exc

    still_missing = _missing(got, files, weights)
    if still_missing:
        raise ModelError(
            f"{name} at {got.name[:12]} on the Hugging Face hub has no {', '.join(still_missing)}",
            hint=None if files else (
                "pureMind loads an ONNX model (onnx/model.onnx) or safetensors weights, never pickled *.bin files"
                if weights == "onnx" else "pureMind loads safetensors weights only, never pickled *.bin files"),
        )
    return ModelSource(name=name, path=got, revision=got.name, local=False)


def _describe(exc: BaseException) -> str:
    """One line on why a download failed; urllib3's nested reprs of a connection error say nothing more."""
    kind = _network_failure(exc)
    if kind == "timeout":
        return f"the hub did not answer in time ({type(exc).__name__})"
    if kind == "unreachable":
        return f"the hub cannot be reached ({type(exc).__name__})"
    return _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."
