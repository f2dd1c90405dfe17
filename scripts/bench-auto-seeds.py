"""Auto's drafting policy as on main against the policy before the thirty-first's two changes, side by side in one
process: two engines on one loaded pair, the "before" one with every session's acceptance seeded at 2 trials' worth
of the pooled rate (SharedAcceptance.seed_weights empty) and the draft model's calibrated costs not moved by the
target's timings (PassCosts.drift fixed at 1). For each prompt of docs/bench-prompts.jsonl (or the file $PROMPTS names):
target alone, the draft model's mode and auto with each engine, the order reversed every other round; single lines
stop at their end, as the server asks. Every output must equal target alone's. Prints speed over target alone per
prompt kind, then what each engine learned.

    .venv/bin/python scripts/bench-auto-seeds.py [rounds]
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import codecue_bench.side_by_side as side_by_side  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_pair  # noqa: E402


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    if os.environ.get("PROMPTS"):
        side_by_side.PROMPTS = Path(os.environ["PROMPTS"])
    pair = load_pair("default", device="cpu", dtype=None, with_draft=True)
    engines = {"before": Engine(pair), "now": Engine(pair)}
    engines["before"].acceptance.seed_weights = {}
    engines["before"].costs.drift = lambda: 1.0
    modes = (("target alone", "target", "now", True), ("draft", "speculative", "now", True),
             ("auto before", "auto", "before", True), ("auto now", "auto", "now", True))
    seconds = side_by_side.time_side_by_side(engines, modes, rounds, lines_end=True)
    side_by_side.print_speedups(seconds, [name for name, *_ in modes])
    for name, engine in engines.items():
        pooled = {source: round(accepted / tried, 3) for source, (accepted, tried) in engine.acceptance.trials.items()
                  if tried}
        costs = engine.costs
        print(f"{name}: pooled acceptance {pooled}; target's one-token pass {costs.verify(1):.1f} ms, "
              f"draft model's {costs.draft():.1f} ms, drift {costs.drift():.2f}")


if __name__ == "__main__":
    main()
