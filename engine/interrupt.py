"""Cancellation inside a forward pass: a check before every decoder layer.

A 512-token prefill chunk takes seconds on a CPU, and a cancel that waits for the chunk to end keeps the engine
busy long after the client was answered. A forward pre-hook on each decoder layer asks the running pass's
`cancelled` callable and raises PassCancelled, so a pass stops within one layer (1/28 of a pass on the 1.5B).
The caller (TrackedCache.forward) cuts the KV cache back to what it held before the pass.

Inside a torch.compile'd graph the hook does nothing (a fullgraph cannot raise on a Python flag): a compiled step
(one decode or verify pass of a few tokens, engine/weights/compiled.py) stays one unit. Prefill always runs eagerly,
so it stays interruptible on compiled models too.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch


class PassCancelled(Exception):
    """A forward pass stopped between two decoder layers because its request was cancelled."""


class LayerGate:
    """The pre-hook shared by every decoder layer of one model; `cancelled` belongs to the pass running now."""

    def __init__(self) -> None:
        self.cancelled: Callable[[], bool] | None = None

    def __call__(self, module, args) -> None:
        # Checked first, so that a compiled graph never reads (or guards on) the per-request callable.
        if torch.compiler.is_compiling():
            return
        if self.cancelled is not None and self.cancelled():
            raise PassCancelled


def gate_of(model: torch.nn.Module) -> LayerGate | None:
    """The model's gate, installed on first use; None for a model without `model.model.layers`."""
    gate = getattr(model, "codecue_gate", None)
    if gate is None:
        layers = getattr(getattr(model, "model", None), "layers", None)
        if layers is None:
            return None
        gate = LayerGate()
        for layer in layers:
            layer.register_forward_pre_hook(gate)
        model.codecue_gate = gate
    return gate


@contextmanager
def cancellable(model: torch.nn.Module, cancelled: Callable[[], bool] | None) -> Iterator[None]:
    """Passes of `model` inside this block raise PassCancelled once cancelled() is true."""
    gate = gate_of(model) if cancelled is not None else None
    if gate is None:
        yield
        return
    previous, gate.cancelled = gate.cancelled, cancelled
    try:
        yield
    finally:
        gate.cancelled = previous
