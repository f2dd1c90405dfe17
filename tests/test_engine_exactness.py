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
    decode_format,
    epsilon_for,
    margin_change,
    pass_rounding,
    reference_greedy,
    uncached_along,
    uncached_greedy,
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
    said = got.describe()  # what a failing test prints: the verdict and where
    assert said.startswith("identical") == got.identical and ("NOT a near tie" in said) == (not got.ok)
    assert got.identical or said.startswith(f"first difference at token {got.first_difference}, gap ")


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
        # The gaps are the target's own top-2 margins, as a pass over the whole sequence computes them too.
        uncached_tokens, uncached_gaps = uncached_greedy(engine.pair.target, prompt, 20, set(STOP_IDS))
        assert tokens == uncached_tokens and gaps == pytest.approx(uncached_gaps, abs=1e-4)


@pytest.mark.parametrize("drafter", ["none", "draft", "lookup", "hybrid"])
def test_fp32_greedy_equals_a_reference_without_any_cache(drafter):
    """The check the real-model test makes (tests/test_real_model.py), on the tiny fp32 pair: the engine's greedy
    output, with each drafter, against uncached_greedy (one pass over the whole sequence per token, nothing kept) and
    against uncached_along (the one-pass form the real-model test uses); in dense fp32 the rule is exact equality."""
    engine = tiny_engine("random")
    compared = 0
    for seed in range(4):
        prompt = random_prompt(seed, repeat=seed % 2 == 1)
        reference, gaps = uncached_greedy(engine.pair.target, prompt, 16, set(STOP_IDS))
        result = engine.complete(CompletionRequest(prompt, 16, drafter=drafter))
        agreement = compare(result.token_ids, reference, gaps, epsilon_for(torch.float32))
        assert agreement.identical, f"seed {seed}: {agreement.describe()}"
        along = compare(result.token_ids, *uncached_along(engine.pair.target, prompt, result.token_ids, 16,
                                                          set(STOP_IDS)), epsilon_for(torch.float32))
        assert along.identical, f"seed {seed}, one pass: {along.describe()}"
        compared += len(reference)
    assert compared >= 32  # the prompts make the target write, not stop at once


def test_the_one_pass_reference_is_the_step_by_step_one_and_finds_a_wrong_token():
    """uncached_along (one pass over prompt + output, what the real-model test affords) gives uncached_greedy's
    tokens and gaps along a right output, and finds where a wrong one departs, or where it stops wrongly."""
    model, stops = tiny_model(2, 0), set(STOP_IDS)
    checked = 0
    for seed in range(6):
        prompt = random_prompt(seed)
        tokens, gaps = uncached_greedy(model, prompt, 16, stops)
        along_tokens, along_gaps = uncached_along(model, prompt, tokens, 16, stops)
        assert along_tokens == tokens and along_gaps == pytest.approx(gaps, abs=1e-4)
        if len(tokens) < 6:
            continue
        wrong = tokens[:5] + [next(t for t in range(len(STOP_IDS), 300) if t != tokens[5])] + tokens[6:]
        verdict = compare(wrong, *uncached_along(model, prompt, wrong, 16, stops), 0.0)
        assert (verdict.ok, verdict.first_difference) == (False, 5)
        short = compare(tokens[:5], *uncached_along(model, prompt, tokens[:5], 16, stops), 0.0)
        assert (short.ok, short.first_difference) == (False, 5)  # it stopped where the target goes on
        checked += 1
    assert checked >= 3


def test_the_uncached_reference_never_uses_the_engines_caches(monkeypatch):
    """Independent by construction: with every cached pass of the engine made to fail, it still decodes, the same."""
    from engine.decode import kvcache

    engine = tiny_engine("none")
    prompt = random_prompt(2)
    expected = uncached_greedy(engine.pair.target, prompt, 12, set(STOP_IDS))

    def refuse(*args, **kwargs):
        raise AssertionError("the reference went through the engine's KV cache")
    monkeypatch.setattr(kvcache.TrackedCache, "forward", refuse)
    monkeypatch.setattr(kvcache.TrackedCache, "extend_to", refuse)
    assert uncached_greedy(engine.pair.target, prompt, 12, set(STOP_IDS)) == expected
    assert uncached_along(engine.pair.target, prompt, expected[0], 12, set(STOP_IDS))[0] == expected[0]
    with pytest.raises(AssertionError, match="KV cache"):
        reference_greedy(engine.pair.target, prompt, 12, set(STOP_IDS))


def test_the_uncached_reference_decodes_quantized_layers_in_their_decode_format():
    """A quantized model's long passes go through a prefill copy of its weights; the reference sets the copies
    aside (decode_format), so its passes over the whole sequence compute what decoding computes, and puts them back
    after."""
    from engine.weights.formats import apply_weight_format
    from engine.weights.quantized import QuantizedLinear, set_prefill_weights

    model = apply_weight_format(copy.deepcopy(tiny_model(2, 0)), "int8", "cpu")
    prompt = random_prompt(3)  # 48 tokens: a pass over it is a prefill-sized one
    without = uncached_greedy(model, prompt, 12, set(STOP_IDS))

    def long_pass():
        with torch.inference_mode():
            return model(input_ids=torch.tensor([prompt]), use_cache=False).logits[0]
    through_kernels = long_pass()
    zeros = {name: torch.zeros(m.out_features, m.in_features) for name, m in model.named_modules()
             if isinstance(m, QuantizedLinear)}
    assert set_prefill_weights(model, zeros) == len(zeros) > 0
    assert (long_pass() - through_kernels).abs().max() > 1.0  # the model's own long passes now use the copies
    assert uncached_greedy(model, prompt, 12, set(STOP_IDS)) == without  # the reference does not
    along_tokens, along_gaps = uncached_along(model, prompt, without[0], 12, set(STOP_IDS))
    assert along_tokens == without[0] and along_gaps == pytest.approx(without[1], abs=1e-3)
    assert (long_pass() - through_kernels).abs().max() > 1.0  # and they are back


def test_the_uncached_reference_on_a_llamacpp_model(tmp_path):
    """A llama.cpp model has no forward without a cache: each step runs on a sequence emptied first. Its batched
    passes round apart from one-token ones (K/V in f16), so the rule is the near-tie one."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pyproject pins it; `make venv`)")
    from engine_helpers import tiny_tokenizer

    from engine.loading.pair import LoadedPair
    from engine.store.config import FimTemplate, ModelSpec, PairSpec
    from engine.testing import write_gguf
    from engine.weights.llamacpp import LlamaCppModel

    model = LlamaCppModel(write_gguf(tiny_model(2, 0), tiny_tokenizer(), tmp_path / "target.gguf"), n_threads=1,
                          n_ctx_per_sequence=512, label="target")
    try:
        fim = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")
        spec = ModelSpec(name="tiny-target", family="tiny", fim=fim, stop_token_ids=STOP_IDS)
        engine = Engine(LoadedPair(spec=PairSpec("tiny", spec, None), target=model, draft=None,
                                   tokenizer=tiny_tokenizer(), device=torch.device("cpu"), dtype=torch.float32,
                                   target_weights="llamacpp"))
        epsilon = epsilon_for(engine.pair.dtype, engine.pair.target_weights)
        assert epsilon == NEAR_TIE_EPSILON
        model.torch_prefill = prefill = object()  # a torch prefill the loader attached where it pays
        with decode_format(model):  # as tests/test_real_model.py runs the engine: in llama.cpp's format alone
            assert model.torch_prefill is None
            for seed in range(3):
                prompt = random_prompt(seed, repeat=True)
                reference, gaps = uncached_greedy(model, prompt, 16, set(STOP_IDS))
                transformers_tokens, transformers_gaps = uncached_greedy(tiny_model(2, 0), prompt, 16, set(STOP_IDS))
                assert compare(reference, transformers_tokens, transformers_gaps, epsilon).ok  # the same weights
                for drafter in ("none", "lookup"):
                    result = engine.complete(CompletionRequest(prompt, 16, drafter=drafter))
                    agreement = compare(result.token_ids, reference, gaps, epsilon)
                    assert agreement.ok, f"seed {seed}, {drafter}: {agreement.describe()}"
                    along = uncached_along(model, prompt, result.token_ids, 16, set(STOP_IDS))
                    assert compare(result.token_ids, *along, epsilon).ok, (seed, drafter)
        assert model.torch_prefill is prefill
        model.torch_prefill = None
        engine.close()
    finally:
        model.close()


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
