"""Static shapes, compiled steps (pytorch-labs/gpt-fast is the model).

A model gets a preallocated KV cache per session (transformers' StaticCache: fixed [capacity] keys/values per layer,
a tensor position, cut back in place) and its decode step compiled once per pass width with
`torch.compile(fullgraph=True, dynamic=False)` (on CUDA: mode="reduce-overhead", i.e. CUDA graphs). A pass whose
width has no compiled step is padded up to the next compiled width: the padding sits after the real tokens, so
causal attention keeps it out of their logits, and its keys/values are dropped right after. Prefill chunks (any
length) run eagerly on the same cache, so a cancel still stops them between two layers (engine/interrupt.py); a
compiled step cannot stop half-way, but it is one pass of at most 9 tokens.

Compile artefacts go to $CODECUE_HOME/inductor (TORCHINDUCTOR_CACHE_DIR), so a second start does not recompile.
When compiling fails (no C++ compiler, an unsupported op) the model runs eagerly and says so once in the log.
TrackedCache (engine/decode/kvcache.py) uses a model's steps when `attach` has put them on it.
"""
from __future__ import annotations

import logging
import time
import types
import weakref
from pathlib import Path

import torch
from transformers import StaticCache

from engine.interrupt import gate_of
from engine.options import set_inductor_cache

log = logging.getLogger(__name__)

TARGET_WIDTHS = (1, 2, 4, 9)  # 1: target alone; 2/4/9: verification of K = 1, 2..3, 4..8 drafts (padded)
DRAFT_WIDTHS = (1,)
CAPACITY = 2048  # the prompt budget (1,536 tokens) + max new tokens + drafts, with room to spare


class CuttableStaticCache(StaticCache):
    """transformers' StaticCache whose cut moves every layer's position in one op: each verify pass is cut twice
    (its padding, its rejected drafts), and layer by layer that is 2 x 28 tiny ops, on a GPU 56 kernel launches."""

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count: the tokens to remove")
        if tokens_to_remove:
            with torch.inference_mode():  # the positions are inference tensors after a pass on a GPU
                torch._foreach_sub_(self._positions(), -tokens_to_remove)

    def empty(self) -> None:
        """Back to no tokens, keys and values left where they are (transformers' reset() also zeroes them all)."""
        with torch.inference_mode():
            torch._foreach_zero_(self._positions())

    def _positions(self) -> list[torch.Tensor]:
        return [layer.cumulative_length for layer in self.layers]


class CompiledSteps:
    def __init__(self, model, widths=TARGET_WIDTHS, capacity: int = CAPACITY, last_only: bool = False):
        """last_only: the compiled steps return only the last position's logits (a draft model's one-token step)."""
        self.model, self.widths, self.capacity, self.last_only = model, tuple(sorted(widths)), capacity, last_only
        mode = "reduce-overhead" if model.device.type == "cuda" else None
        # The cancel hooks go on before the first trace: a compiled graph skips them (engine/interrupt.py), and
        # hooks added after it could cost a recompile. Eager passes on this model (prefill) still honour them.
        gate_of(model)
        self.step = torch.compile(model.forward, fullgraph=True, dynamic=False, mode=mode)
        self.failed = False
        self.pool: list[tuple[weakref.ref | None, CuttableStaticCache]] = []  # (its owner, a cache handed out)

    def new_cache(self, owner=None) -> CuttableStaticCache:
        """An empty static cache for `owner` (a TrackedCache; None: a temporary). Recycled where it can be: a cache
        whose owner is gone, or holds another cache now, is emptied and handed out again. CUDA graphs are recorded
        per set of static addresses and kept (cudagraph trees), so a new cache for every session ever opened would
        leave a recording per width behind each; recycled, the recordings stay as many as the caches alive."""
        for i, (ref, cache) in enumerate(self.pool):
            holder = ref() if ref is not None else None
            if holder is None or holder.cache is not cache:
                cache.empty()
                self.pool[i] = (weakref.ref(owner) if owner is not None else None, cache)
                return cache
        cache = CuttableStaticCache(config=self.model.config, max_cache_len=self.capacity)
        for layer in cache.layers:
            if not hasattr(layer, "crop"):  # transformers before 5.2x (the lent GPU's image has 5.17)
                layer.crop = types.MethodType(crop_static_layer, layer)
        self.pool.append((weakref.ref(owner) if owner is not None else None, cache))
        return cache

    def bucket(self, n: int) -> int | None:
        return next((w for w in self.widths if w >= n), None)

    def run(self, cache, new_ids: list[int], want: str) -> torch.Tensor | None:
        """One pass over new_ids after what `cache` holds. want: "all" | "last" | "none" (as TrackedCache)."""
        n = len(new_ids)
        width = None if (self.failed or want == "none") else self.bucket(n)
        if width is not None and self.last_only and want == "last" and n != width:
            width = None  # the compiled step keeps only the last (padded) position: run this one eagerly
        device = self.model.device
        if width is None:
            keep = 0 if want == "all" else 1
            x = torch.tensor([new_ids], dtype=torch.long, device=device)
            out = self.model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=keep)
            return None if want == "none" else out.logits[0]
        padded = new_ids + [new_ids[-1]] * (width - n)
        x = torch.tensor([padded], dtype=torch.long, device=device)
        try:
            out = self.step(input_ids=x, cache=cache, use_cache=True, logits_to_keep=1 if self.last_only else 0)
        except Exception as exc:  # compile errors surface at the first call; the cache may be half-written
            self.failed = True
            log.warning("compiled step unavailable (%s: %s); running eagerly from now on", type(exc).__name__, exc)
            raise
        logits = out.logits[0].clone()  # CUDA graphs reuse their output buffer
        if width > n:
            cache.crop(n - width)  # drop the padding's keys and values
        return logits[-1:] if self.last_only else (logits[:n] if want == "all" else logits[n - 1:n])

    def warm_up(self, progress: bool = False, label: str = "") -> float:
        """Compile every width now (first start: tens of seconds each on 2 cores; later starts read the cache)."""
        from tqdm import tqdm

        started = time.perf_counter()
        with torch.inference_mode():
            cache = self.new_cache()  # one cache for every width: the first session gets it, recordings and all
            for width in tqdm(self.widths, desc=f"compiling {label} steps", disable=not progress, unit="width"):
                cache.empty()
                self.run(cache, [1] * 4, "none")
                try:
                    self.run(cache, [1] * width, "last" if self.last_only else "all")
                except Exception:
                    break
        return time.perf_counter() - started


def crop_static_layer(layer, tokens_to_remove: int) -> None:
    """transformers 5.24's StaticLayer.crop: the keys/values stay where they are (their address is static, the
    CUDA graphs read it); the position moves back in place, so the next pass overwrites them."""
    if tokens_to_remove > 0:
        raise ValueError("crop takes a negative count: the tokens to remove")
    with torch.inference_mode():
        layer.cumulative_length.sub_(-tokens_to_remove)


def use_compile_cache(home: Path) -> None:
    """Keep inductor's compiled kernels with the models, so they survive reboots and /tmp cleaners."""
    set_inductor_cache(home / "inductor")


def attach(model, widths=TARGET_WIDTHS, capacity: int = CAPACITY, last_only: bool = False,
           home: Path | None = None, warm_up: bool = True, progress: bool = False, label: str = "") -> bool:
    """Give `model` compiled static steps (TrackedCache picks them up). False, with a log line, when compile is
    unavailable: the model then runs eagerly as before."""
    if home is not None:
        use_compile_cache(home)
    try:
        steps = CompiledSteps(model, widths, capacity, last_only)
        model.codecue_steps = steps
        if warm_up:
            seconds = steps.warm_up(progress, label)
            if steps.failed:
                del model.codecue_steps
                return False
            log.info("compiled %s steps %s in %.1f s", label, steps.widths, seconds)
        return True
    except Exception as exc:
        log.warning("torch.compile unavailable for %s (%s: %s); running eagerly", label, type(exc).__name__, exc)
        if hasattr(model, "codecue_steps"):
            del model.codecue_steps
        return False
