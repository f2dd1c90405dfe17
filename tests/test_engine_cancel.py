"""A cancel stops the engine inside a forward pass, not after it: set from inside decoder layer k of a prefill,
verify or draft pass, it keeps layer k+1 (and everything after) from running; the request ends "cancelled", every
KV cache still holds exactly its ids, and the next request is exact and reuses the cached prefix.

The models here are built for this file (4-layer target, 2-layer draft) so that there is a layer after the one
that cancels, and so that the hooks that count layer calls never touch the models other tests share."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import pytest
import torch
from engine_helpers import STOP_IDS, random_prompt, reference_greedy, tiny_tokenizer
from transformers import DynamicCache, StaticCache

from engine import CancelToken, CompletionRequest, Engine
from engine.decode.kvcache import PREFILL_CHUNK, TrackedCache
from engine.loading.pair import LoadedPair
from engine.store.config import FimTemplate, ModelSpec, PairSpec
from engine.testing import build_tiny_model

MAX_NEW = 16
K = 3  # pinned draft length: every draft is a catch-up pass plus one-token steps, every verify pass 4 tokens


@dataclass
class Trigger:
    model: str
    layer: int
    tokens_ok: object  # (tokens in the pass) -> bool: which passes count
    nth: int  # cancel in the nth counted pass
    seen: int = 0
    then: object = None  # called on the worker right after the cancel (e.g. the next keystroke's request)


class LayerLog:
    """Logs every decoder-layer call of the given models, in order, and sets a cancel token from inside one."""

    def __init__(self, engine: Engine, models: dict[str, torch.nn.Module]):
        self.engine = engine
        self.calls: list[tuple[str, int, int]] = []  # (model, layer, tokens in the pass)
        self.trigger: Trigger | None = None
        self.token: CancelToken | None = None
        self.fired_at: int | None = None  # len(calls) when the token was set
        self.state_at_fire: tuple[bool, str] | None = None  # (engine.busy, engine.phase) seen from inside the pass
        self.handles = [layer.register_forward_hook(partial(self._after_layer, name, i))
                        for name, model in models.items() for i, layer in enumerate(model.model.layers)]

    def arm(self, trigger: Trigger) -> CancelToken:
        self.trigger, self.token, self.fired_at, self.calls = trigger, CancelToken(), None, []
        return self.token

    def disarm(self) -> None:
        self.trigger = None

    def _after_layer(self, name: str, index: int, module, args, output) -> None:
        tokens = args[0].shape[1]
        self.calls.append((name, index, tokens))
        t = self.trigger
        if t is None or self.fired_at is not None or (name, index) != (t.model, t.layer) or not t.tokens_ok(tokens):
            return
        t.seen += 1
        if t.seen == t.nth:
            self.token.set()
            self.fired_at = len(self.calls)
            self.state_at_fire = (self.engine.busy, self.engine.phase)
            if t.then is not None:
                t.then()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


@pytest.fixture
def rig(engine_options):
    # Layers are logged (and the cancel set) by forward hooks on transformers' decoder layers: short passes go through
    # them too here. The lean step's own check between layers: tests/test_engine_lean_step.py.
    engine_options(lean_step="off")
    vocab = len(tiny_tokenizer())
    target, draft = build_tiny_model(vocab, 4, 0), build_tiny_model(vocab, 2, 1)
    fim = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")
    spec = ModelSpec(name="tiny-target", family="tiny", fim=fim, stop_token_ids=STOP_IDS)
    engine = Engine(LoadedPair(spec=PairSpec("tiny", spec, spec), target=target, draft=draft,
                               tokenizer=tiny_tokenizer(), device=torch.device("cpu"), dtype=torch.float32))
    log = LayerLog(engine, {"target": target, "draft": draft})
    yield engine, log
    log.remove()
    engine.close()


def request(prompt: list[int]) -> CompletionRequest:
    return CompletionRequest(prompt, MAX_NEW, session="doc", drafter="draft", max_draft_tokens=K, adaptive_k=False)


@torch.inference_mode()
def assert_consistent(cache: TrackedCache) -> None:
    """Every layer holds exactly len(ids) positions, and they are the keys/values of ids (a fresh run's)."""
    n = len(cache.ids)
    assert [int(layer.get_seq_length()) for layer in cache.cache.layers] == [n] * len(cache.cache.layers)
    if n == 0:
        return
    fresh = DynamicCache(config=cache.model.config)
    cache.model(input_ids=torch.tensor([cache.ids]), cache=fresh, use_cache=True)
    for got, want in zip(cache.cache.layers, fresh.layers):
        assert torch.allclose(got.keys[..., :n, :], want.keys, atol=1e-4)
        assert torch.allclose(got.values[..., :n, :], want.values, atol=1e-4)


C = PREFILL_CHUNK  # tokens per prefill pass of a torch model
PROMPT_TOKENS = 700  # after an edit near the top: 650 tokens to prefill, in passes of C


def edited_near_top(prompt: list[int], seed: int) -> list[int]:
    return prompt[:50] + random_prompt(seed, length=len(prompt) - 50)


# name: (where the cancel is set, the phase the engine reports meanwhile)
CASES = {
    # The second chunk of a prefill after an edit near the top: the first chunk stays cached.
    "prefill": (Trigger("target", 1, lambda n: n > K + 1, nth=2), "prefill"),
    # The third verify pass ([pending] + K drafts).
    "verify": (Trigger("target", 1, lambda n: n == K + 1, nth=3), "verify"),
    # The draft model's catch-up over the whole prompt (its cache starts empty).
    "draft-catch-up": (Trigger("draft", 0, lambda n: n > K + 1, nth=1), "draft"),
    # A one-token draft step of the second draft.
    "draft-step": (Trigger("draft", 0, lambda n: n == 1, nth=4), "draft"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_cancel_inside_layer_k_stops_the_pass_before_layer_k_plus_1(rig, case):
    engine, log = rig
    trigger, phase = CASES[case]
    first = random_prompt(21, length=PROMPT_TOKENS)
    prompt = edited_near_top(first, 22) if case == "prefill" else first
    expected = reference_greedy(engine.pair.target, prompt, MAX_NEW)
    assert len(expected) == MAX_NEW  # no early end: the cancel really catches a running generation
    if case == "prefill":
        engine.complete(request(first))  # the session caches the old text; the edit leaves 50 tokens reusable

    token = log.arm(trigger)
    result = engine.submit(request(prompt), token).result(timeout=120)
    log.disarm()

    assert log.fired_at is not None, "the trigger never fired"
    assert log.calls[log.fired_at:] == []  # no layer of either model ran after the cancel, not even layer k+1
    assert result.finish_reason == "cancelled"
    assert log.state_at_fire == (True, phase)
    assert (engine.busy, engine.phase) == (False, "idle")

    session = engine.sessions["doc"]
    assert_consistent(session.target)
    assert_consistent(session.draft)
    if case == "prefill":  # the first chunk after the edit survived the cancel of the second
        assert session.target.ids == prompt[:50 + C]
    else:  # the prompt and whatever was committed before the cancel, but the pending last token
        assert session.target.ids == (prompt + result.token_ids)[:-1]
        assert result.token_ids == expected[:len(result.token_ids)]
    cached = len(session.target.ids)

    again = engine.complete(request(prompt))
    assert again.finish_reason == "length"
    assert again.token_ids == expected  # target-alone output, token for token
    assert again.stats.reused_prompt_tokens == min(cached, len(prompt) - 1)


def test_a_cancel_inside_a_pass_on_a_static_cache_keeps_its_prefix():
    """Compiled models (engine/weights/compiled.py) prefill eagerly on a StaticCache: its layers are cut back too."""
    vocab = len(tiny_tokenizer())
    model = build_tiny_model(vocab, 4, 0)
    calls, token, armed = [], CancelToken(), [False]

    def after(index, module, args, output):
        calls.append(index)
        if armed[0] and index == 1 and args[0].shape[1] > 8:
            token.set()
    handles = [layer.register_forward_hook(partial(after, i)) for i, layer in enumerate(model.model.layers)]
    try:
        cache = TrackedCache(model, cache=StaticCache(config=model.config, max_cache_len=256))
        prompt = random_prompt(23, length=200)
        with torch.inference_mode():
            cache.extend_to(prompt[:60])
            calls.clear()
            armed[0] = True
            assert cache.extend_to(prompt[:-1], chunk=64, cancelled=token.is_set) == (60, 0)
            assert calls == [0, 1]
            assert [int(layer.get_seq_length()) for layer in cache.cache.layers] == [60] * 4
            armed[0] = False
            cache.extend_to(prompt[:-1])
            logits = cache.forward(prompt[-1:], logits="last")[-1]
            want = model(input_ids=torch.tensor([prompt]), use_cache=False).logits[0, -1]
        assert torch.allclose(logits, want, atol=1e-4)
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("start,end,chunk,shared,pieces", [
    (0, 20, 8, 0, [(0, 8, False), (8, 16, False), (16, 20, False)]),
    (0, 20, 8, 12, [(0, 8, True), (8, 12, True), (12, 20, False)]),   # cut where the shared prefix ends
    (4, 20, 8, 20, [(4, 12, True), (12, 20, True)]),
    (10, 20, 8, 6, [(10, 18, False), (18, 20, False)]),                # the shared prefix is cached already
    (5, 5, 8, 9, []),
])
def test_prefill_pieces_end_on_the_shared_prefix(start, end, chunk, shared, pieces):
    """A pass inside the shared prefix is stopped by `finishing(its end)` (or nothing), any other by `cancelled`."""
    from engine.weights.prefill_plan import prefill_pieces

    def cancelled():
        return False

    asked = []

    def finishing(stop):
        asked.append(stop)
        return (finishing, stop)

    assert list(prefill_pieces(start, end, chunk, shared, cancelled)) == [
        (first, last, None if inside else cancelled) for first, last, inside in pieces]
    assert list(prefill_pieces(start, end, chunk, shared, cancelled, finishing)) == [
        (first, last, (finishing, last) if inside else cancelled) for first, last, inside in pieces]
    assert asked == [last for _, last, inside in pieces if inside]


@pytest.mark.parametrize("shared,kept", [(0, 8), (20, 16)])
def test_a_cancel_lets_a_shared_prefill_chunk_end_then_stops(rig, shared, kept):
    """A keystroke during the prefill of the prompt part the next request shares (before the FIM middle): the pass
    in flight ends (its keys and values are the next request's) and nothing after it runs; outside that part the
    pass stops within a layer as before."""
    engine, log = rig
    target = engine.pair.target
    ids = random_prompt(7, length=40)
    cache = TrackedCache(target)
    token = log.arm(Trigger("target", 1, lambda n: n > 1, nth=2))  # inside the second 8-token pass
    cache.extend_to(ids, chunk=8, cancelled=token.is_set, shared=shared)
    assert token.is_set() and cache.ids == ids[:kept]
    assert_consistent(cache)


@pytest.mark.parametrize("next_request", ["same prompt", "another document", "an edit before the pass's end"])
def test_a_cancelled_shared_pass_ends_only_if_the_next_request_wants_it(rig, next_request):
    """A keystroke cancels a request inside a prefill pass of the shared prefix. Whether that pass ends is decided
    by the next request: one that shares the pass's tokens lets it end and reuses them; one that does not (another
    document, or an edit before the pass's end) stops it within a layer, so the user who jumped waits for nothing."""
    engine, log = rig
    prompt = random_prompt(31, length=PROMPT_TOKENS)  # passes 0-C and C-(C+138) shared, then the rest
    shared = C + 138
    following = {"same prompt": ("doc", prompt),
                 "another document": ("other", random_prompt(32, length=40)),
                 "an edit before the pass's end": ("doc", prompt[:shared - 50] + random_prompt(33, length=100))}
    session, next_prompt = following[next_request]
    submitted = []

    def next_keystroke():
        submitted.append(engine.submit(CompletionRequest(next_prompt, 2, session=session, drafter="none"),
                                       CancelToken()))

    # Inside layer 1 of the second shared pass (138 tokens); the first (C tokens) counts as the first.
    token = log.arm(Trigger("target", 1, lambda n: n > K + 1, nth=2, then=next_keystroke))
    first = CompletionRequest(prompt, MAX_NEW, session="doc", drafter="none", shared_prefix=shared)
    result = engine.submit(first, token).result(timeout=120)
    log.disarm()
    following_result = submitted[0].result(timeout=120)

    assert result.finish_reason == "cancelled"
    cancelled_pass = [(layer, n) for model, layer, n in log.calls[:log.fired_at + 8] if n == shared - C]
    ended = next_request == "same prompt"
    assert [layer for layer, _ in cancelled_pass] == ([0, 1, 2, 3] if ended else [0, 1])
    # what the cancelled request computed: the first pass, the second only if it ended, never the unshared rest
    assert result.stats.new_prompt_tokens == (shared if ended else C)
    if ended:
        assert following_result.stats.reused_prompt_tokens == shared
    else:
        assert engine.sessions["doc"].target.ids[:C] == prompt[:C]
    assert_consistent(engine.sessions["doc"].target)
