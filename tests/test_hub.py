"""Fetching model files: local folders as given, hub models from the Hugging Face cache, offline rules.

The hub is never reached: a fake cache in tmp_path (HF_HUB_CACHE) is laid out with save_as_hub_snapshot, every
socket connection is refused (and recorded), and downloads go through a stand-in for the network half of
huggingface_hub.snapshot_download.
"""

from __future__ import annotations

import json
import re
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from puremind.errors import ModelError
from puremind.models import hub
from puremind.models.hub import GENERIC_PATTERNS, META_PATTERNS, ONNX_PATTERNS, ModelSource, ensure_telemetry_off, fetch, hub_cache_dir, is_local_name
from puremind.models.manifest import load_manifest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from scripts.standins import save_as_hub_snapshot  # noqa: E402

QWEN3 = load_manifest().get("qwen3-embedding-0.6b")
OLD = "1111111111111111111111111111111111111111"
NEW = "2222222222222222222222222222222222222222"


@pytest.fixture(autouse=True)
def hf_env(tmp_path, monkeypatch) -> Path:
    """A private hub cache; telemetry and offline settings as the test sets them, restored afterwards."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    for var in ("HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", constants.HF_HUB_DISABLE_TELEMETRY)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE)
    return cache


@pytest.fixture(autouse=True)
def connections(monkeypatch) -> list:
    """Every attempt to resolve a host or open a connection, each refused."""
    attempts: list = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network blocked by the test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


@pytest.fixture
def online(monkeypatch) -> None:
    """Downloads allowed: no offline variable, and huggingface_hub's import-time constant agreeing."""
    import huggingface_hub.constants as constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def model_src(tmp_path) -> Path:
    """A small model folder with the files the manifest's Qwen3 entry needs (contents are not read)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 64}))
    (src / "model.safetensors").write_bytes(b"\0" * 64)
    (src / "tokenizer.json").write_text("{}")
    (src / "tokenizer_config.json").write_text(json.dumps({"padding_side": "left"}))
    (src / "README.md").write_text("not fetched")
    return src


class FakeHub:
    """The network half of snapshot_download: serves `repos` (repo id -> (head commit, folder)) into the cache.

    Lookups with local_files_only=True go to the real function, so the code under test reads the real cache.
    """

    def __init__(self, real):
        self.real = real
        self.repos: dict[str, tuple[str, Path]] = {}
        self.calls: list[dict] = []
        self.error: BaseException | None = None

    def __call__(self, repo_id, *, revision=None, cache_dir=None, local_files_only=False, allow_patterns=None, **kw):
        if local_files_only:
            return self.real(repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True, **kw)
        from huggingface_hub.utils import filter_repo_objects

        self.calls.append({"repo_id": repo_id, "revision": revision, "cache_dir": cache_dir,
                           "allow_patterns": allow_patterns, **kw})
        if self.error is not None:
            raise self.error
        head, src = self.repos[repo_id]
        commit = head if revision in (None, "main") else revision
        snap = Path(cache_dir) / ("models--" + repo_id.replace("/", "--")) / "snapshots" / commit
        snap.mkdir(parents=True, exist_ok=True)
        names = [p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file()]
        for name in filter_repo_objects(names, allow_patterns=allow_patterns):
            (snap / name).parent.mkdir(parents=True, exist_ok=True)
            (snap / name).write_bytes((src / name).read_bytes())
        if revision in (None, "main"):
            (snap.parent.parent / "refs").mkdir(exist_ok=True)
            (snap.parent.parent / "refs" / "main").write_text(commit)
        return str(snap)


@pytest.fixture
def fake_hub(monkeypatch) -> FakeHub:
    import huggingface_hub

    fake = FakeHub(huggingface_hub.snapshot_download)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    return fake


# --- names ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["/opt/models/m", "./m", "../m", "~", "~/models/m", "~user/m"])
def test_names_starting_with_slash_dot_slash_dot_dot_slash_or_tilde_are_local(name):
    assert is_local_name(name)


@pytest.mark.parametrize("name", ["Qwen/Qwen3-Embedding-0.6B", "models/m", "m", ".m", "..m", ".", "", "m/./x"])
def test_other_names_are_hub_ids(name):
    assert not is_local_name(name)


@pytest.mark.parametrize("name", ["a/b/c", "has space/m", "org--x/m", "org/m..x", ".", "-m", "org/"])
def test_a_name_that_is_neither_local_nor_a_hub_id_is_refused_with_a_hint(name, connections):
    with pytest.raises(ModelError) as err:
        fetch(name, None, None)
    assert "neither a Hugging Face model id" in err.value.message and "./" in (err.value.hint or "")
    assert connections == []


# --- local folders -------------------------------------------------------------------------------------------


def test_a_local_folder_is_used_in_place_with_a_revision_from_its_files(tmp_path, model_src, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = fetch("./src", None, QWEN3.files)
    assert source == ModelSource(name="./src", path=model_src, revision=source.revision, local=True)
    assert source.revision.startswith("local-") and len(source.revision) == len("local-") + 12
    assert fetch(str(model_src), "ignored", None).revision == source.revision
    monkeypatch.chdir(model_src)
    assert fetch("../src", None, None).path == model_src


def test_a_local_revision_changes_when_a_file_changes_and_not_otherwise(model_src):
    first = fetch(str(model_src), None, None).revision
    assert fetch(str(model_src), None, None).revision == first
    (model_src / ".cache").mkdir()
    (model_src / ".cache" / "lock").write_text("hidden files do not count")
    assert fetch(str(model_src), None, None).revision == first
    (model_src / "model.safetensors").write_bytes(b"\1" * 65)
    assert fetch(str(model_src), None, None).revision != first


def test_a_tilde_name_is_expanded_to_the_home_folder(tmp_path, model_src, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert fetch("~/src", None, None).path == model_src


@pytest.mark.parametrize(
    ("name", "expected"),
    [("/does/not/exist", "does not exist"), ("./src/config.json", "is not a folder"),
     ("./empty", "holds no config.json"), ("~no-such-user-xyz/src", "no such user")],
)
def test_a_local_name_that_is_not_a_model_folder_is_refused(tmp_path, model_src, monkeypatch, name, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match=expected):
        fetch(name, None, None)


def test_a_local_folder_missing_a_needed_file_names_it(tmp_path, model_src, monkeypatch):
    (model_src / "tokenizer.json").unlink()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError, match=r"lacks tokenizer\.json"):
        fetch("./src", None, QWEN3.files)


# --- the cache, no network -----------------------------------------------------------------------------------


def test_a_cached_pinned_model_loads_online_without_any_network_request(hf_env, model_src, online, connections):
    snap = save_as_hub_snapshot(model_src, hf_env, QWEN3.hub_id, QWEN3.revision)
    source = fetch(QWEN3.hub_id, QWEN3.revision, QWEN3.files)
    assert source == ModelSource(name=QWEN3.hub_id, path=snap, revision=QWEN3.revision, local=False)
    assert connections == []


def test_an_unpinned_model_uses_what_the_cache_holds_for_main_without_network(hf_env, model_src, online, connections):
    save_as_hub_snapshot(model_src, hf_env, "org/tiny", NEW)
    save_as_hub_snapshot(model_src, hf_env, "org/tiny", OLD)  # refs/main now points here
    source = fetch("org/tiny", None, None)
    assert source.revision == OLD and source.path.name == OLD
    assert connections == []


def test_socket_blocking_does_catch_a_request_so_the_no_network_tests_mean_something(online, connections):
    with pytest.raises(ModelError) as err:
        fetch("org/not-cached", None, None, progress=lambda message: None)
    assert connections, "the hub was not even tried: the socket block proves nothing"
    assert "cannot download org/not-cached" in err.value.message and "\n" not in err.value.message
    assert re.search(r"the hub cannot be reached \(Connect(ion)?Error\)", err.value.message)


def test_the_cache_is_read_from_the_environment_at_call_time(tmp_path, model_src, monkeypatch):
    import huggingface_hub  # noqa: F401  (imported before the cache folder is chosen)

    later = tmp_path / "later-cache"
    save_as_hub_snapshot(model_src, later, QWEN3.hub_id, QWEN3.revision)
    monkeypatch.setenv("HF_HUB_CACHE", str(later))
    assert fetch(QWEN3.hub_id, QWEN3.revision, QWEN3.files).path.is_relative_to(later)


def test_the_cache_folder_follows_hf_home_and_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"


def test_a_folder_named_like_the_hub_id_in_the_working_directory_is_not_picked_up(
        tmp_path, hf_env, model_src, monkeypatch):
    work = tmp_path / "work"
    decoy = work / QWEN3.hub_id
    decoy.mkdir(parents=True)
    for name in QWEN3.files:
        (decoy / name).write_text("{}")
    monkeypatch.chdir(work)
    with pytest.raises(ModelError, match="not in the Hugging Face cache"):
        fetch(QWEN3.hub_id, QWEN3.revision, QWEN3.files)
    snap = save_as_hub_snapshot(model_src, hf_env, QWEN3.hub_id, QWEN3.revision)
    source = fetch(QWEN3.hub_id, QWEN3.revision, QWEN3.files)
    assert source.path == snap and source.path.is_relative_to(hf_env) and not source.local


# --- offline -------------------------------------------------------------------------------------------------


def test_offline_a_model_not_in_the_cache_fails_at_once_naming_model_and_setting(hf_env, fake_hub, connections):
    with pytest.raises(ModelError) as err:
        fetch(QWEN3.hub_id, QWEN3.revision, QWEN3.files)
    message = err.value.message
    assert QWEN3.hub_id in message and QWEN3.revision in message and "HF_HUB_OFFLINE=1 forbids" in message
    assert str(hf_env) in message and "HF_HUB_OFFLINE" in (err.value.hint or "")
    assert fake_hub.calls == [] and connections == []


def test_offline_is_read_at_call_time_even_if_the_hub_library_was_imported_online(monkeypatch, fake_hub):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "yes")
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE=yes forbids"):
        fetch("org/tiny", None, None)
    assert fake_hub.calls == []


def test_transformers_offline_also_forbids_downloads(monkeypatch, fake_hub):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    with pytest.raises(ModelError, match="TRANSFORMERS_OFFLINE=1 forbids"):
        fetch("org/tiny", None, None)
    assert fake_hub.calls == []


def test_offline_a_cached_copy_missing_a_file_names_that_file(hf_env, model_src, fake_hub):
    snap = save_as_hub_snapshot(model_src, hf_env, QWEN3.hub_id, QWEN3.revision)
    (snap / "tokenizer.json").unlink()
    with pytest.raises(ModelError) as err:
        fetch(QWEN3.hub_id, QWEN3.revision, QWEN3.files)
    assert "lacks tokenizer.json" in err.value.message and "forbids downloading it" in err.value.message
    assert fake_hub.calls == []


def test_offline_a_generic_cached_copy_without_weights_says_so(hf_env, model_src, fake_hub):
    snap = save_as_hub_snapshot(model_src, hf_env, "org/tiny", OLD)
    (snap / "model.safetensors").unlink()
    with pytest.raises(ModelError, match=r"lacks model weights \(\*\.safetensors\)"):
        fetch("org/tiny", None, None)


# --- online: downloads (through the fake hub) ----------------------------------------------------------------


def test_online_a_cached_copy_missing_a_file_downloads_only_that_file_at_the_pinned_commit(
        hf_env, model_src, online, fake_hub):
    snap = save_as_hub_snapshot(model_src, hf_env, QWEN3.hub_id, QWEN3.revision)
    (snap / "tokenizer.json").unlink()
    fake_hub.repos[QWEN3.hub_id] = (NEW, model_src)
    messages: list[str] = []
    source = fetch(QWEN3.hub_id, QWEN3.revision, QWEN3.files, progress=messages.append)
    assert source.path == snap and (snap / "tokenizer.json").is_file()
    (call,) = fake_hub.calls
    assert call["revision"] == QWEN3.revision and call["allow_patterns"] == ["tokenizer.json"]
    assert call["cache_dir"] == str(hf_env)
    assert messages and "tokenizer.json" in messages[0]


def test_online_an_uncached_pinned_model_is_downloaded_at_its_revision_with_its_files_only(
        hf_env, model_src, online, fake_hub):
    fake_hub.repos[QWEN3.hub_id] = (NEW, model_src)
    source = fetch(QWEN3.hub_id, QWEN3.revision, QWEN3.files, progress=lambda m: None)
    assert source.revision == QWEN3.revision and not source.local
    assert sorted(p.name for p in source.path.iterdir()) == sorted(QWEN3.files)  # README.md not fetched
    assert fake_hub.calls[0]["allow_patterns"] == list(QWEN3.files)


def test_online_an_unpinned_model_downloads_the_default_branch_once_and_then_stays(
        hf_env, model_src, online, fake_hub, connections):
    fake_hub.repos["org/tiny"] = (OLD, model_src)
    first = fetch("org/tiny", None, None, progress=lambda m: None)
    assert first.revision == OLD
    # No ONNX model in the repository: config and tokenizer first, then its safetensors at the commit just fetched.
    assert [c["allow_patterns"] for c in fake_hub.calls] == [list(META_PATTERNS + ONNX_PATTERNS), ["*.safetensors"]]
    assert fake_hub.calls[0]["revision"] is None and fake_hub.calls[1]["revision"] == OLD
    assert (first.path / "README.md").exists()  # the model card: it declares the model's languages
    assert (first.path / "model.safetensors").is_file()
    fake_hub.calls.clear()
    fake_hub.repos["org/tiny"] = (NEW, model_src)  # the branch moves on; the cached copy is not refreshed
    assert fetch("org/tiny", None, None).revision == OLD
    assert fake_hub.calls == [] and connections == []


def test_online_an_unpinned_repository_with_an_onnx_model_downloads_it_and_not_its_safetensors(
        hf_env, model_src, online, fake_hub):
    """A sentence-transformers repository ships onnx/model.onnx beside its safetensors: the ONNX runtime needs only
    the ONNX model (no torch on a runtime-only install), and the weights are not downloaded twice."""
    (model_src / "onnx").mkdir()
    (model_src / "onnx" / "model.onnx").write_bytes(b"onnx")
    (model_src / "onnx" / "model_qint8_avx512.onnx").write_bytes(b"not ours")  # its own int8 copy: not fetched
    fake_hub.repos["org/st"] = (OLD, model_src)
    messages: list[str] = []
    source = fetch("org/st", None, None, progress=messages.append)
    (call,) = fake_hub.calls
    assert call["allow_patterns"] == list(META_PATTERNS + ONNX_PATTERNS)
    assert (source.path / "onnx" / "model.onnx").is_file() and (source.path / "tokenizer.json").is_file()
    assert not (source.path / "model.safetensors").exists()
    assert not (source.path / "onnx" / "model_qint8_avx512.onnx").exists()
    assert "ONNX model" in messages[0]
    # cached now: the next lookup needs no request
    assert fetch("org/st", None, None).path == source.path and len(fake_hub.calls) == 1


def test_online_the_torch_backend_downloads_safetensors_even_where_an_onnx_model_is_cached(
        hf_env, model_src, online, fake_hub):
    (model_src / "onnx").mkdir()
    (model_src / "onnx" / "model.onnx").write_bytes(b"onnx")
    fake_hub.repos["org/st"] = (OLD, model_src)
    onnx_only = fetch("org/st", None, None, progress=lambda m: None)
    assert not (onnx_only.path / "model.safetensors").exists()
    source = fetch("org/st", None, None, progress=lambda m: None, weights="safetensors")
    assert source.path == onnx_only.path and (source.path / "model.safetensors").is_file()
    assert fake_hub.calls[-1]["allow_patterns"] == list(GENERIC_PATTERNS) and fake_hub.calls[-1]["revision"] == OLD


def test_offline_a_cached_onnx_only_snapshot_serves_the_onnx_runtime_but_not_torch(hf_env, model_src, fake_hub):
    (model_src / "model.safetensors").unlink()
    (model_src / "onnx").mkdir()
    (model_src / "onnx" / "model.onnx").write_bytes(b"onnx")
    save_as_hub_snapshot(model_src, hf_env, "org/st", OLD)
    assert fetch("org/st", None, None).revision == OLD
    with pytest.raises(ModelError, match=r"lacks model weights \(\*\.safetensors\)"):
        fetch("org/st", None, None, weights="safetensors")


def test_online_completing_an_unpinned_model_keeps_its_cached_commit(hf_env, model_src, online, fake_hub):
    snap = save_as_hub_snapshot(model_src, hf_env, "org/tiny", OLD)
    (snap / "model.safetensors").unlink()
    fake_hub.repos["org/tiny"] = (NEW, model_src)
    source = fetch("org/tiny", None, None, progress=lambda m: None)
    assert source.revision == OLD and (snap / "model.safetensors").is_file()
    assert fake_hub.calls[0]["revision"] == OLD


def test_online_a_repository_without_a_needed_file_is_reported(hf_env, model_src, online, fake_hub):
    (model_src / "tokenizer_config.json").unlink()
    fake_hub.repos[QWEN3.hub_id] = (NEW, model_src)
    with pytest.raises(ModelError, match=r"on the Hugging Face hub has no tokenizer_config\.json"):
        fetch(QWEN3.hub_id, QWEN3.revision, QWEN3.files, progress=lambda m: None)


def test_online_a_repository_with_pickled_weights_only_is_refused(hf_env, model_src, online, fake_hub):
    (model_src / "model.safetensors").rename(model_src / "pytorch_model.bin")
    fake_hub.repos["org/tiny"] = (OLD, model_src)
    with pytest.raises(ModelError) as err:
        fetch("org/tiny", None, None, progress=lambda m: None)
    assert "model weights (*.safetensors)" in err.value.message and "safetensors" in (err.value.hint or "")


def _hf_errors():
    from huggingface_hub import errors

    from conftest import hf_http_error, http_failures

    unreachable, timeout = http_failures()
    return {
        "gated": (hf_http_error(errors.GatedRepoError, "401 gated\ndetails", 401), "is gated"),
        "missing repo": (hf_http_error(errors.RepositoryNotFoundError, "404 Repository Not Found\ndetails"), "was not found"),
        "missing revision": (hf_http_error(errors.RevisionNotFoundError, "404 Revision Not Found"), "has no revision"),
        "network": (unreachable("Max retries exceeded\nwith url: /api/models"), "cannot be reached"),
        "timeout": (timeout("read timed out"), "did not answer in time"),
        "disk": (OSError(28, "No space left on device"), "No space left on device"),
        "hub down": (errors.LocalEntryNotFoundError("An error happened while trying\nto locate the files"),
                     "cannot download"),
        "offline at import": (errors.OfflineModeIsEnabled("offline mode is enabled"), "imported while HF_HUB_OFFLINE"),
    }


@pytest.mark.parametrize("case", list(_hf_errors()))
def test_download_failures_become_one_line_model_errors(online, fake_hub, case):
    fake_hub.error, expected = _hf_errors()[case]
    with pytest.raises(ModelError) as err:
        fetch("org/tiny", NEW, None, progress=lambda m: None)
    assert expected in err.value.message and "org/tiny" in err.value.message
    assert "\n" not in err.value.message


def test_online_with_the_hub_library_imported_offline_fails_before_any_request(monkeypatch, online, fake_hub):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelError, match="imported while HF_HUB_OFFLINE was set"):
        fetch("org/tiny", None, None)
    assert fake_hub.calls == []


# --- telemetry, lazy imports ---------------------------------------------------------------------------------


def test_telemetry_is_switched_off_unless_the_user_set_it(monkeypatch):
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", False)
    ensure_telemetry_off()
    assert os.environ["HF_HUB_DISABLE_TELEMETRY"] == "1" and constants.HF_HUB_DISABLE_TELEMETRY is True
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "0")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", False)
    ensure_telemetry_off()
    assert os.environ["HF_HUB_DISABLE_TELEMETRY"] == "0" and constants.HF_HUB_DISABLE_TELEMETRY is False


def test_fetching_a_hub_model_switches_telemetry_off_first(hf_env, model_src):
    save_as_hub_snapshot(model_src, hf_env, QWEN3.hub_id, QWEN3.revision)
    fetch(QWEN3.hub_id, QWEN3.revision, QWEN3.files)
    assert os.environ["HF_HUB_DISABLE_TELEMETRY"] == "1"


def test_hub_and_manifest_import_no_model_library_and_a_local_fetch_skips_huggingface_hub(model_src):
    code = (
        "import sys\n"
        "from puremind.models.manifest import load_manifest\n"
        "from puremind.models.hub import fetch\n"
        "load_manifest()\n"
        f"fetch({str(model_src)!r}, None, None)\n"
        "heavy = {'huggingface_hub', 'onnxruntime', 'torch', 'transformers', 'optimum', 'requests'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_TELEMETRY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"
    assert hub.LOCAL_PREFIXES == ("/", "./", "../", "~")
