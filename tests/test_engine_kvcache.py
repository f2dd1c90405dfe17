"""GrowingLayer: the KV cache layer that writes in place instead of concatenating must hold exactly what
transformers' DynamicLayer holds, through every update and crop, and a model must compute the same numbers on it."""
from __future__ import annotations

import torch
from engine_helpers import random_prompt, tiny_model
from transformers.cache_utils import DynamicLayer

from engine.decode.kvcache import TrackedCache
from engine.weights.kv_layers import GrowingLayer, new_dynamic_cache

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


def test_keys_and_values_follow_the_length_when_a_pass_writes_the_buffers_itself():
    """The native layers reserve room, write their rows into the buffers and commit the length without reading
    keys/values (engine/weights/lean_step.py); the views made when read must show exactly the committed rows, also after
    the buffers grow, a crop, and transformers' reset."""
    layer, like = GrowingLayer(), torch.zeros(1, 2, 3, 8)
    k_buf, v_buf = layer.reserve(3, like)
    k_buf[..., :3, :], v_buf[..., :3, :] = 1.0, 2.0
    layer.commit(3)
    assert layer.keys.shape[-2] == 3 and (layer.keys == 1).all() and (layer.values == 2).all()
    k_buf, v_buf = layer.reserve(400, like)  # past the first 256: new, larger buffers holding the 3 rows
    k_buf[..., 3:400, :], v_buf[..., 3:400, :] = 3.0, 4.0
    layer.commit(400)
    assert layer.keys.data_ptr() == k_buf.data_ptr() and layer.values.data_ptr() == v_buf.data_ptr()
    assert layer.keys.shape[-2] == 400 and (layer.keys[..., :3, :] == 1).all() and (layer.values[..., 3:, :] == 4).all()
    layer.crop(-390)
    layer.keys = layer.buffers[0][..., :10, :]  # an assignment while the views are stale: values still follow
    assert layer.get_seq_length() == 10 and layer.values.shape[-2] == 10
    layer.reset()
    assert layer.keys is None and layer.values is None and not layer.is_initialized
    got = layer.update(torch.ones(1, 2, 2, 8), torch.ones(1, 2, 2, 8))
    assert all(t.shape[-2] == 2 for t in got) and layer.get_seq_length() == 2
