"""The auto policy pricing the draft model's catch-ups by its pass widths (as on main) against the twenty-eighth's
pricing (a catch-up at the prefill rate per token, a short one counted as one of the model's steps), side by side in
one process: two engines on one loaded pair; for each prompt of docs/bench-prompts.jsonl (made ready first) target
alone and both policies, the order reversed every other round. Every mode's output must equal target alone's.
Prints each policy's speed over target alone per prompt kind, and the draft model's costs each engine learned.

    .venv/bin/python scripts/bench-catchup-pricing.py [rounds]
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.engine_bench import request_kind, run_own_mode  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_pair  # noqa: E402
from engine.pass_costs import PREFILL_MIN_TOKENS, PassCosts  # noqa: E402
from engine.policy import GainPolicy  # noqa: E402
from engine.types import CompletionRequest  # noqa: E402

K = 8  # drafted tokens at most, as `codecue-bench engine`'s default


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
    modes = (("target alone", "target", "by width"), ("auto, before", "auto", "before"),
             ("auto, by width", "auto", "by width"))
    prompts = [json.loads(line) for line in (ROOT / "docs" / "bench-prompts.jsonl").read_text().splitlines()]
    warm_up = engines["by width"].encode_fim("def add(a, b):\n", "\n")
    for engine in engines.values():
        engine.complete(CompletionRequest(warm_up, 16))
    seconds: dict[tuple[str, str], float] = {}
    for turn in range(rounds):
        for prompt in prompts:
            ids = engines["by width"].encode_fim(prompt["prefix"], prompt["suffix"])
            reference = None
            for name, mode, engine in (modes if turn % 2 == 0 else modes[::-1]):
                run = run_own_mode(engines[engine], mode, ids, 64, K, warm=True, kind=request_kind(prompt["kind"]))
                reference = run.tokens if reference is None else reference
                assert run.tokens == reference, f"{prompt['name']}: {name} differs"
                seconds[prompt["kind"], name] = seconds.get((prompt["kind"], name), 0.0) + run.seconds
        print(f"round {turn + 1} of {rounds} done", flush=True)
    kinds = sorted({kind for kind, _ in seconds})
    for name, _, _ in modes:
        ratios = [seconds[kind, "target alone"] / seconds[kind, name] for kind in kinds]
        total = sum(seconds[kind, "target alone"] for kind in kinds) / sum(seconds[kind, name] for kind in kinds)
        print(f"{name:16s} " + "  ".join(f"{kind} {r:.3f}" for kind, r in zip(kinds, ratios)) + f"  all {total:.3f}")
    for name, engine in engines.items():
        costs = engine.costs
        widths = {w: round(ms, 1) for w, ms in sorted(costs.observed_catchup.items())}
        print(f"{name}: learned draft step {costs.draft():.1f} ms, catch-up passes {widths}, "
              f"prefill {costs.prefill():.2f} ms a token")


if __name__ == "__main__":
    main()
