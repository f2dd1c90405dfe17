"""Pricing a drafter from teacher-forced rows, without running the loop: at each position of target alone's
completion, the draft model's pick, its confidence, and the target's token. A round drafts while `keep` says so,
costs its draft steps and a verify one token wider, and writes the drafts up to the first one that is not the
target's token plus the target's own token there (greedy: exactly what a verify pass would accept).
scripts/bench-draft-confidence.py prices length rules with it, scripts/bench-draft-variants.py draft models."""
from __future__ import annotations

from typing import Callable, Sequence

Row = tuple[int, float, int]  # (the draft model's pick, its confidence, the target's token)


def replay_ms(rows: Sequence[Row], keep: Callable[[list[float]], bool], draft_ms: float,
              verify_ms: Callable[[int], float]) -> float:
    """Milliseconds to write rows' tokens: keep(confidences drafted so far in the round) says whether to draft
    another; verify_ms(width) prices a target pass over width tokens."""
    position, ms = 0, 0.0
    while position < len(rows):
        confidences: list[float] = []
        while position + len(confidences) < len(rows) and keep(confidences):
            confidences.append(rows[position + len(confidences)][1])
        drafted = len(confidences)
        accepted = next((i for i in range(drafted) if rows[position + i][0] != rows[position + i][2]), drafted)
        ms += drafted * draft_ms + verify_ms(drafted + 1)
        position += accepted + 1
    return ms


def fixed_k(k: int, least_confidence: float = 0.3) -> Callable[[list[float]], bool]:
    """Draft up to k tokens a round, stopping after one drafted below least_confidence."""
    return lambda confidences: len(confidences) < k and (not confidences or confidences[-1] >= least_confidence)


def speedup(completions: Sequence[Sequence[Row]], keep, draft_ms: float, verify_ms: Callable[[int], float]) -> float:
    """Target alone's time for the completions' tokens (one one-token pass a token) over the drafted replay's, each
    completion replayed on its own: a round never drafts past its completion's end into the next."""
    alone = sum(len(rows) for rows in completions) * verify_ms(1)
    return alone / sum(replay_ms(rows, keep, draft_ms, verify_ms) for rows in completions)
