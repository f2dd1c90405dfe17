"""The lean step's native pass (engine/weights/kernels/lean_layer.cpp): a whole short pass of a float32 vnni model in
one C++ call. Same kernels, same order: the logits must be bitwise those of the layers written out in Python
(EngineOptions.lean_step "python"), a verify pass must give each token what one-token passes give, the cache must grow
under it, and models whose layers the C++ layer does not cover must keep the Python layers."""
from __future__ import annotations

import pytest
import torch
from engine_helpers import kernel_marches
from test_engine_lean_step import passes, random_prompt, tiny
from transformers.cache_utils import DynamicLayer

from engine.decode.kvcache import TrackedCache
from engine.weights import lean_step
from engine.weights.formats import apply_weight_format
from engine.weights.kv_layers import new_dynamic_cache, reserved_buffers
from engine.weights.vnni import VnniLinear


def vnni_model(weight_format: str = "vnni"):
    return apply_weight_format(tiny(), weight_format, "cpu")


def spy_on_python_layers(monkeypatch) -> list:
    calls = []
    original = lean_step.LeanLayer.__call__

    def spied(self, *args):
        calls.append(1)
        return original(self, *args)
    monkeypatch.setattr(lean_step.LeanLayer, "__call__", spied)
    return calls


def mixed_projections(model):
    """v_proj of the first layer as an int8 vnni layer: q/k/v cannot share one kernel call there."""
    attn = model.model.layers[0].self_attn
    v = attn.v_proj
    weight = torch.randn(v.out_features, v.in_features, generator=torch.Generator().manual_seed(3))
    attn.v_proj = VnniLinear.from_dense_int8(weight, torch.randn(v.out_features), torch.float32)
    return model


@pytest.mark.parametrize("build", [lambda: vnni_model("vnni"), lambda: vnni_model("vnni4"),
                                   lambda: mixed_projections(vnni_model("vnni4"))],
                         ids=["vnni", "vnni4", "unfused-qkv"])
def test_native_layers_give_the_python_layers_logits_bitwise(monkeypatch, build):
    model = build()
    prompt = random_prompt(7, 50)
    python_calls = spy_on_python_layers(monkeypatch)
    want = passes(model, "python", prompt)
    assert python_calls, "lean_step python runs the Python layers"
    python_calls.clear()
    got = passes(model, True, prompt)
    assert lean_step.lean_step_for(model).native is not None
    assert not python_calls, "every short pass went through the native layers"
    for g, w in zip(got, want):
        assert g.shape == w.shape and torch.equal(g, w)


@pytest.mark.parametrize("march", kernel_marches())
def test_a_verify_pass_gives_each_token_the_logits_of_one_token_passes(engine_options, march):
    engine_options(kernel_march=march)  # the model's layers and native layers use that build
    model = vnni_model("vnni4")
    prompt = random_prompt(8, 52)
    with torch.inference_mode():  # positions 44-48: the attention's 16-key blocks change on the way (48)
        verify = TrackedCache(model)
        verify.forward(prompt[:44], logits="none")
        wide = verify.forward(prompt[44:49])
        step = TrackedCache(model)
        step.forward(prompt[:44], logits="none")
        one_by_one = torch.cat([step.forward([token]) for token in prompt[44:49]])
    assert torch.equal(wide, one_by_one)


def test_models_without_vnni_layers_keep_the_python_layers(monkeypatch):
    for weight_format in ("dense", "int4"):
        model = apply_weight_format(tiny(), weight_format, "cpu")
        assert lean_step.lean_step_for(model).native is None
    model = vnni_model()
    model.config.hidden_act = "gelu"  # the C++ layer knows SiLU only
    assert lean_step.lean_step_for(model).native is None


def test_passes_of_prefill_width_leave_the_native_layers(monkeypatch):
    """From PREFILL_ROWS tokens on the projections may go through a prefill copy (engine/weights/formats.py): the Python
    layers, which call the modules, must run them."""
    model = vnni_model()
    calls = spy_on_python_layers(monkeypatch)
    prompt = random_prompt(9, 40)
    with torch.inference_mode():
        cache = TrackedCache(model)
        cache.forward(prompt[:20], logits="none")
        cache.forward(prompt[20:20 + lean_step.PREFILL_ROWS - 1])
        assert not calls
        cache.truncate(20)
        cache.forward(prompt[20:20 + lean_step.PREFILL_ROWS])
        assert calls


def test_a_cancel_stops_a_native_pass_between_layers_and_keeps_the_cache_valid(monkeypatch):
    model = vnni_model("vnni4")
    prompt = random_prompt(10, 50)
    asked = []

    def cancelled():
        asked.append(1)
        return len(asked) > 2  # the third layer's check stops the pass
    with torch.inference_mode():
        cache = TrackedCache(model)
        cache.forward(prompt[:40], logits="none")
        with pytest.raises(lean_step.PassCancelled):
            cache.forward(prompt[40:43], cancelled=cancelled)
        assert cache.ids == prompt[:40]
        assert all(layer.get_seq_length() == 40 for layer in cache.cache.layers)
        after = cache.forward(prompt[40:43])
        fresh = TrackedCache(model)
        fresh.forward(prompt[:40], logits="none")
        assert torch.equal(after, fresh.forward(prompt[40:43]))


def test_a_native_pass_past_the_caches_room_grows_it_and_gives_the_python_layers_logits(monkeypatch, engine_options):
    """The cache's buffers hold 256 tokens after a 250-token prefill: one-token passes on to 262 make every layer
    grow, and the native pass must write into the new buffers (reserved_buffers' lists are made again)."""
    model = vnni_model("vnni4")
    prompt = random_prompt(12, 262)

    def decode(lean: str) -> list[torch.Tensor]:
        engine_options(lean_step=lean)
        cache = TrackedCache(model)
        with torch.inference_mode():
            cache.forward(prompt[:250], logits="none")
            assert cache.cache.layers[0].buffers[0].shape[-2] == 256
            out = [cache.forward([token]) for token in prompt[250:]]
            assert cache.cache.layers[-1].buffers[0].shape[-2] > 256
        return out
    want = decode("python")
    python_calls = spy_on_python_layers(monkeypatch)
    got = decode("native")
    assert not python_calls
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_the_buffer_lists_are_kept_until_a_layer_grows():
    model = vnni_model()
    cache = new_dynamic_cache(model.config)
    like = torch.empty(1, model.config.num_key_value_heads, 1, 8)
    keys, values = reserved_buffers(cache, 10, like)
    assert len(keys) == len(values) == len(cache.layers) and keys[0].shape[-2] == 256
    again = reserved_buffers(cache, 200, like)
    assert again[0] is keys and again[1] is values  # no layer was asked again
    grown = reserved_buffers(cache, 300, like)
    assert grown[0] is not keys and all(k.shape[-2] >= 300 for k in grown[0])
    mixed = new_dynamic_cache(model.config)
    mixed.layers = [mixed.layers[0], DynamicLayer(), *mixed.layers[2:]]  # not a GrowingLayer: no native pass there
    assert reserved_buffers(mixed, 10, like) is None


def test_a_native_pass_refuses_a_token_outside_the_vocabulary_and_the_cache_stays_usable(monkeypatch):
    model = vnni_model()
    prompt = random_prompt(13, 45)
    with torch.inference_mode():
        cache = TrackedCache(model)
        cache.forward(prompt[:40], logits="none")
        with pytest.raises(RuntimeError, match="outside the vocabulary"):
            cache.forward([model.config.vocab_size + 3])
        cache.forward(prompt[:40], logits="none")  # the failed pass started the cache afresh
        fresh = TrackedCache(model)
        fresh.forward(prompt[:40], logits="none")
        assert torch.equal(cache.forward(prompt[40:42]), fresh.forward(prompt[40:42]))


def test_an_error_in_the_cancel_check_comes_out_of_a_native_pass(monkeypatch):
    model = vnni_model()

    def broken():
        raise ValueError("the cancel check broke")
    with torch.inference_mode():
        cache = TrackedCache(model)
        cache.forward(random_prompt(14, 40), logits="none")
        with pytest.raises(ValueError, match="cancel check broke"):
            cache.forward([5], cancelled=broken)
