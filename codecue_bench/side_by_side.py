"""Drafting policies timed side by side in one process (scripts/bench-request-kinds.py,
scripts/bench-catchup-pricing.py): engines on one loaded pair; each prompt of docs/bench-prompts.jsonl made ready
and completed in every mode, the order reversed every other round. Every mode's output must equal the first's."""
from __future__ import annotations

import json
import os
from pathlib import Path

from .engine_bench import request_kind, run_own_mode

PROMPTS = Path(__file__).resolve().parents[1] / "docs" / "bench-prompts.jsonl"
K = 8  # drafted tokens at most, as `codecue-bench engine`'s default


def first_line_done(text: str) -> bool:
    """The server's single-line mode (codecue_lsp/postprocess.py): the completion ends with its first line, leading
    newlines skipped."""
    return "\n" in text.lstrip("\n")


def time_side_by_side(engines: dict, modes: tuple, rounds: int, lines_end: bool = False,
                      prompts: list[dict] | None = None, max_new_tokens: int = 64) -> dict[tuple[str, str], float]:
    """Seconds per (prompt kind, mode name), summed over the rounds. modes: (name, the engine bench's mode, key of
    its engine in `engines`, whether the request carries the kind the server would send). lines_end: single-line
    prompts stop at the end of their line, as the server asks (else every prompt runs to max_new_tokens). prompts:
    {name, kind, prefix, suffix} (default: those of PROMPTS)."""
    from engine.types import CompletionRequest

    if prompts is None:
        prompts = [json.loads(line) for line in PROMPTS.read_text().splitlines()]
    encoder = next(iter(engines.values()))
    warm_up = encoder.encode_fim("def add(a, b):\n", "\n")
    for engine in engines.values():  # first calls pay one-time costs
        engine.complete(CompletionRequest(warm_up, 16))
    seconds: dict[tuple[str, str], float] = {}
    for turn in range(rounds):
        for prompt in prompts:
            ids = encoder.encode_fim(prompt["prefix"], prompt["suffix"])
            reference = None
            for name, mode, engine, with_kind in (modes if turn % 2 == 0 else modes[::-1]):
                run = run_own_mode(engines[engine], mode, ids, max_new_tokens, K, warm=True,
                                   kind=request_kind(prompt["kind"]) if with_kind else "",
                                   stop=first_line_done if lines_end and prompt["kind"] == "line" else None)
                reference = run.tokens if reference is None else reference
                assert run.tokens == reference, f"{prompt['name']}: {name} differs"
                seconds[prompt["kind"], name] = seconds.get((prompt["kind"], name), 0.0) + run.seconds
        print(f"round {turn + 1} of {rounds} done", flush=True)
    return seconds


def print_speedups(seconds: dict[tuple[str, str], float], names, baseline: str = "target alone") -> None:
    """Each mode's speed over `baseline` per prompt kind and over all prompts."""
    kinds = sorted({kind for kind, _ in seconds})
    width = max(len(name) for name in names) + 1
    for name in names:
        ratios = [seconds[kind, baseline] / seconds[kind, name] for kind in kinds]
        total = sum(seconds[kind, baseline] for kind in kinds) / sum(seconds[kind, name] for kind in kinds)
        print(f"{name:{width}s} " + "  ".join(f"{kind} {r:.3f}" for kind, r in zip(kinds, ratios))
              + f"  all {total:.3f}")


def auto_before_and_now(make_before, rounds: int) -> dict:
    """Auto on main against an earlier policy (scripts/bench-auto-seeds.py, scripts/bench-lookup-match.py): two
    engines on one loaded default pair, make_before(engine) turning one into the "before"; target alone, the draft
    model's mode and auto on each, single lines stopped at their end; the prompts of $PROMPTS when set. Prints speed
    over target alone per prompt kind and what each engine's auto pooled; returns the engines."""
    from engine.engine import Engine
    from engine.models import load_pair

    global PROMPTS
    if os.environ.get("PROMPTS"):
        PROMPTS = Path(os.environ["PROMPTS"])
    pair = load_pair("default", device="cpu", dtype=None, with_draft=True)
    engines = {"before": Engine(pair), "now": Engine(pair)}
    make_before(engines["before"])
    modes = (("target alone", "target", "now", True), ("draft", "speculative", "now", True),
             ("auto before", "auto", "before", True), ("auto now", "auto", "now", True))
    seconds = time_side_by_side(engines, modes, rounds, lines_end=True)
    print_speedups(seconds, [name for name, *_ in modes])
    for name, engine in engines.items():
        pooled = {source: round(accepted / tried, 3) for source, (accepted, tried) in engine.acceptance.trials.items()
                  if tried}
        print(f"{name}: pooled acceptance {pooled}")
    return engines
