"""The draft model's view of a long prompt: the code around the cursor, not the whole prompt.

Why: a draft only has to guess the next few tokens, and those depend on the last lines before the cursor and the
first ones after it. Feeding the draft model the whole prompt of a fresh document costs it a prefill of hundreds of
tokens (seconds on 2 cores) before its first draft, which is why the auto policy would rarely use it on a new
prompt. Any draft is allowed (the target verifies every token), so the output stays the target's own.

The view of a fill-in-the-middle prompt [..., PREFIX, p1..pn, SUFFIX, s1..sm, MIDDLE, generated...] is
[PREFIX, tail of p, SUFFIX, head of s, MIDDLE, generated...]: what comes before PREFIX (other files, the repository
name) is left out. The prefix's tail starts at a multiple of `step` tokens into the prefix, so while the user types
at the end of the prefix the view's start stays put for `step` tokens and the draft model's cache keeps serving it.
A prompt without the three markers in that order is its own view.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DraftWindow:
    prefix_id: int
    suffix_id: int
    middle_id: int
    # At least this many of the prefix's last tokens (fewer than prefix_tokens + step). On holes in this repository
    # a narrower window (128 and 32) cut the draft model's catch-up further but halved its tokens per pass; 256 and
    # 128 (the prompt builder's whole suffix share) kept most of them (docs/performance.md, "Drafting modes and
    # switches").
    prefix_tokens: int = 256
    suffix_tokens: int = 128
    step: int = 64

    def __call__(self, tokens: list[int]) -> list[int]:
        middle = last_index(tokens, self.middle_id, len(tokens))
        suffix = last_index(tokens, self.suffix_id, middle)
        prefix = last_index(tokens, self.prefix_id, suffix)
        if prefix < 0:  # not a prefix-suffix-middle prompt
            return tokens
        body = suffix - prefix - 1
        cut = max(0, (body - self.prefix_tokens) // self.step * self.step) if body > self.prefix_tokens else 0
        kept_suffix = min(middle - suffix - 1, self.suffix_tokens)
        if prefix == 0 and cut == 0 and kept_suffix == middle - suffix - 1:
            return tokens  # already short
        return (tokens[prefix:prefix + 1] + tokens[prefix + 1 + cut:suffix + 1]
                + tokens[suffix + 1:suffix + 1 + kept_suffix] + tokens[middle:])


def last_index(tokens: list[int], token: int, before: int) -> int:
    """The last position of token before `before`; -1 when there is none (or `before` is -1)."""
    for i in range(before - 1, -1, -1):
        if tokens[i] == token:
            return i
    return -1
