"""The target's probability of every token the engine writes (CompletionResult.token_probs), and alternatives that
start from the target's next-best first token (CompletionRequest.first_rank): outputs stay target-alone greedy."""
import pytest
import torch
from engine_helpers import STOP_IDS, random_prompt, reference_greedy, tiny_engine, tiny_model

from engine import CompletionRequest
from engine.decode.sampling import chosen_probs, force_first, ranked_first

MAX_NEW = 16
SEEDS = (3, 5, 8)


@torch.inference_mode()
def reference_probs(model, prompt: list[int], tokens: list[int]) -> list[float]:
    """Each token's softmax probability from a full forward pass without any cache: the ground truth."""
    out, ids = [], list(prompt)
    for token in tokens:
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
        out.append(float(torch.softmax(logits.float(), dim=-1)[token]))
        ids.append(token)
    return out


@torch.inference_mode()
def reference_alternative(model, prompt: list[int], rank: int) -> list[int]:
    """The (rank+1)-th most likely first token, then target-alone greedy, without any cache."""
    logits = model(input_ids=torch.tensor([prompt]), use_cache=False).logits[0, -1]
    first = int(torch.topk(logits, rank + 1).indices[rank])
    if first in STOP_IDS:
        return []
    return [first] + reference_greedy(model, prompt + [first], MAX_NEW - 1)


@pytest.fixture(scope="module")
def engine():
    return tiny_engine("random")


@pytest.mark.parametrize("drafter,k", [("none", 1), ("draft", 4), ("lookup", 2), ("hybrid", 8)])
def test_token_probs_are_the_targets_and_outputs_stay_target_alone(engine, drafter, k):
    target = tiny_model(2, 0)
    for seed in SEEDS:
        prompt = random_prompt(seed, repeat=True)
        result = engine.complete(CompletionRequest(prompt, MAX_NEW, drafter=drafter, max_draft_tokens=k,
                                                   adaptive_k=False))
        assert result.token_ids == reference_greedy(target, prompt, MAX_NEW)
        assert len(result.token_probs) == len(result.token_ids) > 0
        assert result.token_probs == pytest.approx(reference_probs(target, prompt, result.token_ids), abs=1e-4)
        assert all(0.0 < p <= 1.0 for p in result.token_probs)


@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize("drafter", ["none", "draft"])
def test_first_rank_starts_from_the_next_best_token_then_continues_greedily(engine, rank, drafter):
    target = tiny_model(2, 0)
    for seed in SEEDS:
        prompt = random_prompt(seed)
        result = engine.complete(CompletionRequest(prompt, MAX_NEW, drafter=drafter, first_rank=rank))
        assert result.token_ids == reference_alternative(target, prompt, rank)
        greedy = reference_greedy(target, prompt, MAX_NEW)
        if result.token_ids:
            assert result.token_ids[0] != greedy[0]
            # the reported probability is the target's own, not the forced 1.0
            assert result.token_probs == pytest.approx(reference_probs(target, prompt, result.token_ids), abs=1e-4)
            assert result.token_probs[0] < 0.999


def test_an_alternative_leaves_the_session_cache_consistent(engine):
    """After an alternative in a session, the greedy request for the same prompt is still target alone's."""
    target = tiny_model(2, 0)
    prompt = random_prompt(11)
    engine.complete(CompletionRequest(prompt, MAX_NEW, session="alt", first_rank=1))
    again = engine.complete(CompletionRequest(prompt, MAX_NEW, session="alt", drafter="draft"))
    assert again.token_ids == reference_greedy(target, prompt, MAX_NEW)
    assert again.stats.reused_prompt_tokens == len(prompt) - 1


def test_ranked_first_force_first_and_chosen_probs():
    logits = torch.tensor([[0.0, 3.0, 1.0, float("-inf")], [2.0, 0.0, 0.0, 0.0]])
    assert [ranked_first(logits, r) for r in range(5)] == [1, 2, 0, None, None]  # -inf is not a choice
    forced = force_first(logits, 2)
    assert int(torch.argmax(forced[0])) == 2 and torch.equal(forced[1], logits[1])
    assert torch.equal(logits[0], torch.tensor([0.0, 3.0, 1.0, float("-inf")]))  # the input is left alone
    expected = [float(torch.softmax(logits[0], -1)[1]), float(torch.softmax(logits[1], -1)[0])]
    assert chosen_probs(logits, [1, 0]) == pytest.approx(expected)
    assert chosen_probs(logits, []) == []
