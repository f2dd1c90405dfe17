"""The auto drafter in the engine, on the tiny fp32 pair: exact against target alone whatever the policy chooses,
and what the engine teaches its policy across sessions (acceptance, costs, completion lengths per request kind)."""

import pytest
from engine_helpers import (
    STOP_IDS,
    ReferenceDrafter,
    random_prompt,
    reference_greedy,
    tiny_engine,
    tiny_model,
)
from test_engine_policy import (
    ALL,
    AVX2_DRAFT,
    AVX2_DRAFT_PREFILL,
    FLAT,
    STEEP,
    FrozenCosts,
)

from engine import CompletionRequest
from engine.decode.drafters import Draft, LookupDrafter, NoDrafter
from engine.decode.kvcache import TrackedCache
from engine.decode.pass_costs import (
    PassCosts,
    interpolate,
)
from engine.decode.policy import GainPolicy
from engine.decode.speculative import generate

MAX_NEW = 24
PROMPTS = [(1, False), (3, True), (7, False), (12, True)]


@pytest.fixture(scope="module")
def references():
    target = tiny_model(2, 0)
    return {key: reference_greedy(target, random_prompt(key[0], repeat=key[1]), MAX_NEW) for key in PROMPTS}


@pytest.mark.parametrize("draft_model", ["random", "same", "none"])
def test_auto_equals_target_alone(references, draft_model):
    engine = tiny_engine(draft_model)
    for session in (None, "doc"):  # one-off requests, and a session whose policy learns across requests
        for (seed, repeat), ref in references.items():
            result = engine.complete(CompletionRequest(random_prompt(seed, repeat=repeat), MAX_NEW, session=session))
            assert result.token_ids == ref, (draft_model, session, seed, repeat)
            assert sum(result.stats.passes_by_drafter.values()) == result.stats.target_passes


def test_the_engine_gives_auto_its_lookup_for_the_shadow(references):
    engine = tiny_engine("none")
    engine.costs = FrozenCosts(verify_ms=dict(STEEP))  # verifying is dear: the policy mostly decodes alone
    for (seed, repeat), ref in references.items():
        result = engine.complete(CompletionRequest(random_prompt(seed, repeat=repeat), MAX_NEW, session="doc"))
        assert result.token_ids == ref
    policy = engine.sessions["doc"].policy
    assert isinstance(policy.lookup, LookupDrafter)
    assert policy.shadow_scored > 0 and policy.probes == 0


class CyclingPolicy(GainPolicy):
    """Forces every (drafter, K) in turn, whatever pays."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plan = [(d, k) for d in self.drafters for k in ((0,) if d == "none" else (1, 2, 3, 5, 8))]
        self.turn = 0

    def choose(self, tokens, max_k):
        drafter, k = self.plan[self.turn % len(self.plan)]
        self.turn += 1
        k = min(k, max(max_k, 0))
        self.model_k = k  # hybrid's model branch, when its lookup misses
        return drafter, k


def test_auto_is_exact_with_the_policy_forced_through_every_choice(references):
    engine = tiny_engine("random")
    (seed, repeat), ref = next(iter(references.items()))
    engine.complete(CompletionRequest(random_prompt(seed, repeat=repeat), 4, session="doc"))  # makes the session
    policy = engine.sessions["doc"].policy
    engine.sessions["doc"].policy = CyclingPolicy(policy.costs, policy.drafters, 8, policy.draft_lag)
    used = {}
    for (seed, repeat), ref in references.items():
        result = engine.complete(CompletionRequest(random_prompt(seed, repeat=repeat), MAX_NEW, session="doc"))
        assert result.token_ids == ref, (seed, repeat)
        for drafter, passes in result.stats.passes_by_drafter.items():
            used[drafter] = used.get(drafter, 0) + passes
    assert set(used) == set(ALL) and min(used.values()) >= 4


class WrongDrafter:
    """Always wrong, labelled as a real source so the policy's statistics see it."""

    def __init__(self, model, source):
        self.inner, self.source = ReferenceDrafter(model, "wrong"), source

    def propose(self, tokens, k, cancelled, finishes=None):
        draft = self.inner.propose(tokens, k, cancelled)
        draft.source = self.source
        return draft


def test_a_session_whose_drafts_are_never_accepted_ends_with_drafting_off():
    target = tiny_model(2, 0)
    drafters = {"none": NoDrafter(), "lookup": WrongDrafter(target, "prompt"), "draft": WrongDrafter(target, "draft")}
    # Costs under which drafting would pay handsomely if the drafts were right (verifying 9 tokens costs 8 % more
    # than one): each drafter is given up only once its acceptance estimate is below ~10 %.
    policy = GainPolicy(FrozenCosts(verify_ms=dict(FLAT), draft_ms=5.0), tuple(drafters))
    cache = TrackedCache(target)
    drafting = []
    for seed in range(1, 9):  # one session, several requests
        prompt = random_prompt(seed)
        result = generate(cache, drafters, policy, CompletionRequest(prompt, MAX_NEW), lambda ids: "",
                          set(STOP_IDS))
        assert result.token_ids == reference_greedy(target, prompt, MAX_NEW)
        assert result.stats.accepted == 0
        drafting.append(result.stats.target_passes - result.stats.passes_by_drafter.get("none", 0))
    assert not result.stats.speculation_enabled and not policy.enabled
    assert sum(drafting) <= 30 and sum(drafting[2:]) <= 5 and policy.probes <= 5, drafting


def test_new_sessions_start_from_what_drafting_earned_in_earlier_sessions():
    from engine.decode.policy import GainPolicy, SharedAcceptance

    shared = SharedAcceptance()
    fresh = GainPolicy(PassCosts(), shared=shared)
    assert fresh.alpha("draft") == pytest.approx(0.8)  # no evidence yet: the optimistic seed
    for _ in range(20):  # sessions whose draft model is right once in ten tries
        shared.add("draft", 0.1, 1.0)
    for _ in range(20):
        shared.add("prompt", 0.9, 1.0)
    later = GainPolicy(PassCosts(), shared=shared)
    assert later.alpha("draft") == pytest.approx(0.1, abs=0.01)
    assert later.alpha("prompt") == pytest.approx(0.9, abs=0.01)
    assert later.alpha("workspace") == pytest.approx(0.8)  # a source without evidence keeps the seed


def test_one_miss_in_a_new_session_does_not_undo_what_the_draft_model_earned_before():
    """Pooled at 0.9, a line's first draft missing at its first token must leave the model drafting long drafts
    (at the optimistic seed's weight it fell to 0.64 and K to 2: a third target pass on a 5-9-token line)."""
    from engine.decode.policy import SharedAcceptance

    def pooled(**weights) -> SharedAcceptance:
        shared = SharedAcceptance(**weights)
        for _ in range(40):
            shared.add("draft", 0.9, 1.0)
            shared.add("prompt", 0.9, 1.0)
        return shared
    costs = PassCosts(verify_ms={1: 44.3, 4: 44.3, 5: 51.1, 8: 71.4, 9: 79.8}, draft_ms=10.0)  # this VM, natively
    missed = Draft(tokens=[1, 2, 3, 4], probs=[None] * 4, source="draft", passes=4)

    def k_after_a_miss(seeds: SharedAcceptance) -> tuple[int, int]:
        # The gain model's K (without keep_drafting, which sizes drafts by the model's confidence instead)
        policy = GainPolicy(costs, ("none", "draft"), 8, shared=seeds, length_by_confidence=False)
        assert policy.alpha("draft") == pytest.approx(0.9, abs=0.01)
        before = policy.choose(list(range(50)), 63)[1]
        policy.report("draft", missed, 0, 0.0511)
        return before, policy.choose(list(range(50)), 63)[1]
    assert k_after_a_miss(pooled()) == (3, 3)
    assert k_after_a_miss(pooled(seed_weights={})) == (3, 2)  # every seed at the optimistic seed's 2 trials
    lookups = GainPolicy(costs, ("none", "lookup"), 8, shared=pooled())  # a lookup's seed is still 2 trials' worth
    lookups._add_trials("prompt", 0, 1)
    assert lookups.alpha("prompt") == pytest.approx(0.9 * 1.8 / (0.9 * 2 + 1), abs=0.01)


def test_the_draft_models_untimed_costs_move_with_the_targets_timings():
    """A calibration timed on a busy host: the target's pass at 39.9 ms, the draft model's at 16.3. The loop then
    timed the target at 27 ms; the draft model, still priced at 16.3, looked too dear to draft. Both move together
    until the draft model is timed itself."""
    calibrated = {1: 39.9, 2: 54.5, 4: 78.2, 8: 123.2, 16: 234.4}
    costs = PassCosts(verify_ms=dict(calibrated), draft_ms=16.3, draft_pass_ms=dict(AVX2_DRAFT),
                      draft_prefill_ms=AVX2_DRAFT_PREFILL, calibrated=True)
    assert costs.drift() == 1.0 and costs.draft() == 16.3
    for _ in range(40):
        costs.observe_verify(1, 27.0)
    scale = costs.verify(1) / 39.9
    assert scale == pytest.approx(27.0 / 39.9, rel=0.01) and costs.drift() == pytest.approx(scale)
    assert costs.draft() == pytest.approx(16.3 * scale) and costs.prefill() == pytest.approx(AVX2_DRAFT_PREFILL * scale)
    assert costs.draft_width(4) == pytest.approx(AVX2_DRAFT[4] * scale)
    costs.observe_draft(11.0)  # timed itself: its own figure
    assert costs.draft() == pytest.approx(16.3 * scale + 0.2 * (11.0 - 16.3 * scale))
    costs.observe_verify(1, 200.0)  # the target's drift no longer moves a figure the loop has timed
    assert costs.draft() == pytest.approx(16.3 * scale + 0.2 * (11.0 - 16.3 * scale))
    wide_only = PassCosts(verify_ms=dict(calibrated), draft_ms=16.3, calibrated=True)
    wide_only.observe_verify(5, 50.0)  # only verifies timed: the drift at the width nearest one token
    assert wide_only.drift() == pytest.approx(wide_only.observed_verify[5] / interpolate(calibrated, 5))


def test_a_catch_up_is_priced_over_what_completions_here_run_to_not_what_they_allow():
    """300 prompt tokens the draft model has not seen cost 450 ms: spread over the 64 tokens a request allows the
    draft model pays, but single-line completions here stop after ~8, and there it must not be chosen."""
    from engine.decode.policy import SharedAcceptance

    costs = PassCosts(verify_ms=dict(FLAT), draft_ms=20.0, draft_prefill_ms=1.5)
    shared = SharedAcceptance()
    policy = GainPolicy(costs, ("none", "draft"), 8, draft_lag=lambda tokens: 300, shared=shared)
    assert policy.expected_remaining(64) == 64  # no completion finished yet: what the request allows
    assert policy.choose(list(range(300)), 63)[0] == "draft"
    for _ in range(10):
        shared.add_length(8)
    assert policy.expected_remaining(64) == 8 and policy.expected_remaining(3) == 3
    assert policy.choose(list(range(300)), 63)[0] == "none"


def test_the_engine_counts_how_long_completions_run():
    engine = tiny_engine()
    prompt = random_prompt(5, 40)
    lengths = [len(engine.complete(CompletionRequest(prompt, n, drafter="none")).token_ids) for n in (3, 5, 7, 9, 11)]
    weights = [engine.acceptance.decay ** (len(lengths) - 1 - i) for i in range(len(lengths))]
    want = sum(w * n for w, n in zip(weights, lengths)) / sum(weights)
    assert engine.acceptance.typical_length() == pytest.approx(want) and 3 < want < 11


def test_a_block_is_not_priced_over_how_long_single_lines_ran():
    """Lines stop after ~8 tokens, blocks run to 64: a draft-model catch-up that pays over a block's 64 tokens was
    priced over the lines' 8 and never chosen, and under AVX2 no probe of the draft model fired for a whole block.
    Lengths are pooled per request kind."""
    from engine.decode.policy import SharedAcceptance

    shared = SharedAcceptance()
    for _ in range(20):
        shared.add_length(8, "line")
    costs = PassCosts(verify_ms=dict(FLAT), draft_ms=20.0, draft_prefill_ms=1.5)
    policy = GainPolicy(costs, ("none", "draft"), 8, draft_lag=lambda tokens: 300, shared=shared)
    policy.kind = "line"
    assert policy.expected_remaining(64) == 8 and policy.choose(list(range(300)), 63)[0] == "none"
    policy.kind = "block"
    assert policy.expected_remaining(64) == 64 and policy.choose(list(range(300)), 63)[0] == "draft"
    for _ in range(20):
        shared.add_length(50, "block")
    assert policy.expected_remaining(64) == 50


def test_the_engine_counts_lengths_per_request_kind():
    engine = tiny_engine()
    prompt = random_prompt(6, 40)
    for n in (3, 5, 7, 9):
        engine.complete(CompletionRequest(prompt, n, drafter="auto", kind="line", session="doc"))
    engine.complete(CompletionRequest(prompt, 11, drafter="auto", kind="block", session="doc"))
    line_tokens, line_count = engine.acceptance.lengths["line"]
    assert line_count == pytest.approx(sum(0.98 ** i for i in range(4))) and line_tokens <= 3 + 5 + 7 + 9
    assert engine.acceptance.lengths["block"][1] == 1.0 and "" not in engine.acceptance.lengths
    assert engine.sessions["doc"].policy.kind == "block"
