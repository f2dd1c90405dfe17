"""Greedy speculative decoding must equal target-alone greedy decoding token for token (fp32, tiny models)."""
import pytest
from engine_helpers import (
    STOP_IDS,
    ReferenceDrafter,
    random_prompt,
    reference_greedy,
    tiny_engine,
    tiny_model,
    tiny_tokenizer,
)

from engine import CancelToken, CompletionRequest
from engine.decode.kvcache import TrackedCache
from engine.decode.speculative import SpeculationController, generate

MAX_NEW = 24


@pytest.fixture(scope="module")
def engines():
    return {"random": tiny_engine("random"), "same": tiny_engine("same")}


@pytest.fixture(scope="module")
def references():
    """Target-alone outputs for prompts picked so the set holds long runs (which must match for MAX_NEW tokens) and
    one that ends on a stop token (so the eos path is compared too)."""
    target = tiny_model(2, 0)
    picked, stopped_early = {}, None
    for seed in range(1, 200):
        for repeat in (False, True):
            ref = reference_greedy(target, random_prompt(seed, repeat=repeat), MAX_NEW)
            if len(ref) == MAX_NEW and sum(r == repeat and key != stopped_early for key in picked for r in [key[1]]) < 2:
                picked[(seed, repeat)] = ref
            elif 4 <= len(ref) < MAX_NEW and stopped_early is None:
                stopped_early = (seed, repeat)
                picked[stopped_early] = ref
        if len(picked) == 5:
            return picked
    raise AssertionError("no suitable prompts")


def test_references_cover_long_runs_and_an_early_stop(references):
    lengths = sorted(len(ref) for ref in references.values())
    assert lengths[0] < MAX_NEW and lengths[1:] == [MAX_NEW] * 4


def test_own_loop_without_drafts_is_target_alone(engines, references):
    for (seed, repeat), ref in references.items():
        result = engines["random"].complete(CompletionRequest(random_prompt(seed, repeat=repeat), MAX_NEW,
                                                              drafter="none"))
        assert result.token_ids == ref
        assert result.stats.drafted == 0
        assert result.stats.target_passes == len(ref) + (result.finish_reason == "eos")
        # The first token's time and count (what decode speed is counted after, as llama.cpp counts its own).
        stats = result.stats
        assert stats.first_pass_tokens == 1 and stats.produced == stats.target_passes
        assert stats.seconds_prefill < stats.seconds_first_token <= stats.seconds_total


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("drafter,draft_model", [("draft", "random"), ("draft", "same"), ("lookup", "random"),
                                                 ("hybrid", "random"), ("hybrid", "same")])
def test_every_drafter_and_k_equals_target_alone(engines, references, drafter, draft_model, k):
    engine = engines[draft_model]
    for (seed, repeat), ref in references.items():
        request = CompletionRequest(random_prompt(seed, repeat=repeat), MAX_NEW, drafter=drafter,
                                    max_draft_tokens=k, adaptive_k=False)
        result = engine.complete(request)
        assert result.token_ids == ref, (drafter, draft_model, k, seed, repeat)
        assert result.text == tiny_tokenizer().decode(ref, skip_special_tokens=True)


def test_a_draft_model_equal_to_the_target_is_always_accepted(engines, references):
    (seed, repeat), ref = max(references.items(), key=lambda item: len(item[1]))
    result = engines["same"].complete(CompletionRequest(random_prompt(seed, repeat=repeat), MAX_NEW, drafter="draft",
                                                        max_draft_tokens=4, adaptive_k=False))
    assert result.token_ids == ref
    assert result.stats.drafted > 0 and result.stats.accepted == result.stats.drafted
    assert result.stats.mean_accepted > 3.0  # K=4 accepted + the bonus token on most passes
    assert result.stats.first_pass_tokens == 5  # the first pass, too, kept its 4 drafts and the bonus token
    assert result.stats.target_passes < len(ref)


def test_lookup_drafts_hit_on_repetitive_prompts(engines):
    prompt = random_prompt(3, repeat=True)
    result = engines["random"].complete(CompletionRequest(prompt, MAX_NEW, drafter="lookup"))
    assert result.stats.drafted > 0


@pytest.mark.parametrize("mode", ["right", "wrong", "random"])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_always_right_always_wrong_and_random_drafters(references, mode, k):
    target = tiny_model(2, 0)
    for (seed, repeat), ref in references.items():
        request = CompletionRequest(random_prompt(seed, repeat=repeat), MAX_NEW, max_draft_tokens=k, adaptive_k=False)
        controller = SpeculationController(max_k=k, adaptive=False)
        result = generate(TrackedCache(target), ReferenceDrafter(target, mode, seed), controller, request,
                          lambda ids: "", set(STOP_IDS))
        assert result.token_ids == ref, (mode, k, seed)
        if mode == "wrong":
            assert result.stats.accepted == 0 and result.stats.drafted > 0
        if mode == "right":
            assert result.stats.accepted == result.stats.drafted > 0


def test_max_new_tokens_and_stop_predicate(engines, references):
    (seed, repeat), ref = max(references.items(), key=lambda item: len(item[1]))
    prompt = random_prompt(seed, repeat=repeat)
    engine = engines["same"]
    short = engine.complete(CompletionRequest(prompt, 5, drafter="draft", max_draft_tokens=8))
    assert short.token_ids == ref[:5] and short.finish_reason == "length"
    seen = []

    def stop_on_seventh_call(text):  # drafter "none" yields one token a pass, so one call per token
        seen.append(text)
        return len(seen) == 7

    stopped = engine.complete(CompletionRequest(prompt, MAX_NEW, drafter="none", stop=stop_on_seventh_call))
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == ref[:7]
    assert seen[-1] == stopped.text == tiny_tokenizer().decode(ref[:7], skip_special_tokens=True)


@pytest.mark.parametrize("drafter", ["draft", "auto"])
def test_a_stop_predicate_ends_every_drafter_where_target_alone_ends(engines, references, drafter):
    """A pass that keeps several drafts commits them token by token, as target alone does; and a draft ends at the
    token that finishes the completion: the target does not score what would be thrown away."""
    (seed, repeat), ref = max(references.items(), key=lambda item: len(item[1]))
    prompt = random_prompt(seed, repeat=repeat)
    decode = tiny_tokenizer().decode
    finished_text = decode(ref[:7], skip_special_tokens=True)
    end = next(n for n in range(1, len(ref) + 1) if decode(ref[:n], skip_special_tokens=True).startswith(finished_text))

    def stop(text):
        return text.startswith(finished_text)
    alone = engines["same"].complete(CompletionRequest(prompt, MAX_NEW, drafter="none", stop=stop))
    assert alone.token_ids == ref[:end] and alone.finish_reason == "stop"
    spec = engines["same"].complete(CompletionRequest(prompt, MAX_NEW, drafter=drafter, max_draft_tokens=8,
                                                      adaptive_k=False, stop=stop))
    assert spec.token_ids == alone.token_ids and spec.text == alone.text and spec.finish_reason == "stop"
    if drafter == "draft":  # the draft model is the target here: every draft is right, the first pass drafts 8
        # ... but the draft model stops at the finishing token: no pass is spent on what would be thrown away.
        assert spec.stats.target_passes == 1 and spec.stats.drafted == end and spec.stats.draft_passes == end


def test_cancel_before_start_returns_cancelled_without_tokens(engines):
    token = CancelToken()
    token.set()
    result = engines["random"].complete(CompletionRequest(random_prompt(1), MAX_NEW), token)
    assert result.finish_reason == "cancelled" and result.token_ids == []


# --- lookup drafts from the workspace index (open documents, earlier completions) --------------------------------
def test_workspace_drafts_equal_target_alone_whether_right_or_wrong(references):
    for drafter in ("lookup", "auto"):
        for truth in ("right", "wrong"):
            engine = tiny_engine("random")
            for (seed, repeat), ref in references.items():
                prompt = random_prompt(seed, repeat=repeat)
                # Another open file holds the prompt's last tokens and then the answer (or a wrong one).
                follow = ref if truth == "right" else [(t + 1) % 384 or 9 for t in ref]
                engine.workspace.add(f"file:///other{seed}.py", prompt[-10:] + follow)
                result = engine.complete(CompletionRequest(prompt, MAX_NEW, drafter=drafter))
                assert result.token_ids == ref, (drafter, truth, seed, repeat)
                if drafter == "lookup" and truth == "right" and not repeat:
                    assert result.stats.drafted_by_source.get("workspace", 0) >= len(ref) // 2
                    assert result.stats.accepted_by_source["workspace"] == result.stats.drafted_by_source["workspace"]
                if drafter == "lookup" and truth == "wrong" and not repeat:
                    assert result.stats.drafted_by_source.get("workspace", 0) > 0
                    assert result.stats.accepted_by_source["workspace"] == 0


def test_a_sessions_earlier_completions_become_history_drafts(references):
    engine = tiny_engine("random")
    (seed, repeat), ref = max(((key, ref) for key, ref in references.items() if not key[1]), key=lambda kv: len(kv[1]))
    prompt = random_prompt(seed, repeat=repeat)
    first = engine.complete(CompletionRequest(prompt, MAX_NEW, session="doc", drafter="lookup"))
    assert first.token_ids == ref and "history" not in first.stats.drafted_by_source
    assert engine.workspace.tokens("history:doc")[-len(ref):] == ref
    again = engine.complete(CompletionRequest(prompt, MAX_NEW, session="doc", drafter="lookup"))
    assert again.token_ids == ref
    accepted = again.stats.accepted_by_source["history"]
    assert accepted == again.stats.drafted_by_source["history"] >= len(ref) - again.stats.target_passes
    assert len(ref) == MAX_NEW and again.stats.target_passes < len(ref) // 2


def test_update_workspace_tokenizes_replaces_and_removes():
    engine = tiny_engine("none")
    engine.update_workspace("file:///a.py", "def add(a, b):\n    return a + b\n")
    assert engine.workspace.tokens("file:///a.py") == engine.encode("def add(a, b):\n    return a + b\n")
    engine.update_workspace("file:///a.py", "x = 1\n")
    assert engine.workspace.tokens("file:///a.py") == engine.encode("x = 1\n")
    engine.update_workspace("file:///a.py", None)
    assert "file:///a.py" not in engine.workspace
    engine.update_workspace("file:///never-opened.py", None)  # removing an unknown document is fine
