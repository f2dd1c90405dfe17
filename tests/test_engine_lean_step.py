"""The lean step (engine/weights/lean_step.py): short passes written out around the same modules and cache. It must give
transformers' logits, keep the cache as transformers would, fuse vnni projections without storing weights twice,
and stop between layers on a cancel."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine import options
from engine.decode.kvcache import TrackedCache
from engine.interrupt import PassCancelled
from engine.testing import build_tiny_model
from engine.weights import lean_step
from engine.weights.attention import register
from engine.weights.formats import apply_weight_format

VOCAB = 320  # a multiple of 16, as torch's int4 packing wants for the output head


def random_prompt(seed: int, length: int) -> list[int]:
    return torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def tiny(seed: int = 0, dtype=torch.float32):
    model = build_tiny_model(VOCAB, 3, seed=seed)
    model.config._attn_implementation = register()
    return model.to(dtype)


def passes(model, lean: bool | str, prompt: list[int]) -> list[torch.Tensor]:
    """Prefill 40 tokens, then one-token, four-token and last-only passes (as decoding and verification run).
    lean: on, off (transformers' forward), or an EngineOptions.lean_step value."""
    options.use(replace(options.current(), lean_step=lean if isinstance(lean, str) else "native" if lean else "off"))
    cache = TrackedCache(model)
    with torch.inference_mode():
        cache.forward(prompt[:40], logits="none")
        out = [cache.forward(prompt[40:41]), cache.forward(prompt[41:45]), cache.forward(prompt[45:46], "last")]
        cache.truncate(41)  # a rejected draft's keys and values dropped, then decoding goes on
        out.append(cache.forward(prompt[41:43]))
    return out


@pytest.mark.parametrize("weight_format", ["dense", "int8", "int4", "vnni", "vnni4"])
def test_lean_passes_give_transformers_logits(monkeypatch, weight_format):
    model = apply_weight_format(tiny(), weight_format, "cpu")
    prompt = random_prompt(4, 50)
    want = passes(model, False, prompt)
    got = passes(model, True, prompt)
    assert lean_step.lean_step_for(model) is not None
    for g, w in zip(got, want):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_lean_passes_in_bfloat16_stay_within_its_rounding(monkeypatch):
    model = tiny(dtype=torch.bfloat16)
    prompt = random_prompt(5, 50)
    want = passes(model, False, prompt)
    got = passes(model, True, prompt)
    for g, w in zip(got, want):
        assert (g - w).abs().max() <= 0.05 * w.abs().max()
        assert torch.equal(g.argmax(-1), w.argmax(-1))


def test_vnni_projections_are_fused_into_views_of_one_buffer(monkeypatch):
    model = apply_weight_format(tiny(), "vnni", "cpu")
    attn = model.model.layers[0].self_attn
    before = [m.packed.clone() for m in (attn.q_proj, attn.k_proj, attn.v_proj)]
    step = lean_step.lean_step_for(model)
    fused = step.layers[0].qkv
    assert fused.out_features == attn.q_proj.out_features + 2 * attn.k_proj.out_features
    start = fused.packed.data_ptr()
    assert attn.q_proj.packed.data_ptr() == start  # views, not copies: no weight stored twice
    assert start < attn.k_proj.packed.data_ptr() < attn.v_proj.packed.data_ptr()
    assert all(torch.equal(b, m.packed) for b, m in zip(before, (attn.q_proj, attn.k_proj, attn.v_proj)))
    # q/k/v in one call give what the three calls give (each output channel is computed on its own)
    x = torch.randn(3, attn.q_proj.in_features)
    with torch.inference_mode():
        assert torch.equal(fused(x), torch.cat([attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)], dim=-1))


def test_a_cancel_stops_a_lean_pass_between_layers_and_keeps_the_cache_valid(monkeypatch):
    model = tiny()
    prompt = random_prompt(6, 50)
    cache = TrackedCache(model)
    asked = []

    def cancelled():
        asked.append(1)
        return len(asked) > 1  # the second layer's check stops the pass
    with torch.inference_mode():
        cache.forward(prompt[:40], logits="none")
        with pytest.raises(PassCancelled):
            cache.forward(prompt[40:42], cancelled=cancelled)
        assert len(asked) == 2 and cache.ids == prompt[:40]
        assert all(layer.get_seq_length() == 40 for layer in cache.cache.layers)
        after = cache.forward(prompt[40:42])
        fresh = TrackedCache(model)
        fresh.forward(prompt[:40], logits="none")
        assert torch.equal(after, fresh.forward(prompt[40:42]))


def test_the_step_is_rebuilt_after_a_dtype_change_and_can_be_turned_off(engine_options):
    model = tiny()
    first = lean_step.lean_step_for(model)
    assert lean_step.lean_step_for(model) is first
    model.to(torch.bfloat16)
    assert lean_step.lean_step_for(model) is not first
    engine_options(lean_step="off")
    assert lean_step.lean_step_for(model) is None


def test_models_it_does_not_handle_run_through_transformers(monkeypatch):
    model = tiny()
    model.config.use_sliding_window = True
    assert lean_step.lean_step_for(model) is None


@pytest.mark.parametrize("hidden, heads", [(64, 4), (896, 14), (1536, 12)])  # the tiny model's, the 0.5B's, the 1.5B's
def test_rope_rows_come_from_a_table_bitwise_the_rotary_modules(hidden, heads):
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RotaryEmbedding

    config = Qwen2Config(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=2,
                         max_position_embeddings=32768, rope_theta=1000000.0)
    step = lean_step.LeanStep.__new__(lean_step.LeanStep)  # only its rope table: no model needed
    step.rotary, step._rope_table = Qwen2RotaryEmbedding(config), None
    x = torch.zeros(1, hidden)
    for start, n in [(0, 1), (40, 4), (299, 9), (1020, 9), (1023, 1), (5000, 16), (3, 2)]:
        cos, sin = step.rope(x, start, n)
        want_cos, want_sin = step.rotary(x, torch.arange(start, start + n)[None])
        assert torch.equal(cos, want_cos[0]) and torch.equal(sin, want_sin[0]), (start, n)
    # the table doubled to cover position 5015 once, and is not rebuilt for positions it holds
    table = step._rope_table
    assert table[0].shape[0] == 8192
    step.rope(x, 100, 8)
    assert step._rope_table is table
    # another activation dtype gets its own table
    cos, _ = step.rope(x.to(torch.bfloat16), 7, 2)
    assert cos.dtype == torch.bfloat16
    assert torch.equal(cos, step.rotary(x.to(torch.bfloat16), torch.arange(7, 9)[None])[0][0])
