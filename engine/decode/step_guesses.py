"""Lookup guesses checked inside the draft model's step (staged drafting).

A draft model step over one token is bandwidth-bound: natively a pass over 2 or 4 tokens costs little more than a
one-token pass (`codecue-models calibrate`'s draft widths). So a step can take, after its input token, the tokens a
short lookup guesses come next (what followed the latest earlier match of the last 1-4 tokens), and read the model's
own token at each position: while a guess equals the model's token, the next row's token is the model's too, so
one pass yields several of the model's tokens. The draft is exactly what one-token steps would have drafted (the
target verifies it either way: speculation stays lossless); only the steps it took change.

How many guesses a step takes is chosen from this machine's measured pass widths and the rate at which guesses
were right so far: g guesses, each right with probability α given the ones before were, yield
E(α, g) = (1 − α^(g+1)) / (1 − α) tokens for one pass over 1 + g tokens.
"""
from __future__ import annotations


import numpy as np

from engine.decode.drafters import find_continuation
from engine.decode.pass_costs import PassCosts
from engine.decode.policy import expected_tokens

MOST_GUESSES = 3  # the widest step 4 tokens: natively 1.34x a one-token pass, under the AVX2 build 1.8x
# Until guesses have been tried: measured on the bench prompts where no 4-token match extends the model's draft,
# the draft model's next token equalled a 1-4-token lookup's guess 44 % of the time.
PRIOR_ALPHA, PRIOR_TRIES = 0.44, 20.0
DECAY = 0.98  # per step observed: the estimate follows the last ~50 steps


class StepGuesses:
    """The guess count for the draft model's next step, and the running rate at which guesses were right."""

    def __init__(self, costs: PassCosts, most: int = MOST_GUESSES):
        self.costs, self.most = costs, most
        self.right, self.tried = PRIOR_ALPHA * PRIOR_TRIES, PRIOR_TRIES

    def alpha(self) -> float:
        return self.right / self.tried

    def count(self) -> int:
        """The number of guesses that gives the most of the model's tokens per millisecond of its passes."""
        alpha = self.alpha()
        return max(range(self.most + 1), key=lambda g: expected_tokens(alpha, g) / self.costs.draft_width(1 + g))

    def guess(self, text: list[int], room: int) -> list[int]:
        """Up to count() tokens (at most `room`) that followed the latest earlier match of text's last 1-4 tokens."""
        wanted = min(self.count(), room)
        if wanted <= 0:
            return []
        found, _ = find_continuation(np.asarray(text, dtype=np.int64), wanted, 4, 1)
        return found

    def observe(self, right: int, missed: bool) -> None:
        """A step's first `right` guesses were the model's tokens, and then one was not (missed) or none was left
        to check (the guesses ran out, or the draft ended there)."""
        self.right = DECAY * self.right + right
        self.tried = DECAY * self.tried + right + missed


def first_count(draft_pass_ms: dict[int, float]) -> int:
    """The guesses a step takes before any has been tried, from a calibration's draft pass widths."""
    costs = PassCosts(draft_ms=draft_pass_ms[1], draft_pass_ms=dict(draft_pass_ms), calibrated=True)
    return StepGuesses(costs).count()
