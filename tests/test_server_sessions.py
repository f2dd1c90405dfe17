"""Many documents, many sessions (issue 9, item 5): the real `codecue-lsp` process over stdio on the tiny pair.

The engine keeps at most 4 sessions (KV caches) in an LRU; these tests keep 9 documents busy at once, so sessions are
evicted while other requests are queued or running. Every answer must be exactly the one a fresh server gives for
that document alone (greedy, fp32: speculation and cache reuse are lossless), each request is answered exactly once,
and closing a document drops its session and its completion history from the engine.
"""
from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from lsp_helpers import (
    change_doc,
    complete,
    items_of,
    open_doc,
    running_server,
    stats,
    wait_for_stats,
    wait_until_loaded,
)
from lsprotocol import types as lsp
from server_harness import ResponseCounter

pytestmark = pytest.mark.asyncio(loop_scope="module")

ARGS = ("--pair", "tiny", "--max-tokens", "24", "--debounce-ms", "0", "--drafter", "hybrid")
STEP_DELAY_MS = 30  # keeps several requests in flight at once
BLOCK_DOC = "def compute(values):\n    "  # a block to fill: a long answer
ANSWER_GUARD_S = 120  # hang guard only


def document(i: int, first_line: str = "") -> str:
    # Top-level statements only: no imports or definitions, so no other open file adds context to the prompt and
    # a document's prompt is the same whichever documents are open beside it.
    return (f"# notes {i}{first_line}\n"
            f"count_{i} = {i * 13}\n"
            f"items_{i} = [count_{i}, {i}, \"v{i}\"]\n"
            f"total_{i} = sum(items_{i}) + ")


def uri_of(i: int) -> str:
    return f"file:///work/sessions/doc_{i}.py"


def cursor_of(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines) - 1, len(lines[-1])


def answer(result) -> list:
    return [(item.insert_text, (item.range.start.line, item.range.start.character, item.range.end.line,
                                item.range.end.character) if item.range else None) for item in items_of(result)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tiny_pair_env):
    env = dict(tiny_pair_env, CODECUE_TEST_STEP_DELAY_MS=str(STEP_DELAY_MS), OMP_NUM_THREADS="1")
    async with running_server(env, *ARGS) as client:
        assert (await wait_until_loaded(client))["ready"]
        counter = ResponseCounter(client)
        yield client
        assert counter.counts and set(counter.counts.values()) == {1}, "a request was answered more than once"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fresh(tiny_pair_env):
    """What a server gives for one document alone: each (uri, text) is opened, completed once and closed."""
    env = dict(tiny_pair_env, OMP_NUM_THREADS="1")
    async with running_server(env, *ARGS) as client:
        assert (await wait_until_loaded(client))["ready"]
        cache: dict = {}

        async def reference(uri: str, text: str) -> list:
            if (uri, text) not in cache:
                open_doc(client, uri, text)
                cache[uri, text] = answer(await asyncio.wait_for(complete(client, uri, *cursor_of(text)),
                                                                 ANSWER_GUARD_S))
                client.text_document_did_close(lsp.DidCloseTextDocumentParams(
                    text_document=lsp.TextDocumentIdentifier(uri=uri)))
            return cache[uri, text]
        yield reference


def close_doc(client, uri: str) -> None:
    client.text_document_did_close(lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))


async def engine_forgot_everything(client) -> None:
    """With every document closed, no session and no lookup document (file or completion history) is left."""
    await wait_for_stats(client, lambda s: s["resources"]["engine_sessions"] == 0
                         and s["resources"]["index_documents"] == 0,
                         "sessions and history of closed documents dropped", timeout=30)


async def test_many_documents_in_flight_while_sessions_are_evicted(server, fresh):
    count = 9  # more than twice the engine's 4 sessions
    texts = {i: document(i) for i in range(count)}
    edited = {i: document(i, " (edited)") for i in range(count)}
    expected = {i: await fresh(uri_of(i), texts[i]) for i in range(count)}
    expected_edited = {i: await fresh(uri_of(i), edited[i]) for i in range(count)}
    assert len({str(v) for v in expected.values()}) > 1, "the tiny model gave every document the same answer"
    before = await stats(server)

    for i in range(count):
        open_doc(server, uri_of(i), texts[i])
    # Round 1: a request for every document at once; the engine runs them one by one, evicting as it goes.
    first = {i: asyncio.ensure_future(complete(server, uri_of(i), *cursor_of(texts[i]))) for i in range(count)}
    # Round 2, interleaved with round 1: edit a document above its cursor (the cache is reusable only up to the
    # edit) and ask again, in an order that keeps switching between evicted and cached sessions.
    second = {}
    for i in (0, 5, 1, 6, 2, 7, 3, 8, 4):
        await asyncio.wait_for(first[i], ANSWER_GUARD_S)
        change_doc(server, uri_of(i), 2, edited[i])
        second[i] = asyncio.ensure_future(complete(server, uri_of(i), *cursor_of(edited[i])))

    for i in range(count):
        assert answer(first[i].result()) == expected[i], f"document {i}, round 1"
        assert answer(await asyncio.wait_for(second[i], ANSWER_GUARD_S)) == expected_edited[i], f"document {i}"
    after = await stats(server)
    assert after["completed"] - before["completed"] == 2 * count
    assert after["errors"] == before["errors"] and after["superseded"] == before["superseded"]
    assert after["resources"]["engine_sessions"] <= 4

    for i in range(count):
        close_doc(server, uri_of(i))
    await engine_forgot_everything(server)


async def test_closing_a_document_while_its_request_runs(server, fresh):
    # The closing document's request is queued behind another document's generation, so it is still in flight when
    # the close arrives (unless the answer beat the close over the pipe: then try again with another document).
    busy_uri, busy_text = "file:///work/sessions/busy.py", BLOCK_DOC
    next_uri, next_text = "file:///work/sessions/after_close.py", document(101)
    expected_busy, expected_next = await fresh(busy_uri, busy_text), await fresh(next_uri, next_text)
    before = await stats(server)
    open_doc(server, busy_uri, busy_text)
    closed_in_flight = 0
    for attempt in range(3):
        uri, text = f"file:///work/sessions/closing_{attempt}.py", document(100 + attempt * 10)
        open_doc(server, uri, text)
        busy = asyncio.ensure_future(complete(server, busy_uri, *cursor_of(busy_text)))
        closing = asyncio.ensure_future(complete(server, uri, *cursor_of(text)))
        await wait_for_stats(server, lambda s: s["requests"] == before["requests"] + 2 * (attempt + 1),
                             "both requests reached the server")
        answered_before_close = closing.done()
        close_doc(server, uri)
        try:
            result = await asyncio.wait_for(closing, ANSWER_GUARD_S)
            if items_of(result) == []:
                closed_in_flight += not answered_before_close
            else:  # answered before the server saw the close: then it must be that document's own answer
                assert answer(result) == await fresh(uri, text)
        except asyncio.TimeoutError:
            raise
        except Exception as exc:  # the other acceptable answer: -32800 RequestCancelled
            assert "cancel" in str(exc).lower(), exc
            closed_in_flight += 1
        assert answer(await asyncio.wait_for(busy, ANSWER_GUARD_S)) == expected_busy
        if closed_in_flight:
            break
    assert closed_in_flight, "no close arrived while its request was in flight"
    close_doc(server, busy_uri)  # its definition would otherwise be context in the next document's prompt

    open_doc(server, next_uri, next_text)  # the next document still works, with its own answer
    result = await asyncio.wait_for(complete(server, next_uri, *cursor_of(next_text)), ANSWER_GUARD_S)
    assert answer(result) == expected_next
    after = await stats(server)
    assert after["errors"] == before["errors"]
    close_doc(server, next_uri)
    await engine_forgot_everything(server)


async def test_reopened_document_starts_from_a_fresh_session(server, fresh):
    # Closed and reopened with other text under the same URI: nothing of the old session may leak into the answer.
    uri = "file:///work/sessions/reopened.py"
    old, new = document(200), document(201)
    for text in (old, new):
        open_doc(server, uri, text)
        result = await asyncio.wait_for(complete(server, uri, *cursor_of(text)), ANSWER_GUARD_S)
        assert answer(result) == await fresh(uri, text)
        assert (await stats(server))["resources"]["engine_sessions"] == 1
        close_doc(server, uri)
        await engine_forgot_everything(server)
