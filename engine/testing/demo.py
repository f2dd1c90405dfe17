"""`make demo`, part 1: complete a few real code snippets with the default pair, target alone vs speculative.

Prints each completion, the time of both runs and the speedup, and checks the speculative output against the target
alone by the lossless rule of engine/testing/exactness.py: identical, or apart from a first difference where the
target alone hesitated between its two best tokens (bf16 activations and quantized weights round a verify pass
differently).

Each prompt is made ready first (Engine.prefill: the target's cache and the draft model's view), as the language
server does where the cursor rests while the user reads (codecue_lsp/warmup.py), and that time is printed apart:
timed with the completion, the prefill both runs share hid most of speculation's gain on these short snippets.
"""
from __future__ import annotations

import sys
import time

from engine.engine import Engine
from engine.loading.pair import load_pair
from engine.store.config import ModelsError
from engine.testing.exactness import compare, epsilon_for, reference_greedy
from engine.types import CompletionRequest

MAX_NEW_TOKENS = 64
SNIPPETS = [
    ("fibonacci", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    if n <= 1:\n        return n\n',
     "\n\nprint(fibonacci(10))\n"),
    ("repetitive class", "class Point3D:\n    def __init__(self, x, y, z):\n        self.x = x\n        self.y = y\n"
     "        self.z = z\n\n    def __add__(self, other):\n"
     "        return Point3D(self.x + other.x, self.y + other.y, self.z + other.z)\n\n    def __sub__(self, other):\n",
     "\n\n    def __repr__(self):\n        return f\"Point3D({self.x}, {self.y}, {self.z})\"\n"),
    ("parse csv", "import csv\n\n\ndef read_rows(path):\n    \"\"\"Read a CSV file into a list of dicts keyed by the header row.\"\"\"\n",
     "\n\nif __name__ == \"__main__\":\n    print(read_rows(\"data.csv\"))\n"),
]


def main() -> int:
    print("Loading the default pair (Qwen2.5-Coder-1.5B target + 0.5B draft)...", flush=True)
    started = time.perf_counter()
    try:
        engine = Engine(load_pair("default", progress=True))  # first load on a machine: calibration bar
    except ModelsError as exc:
        print(f"codecue demo: {exc}", file=sys.stderr)
        return 1
    pair = engine.pair
    print(f"loaded in {time.perf_counter() - started:.1f}s on {pair.device}: target {pair.target_weights} weights, "
          f"draft {pair.draft_weights or 'not loaded'}, {pair.activations} activations "
          f"(chosen by this machine's calibration: `codecue-models list`)\n")
    engine.complete(CompletionRequest(engine.encode("def f():\n"), 4, drafter="auto"))  # warm-up
    all_lossless = True
    totals = {"none": 0.0, "auto": 0.0}
    for name, prefix, suffix in SNIPPETS:
        ids = engine.encode_fim(prefix, suffix)
        runs = {drafter: complete_ready(engine, ids, drafter) for drafter in ("none", "auto")}
        (plain, t_plain, _), (spec, t_spec, t_ready) = runs["none"], runs["auto"]
        totals["none"] += t_plain
        totals["auto"] += t_spec
        verdict = lossless(engine, ids, plain.token_ids, spec.token_ids)
        all_lossless &= verdict.ok
        print(f"--- {name} ({len(ids)} prompt tokens, made ready in {t_ready:.2f}s)")
        print(prefix + "\033[2m" + spec.text + "\033[0m")
        print(f"target alone {t_plain:.2f}s, speculative (auto) {t_spec:.2f}s -> {t_plain / t_spec:.2f}x, "
              f"{spec.stats.mean_accepted:.2f} tokens per target pass, "
              f"{'identical' if verdict.identical else verdict.describe()}\n")
    print(f"all snippets: target alone {totals['none']:.2f}s, speculative (auto) {totals['auto']:.2f}s -> "
          f"{totals['none'] / totals['auto']:.2f}x (each prompt made ready first, as the server does while you read)")
    engine.close()
    return 0 if all_lossless else 2


def complete_ready(engine: Engine, ids: list[int], drafter: str):
    """The completion of a prompt made ready beforehand, as the server completes where the cursor rests: (result,
    seconds of the completion, seconds the prompt took to make ready). A session of its own, forgotten after, so
    each run starts from the same state."""
    session = f"demo:{drafter}"
    started = time.perf_counter()
    engine.prefill(session, ids).result()
    ready = time.perf_counter() - started
    started = time.perf_counter()
    result = engine.complete(CompletionRequest(ids, MAX_NEW_TOKENS, drafter=drafter, session=session))
    seconds = time.perf_counter() - started
    engine.forget_session(session).result()
    return result, seconds, ready


def lossless(engine: Engine, prompt_ids: list[int], plain: list[int], speculative: list[int]):
    """exactness.Agreement of the speculative tokens with the target alone; the target's top-2 gaps are computed
    (one more target-alone run) only where the two differ."""
    pair = engine.pair
    epsilon = epsilon_for(pair.dtype, pair.target_weights or "dense")
    if plain == speculative:
        return compare(speculative, plain, [float("inf")] * (len(plain) + 1), epsilon)
    reference, gaps = reference_greedy(pair.target, prompt_ids, MAX_NEW_TOKENS, engine.stop_token_ids)
    return compare(speculative, reference, gaps, epsilon)


if __name__ == "__main__":
    sys.exit(main())
