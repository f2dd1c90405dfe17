"""The draft model's draft length by its own confidence (drafter "auto"): GainPolicy.keep_drafting, what the
policy learns of each confidence bucket, ModelDrafter's length_rule, and exactness on the tiny fp32 pair."""
import pytest
import torch
from engine_helpers import random_prompt, reference_greedy, tiny_engine, tiny_model

from engine import CompletionRequest
from engine.decode.drafters import Draft, ModelDrafter
from engine.decode.kvcache import TrackedCache
from engine.decode.pass_costs import PassCosts
from engine.decode.policy import (
    CONFIDENCE_SEEDS,
    GainPolicy,
    SharedAcceptance,
    confidence_bucket,
)

SURE, UNSURE = 0.97, 0.2
THIS_VM = {1: 44.3, 4: 44.3, 5: 51.1, 8: 71.4, 9: 79.8}  # the Zen 3's verify passes (ms by width), draft step 10
FLAT = {1: 100.0, 2: 101.0, 4: 103.0, 8: 108.0, 16: 120.0}
STEEP = {1: 40.0, 2: 60.0, 4: 100.0, 8: 200.0, 16: 400.0}


class FrozenCosts(PassCosts):
    """Costs that ignore the loop's timings, so a test's outcome does not depend on how fast the machine is."""

    def observe_verify(self, width, ms): pass
    def observe_draft(self, ms): pass
    def observe_prefill(self, ms): pass
    def observe_lookup(self, ms): pass


def policy(verify_ms, draft_ms, **kwargs) -> GainPolicy:
    return GainPolicy(FrozenCosts(verify_ms=dict(verify_ms), draft_ms=draft_ms), ("none", "draft"), 8, **kwargs)


def test_confidence_buckets():
    assert [confidence_bucket(c) for c in (1.0, 0.9, 0.89, 0.8, 0.5, 0.49, 0.0, float("nan"))] == \
        ["conf90", "conf90", "conf80", "conf80", "conf50", "conf00", "conf00", "conf00"]
    assert set(CONFIDENCE_SEEDS) == {"conf90", "conf80", "conf50", "conf00"}


# (case, verify_ms, draft step ms, confidences of the tokens drafted so far, draft another?)
KEEP_CASES = [
    ("nothing drafted yet", STEEP, 40.0, [], True),
    ("sure so far, cheap steps", THIS_VM, 10.0, [SURE], True),
    ("sure, then unsure", THIS_VM, 10.0, [SURE, UNSURE], False),
    ("sure for 8: the wider verify no longer pays", THIS_VM, 10.0, [SURE] * 8, False),
    ("dear steps, steep verify: one sure token is all", STEEP, 40.0, [SURE], False),
    ("flat verify, nearly free steps: even unsure drafts pay", FLAT, 1.0, [UNSURE], True),
]


@pytest.mark.parametrize("case", KEEP_CASES, ids=[c[0] for c in KEEP_CASES])
def test_keep_drafting(case):
    _, verify_ms, draft_ms, confidences, keep = case
    assert policy(verify_ms, draft_ms).keep_drafting(confidences) is keep


def first_stop(p: GainPolicy) -> int:
    """How many sure tokens the policy drafts before it stops."""
    return next(n for n in range(1, 64) if not p.keep_drafting([SURE] * n))


def test_sure_drafts_that_keep_being_right_grow_longer():
    p = policy(THIS_VM, 10.0)
    before = first_stop(p)
    assert 2 <= before <= 6
    for _ in range(30):
        p.report("draft", Draft(tokens=[1] * 4, probs=[None] * 4, source="draft", passes=4,
                                confidences=[SURE] * 4), 4, 0.05)
    assert p.alpha("conf90") > CONFIDENCE_SEEDS["conf90"]
    assert first_stop(p) > before


def test_acceptance_is_counted_per_bucket_up_to_the_first_rejection():
    p = policy(THIS_VM, 10.0)
    old = {name: list(p.trials[name]) for name in CONFIDENCE_SEEDS}
    draft = Draft(tokens=[5, 6, 7, 8], probs=[None] * 4, source="draft", passes=4, confidences=[0.95, 0.93, 0.6, 0.99])
    p.report("draft", draft, 2, 0.05)  # the first two kept, the third rejected, the fourth never judged
    decay = p.decay
    assert p.trials["conf90"] == pytest.approx([decay * old["conf90"][0] + 2, decay * old["conf90"][1] + 2])
    assert p.trials["conf50"] == pytest.approx([decay * old["conf50"][0], decay * old["conf50"][1] + 1])
    assert p.trials["conf80"] == old["conf80"] and p.trials["conf00"] == old["conf00"]


def test_buckets_are_pooled_across_sessions():
    shared = SharedAcceptance()
    first = policy(THIS_VM, 10.0, shared=shared)
    for _ in range(20):
        first.report("draft", Draft(tokens=[1, 2], probs=[None] * 2, source="draft", passes=2,
                                    confidences=[0.6, 0.6]), 0, 0.05)  # unsure tokens are never right here
    later = policy(THIS_VM, 10.0, shared=shared)
    assert later.alpha("conf50") < 0.1 < CONFIDENCE_SEEDS["conf50"]
    assert later.alpha("conf90") == pytest.approx(CONFIDENCE_SEEDS["conf90"])  # no evidence: the seed


def test_choose_gives_the_model_the_whole_budget_only_with_the_length_rule():
    tokens = list(range(50))
    fixed = policy(STEEP, 5.0, length_by_confidence=False)
    assert fixed.choose(tokens, 63) == ("draft", 1)  # the gain model's K at the seed's acceptance, steep verify
    sized = policy(STEEP, 5.0)
    assert sized.choose(tokens, 63) == ("draft", 8) and sized.model_k == 8  # keep_drafting stops it sooner
    assert sized.choose(tokens, 5) == ("draft", 5)  # never past the request's budget


@torch.inference_mode()
def test_the_draft_model_drafts_while_its_rule_says_so():
    model = tiny_model(1, 1)
    prompt = random_prompt(3)
    seen = []

    def rule(confidences):
        seen.append(list(confidences))
        return len(confidences) < 3
    draft = ModelDrafter(model, TrackedCache(model), length_rule=rule).propose(prompt, 6, lambda: False)
    assert len(draft.tokens) == 3 and len(draft.confidences) == 3
    assert all(0.0 < c <= 1.0 for c in draft.confidences)
    assert [len(c) for c in seen] == [1, 2, 3] and seen[-1] == draft.confidences
    always = ModelDrafter(model, TrackedCache(model), min_confidence=1.1, length_rule=lambda c: True)
    assert len(always.propose(prompt, 6, lambda: False).tokens) == 6  # the rule, not min_confidence, decides
    assert draft.cut(2).confidences == seen[-1][:2]


@pytest.mark.parametrize("length_by_confidence", [True, False])
def test_auto_with_long_confident_drafts_equals_target_alone(engine_options, length_by_confidence):
    """The target as its own draft model (every draft right) and verify passes that cost almost nothing more per
    token: keep_drafting drafts to the budget, and the text is still target alone's."""
    engine_options(length_by_confidence=length_by_confidence)
    engine = tiny_engine("same")
    engine.costs = FrozenCosts(verify_ms=dict(FLAT), draft_ms=1.0)
    target = engine.pair.target
    longest = 0
    for seed in (1, 4, 9):
        prompt = random_prompt(seed)
        result = engine.complete(CompletionRequest(prompt, 24, session="doc"))
        assert result.token_ids == reference_greedy(target, prompt, 24), seed
        longest = max(longest, result.stats.accepted / max(result.stats.target_passes, 1))
    assert engine.sessions["doc"].policy.length_by_confidence is length_by_confidence
    if length_by_confidence:
        assert longest > 4  # drafts of the whole budget, all accepted
