"""The auto policy with request kinds against without them, side by side in one process: two engines on one loaded
pair; for each prompt of docs/bench-prompts.jsonl (made ready first, as the server makes a prompt ready) target alone,
auto without a kind, auto with the kind the server would send ("line" for single-line holes, else "block") and the
draft model's mode, the order reversed every other round. Every mode's output must equal target alone's. Prints each
mode's speed over target alone per prompt kind (seconds summed over the rounds).

    .venv/bin/python scripts/bench-request-kinds.py [rounds]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.engine_bench import request_kind, run_own_mode  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_pair  # noqa: E402
from engine.types import CompletionRequest  # noqa: E402

# (name printed, the engine bench's mode, sent with the request's kind)
MODES = (("target alone", "target", False), ("auto without kinds", "auto", False), ("auto with kinds", "auto", True),
         ("draft model", "speculative", True))
K = 8  # drafted tokens at most, as `codecue-bench engine`'s default


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    pair = load_pair("default", device="cpu", dtype=None, with_draft=True)
    with_kinds, without = Engine(pair), Engine(pair)
    prompts = [json.loads(line) for line in (ROOT / "docs" / "bench-prompts.jsonl").read_text().splitlines()]
    warm_up = with_kinds.encode_fim("def add(a, b):\n", "\n")
    for engine in (with_kinds, without):
        engine.complete(CompletionRequest(warm_up, 16))
    seconds: dict[tuple[str, str], float] = {}
    for turn in range(rounds):
        for prompt in prompts:
            ids = with_kinds.encode_fim(prompt["prefix"], prompt["suffix"])
            reference = None
            for name, mode, kinds in (MODES if turn % 2 == 0 else MODES[::-1]):
                engine = with_kinds if kinds else without
                run = run_own_mode(engine, mode, ids, 64, K, warm=True,
                                   kind=request_kind(prompt["kind"]) if kinds else "")
                reference = run.tokens if reference is None else reference
                assert run.tokens == reference, f"{prompt['name']}: {name} differs"
                seconds[prompt["kind"], name] = seconds.get((prompt["kind"], name), 0.0) + run.seconds
        print(f"round {turn + 1} of {rounds} done", flush=True)
    kinds = sorted({kind for kind, _ in seconds})
    for name, _, _ in MODES:
        ratios = [seconds[kind, "target alone"] / seconds[kind, name] for kind in kinds]
        total = sum(seconds[kind, "target alone"] for kind in kinds) / sum(seconds[kind, name] for kind in kinds)
        print(f"{name:20s} " + "  ".join(f"{kind} {r:.3f}" for kind, r in zip(kinds, ratios)) + f"  all {total:.3f}")


if __name__ == "__main__":
    main()
