"""The remote backend's parts without a server: SSE parsing, the retry policy, health reports (httpx.MockTransport)."""
from __future__ import annotations

import json
import logging

import httpx

from codecue_lsp.config import Settings
from codecue_lsp.remote import RemoteBackend, RemotePrepared, RetryPolicy, parse_sse, render_prompt
from engine.types import CancelToken


def sse(*texts: str, finish: str = "stop") -> bytes:
    events = [{"choices": [{"text": t, "finish_reason": None}]} for t in texts]
    events.append({"choices": [{"text": "", "finish_reason": finish}]})
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"


def backend(handler, **kwargs) -> RemoteBackend:
    kwargs.setdefault("model", "m")
    kwargs.setdefault("retry", RetryPolicy(attempts=3, backoff_s=0.001))
    return RemoteBackend("http://remote.test/v1", transport=httpx.MockTransport(handler), **kwargs)


def prepared(stop=None) -> RemotePrepared:
    return RemotePrepared(built=None, prompt="<|fim_prefix|>x<|fim_suffix|><|fim_middle|>", max_tokens=16, stop=stop)


def test_parse_sse_events_comments_multiline_and_done():
    lines = [": keep-alive", "", "data: {\"a\": 1}", "", "event: x", "data: {\"b\":", "data: 2}", "",
             "data: [DONE]", "", "data: {\"after\": 1}", ""]
    assert list(parse_sse(lines)) == [{"a": 1}, {"b": 2}]
    assert list(parse_sse(["data:{\"c\": 3}"])) == [{"c": 3}]  # no space after the colon; no final blank line


def test_render_prompt_writes_markers_out():
    pieces = [("special", "<|fim_prefix|>"), ("text", "a"), ("special", "<|fim_suffix|>"), ("text", "b"),
              ("special", "<|fim_middle|>")]
    assert render_prompt(pieces) == "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>"


def test_streamed_text_and_request_body():
    bodies = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, content=sse("ret", "urn 1"), headers={"content-type": "text/event-stream"})

    b = backend(handler, stop=["<|fim_prefix|>"])
    result = b.complete(prepared(), CancelToken())
    assert result.text == "return 1" and result.finish_reason == "eos"
    assert bodies == [{"model": "m", "prompt": prepared().prompt, "max_tokens": 16, "temperature": 0,
                       "stream": True, "stop": ["<|fim_prefix|>"]}]
    assert b.info() == {"kind": "remote", "url": "http://remote.test/v1", "healthy": True, "last_error": None}


def test_stop_predicate_ends_the_stream_early():
    b = backend(lambda r: httpx.Response(200, content=sse("a", "b", "c", "d")))
    result = b.complete(prepared(stop=lambda text: "b" in text), CancelToken())
    assert result.text == "ab" and result.finish_reason == "stop"


def test_5xx_before_any_token_is_retried_then_succeeds():
    calls = []

    def handler(request):
        calls.append(request.url.path)
        return httpx.Response(503) if len(calls) < 3 else httpx.Response(200, content=sse("ok"))

    result = backend(handler).complete(prepared(), CancelToken())
    assert result.text == "ok" and len(calls) == 3


def test_persistent_500_gives_empty_result_one_notice_and_health():
    calls, notices = [], []

    def handler(request):
        calls.append(1)
        return httpx.Response(500)

    b = backend(handler)
    b.on_unhealthy = notices.append
    for _ in range(3):  # three keystrokes
        result = b.complete(prepared(), CancelToken())
        assert result.text == "" and result.finish_reason == "cancelled"
    assert len(calls) == 9  # 3 attempts each
    assert len(notices) == 1 and "500" in notices[0]
    assert b.info()["healthy"] is False and "500" in b.info()["last_error"]


def test_connect_errors_retried_4xx_not():
    calls = []

    def refuse(request):
        calls.append(1)
        raise httpx.ConnectError("refused", request=request)

    assert backend(refuse).complete(prepared(), CancelToken()).text == ""
    assert len(calls) == 3
    calls.clear()

    def bad_request(request):
        calls.append(1)
        return httpx.Response(400, text="bad prompt")

    b = backend(bad_request)
    assert b.complete(prepared(), CancelToken()).text == "" and len(calls) == 1
    assert "400" in b.info()["last_error"]


def test_cancelled_token_sends_nothing():
    calls = []
    token = CancelToken()
    token.set()
    result = backend(lambda r: calls.append(1) or httpx.Response(200, content=sse("x"))).complete(prepared(), token)
    assert calls == [] and result.finish_reason == "cancelled"


def test_model_from_models_endpoint_and_api_key_header_not_logged(monkeypatch, caplog):
    monkeypatch.setenv("MY_KEY_VAR", "sk-secret-123")
    seen = []

    def handler(request):
        seen.append((request.method, request.url.path, request.headers.get("authorization")))
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "first"}, {"id": "second"}]})
        assert json.loads(request.content)["model"] == "first"
        return httpx.Response(500)

    caplog.set_level(logging.DEBUG)
    b = backend(handler, model=None, api_key_env="MY_KEY_VAR")
    b.complete(prepared(), CancelToken())
    b.complete(prepared(), CancelToken())
    assert [s[:2] for s in seen].count(("GET", "/v1/models")) == 1
    assert all(auth == "Bearer sk-secret-123" for _, _, auth in seen)
    assert "sk-secret-123" not in caplog.text


def test_engine_setting():
    assert Settings().engine == "local"
    assert Settings().merged({"engine": "http://h:8080/v1/"}).engine == "http://h:8080/v1"
    assert Settings().merged({"engine": "ftp://h"}).engine == "local"  # invalid: ignored
    assert Settings().merged({"remoteModel": "x", "apiKeyEnv": "K", "remoteReadTimeoutS": 2}).remote_read_timeout_s == 2
