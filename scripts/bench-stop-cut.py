"""Completions that stop at the end of their first line (as the server's single-line mode stops them): the decode loop
as on main (drafts end where the completion ends) against the loop of an earlier revision, side by side in one
process: one engine, its decode loop swapped per request; for each prompt of docs/bench-prompts.jsonl (made ready
first) target alone and auto with each loop, the order reversed every other round. Main's output must equal target
alone's (the earlier loop's may run past it). Prints speed over target alone and the tokens drafted.

    .venv/bin/python scripts/bench-stop-cut.py [rounds] [--rev REV]    # REV: the earlier loop (default HEAD~1)
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import engine.engine as engine_module  # noqa: E402
from codecue_bench.side_by_side import first_line_done  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_pair  # noqa: E402
from engine.speculative import generate  # noqa: E402
from engine.types import CompletionRequest  # noqa: E402


def generate_at(rev: str):
    source = subprocess.run(["git", "show", f"{rev}:engine/speculative.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType(f"speculative_{rev}")
    sys.modules[module.__name__] = module  # its dataclasses look their module up
    exec(compile(re.sub(r"^from \.", "from engine.", source, flags=re.M), f"{rev}:engine/speculative.py", "exec"),
         module.__dict__)
    return module.generate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rounds", type=int, nargs="?", default=2)
    parser.add_argument("--rev", default="HEAD~1")
    args = parser.parse_args()
    engine = Engine(load_pair("default", device="cpu", dtype=None, with_draft=True))
    modes = (("target alone", "none", generate), ("auto, earlier loop", "auto", generate_at(args.rev)),
             ("auto", "auto", generate))
    prompts = [json.loads(line) for line in (ROOT / "docs" / "bench-prompts.jsonl").read_text().splitlines()]
    engine.complete(CompletionRequest(engine.encode_fim("def add(a, b):\n", "\n"), 16))
    seconds, drafted = {name: 0.0 for name, _, _ in modes}, {name: 0 for name, _, _ in modes}
    passes = dict.fromkeys(drafted, 0)
    for turn in range(args.rounds):
        for prompt in prompts:
            ids = engine.encode_fim(prompt["prefix"], prompt["suffix"])
            out = {}
            for name, drafter, loop in (modes if turn % 2 == 0 else modes[::-1]):
                engine_module.generate = loop
                engine.prefill("bench", ids).result()
                started = time.perf_counter()
                result = engine.complete(CompletionRequest(ids, 64, drafter=drafter, max_draft_tokens=8, session="bench",
                                                           kind="line", stop=first_line_done))
                seconds[name] += time.perf_counter() - started
                engine.forget_session("bench").result()
                drafted[name] += result.stats.drafted
                passes[name] += result.stats.draft_passes
                out[name] = result.token_ids
            alone = out["target alone"]
            assert out["auto"] == alone, f"{prompt['name']}: auto differs from target alone"
            assert out["auto, earlier loop"][:len(alone)] == alone, f"{prompt['name']}: the earlier loop differs"
        print(f"round {turn + 1} of {args.rounds} done", flush=True)
    engine_module.generate = generate
    for name, _, _ in modes:
        print(f"{name:20s} {seconds['target alone'] / seconds[name]:.3f}x target alone, {drafted[name]} tokens drafted, "
              f"{passes[name]} draft model passes")


if __name__ == "__main__":
    main()
