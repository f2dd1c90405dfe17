"""End-to-end: the real `codecue-lsp` subprocess on the tiny pair, driven by pytest-lsp.

The tiny pair's completions are random bytes, so these tests assert protocol behaviour: ranges, versions,
cancellation, counters. CODECUE_TEST_STEP_DELAY_MS slows each engine step so that a request is still in flight when
the test cancels or supersedes it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures

import pytest
import pytest_asyncio
from lsp_helpers import (
    change_doc,
    complete,
    completion_params,
    configure,
    items_of,
    open_doc,
    raw_request,
    running_server,
    send_raw,
    stats,
    wait_for_stats,
    wait_until_loaded,
)
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

pytestmark = pytest.mark.asyncio(loop_scope="module")

STEP_DELAY_MS = 25
DOC = (
    "import os\n"
    "\n"
    "\n"
    "def add(a, b):\n"
    "    return a + b\n"
    "\n"
    "\n"
    "def main():\n"
    "    s = \"😀\"\n"
    "    total = add(1, 2)\n"
    "    print(s, )\n"
    "    name = os.path.join(\"a\", \n"
    "    return total\n"
)
LINES = DOC.split("\n")


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


# Cursors to try (line, UTF-16 character): inside `print(s, )`, after `join("a", `, after `add`, after `return a`.
CURSORS = [(10, utf16_len("    print(s, ")), (11, utf16_len(LINES[11])), (9, utf16_len("    total = add")),
           (4, utf16_len("    return a"))]
BLOCK_DOC = "def compute(values):\n    "  # a block to fill: long random output before any stop


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tiny_pair_env):
    # One torch thread: the tiny model's steps are many times faster than with threads fighting over 2 busy cores.
    env = dict(tiny_pair_env, CODECUE_TEST_STEP_DELAY_MS=str(STEP_DELAY_MS), OMP_NUM_THREADS="1")
    # The next line written in the background (on by default) would add engine results to the counters the tests
    # compare; the one test of it turns it on.
    async with running_server(env, "--pair", "tiny", "--max-tokens", "24", "--debounce-ms", "0",
                              "--drafter", "hybrid", init_options={"nextLine": False}) as c:
        loaded = await wait_until_loaded(c)
        assert loaded["ready"], loaded
        yield c


async def delta(client, before: dict, name: str) -> int:
    return (await stats(client))[name] - before[name]


def texts(result) -> list[str]:
    return [item.insert_text for item in items_of(result)]


async def reopened_completion(client, uri: str, text: str, line: int, character: int):
    """Close `uri`, open it again with `text` and complete there: the same model, path and text give the same
    completion, so it is the expected answer for any other way of arriving at that text."""
    client.text_document_did_close(lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
    open_doc(client, uri, text)
    try:
        return await complete(client, uri, line, character)
    finally:
        client.text_document_did_close(lsp.DidCloseTextDocumentParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri)))


def engine_running(before: dict):
    """A stats predicate: a new request has reached the engine and it is generating."""
    return lambda now: now["requests"] > before["requests"] and now["resources"]["engine_busy"]


def check_item_range(item, line: int, character: int) -> None:
    rng = item.range
    assert rng is not None
    assert (rng.start.line, rng.start.character) == (line, character)
    assert rng.end.line == line
    line_text = LINES[line] if line < len(LINES) else ""
    line_units = utf16_len(line_text)
    # Either an insertion at the cursor or a replacement of the rest of the line.
    assert rng.end.character in (character, line_units)
    assert item.insert_text


async def test_initialize_advertises_inline_completion_and_reports_progress(client):
    result = await stats(client)
    assert result["pair"] == "tiny" and result["ready"] and result["load_error"] is None
    kinds = [type(v).__name__ for values in client.progress_reports.values() for v in values]
    assert kinds[0] == "WorkDoneProgressBegin" and kinds[-1] == "WorkDoneProgressEnd", kinds


async def test_prompt_tokens_bound_what_a_new_prompt_costs(client):
    """promptTokens: "auto" is the default budget for a pair without a calibration; a number is used as set."""
    assert (await stats(client))["prompt_tokens"] == 1536
    body = "".join(f"def step_{i}(value):\n    return value * {i}\n\n\n" for i in range(200))
    sizes = {}
    try:
        for budget in (256, 768):
            uri = f"file:///work/e2e/long_{budget}.py"
            long_doc = body + f"def last_{budget}():\n    "
            open_doc(client, uri, long_doc)
            await configure(client, {"promptTokens": budget, "maxTokens": 2})
            assert (await stats(client))["prompt_tokens"] == budget
            before = await stats(client)
            await complete(client, uri, long_doc.count("\n"), 4)
            after = await stats(client)
            computed = after["engine"]["prompt_tokens_new"] - before["engine"]["prompt_tokens_new"]
            reused = after["engine"]["prompt_tokens_reused"] - before["engine"]["prompt_tokens_reused"]
            sizes[budget] = computed + reused
            assert 0 < sizes[budget] <= budget, (budget, computed, reused)
        assert sizes[768] > 2 * sizes[256]  # the document is far longer than either: the budget decides
    finally:
        await configure(client, {"promptTokens": "auto", "maxTokens": 24})
        for budget in sizes:
            client.text_document_did_close(lsp.DidCloseTextDocumentParams(
                text_document=lsp.TextDocumentIdentifier(uri=f"file:///work/e2e/long_{budget}.py")))


async def test_completion_items_have_ranges_on_the_cursor_line(client):
    uri = "file:///work/e2e/ranges.py"
    open_doc(client, uri, DOC)
    before = await stats(client)
    seen = 0
    for line, character in CURSORS:
        for item in items_of(await complete(client, uri, line, character)):
            check_item_range(item, line, character)
            seen += 1
    after = await stats(client)
    assert after["requests"] - before["requests"] == len(CURSORS)
    assert after["completed"] + after["typethrough_hits"] - before["completed"] - before["typethrough_hits"] \
        == len(CURSORS)
    assert seen >= 1, "the tiny model gave no non-empty completion at any cursor"


async def test_incremental_edits_are_applied(client):
    uri = "file:///work/e2e/edits.py"
    open_doc(client, uri, "x = 1\n")
    before = await stats(client)
    assert items_of(await complete(client, uri, 3, 0)) == []  # no line 3 yet
    assert await delta(client, before, "empty") == 1
    change_doc(client, uri, 2, "def f():\n    y = 2\n    return ", start=(1, 0))
    change_doc(client, uri, 3, "z", start=(0, 0), end=(0, 1))  # x -> z
    before = await stats(client)
    result = await complete(client, uri, 3, 11)  # end of "    return "
    assert await delta(client, before, "completed") == 1
    for item in items_of(result):
        assert (item.range.start.line, item.range.start.character) == (3, 11)
    assert items_of(await complete(client, uri, 3, 12)) == []  # one past the end of the edited line
    change_doc(client, uri, 4, "a = 1\n")  # full sync replaces everything
    before = await stats(client)
    assert items_of(await complete(client, uri, 3, 0)) == []
    assert await delta(client, before, "empty") == 1
    # The server completed the edited text itself: the same answer as for that text opened in one piece.
    whole = await reopened_completion(client, uri, "z = 1\ndef f():\n    y = 2\n    return ", 3, 11)
    assert texts(result) == texts(whole)


async def test_type_through_answers_from_the_last_suggestion(client):
    uri = "file:///work/e2e/typethrough.py"
    open_doc(client, uri, DOC)
    for version, (line, character) in enumerate(CURSORS, start=2):
        items = items_of(await complete(client, uri, line, character))
        if items and len(items[0].insert_text) >= 2 and "\n" not in items[0].insert_text[:1]:
            break
    else:  # the tiny pair is seeded: this is a fixed fact about it, not luck
        pytest.fail("the tiny model gave no completion of 2+ characters at any cursor")
    text = items[0].insert_text
    before = await stats(client)
    change_doc(client, uri, version, text[0], start=(line, character))
    again = items_of(await complete(client, uri, line, character + len(text[0].encode("utf-16-le")) // 2))
    assert await delta(client, before, "typethrough_hits") == 1, (text, again)
    assert again and again[0].insert_text == text[1:]


async def test_cancel_request_stops_generation_and_server_keeps_serving(client):
    uri = "file:///work/e2e/cancel.py"
    open_doc(client, uri, BLOCK_DOC)
    await configure(client, {"maxTokens": 400})  # 400 steps of >= 25 ms: still generating when cancelled...
    for attempt in range(3):  # ... unless the random completion stops after a few tokens, before a poll sees it
        before = await stats(client)
        msg_id = f"cancel-me-{attempt}"
        future = await in_flight(client, lambda: client.protocol.send_request(
            lsp.TEXT_DOCUMENT_INLINE_COMPLETION, completion_params(uri, 1, 4), msg_id=msg_id))
        if future is not None:
            break
        change_doc(client, uri, 2 + attempt, "#", start=(0, 0))  # another prompt for the next try
    else:
        pytest.fail("no 400-token completion was ever seen in flight in 3 tries")
    client.protocol.notify(lsp.CANCEL_REQUEST, lsp.CancelParams(id=msg_id))
    try:
        result = await asyncio.wait_for(future, 30)
        assert items_of(result) == []  # an empty list is also a valid answer to a cancelled request
    except JsonRpcException as exc:  # the usual answer: -32800 RequestCancelled
        assert exc.code == -32800, exc
    assert await delta(client, before, "cancelled") == 1
    # The engine itself stopped: it reports a cancelled result, with fewer than the 400 tokens it was asked for.
    after = await wait_for_stats(client, lambda now: now["engine"]["results"] > before["engine"]["results"])
    assert after["engine"]["cancelled"] - before["engine"]["cancelled"] == 1, after["engine"]
    assert after["engine"]["generated_tokens"] - before["engine"]["generated_tokens"] < 400
    # And serves the next request in full.
    await configure(client, {"maxTokens": 24})
    before = await stats(client)
    result = await complete(client, uri, 1, 4)
    after = await stats(client)
    assert after["completed"] - before["completed"] == 1 and after["errors"] == before["errors"]
    assert after["engine"]["results"] - before["engine"]["results"] == 1
    assert after["engine"]["cancelled"] == before["engine"]["cancelled"]
    for item in items_of(result):
        assert (item.range.start.line, item.range.start.character) == (1, 4)


async def in_flight(client, send) -> asyncio.Future | None:
    """Send a request (`send()`: a coroutine to run, or the future of a request it sent) and return its future once the
    engine generates for it; None when it finished before it was seen generating (the tiny pair's random completion
    can stop after a few tokens, and a busy machine answers the polls late): the scenario did not happen, the caller
    sets it up again. An error or a cancel of the request is raised as it was answered."""
    before = await stats(client)
    request = send()
    future = (asyncio.wrap_future(request) if isinstance(request, concurrent.futures.Future)
              else asyncio.ensure_future(request))
    await wait_for_stats(client, lambda now: future.done() or engine_running(before)(now))
    if future.done():
        await future
        return None
    return future


async def test_newer_request_and_edit_supersede_the_older_request(client):
    for attempt in range(3):
        uri = f"file:///work/e2e/supersede_{attempt}.py"
        open_doc(client, uri, BLOCK_DOC)
        await configure(client, {"maxTokens": 400})
        before = await stats(client)
        first = await in_flight(client, lambda: complete(client, uri, 1, 4))
        if first is None:
            continue
        change_doc(client, uri, 2, "r", start=(1, 4))  # the edit supersedes `first`
        second = await in_flight(client, lambda: complete(client, uri, 1, 5))
        if second is None:
            await asyncio.wait_for(first, 30)
            continue
        break
    else:
        pytest.fail("no 400-token completion was ever seen in flight in 3 tries")
    await configure(client, {"maxTokens": 24})
    third = await complete(client, uri, 1, 5)  # supersedes `second`
    assert items_of(await asyncio.wait_for(first, 30)) == []
    assert items_of(await asyncio.wait_for(second, 30)) == []
    for item in items_of(third):
        assert (item.range.start.line, item.range.start.character) == (1, 5)
    after = await stats(client)
    assert after["superseded"] - before["superseded"] == 2
    assert after["completed"] + after["typethrough_hits"] - before["completed"] - before["typethrough_hits"] == 1


async def test_telemetry_notifications_are_counted(client):
    before = await stats(client)
    client.protocol.notify("codecue/didShowCompletion", {"uri": "file:///x.py", "length": 12})
    client.protocol.notify("codecue/didAcceptCompletion", {"uri": "file:///x.py", "length": 12, "acceptedLength": 5})
    client.protocol.notify("codecue/didRejectCompletion", {"uri": "file:///x.py", "length": 7})
    client.protocol.notify("codecue/didAcceptCompletion", "not an object")
    after = await stats(client)
    assert (after["shown"] - before["shown"], after["accepted"] - before["accepted"],
            after["rejected"] - before["rejected"]) == (1, 2, 1)
    assert after["accepted_chars"] - before["accepted_chars"] == 5
    for key in ("requests", "completed", "cancelled", "superseded", "typethrough_hits", "errors"):
        assert after[key] == before[key], key  # reports about suggestions are not requests
    assert set(after["latency_ms"]) == {"count", "mean", "p50", "p90"}
    assert {"drafted", "accepted", "acceptance_rate", "target_passes", "prompt_tokens_reused",
            "prompt_tokens_new"} <= set(after["engine"])


async def test_malformed_inputs_get_an_error_or_an_empty_list(client):
    uri = "file:///work/e2e/malformed.py"
    open_doc(client, uri, "x = 1\n")
    start = await stats(client)
    assert items_of(await complete(client, "file:///never/opened.py", 0, 0)) == []
    assert items_of(await complete(client, "::not a uri::", 0, 0)) == []
    assert items_of(await complete(client, uri, 50, 0)) == []
    assert items_of(await complete(client, uri, 0, 500)) == []
    assert await delta(client, start, "empty") == 4
    # A negative line is not a valid LSP position (uinteger): rejected as invalid params.
    result, error = await raw_request(client, "textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": -1, "character": 0}, "context": {"triggerKind": 1}})
    assert isinstance(error, JsonRpcException) and error.code == -32602, (result, error)
    result, error = await raw_request(client, "textDocument/inlineCompletion", {"position": "nowhere"})
    assert isinstance(error, JsonRpcException) and error.code == -32602, (result, error)
    # Bytes that are not UTF-8: the message is dropped and the document never opens.
    bad_uri = "file:///work/e2e/latin1.py"
    send_raw(client, b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": '
                     b'{"uri": "' + bad_uri.encode() + b'", "languageId": "python", "version": 1, '
                     b'"text": "caf\xe9 = 1\\n"}}}')
    assert items_of(await complete(client, bad_uri, 0, 4)) == []
    # A lone surrogate escape is valid JSON but not valid Unicode text: the document opens, the surrogate reads
    # as U+FFFD (one UTF-16 unit for one, so positions stay right), and it completes like that text.
    odd_uri = "file:///work/e2e/surrogate.py"
    send_raw(client, b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": '
                     b'{"uri": "' + odd_uri.encode() + b'", "languageId": "python", "version": 1, '
                     b'"text": "s = \\"\\ud800\\"\\nx = "}}}')
    before = await stats(client)
    after_quote = await complete(client, odd_uri, 0, 7)  # inside the line only if the surrogate is one unit
    next_line = await complete(client, odd_uri, 1, 4)
    assert await delta(client, before, "completed") == 2
    for item in items_of(after_quote):
        assert (item.range.start.line, item.range.start.character) == (0, 7)
    replaced = 's = "\ufffd"\nx = '
    assert texts(after_quote) == texts(await reopened_completion(client, odd_uri, replaced, 0, 7))
    assert texts(next_line) == texts(await reopened_completion(client, odd_uri, replaced, 1, 4))
    big_uri = "file:///work/e2e/big.py"
    open_doc(client, big_uri, "x = 1  # padding padding padding padding\n" * 125_000)  # 5 MB
    assert items_of(await complete(client, big_uri, 1000, 5)) == []
    change_doc(client, "file:///work/e2e/not-open.py", 2, "x", start=(0, 0))
    client.text_document_did_close(lsp.DidCloseTextDocumentParams(
        text_document=lsp.TextDocumentIdentifier(uri=big_uri)))
    # Still serving: none of it was an error inside the server, and the next request completes.
    before = await stats(client)
    assert before["ready"] and before["errors"] == start["errors"]
    await complete(client, uri, 1, 0)
    assert await delta(client, before, "completed") == 1


async def wait_for_workspace_documents(client, predicate) -> int:
    return (await wait_for_stats(client, lambda now: predicate(now["workspace_documents"])))["workspace_documents"]


async def test_open_documents_feed_the_workspace_index_until_closed(client):
    uri = "file:///work/e2e/workspace.py"
    open_doc(client, uri, DOC)
    change_doc(client, uri, 2, "# edited\n", start=(0, 0))  # debounced: one update after the pause
    # Every open document reaches the index, this one last (its pause ends last, one worker applies them in order):
    # so the index holds as many documents as are open only once this one is in.
    opened = (await stats(client))["resources"]["open_documents"]
    await wait_for_workspace_documents(client, lambda n: n == opened)
    client.text_document_did_close(lsp.DidCloseTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
    await wait_for_workspace_documents(client, lambda n: n == opened - 1)


SUFFIX_LINES = "".join(f"    total_{n} = compute({n}, {n + 1}) + offset_{n}\n" for n in range(40))


@pytest.mark.parametrize("middle_from", ["line", "cursor"])
async def test_a_keystroke_re_runs_only_the_cursor_line_not_the_suffix(client, middle_from):
    """middleFrom "line": a keystroke changes only the prompt's tail, so the session's KV cache keeps the suffix.
    With the plain PSM split (the default) the whole suffix runs again on every keystroke."""
    uri = f"file:///work/e2e/keystroke_{middle_from}.py"
    typed = "    value = comp"
    open_doc(client, uri, "def main(offset_0):\n" + typed + "\n" + SUFFIX_LINES)
    await configure(client, {"middleFrom": middle_from, "maxTokens": 4})
    try:
        first = texts(await complete(client, uri, 1, len(typed)))
        key = "Q" if not first or not first[0].startswith("Q") else "W"  # not what was suggested: no type-through
        change_doc(client, uri, 2, key, start=(1, len(typed)))
        before = await stats(client)
        await complete(client, uri, 1, len(typed) + 1)
        after = await stats(client)
    finally:
        await configure(client, {"middleFrom": "cursor", "maxTokens": 24})
    assert after["completed"] - before["completed"] == 1 and after["typethrough_hits"] == before["typethrough_hits"]
    new_tokens = after["engine"]["prompt_tokens_new"] - before["engine"]["prompt_tokens_new"]
    if middle_from == "line":
        assert new_tokens <= 8, new_tokens  # the line's last token or two (a merge may re-split them)
    else:
        assert new_tokens >= 64, new_tokens  # the suffix (budget 128 tokens) after the changed prefix


NEXT_LINE_DOCS = ["def add(a, b):\n    total = a", "x = 1\ny = ", "import os\npath = os.path", "values = [1, 2",
                  "def main():\n    name = ", "count = 0\nfor i in range(", "class A:\n    size = ", "z = f("]


async def _a_suggestion_with_its_next_line(client):
    """(uri, document, line, character, suggestion) of the first document where the tiny model's answer at the end
    is one line and the line after it, written in the background, is not empty."""
    for n, doc in enumerate(NEXT_LINE_DOCS):
        uri = f"file:///work/e2e/next_line_{n}.py"
        open_doc(client, uri, doc)
        line, character = doc.count("\n"), utf16_len(doc.split("\n")[-1])
        before = await stats(client)
        suggestion = texts(await complete(client, uri, line, character))
        after = await wait_for_stats(client, lambda now: now["resources"]["background"] == 0, "the writer's end")
        # pygls splits lines as str.splitlines does (form feeds too): the test's edits after such random bytes
        # would land elsewhere than the LSP positions say.
        if after["next_line_ready"] > before["next_line_ready"] and len(suggestion[0].splitlines()) == 1:
            assert after["next_line_started"] - before["next_line_started"] == 1
            return uri, doc, line, character, suggestion[0]
    pytest.fail("no document gave a one-line suggestion with a next line")  # the tiny pair is seeded: a fixed fact


async def test_the_next_line_is_ready_when_the_suggestion_is_taken_and_enter_pressed(client):
    await configure(client, {"nextLine": True, "middleFrom": "cursor"})
    try:
        uri, doc, line, character, suggestion = await _a_suggestion_with_its_next_line(client)
        before = await stats(client)
        change_doc(client, uri, 2, suggestion, start=(line, character))  # Tab: the suggestion is taken
        end = character + utf16_len(suggestion)
        taken = texts(await complete(client, uri, line, end))
        assert len(taken) == 1 and taken[0].startswith("\n"), taken  # the next line, shown after this one
        change_doc(client, uri, 3, "\n", start=(line, end))  # Enter
        entered = texts(await complete(client, uri, line + 1, 0))
        after = await stats(client)
        assert entered == [taken[0][1:]], {k: (before[k], after[k]) for k in before if isinstance(before[k], int)}
        assert after["next_line_hits"] - before["next_line_hits"] == 1
        assert after["typethrough_hits"] - before["typethrough_hits"] == 2 and after["completed"] == before["completed"]
        # What the model writes at that line when asked there: the same text.
        direct = await reopened_completion(client, uri, doc + suggestion + "\n", line + 1, 0)
        assert texts(direct) == entered
    finally:
        await configure(client, {"middleFrom": "cursor"})

