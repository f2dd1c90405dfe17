"""The prefix-fill rule (prompt/budget.MIN_PREFIX_FILL) off and on, side by side in one process.

    .venv/bin/python scripts/bench-prefix-fill.py [TOTAL ...] [--complete TOTAL] [--out ROWS.jsonl]

On the holes of `codecue-bench prompt --files` (this repository's files of >= 150 lines, seeds 0 and 1, 30 holes
each): prompt tokens for each total budget with the rule off (0: the earliest anchor that fits, whatever it fills;
as before the rule) and on; with --complete, the line exact match and similarity of the default pair at that total
on the holes whose prompt the rule changes (the others are the same prompt, so the same answer). Run from the
repository root.
"""
import argparse
import json
import statistics
import sys
from difflib import SequenceMatcher
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import codecue_lsp.prompt.budget as budgeting  # noqa: E402
from codecue_bench.prompt_bench import built_for, file_holes  # noqa: E402
from codecue_lsp.completer import encode_built  # noqa: E402
from codecue_lsp.postprocess import make_stop_predicate, postprocess  # noqa: E402
from codecue_lsp.prompt import OpenDocument, budget_for  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_pair  # noqa: E402
from engine.types import CompletionRequest  # noqa: E402

RULES = {"off": 0.0, "on": budgeting.MIN_PREFIX_FILL}
PATTERNS = ("engine/*.py", "codecue_lsp/*.py", "codecue_lsp/prompt/*.py", "codecue_lsp/replay/*.py", "codecue_bench/*.py")


def prompt_for(engine, hole, total: int, rule: str):
    name, text, line, character, _, others = hole
    doc = OpenDocument(f"file:///bench/{name.replace('/', '_')}", "python", text)
    other_docs = [OpenDocument(f"file:///bench/{p.replace('/', '_')}", "python", t) for p, t in others]
    budgeting.MIN_PREFIX_FILL = RULES[rule]
    built = built_for("line", doc, line, character, engine, budget_for(total, 128), other_docs)
    return built, encode_built(engine, built)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("totals", nargs="*", type=int, default=[512, 1024])
    parser.add_argument("--complete", type=int, metavar="TOTAL")
    parser.add_argument("--out", help="one JSON line per changed hole (with --complete)")
    args = parser.parse_args()
    files = [str(p) for pattern in PATTERNS for p in sorted(Path(".").glob(pattern)) if len(p.read_text().splitlines()) >= 150]
    holes = [h for seed in (0, 1) for h in file_holes(files, "indent", seed)[:30]]
    engine = Engine(load_pair("default"))
    for total in args.totals:
        for rule in RULES:
            sizes = [len(prompt_for(engine, h, total, rule)[1][0]) for h in holes]
            print(f"total {total}, rule {rule}: prompt tokens mean {statistics.mean(sizes):.0f}, min {min(sizes)}, "
                  f"under 60 % of the total {sum(s < 0.6 * total for s in sizes)} of {len(sizes)}", flush=True)
    rows = []
    for hole in holes if args.complete else []:
        prompts = {rule: prompt_for(engine, hole, args.complete, rule) for rule in RULES}
        if prompts["off"][1][0] == prompts["on"][1][0]:
            continue
        typed = hole.text.split("\n")[hole.line][:hole.character]
        row = {"hole": hole.name, "truth": hole.truth}
        for rule, (built, (ids, heal)) in prompts.items():
            result = engine.complete(CompletionRequest(ids, 24, stop=make_stop_predicate(built), drafter="hybrid",
                                                       heal=heal))
            answer = (typed + postprocess(result.text, built).split("\n", 1)[0]).strip()
            row[rule] = {"tokens": len(ids), "exact": answer == hole.truth,
                         "similarity": SequenceMatcher(None, answer, hole.truth).ratio()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    engine.close()
    for rule in RULES if rows else ():
        print(f"total {args.complete}, rule {rule}: {len(rows)} changed holes, exact "
              f"{sum(r[rule]['exact'] for r in rows)}, similarity {statistics.mean(r[rule]['similarity'] for r in rows):.3f}, "
              f"prompt tokens {statistics.mean(r[rule]['tokens'] for r in rows):.0f}")
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
