"""The int8 weight format: close to the float model, and a quantized draft keeps speculation exact."""
import torch
from engine_helpers import random_prompt, reference_greedy, tiny_model, tiny_pair

from engine import CompletionRequest, Engine
from engine.testing import build_tiny_model
from engine.weights.formats import apply_weight_format, quantize_int8
from engine.weights.quantized import Int8Linear


def test_int8_linear_matches_the_float_layer_within_quantization_error():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32, bias=True)
    q = Int8Linear(linear)
    x = torch.randn(5, 7, 64)
    with torch.no_grad():
        expected = linear(x)
        got = q(x)
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=0.05 * float(expected.abs().max()))
    assert not torch.equal(got, expected)  # it really is the int8 path
    assert q.weight_int8.dtype == torch.int8


def test_quantize_int8_replaces_every_linear_and_keeps_predictions():
    model = build_tiny_model(384, 1, seed=3)
    ids = torch.tensor([random_prompt(3)])
    with torch.inference_mode():
        before = model(input_ids=ids).logits
        quantize_int8(model)
        after = model(input_ids=ids).logits
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert (before.argmax(-1) == after.argmax(-1)).float().mean() > 0.9


def test_unknown_weight_format_is_a_clear_error():
    try:
        apply_weight_format(build_tiny_model(384, 1, seed=3), "int3", "cpu")
    except ValueError as exc:
        assert "int3" in str(exc) and "int8" in str(exc)
    else:
        raise AssertionError("no error")


def test_an_int8_copy_of_the_target_as_draft_is_mostly_accepted_and_output_is_exact():
    pair = tiny_pair("none")
    draft = build_tiny_model(384, 2, seed=0)  # the target's weights (same seed), then quantized
    pair.draft = quantize_int8(draft)
    pair.spec = type(pair.spec)(pair.spec.name, pair.spec.target, pair.spec.target)
    prompt = random_prompt(4)
    result = Engine(pair).complete(CompletionRequest(prompt, 24, drafter="draft", max_draft_tokens=4,
                                                     adaptive_k=False))
    assert result.token_ids == reference_greedy(tiny_model(2, 0), prompt, 24)
    assert result.stats.accepted >= 0.7 * result.stats.drafted > 0
