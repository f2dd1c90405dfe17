"""What "lossless" means, stated and checked: greedy speculative output against the target alone in the same format.

In fp32 a (K+1)-token verify pass and K+1 one-token passes pick the same argmax, and the two outputs must be identical
token for token. In bf16, or with int8/int4 weights, the two kinds of pass add up in a different order and round
differently, so where the target itself hesitates between its two best tokens either one may come out. The rule:

    the outputs agree up to their first difference, and there the target alone's top-2 logit gap is below epsilon
    (a near tie: the target alone could have gone either way). After it they are two different continuations and are
    not compared further. With epsilon = 0 (fp32) this is exact equality.

`reference_greedy` is target-alone decoding exactly as the engine does it (prefill all but the last prompt token,
then one-token passes), recording the top-2 gap at every step. `uncached_greedy` is the independent reference: the
same weights, but every step recomputes the whole sequence in one pass and keeps nothing between steps, so it shares
nothing with the engine's decoding (its caches, chunked prefill, lean or compiled steps, the speculative loop);
`uncached_along` gives its answer along a given output in one pass (what a real model can afford).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from engine.decode.kvcache import cache_for
from engine.weights.quantized import QuantizedLinear
from engine.weights.torch_thread import runs_on_torch_thread

# Logits: the largest change a 9-token pass makes to a margin between the best token and its runners-up, against
# one-token passes, on the default pair in its calibrated format, is below this on every machine measured
# (`pass_rounding` measures it; docs/architecture.md, "The engine contract").
NEAR_TIE_EPSILON = 0.5


def epsilon_for(dtype: torch.dtype, weights: str = "dense") -> float:
    """fp32 with dense weights must be exact; anything that rounds (bf16/fp16 activations, quantized weights) gets
    the near-tie allowance."""
    return 0.0 if dtype == torch.float32 and weights == "dense" else NEAR_TIE_EPSILON


def top2_gap(logits: torch.Tensor) -> float:
    best = torch.topk(logits.float(), 2).values
    return float(best[0] - best[1])


def take(logits: torch.Tensor, stop_token_ids: set[int], tokens: list[int], gaps: list[float]) -> int | None:
    """One position's greedy token: its top-2 gap recorded, the token appended to `tokens` and returned, or None
    for a stop token (left out, like CompletionResult.token_ids)."""
    token = int(torch.argmax(logits))
    gaps.append(top2_gap(logits))
    if token in stop_token_ids:
        return None
    tokens.append(token)
    return token


@torch.inference_mode()
def reference_greedy(model: torch.nn.Module, prompt_ids: list[int], max_new_tokens: int,
                     stop_token_ids: set[int]) -> tuple[list[int], list[float]]:
    """Target-alone greedy tokens (stop token excluded, like CompletionResult.token_ids) and the gap at each one."""
    cache = cache_for(model)
    cache.extend_to(list(prompt_ids[:-1]))
    pending, tokens, gaps = prompt_ids[-1], [], []
    while len(tokens) < max_new_tokens:
        pending = take(cache.forward([pending], logits="last")[-1], stop_token_ids, tokens, gaps)
        if pending is None:
            break
    return tokens, gaps


@runs_on_torch_thread  # where the engine runs its passes: one thread for the process's passes
@torch.inference_mode()
def uncached_greedy(model, prompt_ids: list[int], max_new_tokens: int,
                    stop_token_ids: set[int]) -> tuple[list[int], list[float]]:
    """Greedy decoding with no KV cache kept between steps: at every step one pass over the whole sequence so far,
    its last position's argmax appended. A transformers model runs its own forward with use_cache=False, in
    the format it decodes in (decode_format); a llama.cpp model (engine/weights/llamacpp.py) runs each pass on a
    sequence emptied first. Returns what reference_greedy returns: the tokens (stop token excluded) and the top-2
    gap at each step. Costs len(prompt) + n tokens of prefill per step: a few short prompts only."""
    ids, tokens, gaps = list(prompt_ids), [], []
    sequence = model.new_cache() if hasattr(model, "new_cache") else None
    with decode_format(model):
        while len(tokens) < max_new_tokens:
            if sequence is not None:
                sequence.truncate(0)
                logits = sequence.forward(ids, logits="last")[-1]
            else:
                x = torch.tensor([ids], dtype=torch.long, device=model.device)
                logits = model(input_ids=x, use_cache=False, logits_to_keep=1).logits[0, -1]
            token = take(logits, stop_token_ids, tokens, gaps)
            if token is None:
                break
            ids.append(token)
    return tokens, gaps


@runs_on_torch_thread
@torch.inference_mode()
def uncached_along(model, prompt_ids: list[int], candidate: list[int], max_new_tokens: int,
                   stop_token_ids: set[int]) -> tuple[list[int], list[float]]:
    """uncached_greedy's answer along `candidate` (an output to check) for the cost of one pass: the model's argmax
    and top-2 gap at every position of prompt + candidate, from a single pass over it with no KV cache (teacher
    forcing). Causal attention makes position i's logits those of a pass over prompt + candidate[:i] alone, so
    while candidate follows these tokens they are the tokens uncached_greedy writes; past its first departure they
    are not, and compare() reads nothing past it. In the decode format (decode_format)."""
    ids = list(prompt_ids) + list(candidate[:max_new_tokens])
    rows = len(ids) - len(prompt_ids) + 1
    with decode_format(model):
        if hasattr(model, "new_cache"):
            sequence = model.new_cache()
            logits = sequence.forward(ids, logits="all")[-rows:]
        else:
            x = torch.tensor([ids], dtype=torch.long, device=model.device)
            logits = model(input_ids=x, use_cache=False, logits_to_keep=rows).logits[0]
    tokens, gaps = [], []
    for row in logits[:max_new_tokens]:
        if take(row, stop_token_ids, tokens, gaps) is None:
            break
    return tokens, gaps


@contextmanager
def decode_format(model):
    """While inside, every pass of the model runs in the one format it decodes in: quantized layers without their
    prefill copy (engine/weights/quantized.py), a llama.cpp model without its torch prefill
    (engine/weights/torch_prefill.py). Those are other formats of the same weights that the engine uses for long
    prompt passes where they pay (tested against the decode format on their own); uncached_greedy computes in the
    decode format alone, and a comparison with it pins the engine to it too. Everything is put back after."""
    set_aside = []
    if getattr(model, "torch_prefill", None) is not None:
        set_aside.append((model.__dict__, "torch_prefill", model.torch_prefill))
        model.torch_prefill = None
    for module in (model.modules() if isinstance(model, torch.nn.Module) else ()):
        if isinstance(module, QuantizedLinear) and getattr(module, "prefill_weight", None) is not None:
            set_aside.append((module._buffers, "prefill_weight", module._buffers["prefill_weight"]))
            module._buffers["prefill_weight"] = None
    try:
        yield model
    finally:
        for where, name, value in set_aside:
            where[name] = value


@dataclass
class Agreement:
    ok: bool                       # identical, or first difference at a near tie
    identical: bool
    first_difference: int | None   # index into the generated tokens
    gap_there: float | None        # the target alone's top-2 gap at the first difference
    near_ties: list[int] = field(default_factory=list)  # every compared position with gap < epsilon

    def describe(self) -> str:
        if self.identical:
            return f"identical (near ties at {self.near_ties})"
        verdict = "allowed: near tie" if self.ok else "NOT a near tie"
        return f"first difference at token {self.first_difference}, gap {self.gap_there:.4f} ({verdict})"


def compare(candidate: list[int], reference: list[int], gaps: list[float], epsilon: float) -> Agreement:
    """candidate: speculative output; reference/gaps: from reference_greedy (gaps may be one longer than reference:
    the step that produced the stop token)."""
    same = 0
    while same < min(len(candidate), len(reference)) and candidate[same] == reference[same]:
        same += 1
    compared = min(same + 1, len(gaps))
    near_ties = [i for i in range(compared) if gaps[i] < epsilon]
    if same == len(candidate) == len(reference):
        return Agreement(True, True, None, None, near_ties)
    gap = gaps[same] if same < len(gaps) else float("inf")
    return Agreement(gap < epsilon, False, same, gap, near_ties)


@torch.inference_mode()
def pass_rounding(model: torch.nn.Module, prompt_ids: list[int], continuation: list[int], contenders: int = 8) -> float:
    """How far one (len(continuation))-token pass moves the decisions of the same positions computed one token at a
    time, after the same cached prompt: the largest change of a margin between the one-token pass's best token and
    one of its `contenders` next best. A margin is what a rounding must bridge to change the argmax; a shift common
    to every logit moves none, and tokens far below the best cannot be brought level by roundings of this size.
    (Seen on llama.cpp's plain kernels, which quantize one-token activations but not batched ones: every logit
    moves by ~0.06 on average and a tail token by up to 0.50, while the margins among the top 8 moved by <= 0.31.)"""
    wide, narrow = cache_for(model), cache_for(model)
    wide.extend_to(list(prompt_ids))
    narrow.extend_to(list(prompt_ids))
    together = torch.as_tensor(wide.forward(list(continuation), logits="all")).float()
    one_by_one = torch.stack([torch.as_tensor(narrow.forward([token], logits="last")[-1]).float()
                              for token in continuation])
    return margin_change(one_by_one, together, contenders)


def margin_change(alone: torch.Tensor, together: torch.Tensor, contenders: int = 8) -> float:
    """Largest |change| of a margin between each row's best token in `alone` and its `contenders` next best, from
    `alone` to `together` (logits [rows, vocab] of the same positions)."""
    best = alone.topk(min(contenders + 1, alone.shape[-1]), dim=-1).indices
    margins_alone = alone.gather(-1, best[:, :1]) - alone.gather(-1, best)
    margins_together = together.gather(-1, best[:, :1]) - together.gather(-1, best)
    return float((margins_together - margins_alone).abs().max())
