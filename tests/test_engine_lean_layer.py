"""The lean step's native layers (engine/kernels/lean_layer.cpp): each decoder layer of a short pass of a float32
vnni model in one C++ call. Same kernels, same order: the logits must be bitwise those of the layer written out in
Python (CODECUE_LEAN=python), a verify pass must give each token what one-token passes give, and models whose
layers the C++ layer does not cover must keep the Python layers."""
from __future__ import annotations

import pytest
import torch

from engine import lean_step
from engine.kvcache import TrackedCache
from engine.quant import apply_weight_format
from engine.vnni import VnniLinear

from engine_helpers import kernel_marches
from test_engine_lean_step import passes, random_prompt, tiny


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
    want = passes(model, "python", monkeypatch, prompt)
    assert python_calls, "CODECUE_LEAN=python runs the Python layers"
    python_calls.clear()
    got = passes(model, "1", monkeypatch, prompt)
    assert lean_step.lean_step_for(model).native is not None
    assert not python_calls, "every short pass went through the native layers"
    for g, w in zip(got, want):
        assert g.shape == w.shape and torch.equal(g, w)


@pytest.mark.parametrize("march", kernel_marches())
def test_a_verify_pass_gives_each_token_the_logits_of_one_token_passes(monkeypatch, march):
    monkeypatch.setenv("CODECUE_LEAN", "1")
    monkeypatch.setenv("CODECUE_KERNEL_MARCH", march)  # the model's layers and native layers use that build
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
    monkeypatch.setenv("CODECUE_LEAN", "1")
    for weight_format in ("dense", "int4"):
        model = apply_weight_format(tiny(), weight_format, "cpu")
        assert lean_step.lean_step_for(model).native is None
    model = vnni_model()
    model.config.hidden_act = "gelu"  # the C++ layer knows SiLU only
    assert lean_step.lean_step_for(model).native is None


def test_passes_of_prefill_width_leave_the_native_layers(monkeypatch):
    """From PREFILL_ROWS tokens on the projections may go through a prefill copy (engine/quant.py): the Python
    layers, which call the modules, must run them."""
    monkeypatch.setenv("CODECUE_LEAN", "1")
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
    monkeypatch.setenv("CODECUE_LEAN", "1")
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
