"""The draft model's head cut to part of the vocabulary (engine/draft_vocab.py: the default pair's `draft_vocab` and
`draft_vocab_order`) against another head, side by side in one process: two engines on one loaded pair, the "before"
one drafting with the head `--before` names (swapped in for its calls): `whole` (every row), `id:N` (the first N
ids and the text's) or `frequency:N` (the N most frequent ids in code and the text's). For each prompt of
docs/bench-prompts.jsonl (or the file $PROMPTS names): target alone, the draft model's mode and auto with each
engine, the order reversed every other round; single lines stop at their end, as the server asks. Every output must
equal target alone's. Prints speed over target alone per prompt kind, then what each engine learned.

    .venv/bin/python scripts/bench-draft-vocab.py [rounds] [--before whole|id:N|frequency:N]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.side_by_side import auto_before_and_now  # noqa: E402
from engine import draft_vocab  # noqa: E402
from engine.draft_vocab import TrimmedHead  # noqa: E402
from engine.models import codecue_home  # noqa: E402


def head_named(spec: str, now: TrimmedHead, tokenizer):
    """The "before" head: the whole one, or another cut of it."""
    if spec == "whole":
        return now.full
    order, _, rows = spec.partition(":")
    if order not in ("id", "frequency") or not rows.isdigit():
        raise SystemExit(f"--before {spec!r}: whole, id:N or frequency:N")
    first = int(rows) - int(rows) % draft_vocab.ROWS_MULTIPLE
    if order == "id":
        return TrimmedHead(now.full, first)
    ranking = draft_vocab.frequency_order(tokenizer, codecue_home())
    return TrimmedHead(now.full, first, draft_vocab.kept_ids(ranking, first, now.vocab))


def with_head(spec: str):
    def make_before(engine) -> None:
        draft = engine.pair.draft
        now = draft.lm_head
        if not isinstance(now, TrimmedHead):
            raise SystemExit("the default pair's draft head is not cut "
                             "(draft_vocab in models.toml, CODECUE_DRAFT_VOCAB)")
        before = head_named(spec, now, engine.pair.tokenizer)
        print(f"before: {spec}; now:{draft_vocab.describe(draft)}")
        complete = engine.complete

        def complete_with_before_head(*args, **kwargs):
            now.instead = before
            try:
                return complete(*args, **kwargs)
            finally:
                now.instead = None

        engine.complete = complete_with_before_head
    return make_before


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("rounds", nargs="?", type=int, default=2)
    parser.add_argument("--before", default="whole")
    args = parser.parse_args()
    auto_before_and_now(with_head(args.before), args.rounds)
