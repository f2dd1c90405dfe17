"""Smoke test on the real default pair (Qwen2.5-Coder 1.5B + 0.5B). `make test` runs `codecue-models fetch` first;
elsewhere it is skipped when the models are not in the cache."""
import pytest

from engine.models import is_ready, load_config

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def engine():
    pair = load_config().pair("default")
    if not (is_ready(pair.target.name) and is_ready(pair.draft.name)):
        pytest.skip("real models not fetched: run `codecue-models fetch`")
    from engine import Engine, load_pair
    return Engine(load_pair("default", with_draft=True))  # formats as calibrated here; the draft even if it does not pay


def test_default_pair_completes_fibonacci_and_speculation_is_lossless(engine):
    from engine import CompletionRequest

    prefix = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
    ids = engine.encode(engine.fim.format(prefix, "\n\nprint(fibonacci(10))\n"))
    plain = engine.complete(CompletionRequest(ids, 48, drafter="none"))
    assert "fibonacci(n - 1)" in plain.text.replace("n-1", "n - 1"), plain.text
    assert "return" in plain.text
    for drafter in ("draft", "lookup", "hybrid"):
        result = engine.complete(CompletionRequest(ids, 48, drafter=drafter))
        assert result.token_ids == plain.token_ids, drafter
        if drafter == "draft":
            assert result.stats.accepted > 0  # the 0.5B agrees with the 1.5B on such code
            assert result.stats.target_passes < plain.stats.target_passes
