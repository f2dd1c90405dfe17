"""A suggestion's confidence: the target's probability that it writes the suggestion's first line, from the
probabilities of the tokens it wrote (the local engine reports them; a remote one where it gives `logprobs`).

The product of the first line's token probabilities, not their geometric mean: a line is kept or not as a whole,
and the product is the model's own probability of the whole line, so one unlikely token (a guessed name) sinks it
however sure the rest is; a longer line is less likely to be right, and the product says so too.
The first line is the first one with code: tokens up to and including the one that ends it (its newline is the
model's decision that the line ends there). Leading blank lines and indentation count as part of it.
"""
from __future__ import annotations

import math
from typing import Iterable


def first_line_confidence(tokens: Iterable[tuple[str, float]]) -> float | None:
    """tokens: (text, probability) of each generated token, in order. None when there are none (nothing to show,
    or a backend that gave no probabilities)."""
    log_sum, seen, code = 0.0, False, False
    for text, prob in tokens:
        seen = True
        if prob <= 0.0:
            return 0.0
        log_sum += math.log(min(prob, 1.0))
        for ch in text:
            if ch == "\n" and code:
                return math.exp(log_sum)
            if not ch.isspace():
                code = True
    return math.exp(log_sum) if seen else None


def from_logprobs(texts: list[str], logprobs: list[float | None]) -> float | None:
    """The same from a remote engine's token texts and natural-log probabilities; None where any is missing."""
    if not texts or len(texts) != len(logprobs) or any(lp is None for lp in logprobs):
        return None
    return first_line_confidence((text, math.exp(lp)) for text, lp in zip(texts, logprobs))
