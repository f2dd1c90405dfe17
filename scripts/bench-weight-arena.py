"""The weight arena (engine/weight_arena.py) side by side: the pair loaded twice in one process, one copy's weights
where they were loaded (CODECUE_WEIGHT_ARENA=0), the other's in the arena, timed in alternated rounds like auto's (a
target pass of 8 tokens, one of 1, then 7 draft steps) after --context tokens. Every round's logits must be the same
in both. docs/benchmarks.md, forty-fifth.

    .venv/bin/python scripts/bench-weight-arena.py [--pair default] [--rounds 40] [--arena-first]

Which copy loads first changes where its memory lands: --arena-first swaps them (run both ways).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import draft_vocab, torch_thread  # noqa: E402
from engine.kvcache import TrackedCache  # noqa: E402
from engine.models import load_pair  # noqa: E402

KINDS = ("as loaded", "arena")


def load(pair_name: str, kind: str):
    os.environ["CODECUE_WEIGHT_ARENA"] = "1" if kind == "arena" else "0"  # read when load_pair builds the lean step
    return load_pair(pair_name, with_draft=True)


def one_round(target: TrackedCache, draft: TrackedCache, ids: list[int], context: int, times: dict) -> tuple:
    started = time.perf_counter()
    wide = target.forward(ids[context:context + 8])
    times["T8"].append(time.perf_counter() - started)
    target.truncate(context)
    started = time.perf_counter()
    one = target.forward(ids[context:context + 1], logits="last")
    times["T1"].append(time.perf_counter() - started)
    target.truncate(context)
    drafted = []
    for i in range(7):
        started = time.perf_counter()
        with draft_vocab.reached_logits(draft.model):
            drafted.append(draft.forward(ids[context + i:context + i + 1], logits="last"))
        times["D1"].append(time.perf_counter() - started)
    draft.truncate(context)
    return wide, one, torch.cat(drafted)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="default")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--arena-first", action="store_true")
    args = parser.parse_args()
    order = KINDS[::-1] if args.arena_first else KINDS
    pairs = {kind: load(args.pair, kind) for kind in order}
    ids = torch.randint(100, 15000, (args.context + 8,), generator=torch.Generator().manual_seed(1)).tolist()

    def run() -> dict:
        caches, times = {}, {kind: {"T1": [], "T8": [], "D1": []} for kind in KINDS}
        with torch.inference_mode():
            for kind, pair in pairs.items():
                target, draft = TrackedCache(pair.target), TrackedCache(pair.draft)
                target.forward(ids[:args.context], logits="none")
                draft.forward(ids[:args.context], logits="none")
                draft_vocab.cover(pair.draft, ids)
                caches[kind] = (target, draft)
            first = None
            for r in range(args.rounds + 4):  # the first 4 untimed
                for kind in (KINDS if r % 2 else KINDS[::-1]):
                    got = one_round(*caches[kind], ids, args.context, times[kind] if r >= 4 else
                                    {"T1": [], "T8": [], "D1": []})
                    first = first or got
                    if not all(torch.equal(g, w) for g, w in zip(got, first)):
                        raise SystemExit(f"the logits of {kind} differ: the arena changed a weight")
        return times

    times = torch_thread.run(run)
    print(f"{args.rounds} rounds, context {args.context}, {'arena' if args.arena_first else 'as loaded'} first")
    for key in ("T1", "T8", "D1"):
        before, after = (statistics.median(times[kind][key]) * 1e3 for kind in KINDS)
        print(f"{key}: as loaded {before:.3f} ms, arena {after:.3f} ms ({(after - before) / before:+.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
