"""Smoke test on the real default pair (Qwen2.5-Coder 1.5B + 0.5B). `make test` runs `codecue-models fetch` first;
elsewhere it is skipped when the models are not in the cache."""
import pytest

from engine.store.config import load_config
from engine.store.local import is_ready

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def engine():
    pair = load_config().pair("default")
    if not (is_ready(pair.target.name) and is_ready(pair.draft.name)):
        pytest.skip("real models not fetched: run `codecue-models fetch`")
    from engine import Engine, load_pair
    return Engine(load_pair("default", with_draft=True))  # formats as calibrated here; the draft even if it does not pay


def test_default_pair_completes_fibonacci_and_the_draft_pays(engine):
    """The pair writes the recursive call, the 0.5B's drafts are accepted and save target passes, and a verify pass
    rounds no further from one-token passes than the rule's epsilon (engine/testing/exactness.py)."""
    from engine import CompletionRequest
    from engine.testing.exactness import epsilon_for, pass_rounding

    prefix = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
    ids = engine.encode_fim(prefix, "\n\nprint(fibonacci(10))\n")
    plain = engine.complete(CompletionRequest(ids, 48, drafter="none"))
    assert "fibonacci(n - 1)" in plain.text.replace("n-1", "n - 1"), plain.text
    assert "return" in plain.text
    epsilon = epsilon_for(engine.pair.dtype, engine.pair.target_weights)
    rounding = pass_rounding(engine.pair.target, ids[:-1], [ids[-1]] + plain.token_ids[:8])
    print(f"format {engine.pair.target_weights}/{engine.pair.dtype}: epsilon {epsilon}, 9-token vs one-token pass "
          f"largest margin change among the top 9 {rounding:.4f}")
    assert rounding <= max(epsilon, 1e-3), "a verify pass rounds further from target-alone than the stated epsilon"
    drafted = engine.complete(CompletionRequest(ids, 48, drafter="draft"))
    assert drafted.stats.accepted > 0  # the 0.5B agrees with the 1.5B on such code
    assert drafted.stats.target_passes < plain.stats.target_passes


# Short prompts in several served languages, 16 new tokens each: one uncached pass of ~60 tokens per distinct output.
EXACTNESS_PROMPTS = [
    ("python", 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n', "\n\nprint(fibonacci(10))\n"),
    ("javascript", "function isPrime(n) {\n  if (n < 2) return false;\n", "\n}\n\nconsole.log(isPrime(7));\n"),
    ("go", "// gcd returns the greatest common divisor of a and b.\nfunc gcd(a, b int) int {\n", "\n}\n"),
    ("c", "/* Reverse the string s in place. */\nvoid reverse(char *s) {\n    size_t n = strlen(s);\n", "\n}\n"),
]
NEW_TOKENS = 16


@pytest.mark.parametrize("prefix,suffix", [p[1:] for p in EXACTNESS_PROMPTS], ids=[p[0] for p in EXACTNESS_PROMPTS])
def test_greedy_output_equals_an_independent_reference(engine, prefix, suffix):
    """Lossless against a reference that shares nothing with the engine's decoding: a forward pass of the same loaded
    weights over the prompt and the output with no KV cache (uncached_along: at every position, the token a
    step-by-step uncached decoder writes there, and its top-2 gap). Every drafter's greedy output, target alone's
    included, agrees with it by the rule of engine/testing/exactness.py for the calibrated format: identical up to
    a first difference that may only sit at a near tie (exactly equal in dense fp32). Long prompt passes stay in the
    decode format (decode_format), the one the reference computes in. tests/test_engine_exactness.py checks that
    uncached_along is the step-by-step reference, on the tiny pair."""
    from engine import CompletionRequest
    from engine.testing.exactness import compare, decode_format, epsilon_for, uncached_along

    ids = engine.encode_fim(prefix, suffix)
    epsilon = epsilon_for(engine.pair.dtype, engine.pair.target_weights)
    references = {}
    with decode_format(engine.pair.target):
        for drafter in ("none", "draft", "lookup", "hybrid"):
            output = engine.complete(CompletionRequest(ids, NEW_TOKENS, drafter=drafter)).token_ids
            if tuple(output) not in references:
                references[tuple(output)] = uncached_along(engine.pair.target, ids, output, NEW_TOKENS,
                                                           engine.stop_token_ids)
            reference, gaps = references[tuple(output)]
            agreement = compare(output, reference, gaps, epsilon)
            print(f"{engine.pair.target_weights}/{engine.pair.dtype} {drafter}: {engine.tokenizer.decode(output)!r} "
                  f"{agreement.describe()}")
            assert len(reference) >= 4, "the target stopped at once: little was compared"
            assert agreement.ok, f"{drafter}: {agreement.describe()}"


def test_marker_strings_in_the_document_reach_the_model_as_code(engine):
    """A file that names the model's control tokens (as this repository's models.toml does) still completes: the
    server's prompt holds each template marker once, and the user's marker strings only as ordinary tokens."""
    from codecue_lsp.completer import Completer
    from codecue_lsp.config import Settings
    from codecue_lsp.prompt import OpenDocument
    from codecue_lsp.prompt.text import split_cursor

    markers = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>",
               "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    marked = (f"# The model's control tokens: {' '.join(markers)}\n"
              'TEMPLATE = "<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>"\n\n\n'
              'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n    █\n\n'
              f'print(fibonacci(10), "<|endoftext|>")  # {" ".join(markers)}\n')
    text, line, character = split_cursor(marked)
    completer = Completer(engine)
    prepared = completer.prepare(OpenDocument("file:///w/fib.py", "python", text), line, character,
                                 Settings(max_tokens=48, drafter="none"))
    ids = prepared.request.prompt_ids
    assert "<|fim_prefix|>{prefix}" in prepared.built.prefix and "<|endoftext|>" in prepared.built.suffix
    counts = {marker: ids.count(engine.special_token_id(marker)) for marker in markers}
    assert counts == {marker: int(marker in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>"))
                      for marker in markers}
    completion, _ = completer.complete(prepared)
    print(repr(completion))
    assert "return" in completion and "fibonacci(n - 1)" in completion.replace("n-1", "n - 1"), completion
