"""Drafting modes timed side by side in one process (`codecue-bench bound` times auto this way): engines on one
loaded pair; each prompt made ready and completed in every mode, the order reversed every other round. Every mode's
output must equal the first's."""
from __future__ import annotations

from .engine_bench import request_kind, run_own_mode

K = 8  # drafted tokens at most, as `codecue-bench engine`'s default


def first_line_done(text: str) -> bool:
    """The server's single-line mode (codecue_lsp/postprocess.py): the completion ends with its first line, leading
    newlines skipped."""
    return "\n" in text.lstrip("\n")


def time_side_by_side(engines: dict, modes: tuple, rounds: int, prompts: list[dict], lines_end: bool = False,
                      max_new_tokens: int = 64) -> dict[tuple[str, str], float]:
    """Seconds per (prompt kind, mode name), summed over the rounds. modes: (name, the engine bench's mode, key of
    its engine in `engines`, whether the request carries the kind the server would send). lines_end: single-line
    prompts stop at the end of their line, as the server asks (else every prompt runs to max_new_tokens). prompts:
    {name, kind, prefix, suffix}."""
    from engine.types import CompletionRequest

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

