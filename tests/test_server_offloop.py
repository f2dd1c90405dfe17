"""Prompt building and tree-sitter parses run off the event loop (issue 9, item 3).

An in-process server on the tiny engine; one step (prompt preparation, or a syntax update) is gated by an event the
test holds. While it is blocked, the server must still answer `codecue.stats`, apply edits and answer
`$/cancelRequest`; and whatever was superseded meanwhile must not come back as a completion. With the step on the
event loop (the old code), the gate holds the loop until its hang guard runs out, and each test fails on its
ordering assertion.
"""
from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from server_harness import Gate, tiny_in_process_server

pytestmark = pytest.mark.asyncio

# A large module: what makes prompt building slow in real use (the gate makes it slow here).
BIG_DOC = "".join(f"def function_{i}(a, b):\n    total = a + b * {i}\n    return total\n\n\n"
                  for i in range(2000)) + "def last(x):\n    return "
CURSOR = (BIG_DOC.count("\n"), len("    return "))


@pytest_asyncio.fixture
async def offloop():
    async with tiny_in_process_server({"debounce_ms": 0, "max_tokens": 8, "drafter": "none"}) as client:
        yield client


def gate_prepare(server, log: list | None = None) -> Gate:
    gate = Gate()
    server.completer.prepare = gate.wrap(server.completer.prepare, log, "prepare")
    return gate


async def test_stats_and_edits_are_handled_while_a_prompt_is_built(offloop):
    client, server = offloop, offloop.server
    uri = "file:///work/offloop/big.py"
    client.open(uri, BIG_DOC)
    before = await client.stats()
    gate = gate_prepare(server)
    _, completion = client.complete(uri, *CURSOR)
    await gate.wait_entered()

    stats = await client.stats()
    assert not gate.finished.is_set(), "codecue.stats was answered only after the prompt was built"
    assert stats["requests"] == before["requests"] + 1
    client.change(uri, 2, BIG_DOC + "x")  # the user typed on: this edit must win over the prompt being built
    assert server.current_version(uri) == 2
    assert not gate.finished.is_set(), "the edit was applied only after the prompt was built"
    assert (await client.stats())["superseded"] == before["superseded"] + 1

    gate.opened.set()
    response = await asyncio.wait_for(completion, 60)
    assert response["result"]["items"] == [], "a completion for the superseded text came back"
    after = await client.stats()
    assert after["stale"] == before["stale"] + 1 and after["completed"] == before["completed"]


async def test_cancel_request_is_answered_while_a_prompt_is_built(offloop):
    client, server = offloop, offloop.server
    uri = "file:///work/offloop/cancel.py"
    client.open(uri, BIG_DOC)
    gate = gate_prepare(server)
    msg_id, completion = client.complete(uri, *CURSOR)
    await gate.wait_entered()

    client.notify("$/cancelRequest", {"id": msg_id})
    response = await asyncio.wait_for(completion, 60)
    assert not gate.finished.is_set(), "the cancel was answered only after the prompt was built"
    assert response.get("error", {}).get("code") == -32800, response

    gate.opened.set()
    _, again = client.complete(uri, *CURSOR)  # the prompt thread is free again, and the answer is a real one
    response = await asyncio.wait_for(again, 60)
    assert "items" in response["result"]
    assert client.responses[msg_id] == [client.responses[msg_id][0]]  # the cancelled request: one answer only
    assert (await client.stats())["completed"] == 1


async def test_a_newer_request_supersedes_one_whose_prompt_is_being_built(offloop):
    client, server = offloop, offloop.server
    uri = "file:///work/offloop/newer.py"
    client.open(uri, BIG_DOC)
    log: list[str] = []
    gate = gate_prepare(server, log)
    _, first = client.complete(uri, *CURSOR)
    await gate.wait_entered()
    _, second = client.complete(uri, CURSOR[0], CURSOR[1] - 1)
    assert not first.done() and not gate.finished.is_set()

    gate.opened.set()
    assert (await asyncio.wait_for(first, 60))["result"]["items"] == []
    assert "items" in (await asyncio.wait_for(second, 60))["result"]
    assert log == ["prepare", "prepare"]
    stats = await client.stats()
    assert (stats["superseded"], stats["stale"], stats["completed"]) == (1, 1, 1)


async def test_syntax_updates_run_off_the_loop_in_order_and_only_the_newest_text_is_parsed(offloop):
    client, server = offloop, offloop.server
    uri = "file:///work/offloop/parse.py"
    parsed: list[str] = []
    update = server.syntax.update

    def recording_update(uri_, language_id, text):
        parsed.append(text)
        return update(uri_, language_id, text)
    gate, order = Gate(), []
    server.syntax.update = gate.wrap(recording_update, order, "parse")

    client.open(uri, BIG_DOC)  # its parse blocks on the gate
    await gate.wait_entered()
    assert (await client.stats())["ready"]
    assert not gate.finished.is_set(), "codecue.stats was answered only after the parse"
    for version in range(2, 7):  # a burst of keystrokes while the first parse runs
        client.change(uri, version, BIG_DOC + "x" * version)
    assert not gate.finished.is_set(), "the edits were applied only after the parse"
    gate_prepare(server, order).opened.set()
    _, completion = client.complete(uri, CURSOR[0], CURSOR[1] + 6)  # queued behind the syntax update

    gate.opened.set()
    assert "items" in (await asyncio.wait_for(completion, 60))["result"]
    await server.prompt_worker.call(lambda: None)  # everything queued before has run
    assert parsed == [BIG_DOC, BIG_DOC + "x" * 6]  # the burst's stale texts were skipped
    assert order == ["parse", "parse", "prepare"]  # the prompt was built on the tree of its own text
    assert server.syntax.text(uri) == BIG_DOC + "x" * 6


async def test_close_and_shutdown_go_through_the_prompt_thread(offloop):
    client, server = offloop, offloop.server
    uri = "file:///work/offloop/closed.py"
    client.open(uri, BIG_DOC)
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    await server.prompt_worker.call(lambda: None)
    assert server.syntax.text(uri) is None  # the close came after the open's parse, not before it
    await client.call("shutdown", None)
    assert server.prompt_worker.run(print, "too late") is None  # no thread left to run anything
