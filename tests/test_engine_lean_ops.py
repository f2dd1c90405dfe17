"""The C++ attention of short passes (engine/weights/kernels/lean_ops.cpp, decode_attention): grouped-query attention of
n new tokens over the KV cache, each seeing the keys up to its own position. Checked against torch's arithmetic for
head widths that take the 16-key blocks (multiples of 16; the AVX2 path's 8-key blocks) and one that does not,
contexts with and without a partial last block; and each row must be bitwise what a one-token pass at its position
computes (the lossless invariant: a verify pass scores each token as decoding it would). Both vector paths are
checked where the CPU has AVX-512: its own build and the AVX2 build (x86-64-v3) of a CPU without it. The MLP's
silu(gate) * up (silu_mul) is checked against torch's SiLU the same way."""
from __future__ import annotations

import pytest
import torch
from engine_helpers import kernel_marches

from engine.weights import vnni


def reference(q, keys, values, scaling):
    """torch: q [n, heads, d], keys/values [1, kv, L, d]; token t sees keys 0 .. L - n + t."""
    n, heads, d = q.shape
    kv, length = keys.shape[1], keys.shape[2]
    k = keys[0].repeat_interleave(heads // kv, dim=0)  # [heads, L, d]
    v = values[0].repeat_interleave(heads // kv, dim=0)
    scores = torch.einsum("thd,hld->htl", q.double(), k.double()) * scaling
    seen = torch.arange(length)[None, :] <= (length - n + torch.arange(n))[:, None]  # [n, L]
    scores = scores.masked_fill(~seen[None], float("-inf"))
    out = torch.einsum("htl,hld->thd", scores.softmax(-1), v.double())
    return out.reshape(n, heads * d).float()


def cache(kv: int, length: int, d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    room = length + 7  # buffers with room to spare, as the cache keeps them: views of the used length
    keys, values = torch.randn(1, kv, room, d, generator=g), torch.randn(1, kv, room, d, generator=g)
    return keys[:, :, :length], values[:, :, :length]


@pytest.mark.parametrize("march", kernel_marches())  # every vector path this CPU runs
@pytest.mark.parametrize("d", [16, 64, 128, 24])
@pytest.mark.parametrize("length", [9, 16, 100, 1024])
@pytest.mark.parametrize("n", [1, 4, 9])
def test_attention_matches_torch(d, length, n, march):
    heads, kv = 6, 2
    keys, values = cache(kv, length, d, seed=length + d)
    q = torch.randn(n, heads, d, generator=torch.Generator().manual_seed(n))
    got = vnni.kernel(march).decode_attention(q, keys, values, d ** -0.5)
    torch.testing.assert_close(got, reference(q, keys, values, d ** -0.5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("march", kernel_marches())
@pytest.mark.parametrize("length", [293, 17, 12])  # rows on both sides of a 16-key boundary; fewer keys than 16
@pytest.mark.parametrize("d", [64, 128, 24])
def test_each_row_of_a_pass_is_bitwise_a_one_token_pass(d, length, march):
    heads, kv, n = 12, 2, 9
    keys, values = cache(kv, length, d, seed=d)
    q = torch.randn(n, heads, d, generator=torch.Generator().manual_seed(1))
    build = vnni.kernel(march)
    wide = build.decode_attention(q, keys, values, d ** -0.5)
    for t in range(n):
        seen = length - n + t + 1
        one = build.decode_attention(q[t:t + 1], keys[:, :, :seen], values[:, :, :seen], d ** -0.5)
        assert torch.equal(wide[t:t + 1], one), f"row {t}"


def gate_up_rows(rows: int, width: int, seed: int) -> torch.Tensor:
    """Rows of a fused gate/up output: gates over the range SiLU bends in, plus its far tails and zero."""
    g = torch.Generator().manual_seed(seed)
    gate_up = torch.randn(rows, 2 * width, generator=g) * 4
    specials = torch.tensor([0.0, -0.0, 30.0, -30.0, 95.0, -95.0, 1e-30, -1e-30])
    gate_up[0, :min(width, len(specials))] = specials[:width]
    return gate_up


@pytest.mark.parametrize("march", kernel_marches())
@pytest.mark.parametrize("width", [4864, 8960, 13, 3, 16, 40])  # the 0.5B's and 1.5B's MLPs; partial vector chunks
def test_silu_mul_matches_torch(width, march):
    gate_up = gate_up_rows(4, width, seed=width)
    got = vnni.kernel(march).silu_mul(gate_up)
    gate, up = gate_up.double().chunk(2, dim=-1)
    want = torch.nn.functional.silu(gate) * up
    assert got.shape == (4, width) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("march", kernel_marches())
def test_silu_mul_gives_each_row_what_it_gives_alone(march):
    """A verify pass's rows through the MLP must be bitwise the one-token passes' (the lossless invariant)."""
    kernel = vnni.kernel(march)
    gate_up = gate_up_rows(5, 4864, seed=3)
    together = kernel.silu_mul(gate_up)
    for row in range(5):
        assert torch.equal(together[row:row + 1], kernel.silu_mul(gate_up[row:row + 1].clone()))


@pytest.mark.parametrize("march", kernel_marches())
def test_silu_mul_keeps_nan_and_rejects_an_odd_width(march):
    kernel = vnni.kernel(march)
    gate_up = torch.zeros(1, 32)
    gate_up[0, 5] = float("nan")
    out = kernel.silu_mul(gate_up)
    assert torch.isnan(out[0, 5]) and not torch.isnan(out[0, :5]).any()
    with pytest.raises(RuntimeError, match="gate"):
        kernel.silu_mul(torch.zeros(1, 7))
