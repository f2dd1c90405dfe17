"""Trailing comments the model appends to a line of code: kept (as shown today) or dropped, on the same completions.

    .venv/bin/python scripts/bench-trailing-comments.py [--humaneval N] [--out ROWS.jsonl]

Holes: `codecue-bench prompt --files` line holes of this repository's files (>= 150 lines, seeds 0 and 1, code with
its own trailing comments), and the first body line of HumanEval problems 0..N-1 after Enter at the docstring's end,
in the layout the warm-up leaves there (the middle kept from the docstring's closing line, next_line.py). Each hole
is completed once by the default pair (greedy, 24 tokens, the server's stop rule and post-processing); the line is
scored as shown and with a trailing comment that the model started dropped. Run from the repository root.
"""
import argparse
import itertools
import json
import statistics
import sys
from difflib import SequenceMatcher
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codecue_bench.prompt_bench import built_for, file_holes  # noqa: E402
from codecue_lsp.completer import Completer, encode_built  # noqa: E402
from codecue_lsp.config import Settings  # noqa: E402
from codecue_lsp.postprocess import drop_trailing_comment, make_stop_predicate, postprocess  # noqa: E402
from codecue_lsp.prompt import OpenDocument, budget_for  # noqa: E402
from codecue_lsp.replay.synth import humaneval_problems  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_pair  # noqa: E402
from engine.types import CompletionRequest  # noqa: E402

PATTERNS = ("engine/*.py", "codecue_lsp/*.py", "codecue_lsp/prompt/*.py", "codecue_lsp/replay/*.py",
            "codecue_bench/*.py")


def complete(engine, built, ids, heal) -> str:
    result = engine.complete(CompletionRequest(ids, 24, stop=make_stop_predicate(built), drafter="none", heal=heal))
    return postprocess(result.text, built).split("\n", 1)[0]


def repository_rows(engine):
    files = [str(p) for pattern in PATTERNS for p in sorted(Path(".").glob(pattern))
             if len(p.read_text().splitlines()) >= 150]
    for hole in [h for seed in (0, 1) for h in file_holes(files, "indent", seed)[:30]]:
        name, text, line, character, _, others = hole
        doc = OpenDocument(f"file:///bench/{name.replace('/', '_')}", "python", text)
        other_docs = [OpenDocument(f"file:///bench/{p.replace('/', '_')}", "python", t) for p, t in others]
        built = built_for("line", doc, line, character, engine, budget_for(512, 128), other_docs)
        typed = text.split("\n")[line][:character]
        yield "repository", name, typed, complete(engine, built, *encode_built(engine, built)), hole.truth


def humaneval_rows(engine, count: int):
    settings = Settings()
    for number, problem in enumerate(humaneval_problems()[:count]):
        completer = Completer(engine)
        uri = f"file:///bench/HumanEval_{number}.py"
        rest = problem["prompt"].rstrip("\n")
        line = rest.count("\n")
        completer.prepare(OpenDocument(uri, "python", rest), line, len(rest) - rest.rfind("\n") - 1, settings)
        prepared = completer.prepare(OpenDocument(uri, "python", rest + "\n    "), line + 1, 4, settings)
        text, _ = completer.complete(prepared)
        engine.forget_session(uri)
        truth = problem["canonical_solution"].split("\n")[0].strip()
        yield "humaneval", f"HumanEval/{number}", "    ", text.split("\n")[0], truth


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--humaneval", type=int, default=40)
    parser.add_argument("--out")
    args = parser.parse_args()
    engine = Engine(load_pair("default"))
    rows = []
    holes = itertools.chain(repository_rows(engine), humaneval_rows(engine, args.humaneval))
    for kind, name, typed, shown, truth in holes:
        dropped = drop_trailing_comment(shown, "#", typed)
        row = {"kind": kind, "hole": name, "truth": truth, "shown": shown, "without_comment": dropped}
        for variant, text in (("kept", shown), ("dropped", dropped)):
            answer = (typed + text).strip()
            row[variant] = {"exact": answer == truth, "similarity": SequenceMatcher(None, answer, truth).ratio()}
        rows.append(row)
        print(json.dumps(row), flush=True)
    engine.close()
    for kind in ("repository", "humaneval"):
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        changed = [r for r in mine if r["shown"] != r["without_comment"]]
        truths = sum(drop_trailing_comment(r["truth"], "#", "") != r["truth"] for r in mine)
        print(f"{kind}: {len(mine)} holes, {truths} truths with a trailing comment, "
              f"{len(changed)} suggestions with one")
        for variant in ("kept", "dropped"):
            print(f"  {variant:8s} exact {sum(r[variant]['exact'] for r in mine)}, similarity "
                  f"{statistics.mean(r[variant]['similarity'] for r in mine):.3f}; on the changed: exact "
                  f"{sum(r[variant]['exact'] for r in changed)}, similarity "
                  f"{statistics.mean(r[variant]['similarity'] for r in changed) if changed else 0:.3f}")
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
