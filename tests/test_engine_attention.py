"""Grouped-query attention without repeat_kv: the numbers of transformers' eager attention, and exact speculation."""
from __future__ import annotations

import pytest
import torch
from engine_helpers import random_prompt, reference_greedy, tiny_pair
from test_engine_gguf import tiny_qwen
from transformers import DynamicCache

from engine import CompletionRequest, Engine
from engine.loading.pair import LoadedPair
from engine.store.config import PairSpec
from engine.weights.attention import ATTENTION, grouped_attention, register


def models(seed: int = 3):
    register()
    eager, grouped = tiny_qwen(seed), tiny_qwen(seed)
    grouped.set_attn_implementation(ATTENTION)
    return eager, grouped


def test_whole_prompt_and_cached_passes_match_eager_attention():
    eager, grouped = models()
    ids = torch.tensor([random_prompt(4, 40)])
    with torch.no_grad():
        want, got = eager(ids).logits, grouped(ids).logits
        assert (got - want).abs().max() < 1e-4 * want.abs().max()
        for width in (1, 2, 5, 9):  # a one-token pass and verify passes over a cached prefix
            cache_e, cache_g = DynamicCache(), DynamicCache()
            eager(ids[:, :30], past_key_values=cache_e)
            grouped(ids[:, :30], past_key_values=cache_g)
            step = ids[:, 30:30 + width]
            e = eager(step, past_key_values=cache_e).logits
            g = grouped(step, past_key_values=cache_g).logits
            assert (g - e).abs().max() < 1e-4 * e.abs().max(), width
            assert (g - want[:, 30:30 + width]).abs().max() < 1e-4 * e.abs().max(), width


def test_query_heads_read_the_kv_head_repeat_kv_gives_them():
    """Each query head h reads KV head h // groups: one KV head with distinct values per position, and a query
    head whose scores pick one position, recovers that KV head's value."""
    batch, heads, kv_heads, ctx, dim = 1, 4, 2, 3, 8
    key = torch.zeros(batch, kv_heads, ctx, dim)
    value = torch.arange(kv_heads * ctx * dim, dtype=torch.float32).reshape(batch, kv_heads, ctx, dim)
    key[0, :, 1, 0] = 100.0  # every head attends to position 1
    query = torch.zeros(batch, heads, 1, dim)
    query[..., 0] = 1.0
    out, _ = grouped_attention(None, query, key, value, None, scaling=1.0)  # [b, q, heads, d]
    for head in range(heads):
        assert torch.allclose(out[0, 0, head], value[0, head // (heads // kv_heads), 1], atol=1e-3), head


@pytest.mark.parametrize("drafter", ["draft", "lookup"])
def test_speculation_is_exact_with_grouped_attention(drafter):
    _, target = models(0)
    base = tiny_pair("random")
    pair = LoadedPair(spec=PairSpec("grouped", base.spec.target, base.spec.target), target=target,
                      draft=tiny_qwen(1), tokenizer=base.tokenizer, device=torch.device("cpu"), dtype=torch.float32)
    prompt = random_prompt(7, 40, repeat=True)
    result = Engine(pair).complete(CompletionRequest(prompt, 24, drafter=drafter, max_draft_tokens=4,
                                                     adaptive_k=False))
    assert result.token_ids == reference_greedy(target, prompt, 24)
    assert result.stats.drafted > 0
