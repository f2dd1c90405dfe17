"""Speculative sampling must keep the target's distribution exactly (Leviathan/Chen rejection rule).

On a 6-token vocabulary the exact joint distribution of the first two generated tokens is computed from the
target's logits; thousands of seeded speculative runs are compared with it by a chi-square test. The same test run
with two plausible but wrong rules must fail, which shows the test has the power to catch a broken rule.
"""
import math

import pytest
import torch

import engine.decode.speculative as speculative
from engine import CompletionRequest
from engine.decode.drafters import LookupDrafter, ModelDrafter
from engine.decode.kvcache import TrackedCache
from engine.decode.sampling import first_argmax, sample, warp
from engine.decode.speculative import SpeculationController, generate
from engine.testing import build_tiny_model

VOCAB = 6
SAMPLES = 2500
PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]  # repeats, so the lookup drafter proposes too
EXTENDED: dict[str, int] = {}  # extension tokens drafted, by drafter kind


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(1)
    return build_tiny_model(VOCAB, 1, seed=5, hidden=32), build_tiny_model(VOCAB, 1, seed=6, hidden=32)


@torch.inference_mode()
def exact_joint(target, temperature, top_p, length: int = 2) -> dict[tuple[int, ...], float]:
    def next_probs(ids):
        return warp(target(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1], temperature, top_p)

    joint = {(): 1.0}
    for _ in range(length):
        joint = {seq + (token,): p_seq * float(p_token) for seq, p_seq in joint.items()
                 for token, p_token in enumerate(next_probs(PROMPT + list(seq)))}
    return joint


@torch.inference_mode()
def sampled_counts(target, draft, drafter_kind, temperature, top_p, length: int = 2) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, int], int] = {}
    target_cache, draft_cache = TrackedCache(target), TrackedCache(draft)
    for seed in range(SAMPLES):
        request = CompletionRequest(PROMPT, max_new_tokens=length, temperature=temperature, top_p=top_p, seed=seed)
        if drafter_kind in ("draft", "extended"):
            # extended: after each sampled draft token, a 2-token match in the repeating prompt appends what
            # followed it, deterministically (q one-hot there).
            extend = LookupDrafter(max_ngram=2, min_ngram=2) if drafter_kind == "extended" else None
            drafter = ModelDrafter(draft, draft_cache, temperature, top_p,
                                   torch.Generator().manual_seed(10**6 + seed), min_confidence=0.0, extend=extend)
        else:
            drafter = LookupDrafter(max_ngram=3, min_ngram=1)
        result = generate(target_cache, drafter, SpeculationController(max_k=3, adaptive=False), request,
                          lambda ids: "", stop_token_ids=set())
        EXTENDED[drafter_kind] = EXTENDED.get(drafter_kind, 0) + result.stats.drafted_by_source.get("extension", 0)
        key = tuple(result.token_ids)
        counts[key] = counts.get(key, 0) + 1
    return counts


def chi_square(counts, probs) -> tuple[float, float]:
    """Chi-square statistic (bins with expected count < 5 merged) and its 0.1 % critical value."""
    stat, merged_obs, merged_exp, bins = 0.0, 0, 0.0, 0
    for outcome, p in probs.items():
        expected, observed = p * SAMPLES, counts.get(outcome, 0)
        if expected < 5:
            merged_obs, merged_exp = merged_obs + observed, merged_exp + expected
            continue
        stat += (observed - expected) ** 2 / expected
        bins += 1
    if merged_exp > 0:
        stat += (merged_obs - merged_exp) ** 2 / merged_exp
        bins += 1
    df = bins - 1
    z = 3.090  # 99.9 % normal quantile; Wilson-Hilferty approximation of the chi-square quantile
    critical = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return stat, critical


@pytest.mark.parametrize("drafter_kind,temperature,top_p", [("draft", 1.0, 1.0), ("draft", 0.7, 0.9),
                                                            ("lookup", 1.0, 1.0), ("extended", 1.0, 1.0)])
def test_speculative_sampling_matches_the_target_distribution(models, drafter_kind, temperature, top_p):
    target, draft = models
    # Three tokens for the extension: K = 2 leaves room for one model token and one from the lookup.
    length = 3 if drafter_kind == "extended" else 2
    probs = exact_joint(target, temperature, top_p, length)
    counts = sampled_counts(target, draft, drafter_kind, temperature, top_p, length)
    assert sum(counts.values()) == SAMPLES
    if drafter_kind == "extended":
        assert EXTENDED["extended"] > SAMPLES // 10
    stat, critical = chi_square(counts, probs)
    assert stat < critical, (stat, critical)


def accept_everything(target_logits, drafted, draft_probs, temperature, top_p, generator):
    p = warp(target_logits, temperature, top_p)
    return len(drafted), sample(p[len(drafted)], generator)


def resample_from_p_on_reject(target_logits, drafted, draft_probs, temperature, top_p, generator):
    p = warp(target_logits, temperature, top_p)
    for i, token in enumerate(drafted):
        q_x = float(draft_probs[i][token])
        if float(torch.rand((), generator=generator)) < min(1.0, float(p[i][token]) / q_x):
            continue
        return i, sample(p[i], generator)  # wrong: must sample from norm(max(0, p - q))
    return len(drafted), sample(p[len(drafted)], generator)


@pytest.mark.parametrize("wrong_rule", [accept_everything, resample_from_p_on_reject])
def test_a_wrong_rule_fails_the_same_test(models, monkeypatch, wrong_rule):
    target, draft = models
    monkeypatch.setattr(speculative, "accept_sampled", wrong_rule)
    probs = exact_joint(target, 1.0, 1.0)
    stat, critical = chi_square(sampled_counts(target, draft, "draft", 1.0, 1.0), probs)
    assert stat > critical, (stat, critical)


def test_warp_top_p_keeps_the_smallest_set_reaching_p():
    probs = warp(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])), 1.0, 0.8)
    assert torch.allclose(probs, torch.tensor([0.5, 0.3, 0.0, 0.0]) / 0.8)
    assert torch.allclose(warp(torch.log(torch.tensor([0.9, 0.1])), 1.0, 0.5), torch.tensor([1.0, 0.0]))


def test_a_draft_with_a_narrower_output_layer_is_padded_to_the_target():
    """7B target (152,064 outputs) with the 0.5B draft (151,936): the ids only the target has get q = 0, so a
    rejection samples them from the residual like any other id."""
    from engine.decode.sampling import accept_sampled

    target_logits = torch.full((2, 10), -1e9)
    target_logits[:, 9] = 0.0  # the target only ever says id 9, which the 8-wide draft cannot express
    q = torch.zeros(8)
    q[0] = 1.0
    n, token = accept_sampled(target_logits, [0], [q], 1.0, 1.0, torch.Generator().manual_seed(0))
    assert (n, token) == (0, 9)


def _row(width: int, **at) -> torch.Tensor:
    row = torch.randn(width, generator=torch.Generator().manual_seed(width))
    for index, value in at.items():
        row[int(index[1:])] = value
    return row


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("row", [
    _row(151_936),
    _row(151_936, i5000=50.0, i90000=50.0),  # a tie far apart: the first
    _row(151_936, i2373=9.0, i2374=9.0),  # a tie across two chunks' edge
    _row(151_936, i100=9.0, i101=9.0),  # a tie inside one chunk
    _row(151_936, i151935=60.0),  # the last index
    _row(151_936, i700=NAN, i100000=NAN, i5=INF),  # NaN wins, the first one
    _row(151_936, i3=INF, i77777=INF),
    torch.full((151_936,), -INF),  # nothing finite: index 0, as torch says
    _row(152_064, i152063=70.0),  # another family's width
    _row(1_000, i999=5.0),  # not a multiple of the chunks: torch's own argmax
    _row(64, i1=5.0),
])
def test_first_argmax_is_torch_argmax(row):
    assert first_argmax(row) == [int(torch.argmax(row))]
    rows = torch.stack([row, row.flip(0), row.roll(1)])
    assert first_argmax(rows) == torch.argmax(rows, dim=-1).tolist()
    assert first_argmax(rows.to(torch.bfloat16)) == torch.argmax(rows.to(torch.bfloat16), dim=-1).tolist()
    assert first_argmax(rows[None]) == torch.argmax(rows, dim=-1).tolist()  # [1, rows, width]: one per row
