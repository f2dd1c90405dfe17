"""Prompt prefill in torch for a model that decodes in llama.cpp (weight format "llamacpp").

Why: on CPU, llama.cpp's Q4_K kernels decode fast (few bytes per weight) but prefill slowly (compute-bound: the
4-bit unpacking is redone for every token), while oneDNN's int8 matmul (`torch._int_mm`, VNNI/AMX) is fast on long
chunks. So a long prompt is prefilled here, weights int8 per output channel and activations quantized to int8 per
token (W8A8), and its keys and values are handed to the llama.cpp sequence (engine/weights/kv_handoff.py), which then
decodes as before. Whether this pays is measured per machine (engine/calibration/llamacpp_timing.py: `measure`,
`crossover`), never assumed.

The forward is Qwen2's, written out (gpt-fast style): RMSNorm, fused q/k/v with bias, RoPE (NeoX halves), grouped
attention, SwiGLU. Only what prefill needs: no output head, no logits. Both modes of the engine prefill the same way,
so speculation stays exact against target alone in this format (engine/testing/exactness.py).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from engine.interrupt import PassCancelled
from engine.options import child_environment
from engine.weights.kv_handoff import (
    HandoffUnsupported,
    encode_state,
    parse_state,
    read_state,
    write_state,
)
from engine.weights.prefill_plan import prefill_pieces
from engine.weights.quantized import quantize_rows_int8, w8a8_mm

log = logging.getLogger(__name__)

# Tokens per forward: a cancel (a keystroke) keeps the chunks that finished, so a chunk is what typing can lose; 128
# runs nearly as fast as 256 and clearly faster than 64.
CHUNK = 128
# Fewer new tokens than this: llama.cpp prefills them itself (the handoff reads and rewrites the whole sequence).
# The calibration measures the crossover per machine (`crossover`); this floor and the default without one come from
# the Zen 4: ahead of llama.cpp at 32 new tokens, level or behind at 16.
HANDOFF_MIN_TOKENS = 32
# Architectures whose keys llama.cpp stores exactly as transformers computes them: Qwen2 uses NeoX RoPE halves and its
# GGUF keeps q/k unpermuted (llama-family GGUFs permute q/k rows for llama.cpp's interleaved RoPE: not handled).
ARCHITECTURES = ("qwen2",)


def supports(config) -> bool:
    return getattr(config, "model_type", None) in ARCHITECTURES


@dataclass
class Qwen2Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    rope_theta: float
    eps: float

    @classmethod
    def from_config(cls, cfg) -> "Qwen2Shape":
        if not supports(cfg):
            raise ValueError(f"torch prefill handles {', '.join(ARCHITECTURES)}, not {cfg.model_type!r}")
        rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        if rope.get("rope_type", "default") != "default" or getattr(cfg, "use_sliding_window", False):
            raise ValueError("torch prefill handles plain RoPE and full attention only")
        theta = rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return cls(cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                   head_dim, float(theta), float(cfg.rms_norm_eps))

    def inverse_frequencies(self) -> torch.Tensor:
        half = self.head_dim // 2
        return 1.0 / (self.rope_theta ** (torch.arange(0, half, dtype=torch.float64) / half))


class Int8Weight:
    """W8A8: weights int8 per output channel, activations int8 per token, int32 accumulation (`torch._int_mm`)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        weight_int8, self.scale = quantize_rows_int8(weight.detach())
        self.weight_t = weight_int8.t().contiguous()  # [in, out], as _int_mm takes it
        self.bias = None if bias is None else bias.detach().float()

    def state(self) -> dict[str, torch.Tensor]:
        return {"weight_t": self.weight_t, "scale": self.scale} | ({} if self.bias is None else {"bias": self.bias})

    @classmethod
    def from_state(cls, tensors: dict[str, torch.Tensor], prefix: str) -> "Int8Weight":
        self = cls.__new__(cls)
        self.weight_t, self.scale, self.bias = tensors[prefix + "weight_t"], tensors[prefix + "scale"], \
            tensors.get(prefix + "bias")
        return self

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = w8a8_mm(x, self.weight_t, self.scale)
        if self.bias is not None:
            out.add_(self.bias)
        return out


class DenseWeight:
    """The same weights in floating point: the tests' reference for the handoff itself (no int8 rounding)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, dtype=torch.float32):
        self.weight, self.dtype = weight.detach().to(dtype).contiguous(), dtype
        self.bias = None if bias is None else bias.detach().float()

    def state(self) -> dict[str, torch.Tensor]:
        return {"weight": self.weight} | ({} if self.bias is None else {"bias": self.bias})

    @classmethod
    def from_state(cls, tensors: dict[str, torch.Tensor], prefix: str) -> "DenseWeight":
        weight = tensors[prefix + "weight"]
        return cls(weight, tensors.get(prefix + "bias"), weight.dtype)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x.to(self.dtype), self.weight).float()
        return out if self.bias is None else out.add_(self.bias)


PREFILL_KINDS = {"w8a8": Int8Weight, "dense": DenseWeight}


class TorchPrefill:
    """Computes the keys and values of new prompt tokens after existing ones (any source: llama.cpp's cells)."""

    def __init__(self, state: dict[str, torch.Tensor], shape: Qwen2Shape, kind: str = "w8a8", built_layers=None):
        """state: the model's weights under transformers' Qwen2 names. built_layers: the first that many layers
        are built and the rest cycle through them (the calibration's random stand-in of the real depth)."""
        make = PREFILL_KINDS[kind]
        self.shape, self.kind = shape, kind
        self.embed = state["model.embed_tokens.weight"].detach()
        self.layers = []
        for i in range(built_layers or shape.layers):
            p = f"model.layers.{i}."
            qkv_w = torch.cat([state[p + f"self_attn.{n}_proj.weight"] for n in "qkv"])
            qkv_b = torch.cat([state[p + f"self_attn.{n}_proj.bias"] for n in "qkv"])
            gate_up = torch.cat([state[p + "mlp.gate_proj.weight"], state[p + "mlp.up_proj.weight"]])
            self.layers.append({
                "attn_norm": state[p + "input_layernorm.weight"].float(),
                "qkv": make(qkv_w, qkv_b),
                "o": make(state[p + "self_attn.o_proj.weight"], None),
                "mlp_norm": state[p + "post_attention_layernorm.weight"].float(),
                "gate_up": make(gate_up, None),
                "down": make(state[p + "mlp.down_proj.weight"], None),
            })
        self.layers = [self.layers[i % len(self.layers)] for i in range(shape.layers)]
        self.inv_freq = shape.inverse_frequencies()

    @classmethod
    def from_model_dir(cls, directory: Path, kind: str = "w8a8") -> "TorchPrefill":
        """Read tensor by tensor, so only one layer's bf16 weights are in memory beside the int8 ones."""
        from contextlib import ExitStack

        from safetensors import safe_open
        from transformers import AutoConfig

        with ExitStack() as stack:
            files = [stack.enter_context(safe_open(str(f), "pt")) for f in sorted(Path(directory).glob("*.safetensors"))]
            state = LazyTensors({name: f for f in files for name in f.keys()})
            return cls(state, Qwen2Shape.from_config(AutoConfig.from_pretrained(directory)), kind)

    @classmethod
    def random(cls, config, kind: str = "w8a8", built_layers: int = 4, vocab: int = 4096) -> "TorchPrefill":
        """The real architecture with random weights, for timing (engine/calibration/measurements.py):
        `built_layers` distinct layers cycle through the real depth, so a chunk streams as many weight bytes as the
        real model."""
        shape = Qwen2Shape.from_config(config)
        gen = torch.Generator().manual_seed(0)
        inter, q, kv = config.intermediate_size, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
        state = {"model.embed_tokens.weight": torch.randn(vocab, shape.hidden, generator=gen).to(torch.bfloat16)}
        shapes = {"self_attn.q_proj.weight": (q, shape.hidden), "self_attn.k_proj.weight": (kv, shape.hidden),
                  "self_attn.v_proj.weight": (kv, shape.hidden), "self_attn.o_proj.weight": (shape.hidden, q),
                  "self_attn.q_proj.bias": (q,), "self_attn.k_proj.bias": (kv,), "self_attn.v_proj.bias": (kv,),
                  "mlp.gate_proj.weight": (inter, shape.hidden), "mlp.up_proj.weight": (inter, shape.hidden),
                  "mlp.down_proj.weight": (shape.hidden, inter), "input_layernorm.weight": (shape.hidden,),
                  "post_attention_layernorm.weight": (shape.hidden,)}
        for i in range(built_layers):
            for name, size in shapes.items():
                state[f"model.layers.{i}.{name}"] = torch.randn(*size, generator=gen) * 0.02
        return cls(state, shape, kind, built_layers=built_layers)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Everything needed to rebuild this prefill without quantizing again (`from_tensors`)."""
        out = {"embed": self.embed.to(torch.float16)}  # numpy (load_cached) has no bfloat16; embeddings fit fp16
        for i, layer in enumerate(self.layers):
            for name, part in layer.items():
                if isinstance(part, torch.Tensor):
                    out[f"layers.{i}.{name}"] = part
                else:
                    out.update({f"layers.{i}.{name}.{k}": v for k, v in part.state().items()})
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], shape: Qwen2Shape, kind: str) -> "TorchPrefill":
        self = cls.__new__(cls)
        self.shape, self.kind, self.embed = shape, kind, tensors["embed"]
        weight_cls = PREFILL_KINDS[kind]
        self.layers = []
        for i in range(shape.layers):
            p = f"layers.{i}."
            layer = {name: tensors[p + name] for name in ("attn_norm", "mlp_norm")}
            for name in ("qkv", "o", "gate_up", "down"):
                layer[name] = weight_cls.from_state(tensors, f"{p}{name}.")
            self.layers.append(layer)
        self.inv_freq = shape.inverse_frequencies()
        return self

    def rope(self, start: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        angles = torch.outer(torch.arange(start, start + n, dtype=torch.float64), self.inv_freq)
        return angles.cos().float(), angles.sin().float()

    def forward_chunk(self, ids: list[int], start: int, keys: list[torch.Tensor], values: list[torch.Tensor],
                      cancelled=lambda: False):
        """Run ids at positions start.., after keys/values [layer] of shape [start, kv_heads * head_dim] (float32);
        returns the keys and values of all start + len(ids) positions per layer, shaped the same way, the new ones
        rounded to float16 as llama.cpp stores them (so where a chunk ends never changes what a later token sees).
        Raises PassCancelled between layers once `cancelled()` says so."""
        s, n = self.shape, len(ids)
        x = self.embed[torch.tensor(ids)].float()
        cos, sin = self.rope(start, n)
        mask = torch.arange(start + n)[None, :] <= torch.arange(start, start + n)[:, None]
        q_size, kv_size = s.heads * s.head_dim, s.kv_heads * s.head_dim
        all_keys, all_values = [], []
        for layer, past_k, past_v in zip(self.layers, keys, values):
            h = rms_norm(x, layer["attn_norm"], s.eps)
            q, k, v = layer["qkv"](h).split([q_size, kv_size, kv_size], dim=1)
            q = apply_rope(q.view(n, s.heads, s.head_dim), cos, sin)
            if cancelled():
                raise PassCancelled
            k = apply_rope(k.view(n, s.kv_heads, s.head_dim), cos, sin).reshape(n, kv_size).half().float()
            v = v.contiguous().half().float()
            all_k = torch.cat([past_k, k]) if past_k.shape[0] else k
            all_v = torch.cat([past_v, v]) if past_v.shape[0] else v
            all_keys.append(all_k)
            all_values.append(all_v)
            attn = F.scaled_dot_product_attention(
                q.transpose(0, 1), all_k.view(-1, s.kv_heads, s.head_dim).transpose(0, 1),
                all_v.view(-1, s.kv_heads, s.head_dim).transpose(0, 1), attn_mask=mask, enable_gqa=True)
            x = x + layer["o"](attn.transpose(0, 1).reshape(n, q_size))
            h = rms_norm(x, layer["mlp_norm"], s.eps)
            gate, up = layer["gate_up"](h).chunk(2, dim=1)
            x = x + layer["down"](F.silu(gate).mul_(up))
        return all_keys, all_values


def never() -> bool:
    return False


def handoff_prefill(cache, prefill: TorchPrefill, ids: list[int], cancelled=never, shared: int = 0,
                    finishing=None) -> None:
    """Extend the llama.cpp cache `cache` (engine/weights/llamacpp.py), already cut back to its common prefix with
    ids, to ids: the keys and values it holds are read out, the new tokens run here in chunks, and the whole
    sequence is written back. A cancel keeps the chunks that finished, and lets a chunk inside the first `shared`
    tokens end unless `finishing` says otherwise (engine/weights/prefill_plan.prefill_pieces). Raises
    HandoffUnsupported (nothing changed) where the sequence state is in a layout engine/weights/kv_handoff.py does
    not handle."""
    model = cache.model
    if not cache.ids:
        cache.forward(ids[:1], logits="none", cancelled=cancelled)  # one cell, so the state shows the layout
    kv = parse_state(read_state(model, cache.seq))
    if kv is None or not np.array_equal(kv.positions, np.arange(len(cache.ids))):
        raise HandoffUnsupported("the sequence's cells are not positions 0..n-1")
    if kv.layout.n_layer != prefill.shape.layers:
        raise HandoffUnsupported(f"{kv.layout.n_layer} layers in llama.cpp, {prefill.shape.layers} here")
    keys, values = as_tensors(kv.keys), as_tensors(kv.values)
    done = started_at = len(cache.ids)
    started = time.perf_counter()
    try:
        with torch.inference_mode():
            for start, stop, stop_when in prefill_pieces(done, len(ids), CHUNK, shared, cancelled, finishing):
                if cancelled():
                    break
                keys, values = prefill.forward_chunk(ids[start:stop], start, keys, values, stop_when or never)
                done = stop
    except PassCancelled:
        pass
    finally:
        if done > len(cache.ids):
            write_state(model, cache.seq, encode_state(kv.layout, cache.seq, keys, values))
            cache.ids = list(ids[:done])
        log.debug("torch prefill seq %d: %d reused, %d of %d new in %.0f ms", cache.seq, started_at,
                  done - started_at, len(ids) - started_at, 1000 * (time.perf_counter() - started))


class LazyTensors:
    """name -> tensor, read from the open safetensors files when asked for."""

    def __init__(self, where: dict):
        self.where = where

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.where[name].get_tensor(name)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """NeoX-style rotation (the first and second halves of each head pair up), as Qwen2 and llama.cpp's qwen2 use."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def as_tensors(arrays: list[np.ndarray]) -> list[torch.Tensor]:
    """float32 copies (the cells are float16 views into llama.cpp's state buffer)."""
    return [torch.from_numpy(a).float() for a in arrays]


def load_cached(model_dir: Path, cache_file: Path, kind: str = "w8a8") -> TorchPrefill:
    """The prefill for the transformers checkpoint in model_dir, from cache_file; built first where it is missing
    (seconds for the 1.5B on 2 cores), in a subprocess.

    Why a subprocess and numpy: a multi-threaded torch op run on the loading thread (quantizing, or a parallel
    `clone` of the loaded tensors) leaves a second OpenMP thread pool in the server, and with it the engine's later
    small passes ran slower: on the demo trace at real speed, far fewer suggestions were shown in time
    (a 1.8 GB torch clone on the loading thread alone reproduced it; the same memory from numpy did not)."""
    import subprocess
    import sys

    from safetensors import safe_open
    from transformers import AutoConfig

    shape = Qwen2Shape.from_config(AutoConfig.from_pretrained(model_dir))
    if not cache_file.is_file():
        done = subprocess.run([sys.executable, "-m", "engine.weights.torch_prefill", str(model_dir), str(cache_file), kind],
                              capture_output=True, text=True, env=child_environment())
        if done.returncode != 0 or not cache_file.is_file():
            raise ValueError(f"building {cache_file.name} failed: {done.stderr.strip()[-500:]}")
    try:
        with safe_open(str(cache_file), "np") as f:  # numpy copies: no torch op on this thread
            tensors = {name: torch.from_numpy(f.get_tensor(name)) for name in f.keys()}
        return TorchPrefill.from_tensors(tensors, shape, kind)
    except Exception as exc:  # half-written or from another layout: rebuilt at the next load
        cache_file.unlink(missing_ok=True)
        raise ValueError(f"prefill cache {cache_file} unusable ({exc}); it is rebuilt at the next start") from exc


def build_cache(model_dir: Path, cache_file: Path, kind: str = "w8a8") -> None:
    from safetensors.torch import save_file

    prefill = TorchPrefill.from_model_dir(model_dir, kind)
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    partial = cache_file.with_suffix(".partial")
    save_file({k: v.contiguous() for k, v in prefill.tensors().items()}, str(partial))
    partial.replace(cache_file)


def wanted(calibrated: bool, setting: str = "auto") -> bool:
    """Whether a llama.cpp target prefills in torch: setting (EngineOptions.torch_prefill) "auto" as the calibration
    measured (calibrated), "on" always, "off" never."""
    if setting == "off":
        return False
    return calibrated or setting == "on"


def attach(model, model_dir: Path, cache_file: Path, label: str = "target", from_tokens: int = 0) -> bool:
    """Give a llama.cpp model (engine/weights/llamacpp.py) the torch prefill of its transformers checkpoint, used from
    `from_tokens` new tokens on (0: HANDOFF_MIN_TOKENS). False, with a log line, where there is no checkpoint (a
    GGUF-only model) or it is not a Qwen2-family model."""
    if not (model_dir / "config.json").is_file() or not any(model_dir.glob("*.safetensors")):
        log.info("no transformers weights in %s: %s prefills in llama.cpp", model_dir, label)
        return False
    try:
        model.torch_prefill = load_cached(model_dir, cache_file)
    except (KeyError, ValueError, AttributeError) as exc:
        log.warning("torch prefill unavailable for %s (%s: %s); llama.cpp prefills", label, type(exc).__name__, exc)
        return False
    model.torch_prefill_from = from_tokens or HANDOFF_MIN_TOKENS
    log.info("%s prefills %d+ new prompt tokens in torch w8a8 (keys/values handed to llama.cpp)", label,
             model.torch_prefill_from)
    return True


if __name__ == "__main__":  # load_cached builds the cache here, in its own process
    import sys

    build_cache(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
