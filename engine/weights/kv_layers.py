"""A KV cache layer that grows in place (GrowingLayer), and the lists of its buffers a whole native pass writes into
(engine/weights/lean_step.py). Apart from engine/decode/kvcache.py so that the lean step can use them without
importing the cache that calls it."""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class UsedLength:
    """A GrowingLayer's `keys` or `values`: the view of its buffer's used length, made again when read after the
    length changed. An assignment (transformers' initialisation and reset) replaces it; the other one is brought up
    to date first, so the two never disagree."""

    def __set_name__(self, owner, name: str) -> None:
        self.attribute = "_" + name

    def __get__(self, layer, owner=None):
        if layer is None:
            return self
        if layer._stale:
            layer._make_views()
        return getattr(layer, self.attribute)

    def __set__(self, layer, value) -> None:
        if layer._stale:
            layer._make_views()
        setattr(layer, self.attribute, value)


class GrowingLayer(DynamicLayer):
    """A layer's keys and values in buffers with room to spare: a pass writes its tokens in place and attends to a
    view of the used length. DynamicLayer concatenates instead, copying the whole cache at every pass (at 1,024
    tokens of context, ~58 MB a pass for the 1.5B in fp32). Truncating keeps the room.

    `keys` and `values` are views of the used length, made when read (UsedLength): the native layers
    (engine/weights/lean_step.py) commit and truncate every layer's length each pass without reading them, and making
    the two views each time cost a few percent of a draft model's step."""
    _stale = False  # the length or the buffers changed since the views were made
    growths = 0  # times any layer's buffers were replaced: lists of them (reserved_buffers) are good until the next
    keys = UsedLength()
    values = UsedLength()

    def _make_views(self) -> None:
        self._stale = False
        self._keys, self._values = (b[..., :self.length, :] for b in self.buffers)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        self._start(key_states)
        end = self.length + key_states.shape[-2]
        for buffer, new in zip(self.reserve(end, key_states), (key_states, value_states)):
            buffer[..., self.length:end, :].copy_(new)
        self.commit(end)
        return self.keys, self.values

    def _start(self, like: torch.Tensor) -> None:
        if not self.is_initialized:
            self.lazy_initialization(like, like)
            self.buffers, self.length = None, 0

    def reserve(self, end: int, like: torch.Tensor) -> list[torch.Tensor]:
        """The key and value buffers, with room for `end` tokens (like: [1, kv_heads, n, head_dim] in the cache's
        dtype). A caller that writes rows into them itself (engine/weights/lean_step.py) then calls `commit(end)`."""
        self._start(like)
        if self.buffers is None or end > self.buffers[0].shape[-2]:
            self._grow(end, like, like)
        return self.buffers

    def commit(self, end: int) -> None:
        self._set_length(end)

    def _grow(self, needed: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        # A quarter more than needed, in steps of 256: a session's tokens arrive one pass at a time.
        held = self.buffers[0].shape[-2] if self.buffers is not None else 0
        capacity = -(-max(needed, held + held // 4) // 256) * 256
        grown = []
        for i, new in enumerate((key_states, value_states)):
            buffer = new.new_empty((*new.shape[:-2], capacity, new.shape[-1]))
            if self.buffers is not None:
                buffer[..., :self.length, :].copy_(self.buffers[i][..., :self.length, :])
            grown.append(buffer)
        self.buffers, self._stale = grown, True
        GrowingLayer.growths += 1

    def _set_length(self, length: int) -> None:
        self.length, self._stale = length, True

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count: the tokens to remove")
        if tokens_to_remove and self.is_initialized and self.buffers is not None:
            self._set_length(max(self.length + tokens_to_remove, 0))


def reserved_buffers(cache: DynamicCache, end: int, like: torch.Tensor) -> tuple[list, list] | None:
    """Every layer's key and value buffers with room for `end` tokens, as two lists (a whole native pass's arguments,
    engine/weights/lean_step.py); None where a layer is not a GrowingLayer. The lists are kept on the cache until a
    layer grows (or the cache's list of layers is replaced): making them asks every layer, a Python call each,
    between two passes that stream the weights."""
    held = getattr(cache, "codecue_buffers", None)
    if held is not None and held[0] == GrowingLayer.growths and end <= held[1] and held[2] is cache.layers:
        return held[3], held[4]
    if not all(isinstance(layer, GrowingLayer) for layer in cache.layers):
        return None
    buffers = [layer.reserve(end, like) for layer in cache.layers]
    keys, values = [b[0] for b in buffers], [b[1] for b in buffers]
    cache.codecue_buffers = (GrowingLayer.growths, min(k.shape[-2] for k in keys), cache.layers, keys, values)
    return keys, values


def commit_all(cache: DynamicCache, end: int) -> None:
    for layer in cache.layers:
        layer.commit(end)


def new_dynamic_cache(config) -> DynamicCache:
    """transformers' DynamicCache with GrowingLayer in place of each plain DynamicLayer."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
