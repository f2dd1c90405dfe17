"""How many tokens a prompt may have: the user's number, or ("auto") what this machine prefills in a few seconds.

A prompt the engine has not seen costs its whole length in prefill before the first token: on a slow 2-core CPU
the default 1,536 tokens take tens of seconds, the wait after opening a file or jumping elsewhere, and every
keystroke of that time goes unanswered. On holes cut from real files (`codecue-bench prompt --files ...
--total-budgets`) 1,024 tokens completed as well as 1,536 and 512 worse (docs/performance.md, "Drafting modes and
switches"). So "auto" spends about COLD_PROMPT_SECONDS, never less
than SMALLEST_AUTO_TOTAL nor more than the default.
"""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TOTAL = 1536
SMALLEST_AUTO_TOTAL = 1024
# A prompt nothing is cached for (a file just opened, a jump) may be smaller than the total: it answers soon, and the
# server makes the whole one ready while the user pauses (codecue_lsp/growth.py). "auto": what this machine prefills
# in COLD_PROMPT_SECONDS, at least this many tokens.
SMALLEST_COLD_TOTAL = 512
COLD_PROMPT_SECONDS = 12.0
STEP = 128
# A kept layout (prompt/layout.py) may grow past the budget by this share of it before it is chosen afresh: the
# tokens typed since are computed either way, but a layout chosen afresh costs a whole new prompt. The budget bounds
# what a new prompt costs; this bounds how often typing in one place pays that again (typing 1,500 characters of
# engine/decode/policy.py re-chose the layout 5 times at 512 tokens without it).
KEPT_GROWTH = 0.5


@dataclass(frozen=True)
class PromptBudget:
    total: int = DEFAULT_TOTAL
    suffix: int = 128
    context: int = DEFAULT_TOTAL // 3


def budget_for(total: int, suffix: int = 128, context: int | None = None) -> PromptBudget:
    """A budget of `total` tokens: the suffix's share fixed, the ranked context `context` tokens (default a third:
    512 of the default total), never more than half the total (the current file's prefix keeps the rest)."""
    context = total // 3 if context is None else min(max(int(context), 0), total // 2)
    return PromptBudget(total=total, suffix=suffix, context=context)


def context_total(settings, total: int) -> int:
    """The `contextTokens` setting for a prompt of `total` tokens: "auto" a third of it, else the number."""
    return total // 3 if settings.context_tokens == "auto" else int(settings.context_tokens)


def total_for_prefill_rate(tokens_per_s: float | None) -> int:
    """The total that "auto" picks: what this machine prefills in COLD_PROMPT_SECONDS, in steps of STEP tokens,
    between SMALLEST_AUTO_TOTAL and DEFAULT_TOTAL; the default where the rate was not measured."""
    if not tokens_per_s or tokens_per_s <= 0:
        return DEFAULT_TOTAL
    return max(SMALLEST_AUTO_TOTAL, min(DEFAULT_TOTAL, _prefilled_in_cold_seconds(tokens_per_s)))


def _prefilled_in_cold_seconds(tokens_per_s: float) -> int:
    return int(tokens_per_s * COLD_PROMPT_SECONDS) // STEP * STEP


def prompt_total(setting: int | str, auto_total: int) -> int:
    """The total of a `promptTokens` setting: a number as set, "auto" what the engine's measurement gave."""
    return auto_total if setting == "auto" else int(setting)


def cold_total_for_prefill_rate(tokens_per_s: float | None) -> int | None:
    """The size "auto" gives a prompt nothing is cached for: what this machine prefills in COLD_PROMPT_SECONDS, in
    steps of STEP tokens, at least SMALLEST_COLD_TOTAL; None (no smaller start) where the rate was not measured."""
    if not tokens_per_s or tokens_per_s <= 0:
        return None
    return max(SMALLEST_COLD_TOTAL, _prefilled_in_cold_seconds(tokens_per_s))


def cold_total(setting: int | str, total: int, auto_cold: int | None) -> int:
    """The size of a prompt nothing is cached for, under a `coldPromptTokens` setting: "off" the total, "auto" what
    the engine's measurement gave, a number as set; never more than the total."""
    if setting == "off" or (setting == "auto" and auto_cold is None):
        return total
    return min(total, auto_cold if setting == "auto" else int(setting))
