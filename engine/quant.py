"""Weight formats, kept apart from the decode loop: a format is swapped in after loading.

A format names how the linear layers' weights are stored; the activation dtype (bf16 or fp32) is chosen apart
from it (engine/calibrate.py measures both on the machine at hand):
- "dense": the weights in the activation dtype (bf16 or fp32), plain `F.linear`. "bf16" is an old alias.
- "int8":  weight-only int8 per output channel from the dense weights (`aten._weight_int8pack_mm`).
- "gguf":  the GGUF file's own numbers: Q4_K tensors as int4 group 32 (exact), 6-bit and other tensors as int8 per
           channel (engine/gguf_weights.py). Closest to what llama.cpp computes.
- "int4":  like "gguf" but every tensor in int4 group 32 (the Q6_K output head too): fastest, a little lossier.
- "vnni":  the same numbers as "gguf" through CodeCue's own AVX-512 VNNI kernel (engine/vnni.py), activations
           quantized to int8 like llama.cpp's: a verify pass of up to 9 tokens reads and unpacks the weights once.
- "vnni4": the numbers of "int4" through the vnni kernel: half the bytes of "vnni" wherever the GGUF is not Q4_K
           (the 0.5B draft's file is mostly Q5_0), for a draft model.
The quantized CPU kernels have a fast path for bf16 activations only (3-4x slower than fp32 F.linear with fp32
activations on the AVX2 EPYC, shared/facts.md): that is why the format and the activation dtype are measured together.
Lossless speculation is defined against the target in its own format: the draft's format only changes what is
proposed, never what is output.
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

log = logging.getLogger(__name__)

WEIGHT_FORMATS = ("dense", "int8", "gguf", "int4", "vnni", "vnni4")
FORMAT_ALIASES = {"bf16": "dense", "fp32": "dense", "float": "dense", "q4_k": "gguf"}
GGUF_FORMATS = ("gguf", "int4", "vnni", "vnni4")  # formats read from the GGUF file
VNNI_FORMATS = ("vnni", "vnni4")  # through engine/vnni.py's kernel: offered where it builds for AVX-512 VNNI


def canonical_format(name: str) -> str:
    name = FORMAT_ALIASES.get(name, name)
    if name not in WEIGHT_FORMATS + ("llamacpp", "auto"):
        raise ValueError(f"unknown weight format {name!r} (known: {', '.join(WEIGHT_FORMATS)}, llamacpp, auto)")
    return name


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
    Weights (a row per output channel) and activations (a row per token, engine/torch_prefill.py) alike."""
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


def replace_linears(model: nn.Module, make) -> nn.Module:
    """Replace every nn.Linear (attention, MLP and the output head) with make(linear), in place."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, make(child))
    return model


def quantize_int8(model: nn.Module) -> nn.Module:
    return replace_linears(model, Int8Linear)


def quantize_int4(model: nn.Module, group: int = 32) -> nn.Module:
    def make(linear: nn.Linear) -> nn.Module:
        if linear.in_features % group:
            return Int8Linear(linear)  # no whole groups: keep it int8
        bias = linear.bias.detach() if linear.bias is not None else None
        return Int4Linear(*quantize_groups_int4(linear.weight.detach(), group), group, bias, linear.weight.dtype)
    return replace_linears(model, make)


def quantize_vnni(model: nn.Module, group: int = 32, head_int8: bool = True) -> nn.Module:
    """The "gguf" mix for the vnni kernel from dense weights: int4 group 32, the output head int8 per channel
    (head_int8=False: int4 too, the "vnni4" mix)."""
    from .vnni import VnniLinear

    head = getattr(model, "lm_head", None) if head_int8 else None

    def make(linear: nn.Linear) -> nn.Module:
        bias = linear.bias.detach() if linear.bias is not None else None
        if linear is head or linear.in_features % group:
            return VnniLinear.from_dense_int8(linear.weight, bias, linear.weight.dtype)
        return VnniLinear.from_dense_int4(linear.weight, bias, linear.weight.dtype, group)
    return replace_linears(model, make)


def apply_weight_format(model: nn.Module, weight_format: str, device, gguf_file: Path | None = None) -> nn.Module:
    """Swap in `weight_format`. GGUF formats read the quantized tensors from gguf_file; without it (a model that
    has no GGUF, e.g. the tiny test models) they quantize the dense weights to the same grids."""
    weight_format = canonical_format(weight_format)
    if weight_format == "dense":
        return model
    if torch.device(device).type != "cpu":
        # The int4/int8 kernels wired here are CPU kernels; on a GPU the dense bf16 weights are used.
        log.info("weight format %s is CPU-only here; using dense weights on %s", weight_format, device)
        return model
    dtype = next(model.parameters()).dtype
    if weight_format == "int8":
        return quantize_int8(model)
    if gguf_file is not None:
        from .gguf_weights import apply_gguf_weights

        apply_gguf_weights(model, Path(gguf_file), {"gguf": "int8"}.get(weight_format, weight_format), dtype)
        return model
    if weight_format in VNNI_FORMATS:
        return quantize_vnni(model, head_int8=weight_format == "vnni")
    if weight_format == "gguf":  # the same mix as a Q4_K_M file: int4 weights, int8 output head
        head = getattr(model, "lm_head", None)
        if isinstance(head, nn.Linear):
            model.lm_head = Int8Linear(head)
    return quantize_int4(model)


# --- the format cache: quantizing (and reading a GGUF) once per machine, not at every start -------------------------
def format_cache_file(model_dir: Path, weight_format: str, dtype: torch.dtype) -> Path:
    """Packed int4 layouts belong to a torch version and a CPU kernel: both are in the name."""
    tag = f"{torch.__version__}-{torch.backends.cpu.get_cpu_capability()}".replace("+", "_")
    return model_dir / "formats" / f"{weight_format}-{str(dtype).replace('torch.', '')}-{tag}.safetensors"


def layer_layout(m: nn.Module) -> dict:
    if isinstance(m, Int4Linear):
        return {"kind": "int4", "group": m.group, "in_features": m.in_features}
    if isinstance(m, Int8Linear):
        return {"kind": "int8"}
    return {"kind": "vnni", "bits": m.bits, "group": m.group, "in_features": m.in_features,
            "out_features": m.out_features}


def save_formatted(model: nn.Module, path: Path) -> None:
    import json

    from safetensors.torch import save_file

    layout = {name: layer_layout(m) for name, m in model.named_modules() if isinstance(m, QuantizedLinear)}
    state, seen = {}, set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue  # tied weights are stored once
        seen.add(tensor.data_ptr())
        # A view into a larger buffer (engine/lean_step.py fuses q/k/v) is written as its own bytes.
        shares = tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size()
        state[name] = tensor.clone() if shares else tensor.contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".partial")
    save_file(state, str(tmp), metadata={"layout": json.dumps(layout)})
    tmp.replace(path)


def load_formatted(model: nn.Module, path: Path) -> nn.Module:
    """Swap in the quantized layers saved by save_formatted; the rest of the state comes from the same file."""
    import json

    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), "pt") as f:
        layout = json.loads(f.metadata()["layout"])
    # Copies, not views of the file's buffer: the packed-int kernels use aligned vector loads, and tensors that
    # sit at arbitrary offsets inside the loaded file segfault in `_weight_int8pack_mm`.
    state = {name: tensor.clone() for name, tensor in load_file(str(path)).items()}
    for name, info in layout.items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        bias = state.get(f"{name}.bias")
        if info["kind"] == "vnni":
            from .vnni import VnniLinear, scale_bits

            for key in (f"{name}.d", f"{name}.m"):  # the kernel's scale form (engine/vnni.py: scale_bits)
                state[key] = scale_bits(state[key])
            layer = VnniLinear(state[f"{name}.packed"], state[f"{name}.d"], state[f"{name}.m"], info["bits"],
                               info["group"], info["out_features"], info["in_features"], bias, bias.dtype
                               if bias is not None else torch.float32)
        elif info["kind"] == "int4":
            layer = Int4Linear.from_packed(state[f"{name}.packed"], state[f"{name}.scales_and_zeros"], info["group"],
                                           info["in_features"], bias)
        else:
            layer = Int8Linear()
            layer.register_buffer("weight_int8", state[f"{name}.weight_int8"])
            layer.register_buffer("scales", state[f"{name}.scales"])
            layer.register_buffer("bias", bias)
            layer.out_features, layer.in_features = layer.weight_int8.shape
        setattr(parent, child, layer)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
        raise ValueError(f"{path.name} does not fit the model (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model
