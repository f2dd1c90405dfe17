"""Where auto's time goes, round by round: per prompt, target alone and auto from a prompt made ready first (as the
server completes where the cursor rests), every model pass timed by model and width, and auto's rounds as
`source drafted/accepted @ verify ms` (`+xN`: the last N drafted came from the draft model's lookup extension).
The first of two turns is a warm-up; the second is printed (docs/benchmarks.md, forty-second).

    .venv/bin/python scripts/trace-auto-rounds.py [KINDS]     # KINDS: line,block,repetitive (default: all)
"""
from __future__ import annotations

import collections
import json
import statistics
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
from engine.types import CompletionRequest, CompletionStats  # noqa: E402

rounds: list[tuple] = []
passes: list[tuple[str, int, float]] = []  # (T or D, tokens, seconds)
count_pass = CompletionStats.count_pass
forward = TrackedCache.forward


def traced_count_pass(self, drafter, source, drafted, accepted, verify_seconds, extended=0):
    rounds.append((source, drafted, accepted, verify_seconds * 1e3, extended))
    return count_pass(self, drafter, source, drafted, accepted, verify_seconds, extended)


def traced_forward(self, new_ids, logits="all", cancelled=None):
    started = time.perf_counter()
    try:
        return forward(self, new_ids, logits, cancelled)
    finally:
        passes.append(("T" if self.model is pair.target else "D", len(new_ids), time.perf_counter() - started))


CompletionStats.count_pass = traced_count_pass
TrackedCache.forward = traced_forward
pair = load_pair("default", device="cpu", dtype=None, with_draft=True)
engine = Engine(pair)
kinds = sys.argv[1].split(",") if len(sys.argv) > 1 else ["line", "block", "repetitive"]
prompts = [json.loads(line) for line in (ROOT / "docs" / "bench-prompts.jsonl").read_text().splitlines() if line.strip()]
engine.complete(CompletionRequest(engine.encode_fim("def add(a, b):\n", "\n"), 16))  # one-time costs, untimed
totals = collections.Counter()
for turn in range(2):
    for prompt in (p for p in prompts if p["kind"] in kinds):
        ids = engine.encode_fim(prompt["prefix"], prompt["suffix"])
        for mode in ("target", "auto"):
            # as codecue_bench.engine_bench.run_own_mode's --warm run, with the trace cleared between prefill and completion
            session = f"trace:{mode}"
            engine.prefill(session, ids).result()
            rounds.clear()
            passes.clear()
            started = time.perf_counter()
            result = engine.complete(CompletionRequest(
                ids, 64, drafter=DRAFTER_OF_MODE[mode], session=session, kind=request_kind(prompt["kind"]),
                stop=first_line_done if prompt["kind"] == "line" else None))
            seconds = time.perf_counter() - started
            engine.forget_session(session).result()
            if turn == 0:
                continue
            totals[(prompt["kind"], mode)] += seconds
            by_width = collections.defaultdict(list)
            for model, tokens, took in passes:
                by_width[f"{model}{tokens}"].append(took * 1e3)
            widths = "  ".join(f"{key} x{len(ms)} {statistics.median(ms):.1f}ms" for key, ms in sorted(by_width.items()))
            print(f"{prompt['name']} {mode}: {seconds * 1e3:.0f} ms, {len(result.token_ids)} tokens; passes {widths}")
            if mode == "auto":
                print("    " + " ".join(f"{source[:4]}{drafted}/{accepted}@{ms:.1f}" + (f"+x{extended}" if extended else "")
                                      for source, drafted, accepted, ms, extended in rounds))
for kind in kinds:
    if totals[(kind, "auto")]:
        print(f"{kind}: auto {totals[(kind, 'target')] / totals[(kind, 'auto')]:.2f}x target alone")
