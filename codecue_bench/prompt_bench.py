"""`codecue-bench prompt`: line exact match against the suffix budget and where the middle starts, through the
real prompt builder.

Each HumanEval problem becomes a whole file (prompt + canonical solution + tests); one line of the solution is
removed and the cursor put after its indentation, as an editor's auto-indent leaves it (`--cursor typed`: after
the line's first word too, as if the user had typed it). The server's own build_prompt + post-processing make the
completion; the typed part plus its first line is compared with the removed line. Every suffix budget and middle
split (`--middle-from line,cursor,line:8`) runs on the same holes in one process. Greedy, so each result is
deterministic. `line:N` is the prompt the server builds when the middle started N-1 lines above the hole's line and
the user typed down to it (the middle kept across newlines, prompt/layout.middle_start): the worst case of
`--middle-lines N`.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time

FIRST_WORD = re.compile(r"\s*[\w.]+\W?")


def holes(count: int, cursor: str = "indent") -> list[tuple[str, str, int, int, str]]:
    """(name, document text with the line removed but what is typed of it, line, character, removed line's code).
    cursor: "indent" (only the indentation typed) or "typed" (the first word too, where the line has more)."""
    from .prompts import middle_line_holes

    if cursor not in ("indent", "typed"):
        raise ValueError(f"--cursor must be indent or typed, not {cursor!r}")
    out = []
    for i, problem, solution, j in middle_line_holes(count):
        code = solution[j].rstrip("\n")
        typed = code[: len(code) - len(code.lstrip())]
        word = FIRST_WORD.match(code)
        if cursor == "typed" and word and word.end() < len(code.rstrip()):
            typed = code[: word.end()]
        before = problem["prompt"] + "".join(solution[:j]) + typed
        after = "\n" + "".join(solution[j + 1:]) + "\n\n" + problem["test"]
        line = before.count("\n")
        out.append((f"HumanEval/{i}", before + after, line, len(typed), code.strip()))
    return out


def run(pair: str, budgets: list[int], count: int, max_new_tokens: int, target_weights: str | None = None,
        cursor: str = "indent", splits: tuple[str, ...] = ("line",)) -> dict:
    from engine.engine import Engine
    from engine.models import load_pair
    from engine.types import CompletionRequest

    from codecue_lsp.completer import encode_built
    from codecue_lsp.postprocess import make_stop_predicate, postprocess
    from codecue_lsp.prompt import OpenDocument, PromptBudget

    # A target format asked for by name loads without the draft: quality is the target's alone (lookup drafts only).
    engine = Engine(load_pair(pair, target_weights=target_weights, with_draft=False if target_weights else None))
    cases = holes(count, cursor)
    for split in splits:
        parse_split(split)  # a typo fails before the first hole, not after an hour
    results = {(s, b): {"exact": 0, "prompt_tokens": 0, "seconds": 0.0} for s in splits for b in budgets}
    for name, text, line, character, truth in cases:
        doc = OpenDocument(f"file:///bench/{name.replace('/', '_')}.py", "python", text)
        typed = text.split("\n")[line][:character]
        for split, budget in results:
            built = built_for(split, doc, line, character, engine, PromptBudget(suffix=budget))
            ids, heal = encode_built(engine, built)  # as the server does
            started = time.perf_counter()
            result = engine.complete(CompletionRequest(ids, max_new_tokens, stop=make_stop_predicate(built),
                                                       drafter="hybrid", heal=heal))
            first_line = postprocess(result.text, built).split("\n", 1)[0]
            r = results[split, budget]
            r["seconds"] += time.perf_counter() - started
            r["prompt_tokens"] += len(ids)
            r["exact"] += (typed + first_line).strip() == truth
        print(f"{name}: {truth!r}", file=sys.stderr, flush=True)
    engine.close()
    return {"pair": pair, "target_weights": engine.pair.target_weights, "holes": len(cases), "cursor": cursor,
            "runs": [{"middle_from": s, "suffix_budget": b, "line_exact_match": r["exact"] / len(cases),
                      "mean_prompt_tokens": r["prompt_tokens"] / len(cases), "mean_seconds": r["seconds"] / len(cases)}
                     for (s, b), r in results.items()]}


def parse_split(split: str) -> tuple[str, int]:
    """"line" | "cursor" | "line:N" -> (middle_from, lines the middle spans)."""
    name, _, lines = split.partition(":")
    if name not in ("line", "cursor") or (lines and (name != "line" or not lines.isdigit() or int(lines) < 1)):
        raise ValueError(f"--middle-from takes line, cursor or line:N (N >= 1), not {split!r}")
    return name, int(lines or 1)


def built_for(split: str, doc, line: int, character: int, engine, budget):
    from codecue_lsp.prompt import build_prompt
    from codecue_lsp.prompt.layout import with_middle

    middle_from, lines = parse_split(split)
    built = build_prompt(doc, line, character, engine.fim, engine.count_tokens, budget=budget,
                         middle_from=middle_from)
    if lines == 1:
        return built
    # As if the middle had started `lines - 1` lines above and the user had typed down to here since.
    text = doc.text
    start = 0
    for _ in range(max(line - lines + 1, 0)):
        start = text.index("\n", start) + 1
    start = max(start, built.prefix_start)
    previous = with_middle(built.layout, text, start, built.suffix)
    return build_prompt(doc, line, character, engine.fim, engine.count_tokens, budget=budget,
                        middle_from=middle_from, previous=previous, middle_lines=lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="codecue-bench prompt", description=__doc__)
    parser.add_argument("--pair", default="default")
    parser.add_argument("--suffix-budgets", default="0,32,128,512", help="comma-separated suffix token budgets")
    parser.add_argument("--holes", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--target-weights", help="comma-separated target formats to compare on the same holes, "
                                                 "e.g. gguf,dense (default: the calibrated choice)")
    parser.add_argument("--cursor", default="indent", choices=("indent", "typed"),
                        help="what of the removed line is typed: its indentation, or its first word too")
    parser.add_argument("--middle-from", default="line",
                        help="comma-separated: where the middle starts, line (the server's default, healed), "
                             "cursor (plain PSM) and/or line:N (the middle started N-1 lines above the hole)")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    budgets = [int(b) for b in args.suffix_budgets.split(",")]
    formats = args.target_weights.split(",") if args.target_weights else [None]
    splits = tuple(args.middle_from.split(","))
    reports = [run(args.pair, budgets, args.holes, args.max_new_tokens, fmt, args.cursor, splits) for fmt in formats]
    print(f"{'target':>8s} {'middle from':>11s} {'suffix budget':>13s} {'line exact':>10s} {'prompt tokens':>14s} "
          f"{'seconds':>8s}")
    for report in reports:
        for r in report["runs"]:
            print(f"{report['target_weights']:>8s} {r['middle_from']:>11s} {r['suffix_budget']:13d} "
                  f"{r['line_exact_match']:10.2f} {r['mean_prompt_tokens']:14.0f} {r['mean_seconds']:8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports[0] if len(reports) == 1 else {"formats": reports}, f, indent=2)
    return 0
