"""Weight formats, kept apart from the decode loop: a format is swapped in after loading.

A format names how the linear layers' weights are stored; the activation dtype (bf16 or fp32) is chosen apart
from it (engine/calibration/measurements.py measures both on the machine at hand):
- "dense": the weights in the activation dtype (bf16 or fp32), plain `F.linear`. "bf16" is an old alias.
- "int8":  weight-only int8 per output channel from the dense weights (`aten._weight_int8pack_mm`).
- "gguf":  the GGUF file's own numbers: Q4_K tensors as int4 group 32 (exact), 6-bit and other tensors as int8 per
           channel (engine/weights/gguf.py). Closest to what llama.cpp computes.
- "int4":  like "gguf" but every tensor in int4 group 32 (the Q6_K output head too): fastest, a little lossier.
- "vnni":  the same numbers as "gguf" through CodeCue's own AVX-512 VNNI kernel (engine/weights/vnni.py), activations
           quantized to int8 like llama.cpp's: a verify pass of up to 9 tokens reads and unpacks the weights once.
- "vnni4": the numbers of "int4" through the vnni kernel: half the bytes of "vnni" wherever the GGUF is not Q4_K
           (the 0.5B draft's file is mostly Q5_0), for a draft model.
The quantized CPU kernels have a fast path for bf16 activations only (with fp32 activations they ran several times
slower than fp32 F.linear on an AVX2 CPU): that is why the format and the activation dtype are measured together.
Lossless speculation is defined against the target in its own format: the draft's format only changes what is
proposed, never what is output.
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from engine.weights.gguf import apply_gguf_weights
from engine.weights.quantized import (
    Int4Linear,
    Int8Linear,
    QuantizedLinear,
    quantize_groups_int4,
)
from engine.weights.vnni import VnniLinear, scale_bits

log = logging.getLogger(__name__)

WEIGHT_FORMATS = ("dense", "int8", "gguf", "int4", "vnni", "vnni4")
FORMAT_ALIASES = {"bf16": "dense", "fp32": "dense", "float": "dense", "q4_k": "gguf"}
GGUF_FORMATS = ("gguf", "int4", "vnni", "vnni4")  # formats read from the GGUF file
VNNI_FORMATS = ("vnni", "vnni4")  # through engine/weights/vnni.py's kernel: offered where it builds for AVX-512 VNNI


def canonical_format(name: str) -> str:
    name = FORMAT_ALIASES.get(name, name)
    if name not in WEIGHT_FORMATS + ("llamacpp", "auto"):
        raise ValueError(f"unknown weight format {name!r} (known: {', '.join(WEIGHT_FORMATS)}, llamacpp, auto)")
    return name


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
        # A view into a larger buffer (engine/weights/lean_step.py fuses q/k/v) is written as its own bytes.
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
            for key in (f"{name}.d", f"{name}.m"):  # the kernel's scale form (engine/weights/vnni.py: scale_bits)
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
