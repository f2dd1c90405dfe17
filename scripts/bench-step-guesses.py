"""The draft model's steps with lookup guesses (engine/step_guesses.py, as on main) against steps of one token,
side by side in one process: two engines on one loaded pair, one with guesses off; for each prompt of
docs/bench-prompts.jsonl (made ready first) target alone, the draft model's mode and auto with each engine, the order
reversed every other round; single-line prompts stop at the end of their line, as the server asks. Every output must
equal target alone's. Prints speed over target alone per prompt kind, the guess rate and count the engine learned.

    .venv/bin/python scripts/bench-step-guesses.py [rounds]
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.side_by_side import print_speedups, time_side_by_side  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_pair  # noqa: E402


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    pair = load_pair("default", device="cpu", dtype=None, with_draft=True)
    engines = {"off": Engine(pair), "on": Engine(pair)}
    engines["off"].step_guesses.most = 0
    modes = (("target alone", "target", "off", True), ("draft, one-token steps", "speculative", "off", True),
             ("draft, guesses", "speculative", "on", True), ("auto, one-token steps", "auto", "off", True),
             ("auto, guesses", "auto", "on", True))
    print_speedups(time_side_by_side(engines, modes, rounds, lines_end=True), [name for name, *_ in modes])
    guesses = engines["on"].step_guesses
    print(f"guesses right {guesses.alpha():.3f} of the time, {guesses.count()} a step; "
          "the draft model's pass by width, ms:",
          {width: round(guesses.costs.draft_width(width), 1) for width in (1, 2, 3, 4)})


if __name__ == "__main__":
    main()
