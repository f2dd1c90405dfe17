"""Quantized weights straight from a GGUF: Q4_K blocks become torch's int4 group-32 layers with the same numbers,
other types fall back to int8 (or int4), and speculation stays exact against the target in that format."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from engine_helpers import (
    kernel_marches,
    random_prompt,
    reference_greedy,
    tiny_pair,
    tiny_tokenizer,
)

from engine import CompletionRequest, Engine
from engine.loading.pair import LoadedPair
from engine.store.config import PairSpec
from engine.weights.formats import apply_weight_format, canonical_format
from engine.weights.gguf import (
    dequantize,
    hf_module_name,
    linear_from_gguf,
    q4k_to_affine,
)
from engine.weights.quantized import Int4Linear, Int8Linear, quantize_groups_int4

HIDDEN, FFN, LAYERS = 256, 512, 2  # Q4_K needs rows of whole 256-weight super-blocks


def random_q4k(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Valid Q4_K bytes: small positive fp16 d and dmin, random 6-bit scales/mins and 4-bit quants."""
    n = rows * cols // 256
    blocks = rng.integers(0, 256, size=(n, 144), dtype=np.uint8)
    blocks[:, 0:2] = rng.uniform(0.001, 0.004, n).astype(np.float16).view(np.uint8).reshape(n, 2)
    blocks[:, 2:4] = rng.uniform(0.0005, 0.002, n).astype(np.float16).view(np.uint8).reshape(n, 2)
    return blocks.reshape(rows, cols // 256 * 144)


def tiny_qwen(seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tiny_tokenizer()), hidden_size=HIDDEN, intermediate_size=FFN,
                         num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                         tie_word_embeddings=False, use_sliding_window=False, initializer_range=0.2)
    return Qwen2ForCausalLM(config).eval()


def write_gguf(path, model, rng) -> dict[str, np.ndarray]:
    """Q4_K for attention and gate/up, Q8_0 for down, F32 for the rest (skipped by the loader). Returns the
    reference float weights per module name, from gguf-py's own dequantization."""
    import gguf
    from gguf.quants import quantize

    writer = gguf.GGUFWriter(str(path), "qwen2")
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, LAYERS)
    for name, tensor in model.state_dict().items():
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        rows, cols = tensor.shape if tensor.dim() == 2 else (0, 0)
        if name.endswith("down_proj.weight"):
            data = quantize(tensor.float().numpy(), gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(gguf_name, data, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        elif name.endswith("_proj.weight") and cols % 256 == 0:
            writer.add_tensor(gguf_name, random_q4k(rows, cols, rng),
                              raw_dtype=gguf.GGMLQuantizationType.Q4_K)
        else:
            writer.add_tensor(gguf_name, tensor.detach().float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader = gguf.GGUFReader(str(path))
    return {hf_module_name(t.name): dequantize(t) for t in reader.tensors if hf_module_name(t.name)}


@pytest.fixture(scope="module")
def gguf_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-q4k.gguf"
    model = tiny_qwen()
    reference = write_gguf(path, model, np.random.default_rng(0))
    return path, reference


def test_tensor_names_map_to_modules():
    cases = {"blk.3.attn_q.weight": "model.layers.3.self_attn.q_proj",
             "blk.0.ffn_down.weight": "model.layers.0.mlp.down_proj",
             "output.weight": "lm_head", "blk.1.attn_q.bias": None, "token_embd.weight": None,
             "blk.2.attn_norm.weight": None}
    for name, want in cases.items():
        assert hf_module_name(name) == want, name


def test_q4k_unpacks_to_exactly_gguf_pys_numbers(gguf_model):
    import gguf

    path, _ = gguf_model
    tensor = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.0.ffn_up.weight")
    assert tensor.tensor_type == gguf.GGMLQuantizationType.Q4_K
    q, scale, minimum = q4k_to_affine(tensor.data, FFN, HIDDEN)
    assert q.shape == (FFN, HIDDEN)  # its values are 4-bit by construction (uint8 & 0x0F): the next line checks them
    rebuilt = np.repeat(scale, 32, axis=1) * q - np.repeat(minimum, 32, axis=1)
    assert np.array_equal(rebuilt.astype(np.float32), dequantize(tensor))


@pytest.mark.parametrize("act", [torch.float32, torch.bfloat16])
def test_int4_layer_from_q4k_computes_with_the_files_weights(gguf_model, act):
    import gguf

    path, reference = gguf_model
    tensor = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.1.attn_q.weight")
    layer = linear_from_gguf(tensor, None, None, "int8", act)
    assert isinstance(layer, Int4Linear)
    x = torch.randn(5, HIDDEN)
    want = x @ torch.from_numpy(reference["model.layers.1.self_attn.q_proj"]).t()
    got = layer(x.to(act)).float()
    # The only rounding is the scales' (and bf16 activations'): far below one 4-bit step of the grid.
    tolerance = 0.003 if act == torch.float32 else 0.03
    assert (got - want).abs().max() < tolerance * want.abs().max()


def test_requantizing_the_dense_weights_is_worse_than_reading_the_file(gguf_model):
    """The point of reading Q4_K directly: a fresh int4 grid over the same (dequantized) weights loses more."""
    import gguf

    path, reference = gguf_model
    tensor = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "blk.0.ffn_gate.weight")
    weight = torch.from_numpy(reference["model.layers.0.mlp.gate_proj"])
    x = torch.randn(8, HIDDEN)
    want = x @ weight.t()
    direct = linear_from_gguf(tensor, None, None, "int8", torch.float32)(x)
    requantized = Int4Linear(*quantize_groups_int4(weight, 64), 64, None, torch.float32)(x)
    assert (direct - want).abs().max() < (requantized - want).abs().max()


@pytest.mark.parametrize("weight_format,fallback_type", [("gguf", Int8Linear), ("int4", Int4Linear)])
def test_whole_model_from_gguf(gguf_model, weight_format, fallback_type):
    path, reference = gguf_model
    model = tiny_qwen()
    dense = tiny_qwen()  # the same architecture holding the file's (dequantized) numbers, in plain fp32 layers
    with torch.no_grad():
        for name, weight in reference.items():
            dense.get_submodule(name).weight.copy_(torch.from_numpy(weight.copy()))
    apply_weight_format(model, weight_format, "cpu", path)
    layers = model.model.layers
    assert isinstance(layers[0].self_attn.q_proj, Int4Linear)
    assert isinstance(layers[1].mlp.down_proj, fallback_type)  # Q8_0 in the file
    assert isinstance(model.lm_head, torch.nn.Linear)  # F32 in this file: not a quantized tensor, kept as is
    ids = torch.tensor([random_prompt(1, 32)])
    with torch.inference_mode():
        want, got = dense(input_ids=ids).logits, model(input_ids=ids).logits
    assert (want.argmax(-1) == got.argmax(-1)).float().mean() > 0.9
    assert (want - got).abs().max() < 0.1 * want.abs().max()


def test_unknown_format_names_the_known_ones():
    with pytest.raises(ValueError, match="int3.*dense, int8, gguf, int4"):
        canonical_format("int3")
    assert canonical_format("bf16") == "dense" and canonical_format("q4_k") == "gguf"


@pytest.mark.parametrize("weight_format", ["gguf", "vnni"])  # torch's int4 kernel; CodeCue's own (engine/weights/vnni.py)
@pytest.mark.parametrize("k", [1, 3, 8])
def test_speculation_is_exact_against_the_target_in_gguf_format(gguf_model, k, weight_format):
    """Lossless is defined against the target alone in its own format: fp32 activations, int4 kernels."""
    path, _ = gguf_model
    target = apply_weight_format(tiny_qwen(), weight_format, "cpu", path)
    draft = apply_weight_format(tiny_qwen(1), "int4", "cpu")  # an unrelated draft in another format
    base = tiny_pair("random")
    pair = LoadedPair(spec=PairSpec("q4k", base.spec.target, base.spec.target), target=target, draft=draft,
                      tokenizer=base.tokenizer, device=torch.device("cpu"), dtype=torch.float32)
    prompt = random_prompt(7, 40, repeat=True)
    want = reference_greedy(target, prompt, 24)
    for drafter in ("draft", "lookup"):
        result = Engine(pair).complete(CompletionRequest(prompt, 24, drafter=drafter, max_draft_tokens=k,
                                                         adaptive_k=False))
        assert result.token_ids == want, drafter
        assert result.stats.drafted > 0


@pytest.mark.parametrize("weight_format", ["gguf", "int4", "int8", "vnni", "vnni4"])
def test_format_cache_round_trip_gives_the_same_model(gguf_model, tmp_path, weight_format):
    from engine.weights.formats import format_cache_file, load_formatted, save_formatted

    path, _ = gguf_model
    model = apply_weight_format(tiny_qwen(), weight_format, "cpu", path if weight_format != "int8" else None)
    cached = format_cache_file(tmp_path, weight_format, torch.float32)
    save_formatted(model, cached)
    restored = load_formatted(tiny_qwen(5), cached)  # other random weights: everything must come from the file
    ids = torch.tensor([random_prompt(2, 24)])
    with torch.inference_mode():
        assert torch.equal(model(input_ids=ids).logits, restored(input_ids=ids).logits)
    assert restored.model.layers[0].self_attn.q_proj.bias is not None  # Qwen2's q/k/v biases survive
    # The packed kernels use aligned vector loads: views at arbitrary offsets of the file segfaulted the real pair.
    assert all(b.data_ptr() % 64 == 0 for b in restored.buffers() if b is not None and b.numel())


def test_load_pair_builds_the_format_once_then_reads_the_cache(tmp_path, monkeypatch, engine_options):
    from engine.loading.pair import load_pair
    from engine.testing import build_tiny_pair
    from engine.weights import formats as quant

    home, toml = build_tiny_pair(tmp_path)
    engine_options(models_toml=toml)
    first = load_pair("tiny", home=home, target_weights="int4", draft_weights="int8", dtype="float32")
    assert list((home / "models" / "tiny-target" / "formats").glob("int4-float32-*.safetensors"))

    def must_not_quantize(*args, **kwargs):
        raise AssertionError("quantized again instead of reading the format cache")
    monkeypatch.setattr(quant, "apply_weight_format", must_not_quantize)
    second = load_pair("tiny", home=home, target_weights="int4", draft_weights="int8", dtype="float32")
    ids = torch.tensor([random_prompt(3, 20)])
    with torch.inference_mode():
        assert torch.equal(first.target(input_ids=ids).logits, second.target(input_ids=ids).logits)
        assert torch.equal(first.draft(input_ids=ids).logits, second.draft(input_ids=ids).logits)


def test_prefill_chunks_use_the_dense_copy_and_steps_the_quantized_kernel(gguf_model):
    from engine.weights.quantized import (
        PREFILL_ROWS,
        dense_linear_weights,
        set_prefill_weights,
    )

    path, _ = gguf_model
    dense_model = tiny_qwen()
    dense = {k: v.clone() for k, v in dense_linear_weights(dense_model).items()}
    plain = apply_weight_format(tiny_qwen(), "gguf", "cpu", path)
    split = apply_weight_format(tiny_qwen(), "gguf", "cpu", path)
    quantized = [m for m in split.modules() if isinstance(m, (Int4Linear, Int8Linear))]
    assert set_prefill_weights(split, dense) == len(quantized) > 0
    layer, plain_layer = split.model.layers[0].mlp.up_proj, plain.model.layers[0].mlp.up_proj
    short, long_ = torch.randn(PREFILL_ROWS - 1, HIDDEN), torch.randn(PREFILL_ROWS, HIDDEN)
    assert torch.equal(layer(short), plain_layer(short))  # steps: the int4 kernel, untouched
    want = torch.nn.functional.linear(long_, dense["model.layers.0.mlp.up_proj"])
    assert torch.allclose(layer(long_), want, atol=1e-5)  # prefill chunks: the dense weights
    assert not torch.allclose(plain_layer(long_), want, atol=1e-5)
    assert not any("prefill_weight" in k for k in split.state_dict())  # never written to the format cache
    assert set_prefill_weights(split, None) == 0 and torch.equal(layer(long_), plain_layer(long_))


# gguf: a dense copy for prefill; vnni: an int8 copy, prefill in W8A8 (engine/weights/formats.py:
# set_prefill_weights); the vnni pair also through the AVX2 build of the kernel (x86-64-v3), where this CPU has
# AVX-512.
@pytest.mark.parametrize("weight_format,draft_format,march",
                         [("gguf", "int4", "native"), ("vnni", "vnni4", "native")]
                         + [("vnni", "vnni4", march) for march in kernel_marches()[1:]])
def test_speculation_with_a_prefill_copy_equals_target_alone_in_the_same_layout(gguf_model, weight_format,
                                                                                 draft_format, march, engine_options):
    from engine.weights.quantized import dense_linear_weights, set_prefill_weights

    engine_options(kernel_march=march)
    path, _ = gguf_model
    target = tiny_qwen()
    dense = {k: v.clone() for k, v in dense_linear_weights(target).items()}
    assert set_prefill_weights(apply_weight_format(target, weight_format, "cpu", path), dense) > 0
    base = tiny_pair("random")
    pair = LoadedPair(spec=PairSpec("q4k", base.spec.target, base.spec.target), target=target,
                      draft=apply_weight_format(tiny_qwen(1), draft_format, "cpu"), tokenizer=base.tokenizer,
                      device=torch.device("cpu"), dtype=torch.float32)
    engine = Engine(pair)
    for seed in (3, 4):
        prompt = random_prompt(seed, 60, repeat=True)
        alone = engine.complete(CompletionRequest(prompt, 24, drafter="none"))
        for drafter, k in (("draft", 4), ("lookup", 8)):
            result = engine.complete(CompletionRequest(prompt, 24, drafter=drafter, max_draft_tokens=k,
                                                       adaptive_k=False))
            assert result.token_ids == alone.token_ids, (seed, drafter)
            assert result.stats.drafted > 0
