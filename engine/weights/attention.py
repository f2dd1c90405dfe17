"""Grouped-query attention without copying keys and values: transformers' eager attention for CPU passes.

transformers' eager attention first expands the key/value heads to one per query head (`repeat_kv`: the 1.5B's 2
KV heads become 12, a full copy of the cache every layer of every pass), then multiplies. At 1,000 tokens of context
that copying was a noticeable share of a one-token pass on a Zen 5. Here the query
heads that share a KV head are stacked as rows of one matrix instead, so each KV head is multiplied once, in place.
Same arithmetic per (query, key) pair as eager attention; registered under ATTENTION for `attn_implementation`.
"""
from __future__ import annotations

import torch
from torch import nn

ATTENTION = "codecue_grouped"


def grouped_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0, **kwargs):
    """query [b, heads, q, d]; key/value [b, kv_heads, ctx, d]; query head h reads KV head h // groups (as
    repeat_kv lays them out). Returns ([b, q, heads, d], None)."""
    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    rows = query.reshape(batch, kv_heads, groups * q_len, dim)  # the query heads of one KV head, stacked
    scores = torch.matmul(rows, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        mask = attention_mask[:, :, None, :, : key.shape[-2]]  # [b, 1, 1, q, ctx]: the same for every head
        scores = (scores.view(batch, kv_heads, groups, q_len, -1) + mask).view(batch, kv_heads, groups * q_len, -1)
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs, value)  # [b, kv_heads, groups * q, d]
    return out.view(batch, heads, q_len, dim).transpose(1, 2).contiguous(), None


def register() -> str:
    """Make ATTENTION a valid `attn_implementation` (idempotent); its masks are eager attention's."""
    from transformers import AttentionInterface
    from transformers.masking_utils import (
        ALL_MASK_ATTENTION_FUNCTIONS,
        AttentionMaskInterface,
    )

    AttentionInterface.register(ATTENTION, grouped_attention)
    AttentionMaskInterface.register(ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["eager"])
    return ATTENTION
