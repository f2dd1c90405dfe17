"""Weight formats, kept apart from the decode loop: a format is swapped in after loading.

int8 weight-only, per output channel, through torch's fused CPU kernel (`aten._weight_int8pack_mm`): half the
bytes of bf16 to read per token, so about twice as fast for the one-token passes of drafting (shared/facts.md).
Used for the draft model by default: the draft's format changes only which tokens are proposed, never the output,
which always comes from the target in its own format.
"""
from __future__ import annotations

import torch
from torch import nn

WEIGHT_FORMATS = ("bf16", "int8")


class Int8Linear(nn.Module):
    def __init__(self, linear: nn.Linear):
        super().__init__()
        weight = linear.weight.detach().float()
        scales = weight.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        self.register_buffer("weight_int8", torch.round(weight / scales[:, None]).clamp(-128, 127).to(torch.int8))
        self.register_buffer("scales", scales.to(linear.weight.dtype))
        self.bias = linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        out = torch.ops.aten._weight_int8pack_mm(flat, self.weight_int8, self.scales.to(x.dtype))
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear (attention, MLP and the output head) with an Int8Linear, in place."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child))
    return model


def apply_weight_format(model: nn.Module, weight_format: str, device) -> nn.Module:
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"unknown weight format {weight_format!r} (known: {', '.join(WEIGHT_FORMATS)})")
    if weight_format == "int8" and torch.device(device).type == "cpu":
        return quantize_int8(model)
    return model  # bf16 (or the load dtype); int8 is a CPU kernel, GPUs keep bf16
