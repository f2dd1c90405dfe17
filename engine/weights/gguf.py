"""Quantized linear layers straight from a GGUF file, without a bf16 round trip where the kernel allows.

A Q4_K super-block holds 256 weights as 8 sub-blocks of 32; each sub-block is an affine 4-bit grid
w = d·sc·q − dmin·m (q in 0..15, sc and m 6-bit, d and dmin fp16). torch's int4 kernel computes
w = (q − 8)·scale + zero per group of 32, so scale = d·sc and zero = 8·scale − dmin·m hold the same grid: these are
the numbers llama.cpp computes with (the scales rounded once to the activation dtype, as the kernel requires).
Every other type (Q6_K, Q5_K, Q8_0, Q5_0, ...) goes to the format's fallback, int8 per channel for "gguf" and int4
group 32 for "int4", from the model's dense weights: `codecue-models fetch` dequantized them from this same file, and
the bf16 rounding is far below the fallback's own quantization step (gguf-py's numpy Q6_K dequantization of the
151,936-row output head alone takes many seconds on 2 cores).
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from torch import nn

from engine.weights.quantized import Int4Linear, Int8Linear, quantize_groups_int4
from engine.weights.vnni import VnniLinear

log = logging.getLogger(__name__)

QK_K = 256
UNQUANTIZED = ("F32", "F16", "BF16")
Q4_K_BLOCK_BYTES = 144

# GGUF tensor name (per block) -> the transformers module path inside `model.layers[i]`, for Qwen2/Llama-style models.
LAYER_LINEARS = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_module_name(gguf_name: str) -> str | None:
    """'blk.3.attn_q.weight' -> 'model.layers.3.self_attn.q_proj'; 'output.weight' -> 'lm_head'; else None."""
    parts = gguf_name.split(".")
    if gguf_name == "output.weight":
        return "lm_head"
    if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and parts[2] in LAYER_LINEARS:
        return f"model.layers.{parts[1]}.{LAYER_LINEARS[parts[2]]}"
    return None


def q4k_to_affine(raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unpack Q4_K rows (uint8 [rows, cols/256*144]) into q (uint8 [rows, cols] in 0..15), scale and min
    (float32 [rows, cols/32]) such that w = scale·q − min, exactly as gguf-py's and llama.cpp's dequantization."""
    from gguf.quants import Q4_K

    blocks = np.ascontiguousarray(raw).reshape(-1, Q4_K_BLOCK_BYTES)
    n = blocks.shape[0]
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, m = Q4_K.get_scale_min(blocks[:, 4:16])
    qs = blocks[:, 16:].reshape(n, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    q = (qs & np.uint8(0x0F)).reshape(rows, cols)
    scale = (d * sc.astype(np.float32)).reshape(rows, cols // 32)
    minimum = (dmin * m.astype(np.float32)).reshape(rows, cols // 32)
    return q, scale, minimum


def dequantize(tensor) -> np.ndarray:
    """Any GGUF tensor as float32 [rows, cols] (gguf-py's reference dequantization)."""
    from gguf.quants import dequantize as gguf_dequantize

    cols, rows = int(tensor.shape[0]), int(tensor.shape[1])
    return np.asarray(gguf_dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(rows, cols)


def linear_from_gguf(tensor, dense: torch.Tensor | None, bias: torch.Tensor | None, fallback: str,
                     dtype: torch.dtype) -> nn.Module:
    """One GGUF weight as a quantized linear layer. Q4_K: exact int4; other types: `fallback` ("int8" or "int4";
    "vnni" / "vnni4": the vnni kernel's layers, Q4_K exact and the rest int8 per channel / int4 group 32)
    of `dense` (the same weights, already dequantized), or of gguf-py's dequantization when dense is None."""
    from gguf import GGMLQuantizationType

    cols, rows = int(tensor.shape[0]), int(tensor.shape[1])  # GGUF lists the fastest dimension (in_features) first
    if tensor.tensor_type == GGMLQuantizationType.Q4_K:
        q, scale, minimum = q4k_to_affine(tensor.data, rows, cols)
        if fallback in ("vnni", "vnni4"):
            return VnniLinear.from_int4(torch.from_numpy(q), torch.from_numpy(scale), torch.from_numpy(minimum), 32,
                                        bias, dtype)
        scale_t = torch.from_numpy(scale)
        zero = 8 * scale_t - torch.from_numpy(minimum)
        return Int4Linear(torch.from_numpy(q).to(torch.int32), scale_t, zero, 32, bias, dtype)
    weight = dense.float() if dense is not None else torch.from_numpy(dequantize(tensor))
    if fallback == "int4" and cols % 32 == 0:
        return Int4Linear(*quantize_groups_int4(weight, 32), 32, bias, dtype)
    if fallback in ("vnni", "vnni4"):
        if fallback == "vnni4" and cols % 32 == 0:
            return VnniLinear.from_dense_int4(weight, bias, dtype)
        return VnniLinear.from_dense_int8(weight, bias, dtype)
    return Int8Linear.from_weight(weight, bias, dtype)


def apply_gguf_weights(model: nn.Module, gguf_file: Path, fallback: str, dtype: torch.dtype) -> int:
    """Swap every linear layer that the GGUF holds for its quantized form; returns how many were swapped.
    Biases (Qwen2's q/k/v) stay in the activation dtype: llama.cpp keeps them in f32 too."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_file))
    tensors = {t.name: t for t in reader.tensors}
    if "output.weight" not in tensors and "token_embd.weight" in tensors:
        tensors["output.weight"] = tensors["token_embd.weight"]  # tied: llama.cpp reads the head from the embedding
    swapped = 0
    for gguf_name, tensor in tensors.items():
        module_name = hf_module_name(gguf_name)
        if module_name is None or tensor.tensor_type.name in UNQUANTIZED:
            continue  # stored in full precision in the file: keep the dense layer (the file's own numbers)
        parent_name, _, child = module_name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        old = getattr(parent, child)
        expected = (old.out_features, old.in_features)
        if (int(tensor.shape[1]), int(tensor.shape[0])) != expected:
            raise ValueError(f"{gguf_file.name}: {gguf_name} has shape {tuple(tensor.shape)}, "
                             f"the model's {module_name} wants {expected}")
        bias = old.bias.detach().to(dtype) if old.bias is not None else None
        setattr(parent, child, linear_from_gguf(tensor, old.weight.detach(), bias, fallback, dtype))
        swapped += 1
    log.info("%s: %d linear layers from the GGUF (%s fallback)", gguf_file.name, swapped, fallback)
    return swapped
