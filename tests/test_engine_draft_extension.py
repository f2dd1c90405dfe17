"""The draft model's lookup extension: after a model token, a long match of the text so far fills the draft for free;
the output stays target alone's, and the policy prices the passes it saves."""
import pytest
import torch
from engine_helpers import random_prompt, reference_greedy, tiny_engine, tiny_model

from engine import CompletionRequest
from engine.decode.drafters import (
    Draft,
    HybridDrafter,
    LookupDrafter,
    ModelDrafter,
    extension_lookup,
)
from engine.decode.kvcache import TrackedCache
from engine.decode.pass_costs import PassCosts
from engine.decode.policy import best_choice
from engine.decode.suffix_index import SuffixIndex

MAX_NEW = 24


@pytest.fixture(scope="module")
def draft_model():
    torch.set_num_threads(1)
    return tiny_model(1, 1).requires_grad_(False)


def first_model_token(model, prompt: list[int]) -> int:
    return ModelDrafter(model, TrackedCache(model), min_confidence=0.0).propose(prompt, 1, lambda: False).tokens[0]


def test_a_match_after_the_model_token_fills_the_draft_without_more_passes(draft_model):
    prompt = random_prompt(11)
    t1 = first_model_token(draft_model, prompt)
    follow = [5, 6, 7, 8, 9]
    index = SuffixIndex()
    index.add("doc", [3] + prompt[-3:] + [t1] + follow, "workspace")  # the 4 tokens ending in the model's token
    drafter = ModelDrafter(draft_model, TrackedCache(draft_model), min_confidence=0.0, extend=extension_lookup(index))
    draft = drafter.propose(prompt, 6, lambda: False)
    assert draft.tokens == [t1] + follow and draft.passes == 1 and draft.extended == 5
    assert draft.probs[1:] == [None] * 5  # deterministic: the sampling rule takes q as one-hot
    # k bounds the extension; a shorter match than 4 tokens (prompt[-2:] + [t1]) extends nothing.
    assert drafter.propose(prompt, 3, lambda: False).tokens == [t1] + follow[:2]
    short = SuffixIndex()
    short.add("doc", [3] + prompt[-2:] + [t1] + follow, "workspace")
    plain = ModelDrafter(draft_model, TrackedCache(draft_model), min_confidence=0.0)
    drafter = ModelDrafter(draft_model, TrackedCache(draft_model), min_confidence=0.0, extend=extension_lookup(short))
    assert drafter.propose(prompt, 4, lambda: False).tokens == plain.propose(prompt, 4, lambda: False).tokens
    assert drafter.propose(prompt, 4, lambda: False).extended == 0


def committed_text_with_a_repeat(model) -> tuple[list[int], int]:
    """A text whose last 3 tokens plus the model's next token x appeared earlier, followed by [40, 41, 42]: found
    by trying every x (the model's next token depends on the text, x included)."""
    vocab = model.config.vocab_size
    for seed in range(20):
        base = random_prompt(100 + seed)
        tail = base[-3:]
        for x in range(8, vocab):
            text = base[:20] + tail + [x, 40, 41, 42] + base[20:]
            if first_model_token(model, text) == x:
                return text, x
    raise AssertionError("no text found")


def test_the_extension_also_reads_the_committed_text(draft_model):
    text, t1 = committed_text_with_a_repeat(draft_model)
    drafter = ModelDrafter(draft_model, TrackedCache(draft_model), min_confidence=0.0,
                           extend=LookupDrafter(max_ngram=4, min_ngram=4))
    draft = drafter.propose(text, 4, lambda: False)
    assert draft.tokens == [t1, 40, 41, 42] and draft.passes == 1 and draft.extended == 3


@pytest.mark.parametrize("truth", ["right", "wrong"])
@pytest.mark.parametrize("drafter", ["draft", "hybrid", "auto"])
def test_extended_drafts_equal_target_alone(drafter, truth):
    """Another open file holds the prompt's last tokens, the answer's first token and then the rest of the answer
    (or a wrong rest): with a draft model equal to the target, its first token matches there and the extension
    drafts the rest; with a random draft model it rarely does."""
    target = tiny_model(2, 0)
    for draft in ("same", "random"):
        engine = tiny_engine(draft)
        for seed in range(1, 5):
            prompt = random_prompt(seed)
            ref = reference_greedy(target, prompt, MAX_NEW)
            rest = ref[1:] if truth == "right" else [(t + 1) % 384 or 9 for t in ref[1:]]
            engine.workspace.add(f"file:///other{seed}.py", prompt[-10:] + ref[:1] + rest)
            result = engine.complete(CompletionRequest(prompt, MAX_NEW, drafter=drafter, max_draft_tokens=8,
                                                       adaptive_k=False))  # no stop on low confidence
            assert result.token_ids == ref, (draft, seed)
            stats = result.stats
            if drafter == "draft" and draft == "same" and len(ref) > 2:
                assert stats.drafted_by_source.get("extension", 0) > 0, seed
                kept = stats.accepted_by_source["extension"]
                assert kept == (stats.drafted_by_source["extension"] if truth == "right" else 0), seed


def test_without_the_extension_the_model_drafts_alone(engine_options):
    engine = tiny_engine("same")
    prompt = random_prompt(2)
    ref = reference_greedy(tiny_model(2, 0), prompt, MAX_NEW)
    engine.workspace.add("file:///other.py", prompt[-10:] + ref)
    extended = {}
    for setting in (True, False):
        engine_options(draft_extension=setting)
        result = engine.complete(CompletionRequest(prompt, MAX_NEW, drafter="draft", max_draft_tokens=8,
                                                   adaptive_k=False))
        assert result.token_ids == ref
        extended[setting] = result.stats.drafted_by_source.get("extension", 0)
    assert extended[True] > 0 and extended[False] == 0


def test_stats_count_extension_tokens_apart():
    from engine.types import CompletionStats

    stats = CompletionStats()
    stats.count_pass("draft", "draft", 6, 4, 0.1, extended=4)  # 2 model tokens kept, then 2 of 4 extension tokens
    stats.count_pass("draft", "draft", 3, 1, 0.1)
    assert stats.drafted_by_source == {"draft": 5, "extension": 4}
    assert stats.accepted_by_source == {"draft": 3, "extension": 2}
    assert stats.drafted == 9 and stats.accepted == 5


def test_the_policy_learns_the_passes_an_extension_saves():
    costs = PassCosts(verify_ms={1: 40.0, 2: 42.0, 4: 50.0, 8: 80.0, 16: 160.0}, draft_ms=14.0)
    assert costs.draft_passes(8) == 8.0 and costs.draft_passes(1) == 1.0 and costs.draft_passes(0) == 0.0
    alpha = {"draft": 0.75, "lookup": 0.0}
    without = best_choice(costs, ("none", "draft"), 8, alpha, 0.0)
    from engine.decode.policy import GainPolicy

    policy = GainPolicy(costs, ("none", "draft"))
    for _ in range(20):  # 8-token drafts of 2 model passes: 1 + 7 x (1/7)
        policy.report("draft", Draft(tokens=[1] * 8, probs=[None] * 8, source="draft", passes=2, extended=6), 8, 0.08)
    assert costs.draft_passes(8) == pytest.approx(2.0, abs=0.05)
    costs.observed_verify.clear()
    costs._verify_cache.clear()
    costs.observed_draft = None
    with_extension = best_choice(costs, ("none", "draft"), 8, alpha, 0.0)
    assert with_extension.drafter == "draft" and with_extension.k > without.k
    assert with_extension.rate > without.rate


@pytest.mark.parametrize("extension_right,kept", [(True, 6), (False, 0)])
def test_auto_cuts_an_extension_that_has_been_wrong(extension_right, kept):
    from engine.decode.policy import GainPolicy

    costs = PassCosts(verify_ms={1: 40.0, 2: 42.0, 4: 50.0, 8: 80.0, 16: 160.0}, draft_ms=14.0)
    policy = GainPolicy(costs, ("none", "draft"))
    for _ in range(30):  # 2 model tokens, both right; then the extension's 6: all right, or the first wrong
        draft = Draft(tokens=[1] * 8, probs=[None] * 8, source="draft", passes=2, extended=6)
        policy.report("draft", draft, 8 if extension_right else 2, 0.08)
    assert policy.alpha("extension") == (pytest.approx(1.0, abs=0.01) if extension_right else pytest.approx(0, abs=0.01))
    reviewed = policy.review(Draft(tokens=list(range(8)), probs=[None] * 8, source="draft", passes=2, extended=6))
    assert reviewed.tokens == list(range(2 + kept)) and reviewed.extended == kept
    # A draft the model alone wrote is left alone.
    alone = policy.review(Draft(tokens=list(range(5)), probs=[None] * 5, source="draft", passes=5))
    assert alone.tokens == list(range(5))


def test_cutting_a_draft_keeps_the_count_of_extension_tokens():
    draft = Draft(tokens=list(range(8)), probs=[None] * 8, source="draft", passes=3, extended=5)
    assert draft.cut(6).extended == 3 and draft.cut(2).extended == 0 and draft.tokens == [0, 1]


@pytest.mark.parametrize("finish_at", [1, 2, 4, 6])
def test_the_draft_model_spends_no_pass_past_the_token_that_finishes_the_completion(draft_model, finish_at):
    prompt = random_prompt(12)
    whole = ModelDrafter(draft_model, TrackedCache(draft_model), min_confidence=0.0).propose(prompt, 6, lambda: False)
    assert whole.passes == 6

    def finishes(drafted):  # e.g. the line's end: here the finish_at-th drafted token
        assert drafted == whole.tokens[:len(drafted)]
        return len(drafted) >= finish_at
    drafter = ModelDrafter(draft_model, TrackedCache(draft_model), min_confidence=0.0)
    cut = drafter.propose(prompt, 6, lambda: False, finishes)
    assert cut.tokens == whole.tokens[:finish_at] and cut.passes == finish_at
    # Through the hybrid drafter when the lookup finds nothing: the model gets the same predicate.
    hybrid = HybridDrafter(LookupDrafter(max_ngram=4, min_ngram=4),
                           ModelDrafter(draft_model, TrackedCache(draft_model), min_confidence=0.0))
    via_hybrid = hybrid.propose(prompt, 6, lambda: False, finishes)
    assert via_hybrid.source == "draft" and via_hybrid.tokens == cut.tokens and via_hybrid.passes == finish_at
