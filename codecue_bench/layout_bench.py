"""`codecue-bench layout`: how often typing in one place makes the prompt start over, per total budget, with and
without the growth a kept layout is allowed (prompt/sizing.KEPT_GROWTH). A layout chosen afresh moves the prompt's
start, so the engine prefills the whole prompt again: on a slow CPU that is the wait after opening a file, again.

No model runs, only the pair's tokenizer counts. In each file the user retypes `--chars` characters from the line
after its middle, the rest of the file kept after the cursor (as `codecue-replay synth --keep-suffix`), and a prompt
is built every `--every` characters as the server builds it (line split, layouts kept).
"""
from __future__ import annotations

import argparse
import json

from codecue_lsp.prompt import Layouts, OpenDocument, budget_for, build_prompt
from codecue_lsp.prompt.sizing import KEPT_GROWTH
from engine.store.config import load_config, model_dir


def typing_layouts(text: str, count_tokens, fim, total: int, growth: float, chars: int, every: int) -> dict:
    """Layouts chosen afresh after the first prompt, and the mean prompt size, while `chars` characters are typed."""
    start = text.find("\n", len(text) // 2) + 1
    end = min(start + chars, len(text))
    layouts, fresh, sizes = Layouts(), 0, []
    for typed in range(0, end - start + 1, every):
        before = text[:start + typed]
        line, character = before.count("\n"), len(before) - (before.rfind("\n") + 1)
        doc = OpenDocument("file:///bench/typing.py", "python", before + text[end:])
        previous = layouts.get(doc.uri)
        built = build_prompt(doc, line, character, fim, count_tokens, budget=budget_for(total), middle_from="line",
                             previous=previous, kept_growth=growth)
        if previous is not None and (built.layout.prefix_start, built.layout.items) != \
                (previous.prefix_start, previous.items):
            fresh += 1
        layouts.remember(built.layout)
        sizes.append(sum(built.sections.values()))
    return {"fresh_layouts": fresh, "mean_prompt_tokens": sum(sizes) / len(sizes), "prompts": len(sizes)}


def run(pair: str, files: list[str], totals: tuple[int, ...], growths: tuple[float, ...], chars: int,
        every: int) -> dict:
    from transformers import AutoTokenizer


    target = load_config().pair(pair).target
    tokenizer = AutoTokenizer.from_pretrained(model_dir(target.name))

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    texts = {path: open(path, encoding="utf-8").read() for path in files}
    runs = []
    for total in totals:
        for growth in growths:
            per_file = {path: typing_layouts(text, count_tokens, target.fim, total, growth, chars, every)
                        for path, text in texts.items()}
            runs.append({"total_budget": total, "kept_growth": growth,
                         "fresh_layouts": sum(r["fresh_layouts"] for r in per_file.values()),
                         "mean_prompt_tokens": sum(r["mean_prompt_tokens"] for r in per_file.values()) / len(files),
                         "per_file": per_file})
    return {"pair": pair, "files": len(files), "chars": chars, "every": every, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="codecue-bench layout", description=__doc__)
    parser.add_argument("files", nargs="+", metavar="FILE")
    parser.add_argument("--pair", default="default")
    parser.add_argument("--total-budgets", default="512,1536")
    parser.add_argument("--growths", default=f"0,{KEPT_GROWTH}", help="comma-separated shares of the budget")
    parser.add_argument("--chars", type=int, default=1500, help="characters typed in each file")
    parser.add_argument("--every", type=int, default=5, help="a prompt every N characters")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    report = run(args.pair, args.files, tuple(int(t) for t in args.total_budgets.split(",")),
                 tuple(float(g) for g in args.growths.split(",")), args.chars, args.every)
    print(f"{'total':>6s} {'growth':>6s} {'layouts chosen afresh':>22s} {'prompt tokens':>14s}")
    for r in report["runs"]:
        print(f"{r['total_budget']:6d} {r['kept_growth']:6.2f} {r['fresh_layouts']:22d} {r['mean_prompt_tokens']:14.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0
