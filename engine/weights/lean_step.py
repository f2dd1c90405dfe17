"""Short passes of a Qwen2 torch model without transformers' forward around the kernels (gpt-fast style).

A decode or verify pass of a few tokens costs its kernels plus the ops around them, and transformers' forward runs
~50 small ops a layer (mask building, position bookkeeping, dtype round trips, output dataclasses): on 2 cores that
was over a quarter of a one-token pass of the 1.5B in vnni, and more of the 0.5B's (docs/performance.md, "Drafting
modes and switches"). Here the same layers run written out, on the same modules and the same KV cache: RMSNorm, one
fused q/k/v projection, RoPE from the model's own rotary embedding, grouped attention over the cache, SwiGLU with one
fused gate/up projection. Prefill chunks still go through transformers (their ops are few against their kernels'
time).

Fusing: where q/k/v (or gate/up) are vnni layers of one kind, one kernel call computes them together and
quantizes the activations once; the three modules' buffers become views into the fused one, so no byte is stored
twice. Other formats run their modules one by one. Per token the arithmetic is transformers' own (the tests compare
logits); both modes of the engine pass through here, so speculation stays exact against target alone.

Native pass: in a float32 model whose projections are all vnni layers, a pass below PREFILL_ROWS tokens is one C++
call (engine/weights/kernels/lean_layer.cpp: the embedding, every layer, the final norm) running the same kernels in
the same order, so the logits are bitwise those of the layers written out here; the Python calls between the kernels
cost a large share of a 0.5B draft token on 2 cores, and what was left of them between the layers a few percent of a
draft step. The weights it streams sit in one arena in the order it reads
them, on 2 MB pages where the OS grants them (engine/weights/weight_arena.py).

Benchmarks and tests compare the alternatives (engine/options.py): `lean_step="off"` (transformers' forward),
`lean_step="python"` (the Python layers), `weight_arena=False` (the weights where they were loaded).
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from transformers.models.qwen2.modeling_qwen2 import Qwen2ForCausalLM, rotate_half

from engine import options
from engine.interrupt import PassCancelled
from engine.weights.kv_layers import commit_all, reserved_buffers
from engine.weights.quantized import PREFILL_ROWS
from engine.weights.vnni import BLOCK, KernelUnavailable, VnniLinear, kernel
from engine.weights.weight_arena import move_into_arena, return_freed_memory

MAX_TOKENS = 16  # passes up to this many new tokens (decode, verification, the calibration's widths)
ROPE_TABLE_MIN = 1024  # positions in the first RoPE table; it doubles past the longest context reached


def enabled() -> bool:
    """EngineOptions.lean_step="off" runs transformers' forward instead (benchmarks compare the two)."""
    return options.current().lean_step != "off"


def arena_wanted() -> bool:
    """EngineOptions.weight_arena=False leaves the weights where they were loaded (tests compare the two)."""
    return options.current().weight_arena


def native_layers_wanted() -> bool:
    """EngineOptions.lean_step="python" keeps each layer's ops in Python (benchmarks compare the two)."""
    return options.current().lean_step != "python"


def lean_step_for(model) -> "LeanStep | None":
    """The model's lean step (built on first use, rebuilt after a dtype change or a new weight format), or None
    where its architecture is not handled or EngineOptions.lean_step is "off"."""
    if not enabled() or not supports(model):
        return None
    key = _weights_key(model)
    held = getattr(model, "codecue_lean", None)
    if held is not None and held[0] == key:
        return held[1]
    step = LeanStep(model)
    model.codecue_lean = (key, step)
    return step


def supports(model) -> bool:
    if not isinstance(model, Qwen2ForCausalLM):  # a wrapper's own forward must run
        return False
    config = model.config
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    return (not getattr(config, "use_sliding_window", False)
            and rope.get("rope_type", "default") == "default"
            and set(getattr(config, "layer_types", None) or ["full_attention"]) == {"full_attention"})


def _weights_key(model) -> tuple:
    layers = model.model.layers
    return (model.model.embed_tokens.weight.dtype, len(layers), id(layers[0].self_attn.q_proj),
            id(layers[-1].mlp.down_proj), id(model.lm_head))


class LeanStep:
    def __init__(self, model):
        inner, config = model.model, model.config
        self.embed, self.final_norm, self.lm_head = inner.embed_tokens, inner.norm, model.lm_head
        self.rotary = inner.rotary_emb
        self._rope_table: tuple[torch.Tensor, torch.Tensor] | None = None  # cos, sin [positions, head_dim]
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        fused: dict[tuple, list] = {}  # layers that share modules (the calibration's cycled depth) share fusions
        self.layers = [LeanLayer(layer, fused) for layer in inner.layers]
        kernels = kernels_for(model)
        if kernels and arena_wanted():
            gather_streamed_weights(self.layers, model)
        self.torch_ops = TorchOps(self.heads, self.kv_heads, self.head_dim)
        self.kernel_ops = (KernelOps(kernels, self.heads, self.kv_heads, self.head_dim, uses_silu(config))
                           if kernels else None)
        self.native = (native_model(kernels, self.layers, config, self.torch_ops.scaling, self.embed, self.final_norm)
                       if kernels else None)
        self.kv_like = self.embed.weight.new_empty((1, self.kv_heads, 1, self.head_dim))  # the cache's dtype, shape

    def rope(self, x: torch.Tensor, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [n, head_dim] at positions start..: rows of a table the rotary module computed for positions
        0.. at once (a row is what the module gives for its position alone, bitwise: tests/test_engine_lean_step.py).
        Why: the module's ~10 small ops run right after a pass has streamed its weights out of the caches, and cost
        a few percent of a 0.5B draft step; a table's rows are two views."""
        end = start + n
        table = self._rope_table
        if table is None or end > table[0].shape[0] or table[0].dtype != x.dtype or table[0].device != x.device:
            size = max(ROPE_TABLE_MIN, 1 << (end - 1).bit_length())
            cos, sin = self.rotary(x, torch.arange(size, device=x.device)[None])
            table = self._rope_table = (cos[0], sin[0])
        return table[0][start:end], table[1][start:end]

    @torch.inference_mode()
    def __call__(self, cache, new_ids: list[int], start: int, want: str, cancelled=None) -> torch.Tensor | None:
        """One pass over new_ids at positions start.. after what `cache` (a DynamicCache) holds. want: "all" |
        "last" | "none". Raises PassCancelled between layers once cancelled() is true (earlier layers hold the
        pass's keys and values: the caller cuts them back)."""
        n = len(new_ids)
        if self.native is not None and n < PREFILL_ROWS and native_layers_wanted():
            buffers = reserved_buffers(cache, start + n, self.kv_like)
            if buffers is not None:
                cos, sin = self.rope(self.kv_like, start, n)
                h, layers_run = self.native.run(new_ids, start, cos, sin, *buffers, want != "none", cancelled)
                if layers_run < len(self.layers):
                    raise PassCancelled
                commit_all(cache, start + n)
                return None if h is None else self.lm_head(h[-1:] if want == "last" else h)
        device = self.embed.weight.device
        x = self.embed(torch.tensor(new_ids, dtype=torch.long, device=device))  # [n, hidden]
        cos, sin = self.rope(x, start, n)
        ops = self.kernel_ops if self.kernel_ops is not None and x.dtype == torch.float32 else self.torch_ops
        mask = None
        if n > 1 and ops is self.torch_ops:  # new token i sees the cache and new tokens 0..i (the C++ op knows)
            positions = torch.arange(start, start + n, device=device)
            seen = torch.arange(start + n, device=device)[None, :] <= positions[:, None]
            mask = torch.zeros(seen.shape, dtype=x.dtype, device=device).masked_fill_(~seen, float("-inf"))
        pass_ = PassInputs(cos, sin, mask, start)
        delta = None  # the last layer's MLP output, added to x with the next norm
        for index, layer in enumerate(self.layers):
            if cancelled is not None and cancelled():
                raise PassCancelled
            delta = layer(ops, x, delta, pass_, cache.layers[index])
        if want == "none":
            return None
        h = ops.add_norm(x, delta, self.final_norm)
        return self.lm_head(h[-1:] if want == "last" else h)


class PassInputs(NamedTuple):
    cos: torch.Tensor  # [n, head_dim]
    sin: torch.Tensor
    mask: torch.Tensor | None  # additive, [n, start + n]; None for one token or where the attention op masks itself
    start: int


class LeanLayer:
    """One decoder layer's modules, with q/k/v and gate/up fused where their format allows."""

    def __init__(self, layer, fused: dict):
        attn, mlp = layer.self_attn, layer.mlp
        self.attn_norm, self.mlp_norm = layer.input_layernorm, layer.post_attention_layernorm
        self.qkv = fuse([attn.q_proj, attn.k_proj, attn.v_proj], fused)
        self.o = attn.o_proj
        self.gate_up = fuse([mlp.gate_proj, mlp.up_proj], fused)
        self.down = mlp.down_proj
        self.act = mlp.act_fn

    def __call__(self, ops, x, delta, pass_: PassInputs, cache_layer) -> torch.Tensor:
        """Updates the residual stream x in place (adding the previous layer's `delta` first); returns this layer's
        MLP output, for the next layer (or the final norm) to add."""
        h = ops.add_norm(x, delta, self.attn_norm)
        q, keys, values = ops.rope_into_cache(self.qkv(h), pass_, cache_layer)
        h = ops.add_norm(x, self.o(ops.attend(q, keys, values, pass_.mask)), self.mlp_norm)
        return self.down(ops.swiglu(self.gate_up(h), self.act))


class TorchOps:
    """The ops between the weight kernels, in torch: transformers' arithmetic, any dtype."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int):
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.scaling = head_dim ** -0.5

    def add_norm(self, x, delta, norm):
        if delta is not None:
            x.add_(delta)
        return norm(x)

    def rope_into_cache(self, qkv, pass_: PassInputs, cache_layer):
        n, heads, kv_heads, dim = qkv.shape[0], self.heads, self.kv_heads, self.head_dim
        qk = qkv[:, :(heads + kv_heads) * dim].reshape(n, heads + kv_heads, dim)
        cos, sin = pass_.cos[:, None, :], pass_.sin[:, None, :]
        qk = qk * cos + rotate_half(qk) * sin  # transformers' apply_rotary_pos_emb, q and k at once
        v = qkv[:, (heads + kv_heads) * dim:].view(n, kv_heads, dim)
        keys, values = cache_layer.update(qk[:, heads:].transpose(0, 1)[None], v.transpose(0, 1)[None])
        return qk[:, :heads], keys, values

    def swiglu(self, gate_up, act):
        """act(gate) * up from the fused gate/up projection's output (the gate's columns first)."""
        gate, up = gate_up.chunk(2, dim=-1)
        return act(gate).mul_(up)

    def attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask) -> torch.Tensor:
        """q [n, heads, d]; keys/values [1, kv_heads, ctx, d] (views of the cache). The query heads of one KV head
        are stacked as rows of one matrix (engine/weights/attention.py: no copy of the cache per query head)."""
        n, groups = q.shape[0], self.heads // self.kv_heads
        rows = q.transpose(0, 1).reshape(self.kv_heads, groups * n, self.head_dim)
        scores = torch.matmul(rows, keys[0].transpose(1, 2)) * self.scaling  # [kv_heads, groups * n, ctx]
        if mask is not None:
            scores = (scores.view(self.kv_heads, groups, n, -1) + mask).view(self.kv_heads, groups * n, -1)
        probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, values[0])  # [kv_heads, groups * n, d]
        return out.view(self.heads, n, self.head_dim).transpose(0, 1).reshape(n, self.heads * self.head_dim)


class KernelOps(TorchOps):
    """The same ops in the C++ extension (engine/weights/kernels/lean_ops.cpp), float32: one call each instead of
    5-10 small torch ops, and attention that streams the cache once."""

    def __init__(self, kernels, heads: int, kv_heads: int, head_dim: int, silu: bool):
        super().__init__(heads, kv_heads, head_dim)
        self.kernels, self.silu = kernels, silu

    def swiglu(self, gate_up, act):
        if not self.silu:  # the C++ op knows SiLU only
            return super().swiglu(gate_up, act)
        return self.kernels.silu_mul(gate_up)

    def add_norm(self, x, delta, norm):
        if delta is None:
            return self.kernels.rms_norm(x, norm.weight, norm.variance_epsilon)
        return self.kernels.add_rms_norm(x, delta, norm.weight, norm.variance_epsilon)

    def rope_into_cache(self, qkv, pass_: PassInputs, cache_layer):
        if not hasattr(cache_layer, "reserve"):  # not a GrowingLayer (engine/decode/kvcache.py)
            return super().rope_into_cache(qkv, pass_, cache_layer)
        n = qkv.shape[0]
        end = pass_.start + n
        like = qkv.new_empty((1, self.kv_heads, n, self.head_dim))
        k_buf, v_buf = cache_layer.reserve(end, like)
        q = self.kernels.rope_into_cache(qkv, pass_.cos, pass_.sin, k_buf, v_buf, pass_.start, self.heads,
                                         self.kv_heads)
        cache_layer.commit(end)
        return q, cache_layer.keys, cache_layer.values

    def attend(self, q, keys, values, mask):
        return self.kernels.decode_attention(q, keys, values, self.scaling)


def native_model(kernels, layers: list[LeanLayer], config, scaling: float, embed, final_norm):
    """The whole pass as one C++ call (engine/weights/kernels/lean_layer.cpp) where every projection is a vnni
    layer, the MLP's activation is SiLU and the embedding and norms are float32; None otherwise (the Python layers
    run)."""
    built = native_layers(kernels, layers, config, scaling)
    weights = (embed.weight, final_norm.weight)
    if (built is None or type(embed) is not nn.Embedding
            or any(w.dtype != torch.float32 or not w.is_contiguous() for w in weights)):
        return None
    return kernels.NativeModel(built, embed.weight, final_norm.weight, final_norm.variance_epsilon)


def native_layers(kernels, layers: list[LeanLayer], config, scaling: float) -> list | None:
    """Each layer as one C++ object where every projection is a vnni layer and the MLP's activation is SiLU."""

    def projections(module):
        parts = module.modules if isinstance(module, Concatenated) else [module]
        if not all(type(part) is VnniLinear for part in parts):
            return None
        return [kernels.Projection(p.packed, p.d, p.m, p.bias, p.out_features, p.group, p.bits, p.per_channel,
                                   p.use_simd) for p in parts]

    if not uses_silu(config):
        return None
    built = []
    for layer in layers:
        parts = [projections(module) for module in (layer.qkv, layer.o, layer.gate_up, layer.down)]
        norms = (layer.attn_norm.weight, layer.mlp_norm.weight)
        if any(p is None for p in parts) or any(w.dtype != torch.float32 or not w.is_contiguous() for w in norms):
            return None
        built.append(kernels.NativeLayer(norms[0], layer.attn_norm.variance_epsilon, norms[1],
                                         layer.mlp_norm.variance_epsilon, *parts, config.num_attention_heads,
                                         config.num_key_value_heads, scaling))
    return built


def gather_streamed_weights(layers: list["LeanLayer"], model) -> None:
    """The vnni weights a short pass streams, into one arena in the order the pass reads them
    (engine/weights/weight_arena.py): each layer's q/k/v, o, gate/up and down, then the head; after them the
    model's other vnni modules (the views of these that prefill calls, a trimmed draft head's rows)."""

    streamed = []
    for layer in layers:
        for module in (layer.qkv, layer.o, layer.gate_up, layer.down):
            streamed += module.modules if isinstance(module, Concatenated) else [module]
    streamed.append(model.lm_head)
    owners = [m for m in streamed if type(m) is VnniLinear]
    if move_into_arena(owners + [m for m in model.modules() if type(m) is VnniLinear]):
        return_freed_memory()


def uses_silu(config) -> bool:
    return getattr(config, "hidden_act", None) == "silu"


def kernels_for(model):
    """The C++ extension (engine/weights/kernels/lean_ops.cpp) for a model that already uses it (vnni layers): elsewhere
    building it would cost a compile for a few ops. None: the ops run in torch."""

    if not any(isinstance(m, VnniLinear) for m in model.modules()):
        return None
    try:
        return kernel()
    except KernelUnavailable:
        return None


def fuse(modules: list, fused: dict):
    """One callable computing the modules' outputs side by side: a single vnni layer where they are vnni layers of
    one kind, else each module in turn."""
    key = tuple(id(m) for m in modules)
    if key not in fused:
        fused[key] = fuse_vnni(modules) or Concatenated(modules)
    return fused[key]


class Concatenated:
    def __init__(self, modules):
        self.modules = modules

    def __call__(self, x):
        return torch.cat([m(x) for m in self.modules], dim=-1)


def fuse_vnni(modules):
    """A VnniLinear over the modules' output channels, their packed weights and scales concatenated; each module's
    buffers then view the fused ones (prefill still calls the modules). None where they cannot be fused."""

    first = modules[0]
    if not all(type(m) is VnniLinear and m.out_features % BLOCK == 0 and m.in_features == first.in_features
               and (m.bits, m.group, m.per_channel, m.use_simd) == (first.bits, first.group, first.per_channel,
                                                                  first.use_simd) for m in modules):
        return None
    biases = [m.bias for m in modules]
    if any(b is not None for b in biases):
        dtype = next(b.dtype for b in biases if b is not None)
        biases = [b if b is not None else torch.zeros(m.out_features, dtype=dtype) for m, b in zip(modules, biases)]
        bias = torch.cat(biases)
    else:
        bias = None
    packed = torch.cat([m.packed for m in modules])
    d, m_ = torch.cat([m.d for m in modules]), torch.cat([m.m for m in modules])
    out = VnniLinear(packed, d, m_, first.bits, first.group, sum(m.out_features for m in modules),
                     first.in_features, bias, bias.dtype if bias is not None else torch.float32)
    out.use_simd = first.use_simd
    block = 0
    for module in modules:
        blocks = module.out_features // BLOCK
        module.packed, module.d, module.m = (t[block:block + blocks] for t in (packed, d, m_))
        block += blocks
    return out
