"""Lookup guesses checked inside the draft model's steps (engine/decode/step_guesses.py): the draft is the one one-token
steps would have drafted, in fewer passes where the guesses were the model's tokens; the guess count follows this
machine's pass widths and how often guesses were right; the output stays target alone's."""
import pytest
import torch
from engine_helpers import random_prompt, reference_greedy, tiny_engine, tiny_model

from engine import CompletionRequest
from engine.decode.drafters import ModelDrafter
from engine.decode.kvcache import TrackedCache
from engine.decode.pass_costs import PassCosts, interpolate
from engine.decode.policy import GainPolicy
from engine.decode.step_guesses import PRIOR_TRIES, StepGuesses

# The draft model's pass by width, ms: the Zen 4 natively and under the AVX2 build (`codecue-models list`).
NATIVE = {1: 10.0, 2: 11.0, 4: 13.4, 8: 26.5}
AVX2 = {1: 14.7, 2: 17.4, 4: 26.0, 8: 53.4}


@pytest.fixture(scope="module")
def draft_model():
    torch.set_num_threads(1)
    return tiny_model(1, 1).requires_grad_(False)


class ScriptedGuesses:
    """Guesses the test chooses: the right ones (what the model drafts next) or wrong ones; records the observations."""

    def __init__(self, truth: list[int], prompt_len: int, count: int, right: bool):
        self.truth, self.prompt_len, self.count, self.right = truth, prompt_len, count, right
        self.observed = []

    def guess(self, text, room):
        follow = self.truth[len(text) - self.prompt_len:][:min(self.count, room)]
        return follow if self.right else [(t + 1) % 384 for t in follow]

    def observe(self, right, missed):
        self.observed.append((right, missed))


def plain_draft(model, prompt, k):
    return ModelDrafter(model, TrackedCache(model), min_confidence=0.0).propose(prompt, k, lambda: False)


# The first pass feeds the prompt (a catch-up: no guesses), then steps from the last drafted token.
@pytest.mark.parametrize("count,right,passes,widths,observed", [
    (1, True, 5, [2, 2, 2], [(1, False)] * 3),  # 1 + 1 guess a step; the last step has no room for a guess
    (3, True, 3, [4, 3], [(3, False), (2, False)]),  # never more guesses than tokens still wanted
    (3, False, 8, [4, 4, 4, 4, 3, 2], [(0, True)] * 6),  # every guess wrong: one token a step, as without guesses
    (0, True, 8, [], []),
])
def test_guessed_steps_draft_what_one_token_steps_draft(draft_model, count, right, passes, widths, observed):
    prompt = random_prompt(21)
    plain = plain_draft(draft_model, prompt, 8)
    assert plain.passes == 8
    guesses = ScriptedGuesses(plain.tokens, len(prompt), count, right)
    cache = TrackedCache(draft_model)
    draft = ModelDrafter(draft_model, cache, min_confidence=0.0, guesses=guesses).propose(prompt, 8, lambda: False)
    assert draft.tokens == plain.tokens and draft.passes == passes
    assert [width for width, _ in draft.wide_steps] == widths and guesses.observed == observed
    # The cache holds the prompt and the confirmed guesses, never a wrong guess's keys.
    assert cache.ids == (prompt + draft.tokens)[:len(cache.ids)] and len(cache.ids) == len(prompt) + 7


def test_sampled_drafts_keep_the_distribution_each_token_was_drawn_from(draft_model):
    """Under sampling the token at each row is drawn from the model's distribution given the tokens before it (a
    guess is kept only where the draw equals it): the exact rejection rule needs those distributions."""
    prompt = random_prompt(23)

    def drafter(guesses=None):
        return ModelDrafter(draft_model, TrackedCache(draft_model), temperature=0.8, min_confidence=0.0,
                            generator=torch.Generator().manual_seed(5), guesses=guesses)
    plain = drafter().propose(prompt, 8, lambda: False)
    guessed = drafter(ScriptedGuesses(plain.tokens, len(prompt), 3, True)).propose(prompt, 8, lambda: False)
    assert guessed.tokens == plain.tokens and guessed.passes == 3
    for p, q in zip(plain.probs, guessed.probs):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


def test_the_next_draft_after_guessed_steps_continues_from_the_cache(draft_model):
    """A second draft in the same cache (the loop's next round) equals a fresh one-token-step draft."""
    prompt = random_prompt(22)
    whole = plain_draft(draft_model, prompt, 12)
    guesses = ScriptedGuesses(whole.tokens, len(prompt), 2, True)
    drafter = ModelDrafter(draft_model, TrackedCache(draft_model), min_confidence=0.0, guesses=guesses)
    first = drafter.propose(prompt, 5, lambda: False)
    second = drafter.propose(prompt + first.tokens[:3], 6, lambda: False)  # 3 accepted, the rest rejected
    assert first.tokens == whole.tokens[:5]
    assert second.tokens == plain_draft(draft_model, prompt + whole.tokens[:3], 6).tokens


@pytest.mark.parametrize("widths,alpha,count", [
    (NATIVE, 0.05, 0),  # guesses almost never right: a wider step does not pay even at +10 %
    (NATIVE, 0.30, 1),
    (NATIVE, 0.44, 2),
    (NATIVE, 0.80, 3),
    (AVX2, 0.10, 0),  # a 2-token step costs 1.18x there
    (AVX2, 0.44, 1),
    (AVX2, 0.90, 3),
])
def test_the_guess_count_is_the_one_that_gives_most_tokens_per_ms(widths, alpha, count):
    guesses = StepGuesses(PassCosts(draft_ms=widths[1], draft_pass_ms=dict(widths), calibrated=True))
    guesses.right, guesses.tried = alpha * 100, 100.0
    assert guesses.count() == count


def test_guesses_that_keep_missing_turn_guessing_off_and_right_ones_back_on():
    guesses = StepGuesses(PassCosts(draft_ms=10.0, draft_pass_ms=dict(NATIVE), calibrated=True))
    assert guesses.count() == 2 and guesses.tried == PRIOR_TRIES
    for _ in range(60):
        guesses.observe(0, missed=True)
    assert guesses.count() == 0 and guesses.guess([1, 2, 3, 1, 2], 4) == []
    for _ in range(60):
        guesses.observe(3, missed=False)
    assert guesses.count() == 3
    # What followed the latest earlier match of the last tokens (1-4 of them), at most `room`.
    assert guesses.guess([7, 1, 2, 3, 9, 1, 2], 4) == [3, 9, 1]
    assert guesses.guess([7, 1, 2, 3, 9, 1, 2], 2) == [3, 9]
    assert guesses.guess([5, 6, 7], 4) == []


def test_the_policy_learns_wide_steps_as_widths_and_prices_them_in_one_token_steps():
    costs = PassCosts(verify_ms={1: 40.0, 2: 42.0, 4: 50.0, 8: 80.0}, draft_ms=10.0, draft_pass_ms=dict(NATIVE),
                      calibrated=True)
    policy = GainPolicy(costs, ("none", "draft"))
    from engine.decode.drafters import Draft
    # 6 tokens: one one-token step, then two steps over 4 tokens (each 1.34 one-token steps' worth).
    draft = Draft(tokens=list(range(6)), probs=[None] * 6, source="draft", passes=3, steps=1, step_seconds=0.010,
                  wide_steps=[(4, 0.0134), (4, 0.0134)])
    policy.report("draft", draft, 6, interpolate(costs.verify_ms, 7) / 1000)  # the target as calibrated
    assert costs.observed_draft_widths[4] == pytest.approx(13.4)
    assert costs.observed_extra_passes == pytest.approx((3 + 2 * 0.34 - 1) / 5)


@pytest.mark.parametrize("pair", ["same", "random"])  # the draft model is the target / another model
def test_an_engine_drafting_with_guesses_writes_what_target_alone_writes(engine_options, pair):
    # Without the extension (repeated text would fill drafts first) and the confidence stop (a tiny random model is
    # never sure): steps are where the guesses go.
    engine_options(draft_extension=False)
    engine = tiny_engine(pair)
    assert engine.step_guesses.most > 0
    for seed, repeat in ((3, True), (4, False)):
        prompt = random_prompt(seed, repeat=repeat)
        reference = reference_greedy(engine.pair.target, prompt, 24)
        before = engine.step_guesses.tried
        result = engine.complete(CompletionRequest(prompt, 24, drafter="draft", max_draft_tokens=8, adaptive_k=False))
        assert result.token_ids == reference
        assert engine.step_guesses.tried != before  # steps did check guesses
