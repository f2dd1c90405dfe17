"""The draft model's draft length by its confidence (GainPolicy.keep_drafting) against the gain model's K
(CODECUE_DRAFT_LENGTH=k), side by side in one process: per prompt target alone, auto with K, auto with the rule, in
turn; the first of TURNS rounds is a warm-up. Outputs must be identical. Prints each kind's speed-up over target
alone and the target / draft passes spent.

    .venv/bin/python scripts/bench-draft-length.py [PROMPTS] [TURNS]
"""
from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.engine_bench import request_kind  # noqa: E402
from codecue_bench.side_by_side import first_line_done  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_pair  # noqa: E402
from engine.types import CompletionRequest  # noqa: E402

MODES = ("target", "auto_k", "auto_conf")
engine = Engine(load_pair("default", device="cpu", dtype=None, with_draft=True))
path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "bench-prompts.jsonl"
prompts = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
turns = int(sys.argv[2]) if len(sys.argv) > 2 else 3
warm_up = engine.encode_fim("def add(a, b):\n", "\n")
engine.complete(CompletionRequest(warm_up, 16))  # the first passes' one-time costs, out of the timings
engine.complete(CompletionRequest(warm_up, 16, drafter="auto"))
seconds, passes = collections.Counter(), collections.Counter()
for turn in range(turns):
    for prompt in prompts:
        ids = engine.encode_fim(prompt["prefix"], prompt["suffix"])
        stop = first_line_done if prompt["kind"] == "line" else None
        outputs = {}
        for mode in MODES:
            os.environ["CODECUE_DRAFT_LENGTH"] = "k" if mode == "auto_k" else "confidence"
            session = f"length:{mode}"
            engine.prefill(session, ids).result()  # made ready at rest, as the server does where the cursor rests
            started = time.perf_counter()
            result = engine.complete(CompletionRequest(ids, 64, drafter="none" if mode == "target" else "auto",
                                                       session=session, kind=request_kind(prompt["kind"]), stop=stop))
            wall = time.perf_counter() - started
            engine.forget_session(session).result()
            outputs[mode] = result.token_ids
            if turn > 0:
                seconds[prompt["kind"], mode] += wall
                passes[prompt["kind"], mode, "T"] += result.stats.target_passes
                passes[prompt["kind"], mode, "D"] += result.stats.draft_passes
        assert outputs["auto_k"] == outputs["target"] == outputs["auto_conf"], prompt["name"]
for kind in sorted({p["kind"] for p in prompts}) + ["all"]:
    def total(mode):
        return sum(v for (k, m), v in seconds.items() if m == mode and kind in (k, "all"))
    line = " ".join(f"{mode} {total('target') / total(mode):.3f}x" for mode in MODES[1:])
    if kind != "all":
        line += " " + " ".join(f"({mode}: target passes {passes[kind, mode, 'T']}, draft {passes[kind, mode, 'D']})"
                               for mode in MODES[1:])
    print(f"{kind:10s} {line}")
