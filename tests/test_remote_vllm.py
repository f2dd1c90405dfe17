"""The remote backend against a fake engine that behaves as vLLM (and llama-server) document it (tests/fake_engine.py):
stops on token ids where special tokens leave the text (vLLM) and on strings where they stay in it (llama-server),
chosen per server kind; the vocabulary checked through /tokenize before token-id prompts are trusted; and a request
bounded and honest about how it ended: an error event mid-stream, a deadline, a size cap, 429 Retry-After, a
connection dropped before the first token, failures counted as failures, token counts from the server."""
from __future__ import annotations

import logging
import time

import httpx
import pytest
from fake_engine import ANSWER, EOS, FILE_SEP, HANG_GUARD_S, FakeEngine
from lsp_helpers import complete, items_of, open_doc, running_server, wait_for_stats
from tokenizers import Tokenizer

from codecue_lsp.config import Settings
from codecue_lsp.remote import build_remote_completer
from codecue_lsp.remote_endpoint import RemoteBackend, RemotePrepared, RetryPolicy
from codecue_lsp.telemetry import EngineTotals
from engine.types import CancelToken

MARKERS = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>"]
TINY_STOP_IDS = list(range(8))  # the tiny pair's models.toml stop_token_ids: its special tokens
DOC = "def add(a, b):\n    "


def backend_for(fake: FakeEngine, **kwargs) -> RemoteBackend:
    kwargs.setdefault("retry", RetryPolicy(attempts=3, backoff_s=0.01))
    return RemoteBackend(fake.url, stop=MARKERS, stop_token_ids=TINY_STOP_IDS, **kwargs)


def prepared(prompt=(2, 50, 51, 4, 3), max_tokens: int = 16) -> RemotePrepared:
    """A prompt as ids (or text) with no stop predicate of ours: what stops the text is the server's doing."""
    return RemotePrepared(built=None, prompt=list(prompt) if not isinstance(prompt, str) else prompt,
                          max_tokens=max_tokens, stop=None, text="<|fim_prefix|>x<|fim_suffix|><|fim_middle|>")


@pytest.fixture
def tiny_env(tiny_pair_env, monkeypatch):
    for name, value in tiny_pair_env.items():
        monkeypatch.setenv(name, value)
    return tiny_pair_env


def completer_for(url: str, **settings):
    return build_remote_completer(Settings().merged({"pair": "tiny", "engine": url, **settings}))


def same_vocabulary(completer):
    """The served model's /tokenize when it shares the pair's tokenizer: marker strings parsed as special tokens."""
    tokenizer = Tokenizer.from_str(completer.encoder.tokenizer.to_str())
    tokenizer.encode_special_tokens = False
    return lambda text: tokenizer.encode(text, add_special_tokens=False).ids


# --- item 4: stop tokens chosen per server kind ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["vllm", "llama-server"])
def test_the_completion_stops_at_the_file_separator_on_either_server(tiny_env, kind):
    """vLLM drops <|file_sep|> from its text, so the marker stop string cannot match there: the pair's stop token
    ids go instead. llama-server keeps it in the text: the strings stay."""
    with FakeEngine(kind) as fake:
        completer = completer_for(fake.url)
        try:
            result = completer.engine.complete(prepared(), CancelToken())
        finally:
            completer.close()
    assert result.outcome == "completed" and result.text == ANSWER, result.text
    body = fake.completions()[0].body
    if kind == "vllm":
        assert body["stop_token_ids"] == TINY_STOP_IDS and "stop" not in body
        assert body["stream_options"] == {"include_usage": True}
    else:
        assert body["stop"] == MARKERS and "stop_token_ids" not in body and "stream_options" not in body


def test_the_server_kind_setting_names_vllm_where_the_server_does_not_say(tiny_env):
    with FakeEngine("vllm", owned_by="a-gateway") as fake:  # vLLM behind something that lists itself
        completer = completer_for(fake.url, remoteServer="vllm", remoteModel="m")
        try:
            assert completer.engine.complete(prepared(), CancelToken()).text == ANSWER
        finally:
            completer.close()
    assert not [r for r in fake.requests if r.path in ("/v1/models", "/props")]  # nothing asked: it was told
    assert fake.completions()[0].body["stop_token_ids"] == TINY_STOP_IDS


def test_an_unknown_openai_server_gets_stop_strings_and_nothing_it_may_refuse():
    with FakeEngine("openai") as fake:
        result = backend_for(fake, model="m").complete(prepared(), CancelToken())
    body = fake.completions()[0].body
    assert result.text == ANSWER and body["stop"] == MARKERS
    assert set(body) == {"model", "prompt", "max_tokens", "temperature", "stream", "stop"}
    assert [r.path for r in fake.requests] == ["/v1/models", "/props", "/v1/completions"]


# --- item 6: the vocabulary, checked once ------------------------------------------------------------------------

def test_a_shared_vocabulary_is_checked_once_then_prompts_go_as_ids(tiny_env):
    with FakeEngine("vllm") as fake:
        completer = completer_for(fake.url)
        fake.tokenize = same_vocabulary(completer)
        try:
            for _ in range(2):
                completer.engine.complete(prepared(), CancelToken())
        finally:
            completer.close()
    probes = [r for r in fake.requests if r.path == "/tokenize"]
    assert len(probes) == 1 and probes[0].body["add_special_tokens"] is False
    assert "<|fim_prefix|>" in probes[0].body["prompt"] and "größe" in probes[0].body["prompt"]
    assert all(isinstance(r.body["prompt"], list) for r in fake.completions())


@pytest.mark.parametrize("kind", ["vllm", "llama-server"])
def test_another_vocabulary_falls_back_to_text_prompts_with_one_message(tiny_env, kind, caplog):
    caplog.set_level(logging.INFO)
    with FakeEngine(kind) as fake:
        completer = completer_for(fake.url)
        same = same_vocabulary(completer)
        fake.tokenize = lambda text: [i + 1 for i in same(text)]  # another model's ids
        notices = []
        completer.watch_health(notices.append)
        try:
            for _ in range(3):
                completer.engine.complete(prepared(), CancelToken())
        finally:
            completer.close()
    posts = fake.completions()
    assert [r.path for r in fake.requests].count("/tokenize") == 1
    assert all(r.body["prompt"] == prepared().text for r in posts)  # the text, not our ids
    if kind == "vllm":  # our stop ids mean nothing there either: strings, with special tokens kept in the text
        assert posts[0].body["stop"] == MARKERS and posts[0].body["skip_special_tokens"] is False
        assert "stop_token_ids" not in posts[0].body
    assert len(notices) == 1 and "does not share the tiny-target tokenizer" in notices[0]
    assert len([r for r in caplog.records if "does not share" in r.getMessage()]) == 1


def test_without_tokenize_the_ids_are_sent_unchecked(tiny_env, caplog):
    caplog.set_level(logging.INFO)
    with FakeEngine("vllm") as fake:  # fake.tokenize unset: /tokenize answers 404 (a proxy that passes /v1 only)
        completer = completer_for(fake.url)
        try:
            completer.engine.complete(prepared(), CancelToken())
        finally:
            completer.close()
    assert isinstance(fake.completions()[0].body["prompt"], list)
    assert any("vocabulary not checked" in r.getMessage() for r in caplog.records)


# --- item 5: how a request ends -----------------------------------------------------------------------------------

def test_an_error_event_mid_stream_is_a_failure_not_an_answer():
    with FakeEngine("vllm", plan=[("error_after", 2)]) as fake:
        backend = backend_for(fake)
        notices = []
        backend.on_unhealthy = notices.append
        result = backend.complete(prepared(), CancelToken())
    assert result.outcome == "failed" and result.text == "" and "CUDA out of memory" in result.error
    assert backend.info()["healthy"] is False and len(notices) == 1
    assert len(fake.completions()) == 1  # generation failed on the server: not retried


def test_a_stream_that_never_finishes_ends_at_the_deadline():
    with FakeEngine("vllm", plan=[("trickle", 0.05)]) as fake:  # a token every 50 ms, never a finish
        started = time.monotonic()
        result = backend_for(fake, deadline_s=1.0).complete(prepared(max_tokens=4096), CancelToken())
        took = time.monotonic() - started
    assert result.outcome == "failed" and "within 1 s" in result.error, result.error
    assert 1.0 <= took < HANG_GUARD_S


def test_an_answer_past_the_size_cap_fails():
    with FakeEngine("vllm", plan=[("flood", 4 << 20)]) as fake:  # 4 MB of text for a 16-token request
        result = backend_for(fake).complete(prepared(max_tokens=16), CancelToken())
    assert result.outcome == "failed" and "bytes" in result.error and result.text == ""


def test_429_waits_for_retry_after_then_answers():
    with FakeEngine("vllm", plan=[("status", 429, {"Retry-After": "1"}, {"error": "slow down"})]) as fake:
        result = backend_for(fake).complete(prepared(), CancelToken())
    first, second = fake.completions()
    assert result.outcome == "completed" and result.text == ANSWER
    assert second.at - first.at >= 1.0


def test_429_past_the_deadline_fails_at_once_and_holds_later_requests_back():
    with FakeEngine("vllm", plan=[("status", 429, {"Retry-After": "120"}, {"error": "slow down"})]) as fake:
        backend = backend_for(fake, deadline_s=5)
        started = time.monotonic()
        first = backend.complete(prepared(), CancelToken())
        assert time.monotonic() - started < 120  # it did not sleep out the two minutes
        second = backend.complete(prepared(), CancelToken())
    assert first.outcome == second.outcome == "failed"
    assert "429" in first.error and "429" in second.error
    assert len(fake.completions()) == 1  # the second waited its turn by failing, not by asking again


def test_a_connection_dropped_before_the_first_token_is_retried_once():
    with FakeEngine("vllm", plan=["drop"]) as fake:
        result = backend_for(fake).complete(prepared(), CancelToken())
    assert result.outcome == "completed" and result.text == ANSWER and len(fake.completions()) == 2
    with FakeEngine("vllm", plan=["drop", "drop"]) as fake:
        result = backend_for(fake).complete(prepared(), CancelToken())
    assert result.outcome == "failed" and len(fake.completions()) == 2  # once, not again


def test_a_failure_superseded_while_it_waits_to_retry_is_counted_as_a_failure():
    token = CancelToken()

    def refuse(request):
        token.set()  # the next keystroke arrives while the request waits to try again
        raise httpx.ConnectError("refused", request=request)

    backend = RemoteBackend("http://remote.test/v1", model="m", server="openai",
                            retry=RetryPolicy(attempts=3, backoff_s=5), transport=httpx.MockTransport(refuse))
    result = backend.complete(prepared(), token)
    assert result.outcome == "failed" and "cannot connect" in result.error
    assert backend.info()["healthy"] is False
    totals = EngineTotals()
    totals.add(result)
    assert (totals.failed, totals.cancelled) == (1, 0)


@pytest.mark.parametrize("kind", ["vllm", "llama-server"])
def test_token_counts_come_from_the_servers_usage(kind):
    with FakeEngine(kind) as fake:
        result = backend_for(fake).complete(prepared(prompt=range(100, 120)), CancelToken())
    totals = EngineTotals()
    totals.add(result)
    # "return", " a", " +", " b", "\n" and the stop token <|file_sep|>: six generated; 20 prompt ids, 2 cached
    assert (totals.generated_tokens, totals.prompt_tokens_new, totals.prompt_tokens_reused) == (6, 18, 2)


def test_token_counts_without_usage_count_the_text():
    with FakeEngine("openai") as fake:
        result = backend_for(fake, model="m", count_tokens=lambda text: len(text.split())).complete(
            prepared(prompt=range(100, 110)), CancelToken())
    totals = EngineTotals()
    totals.add(result)
    assert (totals.generated_tokens, totals.prompt_tokens_new) == (4, 10)  # "return a + b": 4 by this counter


# --- the whole server against the fake vLLM ----------------------------------------------------------------------

@pytest.mark.asyncio
async def test_codecue_lsp_on_a_vllm_engine(tiny_env):
    """`codecue-lsp --engine URL --pair tiny` on the fake vLLM: the prompt goes as ids after the vocabulary check,
    stops as token ids, and codecue.stats counts the tokens the server reported."""
    with FakeEngine("vllm") as fake:
        completer = completer_for(fake.url)  # the tokenizer the server process loads too
        fake.tokenize = same_vocabulary(completer)
        completer.close()
        async with running_server(tiny_env, "--engine", fake.url, "--pair", "tiny") as client:
            open_doc(client, "file:///add.py", DOC)
            await wait_for_stats(client, lambda s: s["ready"])
            items = items_of(await complete(client, "file:///add.py", 1, 4, timeout=HANG_GUARD_S))
            assert [item.insert_text for item in items] == ["return a + b"]
            stats = await wait_for_stats(client, lambda s: s["engine"]["results"] == 1)
    assert [r.path for r in fake.requests].count("/tokenize") == 1
    body = fake.completions()[0].body
    assert isinstance(body["prompt"], list) and body["stop_token_ids"] == TINY_STOP_IDS
    assert EOS in TINY_STOP_IDS and FILE_SEP in TINY_STOP_IDS
    # The server's usage when the stream ran to its end, else the text's tokens: never 0 as before.
    engine = stats["engine"]
    assert engine["generated_tokens"] >= 1 and engine["failed"] == 0
    assert engine["prompt_tokens_new"] + engine["prompt_tokens_reused"] == len(body["prompt"])
