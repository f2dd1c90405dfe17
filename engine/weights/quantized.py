"""Quantized linear layers (int8 per row, int4 per group) and the W8A8 matmul that prefill chunks use."""
from __future__ import annotations

import torch
from torch import nn

PREFILL_ROWS = 16  # passes of this many tokens or more are prefill chunks, not decode or verify steps


class QuantizedLinear(nn.Module):
    """Shared by the quantized layers: an optional copy of the weights for prefill. The quantized kernels read few
    bytes but are compute-bound past a few rows; where the calibration measured prefill through the copy to be
    faster, long prefill chunks go through it, steps through the kernel. The copy is dense (F.linear; AVX-512 bf16
    machines), or int8 per channel with int8 activations per token (W8A8, `torch._int_mm`: oneDNN's VNNI/AMX GEMM)
    for layers whose activations are float32 (PREFILL_W8A8: the vnni layers), where a dense copy would be 4 bytes a
    weight. Both modes of the engine prefill the same way, so speculation stays exact against target alone."""
    PREFILL_W8A8 = False

    def quantized_mm(self, flat: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        copy = getattr(self, "prefill_weight", None)
        if copy is None or flat.shape[0] < PREFILL_ROWS:
            out = self.quantized_mm(flat)
        elif copy.dtype == torch.int8:
            out = w8a8_mm(flat, copy, self.prefill_scale).to(flat.dtype)
        else:
            out = nn.functional.linear(flat, copy.to(flat.dtype))
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


def w8a8_mm(x: torch.Tensor, weight_t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [rows, in] float @ weight_t [in, out] int8 (scale [out] per channel): x quantized to int8 per row, int32
    accumulation in `torch._int_mm`, float32 out."""
    xq, x_scale = quantize_rows_int8(x)
    return torch._int_mm(xq, weight_t).float().mul_(x_scale[:, None] * scale)


def set_prefill_weights(model: nn.Module, dense: dict[str, torch.Tensor] | None) -> int:
    """Give each quantized layer its copy of the weights for prefill, from `dense` (None: drop them): the weights
    themselves, or int8 per channel where the layer prefills in W8A8. Non-persistent buffers: never written to the
    format cache. Returns how many layers have one."""
    count = 0
    for name, module in model.named_modules():
        if isinstance(module, QuantizedLinear):
            weight = dense.get(name) if dense else None
            scale = None
            if weight is not None and module.PREFILL_W8A8:
                weight_int8, scale = quantize_rows_int8(weight)
                weight = weight_int8.t().contiguous()  # [in, out], as _int_mm takes it
            for key, value in (("prefill_weight", weight), ("prefill_scale", scale)):
                if key in module._buffers or value is not None:
                    module.register_buffer(key, value, persistent=False)
            count += weight is not None
    return count


def dense_linear_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: m.weight.detach() for name, m in model.named_modules() if isinstance(m, nn.Linear)}


def quantize_rows_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row, scaled by the row's largest magnitude: (q int8, scale [rows]) with x ≈ q·scale.
    Weights (a row per output channel) and activations (a row per token, engine/weights/torch_prefill.py) alike."""
    x = x.float()
    scales = x.abs().amax(dim=1).clamp(min=1e-8) / 127.0
    return (x / scales[:, None]).round_().to(torch.int8), scales  # |x / scale| <= 127: no clamp needed


class Int8Linear(QuantizedLinear):
    def __init__(self, linear: nn.Linear | None = None):
        super().__init__()
        if linear is not None:
            self._set(linear.weight.detach().float(), linear.bias, linear.weight.dtype)

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> "Int8Linear":
        layer = cls()
        layer._set(weight.float(), bias, dtype)
        return layer

    def _set(self, weight: torch.Tensor, bias, dtype) -> None:
        weight_int8, scales = quantize_rows_int8(weight)
        self.register_buffer("weight_int8", weight_int8)
        self.register_buffer("scales", scales.to(dtype))
        # A buffer, not a bare attribute: saved and loaded with the format cache, moved by .to().
        self.register_buffer("bias", bias.detach().to(dtype) if bias is not None else None)
        self.out_features, self.in_features = weight.shape

    def quantized_mm(self, flat: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(flat, self.weight_int8, self.scales.to(flat.dtype))


def quantize_groups_int4(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit grid per group of `group` input columns: (q int32 [N, K] in 0..15, scale, zero [N, K/G])
    with w ≈ (q − 8)·scale + zero, the form torch's int4 kernel takes."""
    n, k = weight.shape
    w = weight.float().reshape(n, k // group, group)
    lo, hi = w.amin(dim=-1), w.amax(dim=-1)
    scale = ((hi - lo) / 15).clamp(min=1e-8)
    q = torch.round((w - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).reshape(n, k)
    return q, scale, lo + 8 * scale


class Int4Linear(QuantizedLinear):
    """Weight-only int4, one (scale, zero) per group of input columns, through `aten._weight_int4pack_mm_for_cpu`."""

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, group: int,
                 bias: torch.Tensor | None, dtype: torch.dtype):
        super().__init__()
        self.out_features, self.in_features = q.shape
        self.group = group
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1))
        # [K/G, N, 2]: the kernel wants scales and zeros interleaved, in the activation dtype.
        self.register_buffer("scales_and_zeros",
                             torch.stack([scale.t(), zero.t()], dim=-1).to(dtype).contiguous())
        self.register_buffer("bias", bias.detach().to(dtype) if bias is not None else None)

    @classmethod
    def from_packed(cls, packed: torch.Tensor, scales_and_zeros: torch.Tensor, group: int, in_features: int,
                    bias: torch.Tensor | None) -> "Int4Linear":
        """Rebuild a layer from its saved buffers (the format cache), without packing again."""
        layer = nn.Module.__new__(cls)
        nn.Module.__init__(layer)
        layer.out_features, layer.in_features, layer.group = scales_and_zeros.shape[1], in_features, group
        layer.register_buffer("packed", packed)
        layer.register_buffer("scales_and_zeros", scales_and_zeros)
        layer.register_buffer("bias", bias)
        return layer

    def quantized_mm(self, flat: torch.Tensor) -> torch.Tensor:
        sz = self.scales_and_zeros
        sz = sz if sz.dtype == flat.dtype else sz.to(flat.dtype)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, self.group, sz)
