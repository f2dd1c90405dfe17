"""`codecue-bench prompt`: line exact match against the suffix budget, through the real prompt builder.

Each HumanEval problem becomes a whole file (prompt + canonical solution + tests); one line of the solution is
removed and the cursor put after its indentation, as an editor's auto-indent leaves it. The server's own
build_prompt + post-processing make the completion; its first line is compared with the removed line. Every
suffix budget runs on the same holes in one process. Greedy decoding, so each budget's result is deterministic.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def holes(count: int) -> list[tuple[str, str, int, int, str]]:
    """(name, document text with the line removed, line, character, removed line's code)."""
    from .prompts import middle_line_holes

    out = []
    for i, problem, solution, j in middle_line_holes(count):
        indent = solution[j][: len(solution[j]) - len(solution[j].lstrip())]
        before = problem["prompt"] + "".join(solution[:j]) + indent
        after = "\n" + "".join(solution[j + 1:]) + "\n\n" + problem["test"]
        line = before.count("\n")
        out.append((f"HumanEval/{i}", before + after, line, len(indent), solution[j].strip()))
    return out


def run(pair: str, budgets: list[int], count: int, max_new_tokens: int, target_weights: str | None = None) -> dict:
    from engine.engine import Engine
    from engine.models import load_pair
    from engine.types import CompletionRequest

    from codecue_lsp.postprocess import make_stop_predicate, postprocess
    from codecue_lsp.prompt import OpenDocument, PromptBudget, build_prompt

    # A target format asked for by name loads without the draft: quality is the target's alone (lookup drafts only).
    engine = Engine(load_pair(pair, target_weights=target_weights, with_draft=False if target_weights else None))
    cases = holes(count)
    results = {b: {"exact": 0, "prompt_tokens": 0, "seconds": 0.0} for b in budgets}
    for name, text, line, character, truth in cases:
        doc = OpenDocument(f"file:///bench/{name.replace('/', '_')}.py", "python", text)
        for budget in budgets:
            built = build_prompt(doc, line, character, engine.fim, engine.count_tokens,
                                 budget=PromptBudget(suffix=budget))
            ids = engine.encode_prompt(built.pieces)
            started = time.perf_counter()
            result = engine.complete(CompletionRequest(ids, max_new_tokens, stop=make_stop_predicate(built),
                                                       drafter="hybrid"))
            first_line = postprocess(result.text, built).split("\n", 1)[0].strip()
            r = results[budget]
            r["seconds"] += time.perf_counter() - started
            r["prompt_tokens"] += len(ids)
            r["exact"] += first_line == truth
        print(f"{name}: {truth!r}", file=sys.stderr, flush=True)
    engine.close()
    return {"pair": pair, "target_weights": engine.pair.target_weights, "holes": len(cases), "budgets": {
        str(b): {"line_exact_match": r["exact"] / len(cases), "mean_prompt_tokens": r["prompt_tokens"] / len(cases),
                 "mean_seconds": r["seconds"] / len(cases)} for b, r in results.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="codecue-bench prompt", description=__doc__)
    parser.add_argument("--pair", default="default")
    parser.add_argument("--suffix-budgets", default="0,32,128,512", help="comma-separated suffix token budgets")
    parser.add_argument("--holes", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--target-weights", help="comma-separated target formats to compare on the same holes, "
                                                 "e.g. gguf,dense (default: the calibrated choice)")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    budgets = [int(b) for b in args.suffix_budgets.split(",")]
    formats = args.target_weights.split(",") if args.target_weights else [None]
    reports = [run(args.pair, budgets, args.holes, args.max_new_tokens, fmt) for fmt in formats]
    print(f"{'target':>8s} {'suffix budget':>13s} {'line exact':>10s} {'prompt tokens':>14s} {'seconds':>8s}")
    for report in reports:
        for budget, r in report["budgets"].items():
            print(f"{report['target_weights']:>8s} {budget:>13s} {r['line_exact_match']:10.2f} "
                  f"{r['mean_prompt_tokens']:14.0f} {r['mean_seconds']:8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports[0] if len(reports) == 1 else {"formats": reports}, f, indent=2)
    return 0
