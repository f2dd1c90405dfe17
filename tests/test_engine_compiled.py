"""Compiled static steps: the same logits as the eager dynamic-cache passes, padding that leaves no trace, a
session that outgrows its static cache, and speculation that stays exact on compiled models."""
from __future__ import annotations

import pytest
import torch
from engine_helpers import random_prompt, reference_greedy, tiny_pair, tiny_tokenizer

from engine import CompletionRequest, Engine
from engine.decode.kvcache import TrackedCache
from engine.loading.pair import compile_wanted
from engine.testing import build_tiny_model
from engine.weights.compiled import (
    CompiledSteps,
    CuttableStaticCache,
    attach,
    crop_static_layer,
)

WIDTHS = (1, 4)  # each width is one compile (tens of seconds on 2 cores): keep the set small


@pytest.fixture(scope="module")
def compiled_pair(tmp_path_factory):
    vocab = len(tiny_tokenizer())
    target, draft = build_tiny_model(vocab, 2, 0), build_tiny_model(vocab, 1, 1)
    home = tmp_path_factory.mktemp("home")
    assert attach(target, WIDTHS, capacity=256, home=home, label="target")
    assert attach(draft, (1,), capacity=256, last_only=True, home=home, label="draft")
    return target, draft


def eager_logits(model, prefix: list[int], new: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([prefix + new]), use_cache=False).logits[0, len(prefix):].float()


def check_pass(cache: TrackedCache, prompt: list[int], start: int, n: int, logits: str = "all") -> None:
    """One pass over prompt[start:start + n] after prompt[:start] gives eager's logits and keeps exactly those ids."""
    new = prompt[start:start + n]
    got = cache.forward(new, logits=logits)
    want = eager_logits(cache.model, prompt[:start], new)
    want = want if logits == "all" else want[-1:]
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-4), n
    assert cache.ids == prompt[:start + n]


def test_compiled_passes_match_eager_at_every_width_with_padding(compiled_pair):
    target, _ = compiled_pair
    prompt = random_prompt(3, 40)
    cache = TrackedCache(target)
    assert isinstance(cache.steps, CompiledSteps)
    with torch.inference_mode():
        cache.extend_to(prompt[:30])
        for n in (1, 2, 3, 4, 5):  # 2 and 3 are padded to 4; 5 has no compiled width and runs eagerly
            check_pass(cache, prompt, 30, n)
            assert int(cache.cache.get_seq_length()) == 30 + n  # padding dropped
            cache.truncate(30)


def test_draft_step_keeps_only_the_last_position(compiled_pair):
    _, draft = compiled_pair
    prompt = random_prompt(4, 20)
    cache = TrackedCache(draft)
    with torch.inference_mode():
        cache.extend_to(prompt[:17])
        for n in (1, 3):  # one token (compiled), three tokens (eager)
            check_pass(cache, prompt, 17, n, logits="last")
            cache.truncate(17)


def test_a_session_past_the_static_capacity_moves_to_a_dynamic_cache(compiled_pair):
    target, _ = compiled_pair
    prompt = random_prompt(5, 300)
    cache = TrackedCache(target)
    with torch.inference_mode():
        cache.extend_to(prompt[:235])
        assert cache.steps is not None
        check_pass(cache, prompt, 235, 10)  # 245 + 16 > 256: no longer fits
        assert cache.steps is None


def test_a_gone_sessions_static_cache_serves_the_next_one_empty(compiled_pair):
    # CUDA graphs are recorded per cache address: a new cache per session would leave recordings behind.
    target, _ = compiled_pair
    prompt = random_prompt(6, 60)
    steps = target.codecue_steps
    with torch.inference_mode():
        first, second = TrackedCache(target), TrackedCache(target)
        assert first.cache is not second.cache  # live sessions never share
        first.extend_to(prompt[:40])
        recycled, pooled = first.cache, len(steps.pool)
        del first
        third = TrackedCache(target)
        assert third.cache is recycled and len(steps.pool) == pooled
        assert int(third.cache.get_seq_length()) == 0
        third.extend_to(prompt[:20])
        check_pass(third, prompt, 20, 4)  # its old contents leave no trace

        moved = TrackedCache(target)  # a session that outgrows its static cache gives it back
        static = moved.cache
        moved.extend_to(random_prompt(7, 250))
        assert moved.steps is None and TrackedCache(target).cache is static


@pytest.mark.parametrize("drafter,k", [("none", 0), ("draft", 3), ("lookup", 8)])
def test_speculation_on_compiled_models_equals_target_alone(compiled_pair, drafter, k):
    target, draft = compiled_pair
    base = tiny_pair("random")
    pair = type(base)(spec=base.spec, target=target, draft=draft, tokenizer=base.tokenizer, device=base.device,
                      dtype=torch.float32)
    engine = Engine(pair)
    for seed in (1, 2):
        prompt = random_prompt(seed, 48, repeat=True)
        result = engine.complete(CompletionRequest(prompt, 20, drafter=drafter, max_draft_tokens=max(k, 1),
                                                   adaptive_k=False, session="doc"))
        with torch.inference_mode():
            assert result.token_ids == reference_greedy(target, prompt, 20), (drafter, seed)


def test_compile_failure_falls_back_to_eager(monkeypatch, caplog):
    model = build_tiny_model(len(tiny_tokenizer()), 1, 2)

    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler")
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: broken)
    assert attach(model, (1,), capacity=64, label="target") is False
    assert not hasattr(model, "codecue_steps")
    assert "running eagerly" in caplog.text
    cache = TrackedCache(model)
    with torch.inference_mode():
        assert cache.forward([10, 11, 12]).shape[0] == 3


def test_static_layer_is_cut_back_in_place_as_transformers_5_24_does():
    # The lent GPU's transformers (5.17) has no StaticLayer.crop; engine/weights/compiled.py supplies the same cut.
    from transformers import StaticCache

    config = build_tiny_model(64, 1, 0).config
    ours, theirs = (StaticCache(config=config, max_cache_len=16).layers[0] for _ in range(2))
    states = torch.randn(1, config.num_key_value_heads, 5, config.hidden_size // config.num_attention_heads)
    for layer in (ours, theirs):
        layer.update(states, states)
    address = ours.keys.data_ptr()
    crop_static_layer(ours, -2)
    theirs.crop(-2)
    assert int(ours.get_seq_length()) == int(theirs.get_seq_length()) == 3
    assert ours.keys.data_ptr() == address  # CUDA graphs read the cache at a fixed address
    with pytest.raises(ValueError, match="negative"):
        crop_static_layer(ours, 2)


def test_a_cut_moves_every_layer_back_in_one_op():
    config = build_tiny_model(64, 2, 0).config
    cache = CuttableStaticCache(config=config, max_cache_len=16)
    states = torch.randn(1, config.num_key_value_heads, 7, config.hidden_size // config.num_attention_heads)
    for layer in cache.layers:
        layer.update(states, states)
    cache.crop(-3)
    assert [int(layer.get_seq_length()) for layer in cache.layers] == [4] * len(cache.layers)
    cache.crop(0)
    assert int(cache.get_seq_length()) == 4
    with pytest.raises(ValueError, match="negative"):
        cache.crop(1)


# (pair's `compile` in models.toml, CODECUE_COMPILE as EngineOptions.compile, device) -> compiled steps
COMPILE_CASES = [
    (None, None, "cuda", True),  # a GPU: CUDA graphs (one-token pass 16.4 -> 3.3 ms on an H200)
    (None, None, "cpu", False),  # CPU: the calibrated kernels and the lean step (docs/performance.md)
    (True, None, "cpu", True),
    (False, None, "cuda", False),
    (None, False, "cuda", False),
    (False, True, "cpu", True),
    (True, False, "cuda", False),
]


@pytest.mark.parametrize("pair_setting, setting, device, wanted", COMPILE_CASES)
def test_compiled_steps_by_default_on_a_gpu_only(pair_setting, setting, device, wanted):
    assert compile_wanted(pair_setting, setting, device) is wanted
