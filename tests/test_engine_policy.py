"""Drafting by expected gain (drafter "auto"): the gain model, the policy's learning, probing and shadow scoring."""
import math

import pytest

from engine.decode.drafters import Draft
from engine.decode.pass_costs import (
    GPU_DRAFT_RATIO,
    GPU_VERIFY_MS,
    PassCosts,
    interpolate,
    uncalibrated_costs,
)
from engine.decode.policy import GainPolicy, Shadow, best_choice, expected_tokens, rate

ALL = ("none", "lookup", "draft", "hybrid")
FLAT = {1: 100.0, 2: 101.0, 4: 103.0, 8: 108.0, 16: 120.0}  # bandwidth-bound: K+1 tokens cost about one
STEEP = {1: 40.0, 2: 60.0, 4: 100.0, 8: 200.0, 16: 400.0}  # compute-bound (int4 on 2 cores)
AVX2_FP32 = {1: 390.0, 5: 1099.0}  # the AVX2-only machine's measured fp32 passes (issue 8)
ZEN4_VNNI = {1: 41.0, 5: 56.0, 9: 83.5}  # the Zen 4's passes in a warm bench run (draft model pass: 13.7 ms)


def test_expected_tokens_and_interpolation():
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert math.isclose(expected_tokens(0.5, 2), 1 + 0.5 + 0.25)
    assert interpolate(FLAT, 1) == 100.0 and interpolate(FLAT, 3) == 102.0 and interpolate(FLAT, 12) == 114.0
    assert interpolate(STEEP, 24) == 600.0  # beyond the table: along the last segment
    assert interpolate({1: 50.0}, 3) == 150.0  # one width known: assume proportional (pessimistic)


# (verify_ms, draft_ms, drafters, alpha(draft), alpha(lookup), lookup hit rate, expected drafter, K check)
GAIN_CASES = [
    ("costly draft, low acceptance", FLAT, 60.0, ("none", "draft"), 0.3, 0.0, 0.0, "none", lambda k: k == 0),
    ("cheap draft, high acceptance", FLAT, 20.0, ("none", "draft"), 0.85, 0.0, 0.0, "draft", lambda k: 3 <= k <= 8),
    ("free lookup, high acceptance", FLAT, 60.0, ALL, 0.3, 0.95, 0.9, "lookup", lambda k: k >= 7),
    ("lookup that never hits", FLAT, 60.0, ("none", "lookup"), 0.3, 0.95, 0.0, "none", lambda k: k == 0),
    ("steep verify: small K", STEEP, None, ("none", "lookup"), 0.0, 0.9, 1.0, "lookup", lambda k: 1 <= k <= 3),
    ("hybrid fills lookup misses", FLAT, 5.0, ALL, 0.9, 0.95, 0.5, "hybrid", lambda k: k >= 3),
    ("lookup misses, draft not good enough", FLAT, 60.0, ALL, 0.3, 0.95, 0.5, "lookup", lambda k: k >= 7),
    ("draft pays, lookup rarely hits: hybrid", FLAT, 20.0, ALL, 0.8, 0.95, 0.05, "hybrid", lambda k: k >= 1),
    ("AVX2 fp32: the draft costs more than it saves", AVX2_FP32, 432.0, ("none", "draft"), 0.9, 0.0, 0.0, "none",
     lambda k: k == 0),
]


@pytest.mark.parametrize("case", GAIN_CASES, ids=[c[0] for c in GAIN_CASES])
def test_gain_model_picks_the_fastest_choice(case):
    _, verify, draft_ms, drafters, alpha_draft, alpha_lookup, hit, expected, k_ok = case
    costs = PassCosts(verify_ms=dict(verify), draft_ms=draft_ms)
    alpha = {"draft": alpha_draft, "lookup": alpha_lookup}
    choice = best_choice(costs, drafters, 8, alpha, hit)
    assert (choice.drafter, k_ok(choice.k)) == (expected, True), choice
    assert math.isclose(choice.rate, rate(costs, choice.drafter, choice.k, alpha, hit, model_k=choice.model_k))
    for other in set(drafters) - {"hybrid"}:  # no single drafter does better
        for other_k in range(1, 9):
            assert rate(costs, other, other_k, alpha, hit) <= choice.rate + 1e-12
    if choice.drafter == "hybrid":  # the model's K is its own best where the lookup misses
        best_alone = max(range(1, 9), key=lambda k: rate(costs, "draft", k, alpha, hit))
        assert choice.model_k == best_alone


def test_a_gpu_without_calibration_prices_the_draft_model_as_measured_there():
    # On the H200 the 0.5B draft's pass costs nearly the 1.5B's (both launch-bound): even 80 % acceptance does not
    # pay for it, where the CPU's neutral prior (0.4) would draft; lookup drafts still pay.
    alpha = {"draft": 0.8, "lookup": 0.9}
    gpu, cpu = uncalibrated_costs("cuda"), uncalibrated_costs("cpu")
    assert gpu.draft() == pytest.approx(GPU_DRAFT_RATIO * GPU_VERIFY_MS[1])
    assert best_choice(gpu, ("none", "draft"), 8, alpha, 0.0).drafter == "none"
    assert best_choice(cpu, ("none", "draft"), 8, alpha, 0.0).drafter == "draft"
    assert best_choice(gpu, ALL, 8, alpha, 0.9).drafter == "lookup"


def test_draft_model_catch_up_is_charged_to_the_request():
    costs = PassCosts(verify_ms=dict(FLAT), draft_ms=20.0, draft_prefill_ms=2.0)
    alpha = {"draft": 0.8, "lookup": 0.0}
    assert best_choice(costs, ("none", "draft"), 8, alpha, 0.0, catchup_tokens=0, remaining=64).drafter == "draft"
    # 2,000 prompt tokens the draft model has not seen (4 s) do not pay back over 16 new tokens.
    assert best_choice(costs, ("none", "draft"), 8, alpha, 0.0, catchup_tokens=2000, remaining=16).drafter == "none"


# A calibration under the AVX2 emulation: the vnni draft model's passes by width, its prefill rate.
AVX2_DRAFT = {1: 16.32, 2: 19.52, 4: 32.68, 8: 64.16, 16: 130.39}
AVX2_DRAFT_PREFILL = 1000 / 209.6

CATCHUP_CASES = [
    # (name, lag, extra ms beyond the one-token pass the catch-up replaces)
    ("in step: the last token is the step's own", 1, 0.0),
    ("nothing to feed", 0, 0.0),
    ("a measured width", 8, 64.16 - 16.32),
    ("between widths", 6, 32.68 + (64.16 - 32.68) / 2 - 16.32),
    ("past the widest: prefill rate for the rest", 300, 130.39 + 284 * AVX2_DRAFT_PREFILL - 16.32),
]


@pytest.mark.parametrize("case", CATCHUP_CASES, ids=[c[0] for c in CATCHUP_CASES])
def test_a_draft_model_catch_up_is_priced_by_its_pass_width(case):
    _, lag, extra = case
    costs = PassCosts(verify_ms=dict(FLAT), draft_ms=16.32, draft_pass_ms=dict(AVX2_DRAFT),
                      draft_prefill_ms=AVX2_DRAFT_PREFILL)
    assert costs.catchup(lag) == pytest.approx(extra)


@pytest.mark.parametrize("lag, remaining", [(300, 64), (8, 64), (40, 2)])
def test_a_catch_up_is_spread_over_the_request_up_to_its_whole_cost(lag, remaining):
    costs = PassCosts(verify_ms=dict(FLAT), draft_ms=16.32, draft_pass_ms=dict(AVX2_DRAFT),
                      draft_prefill_ms=AVX2_DRAFT_PREFILL)
    alpha = {"draft": 0.8, "lookup": 0.0}
    tokens = expected_tokens(0.8, 4)
    in_step_ms = tokens / rate(costs, "draft", 4, alpha, 0.0)
    want = tokens / (in_step_ms + min(1.0, tokens / remaining) * costs.catchup(lag))
    assert rate(costs, "draft", 4, alpha, 0.0, lag, remaining) == pytest.approx(want)


def test_an_unmeasured_draft_model_takes_the_targets_shape_for_its_catch_ups():
    costs = PassCosts(verify_ms={1: 40.0, 2: 42.0, 4: 52.0, 8: 80.0, 16: 160.0}, draft_ms=10.0)
    assert costs.catchup(8) == pytest.approx(80.0 / 4 - 10.0) and costs.catchup(4) == pytest.approx(52.0 / 4 - 10.0)


def test_short_catch_ups_teach_their_widths_not_the_draft_models_step():
    """An 8-token catch-up cost 64 ms under AVX2: counted as a step it made the draft model's 16 ms step look 28."""
    costs = PassCosts(verify_ms=dict(FLAT), draft_ms=16.0, draft_pass_ms=dict(AVX2_DRAFT),
                      draft_prefill_ms=AVX2_DRAFT_PREFILL, calibrated=True)
    policy = GainPolicy(costs, ("none", "draft"), 8)
    as_calibrated = interpolate(FLAT, 5) / 1000  # the target's 5-token verify as calibrated: no drift
    draft = Draft(tokens=[5, 6, 7, 8], probs=[None] * 4, source="draft", passes=4, steps=3, step_seconds=0.048,
                  catchup_tokens=8, catchup_seconds=0.080)
    policy.report("draft", draft, 4, as_calibrated)
    assert costs.draft() == pytest.approx(16.0)
    assert costs.catchup(8) + costs.draft() == pytest.approx(64.16 + 0.2 * (80.0 - 64.16))  # moved, not replaced
    assert costs.catchup(12) > (64.16 + 130.39) / 2 - 16.0  # the prior's shape follows the nearest width measured
    policy.report("draft", draft, 4, as_calibrated)  # a second timing moves the estimate again (nothing stale is kept)
    assert costs.catchup(8) + costs.draft() == pytest.approx(64.16 + 0.36 * (80.0 - 64.16))
    long = Draft(tokens=[5], probs=[None], source="draft", passes=1, catchup_tokens=100, catchup_seconds=0.6)
    policy.report("draft", long, 1, interpolate(FLAT, 2) / 1000)
    assert costs.prefill() == pytest.approx(AVX2_DRAFT_PREFILL + 0.2 * (6.0 - AVX2_DRAFT_PREFILL))


def test_the_calibrated_draft_widths_reach_the_engines_costs():
    from engine_helpers import tiny_pair

    from engine.calibration.measurements import Calibration, Choice, Measurement
    from engine.engine import Engine
    from engine.loading.choice import pass_costs_from

    target = Measurement("target", "vnni", "float32", {1: 39.9, 2: 54.5, 4: 78.2, 8: 123.2, 16: 234.4}, 69.1)
    draft = Measurement("draft", "vnni4", "float32", dict(AVX2_DRAFT), 209.6)
    costs = pass_costs_from(Calibration(key={}, measurements=[target, draft]),
                            Choice("vnni", "float32", "vnni4", "float32", draft_model=True))
    assert costs.draft_pass_ms == AVX2_DRAFT and costs.draft() == 16.32
    assert costs.prefill() == pytest.approx(AVX2_DRAFT_PREFILL)
    pair = tiny_pair()
    pair.costs = costs
    engine_costs = Engine(pair).costs
    assert engine_costs.calibrated and engine_costs.catchup(8) == pytest.approx(64.16 - 16.32)


def test_costs_learned_online_rescale_the_prior_and_override_it_where_measured():
    costs = PassCosts()  # neutral guess: 100 ms for one token
    assert costs.verify(1) == 100.0 and costs.draft() == 40.0
    costs.observe_verify(1, 400.0)  # this machine is 4x slower than the guess
    assert costs.verify(1) == 400.0 and math.isclose(costs.verify(8), 4 * 135.0)
    assert costs.draft() == 160.0  # the neutral draft ratio follows
    costs.observe_verify(5, 1100.0)
    assert costs.verify(5) == 1100.0 and 400.0 < costs.verify(3) < 1100.0
    for _ in range(30):
        costs.observe_verify(1, 200.0)
    assert abs(costs.verify(1) - 200.0) < 1.0  # an EMA: follows a change
    costs.observe_draft(30.0)
    assert costs.draft() == 30.0


def test_a_calibrated_prior_is_moved_by_a_first_timing_not_replaced_and_still_follows_a_change():
    costs = PassCosts(verify_ms={1: 40.0, 2: 42.0, 4: 52.0, 8: 77.0}, draft_ms=10.0, draft_prefill_ms=2.0,
                      calibrated=True)
    costs.observe_draft(14.0)  # a first call's one-time costs
    costs.observe_prefill(3.0)
    costs.observe_verify(1, 70.0)  # (after the draft model's timings: the target's drift moves no timed figure)
    assert math.isclose(costs.draft(), 10.0 + 0.2 * 4.0) and math.isclose(costs.verify(1), 40.0 + 0.2 * 30.0)
    assert math.isclose(costs.prefill(), 2.0 + 0.2 * 1.0)
    assert math.isclose(costs.verify(8), 77.0 * 46.0 / 40.0)  # the prior's shape, rescaled to the blended estimate
    for _ in range(30):
        costs.observe_draft(16.0)
        costs.observe_verify(1, 55.0)
    assert abs(costs.draft() - 16.0) < 0.1 and abs(costs.verify(1) - 55.0) < 0.1  # this machine, now


def test_a_timing_far_over_the_estimate_counts_as_twice_it_and_a_real_slowdown_is_still_followed():
    """A process's first passes pay one-time costs (334 ms for a ~45 ms verify, 112 ms for a ~10 ms draft step
    measured here): at the EMA's weight they took the estimates 1.5-2.4x up."""
    costs = PassCosts(verify_ms={1: 40.0, 2: 42.0, 4: 52.0, 8: 77.0}, draft_ms=10.0, calibrated=True)
    costs.observe_draft(112.0)
    costs.observe_verify(2, 334.0)  # (after the draft model's: the target's drift moves no timed figure)
    assert math.isclose(costs.verify(2), 42.0 + 0.2 * 42.0) and math.isclose(costs.draft(), 10.0 + 0.2 * 10.0)
    for _ in range(30):  # this machine became 5x slower: followed within a few timings, not held at 2x
        costs.observe_draft(50.0)
    assert abs(costs.draft() - 50.0) < 1.0
    fresh = PassCosts()  # no estimate of its own yet (the neutral guess is only a shape): the first timing is taken
    fresh.observe_draft(112.0)
    assert fresh.draft() == 112.0


class FrozenCosts(PassCosts):
    """Costs that ignore the loop's timings, so a test's outcome does not depend on how fast the machine is."""

    def observe_verify(self, width, ms): pass
    def observe_draft(self, ms): pass
    def observe_prefill(self, ms): pass
    def observe_lookup(self, ms): pass


def simulate(policy, passes, accept):
    """Drive a policy the way the loop does; accept(drafter, k) -> accepted tokens. Returns the drafting passes."""
    drafting = []
    for i in range(passes):
        drafter, k = policy.choose([1, 2, 3], 1000)
        if k:
            source = "prompt" if drafter == "lookup" else "draft"
            draft = Draft(tokens=[9] * k, probs=[None] * k, source=source)
            policy.report(drafter, draft, accept(drafter, k), 0.1)
            drafting.append(i)
        else:
            policy.report("none", Draft(), 0, 0.1)
    return drafting


def test_never_accepted_drafting_switches_off_with_log_many_probes():
    policy = GainPolicy(FrozenCosts(verify_ms=dict(FLAT), draft_ms=10.0), ("none", "draft"))
    drafting = simulate(policy, 2000, lambda d, k: 0)
    assert not policy.enabled
    assert len(drafting) <= 14  # a few tries at first, then probes with a doubling gap
    assert policy.probes >= 3  # but it does keep probing
    assert all(b - a >= 8 for a, b in zip(drafting[5:], drafting[6:]))


def test_drafting_that_starts_paying_is_found_again_by_a_probe():
    policy = GainPolicy(FrozenCosts(verify_ms=dict(FLAT), draft_ms=10.0), ("none", "draft"))
    simulate(policy, 100, lambda d, k: 0)
    assert not policy.enabled
    drafting = simulate(policy, 300, lambda d, k: k)  # now every draft is right
    assert policy.enabled and len(drafting) > 200


def simulate_lookup_runs(policy, passes, model_accept):
    """Drive a policy with all four drafters where every other lookup finds a match that is right for 4 tokens;
    model_accept(k) -> accepted tokens of a draft-model draft. Returns the draft model's drafting passes."""
    model_passes = []
    for i in range(passes):
        drafter, k = policy.choose([1, 2, 3], 1000)
        model_k = k if drafter == "draft" else policy.model_k if drafter == "hybrid" else 0
        if drafter in ("lookup", "hybrid") and i % 2 == 0:
            draft = Draft(tokens=[9] * k, probs=[None] * k, source="prompt")
            accepted = min(k, 4)
        elif model_k:
            draft = Draft(tokens=[9] * model_k, probs=[None] * model_k, source="draft", passes=model_k,
                          steps=model_k, step_seconds=0.01 * model_k)
            accepted = model_accept(model_k)
            model_passes.append(i)
        else:
            draft, accepted = Draft(), 0
        policy.report(drafter, draft, accepted, 0.1)
    return model_passes


def test_a_draft_model_written_off_early_is_probed_under_lookups_and_taken_back():
    """Two rejections at a completion's start left the model's estimate at 0.41 and lookups alone carried the rest
    of the hole (each miss a one-token pass); probes on lookup misses find the model right again."""
    policy = GainPolicy(FrozenCosts(verify_ms=dict(ZEN4_VNNI), draft_ms=13.7), ALL)
    policy.trials["draft"] = [1.46, 3.52]  # where two early rejections left it
    assert policy._choose([1, 2, 3], 1000)[0] == "lookup" and policy.model_k == 0
    model_passes = simulate_lookup_runs(policy, 60, lambda k: k)  # from now on the model is always right
    assert policy.model_probes >= 1 and model_passes and model_passes[0] <= 2 * policy.min_probe_every
    assert len(model_passes) > 20  # taken back: it fills most lookup misses from then on
    assert policy.alpha("draft") > 0.8


def test_a_draft_model_that_stays_wrong_is_probed_with_a_doubling_gap():
    policy = GainPolicy(FrozenCosts(verify_ms=dict(ZEN4_VNNI), draft_ms=13.7), ALL)
    policy.trials["draft"] = [0.0, 10.0]
    model_passes = simulate_lookup_runs(policy, 2000, lambda k: 0)
    assert 3 <= policy.model_probes <= 10 and len(model_passes) <= policy.model_probes
    assert all(b - a >= 2 * policy.min_probe_every for a, b in zip(model_passes[1:], model_passes[2:]))


def test_a_draft_model_that_cannot_pay_is_not_probed_under_lookups():
    policy = GainPolicy(FrozenCosts(verify_ms=dict(AVX2_FP32), draft_ms=432.0), ALL)
    simulate_lookup_runs(policy, 500, lambda k: k)
    assert policy.model_probes == 0


def test_drafting_that_cannot_pay_is_never_tried():
    policy = GainPolicy(FrozenCosts(verify_ms=dict(AVX2_FP32), draft_ms=432.0), ("none", "draft"))
    assert simulate(policy, 500, lambda d, k: k) == [] and policy.probes == 0


def test_review_cuts_a_lookup_draft_to_what_its_source_pays_for():
    costs = FrozenCosts(verify_ms=dict(STEEP))
    policy = GainPolicy(costs, ALL)
    policy.trials["history"] = [0.0, 10.0]  # history drafts are never right
    policy.trials["workspace"] = [9.9, 10.0]
    assert len(policy.review(Draft(tokens=[5] * 8, probs=[None] * 8, source="history")).tokens) == 1
    assert len(policy.review(Draft(tokens=[5] * 8, probs=[None] * 8, source="workspace")).tokens) >= 2
    assert len(policy.review(Draft(tokens=[5] * 8, probs=[None] * 8, source="draft")).tokens) == 8


def test_acceptance_is_kept_per_source():
    policy = GainPolicy(FrozenCosts(verify_ms=dict(FLAT)), ALL)
    for _ in range(20):
        policy.report("lookup", Draft(tokens=[1] * 4, probs=[None] * 4, source="workspace"), 4, 0.1)
        policy.report("lookup", Draft(tokens=[1] * 4, probs=[None] * 4, source="history"), 0, 0.1)
    assert policy.alpha("workspace") > 0.95 and policy.alpha("history") < 0.05
    assert 0.6 < policy.alpha("lookup") < 0.9  # 4 of 5 trials per pair of passes
    assert policy.alpha("draft") == 0.8  # untouched: still its seed
    assert policy.hit_rate() > 0.95


# --- the shadow: the lookup's acceptance measured without verifying its drafts --------------------------------------
# (guesses, tokens written after the proposal so far, expected score: (accepted, tried) or None while undecided)
SHADOW_CASES = [
    ("first guess wrong", [5, 6, 7], [9], (0, 1)),
    ("two right, third wrong", [5, 6, 7], [5, 6, 1], (2, 3)),
    ("all right", [5, 6, 7], [5, 6, 7, 8], (3, 3)),
    ("right so far: undecided", [5, 6, 7], [5, 6], None),
    ("nothing written yet", [5, 6, 7], [], None),
]


@pytest.mark.parametrize("case", SHADOW_CASES, ids=[c[0] for c in SHADOW_CASES])
def test_shadow_scores_a_draft_as_a_verify_pass_would(case):
    _, guesses, written, expected = case
    before = [1, 2, 3, 4]
    shadow = Shadow.of(before, guesses, "prompt")
    assert shadow.same_text(before + written)
    assert shadow.score(before + written) == expected


def test_shadow_of_another_text_is_dropped_uncounted():
    policy = GainPolicy(FrozenCosts(verify_ms=dict(STEEP)), ("none", "lookup"))
    policy.shadow = Shadow.of([1, 2, 3], [9, 9], "prompt")
    before = dict(policy.trials)
    assert not policy.shadow.same_text([4, 5, 6, 9]) and not policy.shadow.same_text([1, 2])
    policy._score_shadow([4, 5, 6, 9, 9])
    assert policy.shadow is None and policy.trials == before and policy.shadow_scored == 0


class TextLookup:
    """A lookup drafter over a known text: "right" proposes what the text says next, "wrong" never does."""

    def __init__(self, text, right):
        self.text, self.right, self.calls = text, right, 0

    def propose(self, tokens, k, cancelled, finishes=None):
        self.calls += 1
        follow = self.text[len(tokens):len(tokens) + k]
        guesses = follow if self.right else [t + 1 for t in follow]
        return Draft(tokens=list(guesses), probs=[None] * len(guesses), source="prompt")


def write_text(policy, text, start, lookup):
    """The loop on a known text (the target writes `text`): returns the passes by drafter."""
    tokens, passes = list(text[:start]), {}
    while len(tokens) < len(text):
        drafter, k = policy.choose(tokens, len(text) - len(tokens) - 1)
        draft = lookup.propose(tokens, k, None) if drafter == "lookup" else Draft()
        accepted = 0
        for guess, actual in zip(draft.tokens, text[len(tokens):]):
            if guess != actual:
                break
            accepted += 1
        policy.report(drafter, draft, accepted, 0.04)
        tokens = text[:len(tokens) + accepted + 1]
        passes[drafter] = passes.get(drafter, 0) + 1
    return passes


def test_a_lookup_that_is_never_right_costs_no_pass_with_the_shadow():
    text = list(range(1000, 1400))
    with_shadow = GainPolicy(FrozenCosts(verify_ms=dict(STEEP)), ("none", "lookup"))
    with_shadow.lookup = TextLookup(text, right=False)
    passes = write_text(with_shadow, text, 20, with_shadow.lookup)
    # The optimistic seed still tries it at first; after that the shadow's evidence keeps it off, with no probes.
    assert passes.get("lookup", 0) <= 3 and with_shadow.probes == 0, passes
    assert with_shadow.shadow_scored > 100 and with_shadow.alpha("prompt") < 0.05
    # Without the shadow the same policy keeps spending probe passes on it.
    blind = GainPolicy(FrozenCosts(verify_ms=dict(STEEP)), ("none", "lookup"))
    blind_passes = write_text(blind, text, 20, TextLookup(text, right=False))
    assert blind.probes > 0 and blind_passes["lookup"] > passes.get("lookup", 0)


def test_a_lookup_that_turns_right_is_found_by_the_shadow_without_probes():
    text = list(range(1000, 1400))
    policy = GainPolicy(FrozenCosts(verify_ms=dict(STEEP)), ("none", "lookup"))
    policy.trials["prompt"] = policy.trials["lookup"] = [0.0, 10.0]  # so far it was never right
    policy.hits = [0.0, 10.0]
    policy.lookup = TextLookup(text, right=True)
    passes = write_text(policy, text, 20, policy.lookup)
    assert policy.probes == 0 and policy.shadow_scored >= 1
    assert passes["lookup"] > passes.get("none", 0), passes  # drafting took over once the shadow saw it right


# --- the auto drafter in the engine: exact, whatever it chooses ----------------------------------------------------
