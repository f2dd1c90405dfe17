"""The auto policy pricing the draft model's catch-ups by its pass widths (as on main) against the twenty-eighth's
pricing (a catch-up at the prefill rate per token, a short one counted as one of the model's steps), side by side in
one process: two engines on one loaded pair; for each prompt of docs/bench-prompts.jsonl (made ready first) target
alone and both policies, the order reversed every other round. Every mode's output must equal target alone's.
Prints each policy's speed over target alone per prompt kind, and the draft model's costs each engine learned.

    .venv/bin/python scripts/bench-catchup-pricing.py [rounds]
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.side_by_side import print_speedups, time_side_by_side  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_pair  # noqa: E402
from engine.pass_costs import PREFILL_MIN_TOKENS, PassCosts  # noqa: E402
from engine.policy import GainPolicy  # noqa: E402


class PrefillRateCosts(PassCosts):
    def catchup(self, tokens: int) -> float:
        return tokens * self.prefill()


class StepCountingPolicy(GainPolicy):
    def report(self, drafter, draft, accepted, verify_seconds):
        if 0 < draft.catchup_tokens < PREFILL_MIN_TOKENS:
            draft = dataclasses.replace(draft, steps=draft.steps + 1,
                                        step_seconds=draft.step_seconds + draft.catchup_seconds,
                                        catchup_tokens=0, catchup_seconds=0.0)
        super().report(drafter, draft, accepted, verify_seconds)


class BeforeEngine(Engine):
    def __init__(self, pair):
        super().__init__(pair)
        self.costs.__class__ = PrefillRateCosts

    def _controller(self, name, session, request):
        controller = super()._controller(name, session, request)
        if type(controller) is GainPolicy:
            controller.__class__ = StepCountingPolicy
        return controller


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    pair = load_pair("default", device="cpu", dtype=None, with_draft=True)
    engines = {"by width": Engine(pair), "before": BeforeEngine(pair)}
    modes = (("target alone", "target", "by width", True), ("auto, before", "auto", "before", True),
             ("auto, by width", "auto", "by width", True))
    print_speedups(time_side_by_side(engines, modes, rounds), [name for name, *_ in modes])
    for name, engine in engines.items():
        costs = engine.costs
        widths = {w: round(ms, 1) for w, ms in sorted(costs.observed_draft_widths.items())}
        print(f"{name}: learned draft step {costs.draft():.1f} ms, catch-up passes {widths}, "
              f"prefill {costs.prefill():.2f} ms a token")


if __name__ == "__main__":
    main()
