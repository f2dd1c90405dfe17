"""The lossless rule of engine/testing/exactness.py: exact in fp32; elsewhere identical up to a first difference that
must sit at a near tie of the target alone."""
import copy

import pytest
import torch
from engine_helpers import STOP_IDS, random_prompt, tiny_engine, tiny_model, tiny_pair

from engine import CompletionRequest, Engine
from engine.testing.exactness import (
    NEAR_TIE_EPSILON,
    compare,
    epsilon_for,
    margin_change,
    pass_rounding,
    reference_greedy,
)

# (candidate, reference, gaps, epsilon) -> (ok, identical, first_difference, near_ties)
COMPARE_CASES = [
    ("identical", [5, 6, 7], [5, 6, 7], [2.0, 0.1, 3.0], 0.5, (True, True, None, [1])),
    ("identical, exact rule", [5, 6, 7], [5, 6, 7], [2.0, 0.1, 3.0], 0.0, (True, True, None, [])),
    ("differs at a near tie", [5, 9, 1], [5, 6, 7], [2.0, 0.1, 3.0], 0.5, (True, False, 1, [1])),
    ("differs where the target was sure", [5, 6, 9], [5, 6, 7], [2.0, 0.1, 3.0], 0.5, (False, False, 2, [1])),
    ("differs at a tie, exact rule", [5, 9], [5, 6], [2.0, 0.1], 0.0, (False, False, 1, [])),
    ("later near ties are not compared", [9, 6, 7], [5, 6, 7], [0.2, 0.1, 0.1], 0.5, (True, False, 0, [0])),
    ("candidate stops early", [5], [5, 6], [2.0, 3.0], 0.5, (False, False, 1, [])),
    ("candidate runs past the target's stop token", [5, 6], [5], [2.0, 0.3], 0.5, (True, False, 1, [1])),
]


@pytest.mark.parametrize("name,candidate,reference,gaps,epsilon,expected", COMPARE_CASES,
                         ids=[case[0] for case in COMPARE_CASES])
def test_compare(name, candidate, reference, gaps, epsilon, expected):
    got = compare(candidate, reference, gaps, epsilon)
    assert (got.ok, got.identical, got.first_difference, got.near_ties) == expected
    assert got.describe()


def test_epsilon_is_zero_only_for_dense_fp32():
    assert epsilon_for(torch.float32) == 0.0
    assert epsilon_for(torch.bfloat16) == NEAR_TIE_EPSILON
    assert epsilon_for(torch.float32, "int8") == NEAR_TIE_EPSILON


def test_reference_is_the_engines_target_alone():
    engine = tiny_engine("random")
    for seed in range(3):
        prompt = random_prompt(seed)
        tokens, gaps = reference_greedy(engine.pair.target, prompt, 20, set(STOP_IDS))
        plain = engine.complete(CompletionRequest(prompt, 20, drafter="none"))
        assert tokens == plain.token_ids
        assert len(gaps) == len(tokens) + (plain.finish_reason == "eos")
        assert all(gap >= 0 for gap in gaps)


@pytest.mark.parametrize("drafter", ["draft", "lookup", "hybrid"])
def test_fp32_speculation_is_exact(drafter):
    engine = tiny_engine("random")
    for seed in range(3):
        prompt = random_prompt(seed, repeat=True)
        reference, gaps = reference_greedy(engine.pair.target, prompt, 24, set(STOP_IDS))
        result = engine.complete(CompletionRequest(prompt, 24, drafter=drafter))
        agreement = compare(result.token_ids, reference, gaps, epsilon_for(torch.float32))
        assert agreement.identical, agreement.describe()


def test_bf16_speculation_keeps_the_rule():
    """In bf16 the verify pass may round differently; whatever differs must be at a near tie."""
    pair = tiny_pair("random")
    pair.target, pair.draft = (copy.deepcopy(tiny_model(2, 0)).to(torch.bfloat16),
                               copy.deepcopy(tiny_model(1, 1)).to(torch.bfloat16))
    pair.dtype = torch.bfloat16
    engine = Engine(pair)
    for seed in range(4):
        prompt = random_prompt(seed, repeat=True)
        reference, gaps = reference_greedy(pair.target, prompt, 24, set(STOP_IDS))
        result = engine.complete(CompletionRequest(prompt, 24, drafter="hybrid"))
        agreement = compare(result.token_ids, reference, gaps, epsilon_for(torch.bfloat16))
        assert agreement.ok, agreement.describe()


def test_the_demo_judges_by_the_lossless_rule():
    """`make demo` (engine/testing/demo.py) passes a run that differs from the target alone only where the rule allows
    it; in fp32 with dense weights that is nowhere."""
    from engine.testing.demo import lossless

    engine = tiny_engine("random")
    ids = random_prompt(4)
    plain = engine.complete(CompletionRequest(ids, 12, drafter="none")).token_ids
    spec = engine.complete(CompletionRequest(ids, 12, drafter="draft")).token_ids
    assert lossless(engine, ids, plain, spec).ok and lossless(engine, ids, plain, spec).identical
    other = plain[:3] + [(plain[3] + 1) % 200 + len(STOP_IDS)] + plain[4:]
    verdict = lossless(engine, ids, plain, other)
    assert not verdict.ok and verdict.first_difference == 3 and verdict.gap_there > 0



@pytest.mark.parametrize("drafter", ["none", "auto"])
def test_the_demo_times_a_prompt_made_ready_first(drafter):
    """`make demo` times the completion of a prompt the engine made ready beforehand, as the server completes where
    the cursor rests: the same tokens as a cold completion, the prompt's prefill timed apart, and the session
    forgotten after so the next run starts from the same state."""
    from engine.testing.demo import MAX_NEW_TOKENS, complete_ready

    engine = tiny_engine("random")
    ids = random_prompt(6, repeat=True)
    cold = engine.complete(CompletionRequest(ids, MAX_NEW_TOKENS, drafter=drafter))
    result, seconds, ready = complete_ready(engine, ids, drafter)
    assert result.token_ids == cold.token_ids
    assert result.stats.new_prompt_tokens == 0 and result.stats.reused_prompt_tokens > 0  # no prefill in the timing
    assert seconds > 0 and ready > 0
    assert f"demo:{drafter}" not in engine.sessions

def test_pass_rounding_is_nil_in_fp32():
    ids = random_prompt(5)
    assert pass_rounding(tiny_model(2, 0), ids[:-4], ids[-4:]) < 1e-4


ALONE = [[5.0, 4.0, 1.0, 0.0, -9.0]]


@pytest.mark.parametrize("name,together,contenders,expected", [
    ("the same logits", ALONE, 2, 0.0),
    ("a shift common to every logit", [[8.0, 7.0, 4.0, 3.0, -6.0]], 2, 0.0),
    ("the runner-up closes in", [[5.0, 4.3, 1.0, 0.0, -9.0]], 2, 0.3),
    ("the best token drops", [[4.6, 4.0, 1.0, 0.0, -9.0]], 2, 0.4),
    ("a token below the contenders moves", [[5.0, 4.0, 1.0, 0.0, -4.0]], 2, 0.0),
    ("... and counts once it is one", [[5.0, 4.0, 1.0, 0.0, -4.0]], 4, 5.0),
])
def test_margin_change(name, together, contenders, expected):
    got = margin_change(torch.tensor(ALONE), torch.tensor(together), contenders)
    assert got == pytest.approx(expected, abs=1e-6), name
