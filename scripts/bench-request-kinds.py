"""The auto policy with request kinds against without them, side by side in one process: two engines on one loaded
pair; for each prompt of docs/bench-prompts.jsonl (made ready first, as the server makes a prompt ready) target alone,
auto without a kind, auto with the kind the server would send ("line" for single-line holes, else "block") and the
draft model's mode, the order reversed every other round. Every mode's output must equal target alone's. Prints each
mode's speed over target alone per prompt kind (seconds summed over the rounds).

    .venv/bin/python scripts/bench-request-kinds.py [rounds]
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.side_by_side import print_speedups, time_side_by_side  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_pair  # noqa: E402

# (name printed, the engine bench's mode, its engine, sent with the request's kind)
MODES = (("target alone", "target", "with kinds", False), ("auto without kinds", "auto", "without", False),
         ("auto with kinds", "auto", "with kinds", True), ("draft model", "speculative", "with kinds", True))


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    pair = load_pair("default", device="cpu", dtype=None, with_draft=True)
    engines = {"with kinds": Engine(pair), "without": Engine(pair)}
    seconds = time_side_by_side(engines, MODES, rounds)
    print_speedups(seconds, [name for name, *_ in MODES])


if __name__ == "__main__":
    main()
