"""The remote backend's parts without a server: SSE parsing, the retry policy, health reports (httpx.MockTransport)."""
from __future__ import annotations

import json
import logging

import httpx
import pytest
from test_prompt_injection import (
    CASES,
    FIB_WITH_MARKERS,
    MARKERS,
    _engine_for,
    specials_in,
)

from codecue_lsp.config import Settings
from codecue_lsp.prompt import OpenDocument, PromptBudget, build_prompt
from codecue_lsp.prompt.text import split_cursor
from codecue_lsp.remote import (
    PromptEncoder,
    RemoteCompleter,
    build_remote_completer,
    fim_markers,
    render_prompt,
)
from codecue_lsp.remote_endpoint import (
    RemoteBackend,
    RemotePrepared,
    RetryPolicy,
    parse_sse,
)
from engine.options import REPO_MODELS_TOML
from engine.types import CancelToken


def sse(*texts: str, finish: str = "stop") -> bytes:
    events = [{"choices": [{"text": t, "finish_reason": None}]} for t in texts]
    events.append({"choices": [{"text": "", "finish_reason": finish}]})
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"


def backend(handler, **kwargs) -> RemoteBackend:
    kwargs.setdefault("model", "m")
    kwargs.setdefault("server", "openai")  # nothing to ask the server first (test_remote_vllm.py asks)
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


def test_model_from_models_endpoint_and_api_key_header_never_shown(monkeypatch, caplog):
    """The key goes in the header and nowhere else: not in a log, nor in the message the user sees, nor in
    codecue.stats' backend (last_error), even when the server repeats it in its error body."""
    monkeypatch.setenv("MY_KEY_VAR", "sk-secret-123")
    seen = []

    def handler(request):
        seen.append((request.method, request.url.path, request.headers.get("authorization")))
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "first"}, {"id": "second"}]})
        assert json.loads(request.content)["model"] == "first"
        return httpx.Response(401, text=f"invalid key: {request.headers['authorization']}")

    caplog.set_level(logging.DEBUG)
    b = backend(handler, model=None, api_key_env="MY_KEY_VAR")
    notices = []
    b.on_unhealthy = notices.append
    results = [b.complete(prepared(), CancelToken()) for _ in range(2)]
    assert [s[:2] for s in seen].count(("GET", "/v1/models")) == 1
    assert all(auth == "Bearer sk-secret-123" for _, _, auth in seen)
    assert len(notices) == 1 and "401" in notices[0] and "401" in b.info()["last_error"]
    shown = json.dumps([notices, b.info(), [r.error for r in results]]) + caplog.text
    assert "sk-secret-123" not in shown


def test_engine_setting():
    assert Settings().engine == "local"
    assert Settings().merged({"engine": "http://h:8080/v1/"}).engine == "http://h:8080/v1"
    assert Settings().merged({"engine": "ftp://h"}).engine == "local"  # invalid: ignored
    assert Settings().merged({"remoteModel": "x", "apiKeyEnv": "K", "remoteReadTimeoutS": 2}).remote_read_timeout_s == 2


# --- the prompt as token ids (special-token injection) ---------------------------------------------------------------

def tiny_engine_and_encoder():
    """The tiny pair's tokenizer twice: as the local engine holds it, and as tokenizer.json would load it here."""
    from engine_helpers import tiny_pair
    from tokenizers import Tokenizer

    from engine import Engine

    engine = Engine(tiny_pair("none"))
    copy = Tokenizer.from_str(engine.tokenizer.backend_tokenizer.to_str())  # the encoder sets a flag on its own copy
    return engine, PromptEncoder(copy, fim_markers(engine.fim), "tiny-target")


@pytest.fixture(scope="module", params=["tiny", "qwen2.5-coder"])
def engine_and_encoder(request):
    if request.param == "tiny":
        engine, encoder = tiny_engine_and_encoder()
    else:  # the real tokenizer.json, as build_remote_completer loads it, against the engine's transformers tokenizer
        from tokenizers import Tokenizer
        from transformers import AutoTokenizer

        from engine.store.config import load_config, model_dir
        from engine.store.local import is_ready
        spec = load_config().pair("default").target
        if not is_ready(spec.name):
            pytest.skip("real models not fetched: run `codecue-models fetch`")
        engine = _engine_for(AutoTokenizer.from_pretrained(model_dir(spec.name)), spec.fim, spec.name)
        encoder = PromptEncoder(Tokenizer.from_file(str(model_dir(spec.name) / "tokenizer.json")),
                                fim_markers(spec.fim), spec.name)
    yield engine, encoder
    engine.close()


@pytest.mark.parametrize("case, marked, language, uri, others, needle, expected", CASES, ids=[c[0] for c in CASES])
def test_remote_prompt_ids_equal_the_local_engines(engine_and_encoder, case, marked, language, uri, others, needle,
                                                    expected):
    engine, encoder = engine_and_encoder
    text, line, character = split_cursor(marked)
    prompt = build_prompt(OpenDocument(uri, language, text), line, character, engine.fim, encoder.count_tokens,
                          other_docs=others, budget=PromptBudget(total=1024, suffix=128, context=256))
    ids = encoder.encode_prompt(prompt.pieces)
    assert ids == engine.encode_prompt(prompt.pieces)
    assert specials_in(ids, engine.tokenizer) == expected  # the user's marker strings added no control token


@pytest.mark.parametrize("marker", MARKERS)
def test_remote_token_budget_counts_marker_strings_as_the_engine_does(engine_and_encoder, marker):
    engine, encoder = engine_and_encoder
    text = f"x = '{marker}'\n"
    assert encoder.count_tokens(text) == engine.count_tokens(text) > 3


def test_request_body_holds_token_ids_with_one_id_per_template_marker():
    engine, encoder = tiny_engine_and_encoder()
    bodies = []

    def handler(request):
        bodies.append(json.loads(request.content))
        return httpx.Response(200, content=sse("return fibonacci(n - 1)"))

    completer = RemoteCompleter(backend(handler), engine.fim, encoder.count_tokens, encoder=encoder)
    text, line, character = split_cursor(FIB_WITH_MARKERS)
    prepared = completer.prepare(OpenDocument("file:///w/fib.py", "python", text), line, character, Settings())
    completer.complete(prepared)
    engine.close()

    prompt = bodies[0]["prompt"]
    assert isinstance(prompt, list) and all(isinstance(i, int) for i in prompt)
    assert prompt == engine.encode_prompt(prepared.built.pieces)
    # Exactly the template's markers are control tokens; the document names all of them several times over.
    assert specials_in(prompt, engine.tokenizer) == ["<|file_sep|>", "<|fim_prefix|>", "<|fim_suffix|>",
                                                     "<|fim_middle|>"]
    assert FIB_WITH_MARKERS.count("<|fim_prefix|>") >= 3
    assert engine.tokenizer.decode(prompt, skip_special_tokens=False) == prepared.built.display


def test_encoder_refuses_a_template_marker_that_is_not_one_special_token():
    engine, encoder = tiny_engine_and_encoder()
    engine.close()
    with pytest.raises(ValueError, match="is not one special token of the tiny-target tokenizer"):
        PromptEncoder(encoder.tokenizer, ["<|fim_prefix|>", "<PRE>"], "tiny-target")
    with pytest.raises(ValueError, match="unknown prompt piece kind"):
        encoder.encode_prompt([("marker", "<|fim_prefix|>")])


def test_build_remote_completer_sends_ids_when_the_tokenizer_is_here(tiny_pair_env, monkeypatch, caplog):
    for name, value in tiny_pair_env.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.INFO)
    completer = build_remote_completer(Settings().merged({"pair": "tiny", "engine": "http://127.0.0.1:9/v1"}))
    try:
        text, line, character = split_cursor(FIB_WITH_MARKERS)
        prepared = completer.prepare(OpenDocument("file:///w/fib.py", "python", text), line, character, Settings())
        assert isinstance(prepared.prompt, list)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        completer.engine.close()


def test_without_a_tokenizer_the_prompt_is_text_and_a_warning_says_so_once(tmp_path, engine_options, caplog):
    engine_options(home=tmp_path, models_toml=REPO_MODELS_TOML)  # no models fetched here
    caplog.set_level(logging.INFO)
    completer = build_remote_completer(Settings().merged({"engine": "http://127.0.0.1:9/v1"}))
    try:
        text, line, character = split_cursor(FIB_WITH_MARKERS)
        doc = OpenDocument("file:///w/fib.py", "python", text)
        prompts = [completer.prepare(doc, line, character, Settings()).prompt for _ in range(3)]
        assert all(isinstance(p, str) and p.startswith("<|file_sep|>fib.py\n<|fim_prefix|>") for p in prompts)
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "cannot be protected" in warnings[0]
        assert completer.count_tokens("x" * 35) == 11  # 3.5 characters per token, counted high
    finally:
        completer.engine.close()
