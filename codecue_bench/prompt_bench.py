"""`codecue-bench prompt`: line exact match against the prompt's token budgets and where the middle starts, through
the real prompt builder.

Each HumanEval problem becomes a whole file (prompt + canonical solution + tests); one line of the solution is
removed and the cursor put after its indentation, as an editor's auto-indent leaves it (`--cursor typed`: after
the line's first word too, as if the user had typed it). The server's own build_prompt + post-processing make the
completion; the typed part plus its first line is compared with the removed line. Every suffix budget and middle
split (`--middle-from line,cursor,line:8`) runs on the same holes in one process. Greedy, so each result is
deterministic. `line:N` is the prompt the server builds when the middle started N-1 lines above the hole's line and
the user typed down to it (the middle kept across newlines, prompt/layout.middle_start): the worst case of
`--middle-lines N`.

`--files PATH...` cuts the holes from real files instead (a line of code in each file's middle part, chosen with a
fixed seed), with the files a hole's file imports from the same set open beside it, as an editor's tabs: where the
total budget (`--total-budgets`, the most tokens a cold prompt costs) decides what the model sees. Besides exact
matches each run reports the mean similarity of the line to the removed one (difflib's ratio): smoother on few holes.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from difflib import SequenceMatcher
from pathlib import Path
from typing import NamedTuple

from codecue_lsp.completer import encode_built
from codecue_lsp.postprocess import make_stop_predicate, postprocess
from codecue_lsp.prompt import OpenDocument, budget_for, build_prompt
from codecue_lsp.prompt.layout import with_middle
from engine.engine import Engine
from engine.loading.pair import load_pair
from engine.types import CompletionRequest

from .prompts import middle_line_holes

FIRST_WORD = re.compile(r"\s*[\w.]+\W?")


class Hole(NamedTuple):
    name: str
    text: str          # the document with the line removed but what is typed of it
    line: int
    character: int
    truth: str         # the removed line's code, stripped
    others: tuple = ()  # (path, text) of the files open beside it


def holes(count: int, cursor: str = "indent") -> list[Hole]:
    """HumanEval holes: each problem's prompt + solution + tests as one file, its solution's middle code line cut.
    cursor: "indent" (only the indentation typed) or "typed" (the first word too, where the line has more)."""

    check_cursor(cursor)
    out = []
    for i, problem, solution, j in middle_line_holes(count):
        lines = (problem["prompt"] + "".join(solution)).splitlines(keepends=True)
        row = len(problem["prompt"].splitlines(keepends=True)) + j
        tail = "\n\n" + problem["test"]
        out.append(cut(f"HumanEval/{i}", lines, row, cursor, tail))
    return out


def file_holes(paths: list[str], cursor: str = "indent", seed: int = 0) -> list[Hole]:
    """One hole per file: a code line (at least 12 characters, not a comment or a decorator) in the middle 60 % of
    the file, chosen with `seed`; the set's files that it imports by module name are open beside it."""
    check_cursor(cursor)
    texts = {path: Path(path).read_text(encoding="utf-8") for path in paths}
    out = []
    for index, (path, text) in enumerate(texts.items()):
        lines = text.splitlines(keepends=True)
        rows = [row for row in range(len(lines) // 5, len(lines) * 4 // 5) if cuttable(lines[row])]
        if not rows:
            continue
        row = random.Random(f"{seed}:{index}").choice(rows)
        others = tuple((other, texts[other]) for other in texts if other != path and imports(text, other))
        out.append(cut(path, lines, row, cursor, "", others))
    return out


def check_cursor(cursor: str) -> None:
    if cursor not in ("indent", "typed"):
        raise ValueError(f"--cursor must be indent or typed, not {cursor!r}")


def cuttable(line: str) -> bool:
    code = line.strip()
    return len(code) >= 12 and not code.startswith(("#", "@", '"""', "//", "*")) and not code.endswith('"""')


def imports(text: str, path: str) -> bool:
    """Whether `text` imports the module that `path` holds (by its file name: `from .x import`, `import a.x`)."""
    module = re.escape(Path(path).stem)
    return re.search(rf"^\s*(from\s+[\w.]*\b{module}\b|import\s+[\w.]*\b{module}\b)", text, re.M) is not None


def cut(name: str, lines: list[str], row: int, cursor: str, tail: str = "", others: tuple = ()) -> Hole:
    """lines[row] removed but its indentation (and with cursor "typed" its first word) where the cursor is."""
    code = lines[row].rstrip("\r\n")
    typed = code[: len(code) - len(code.lstrip())]
    word = FIRST_WORD.match(code)
    if cursor == "typed" and word and word.end() < len(code.rstrip()):
        typed = code[: word.end()]
    before = "".join(lines[:row]) + typed
    after = "\n" + "".join(lines[row + 1:]) + tail
    return Hole(name, before + after, before.count("\n"), len(typed), code.strip(), others)


def run(pair: str, budgets: list[int], count: int, max_new_tokens: int, target_weights: str | None = None,
        cursor: str = "indent", splits: tuple[str, ...] = ("line",), totals: tuple[int, ...] = (1536,),
        files: list[str] | None = None, seed: int = 0) -> dict:

    # A target format asked for by name loads without the draft: quality is the target's alone (lookup drafts only).
    engine = Engine(load_pair(pair, target_weights=target_weights, with_draft=False if target_weights else None))
    cases = file_holes(files, cursor, seed)[:count] if files else holes(count, cursor)
    for split in splits:
        parse_split(split)  # a typo fails before the first hole, not after an hour
    results = {(s, b, t): {"exact": 0, "similarity": 0.0, "prompt_tokens": 0, "seconds": 0.0}
               for s in splits for b in budgets for t in totals}
    for name, text, line, character, truth, others in cases:
        doc = OpenDocument(f"file:///bench/{name.replace('/', '_')}", "python", text)
        other_docs = [OpenDocument(f"file:///bench/{path.replace('/', '_')}", "python", t) for path, t in others]
        typed = text.split("\n")[line][:character]
        for split, budget, total in results:
            built = built_for(split, doc, line, character, engine, budget_for(total, budget), other_docs)
            ids, heal = encode_built(engine, built)  # as the server does
            started = time.perf_counter()
            result = engine.complete(CompletionRequest(ids, max_new_tokens, stop=make_stop_predicate(built),
                                                       drafter="hybrid", heal=heal))
            first_line = postprocess(result.text, built).split("\n", 1)[0]
            r = results[split, budget, total]
            r["seconds"] += time.perf_counter() - started
            r["prompt_tokens"] += len(ids)
            r["exact"] += (typed + first_line).strip() == truth
            r["similarity"] += SequenceMatcher(None, (typed + first_line).strip(), truth).ratio()
        print(f"{name}: {truth!r}", file=sys.stderr, flush=True)
    engine.close()
    return {"pair": pair, "target_weights": engine.pair.target_weights, "holes": len(cases), "cursor": cursor,
            "source": "files" if files else "humaneval",
            "runs": [{"middle_from": s, "suffix_budget": b, "total_budget": t,
                      "line_exact_match": r["exact"] / len(cases), "line_similarity": r["similarity"] / len(cases),
                      "mean_prompt_tokens": r["prompt_tokens"] / len(cases),
                      "mean_seconds": r["seconds"] / len(cases)}
                     for (s, b, t), r in results.items()]}


def parse_split(split: str) -> tuple[str, int]:
    """"line" | "cursor" | "line:N" -> (middle_from, lines the middle spans)."""
    name, _, lines = split.partition(":")
    if name not in ("line", "cursor") or (lines and (name != "line" or not lines.isdigit() or int(lines) < 1)):
        raise ValueError(f"--middle-from takes line, cursor or line:N (N >= 1), not {split!r}")
    return name, int(lines or 1)


def built_for(split: str, doc, line: int, character: int, engine, budget, other_docs=()):
    middle_from, lines = parse_split(split)
    built = build_prompt(doc, line, character, engine.fim, engine.count_tokens, other_docs=other_docs, budget=budget,
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
    return build_prompt(doc, line, character, engine.fim, engine.count_tokens, other_docs=other_docs, budget=budget,
                        middle_from=middle_from, previous=previous, middle_lines=lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="codecue-bench prompt", description=__doc__)
    parser.add_argument("--pair", default="default")
    parser.add_argument("--suffix-budgets", default="0,32,128,512", help="comma-separated suffix token budgets")
    parser.add_argument("--total-budgets", default="1536",
                        help="comma-separated total token budgets (the context gets a third: prompt.budget_for)")
    parser.add_argument("--holes", type=int, default=20)
    parser.add_argument("--files", nargs="+", metavar="PATH", help="cut the holes from these files, not HumanEval")
    parser.add_argument("--seed", type=int, default=0, help="which line of each file --files cuts")
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
    totals = tuple(int(t) for t in args.total_budgets.split(","))
    reports = [run(args.pair, budgets, args.holes, args.max_new_tokens, fmt, args.cursor, splits, totals,
                   args.files, args.seed) for fmt in formats]
    print(f"{'target':>8s} {'middle from':>11s} {'suffix budget':>13s} {'total':>6s} {'line exact':>10s} "
          f"{'similarity':>10s} {'prompt tokens':>14s} {'seconds':>8s}")
    for report in reports:
        for r in report["runs"]:
            print(f"{report['target_weights']:>8s} {r['middle_from']:>11s} {r['suffix_budget']:13d} "
                  f"{r['total_budget']:6d} {r['line_exact_match']:10.2f} {r['line_similarity']:10.2f} "
                  f"{r['mean_prompt_tokens']:14.0f} "
                  f"{r['mean_seconds']:8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports[0] if len(reports) == 1 else {"formats": reports}, f, indent=2)
    return 0
