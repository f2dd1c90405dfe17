"""The backend seam (codecue_lsp/backend.py): both backends implement CompletionBackend, their results say how they
ended, and the server treats the remote backend by its capabilities (no background work, no lookup index, its own
health) where it used to probe its attributes."""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from concurrent.futures import Future

import httpx
import pytest
from engine_helpers import tiny_engine
from server_harness import InProcessClient

from codecue_lsp.backend import (
    BackendStats,
    Completion,
    CompletionBackend,
    Health,
    converted,
)
from codecue_lsp.completer import Completer
from codecue_lsp.config import Settings
from codecue_lsp.prompt import OpenDocument
from codecue_lsp.prompt.sizing import DEFAULT_TOTAL
from codecue_lsp.remote import RemoteCompleter, estimate_tokens
from codecue_lsp.remote_endpoint import RemoteBackend, RetryPolicy
from engine.store.config import FimTemplate
from engine.types import CancelToken, CompletionResult, CompletionStats

FIM = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")
URL = "http://remote.test/v1"


def sse(*texts: str, finish: str = "stop") -> bytes:
    events = [{"choices": [{"text": t, "finish_reason": None}]} for t in texts]
    events.append({"choices": [{"text": "", "finish_reason": finish}]})
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"


def remote_completer(handler, syntax=None) -> RemoteCompleter:
    endpoint = RemoteBackend(URL, model="m", transport=httpx.MockTransport(handler),
                             retry=RetryPolicy(attempts=2, backoff_s=0.001))
    return RemoteCompleter(endpoint, FIM, estimate_tokens, syntax=syntax)


def answering(*texts: str):
    return lambda request: httpx.Response(200, content=sse(*texts), headers={"content-type": "text/event-stream"})


# --- both classes implement the protocol ------------------------------------------------------------------------
def protocol_members() -> dict[str, object]:
    """Every member CompletionBackend declares: its methods and its data members (capabilities, kind)."""
    members = {name: value for name, value in vars(CompletionBackend).items()
               if not name.startswith("_") and callable(value)}
    members.update({name: None for name in CompletionBackend.__annotations__})
    return members


def test_the_protocol_names_what_the_server_needs():
    assert set(protocol_members()) == {
        "kind", "supports_prefill", "supports_next_line", "indexes_workspace", "supports_alternatives",
        "prepare", "prompt_tokens", "cold_prompt_tokens", "submit", "alternative", "finish", "complete",
        "prefill", "prepare_growth", "grow", "take_growth", "update_workspace", "forget",
        "stats", "health", "describe", "watch_health", "close"}


@pytest.mark.parametrize("cls", [Completer, RemoteCompleter])
def test_each_backend_defines_every_member_with_the_protocols_parameters(cls):
    assert CompletionBackend in cls.__mro__  # implemented explicitly, not by accident
    for name, declared in protocol_members().items():
        own = next((vars(klass)[name] for klass in cls.__mro__
                    if klass is not CompletionBackend and name in vars(klass)), None)
        assert own is not None, f"{cls.__name__} does not define {name}"
        if declared is None:
            continue  # a data member: a class attribute here
        wanted = list(inspect.signature(declared).parameters)
        assert list(inspect.signature(own).parameters) == wanted, f"{cls.__name__}.{name}"


def test_both_backends_pass_as_completion_backends_at_runtime():
    engine = tiny_engine("none")
    try:
        backends: list[CompletionBackend] = [Completer(engine), remote_completer(answering("x"))]
        for backend in backends:
            assert isinstance(backend, CompletionBackend)
            assert backend.kind in ("local", "remote")
            assert backend.stats() == BackendStats()  # nothing held or running before a first request
            assert backend.health().last_error is None
            assert set(backend.describe()) == {"kind", "url", "healthy", "last_error"}
        local, remote = backends
        assert (local.supports_prefill, local.supports_next_line, local.indexes_workspace) == (True, True, True)
        assert (remote.supports_prefill, remote.supports_next_line, remote.indexes_workspace) == (False, False, False)
        assert (local.supports_alternatives, remote.supports_alternatives) == (True, False)
        nothing = remote.alternative(None, 1, CancelToken()).result(timeout=5)  # one item from a remote engine
        assert (nothing.text, nothing.outcome) == ("", "completed")
        remote.close()
    finally:
        engine.close()


# --- results --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reason, outcome", [("eos", "completed"), ("stop", "completed"), ("length", "completed"),
                                             ("cancelled", "cancelled")])
def test_an_engine_result_becomes_a_completion_with_its_outcome(reason, outcome):
    stats = CompletionStats(target_passes=3)
    completion = Completion.from_engine(CompletionResult("x = 1", [5, 6], reason, stats))
    assert (completion.text, completion.outcome, completion.finish_reason) == ("x = 1", outcome, reason)
    assert completion.token_ids == [5, 6] and completion.token_probs is None and completion.error is None
    assert completion.stats is stats


def test_a_remote_failure_is_failed_not_cancelled():
    remote = remote_completer(lambda request: httpx.Response(500))
    prepared = remote.prepare(OpenDocument("file:///a.py", "python", "x = "), 0, 4, Settings())
    text, completion = remote.complete(prepared)
    assert text == "" and completion.outcome == "failed" and "500" in completion.error
    token = CancelToken()
    token.set()
    assert remote.complete(prepared, token)[1].outcome == "cancelled"
    assert remote.health() == Health(False, completion.error)
    remote.close()


def test_a_converted_future_carries_results_errors_and_cancels_back():
    source = Future()
    out = converted(source, lambda value: value * 2)
    source.set_result(21)
    assert out.result() == 42
    source = Future()
    out = converted(source, lambda value: value)
    source.set_exception(ValueError("boom"))
    with pytest.raises(ValueError):
        out.result()
    source = Future()
    out = converted(source, lambda value: value)
    assert out.cancel() and source.cancelled() and out.cancelled()  # a request still queued is dropped
    source = Future()
    source.set_running_or_notify_cancel()
    out = converted(source, lambda value: value)
    assert not out.cancel()  # a running one stops through its token, and its result still arrives (to be counted)
    source.set_result("cancelled at once")
    assert out.result() == "cancelled at once"


def test_both_backends_stream_the_text_so_far():
    engine = tiny_engine("none")
    try:
        local = Completer(engine)
        settings = Settings(max_tokens=6, drafter="none")
        prepared = local.prepare(OpenDocument("file:///a.py", "python", "def f(a):\n    return a"), 1, 12, settings)
        streamed: list[str] = []
        completion = local.submit(prepared, CancelToken(), on_text=streamed.append).result()
        assert streamed and streamed[-1] == completion.text  # after each pass; the last is the answer
    finally:
        engine.close()
    remote = remote_completer(answering("ret", "urn 1"))
    prepared = remote.prepare(OpenDocument("file:///a.py", "python", "x = "), 0, 4, Settings())
    streamed = []
    completion = remote.submit(prepared, CancelToken(), on_text=streamed.append).result()
    assert streamed == ["ret", "return 1", "return 1"] and completion.text == "return 1"
    remote.close()


# --- the server with the remote backend -------------------------------------------------------------------------
DOC = "def add(a, b):\n    total = a"
URI = "file:///w/remote.py"


@contextlib.asynccontextmanager
async def remote_server(handler, load=None):
    """An initialized in-process server whose backend is a RemoteCompleter over `handler`; `load(server, backend)`
    installs it (default: set directly, as the tiny-engine tests do)."""
    from codecue_lsp.server import make_server

    server = make_server({"engine": URL, "debounce_ms": 0, "max_tokens": 8})
    client = InProcessClient(server)
    await client.initialize()
    backend = remote_completer(handler, syntax=server.syntax)
    if load is None:
        server.completer = backend
    else:
        await load(server, backend)
    try:
        yield client, backend
    finally:
        if not server.protocol._shutdown:
            await client.call("shutdown", None)


async def ask(client, line: int, character: int) -> dict:
    return await client.call("textDocument/inlineCompletion", {
        "textDocument": {"uri": URI}, "position": {"line": line, "character": character},
        "context": {"triggerKind": 2}})


@pytest.mark.asyncio
async def test_the_server_does_no_background_work_and_no_indexing_for_the_remote_backend():
    async with remote_server(answering(" + b")) as (client, backend):
        server = client.server
        client.open(URI, DOC)
        response = await ask(client, 1, len("    total = a"))
        assert [item["insertText"] for item in response["result"]["items"]] == [" + b"]
        client.notify("codecue/didMoveCursor", {"textDocument": {"uri": URI}, "position": {"line": 0, "character": 3}})
        await asyncio.sleep(0.1)
        stats = await client.stats()
        # an answer that ends its line, and a rest: no next line, no warm-up, no growth for a remote endpoint
        assert (stats["next_line_started"], stats["warmup_started"], stats["growth_started"]) == (0, 0, 0)
        assert server.scheduler.background is None and not server.background.tasks
        assert server.background.resting_cursor is None
        assert stats["completed"] == 1 and stats["errors"] == 0
        assert stats["engine"]["results"] == 1 and stats["engine"]["failed"] == 0
        assert stats["backend"] == {"kind": "remote", "url": URL, "healthy": True, "last_error": None}
        assert stats["prompt_tokens"] == DEFAULT_TOTAL and stats["cold_prompt_tokens"] is None
        assert stats["workspace_documents"] == 0
        resources = stats["resources"]
        assert (resources["engine_sessions"], resources["engine_busy"], resources["engine_phase"],
                resources["index_documents"]) == (0, False, "idle", 0)
        assert not server.workspace_sync.timers  # nothing to index: no update was scheduled
        client.notify("textDocument/didClose", {"textDocument": {"uri": URI}})
        await asyncio.sleep(0.05)
        assert (await client.stats())["errors"] == 0
        await client.call("shutdown", None)
        assert backend.engine.client.is_closed  # the shutdown closed the backend


@pytest.mark.asyncio
async def test_a_failing_endpoint_counts_as_failed_and_the_user_gets_one_message(monkeypatch):
    from codecue_lsp import loading

    async def load(server, backend):
        monkeypatch.setattr(loading, "build_completer", lambda settings, syntax=None: backend)
        await loading.load_models(server)

    async with remote_server(lambda request: httpx.Response(500), load=load) as (client, backend):
        client.open(URI, DOC)
        for character in (len("    total = a"), len("    total = a") - 1):  # two keystrokes: still one message
            response = await ask(client, 1, character)
            assert response["result"]["items"] == []
        await asyncio.sleep(0.05)  # the message is sent from the loop, after the request's thread reported it
        stats = await client.stats()
        assert stats["engine"]["failed"] == 2 and stats["engine"]["cancelled"] == 0
        assert stats["backend"]["healthy"] is False and "500" in stats["backend"]["last_error"]
        shown = [m for m in client.from_server if m["method"] == "window/showMessage"]
        assert len(shown) == 1 and URL in shown[0]["params"]["message"]
