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


def test_default_pair_completes_fibonacci_and_speculation_is_lossless(engine):
    """Lossless as engine/testing/exactness.py states it for the calibrated format: identical to the target alone up
    to a first difference, which may only sit at a near tie of the target alone (exact equality in dense fp32)."""
    from engine import CompletionRequest
    from engine.testing.exactness import (
        compare,
        epsilon_for,
        pass_rounding,
        reference_greedy,
    )

    prefix = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
    ids = engine.encode_fim(prefix, "\n\nprint(fibonacci(10))\n")
    plain = engine.complete(CompletionRequest(ids, 48, drafter="none"))
    assert "fibonacci(n - 1)" in plain.text.replace("n-1", "n - 1"), plain.text
    assert "return" in plain.text
    reference, gaps = reference_greedy(engine.pair.target, ids, 48, engine.stop_token_ids)
    assert reference == plain.token_ids  # the reference is the engine's own target-alone decoding
    epsilon = epsilon_for(engine.pair.dtype, engine.pair.target_weights)
    rounding = pass_rounding(engine.pair.target, ids[:-1], [ids[-1]] + reference[:8])
    print(f"format {engine.pair.target_weights}/{engine.pair.dtype}: epsilon {epsilon}, 9-token vs one-token pass "
          f"largest margin change among the top 9 {rounding:.4f}")
    assert rounding <= max(epsilon, 1e-3), "a verify pass rounds further from target-alone than the stated epsilon"
    for drafter in ("draft", "lookup", "hybrid"):
        result = engine.complete(CompletionRequest(ids, 48, drafter=drafter))
        agreement = compare(result.token_ids, reference, gaps, epsilon)
        print(f"{drafter}: {agreement.describe()}")
        assert agreement.ok, f"{drafter}: {agreement.describe()}"
        if drafter == "draft":
            assert result.stats.accepted > 0  # the 0.5B agrees with the 1.5B on such code
            assert result.stats.target_passes < plain.stats.target_passes


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
