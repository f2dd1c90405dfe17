"""The weight arena (engine/weights/weight_arena.py): a short pass's vnni weights moved into one block of memory in the
order the pass reads them. The bytes must not change (logits bitwise those of the weights where they were loaded),
views of one storage must stay views of one copy, and nothing in the model may keep the old storages."""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch
from test_engine_lean_step import passes, random_prompt, tiny

from engine.weights import lean_step, weight_arena
from engine.weights.formats import apply_weight_format
from engine.weights.vnni import VnniLinear


def owner(packed, d, m):
    return SimpleNamespace(packed=packed, d=d, m=m)


def arena_range(tensors) -> tuple[int, int]:
    starts = [t.untyped_storage().data_ptr() for t in tensors]
    assert len(set(starts)) == 1, "all in one storage"
    return starts[0], starts[0] + tensors[0].untyped_storage().nbytes()


def test_the_arena_holds_the_same_bytes_and_keeps_views_of_one_storage_together():
    base = torch.arange(1000, dtype=torch.int16)
    scales = torch.randn(37)
    first = owner(base[:500], scales, base[500:])  # two views of one storage, and another tensor
    second = owner(base[100:300].view(10, 20), scales[3:], torch.arange(7, dtype=torch.uint8))
    want = [t.clone() for o in (first, second) for t in (o.packed, o.d, o.m)]
    size = weight_arena.move_into_arena([first, second])
    got = [t for o in (first, second) for t in (o.packed, o.d, o.m)]
    assert all(g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w) for g, w in zip(got, want))
    start, end = arena_range(got)
    assert size == 2048 + 192 + 64  # each storage once (2,000 + 148 + 7 bytes), each start on 64 bytes
    assert all(start <= t.data_ptr() < end and t.data_ptr() % weight_arena.ALIGN == 0 for t in (first.packed, first.d,
                                                                                             second.m))
    # views of one storage stay views of one copy: a write through one shows through the other
    first.packed[100] = -7
    assert second.packed[0, 0] == -7
    # in the owners' order: the first owner's storage first
    assert first.packed.data_ptr() < first.d.data_ptr() < second.m.data_ptr()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="2 MB pages are asked for on Linux only")
def test_the_arena_starts_on_a_huge_page_boundary():
    block = weight_arena.allocate(3 << 20)
    assert block.data_ptr() % weight_arena.HUGE_PAGE == 0 and block.numel() == 3 << 20
    block[-1] = 5  # every byte of it is usable
    assert block[-1] == 5


def test_nothing_to_move_gives_an_empty_arena():
    assert weight_arena.move_into_arena([]) == 0


def vnni_tensors(model) -> list[torch.Tensor]:
    return [t for m in model.modules() if type(m) is VnniLinear for t in (m.packed, m.d, m.m)]


def test_the_lean_step_moves_every_vnni_weight_in_pass_order_and_gives_the_same_logits(engine_options):
    prompt = random_prompt(11, 50)
    engine_options(weight_arena=False)
    loaded = apply_weight_format(tiny(), "vnni4", "cpu")
    want = passes(loaded, True, prompt)
    assert len({t.untyped_storage().data_ptr() for t in vnni_tensors(loaded)}) > 3  # where they were loaded

    engine_options(weight_arena=True)
    model = apply_weight_format(tiny(), "vnni4", "cpu")
    got = passes(model, True, prompt)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    step = lean_step.lean_step_for(model)
    start, end = arena_range(vnni_tensors(model) + [layer.qkv.packed for layer in step.layers])
    assert all(start <= t.data_ptr() < end for t in vnni_tensors(model))  # no module keeps an old storage
    reads = [p for layer in step.layers for p in (layer.qkv.packed, layer.o.packed, layer.gate_up.packed,
                                                  layer.down.packed)] + [model.lm_head.packed]
    assert [p.data_ptr() for p in reads] == sorted(p.data_ptr() for p in reads)  # as the pass reads them
    attn = model.model.layers[0].self_attn  # the modules prefill calls view the fused copy
    assert attn.q_proj.packed.data_ptr() == step.layers[0].qkv.packed.data_ptr()
