"""KV prefix reuse across requests of one session, cancellation, and adaptive speculation."""
import threading

from engine_helpers import random_prompt, reference_greedy, tiny_engine, tiny_model

from engine import CancelToken, CompletionRequest
from engine.decode.speculative import SpeculationController
from engine.weights.prefill_plan import common_prefix_length

MAX_NEW = 16


def test_common_prefix_length():
    cases = [([], [], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2), ([1, 2], [1, 2, 3], 2),
             ([1, 2, 3, 4], [1, 2, 9, 4], 2), ([5], [6], 0), (list(range(1000)), list(range(999)) + [0], 999)]
    for a, b, expected in cases:
        assert common_prefix_length(a, b) == expected


def test_second_request_reuses_the_shared_prefix_and_matches_a_cold_run():
    engine = tiny_engine("random")
    first = random_prompt(11, length=80)
    # The user typed a few tokens at the end: the new prompt shares the first 80 tokens.
    second = first + random_prompt(12, length=5)
    engine.complete(CompletionRequest(first, MAX_NEW, session="doc", drafter="hybrid"))
    warm = engine.complete(CompletionRequest(second, MAX_NEW, session="doc", drafter="hybrid"))
    cold = tiny_engine("random").complete(CompletionRequest(second, MAX_NEW, drafter="hybrid"))
    assert warm.token_ids == cold.token_ids == reference_greedy(tiny_model(2, 0), second, MAX_NEW)
    assert warm.stats.reused_prompt_tokens >= 79  # everything the first prompt's cache had in common
    assert warm.stats.new_prompt_tokens == len(second) - 1 - warm.stats.reused_prompt_tokens
    assert cold.stats.reused_prompt_tokens == 0 and cold.stats.new_prompt_tokens == len(second) - 1


def test_an_edit_in_the_middle_reuses_only_up_to_the_edit():
    engine = tiny_engine("random")
    prompt = random_prompt(13, length=60)
    engine.complete(CompletionRequest(prompt, MAX_NEW, session="doc"))
    edited = prompt[:30] + [prompt[30] + 1 if prompt[30] + 1 < 384 else 9] + prompt[31:]
    result = engine.complete(CompletionRequest(edited, MAX_NEW, session="doc"))
    assert result.stats.reused_prompt_tokens == 30
    assert result.token_ids == reference_greedy(tiny_model(2, 0), edited, MAX_NEW)


def test_sessions_are_separate():
    engine = tiny_engine("random")
    a, b = random_prompt(14), random_prompt(15)
    engine.complete(CompletionRequest(a, MAX_NEW, session="a"))
    result = engine.complete(CompletionRequest(b, MAX_NEW, session="b"))
    assert result.stats.reused_prompt_tokens == 0
    again = engine.complete(CompletionRequest(a, MAX_NEW, session="a"))
    assert again.stats.reused_prompt_tokens == len(a) - 1


def test_cancel_mid_generation_then_the_next_request_is_still_exact():
    engine = tiny_engine("same")
    prompt = random_prompt(16, length=40)
    token = CancelToken()
    produced = []

    def cancel_after_first_pass(ids, text):
        produced.append(len(ids))
        token.set()

    result = engine.complete(CompletionRequest(prompt, 64, session="doc", drafter="draft"), token,
                             cancel_after_first_pass)
    assert result.finish_reason == "cancelled"
    assert len(produced) == 1 and 0 < len(result.token_ids) < 64  # stopped within one speculative step
    reference = reference_greedy(tiny_model(2, 0), prompt, MAX_NEW)
    assert result.token_ids == reference[:len(result.token_ids)]
    after = engine.complete(CompletionRequest(prompt, MAX_NEW, session="doc", drafter="draft"))
    assert after.token_ids == reference
    assert after.stats.reused_prompt_tokens == len(prompt) - 1


def test_cancel_from_another_thread_through_submit():
    engine = tiny_engine("random")
    token = CancelToken()
    started = threading.Event()

    def slow_consumer(ids, text):  # lets the other thread cancel while generation runs
        started.set()
        threading.Event().wait(0.01)

    future = engine.submit(CompletionRequest(random_prompt(17), 4000, session="doc", drafter="none"), token,
                           slow_consumer)
    assert started.wait(30)
    token.set()
    result = future.result(timeout=30)
    assert result.finish_reason == "cancelled" and len(result.token_ids) < 4000
    follow_up = engine.submit(CompletionRequest(random_prompt(17), MAX_NEW, session="doc")).result(timeout=30)
    assert follow_up.token_ids == reference_greedy(tiny_model(2, 0), random_prompt(17), MAX_NEW)


def test_controller_grows_k_on_full_acceptance_and_shrinks_on_rejection():
    c = SpeculationController(max_k=8, k=4)
    c.update(drafted=4, accepted=4)
    assert c.next_k(100) == 6
    c.update(drafted=6, accepted=6)
    assert c.next_k(100) == 8
    c.update(drafted=8, accepted=2)
    assert c.next_k(100) == 7
    assert c.next_k(3) == 3  # never drafts past the tokens still allowed


def test_controller_switches_speculation_off_when_acceptance_collapses_and_back_on():
    c = SpeculationController(max_k=8, k=4, probe_every=4)
    for _ in range(8):
        c.update(drafted=c.next_k(100), accepted=0)
    assert not c.enabled
    ks = [c.next_k(100) for _ in range(8)]
    assert ks.count(0) == 6 and ks.count(2) == 2  # plain target steps, with an occasional small probe
    for _ in range(12):
        c.update(drafted=2, accepted=2)  # probes come back fully accepted
    assert c.enabled and c.next_k(100) >= 1


def test_collapsed_acceptance_turns_drafting_off_in_a_real_run():
    engine = tiny_engine("random")  # an unrelated draft model: almost nothing is accepted
    result = engine.complete(CompletionRequest(random_prompt(18), 40, session="doc", drafter="draft"))
    assert not result.stats.speculation_enabled
    assert result.stats.drafted < 40
    assert result.token_ids == reference_greedy(tiny_model(2, 0), random_prompt(18), 40)


# --- the spare cache: a larger prompt prefilled in the background, then taken over (codecue_lsp/growth.py) -------
def test_a_spare_prefill_leaves_the_session_alone_until_taken_then_the_next_request_is_exact():
    engine = tiny_engine("random")
    small, grown = random_prompt(21, length=30), random_prompt(22, length=90)
    engine.complete(CompletionRequest(small, MAX_NEW, session="doc", drafter="hybrid"))
    session = engine.sessions["doc"]
    controllers, history = session.controllers, list(session.history)
    assert engine.prefill_spare("doc", grown[:-1]).result() == len(grown) - 1
    assert engine.sessions["doc"].target.ids[:len(small) - 1] == small[:-1]  # the small prompt still answers
    again = engine.complete(CompletionRequest(small, MAX_NEW, session="doc", drafter="hybrid"))
    assert again.stats.new_prompt_tokens == 0

    assert engine.take_spare("doc").result() is True
    assert engine.spare is None and engine.take_spare("doc").result() is False
    result = engine.complete(CompletionRequest(grown, MAX_NEW, session="doc", drafter="hybrid"))
    assert (result.stats.reused_prompt_tokens, result.stats.new_prompt_tokens) == (len(grown) - 1, 0)
    assert result.token_ids == reference_greedy(tiny_model(2, 0), grown, MAX_NEW)
    # The document's acceptance and completion history went on with it.
    assert engine.sessions["doc"].controllers is controllers
    assert engine.sessions["doc"].history[:len(history)] == history and len(history) > 0


def test_a_cancelled_spare_prefill_is_continued_by_the_next_one():
    engine = tiny_engine("none")
    grown = random_prompt(23, length=90)
    stopped = CancelToken()
    stopped.set()
    assert engine.prefill_spare("doc", grown[:40]).result() == 40
    assert engine.prefill_spare("doc", grown, stopped).result() == 40  # the user typed: nothing more, nothing lost
    spare_cache = engine.spare[1]
    assert engine.prefill_spare("doc", grown).result() == len(grown)
    assert engine.spare[1] is spare_cache and spare_cache.ids == grown


def test_one_spare_for_the_engine_and_it_goes_with_its_document():
    engine = tiny_engine("none")
    engine.prefill_spare("a", random_prompt(24)).result()
    engine.prefill_spare("b", random_prompt(25)).result()
    assert engine.spare[0] == "b" and engine.take_spare("a").result() is False
    engine.forget_session("b").result()
    assert engine.spare is None
    # A document whose session was evicted meanwhile gets one made of the spare.
    engine.prefill_spare("c", random_prompt(26)).result()
    assert "c" not in engine.sessions and engine.take_spare("c").result() is True
    assert engine.sessions["c"].target.ids == random_prompt(26)
