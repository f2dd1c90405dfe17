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

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.side_by_side import auto_before_and_now  # noqa: E402


def before_the_thirty_first(engine) -> None:
    engine.acceptance.seed_weights = {}
    engine.costs.drift = lambda: 1.0


def main() -> None:
    engines = auto_before_and_now(before_the_thirty_first, int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    for name, engine in engines.items():
        costs = engine.costs
        print(f"{name}: target's one-token pass {costs.verify(1):.1f} ms, draft model's {costs.draft():.1f} ms, "
              f"drift {costs.drift():.2f}")


if __name__ == "__main__":
    main()
