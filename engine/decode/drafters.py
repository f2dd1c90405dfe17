"""Drafters propose the next K tokens cheaply; the target verifies them. All share one interface:

    propose(tokens, k, cancelled, finishes=None) -> Draft(tokens, probs, source)

`tokens` is everything committed so far (prompt + generated). finishes(drafted) says whether those draft tokens
finish the completion (a stop token, the end of the line asked for): a drafter that pays per token stops there.
`probs[i]` is the drafter's distribution that drafts[i] was sampled from (needed by the exact sampling rule), or
None when the draft is deterministic.
`source` says where a draft came from ("draft" model; lookup in the "prompt", an open document ("workspace") or
the session's earlier completions ("history")); the auto policy keeps acceptance per source. The timing fields
let the policy learn what drafting costs on this machine.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from engine.decode.kvcache import PREFILL_CHUNK, TrackedCache, cache_for
from engine.decode.sampling import first_argmax, sample, warp
from engine.interrupt import PassCancelled
from engine.weights import draft_vocab

MATCH_CAP = 32  # the longest match worth measuring: past a line or two it says no more


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    probs: list[torch.Tensor | None] = field(default_factory=list)
    source: str = "none"
    passes: int = 0  # draft model forward calls (catch-up included)
    steps: int = 0  # of which one-token steps: what a draft token costs (steps that checked guesses: wide_steps)
    step_seconds: float = 0.0
    catchup_tokens: int = 0  # committed tokens the draft model had not seen yet, fed in one call
    catchup_seconds: float = 0.0
    lookup_seconds: float = 0.0
    extended: int = 0  # of the tokens, how many the model's lookup extension added (the last ones)
    matched: int = 0  # a lookup draft: how many context tokens its match spans (the longer, the likelier it is right)
    wide_steps: list[tuple[int, float]] = field(default_factory=list)  # (width, seconds): steps checking guesses
    confidences: list[float] = field(default_factory=list)  # the draft model's probability of each of its own tokens

    @property
    def own(self) -> int:
        """Tokens the drafter itself proposed (the draft model's, before its lookup extension)."""
        return len(self.tokens) - self.extended

    def cut(self, n: int) -> "Draft":
        """Keep the first n drafted tokens (a draft's prefix is still a valid draft)."""
        own = self.own
        self.tokens, self.probs, self.confidences = self.tokens[:n], self.probs[:n], self.confidences[:n]
        self.extended = max(0, len(self.tokens) - own)
        return self


class NoDrafter:
    """Target alone: every pass verifies nothing and yields one token."""
    name = "none"

    def propose(self, tokens: list[int], k: int, cancelled, finishes=None) -> Draft:
        return Draft()


class LookupDrafter:
    """Model-free lookup: find the latest earlier occurrence of the last n tokens (n from max_ngram down to
    min_ngram) and propose what followed it. Code repeats itself, and the FIM suffix often holds what comes next.
    Looks in the committed tokens (prompt + generated) first, then, when given, in the workspace index (open
    documents, the session's earlier completions), whose longer match wins."""
    name = "lookup"

    def __init__(self, max_ngram: int = 4, min_ngram: int = 2, index=None, index_max_ngram: int = 8,
                 index_min_ngram: int = 3):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.index, self.index_max_ngram, self.index_min_ngram = index, index_max_ngram, index_min_ngram

    def propose(self, tokens: list[int], k: int, cancelled, finishes=None) -> Draft:
        started = time.perf_counter()
        arr = np.asarray(tokens, dtype=np.int64)
        match = latest_match(arr, self.max_ngram, self.min_ngram) if k > 0 else None
        found, length, matched = [], 0, 0
        if match is not None:
            start, length = match
            found, matched = arr[start + length:start + length + k].tolist(), matched_length(arr, start, length)
        source = "prompt"
        if self.index is not None and k > 0:
            # Only a match longer than the prompt's is worth it: the prompt is the most local context.
            hit = self.index.query(tokens, self.index_max_ngram, k, max(self.index_min_ngram, length + 1))
            if hit is not None and hit.tokens:
                found, source, matched = hit.tokens, hit.source, hit.length
        return Draft(tokens=found, probs=[None] * len(found), source=source if found else "none",
                     lookup_seconds=time.perf_counter() - started, matched=matched)


def find_continuation(arr: np.ndarray, k: int, max_ngram: int, min_ngram: int) -> tuple[list[int], int]:
    """(up to k tokens after the latest earlier match of arr's last n tokens, n); ([], 0) when nothing matches."""
    match = latest_match(arr, max_ngram, min_ngram) if k > 0 else None
    if match is None:
        return [], 0
    start, n = match
    return arr[start + n: start + n + k].tolist(), n


def latest_match(arr: np.ndarray, max_ngram: int, min_ngram: int) -> tuple[int, int] | None:
    """(start, n) of the latest earlier occurrence of arr's last n tokens, the longest n from max_ngram down to
    min_ngram; None when nothing matches. The latest is the most local context, and always has a token after it."""
    for n in range(min(max_ngram, len(arr) - 1), min_ngram - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)  # every earlier n-gram start
        hits = np.flatnonzero((windows == arr[-n:]).all(axis=1))
        if len(hits):
            return int(hits[-1]), n
    return None


def matched_length(arr: np.ndarray, start: int, n: int, cap: int = MATCH_CAP) -> int:
    """How many tokens the context and the text before arr[start + n] agree on, going back from the match of n
    tokens at `start`: up to `cap`. A match spanning an earlier line or more is right far more often than a
    2-token one (measured over the bench prompts)."""
    span = min(cap, start + n)
    earlier, latest = arr[start + n - span:start + n][::-1], arr[len(arr) - span:][::-1]
    differs = np.flatnonzero(earlier != latest)
    return int(differs[0]) if len(differs) else span


class ModelDrafter:
    """The small draft model, with its own KV cache kept in step with the committed tokens.

    Stops early when its own confidence (probability of its chosen token) drops below min_confidence: a draft it
    is unsure of is rarely accepted, and each draft pass costs a sizeable share of a target pass on CPU. With a
    length_rule (the auto policy's keep_drafting) that rule decides instead, from the confidences so far: the model
    drafts on, up to k, while it is sure.

    extend (a LookupDrafter demanding a long match): after each of its tokens, when the text so far (its drafts
    included) repeats earlier text, the draft is filled up to k with what followed there, free, instead of more
    model passes. Repetitive code repeats with a new name: the model writes the name, the lookup the rest (fewer
    draft passes for the same tokens; docs/performance.md, "Drafting modes and switches").

    view (engine/decode/draft_window.py): what the model sees of the committed tokens, e.g. only the code around the
    cursor of a long prompt; its cache holds the view. The lookup extension still searches everything.

    guesses (engine/decode/step_guesses.StepGuesses): a step feeds, after its token, the tokens a short lookup guesses
    come next, and keeps the model's token at each position while the guess before it was right: the same draft in
    fewer passes (a step over 2-4 tokens costs little more than over one where the pass is bandwidth-bound)."""
    name = "draft"

    def __init__(self, model: torch.nn.Module, cache: TrackedCache | None = None, temperature: float = 0.0,
                 top_p: float = 1.0, generator: torch.Generator | None = None, min_confidence: float = 0.3,
                 extend: "LookupDrafter | None" = None, view=None, guesses=None, length_rule=None):
        self.model = model
        self.guesses = guesses
        self.extend = extend
        self.view = view
        self.cache = cache or cache_for(model)
        self.temperature, self.top_p, self.generator = temperature, top_p, generator
        self.min_confidence = min_confidence
        self.length_rule = length_rule

    def propose(self, tokens: list[int], k: int, cancelled, finishes=None) -> Draft:
        draft = Draft(source="draft")
        if k <= 0:
            return draft
        seen = self.view(tokens) if self.view is not None else tokens
        draft_vocab.cover(self.model, tokens)  # a trimmed head reaches every id of the text (engine/weights/draft_vocab.py)
        self.cache.reuse_prefix(seen)
        pending = seen[len(self.cache.ids):]
        # The cache may already hold every committed token (the last draft was fully accepted and fed):
        # step back one token so there are logits to draft from.
        if not pending:
            self.cache.truncate(len(seen) - 1)
            pending = seen[-1:]
        if len(pending) > PREFILL_CHUNK:
            # A long catch-up (a new prompt) in chunks, as the target prefills: one pass over 1,000 tokens ran far
            # slower than chunks of 256 (attention's score matrices outgrow the cache).
            started = time.perf_counter()
            self.cache.extend_to(seen[:len(seen) - PREFILL_CHUNK], chunk=PREFILL_CHUNK, cancelled=cancelled)
            draft.catchup_tokens = len(self.cache.ids) - (len(seen) - len(pending))
            draft.catchup_seconds = time.perf_counter() - started
            pending = seen[len(self.cache.ids):]
        while len(draft.tokens) < k and not cancelled():
            # Guesses ride along in a step: the model's own token at each of them, kept while each guess was right.
            guess = (self.guesses.guess(tokens + draft.tokens, k - len(draft.tokens) - 1)
                     if self.guesses is not None and len(pending) == 1 else [])
            started = time.perf_counter()
            try:
                with draft_vocab.reached_logits(self.model) as ids:  # a trimmed head: its ids' logits only
                    rows = self.cache.forward(pending + guess, logits="all" if guess else "last",
                                              cancelled=cancelled)[-len(guess) - 1:]
            except PassCancelled:  # the tokens drafted so far stay valid; the caller sees the cancel
                break
            seconds = time.perf_counter() - started
            draft.passes += 1
            if guess:
                draft.wide_steps.append((1 + len(guess), seconds))
            elif len(pending) == 1:
                draft.steps, draft.step_seconds = draft.steps + 1, draft.step_seconds + seconds
            else:
                draft.catchup_tokens += len(pending)
                draft.catchup_seconds += seconds
            done, right = False, 0
            for row, logits in enumerate(rows):
                token, probs, confidence = self._pick(logits, ids)
                draft.tokens.append(token)
                draft.probs.append(probs)
                draft.confidences.append(confidence)
                enough = (not self.length_rule(draft.confidences) if self.length_rule is not None
                          else confidence < self.min_confidence)
                if enough or (finishes is not None and finishes(draft.tokens)):
                    done = True
                elif self.extend is not None and len(draft.tokens) < k:
                    follow = self.extend.propose(tokens + draft.tokens, k - len(draft.tokens), cancelled)
                    draft.lookup_seconds += follow.lookup_seconds
                    if follow.tokens:  # deterministic tokens (probs None): the sampling rule takes q as one-hot there
                        draft.tokens += follow.tokens
                        draft.probs += follow.probs
                        draft.extended = len(follow.tokens)
                        done = True
                guessed = row < len(guess)
                if guessed and token == guess[row]:
                    right += 1
                    if not done:
                        continue
                if guess:
                    self.guesses.observe(right, missed=guessed and token != guess[row])
                break
            # The cache keeps the guesses the model confirmed; its last token is the next pass's input.
            self.cache.truncate(len(self.cache.ids) - len(guess) + row)
            if done:
                break
            pending = [token]
        return draft

    def _pick(self, logits: torch.Tensor, ids: torch.Tensor | None = None) -> tuple[int, torch.Tensor | None, float]:
        """The model's token at one position, the distribution it was sampled from over the whole vocabulary (None:
        greedy), its probability. ids: the token id of each logit (a trimmed head's `reach`: the rest are -inf, so
        picks, softmax and nucleus over these are those over the whole row); None: logits over every id."""
        if self.temperature > 0:
            probs = warp(logits, self.temperature, self.top_p)
            best = sample(probs, self.generator)
            if ids is not None:
                probs = probs.new_zeros(self.model.lm_head.out_features).index_copy_(0, ids.to(probs.device), probs)
                return int(ids[best]), probs, float(probs[ids[best]])
            return best, probs, float(probs[best])
        best = first_argmax(logits)[0]
        return best if ids is None else int(ids[best]), None, float(torch.softmax(logits, dim=-1)[best])


def extension_lookup(index=None) -> LookupDrafter:
    """The lookup a ModelDrafter extends its drafts with: a match of 4 tokens or more (3 let wrong continuations
    cut the model's runs short; 6 found too few on the bench's repetitive prompts)."""
    return LookupDrafter(max_ngram=4, min_ngram=4, index=index, index_min_ngram=4)


class HybridDrafter:
    """Use the free lookup draft when the recent tokens repeat earlier text, the draft model otherwise.
    The lookup here should demand a longer match (3+ tokens) than on its own: a pass spent on a weak 2-token
    match yields one token, where the draft model's proposal would have yielded several."""
    name = "hybrid"

    def __init__(self, lookup: LookupDrafter, model: ModelDrafter, model_k=None):
        self.lookup, self.model = lookup, model
        # Under "auto" the policy sizes the two drafts apart (a lookup match is often worth a longer draft than
        # the model's guesses): model_k() gives the model's K (within the request's budget); otherwise both get k.
        self.model_k = model_k

    def propose(self, tokens: list[int], k: int, cancelled, finishes=None) -> Draft:
        draft = self.lookup.propose(tokens, k, cancelled)
        if draft.tokens:
            return draft
        model_draft = self.model.propose(tokens, self.model_k() if self.model_k else k, cancelled, finishes)
        model_draft.lookup_seconds = draft.lookup_seconds
        return model_draft
