"""The document the next line is written for: the suggestion taken (or the cursor resting at a line's end) and Enter
pressed (codecue_lsp/next_line.py)."""
import asyncio
from dataclasses import replace

import pytest
import pytest_asyncio
from server_harness import Gate, tiny_in_process_server

import codecue_lsp.next_line as next_line_module
from codecue_lsp.next_line import _writer_ahead as writer_ahead, enter_at, next_line, start_next_line
from codecue_lsp.positions import cursor_at
from codecue_lsp.prompt import OpenDocument
from codecue_lsp.prompt.text import split_cursor
from codecue_lsp.server import Snapshot


def plan_for(marked: str, suggestion: str):
    text, line, character = split_cursor(marked)
    snap = Snapshot("file:///w/a.py", "python", 7, text)
    return next_line(snap, cursor_at(text, line, character), suggestion)


@pytest.mark.parametrize("case, marked, suggestion, text, line", [
    ("the end of a line", "def f(a):\n    x = a█\n    return x\n", " + 1",
     "def f(a):\n    x = a + 1\n\n    return x\n", 2),
    ("the end of the document", "x = █", "1", "x = 1\n", 1),
    ("a CRLF document gets its own line break", "a = 1\r\nb = █\r\n", "2", "a = 1\r\nb = 2\r\n\r\n", 2),
    ("mid-line: Enter would split the line", "print(█)\n", "x", None, None),
    ("a suggestion of two lines", "if x:█\n", "\n    pass", None, None),
    ("no suggestion", "x = █\n", "", None, None),
])
def test_the_next_line_is_planned_only_where_enter_follows_the_suggestion(case, marked, suggestion, text, line):
    plan = plan_for(marked, suggestion)
    if text is None:
        assert plan is None, case
        return
    assert (plan.text, plan.line, plan.version, plan.uri) == (text, line, 7, "file:///w/a.py"), case
    assert plan.text.startswith(plan.end + plan.newline) and plan.end.endswith(suggestion), case


@pytest.mark.parametrize("case, marked, text, end", [
    ("the end of a line", "def f(a):\n    x = a█\n    return x\n", "def f(a):\n    x = a\n\n    return x\n",
     "def f(a):\n    x = a"),
    ("trailing blanks are the line's end too", "x = 1  █\ny = 2\n", "x = 1  \n\ny = 2\n", "x = 1  "),
    ("the end of the document", "x = 1█", "x = 1\n", "x = 1"),
    ("a CRLF document", "a = 1█\r\nb = 2\r\n", "a = 1\r\n\r\nb = 2\r\n", "a = 1"),
    ("mid-line: Enter would split the line", "print(█)\n", None, None),
    ("a blank line: the user types here", "def f():\n    █\n", None, None),
    ("an empty line", "x = 1\n█\ny = 2\n", None, None),
])
def test_enter_is_planned_where_the_cursor_rests_at_the_end_of_a_line_that_is_not_blank(case, marked, text, end):
    text_in, line, character = split_cursor(marked)
    snap = Snapshot("file:///w/a.py", "python", 3, text_in)
    plan = enter_at(snap, cursor_at(text_in, line, character))
    if text is None:
        assert plan is None, case
        return
    assert (plan.text, plan.end, plan.line, plan.version) == (text, end, line + 1, 3), case


def test_taking_the_next_line_too_plans_the_one_after():
    plan = plan_for("def f(a):\n    x = a█\n    return x\n", " + 1")
    assert plan.taken("    y = x") == "def f(a):\n    x = a + 1\n    y = x\n\n    return x\n"


# --- the writer in a server: in process, its prompt step held by a gate the test opens -----------------------
DOC = "def add(a, b):\n    total = a"


@pytest_asyncio.fixture
async def served():
    async with tiny_in_process_server({"debounce_ms": 0, "max_tokens": 8, "drafter": "none"}) as client:
        yield client


def _suggestion_with_a_next_line(server, uri):
    """A suggestion at DOC's end after which the tiny model writes a line that is not empty (asked directly)."""
    for suggestion in (" + b", " * 2", " - b", " + 1", " // 3", " ** b"):
        text = DOC + suggestion + "\n"
        written, _ = server.completer.complete(server.completer.prepare(
            OpenDocument(uri, "python", text), 2, 0, server.settings))
        if written and not written.startswith("\n") and len(written.splitlines()) == 1:
            return suggestion, written
    pytest.fail("the seeded tiny pair wrote nothing after every suggestion")


async def _writer_held(client, uri, suggestion=" + b"):
    """Start writing the line after `suggestion` at DOC's end, and hold it in its prompt step."""
    server = client.server
    client.open(uri, DOC)
    gate = Gate()
    server.completer.prepare = gate.wrap(server.completer.prepare)
    plan = next_line(server.snapshot(uri), cursor_at(DOC, 1, len("    total = a")), suggestion)
    start_next_line(server, plan)
    await gate.wait_entered()
    return gate, plan


@pytest.mark.asyncio
@pytest.mark.parametrize("request_from", ["this document, typed off the suggestion", "another document"])
async def test_a_request_for_the_engine_stops_the_writer(served, request_from):
    client, server = served, served.server
    uri = "file:///w/next.py"
    gate, plan = await _writer_held(client, uri)
    server.settings = replace(server.settings, next_line=False)  # no writer for the request's own answer
    before = await client.stats()
    assert before["next_line_started"] == 1 and before["resources"]["background"] == 1
    if request_from == "another document":
        client.open("file:///w/other.py", "x = 1\n")
        _, answer = client.complete("file:///w/other.py", 1, 0)
    else:
        client.change(uri, 2, DOC + " Q")
        _, answer = client.complete(uri, 1, len("    total = a Q"))
    gate.opened.set()
    await asyncio.gather(*server.background.tasks)
    await asyncio.wait_for(answer, 60)
    after = await client.stats()
    assert after["next_line_ready"] == 0 and server.typethrough.lookup_next(uri, plan.end, "") is None
    assert after["superseded"] == 0 and after["completed"] - before["completed"] == 1
    assert after["resources"]["background"] == 0


@pytest.mark.asyncio
async def test_typing_the_suggestion_does_not_stop_the_writer(served):
    client, server = served, served.server
    uri = "file:///w/next.py"
    server.typethrough.remember(uri, DOC, "", " + b")  # the suggestion on screen
    gate, plan = await _writer_held(client, uri)
    writer = server.scheduler.background
    client.change(uri, 2, DOC + " +")  # typed as suggested: answered by the type-through cache
    _, answer = client.complete(uri, 1, len("    total = a +"))
    assert (await asyncio.wait_for(answer, 60))["result"]["items"][0]["insertText"] == " b"
    assert (await client.stats())["resources"]["background"] == 1
    gate.opened.set()
    await asyncio.gather(*server.background.tasks)
    after = await client.stats()
    assert after["next_line_started"] == 1 and after["typethrough_hits"] == 1
    assert not writer.token.is_set()  # it ran to its end
    assert (server.typethrough.lookup_next(uri, plan.end, "") is not None) == (after["next_line_ready"] == 1)


@pytest.mark.asyncio
async def test_the_writer_leaves_its_line_for_the_type_through_cache(served):
    client, server = served, served.server
    uri = "file:///w/next.py"
    gate, plan = await _writer_held(client, uri)
    gate.opened.set()
    await asyncio.gather(*server.background.tasks)
    after = await client.stats()
    written = server.typethrough.lookup_next(uri, plan.end, "")
    # The line the completer writes for that document and cursor, asked directly.
    direct, _ = server.completer.complete(server.completer.prepare(
        OpenDocument(uri, "python", plan.text), plan.line, 0, server.settings))
    assert after["next_line_ready"] == (1 if direct else 0)
    assert written == ("\n" + direct if direct else None)
    start_next_line(server, plan)  # written already: not again
    assert (await client.stats())["next_line_started"] == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["at the suggestion's end", "after Enter and indentation"])
async def test_a_cursor_ahead_of_the_writer_waits_for_it(served, where, monkeypatch):
    """Typed out (or Enter pressed) before the next line is written: the request waits for the writer instead of
    stopping it and asking the engine the same again."""
    client, server = served, served.server
    uri = "file:///w/next.py"
    suggestion, written = _suggestion_with_a_next_line(server, uri)
    indent = written[:len(written) - len(written.lstrip())]
    gate, plan = await _writer_held(client, uri, suggestion)
    writer = server.scheduler.background
    if where == "at the suggestion's end":
        typed, line, character, expected = suggestion, 1, len("    total = a" + suggestion), "\n" + written
    else:
        typed, line, character, expected = suggestion + "\n" + indent, 2, len(indent), written[len(indent):]
    waiting = asyncio.Event()  # set when the request finds the writer it will wait for

    def writer_found(*args):
        task = writer_ahead(*args)
        if task is not None:
            waiting.set()
        return task
    monkeypatch.setattr(next_line_module, "_writer_ahead", writer_found)
    client.change(uri, 2, DOC + typed)
    _, answer = client.complete(uri, line, character)
    await asyncio.wait_for(waiting.wait(), 60)
    assert not answer.done() and writer.live  # waiting (the writer is held at its gate), and the writer goes on
    gate.opened.set()
    items = (await asyncio.wait_for(answer, 60))["result"]["items"]
    after = await client.stats()
    assert [item["insertText"] for item in items] == [expected]
    assert after["next_line_hits"] == 1 and after["next_line_ready"] == 1
    assert after["completed"] == 0 and not writer.token.is_set()  # no request of its own reached the engine


# --- Enter at a resting cursor (warmup.py plans it once the line's own prompt is ready) ---------------------------
def _rest_at(client, uri, line, character):
    client.notify("codecue/didMoveCursor",
                  {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}})


async def _idle(client):
    server = client.server
    for _ in range(500):
        await asyncio.sleep(0.02)
        work = server.background
        if server.scheduler.background is None and not work.tasks and work.resting_cursor is None:
            return await client.stats()
    pytest.fail("the background work did not end")


@pytest.mark.asyncio
async def test_a_cursor_resting_at_a_lines_end_gets_the_line_after_it_written_and_enter_finds_it(served):
    client, server = served, served.server
    uri = "file:///w/rest.py"
    suggestion, written = _suggestion_with_a_next_line(server, uri)
    server.completer.engine.forget_session(uri)  # (the search above ran this document's prompts)
    end = DOC + suggestion
    client.open(uri, end)
    _rest_at(client, uri, 1, len("    total = a" + suggestion))
    stats = await _idle(client)
    assert (stats["warmup_ready"], stats["next_line_at_rest"], stats["next_line_ready"]) == (1, 1, 1)
    line = server.typethrough.lookup_next(uri, end, "")
    assert line is not None and line.startswith("\n") and line.strip()
    written_line = line[1:]
    indent = written_line[:len(written_line) - len(written_line.lstrip(" \t"))]

    client.change(uri, 2, end + "\n" + indent)  # Enter, the editor's indentation
    _, answer = client.complete(uri, 2, len(indent))
    items = (await asyncio.wait_for(answer, 60))["result"]["items"]
    after = await client.stats()
    assert [item["insertText"] for item in items] == [written_line[len(indent):]]
    assert after["next_line_hits"] == 1 and after["completed"] == 0  # the engine was not asked


@pytest.mark.asyncio
@pytest.mark.parametrize("case, text, line, character, settings", [
    ("mid-line", DOC + " + b", 1, len("    total = a"), {}),
    ("a blank line", DOC + "\n    \n", 2, 4, {}),
    ("the next line turned off", DOC + " + b", 1, len("    total = a + b"), {"next_line": False}),
])
async def test_no_line_is_written_after_a_rest_where_enter_is_unlikely_or_it_is_off(served, case, text, line,
                                                                                     character, settings):
    client, server = served, served.server
    server.settings = replace(server.settings, **settings)
    client.open("file:///w/rest.py", text)
    _rest_at(client, "file:///w/rest.py", line, character)
    stats = await _idle(client)
    assert stats["warmup_ready"] == 1, case
    assert stats["next_line_at_rest"] == stats["next_line_started"] == 0, case


@pytest.mark.asyncio
async def test_a_keystroke_after_the_rest_drops_its_planned_line(served):
    client, server = served, served.server
    uri = "file:///w/rest.py"
    client.open(uri, DOC)
    snap = server.snapshot(uri)
    plan = enter_at(snap, cursor_at(DOC, 1, len("    total = a")))
    server.background.line_after_rest = plan
    client.change(uri, 2, DOC + " +")  # typed before the engine was free
    server.background.start_idle()
    assert server.background.line_after_rest is None and (await client.stats())["next_line_started"] == 0
    server.background.line_after_rest = replace(plan, version=2)  # (the same plan, for the document as it is now)
    server.background.start_idle()
    assert (await client.stats())["next_line_at_rest"] == 1
    await _idle(client)
