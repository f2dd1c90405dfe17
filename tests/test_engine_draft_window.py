"""The draft model sees the code around the cursor of a long prompt (engine/decode/draft_window.py): the prefix's tail,
the suffix's head and what was generated. The output stays target alone's; only the draft model's cache is smaller."""
import pytest
from engine_helpers import random_prompt, reference_greedy, tiny_engine, tiny_model

import engine.decode.drafters as drafters
from engine import CompletionRequest
from engine.decode.draft_window import DraftWindow
from engine.decode.drafters import ModelDrafter
from engine.decode.kvcache import TrackedCache

P, S, M = 2, 4, 3  # the tiny tokenizer's fim prefix, suffix and middle ids
WINDOW = DraftWindow(P, S, M, prefix_tokens=4, suffix_tokens=2, step=2)


def fim(prefix: list[int], suffix: list[int], before: list[int] = (), generated: list[int] = ()) -> list[int]:
    return list(before) + [P] + list(prefix) + [S] + list(suffix) + [M] + list(generated)


def seq(n: int, start: int = 10) -> list[int]:
    return list(range(start, start + n))


@pytest.mark.parametrize("tokens,view", [
    # short enough: the prompt itself
    (fim(seq(4), seq(2, 50)), fim(seq(4), seq(2, 50))),
    (fim([], []), fim([], [])),
    # the prefix's tail starts a whole number of steps in: 7 tokens -> from the 2nd step (4 kept + 1)
    (fim(seq(7), seq(2, 50)), fim(seq(5, 12), seq(2, 50))),
    (fim(seq(8), seq(2, 50)), fim(seq(4, 14), seq(2, 50))),
    # the suffix's head; generated tokens follow the middle marker as they are
    (fim(seq(3), seq(9, 50), generated=[70, 71]), fim(seq(3), seq(2, 50), generated=[70, 71])),
    # other files before the prefix marker are left out
    (fim(seq(3), seq(1, 50), before=[6, 90, 91, 92]), fim(seq(3), seq(1, 50))),
    # not a prefix-suffix-middle prompt: as it is
    (seq(20), seq(20)),
    ([S] + seq(10) + [P] + seq(3) + [M], [S] + seq(10) + [P] + seq(3) + [M]),
    (seq(10) + [P] + seq(8) + [S], seq(10) + [P] + seq(8) + [S]),
])
def test_the_view_of_a_prompt(tokens, view):
    assert WINDOW(tokens) == view


def test_the_view_starts_at_the_same_token_while_the_user_types_a_step():
    starts = []
    for typed in range(6):
        view = WINDOW(fim(seq(8 + typed), seq(3, 50)))
        starts.append(view[1])
    assert starts == [14, 14, 16, 16, 18, 18]


def test_generated_tokens_extend_the_view():
    """Each round's view is the last one plus the new tokens, so the draft model's cache keeps serving it."""
    prompt = fim(seq(11), seq(5, 50), before=[6, 80])
    view = WINDOW(prompt)
    assert WINDOW(prompt + [70]) == view + [70]
    assert WINDOW(prompt + [70, 71, 72]) == view + [70, 71, 72]


def long_fim_prompt(seed: int) -> list[int]:
    body = random_prompt(seed, length=60)
    return [P] + body[:44] + [S] + body[44:] + [M]


@pytest.mark.parametrize("drafter", ["draft", "hybrid", "auto"])
@pytest.mark.parametrize("draft", ["same", "random"])
def test_windowed_drafts_equal_target_alone_and_the_draft_cache_holds_the_view(drafter, draft):
    engine = tiny_engine(draft)
    engine.draft_window = DraftWindow(P, S, M, prefix_tokens=8, suffix_tokens=4, step=4)
    target = tiny_model(2, 0)
    for seed in (1, 2):
        prompt = long_fim_prompt(seed)
        ref = reference_greedy(target, prompt, 16)
        session = f"doc{seed}"
        result = engine.complete(CompletionRequest(prompt, 16, drafter=drafter, max_draft_tokens=4, adaptive_k=False,
                                                   session=session))
        assert result.token_ids == ref
        if result.stats.drafted_by_source.get("draft"):
            # the window and the draft's cache: the prefix's last 8-11 tokens and the suffix's first 4, not 60
            view = engine.draft_window(prompt)
            assert len(view) == 1 + 8 + 1 + 4 + 1
            assert engine.sessions[session].draft.ids[:len(view)] == view


def test_without_the_window_the_draft_model_sees_the_whole_prompt(engine_options):
    engine = tiny_engine("same")
    engine.draft_window = DraftWindow(P, S, M, prefix_tokens=8, suffix_tokens=4, step=4)
    prompt = long_fim_prompt(3)
    held = {}
    for setting in ("1", "0"):
        engine_options(draft_window=setting == "1")
        engine.complete(CompletionRequest(prompt, 8, drafter="draft", max_draft_tokens=4, adaptive_k=False,
                                          session=setting))
        held[setting] = engine.sessions[setting].draft.ids
    assert held["0"][:len(prompt)] == prompt
    assert len(held["1"]) < len(prompt)


def test_the_policy_prices_the_catch_up_of_the_view_not_of_the_prompt(engine_options):
    engine = tiny_engine("same")
    engine.draft_window = DraftWindow(P, S, M, prefix_tokens=8, suffix_tokens=4, step=4)
    prompt = long_fim_prompt(4)
    lags = {}
    for setting in ("1", "0"):
        engine_options(draft_window=setting == "1")
        request = CompletionRequest(prompt, 8, drafter="auto", session=setting)
        policy = engine._controller("auto", engine._session(setting), request)
        lags[setting] = policy.draft_lag(prompt)
    assert lags == {"1": len(engine.draft_window(prompt)), "0": len(prompt)}


def test_a_long_catch_up_goes_in_chunks_and_drafts_the_same(monkeypatch):
    """A new prompt is fed to the draft model in chunks, as the target prefills (one pass over 1,000 tokens runs
    far slower than 256-token chunks), and its drafts are those of one pass."""
    model = tiny_model(1, 1).requires_grad_(False)
    prompt = random_prompt(5, length=70)
    whole = ModelDrafter(model, TrackedCache(model), min_confidence=0.0).propose(prompt, 3, lambda: False)
    assert whole.catchup_tokens == len(prompt) and whole.steps == 2
    monkeypatch.setattr(drafters, "PREFILL_CHUNK", 16)
    cache = TrackedCache(model)
    passes = []
    forward = cache.forward
    cache.forward = lambda ids, *args, **kwargs: passes.append(len(ids)) or forward(ids, *args, **kwargs)
    chunked = ModelDrafter(model, cache, min_confidence=0.0).propose(prompt, 3, lambda: False)
    assert chunked.tokens == whole.tokens
    assert passes == [16, 16, 16, 6, 16, 1, 1]
    assert chunked.catchup_tokens == len(prompt) and chunked.steps == 2 and chunked.catchup_seconds > 0
    assert cache.ids[:len(prompt)] == prompt
