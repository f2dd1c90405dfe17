"""How often the draft model's token is the target's, by the draft model's confidence in it: teacher-forced over
the prompts (the target's greedy completion, then at each of its positions the draft model's pick and its
probability, through the drafter's own decode steps). Prints the acceptance per confidence bucket
(engine/policy.CONFIDENCE_BUCKETS) and, replaying the positions, each kind's speed-up over target alone for a fixed
K and for keep_drafting, priced by this machine's calibrated pass costs (greedy: a draft is accepted up to its first
position whose pick is not the target's token, exactly as a verify pass would judge it).

    .venv/bin/python scripts/bench-draft-confidence.py [PROMPTS]
"""
from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.draft_replay import fixed_k, speedup  # noqa: E402
from codecue_bench.engine_bench import request_kind  # noqa: E402
from codecue_bench.side_by_side import first_line_done  # noqa: E402
from engine.drafters import ModelDrafter  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_pair  # noqa: E402
from engine.policy import CONFIDENCE_BUCKETS, GainPolicy, confidence_bucket  # noqa: E402
from engine.types import CompletionRequest  # noqa: E402

engine = Engine(load_pair("default", device="cpu", dtype=None, with_draft=True))
path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "bench-prompts.jsonl"
prompts = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
drafter = ModelDrafter(engine.pair.draft, None, min_confidence=0.0, view=engine._draft_view())
picks = []  # (kind, [(draft token, confidence, target token)])
for prompt in prompts:
    ids = engine.encode_fim(prompt["prefix"], prompt["suffix"])
    stop = first_line_done if prompt["kind"] == "line" else None
    written = engine.complete(CompletionRequest(ids, 64, kind=request_kind(prompt["kind"]), stop=stop)).token_ids
    rows = []
    for i, token in enumerate(written):
        draft = drafter.propose(ids + written[:i], 1, lambda: False)
        rows.append((draft.tokens[0], draft.confidences[0], token))
    picks.append((prompt["kind"], rows))
    print(f"{prompt['name']:28s} {sum(d == t for d, _, t in rows)} of {len(rows)} positions the target's", flush=True)

buckets = collections.Counter()
for _, rows in picks:
    for drafted, confidence, token in rows:
        buckets[confidence_bucket(confidence), drafted == token] += 1
for least, name in CONFIDENCE_BUCKETS:
    right, wrong = buckets[name, True], buckets[name, False]
    print(f"confidence >= {least:.1f}: {right} of {right + wrong} the target's")

costs = engine.costs
policy = GainPolicy(costs, ("none", "draft"), 8)
rules = {f"K={k}": fixed_k(k) for k in range(1, 7)}
rules["keep_drafting"] = lambda c: len(c) < 8 and policy.keep_drafting(c)
kinds = sorted({kind for kind, _ in picks})
print(f"pass costs: verify {[round(costs.verify(w), 1) for w in range(1, 10)]} ms, draft step {costs.draft():.1f}")
for name, keep in rules.items():
    ratios = []
    for kind in kinds:
        completions = [rows for k, rows in picks if k == kind]
        ratios.append(f"{kind} {speedup(completions, keep, costs.draft(), costs.verify):.3f}x")
    print(f"{name:14s} " + "  ".join(ratios))
