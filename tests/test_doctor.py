"""`puremind doctor`: every check ends as an ok, warn or fail line (never a traceback), exit 0 or 2, and --json."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import write
from puremind import cli, doctor
from puremind.config import DEFAULT_EMBEDDER_REVISION, DEFAULT_RERANKER_REVISION

EMBEDDER_KEY = "qwen3-embedding-0.6b"
RERANKER_KEY = "bge-reranker-v2-m3"


@pytest.fixture(autouse=True)
def _own_home_and_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Agent configs are read from HOME and the working folder: both are the test's own."""
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return user


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.run(["doctor", *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def checks(capsys, *args: str) -> tuple[int, list[dict]]:
    code, out, _ = run(capsys, "--json", *args)
    return code, json.loads(out)["checks"]


def find(found: list[dict], section: str, name: str | None = None, status: str | None = None) -> list[dict]:
    return [c for c in found if c["section"] == section and (name is None or c["name"] == name)
            and (status is None or c["status"] == status)]


def one(found: list[dict], section: str, name: str) -> dict:
    matches = find(found, section, name)
    assert len(matches) == 1, (section, name, found)
    return matches[0]


def indexed(capsys, vault: Path) -> None:
    assert cli.run(["init", str(vault)]) == 0
    assert cli.run(["index"]) == 0
    capsys.readouterr()


def semantic(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default embedder and reranker configured (nothing is loaded: the doctor only reads)."""
    monkeypatch.delenv("PUREMIND_EMBED_MODEL")


def export_variant(home: Path, variant: str, fidelity: dict | None, *, key: str = EMBEDDER_KEY,
                   revision: str = DEFAULT_EMBEDDER_REVISION, raw: str | None = None) -> Path:
    folder = home / "models" / f"{key}@{revision[:12]}" / variant
    folder.mkdir(parents=True)
    meta = {"variant": variant, "files": {}}
    if fidelity is not None:
        meta["fidelity"] = fidelity
    (folder / "puremind_model.json").write_text(raw if raw is not None else json.dumps(meta), encoding="utf-8")
    return folder


def set_meta(db: Path, **values: str) -> None:
    con = sqlite3.connect(db)
    with con:
        for key, value in values.items():
            con.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (key, value))
    con.close()


# -- the whole report ---------------------------------------------------------------------------------------------


def test_a_fresh_home_without_config_or_index_reports_what_is_missing_and_exits_2(capsys, puremind_home):
    code, out, err = run(capsys)
    assert code == 2
    assert "config and vault" in out and "hint: run `puremind init <vault_dir>`" in out
    code, found = checks(capsys)
    assert code == 2
    assert one(found, "config", "config file")["status"] == "warn"
    assert one(found, "config", "vault")["status"] == "fail"
    index = one(found, "index", "index file")
    assert index["status"] == "fail" and "puremind index" in index["hint"]
    assert one(found, "models", "models")["status"] == "ok"  # embedder = "none" in the tests
    assert {c["name"]: c["status"] for c in find(found, "agents")} == {"claude-code": "warn", "codex": "warn",
                                                                        "cursor": "warn", "redaction": "ok"}
    assert one(found, "watch", "watch")["status"] == "ok"
    assert not (puremind_home / "index.sqlite").exists()  # the doctor creates nothing
    assert not (puremind_home / "index.sqlite.lock").exists()


def test_a_working_setup_exits_0_and_counts_notes_chunks_and_the_last_run(capsys, vault, puremind_home):
    indexed(capsys, vault)
    code, out, _ = run(capsys)
    assert code == 0, out
    code, found = checks(capsys)
    assert code == 0
    assert one(found, "config", "config file")["status"] == "ok"
    assert one(found, "config", "vault")["figures"]["notes"] == 3
    assert one(found, "index", "integrity")["status"] == "ok"
    contents = one(found, "index", "contents")
    assert contents["status"] == "ok" and contents["figures"]["notes"] == 3 and contents["figures"]["chunks"] >= 3
    assert contents["figures"]["vectors"] == 0
    assert "keyword search only" in one(found, "index", "embedder")["message"]
    assert one(found, "index", "last run")["status"] == "ok"
    assert not find(found, "watch", "index lock")


def test_json_carries_the_same_statuses_as_the_text(capsys, vault):
    indexed(capsys, vault)
    code_text, out, _ = run(capsys)
    code_json, found = checks(capsys)
    assert code_text == code_json
    statuses = [line.split()[0] for line in out.splitlines() if line.startswith("  ") and not line.startswith("        ")]
    assert statuses == [c["status"] for c in found]
    assert all(set(c) >= {"section", "name", "status", "message", "hint", "figures"} for c in found)


def test_an_unexpected_error_in_a_section_is_one_fail_line_not_a_traceback(capsys, monkeypatch):
    def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr(doctor, "_privacy_checks", broken)
    code, found = checks(capsys)
    assert code == 2
    line = one(found, "privacy", "error")
    assert line["status"] == "fail" and "RuntimeError: boom" in line["message"]


def test_doctor_imports_neither_onnxruntime_nor_torch(tmp_path, vault):
    home = tmp_path / "subhome"
    export_variant(home, "int8", {"status": "ok", "figures": {"min_cosine": 0.99}})
    code = (
        "import sys, io, contextlib\n"
        "import puremind.cli as c\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    rc = c.run(['doctor', '--json'])\n"
        "bad = [m for m in ('onnxruntime', 'torch', 'transformers', 'tokenizers', 'huggingface_hub') if m in sys.modules]\n"
        "print(rc, bad, len(__import__('json').loads(buf.getvalue())['checks']) > 5)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUREMIND_")}
    env.update(PUREMIND_HOME=str(home), PUREMIND_VAULT=str(vault))  # the default models configured
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert time.monotonic() - started < 10
    assert out.split(" ", 1)[1].strip() == "[] True"


# -- config and vault ---------------------------------------------------------------------------------------------


def test_a_broken_config_toml_is_a_fail_line_and_the_rest_is_still_checked(capsys, puremind_home, vault):
    indexed(capsys, vault)
    (puremind_home / "config.toml").write_text("vault = [unclosed\n", encoding="utf-8")
    code, out, err = run(capsys)
    assert code == 2 and "Traceback" not in out + err
    code, found = checks(capsys)
    config = one(found, "config", "config file")
    assert config["status"] == "fail" and "broken config file" in config["message"]
    assert one(found, "index", "integrity")["status"] == "ok"  # the default index path is still looked at


def test_an_unknown_key_in_config_toml_is_a_fail_line_naming_it(capsys, puremind_home):
    puremind_home.mkdir()
    (puremind_home / "config.toml").write_text("[models]\nembeder = \"x\"\n", encoding="utf-8")
    code, found = checks(capsys)
    config = one(found, "config", "config file")
    assert code == 2 and config["status"] == "fail" and "embeder" in config["message"]


def test_a_bad_environment_setting_is_a_fail_line(capsys, monkeypatch):
    monkeypatch.setenv("PUREMIND_THREADS", "many")
    code, found = checks(capsys)
    config = one(found, "config", "config file")
    assert code == 2 and config["status"] == "fail" and "PUREMIND_THREADS" in config["message"]


def test_a_missing_vault_fails(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PUREMIND_VAULT", str(tmp_path / "gone"))
    code, found = checks(capsys)
    assert one(found, "config", "vault")["status"] == "fail" and "does not exist" in one(found, "config", "vault")["message"]


def test_a_vault_that_is_a_file_fails(capsys, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("PUREMIND_VAULT", str(tmp_path / "file"))
    _, found = checks(capsys)
    assert one(found, "config", "vault")["status"] == "fail"


def test_an_empty_vault_warns(capsys, tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PUREMIND_VAULT", str(tmp_path / "empty"))
    _, found = checks(capsys)
    assert one(found, "config", "vault")["status"] == "warn"


def test_a_vault_too_slow_to_walk_warns_instead_of_waiting(capsys, vault, monkeypatch):
    monkeypatch.setenv("PUREMIND_VAULT", str(vault))
    monkeypatch.setattr(doctor, "WALK_SECONDS", 0.05)
    monkeypatch.setattr(doctor, "_walk", lambda root: time.sleep(1))
    _, found = checks(capsys)
    line = one(found, "config", "vault")
    assert line["status"] == "warn" and "still counting" in line["message"]


def test_vault_folders_that_cannot_be_listed_warn(capsys, vault, monkeypatch):
    monkeypatch.setenv("PUREMIND_VAULT", str(vault))
    monkeypatch.setattr(doctor, "_walk", lambda root: (2, {}, ["private"]))
    _, found = checks(capsys)
    assert one(found, "config", "vault folders")["status"] == "warn"


# -- index --------------------------------------------------------------------------------------------------------


def test_a_corrupt_index_file_is_a_fail_line(capsys, puremind_home, vault):
    indexed(capsys, vault)
    db = puremind_home / "index.sqlite"
    for side in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        side.unlink(missing_ok=True)
    db.write_bytes(os.urandom(8192))
    code, out, err = run(capsys)
    assert code == 2 and "Traceback" not in out + err
    _, found = checks(capsys)
    line = one(found, "index", "integrity")
    assert line["status"] == "fail" and "not a pureMind index" in line["message"] and line["hint"]


def test_an_index_path_that_is_a_folder_fails(capsys, puremind_home):
    (puremind_home / "index.sqlite").mkdir(parents=True)
    _, found = checks(capsys)
    assert one(found, "index", "index file")["status"] == "fail"


def test_another_programs_sqlite_file_fails(capsys, puremind_home):
    puremind_home.mkdir()
    con = sqlite3.connect(puremind_home / "index.sqlite")
    con.execute("CREATE TABLE other (x)")
    con.commit()
    con.close()
    _, found = checks(capsys)
    line = one(found, "index", "schema")
    assert line["status"] == "fail" and "not a pureMind index" in line["message"]


def test_an_index_from_a_newer_pureMind_fails(capsys, puremind_home, vault):
    indexed(capsys, vault)
    con = sqlite3.connect(puremind_home / "index.sqlite")
    with con:
        con.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)")
    con.close()
    _, found = checks(capsys)
    assert one(found, "index", "schema")["status"] == "fail"


def test_a_quick_check_that_runs_too_long_warns(capsys, vault, monkeypatch):
    indexed(capsys, vault)
    monkeypatch.setattr(doctor, "QUICK_CHECK_SECONDS", -1.0)
    real = doctor._open_ro

    def slow_handler_every_op(db):
        conn = real(db)
        original = conn.set_progress_handler

        class Wrapped:
            def __getattr__(self, name):
                return getattr(conn, name)

            def set_progress_handler(self, handler, n):
                original(handler, 1 if handler is not None else n)

        return Wrapped()

    monkeypatch.setattr(doctor, "_open_ro", slow_handler_every_op)
    _, found = checks(capsys)
    assert one(found, "index", "integrity")["status"] == "warn"


def test_an_index_without_notes_warns(capsys, puremind_home):
    from puremind.store import Store

    Store.open(puremind_home / "index.sqlite").close()
    _, found = checks(capsys)
    assert one(found, "index", "contents")["status"] == "warn"


def test_a_keyword_only_index_with_an_embedder_configured_warns(capsys, vault, monkeypatch):
    indexed(capsys, vault)
    semantic(monkeypatch)
    _, found = checks(capsys)
    line = one(found, "index", "embedder")
    assert line["status"] == "warn" and "no vectors" in line["message"]


def test_vectors_of_another_embedder_fail_naming_both(capsys, vault, puremind_home, monkeypatch):
    indexed(capsys, vault)
    db = puremind_home / "index.sqlite"
    set_meta(db, embed_fingerprint="other/model@" + "a" * 40 + "|pool=mean|norm=1|q=x|p=y|max=512")
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE chunks SET vector = x'0000'")
    con.close()
    semantic(monkeypatch)
    code, found = checks(capsys)
    line = one(found, "index", "embedder")
    assert code == 2 and line["status"] == "fail"
    assert "other/model" in line["message"] and "Qwen/Qwen3-Embedding-0.6B" in line["message"]
    assert "--rebuild" in line["hint"]


def test_chunks_without_vectors_under_the_configured_embedder_warn(capsys, vault, puremind_home, monkeypatch):
    from puremind.config import load_settings
    from puremind.models.loader import configured_fingerprint
    from puremind.services import model_choice

    indexed(capsys, vault)
    semantic(monkeypatch)
    db = puremind_home / "index.sqlite"
    set_meta(db, embed_fingerprint=configured_fingerprint(model_choice(load_settings(), "embedder")),
             embed_precision="int8")
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE chunks SET vector = x'0000' WHERE id = (SELECT min(id) FROM chunks)")
    con.close()
    _, found = checks(capsys)
    line = one(found, "index", "embedder")
    assert line["status"] == "warn" and "have none" in line["message"] and "(int8)" in line["message"]


def test_an_index_of_another_vault_warns(capsys, vault, puremind_home):
    indexed(capsys, vault)
    set_meta(puremind_home / "index.sqlite", vault="/somewhere/else")
    _, found = checks(capsys)
    assert one(found, "index", "indexed vault")["status"] == "warn"


# -- models -------------------------------------------------------------------------------------------------------


def test_models_not_exported_warn_with_the_export_hint(capsys, monkeypatch):
    semantic(monkeypatch)
    _, found = checks(capsys)
    for role in ("embedder", "reranker"):
        line = one(found, "models", role)
        assert line["status"] == "warn" and "puremind export-models" in line["hint"]


def test_exported_variants_show_their_fidelity_and_the_variant_that_serves(capsys, puremind_home, monkeypatch):
    semantic(monkeypatch)
    export_variant(puremind_home, "fp32", {"status": "ok", "figures": {"min_cosine": 0.999, "mean_cosine": 0.9995}})
    export_variant(puremind_home, "int8", {"status": "kept-out", "figures": {"min_cosine": 0.8},
                                           "shortfalls": ["min_cosine 0.8 < 0.95"]})
    export_variant(puremind_home, "fp16", None)
    export_variant(puremind_home, "coreml", {"status": "pending", "reason": "Core ML runs on macOS only"})
    export_variant(puremind_home, "int8", None, key=RERANKER_KEY, revision=DEFAULT_RERANKER_REVISION, raw="{not json")
    _, found = checks(capsys)
    serving = one(found, "models", "embedder")
    assert serving["status"] == "ok" and serving["figures"]["cpu_variant"] == "fp32"
    assert one(found, "models", "embedder fp32")["status"] == "ok"
    kept = one(found, "models", "embedder int8")
    assert kept["status"] == "warn" and "min_cosine 0.8 < 0.95" in kept["message"]
    assert "[models] variant" in kept["hint"]
    unchecked = one(found, "models", "embedder fp16")
    assert unchecked["status"] == "warn" and "puremind export-models" in unchecked["hint"]
    assert one(found, "models", "embedder coreml")["status"] == "ok"
    assert one(found, "models", "reranker int8")["status"] == "warn"  # unreadable metadata


def test_every_variant_kept_out_fails(capsys, puremind_home, monkeypatch):
    semantic(monkeypatch)
    export_variant(puremind_home, "int8", {"status": "kept-out", "shortfalls": ["x"]})
    code, found = checks(capsys)
    assert code == 2 and one(found, "models", "embedder")["status"] == "fail"


def test_a_forced_variant_that_is_not_exported_warns(capsys, puremind_home, monkeypatch):
    semantic(monkeypatch)
    monkeypatch.setenv("PUREMIND_VARIANT", "fp16")
    export_variant(puremind_home, "int8", {"status": "ok"})
    _, found = checks(capsys)
    assert one(found, "models", "embedder")["status"] == "warn"


def test_an_unreadable_models_folder_fails_without_a_traceback(capsys, puremind_home, monkeypatch):
    semantic(monkeypatch)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("puremind.models.artefacts.list_variants", denied)
    code, found = checks(capsys)
    line = one(found, "models", "embedder")
    assert code == 2 and line["status"] == "fail" and "Permission denied" in line["message"]


def test_a_missing_onnxruntime_fails(capsys, monkeypatch):
    import importlib.util

    semantic(monkeypatch)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    _, found = checks(capsys)
    assert one(found, "models", "runtime")["status"] == "fail"


def test_a_provider_that_disagrees_warns_naming_it(capsys, puremind_home, monkeypatch):
    from puremind.models.provider_check import machine_id

    semantic(monkeypatch)
    here = hashlib.sha256(machine_id().encode()).hexdigest()[:12]
    cache = {
        f"abc|CUDAExecutionProvider|1.22|{here}": {"ok": False, "provider": "CUDAExecutionProvider", "variant": "fp16",
                                                    "model": "Qwen/Qwen3-Embedding-0.6B", "figures": {"min_cosine": 0.7},
                                                    "shortfalls": ["min_cosine 0.7 < 0.95"]},
        f"def|CPUExecutionProvider|1.22|{here}": {"ok": True, "provider": "CPUExecutionProvider", "variant": "int8",
                                                   "model": "BAAI/bge-reranker-v2-m3", "figures": {"max_abs_dprob": 0.01},
                                                   "shortfalls": []},
        "ghi|CUDAExecutionProvider|1.22|othermachine": {"ok": False, "provider": "CUDAExecutionProvider",
                                                        "model": "Qwen/Qwen3-Embedding-0.6B"},
    }
    (puremind_home / "models").mkdir(parents=True)
    (puremind_home / "models" / ".provider-checks.json").write_text(json.dumps(cache), encoding="utf-8")
    _, found = checks(capsys)
    verdicts = find(found, "models", "provider")
    assert [v["status"] for v in verdicts] == ["warn", "ok"]
    assert "CUDAExecutionProvider" in verdicts[0]["message"] and "CPU" in verdicts[0]["message"]


# -- privacy ------------------------------------------------------------------------------------------------------


def test_telemetry_switches_are_on_after_puremind_sets_them(capsys, monkeypatch):
    monkeypatch.delenv("HF_HUB_DISABLE_TELEMETRY", raising=False)
    _, found = checks(capsys)
    assert one(found, "privacy", "ORT_DISABLE_TELEMETRY")["status"] == "ok"
    assert one(found, "privacy", "HF_HUB_DISABLE_TELEMETRY")["status"] == "ok"


def test_telemetry_turned_on_by_the_user_warns(capsys, monkeypatch):
    monkeypatch.setenv("ORT_DISABLE_TELEMETRY", "0")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "0")
    _, found = checks(capsys)
    assert one(found, "privacy", "ORT_DISABLE_TELEMETRY")["status"] == "warn"
    assert one(found, "privacy", "HF_HUB_DISABLE_TELEMETRY")["status"] == "warn"


def test_hf_variables_are_listed_and_a_token_is_never_printed(capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secretvalue123")
    monkeypatch.setenv("HF_ENDPOINT", "https://mirror.example")
    code, out, _ = run(capsys)
    assert "hf_secretvalue123" not in out
    _, found = checks(capsys)
    assert one(found, "privacy", "HF_TOKEN")["status"] == "ok"
    assert "hf_secretvalue123" not in json.dumps(found)
    assert one(found, "privacy", "HF_ENDPOINT")["status"] == "warn"
    assert one(found, "privacy", "HF_HUB_OFFLINE")["message"] == "HF_HUB_OFFLINE=1"


# -- agents -------------------------------------------------------------------------------------------------------


def test_registered_agents_are_ok_in_each_config_format(capsys, _own_home_and_folder, tmp_path):
    user = _own_home_and_folder
    exe = tmp_path / "bin" / "puremind"
    exe.parent.mkdir()
    exe.write_text("")
    (user / ".claude.json").write_text(json.dumps(
        {"projects": {str(Path.cwd()): {"mcpServers": {"notes": {"command": str(exe), "args": ["serve"]}}}}}))
    write(user, ".codex/config.toml", f'[mcp_servers.puremind]\ncommand = "python"\nargs = ["-m", "puremind", "serve"]\n')
    write(Path.cwd(), ".cursor/mcp.json", json.dumps({"mcpServers": {"pm": {"command": str(exe), "args": ["serve"]}}}))
    _, found = checks(capsys)
    for agent in ("claude-code", "codex", "cursor"):
        assert one(found, "agents", agent)["status"] == "ok", found


def test_a_project_mcp_json_counts_for_claude_code(capsys):
    Path(".mcp.json").write_text(json.dumps({"mcpServers": {"puremind": {"command": "puremind", "args": ["serve"]}}}))
    _, found = checks(capsys)
    assert one(found, "agents", "claude-code")["status"] == "ok"


def test_an_invalid_agent_config_warns_and_is_left_alone(capsys, _own_home_and_folder):
    path = _own_home_and_folder / ".cursor" / "mcp.json"
    path.parent.mkdir()
    path.write_text("{not json")
    write(_own_home_and_folder, ".codex/config.toml", "mcp_servers = [")
    _, found = checks(capsys)
    assert one(found, "agents", "cursor")["status"] == "warn" and "cannot read" in one(found, "agents", "cursor")["message"]
    assert one(found, "agents", "codex")["status"] == "warn"
    assert path.read_text() == "{not json"


def test_a_registration_whose_command_is_gone_warns(capsys, _own_home_and_folder):
    (_own_home_and_folder / ".claude.json").write_text(json.dumps(
        {"mcpServers": {"puremind": {"command": "/nowhere/bin/puremind", "args": ["serve"]}}}))
    _, found = checks(capsys)
    line = one(found, "agents", "claude-code")
    assert line["status"] == "warn" and "/nowhere/bin/puremind" in line["message"]


def test_other_mcp_servers_do_not_count(capsys, _own_home_and_folder):
    (_own_home_and_folder / ".claude.json").write_text(json.dumps({"mcpServers": {"git": {"command": "git-mcp"}}}))
    _, found = checks(capsys)
    line = one(found, "agents", "claude-code")
    assert line["status"] == "warn" and "puremind connect claude-code" in line["hint"]


# -- watch --------------------------------------------------------------------------------------------------------


def test_a_held_index_lock_is_reported_as_a_run_in_progress(capsys, vault, puremind_home):
    from puremind.indexer import IndexLock

    indexed(capsys, vault)
    with IndexLock(puremind_home / "index.sqlite"):
        _, found = checks(capsys)
    assert one(found, "watch", "index lock")["status"] == "ok"
    _, found = checks(capsys)  # released again: the doctor did not keep it
    assert not find(found, "watch", "index lock")


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_a_running_watch_for_this_index_is_found(capsys, puremind_home):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "puremind", "watch"],
                             env={**os.environ})
    try:
        _, found = checks(capsys)
    finally:
        child.kill()
        child.wait()
    line = one(found, "watch", "watch")
    assert line["status"] == "ok" and child.pid in line["figures"]["pids"]


# -- speed --------------------------------------------------------------------------------------------------------


def test_speed_with_keyword_search_only_has_nothing_to_time(capsys):
    _, found = checks(capsys, "--speed")
    assert one(found, "speed", "speed")["status"] == "ok"


def test_speed_without_exported_models_warns_instead_of_exporting(capsys, puremind_home, monkeypatch):
    semantic(monkeypatch)
    _, found = checks(capsys, "--speed")
    assert one(found, "speed", "embedder")["status"] == "warn"
    assert one(found, "speed", "reranker")["status"] == "warn"
    assert not (puremind_home / "models").exists()


def test_speed_times_the_models_it_is_given(capsys, vault, monkeypatch, fake_embedder):
    import numpy as np

    class FakeReranker:
        precision = "int8"

        def score(self, query, passages, **kwargs):
            return np.zeros(len(passages))

    indexed(capsys, vault)
    semantic(monkeypatch)
    monkeypatch.setattr("puremind.models.lazy.Models.embedder", lambda self: fake_embedder)
    monkeypatch.setattr("puremind.models.lazy.Models.reranker", lambda self: FakeReranker())
    _, found = checks(capsys, "--speed")
    embed = one(found, "speed", "embedder")
    assert embed["status"] == "ok" and embed["figures"]["passages_per_s"] > 0 and embed["figures"]["chunks"] >= 3
    rerank = one(found, "speed", "reranker")
    assert rerank["status"] == "ok" and rerank["figures"]["pairs_per_s"] > 0


def test_the_speed_sample_spreads_over_the_whole_vault():
    from puremind.doctor import _sample_notes

    notes = [(f"n{i}.md", [f"note {i} chunk {j}" for j in range(2)]) for i in range(100)]
    picked = _sample_notes(notes, 32)
    assert sum(len(texts) for _, texts in picked) == 32
    numbers = [int(rel[1:-3]) for rel, _ in picked]
    assert numbers[0] == 0 and numbers[-1] >= 90 and numbers == sorted(set(numbers))
    assert _sample_notes(notes[:5], 32) == notes[:5]
