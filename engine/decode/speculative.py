"""The speculative decode loop, readable in one sitting.

Invariant: the target's cache holds every committed token but the last one, which is "pending"; each target pass
feeds [pending] + K drafted tokens, so one weight load scores K+1 positions. The drafts that match are kept, the
target's own token at the first mismatch (or its bonus token when all K match) becomes the new pending token, and
the cache is cut back to the kept tokens. With K = 0 this is plain target-alone decoding.

Which drafter drafts and how many tokens is the controller's business: before each pass the loop asks it for
(drafter, K) and may let it shorten the draft; after the pass it reports what was accepted and what the pass cost.
`SpeculationController` drives one fixed drafter with adaptive K; `policy.GainPolicy` (drafter "auto") picks among
several by expected tokens per second.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from engine.decode.drafters import Draft
from engine.decode.healing import mask_first
from engine.decode.kvcache import TrackedCache
from engine.decode.sampling import accept_greedy, accept_sampled, chosen_probs, force_first, ranked_first
from engine.interrupt import PassCancelled
from engine.types import (
    CancelToken,
    CompletionRequest,
    CompletionResult,
    CompletionStats,
)

ONE_DRAFTER = "fixed"  # the name a single drafter goes by


@dataclass
class SpeculationController:
    """Adaptive K for one session: grow K while drafts are fully accepted, shrink it on rejections; switch
    drafting off when acceptance collapses, and probe now and then to switch it back on."""
    max_k: int = 8
    k: int = 4
    off_below: float = 0.4
    on_above: float = 0.5
    probe_every: int = 8
    ema_weight: float = 0.2
    acceptance: float = 1.0  # exponential moving average of per-pass acceptance (accepted / drafted)
    enabled: bool = True
    passes_since_probe: int = 0
    observed_passes: int = field(default=0)

    adaptive: bool = True

    # The controller interface the loop uses (GainPolicy has the same three methods).
    def choose(self, tokens: list[int], max_k: int) -> tuple[str, int]:
        return ONE_DRAFTER, self.next_k(max_k)

    def review(self, draft: Draft) -> Draft:
        return draft

    def report(self, drafter: str, draft: Draft, accepted: int, verify_seconds: float) -> None:
        self.update(len(draft.tokens), accepted)

    def next_k(self, max_k: int) -> int:
        if max_k <= 0:
            return 0
        if not self.adaptive:
            return min(self.max_k, max_k)
        if self.enabled:
            return max(1, min(self.k, self.max_k, max_k))
        self.passes_since_probe += 1
        if self.passes_since_probe >= self.probe_every:
            self.passes_since_probe = 0
            return min(2, max_k)
        return 0

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.observed_passes += 1
        self.acceptance += self.ema_weight * (accepted / drafted - self.acceptance)
        if accepted == drafted:
            self.k = min(self.max_k, self.k + 2)
        else:
            self.k = max(1, self.k - 1)
        if self.enabled and self.observed_passes >= 3 and self.acceptance < self.off_below:
            self.enabled = False
        elif not self.enabled and self.acceptance >= self.on_above:
            self.enabled = True


def generate(target: TrackedCache, drafter, controller, request: CompletionRequest,
             decode: Callable[[list[int]], str], stop_token_ids: set[int], cancel: CancelToken | None = None,
             on_tokens: Callable[[list[int], str], None] | None = None,
             on_phase: Callable[[str], None] | None = None,
             first_allowed: torch.Tensor | None = None, finishing=None) -> CompletionResult:
    """drafter: one drafter, or {name: drafter} for a controller that picks among them. on_phase is told
    "prefill", "draft" or "verify" as each begins. A cancel stops any model pass within one decoder layer, except a
    prefill pass inside request.shared_prefix, which only `finishing` may stop (engine/decode/kvcache.py, SharedPasses).
    first_allowed (token healing): the tokens the first generated token may be; the text returned and seen by
    request.stop starts after request.heal."""
    drafters = drafter if isinstance(drafter, dict) else {ONE_DRAFTER: drafter}
    cancel = cancel or CancelToken()
    on_phase = on_phase or (lambda phase: None)
    stats = CompletionStats(prompt_tokens=len(request.prompt_ids))
    generator = torch.Generator().manual_seed(request.seed) if request.seed is not None else None
    sampling = request.temperature > 0
    started = time.perf_counter()
    generated: list[int] = []
    probs: list[float] = []  # the target's probability of each generated token
    text = ""
    healed = request.heal.decode("utf-8") if first_allowed is not None else ""

    def text_of(ids: list[int]) -> str:
        whole = decode(ids)
        return whole[len(healed):] if whole.startswith(healed) else whole

    def finished(ids: list[int]) -> bool:
        """Target alone would end the completion with ids: a stop token last, or text the request's stop accepts."""
        if ids and ids[-1] in stop_token_ids:
            return True
        return bool(request.stop) and request.stop(text_of(ids))

    def finish(reason: str) -> CompletionResult:
        stats.seconds_total = time.perf_counter() - started
        stats.speculation_enabled = controller.enabled
        return CompletionResult(text=text, token_ids=generated, finish_reason=reason, stats=stats,
                                token_probs=probs[:len(generated)])

    prompt = list(request.prompt_ids)
    if not prompt:
        raise ValueError("empty prompt")
    # Prefill everything but the last prompt token, reusing the session's cached prefix.
    on_phase("prefill")
    stats.reused_prompt_tokens, stats.new_prompt_tokens = target.extend_to(
        prompt[:-1], cancelled=cancel.is_set, shared=request.shared_prefix, finishing=finishing)
    stats.seconds_prefill = time.perf_counter() - started
    tokens = prompt

    while True:
        if cancel.is_set():
            return finish("cancelled")
        # Never draft past max_new_tokens: the pass itself adds one token of the target's.
        name, k = controller.choose(tokens, request.max_new_tokens - len(generated) - 1)
        on_phase("draft")
        t0 = time.perf_counter()
        checked: dict[tuple[int, ...], bool] = {}  # the draft model's checks, not decoded again by cut_at_finish

        def finishes(drafted: list[int]) -> bool:
            key = tuple(drafted)
            if key not in checked:
                checked[key] = finished(generated + drafted)
            return checked[key]
        draft = drafters[name].propose(tokens, k, cancel.is_set, finishes) if k > 0 else Draft()
        draft = controller.review(draft)  # e.g. shorten a lookup draft from a source that is rarely right
        drafted = draft.tokens
        draft, draft_finishes = cut_at_finish(draft, lambda n: finishes(drafted[:n]))
        stats.seconds_draft += time.perf_counter() - t0
        stats.draft_passes += draft.passes
        if cancel.is_set():
            return finish("cancelled")

        # One target pass scores the pending token and every draft.
        on_phase("verify")
        t0 = time.perf_counter()
        try:
            logits = target.forward([tokens[-1]] + draft.tokens, cancelled=cancel.is_set)
        except PassCancelled:
            return finish("cancelled")
        if first_allowed is not None and stats.target_passes == 0:
            logits = mask_first(logits, first_allowed)  # the same mask with or without drafts: still lossless
        scored = logits  # the probabilities reported: the target's own, before an alternative's forced first token
        if request.first_rank and stats.target_passes == 0:
            forced = ranked_first(logits, request.first_rank)
            if forced is None:
                target.truncate(len(tokens))
                return finish("eos")
            logits = force_first(logits, forced)
        if sampling:
            n, next_token = accept_sampled(logits, draft.tokens, draft.probs, request.temperature,
                                           request.top_p, generator)
        else:
            n, next_token = accept_greedy(logits, draft.tokens)
        target.truncate(len(tokens) + n)  # drop the rejected drafts' keys and values
        verify_seconds = time.perf_counter() - t0
        controller.report(name, draft, n, verify_seconds)
        label = request.drafter if name == ONE_DRAFTER else name
        stats.count_pass(label, draft.source, len(draft.tokens), n, verify_seconds, draft.extended)
        if stats.target_passes == 1:
            stats.seconds_first_token, stats.first_pass_tokens = time.perf_counter() - started, n + 1

        # No draft prefix but the whole draft can finish the completion (cut_at_finish): where it does and all of it
        # was kept, target alone would stop there, before the target's own next token.
        new = draft.tokens[:n] + ([] if draft_finishes and n == len(draft.tokens) else [next_token])
        new_probs = chosen_probs(scored, new)
        tokens = tokens + new
        for token, prob in zip(new, new_probs):
            if token in stop_token_ids:
                text = text_of(generated)
                return finish("eos")
            generated.append(token)
            probs.append(prob)
            if len(generated) >= request.max_new_tokens:
                break
        text = text_of(generated)
        if on_tokens:
            on_tokens(list(generated), text)
        if request.stop and request.stop(text):
            return finish("stop")
        if len(generated) >= request.max_new_tokens:
            return finish("length")


def cut_at_finish(draft: Draft, finished: Callable[[int], bool]) -> tuple[Draft, bool]:
    """A draft ends at the token that finishes the completion (a stop token, or the text the request's `stop` calls
    finished): the target need not score what would be thrown away (a single line's last pass drafted on into the
    next line, and where verifying is compute-bound a 9-token verify costs several one-token passes). finished(n):
    the draft's first n tokens finish it. Returns the draft and whether it finishes the completion (no shorter
    prefix does)."""
    for n in range(1, len(draft.tokens) + 1):
        if finished(n):
            return draft.cut(n), True
    return draft, False
