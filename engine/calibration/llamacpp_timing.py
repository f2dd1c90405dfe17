"""How the calibration (engine/calibration/measurements.py) times a GGUF in llama.cpp: its pass costs, its prefill,
and a torch W8A8 prefill of the same architecture handing its keys/values over (engine/weights/torch_prefill.py),
with the crossover between the two prefills. A torch prefill far slower on this CPU is screened, not timed
(estimated_prefill_s)."""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import numpy as np
import torch

from engine.calibration.finalists import PassTimer
from engine.calibration.measurements import Measurement
from engine.weights.llamacpp import PREFILL_CHUNK, LlamaCppCache, LlamaCppModel
from engine.weights.llamacpp_probe import load_checked
from engine.weights.torch_prefill import (
    HANDOFF_MIN_TOKENS,
    Int8Weight,
    Qwen2Shape,
    TorchPrefill,
)

log = logging.getLogger(__name__)

# The torch W8A8 prefill (handing its keys/values over to llama.cpp) is timed only where the screen's estimate
# promises it 1.4x llama.cpp's own prefill: the estimate is one matmul scaled up, no attention, so optimistic and
# noisy. A narrow pass under the AVX2 emulation cost a long timing only to learn the handover ran at llama.cpp's
# speed; where it pays (the native Zen 4) the estimate clears the bar by far. Where torch's int8 matmul is an order
# of magnitude slower (an AVX2-only Zen 3) timing it would take minutes (docs/performance.md, "Drafting modes and
# switches").
HANDOVER_SCREEN = 0.7


def measure(role: str, path: Path | str, widths=(1, 2, 4, 8, 16), context_tokens: int = 256,
            prefill_tokens: int = 256, reps: int = 3, torch_config=None, keep: dict | None = None):
    """This machine's pass costs for one GGUF in llama.cpp, as a calibrate.Measurement (weights "llamacpp",
    activations "ggml": llama.cpp quantizes activations to match each weight type itself). Passes after a
    context_tokens context, best of reps; prefill in the engine's chunk size. torch_config (the model's
    transformers config): also the same prefill in torch W8A8 with random weights, handed over to llama.cpp.
    keep ({role: finalists.PassTimer}): leave the model open there instead of closing it, to time it
    again side by side."""

    model = load_checked(path, n_sequences=1, n_ctx_per_sequence=max(1024, context_tokens + max(widths) + 64),
                          label=role)
    try:
        rng = np.random.default_rng(0)
        tokens = rng.integers(100, min(model.n_vocab, 30_000), size=context_tokens + prefill_tokens + 32).tolist()
        cache = LlamaCppCache(model)
        cache.forward(tokens[:PREFILL_CHUNK], logits="none")  # warm-up: page the weights in
        prefill_s = best_prefill_s(cache, tokens[:prefill_tokens])
        torch_tok_s, torch_from = 0.0, 0
        if torch_config is not None:
            screen_s = estimated_prefill_s(torch_config, prefill_tokens)
            if screen_s > HANDOVER_SCREEN * prefill_s:  # recorded from the screen, not timed
                log.info("torch w8a8 prefill screened out: ~%.1f s for %d tokens vs %.1f s in llama.cpp",
                         screen_s, prefill_tokens, prefill_s)
                torch_tok_s = prefill_tokens / screen_s
            else:
                short = min(64, prefill_tokens // 2)
                ours = {short: best_prefill_s(cache, tokens[:short]), prefill_tokens: prefill_s}
                theirs = time_torch_prefill(model, cache, torch_config, tokens, tuple(ours),
                                            context_tokens=context_tokens, faster_than=ours)
                torch_tok_s = prefill_tokens / theirs[prefill_tokens]
                torch_from = crossover(ours, theirs)
        if len(cache.ids) != context_tokens:  # not written by the faster torch prefill already
            # On from the prefill's tokens, a prefix of the context (extend_to keeps the common prefix): otherwise
            # seconds of the 1.5B's calibration go to prefilling those tokens a second time.
            cache.extend_to(tokens[:context_tokens])
        pass_ms = {}
        for width in widths:
            best = float("inf")
            for _ in range(reps):
                started = time.perf_counter()
                cache.forward(tokens[context_tokens:context_tokens + width], logits="all")
                best = min(best, time.perf_counter() - started)
                cache.truncate(context_tokens)
            pass_ms[width] = round(1000 * best, 2)
        if keep is not None:
            keep[role] = PassTimer(cache, tokens, context_tokens, owner=model)
        del cache
    finally:
        if keep is None or role not in keep:
            model.close()
    return Measurement(role, "llamacpp", "ggml", pass_ms, round(prefill_tokens / prefill_s, 1),
                       prefill_torch_tok_s=round(torch_tok_s, 2), prefill_torch_from=torch_from)


def best_prefill_s(cache: LlamaCppCache, tokens: list[int], reps: int = 2, enough_s: float = 2.0) -> float:
    """Best of `reps` prefills, or the first alone when it took over enough_s (a slow CPU needs no second one to
    tell: the calibration must stay within two minutes there too)."""
    best = float("inf")
    for _ in range(reps):
        cache.truncate(0)
        started = time.perf_counter()
        cache.extend_to(tokens)
        best = min(best, time.perf_counter() - started)
        if best > enough_s:
            break
    return best


def time_torch_prefill(model: LlamaCppModel, cache: LlamaCppCache, config, tokens: list[int], sizes,
                       context_tokens: int = 0, faster_than: dict | None = None) -> dict:
    """{n: seconds} to prefill the first n tokens in torch W8A8 (random weights, the real shapes) with the handover,
    best of 2 each. context_tokens: then, where that beat llama.cpp's own prefill (faster_than: its {n: seconds}),
    write the passes' context that way too: a pass costs the same whatever the keys and values hold, and llama.cpp's
    own prefill of the 1,024-token context is a large share of a calibration on 2 cores."""
    vocab = 4096
    tokens = [t % vocab for t in tokens]
    model.torch_prefill, model.torch_prefill_from = TorchPrefill.random(config, vocab=vocab), 1
    try:
        timed = {n: best_prefill_s(cache, tokens[:n]) for n in sizes}
        largest = max(sizes)
        if context_tokens and faster_than is not None and timed[largest] < faster_than[largest]:
            cache.truncate(0)
            cache.extend_to(tokens[:context_tokens])
        return timed
    finally:
        model.torch_prefill = None


def estimated_prefill_s(config, tokens: int) -> float:
    """A cheap screen before timing a whole prefill: one fused gate/up matmul of the real shape at `tokens` rows,
    scaled to all of the model's linear weights (attention over a short chunk is small beside them). Where the CPU
    has no fast int8 dot product (seen: an AVX2-only Zen 3, where `torch._int_mm` runs an order of magnitude slower
    than fp32 `F.linear`) the real prefill would take minutes, and the calibration only needs to know that it loses."""
    shape = Qwen2Shape.from_config(config)
    inter, q, kv = config.intermediate_size, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    gen = torch.Generator().manual_seed(0)
    gate_up = Int8Weight(torch.randn(2 * inter, shape.hidden, generator=gen), None)
    x = torch.randn(tokens, shape.hidden, generator=gen)
    gate_up(x[:1])  # first-call allocations stay out of the timing
    started = time.perf_counter()
    gate_up(x)
    seconds = time.perf_counter() - started
    per_layer = shape.hidden * (q + 2 * kv) + q * shape.hidden + 3 * shape.hidden * inter
    return seconds * shape.layers * per_layer / (2 * inter * shape.hidden)


def crossover(llamacpp_s: dict[int, float], torch_s: dict[int, float], floor: int = HANDOFF_MIN_TOKENS) -> int:
    """The fewest new tokens from which torch (with the handoff) prefills faster than llama.cpp, from each one's
    seconds at two sizes (time = fixed cost + n x per-token cost); 0 where torch never catches up. Never below
    `floor`: below ~32 tokens the int8 matmul loses the efficiency the straight line assumes."""
    (n1, n2) = sorted(llamacpp_s)

    def line(seconds):
        per_token = (seconds[n2] - seconds[n1]) / (n2 - n1)
        return seconds[n1] - per_token * n1, per_token
    fixed_l, per_l = line(llamacpp_s)
    fixed_t, per_t = line(torch_s)
    if per_t >= per_l:
        return 0
    return max(floor, math.ceil(round((fixed_t - fixed_l) / (per_l - per_t), 6)))
