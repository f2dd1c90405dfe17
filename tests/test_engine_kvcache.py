"""GrowingLayer: the KV cache layer that writes in place instead of concatenating must hold exactly what
transformers' DynamicLayer holds, through every update and crop, and a model must compute the same numbers on it."""
from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

from engine.kvcache import GrowingLayer, TrackedCache, new_dynamic_cache
from engine_helpers import random_prompt, tiny_model

# (tokens added, or a negative crop): across the first buffer's 256 tokens and its growth by a quarter and more
STEPS = [5, 1, 1, -2, 9, 300, -100, 1, 600, -700, 4, 40]


def test_a_growing_layer_holds_what_a_dynamic_layer_holds_through_updates_and_crops():
    gen = torch.Generator().manual_seed(0)
    ours, theirs = GrowingLayer(), DynamicLayer()
    buffers_seen = set()
    for step in STEPS:
        if step < 0:
            ours.crop(step)
            theirs.crop(step)
        else:
            keys, values = torch.randn(1, 2, step, 8, generator=gen), torch.randn(1, 2, step, 8, generator=gen)
            got = ours.update(keys, values)
            want = theirs.update(keys, values)
            assert all(torch.equal(g, w) for g, w in zip(got, want))
        buffers_seen.add(ours.buffers[0].data_ptr())
        assert ours.get_seq_length() == theirs.get_seq_length()
        assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)
        assert ours.buffers[0].shape[-2] % 256 == 0 and ours.buffers[0].shape[-2] >= ours.get_seq_length()
    assert 1 < len(buffers_seen) < len(STEPS)  # grown a few times, not at every update; a crop keeps the room


def test_a_model_computes_the_same_logits_on_either_cache():
    from transformers import DynamicCache

    model = tiny_model(2, 0)
    prompt = random_prompt(7, 300)
    growing = TrackedCache(model)
    plain = TrackedCache(model, cache=DynamicCache(config=model.config))
    assert isinstance(growing.cache.layers[0], GrowingLayer) and type(plain.cache.layers[0]) is DynamicLayer
    with torch.inference_mode():
        for cache in (growing, plain):
            cache.extend_to(prompt[:280])
        for ids in ([1, 2, 3], [4], list(range(5, 14))):
            assert torch.equal(growing.forward(ids), plain.forward(ids))
            growing.truncate(281)
            plain.truncate(281)
    assert isinstance(new_dynamic_cache(model.config).layers[0], GrowingLayer)
