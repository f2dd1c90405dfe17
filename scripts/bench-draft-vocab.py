"""The draft model's head cut to part of the vocabulary (engine/draft_vocab.py: the default pair's `draft_vocab`)
against its whole head, side by side in one process: two engines on one loaded pair, the "before" one drafting
with every row of the head (`TrimmedHead.whole` set for its calls). For each prompt of docs/bench-prompts.jsonl (or
the file $PROMPTS names): target alone, the draft model's mode and auto with each engine, the order reversed every
other round; single lines stop at their end, as the server asks. Every output must equal target alone's. Prints
speed over target alone per prompt kind, then what each engine learned.

    .venv/bin/python scripts/bench-draft-vocab.py [rounds]
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.side_by_side import auto_before_and_now  # noqa: E402
from engine.draft_vocab import TrimmedHead  # noqa: E402


def with_whole_head(engine) -> None:
    head = engine.pair.draft.lm_head
    if not isinstance(head, TrimmedHead):
        raise SystemExit("the default pair's draft head is not cut (draft_vocab in models.toml, CODECUE_DRAFT_VOCAB)")
    complete = engine.complete

    def complete_with_whole_head(*args, **kwargs):
        head.whole = True
        try:
            return complete(*args, **kwargs)
        finally:
            head.whole = False

    engine.complete = complete_with_whole_head


if __name__ == "__main__":
    auto_before_and_now(with_whole_head, int(sys.argv[1]) if len(sys.argv) > 1 else 2)
