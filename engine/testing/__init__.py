"""A tiny model pair built from nothing, for tests of the engine, the server, the replay harness and the editors.

`build_tiny_pair(home)` writes a byte-level BPE tokenizer (with the Qwen FIM/stop special tokens) and two tiny
random Qwen2-architecture models into the same cache layout that `codecue-models fetch` produces, plus a
models.toml naming the pair "tiny". Point CODECUE_HOME and CODECUE_MODELS_TOML at them and every tool loads it.

    python -m engine.testing DIR     # builds DIR/home and DIR/models.toml, prints the two env lines
"""
from __future__ import annotations

import inspect
from pathlib import Path

from engine.store.config import model_dir, write_ready_marker

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                  "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
TINY_VOCAB = 384
TINY_TARGET = "tiny-target"
TINY_DRAFT = "tiny-draft"

TINY_TOML = """\
[fim.tiny]
prefix = "<|fim_prefix|>"
suffix = "<|fim_suffix|>"
middle = "<|fim_middle|>"
file_sep = "<|file_sep|>"
repo_name = "<|repo_name|>"

[models.tiny-target]
family = "tiny"
fim = "tiny"
stop_token_ids = [0, 1, 2, 3, 4, 5, 6, 7]

[models.tiny-draft]
family = "tiny"
fim = "tiny"
stop_token_ids = [0, 1, 2, 3, 4, 5, 6, 7]

[pairs.tiny]
target = "tiny-target"
draft = "tiny-draft"
description = "random tiny Qwen2 models for tests"
# Pinned so the tests are deterministic and skip calibration (tests/test_engine_calibrate.py covers "auto").
target_weights = "dense"
draft_weights = "dense"
activations = "float32"
"""


def training_corpus() -> list[str]:
    """Stable text to train the tiny tokenizer: Python source of a few standard-library modules."""
    import json  # noqa: E401  (their source is the corpus)
    import string
    import textwrap

    return [inspect.getsource(m) for m in (string, textwrap, json.encoder)]


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TINY_VOCAB, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|fim_pad|>",
                                   additional_special_tokens=SPECIAL_TOKENS[1:])


def tiny_config(vocab_size: int, layers: int, hidden: int = 64):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=8192, tie_word_embeddings=True, use_sliding_window=False,
                       bos_token_id=0, eos_token_id=0, pad_token_id=5)


def build_tiny_model(vocab_size: int, layers: int, seed: int, hidden: int = 64):
    """A random Qwen2 model in fp32. Larger init than the default so greedy output is not one repeated token."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = tiny_config(vocab_size, layers, hidden)
    config.initializer_range = 0.2
    model = Qwen2ForCausalLM(config).eval()
    return model


def write_gguf(model, tokenizer, path: Path | str, linear_type: str = "F32") -> Path:
    """A transformers Qwen2 model (and its tokenizer) as an F32 GGUF that llama.cpp loads: the tensor names and
    metadata of llama.cpp's own converter for qwen2 (no Q/K permutation: both use the NeoX rotary layout).
    linear_type "Q8_0": the layers' linear weights quantized (the type llama.cpp repacks, AMX included)."""
    import json

    import gguf
    import numpy as np

    config, path = model.config, Path(path)
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    bpe = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    tokens = [None] * len(tokenizer)
    for text, i in {**bpe["vocab"], **{t.content: i for i, t in tokenizer.added_tokens_decoder.items()}}.items():
        tokens[i] = text
    special = set(tokenizer.added_tokens_decoder)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
                            for i in range(len(tokens))])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_bos_token_id(tokenizer.eos_token_id)
    names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for name, tensor in model.state_dict().items():
        array = tensor.detach().float().numpy().astype(np.float32)
        if name == "model.embed_tokens.weight":
            gguf_name = "token_embd.weight"
        elif name == "model.norm.weight":
            gguf_name = "output_norm.weight"
        elif name == "lm_head.weight":
            if config.tie_word_embeddings:
                continue
            gguf_name = "output.weight"
        else:
            _, _, layer, rest = name.split(".", 3)  # model.layers.N.<module>.<weight|bias>
            module, kind = rest.rsplit(".", 1)
            gguf_name = f"blk.{layer}.{names[module]}.{kind}"
        if linear_type != "F32" and gguf_name.startswith("blk.") and array.ndim == 2:
            qtype = gguf.GGMLQuantizationType[linear_type]
            writer.add_tensor(gguf_name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
            continue
        writer.add_tensor(gguf_name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def build_tiny_pair(root: Path | str, seed: int = 0) -> tuple[Path, Path]:
    """Write the tiny pair under root/home and root/models.toml. Returns (home, toml_path)."""

    root = Path(root)
    home, toml_path = root / "home", root / "models.toml"
    tokenizer = build_tokenizer()
    vocab = len(tokenizer)
    for name, layers, model_seed in ((TINY_TARGET, 2, seed), (TINY_DRAFT, 1, seed + 1)):
        out = model_dir(name, home)
        out.mkdir(parents=True, exist_ok=True)
        build_tiny_model(vocab, layers, model_seed).save_pretrained(out)
        tokenizer.save_pretrained(out)
        write_ready_marker(name, {"source": "engine.testing.build_tiny_pair", "seed": model_seed}, home)
    toml_path.write_text(TINY_TOML)
    return home, toml_path
