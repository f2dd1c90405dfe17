"""Where target alone's and auto's time goes, prompt by prompt: each completion's wall time against the time inside
model passes (the target's by width, the draft model's), timed with every TrackedCache.forward. Each prompt is made
ready untimed first, as the server does where the cursor rests; single lines stop at their end. Prompts: the file
given, else docs/bench-prompts.jsonl. Prints the second round per prompt and both rounds' totals.

    .venv/bin/python scripts/bench-auto-time.py [PROMPTS]
"""
from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.engine_bench import DRAFTER_OF_MODE, request_kind  # noqa: E402
from codecue_bench.side_by_side import first_line_done  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.kvcache import TrackedCache  # noqa: E402
from engine.models import load_pair  # noqa: E402
from engine.types import CompletionRequest  # noqa: E402

passes: list[tuple[str, int, float]] = []  # ("T" target | "D" draft, tokens, seconds)


def timed_forward(forward):
    def forward_and_log(self, new_ids, logits="all", cancelled=None):
        started = time.perf_counter()
        try:
            return forward(self, new_ids, logits, cancelled)
        finally:
            passes.append(("T" if self.model is TARGET else "D", len(new_ids), time.perf_counter() - started))
    return forward_and_log


TrackedCache.forward = timed_forward(TrackedCache.forward)
pair = load_pair("default", device="cpu", dtype=None, with_draft=True)
TARGET = pair.target
engine = Engine(pair)
path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "bench-prompts.jsonl"
prompts = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
engine.complete(CompletionRequest(engine.encode_fim("def add(a, b):\n", "\n"), 16))  # one-time costs
totals: collections.Counter = collections.Counter()
for turn in range(2):
    for prompt in prompts:
        ids = engine.encode_fim(prompt["prefix"], prompt["suffix"])
        stop = first_line_done if prompt["kind"] == "line" else None
        for mode in ("target", "auto"):
            session = f"time:{mode}"
            engine.prefill(session, ids).result()
            passes.clear()
            started = time.perf_counter()
            result = engine.complete(CompletionRequest(ids, 64, drafter=DRAFTER_OF_MODE[mode], session=session,
                                                       kind=request_kind(prompt["kind"]), stop=stop))
            wall = time.perf_counter() - started
            engine.forget_session(session).result()
            target = sum(s for who, _, s in passes if who == "T")
            draft = sum(s for who, _, s in passes if who == "D")
            for name, value in (("wall", wall), ("target", target), ("draft", draft),
                                ("tokens", len(result.token_ids))):
                totals[mode, name] += value
            if turn == 1:
                widths = collections.Counter(f"{who}{n}" for who, n, _ in passes)
                print(f"{prompt['name'][:24]:24s} {mode:6s} {wall * 1e3:7.1f} ms: target passes {target * 1e3:7.1f}, "
                      f"draft {draft * 1e3:6.1f}, other {(wall - target - draft) * 1e3:5.1f}; "
                      f"{len(result.token_ids)} tokens; passes " + " ".join(f"{k}:{v}" for k, v in sorted(widths.items())),
                      flush=True)
for mode in ("target", "auto"):
    wall = totals[mode, "wall"]
    shares = ", ".join(f"{name} {100 * totals[mode, name] / wall:.1f} %" for name in ("target", "draft"))
    other = 100 * (wall - totals[mode, "target"] - totals[mode, "draft"]) / wall
    print(f"{mode}: {wall:.2f} s for {totals[mode, 'tokens']} tokens; in passes: {shares}; other {other:.1f} %")
print(f"auto over target alone: {totals['target', 'wall'] / totals['auto', 'wall']:.3f}x")
