"""Lookup drafts cut by how long their match is (thirty-second) against one acceptance for every lookup, side by side
in one process: two engines on one loaded pair; on the "before" one each auto session's policy asks a lookup for
the K its overall acceptance pays for and cuts the draft by its source's acceptance (engine/policy.py as before the
match buckets). For each prompt of docs/bench-prompts.jsonl (or the file $PROMPTS names): target alone, the draft
model's mode and auto with each engine, the order reversed every other round; single lines stop at their end, as
the server asks. Every output must equal target alone's. Prints speed over target alone per prompt kind, then what
each engine learned.

    .venv/bin/python scripts/bench-lookup-match.py [rounds]
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.side_by_side import auto_before_and_now  # noqa: E402
from engine.policy import LOOKUP_SOURCES, GainPolicy, expected_tokens  # noqa: E402


class OneLookupRate(GainPolicy):
    """The policy before the match buckets: the lookup asked for the chosen K, its draft cut by its source's rate."""

    def choose(self, tokens, max_k):
        if max_k <= 0:
            return "none", 0
        self._score_shadow(tokens)
        drafter, k = self._choose(tokens, max_k)
        if drafter in ("lookup", "hybrid"):
            self.shadow = None
        elif self.lookup is not None and self.shadow is None:
            self._propose_shadow(tokens, min(max_k, self.max_k))
        return drafter, k

    def review(self, draft):
        if draft.extended:
            return self._review_extension(draft)
        if draft.source not in LOOKUP_SOURCES or len(draft.tokens) <= 1:
            return draft
        alpha = self.alpha(draft.source)
        best = max(range(1, len(draft.tokens) + 1),
                   key=lambda k: expected_tokens(alpha, k) / self.costs.verify(k + 1))
        return draft.cut(best)


def one_lookup_rate(engine) -> None:
    """Every auto session this engine starts runs OneLookupRate."""
    make_controller = engine._controller

    def old_controller(name, session, request):
        controller = make_controller(name, session, request)
        if type(controller) is GainPolicy:
            controller.__class__ = OneLookupRate
        return controller
    engine._controller = old_controller


def main() -> None:
    auto_before_and_now(one_lookup_rate, int(sys.argv[1]) if len(sys.argv) > 1 else 2)


if __name__ == "__main__":
    main()
