"""The prompt where the cursor rests is made ready before a keystroke there asks for it (codecue_lsp/warmup.py,
Engine.prefill)."""
import asyncio
from collections import namedtuple

import pytest
from engine_helpers import tiny_engine
from server_harness import Gate, tiny_in_process_server
from test_prompt_growth import (
    QUIET,
    ask,
    measured_server,
    prompt_tokens,
    recording,
    wait_for,
)
from test_prompt_sizing import long_document

from codecue_lsp.completer import Completer
from codecue_lsp.config import Settings
from codecue_lsp.warmup import METHOD, RestingCursor, resting_cursor
from engine import CancelToken, CompletionRequest

Position = namedtuple("Position", "line character")
Document = namedtuple("Document", "uri")
Params = namedtuple("Params", "textDocument position")


@pytest.mark.parametrize("params, expected", [
    ({"textDocument": {"uri": "file:///a.py"}, "position": {"line": 3, "character": 7}},
     RestingCursor("file:///a.py", 3, 7)),
    ({"textDocument": {"uri": "file:///a.py", "version": 4}, "position": {"line": 0, "character": 0}},
     RestingCursor("file:///a.py", 0, 0)),
    (Params(Document("file:///a.py"), Position(2, 5)), RestingCursor("file:///a.py", 2, 5)),  # as pygls hands it
    ({"textDocument": {"uri": "file:///a.py"}}, None),
    ({"position": {"line": 1, "character": 1}}, None),
    ({"textDocument": {"uri": ""}, "position": {"line": 1, "character": 1}}, None),
    ({"textDocument": {"uri": 7}, "position": {"line": 1, "character": 1}}, None),
    ({"textDocument": {"uri": "file:///a.py"}, "position": {"line": -1, "character": 1}}, None),
    ({"textDocument": {"uri": "file:///a.py"}, "position": {"line": True, "character": 1}}, None),
    ({"textDocument": {"uri": "file:///a.py"}, "position": {"line": "1", "character": 1}}, None),
    ({"textDocument": {"uri": "file:///a.py"}, "position": {"line": 1, "character": 2 ** 40}}, None),
    ([1, 2], None),
    (None, None),
])
def test_the_resting_cursor_is_read_from_text_document_position_params(params, expected):
    assert resting_cursor(params) == expected


def test_prepare_at_cursor_setting_and_flag():
    from codecue_lsp.__main__ import cli_settings, parse_args

    assert Settings().prepare_at_cursor is True
    assert Settings().merged({"prepareAtCursor": False}).prepare_at_cursor is False
    assert Settings().merged({"prepareAtCursor": "lots"}).prepare_at_cursor is True
    assert Settings().merged(cli_settings(parse_args(["--prepare-at-cursor", "off"]))).prepare_at_cursor is False


def test_a_prefilled_session_answers_with_nothing_left_to_compute_and_as_a_fresh_engine_would():
    engine = tiny_engine("none")
    try:
        completer, settings = Completer(engine), Settings(max_tokens=8)
        doc, line, character = long_document()
        prepared = completer.prepare(doc, line, character, settings)
        assert completer.prefill(prepared, CancelToken()).result() == prepared.ready_tokens
        text, result = completer.complete(prepared)
        assert result.stats.new_prompt_tokens == 0 and result.stats.reused_prompt_tokens == prepared.ready_tokens
        fresh = tiny_engine("none")
        try:
            alone = fresh.complete(CompletionRequest(list(prepared.request.prompt_ids), 8, heal=prepared.request.heal,
                                                     stop=prepared.request.stop))
        finally:
            fresh.close()
        assert result.token_ids == alone.token_ids
    finally:
        engine.close()


def assignments(n: int) -> str:
    """n lines of code to prefill: long enough for several chunks of a prefill at 200."""
    return "".join(f"value_{i} = compute({i})\n" for i in range(n))


def set_after_each_pass(cache, token: CancelToken) -> list[int]:
    """Make `token` set after each of cache's passes (a keystroke arriving mid-prefill); returns the passes' widths."""
    widths, forward = [], cache.forward

    def forward_then_set(new_ids, *args, **kwargs):
        widths.append(len(new_ids))
        out = forward(new_ids, *args, **kwargs)
        token.set()
        return out
    cache.forward = forward_then_set
    return widths


def test_a_cancelled_prefill_keeps_what_it_computed_and_goes_on_from_there():
    engine = tiny_engine("none")
    try:
        ids = engine.encode(assignments(200))
        assert len(ids) > 1200
        token = CancelToken()
        token.set()
        assert engine.prefill("doc", ids, token).result() == 0  # cancelled before its first chunk
        later = CancelToken()
        calls = set_after_each_pass(engine._session("doc").target, later)
        held = engine.prefill("doc", ids, later).result()
        assert held == calls[0] and 0 < held < len(ids)
        assert engine.prefill("doc", ids).result() == len(ids)
        assert sum(calls) == len(ids)  # the second call computed only what the first left
    finally:
        engine.close()


def test_a_prefill_readies_the_draft_models_view_too_and_the_request_drafts_from_it_at_once():
    engine = tiny_engine("same")  # the draft model is the target: every draft is accepted
    try:
        prefix = assignments(60)
        ids = engine.encode_fim(prefix, "\nprint(value_0)\n")
        assert engine.prefill("doc", ids).result() == len(ids)
        session = engine._session("doc")
        view = engine._draft_view()(ids)
        assert len(view) < len(ids) and session.draft.ids == view  # the code around the cursor, not the whole prompt
        draft_passes = []
        forward = session.draft.forward
        session.draft.forward = lambda new_ids, *a, **k: draft_passes.append(len(new_ids)) or forward(new_ids, *a, **k)
        warm = engine.complete(CompletionRequest(ids, 12, session="doc", drafter="draft", max_draft_tokens=4))
        assert draft_passes and max(draft_passes) <= 5  # no catch-up pass: drafts and the accepted tokens fed back
        cold = tiny_engine("same").complete(CompletionRequest(ids, 12, drafter="draft", max_draft_tokens=4))
        alone = tiny_engine("none").complete(CompletionRequest(ids, 12, drafter="none"))
        assert warm.token_ids == cold.token_ids == alone.token_ids
        assert warm.stats.new_prompt_tokens == 0
    finally:
        engine.close()


def test_a_cancel_during_the_targets_prefill_leaves_the_draft_model_alone():
    engine = tiny_engine("same")
    try:
        ids = engine.encode_fim(assignments(200), "\n")
        token = CancelToken()
        set_after_each_pass(engine._session("doc").target, token)
        held = engine.prefill("doc", ids, token).result()
        assert 0 < held < len(ids) and engine._session("doc").draft.ids == []
    finally:
        engine.close()


def test_a_keystroke_during_the_draft_models_prefill_stops_it_and_keeps_its_chunks():
    engine = tiny_engine("same")
    try:
        ids = engine.encode_fim(assignments(200), "\n")
        view = engine._draft_view()(ids)
        assert len(view) > 300  # more than one chunk of the draft model's prefill
        token = CancelToken()
        chunks = set_after_each_pass(engine._session("doc").draft, token)
        assert engine.prefill("doc", ids, token).result() == len(ids)  # the target's prefill had finished
        assert len(chunks) == 1 and engine._session("doc").draft.ids == view[:chunks[0]]
        engine.prefill("doc", ids).result()  # the next rest goes on from there
        assert engine._session("doc").draft.ids == view
    finally:
        engine.close()


@pytest.mark.parametrize("next_session, next_ids, abandoned", [
    ("doc", "same", False),    # the same prompt again (the next rest at the same place): the pass goes on
    ("doc", "other", True),    # another prompt of the document: the cancelled pass stops
    ("other", "same", True),   # another document
])
def test_a_prefill_abandons_a_cancelled_pass_it_does_not_share(next_session, next_ids, abandoned):
    engine = tiny_engine("none")
    try:
        ids = engine.encode("def f(value):\n    return value + 1\n" * 8)
        token = CancelToken()
        stop_pass = engine.shared_passes.finishing_for("doc", ids, token)(len(ids))  # a pass running, inside shared
        token.set()  # then cancelled: it ends unless the next work does not share it
        later = ids if next_ids == "same" else engine.encode("x = 1\n") + ids
        engine.prefill(next_session, later).result()
        assert stop_pass() is abandoned
    finally:
        engine.close()


# --- in the server ----------------------------------------------------------------------------------------------
URI = "file:///w/long.py"


def rest_at(client, line: int, character: int, uri: str = URI) -> None:
    client.notify(METHOD, {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}})


def typed(text: str, what: str) -> str:
    return text.replace("def last(value):\n    ", "def last(value):\n    " + what, 1)


async def count(client, name: str) -> int:
    return (await client.stats())[name]


@pytest.mark.asyncio
async def test_a_resting_cursor_gets_its_prompt_ready_and_the_first_keystroke_finds_it_computed():
    async with measured_server() as client:
        server = client.server
        submitted = recording(server.completer)
        doc, line, character = long_document()
        client.open(URI, doc.text)
        rest_at(client, line, character)

        async def ready():
            return await count(client, "warmup_ready") == 1
        await wait_for(ready, "the prompt at the cursor to be ready")
        assert await count(client, "warmup_started") == 1
        # A cold start's layout (512 tokens here): its growth follows while the user still reads.
        async def grown():
            return await count(client, "growth_taken") == 1
        await wait_for(grown, "the full-size prompt to be taken over")

        client.change(URI, 2, typed(doc.text, "r"))
        await ask(client, line, character + 1)
        prepared, future = submitted[-1]
        stats = future.result().stats
        assert prepared.built.kept and 768 < prompt_tokens(prepared) <= 1024
        assert stats.reused_prompt_tokens > 700 and stats.new_prompt_tokens < 40


@pytest.mark.asyncio
async def test_without_prepare_at_cursor_the_first_keystroke_computes_its_whole_prompt():
    async with measured_server(prepare_at_cursor=False) as client:
        server = client.server
        submitted = recording(server.completer)
        doc, line, character = long_document()
        client.open(URI, doc.text)
        rest_at(client, line, character)
        # The stats request is answered after the rest notification was handled (messages are handled in order),
        # and a rest starts its warm-up in that handler when it is on (the test above): nothing was started or kept.
        assert await count(client, "warmup_started") == 0
        assert server.background.resting_cursor is None and server.scheduler.background is None
        client.change(URI, 2, typed(doc.text, "r"))
        await ask(client, line, character + 1)
        stats = submitted[-1][1].result().stats
        assert stats.reused_prompt_tokens == 0 and stats.new_prompt_tokens > 400


@pytest.mark.asyncio
async def test_a_rest_waits_for_the_request_in_flight_and_a_keystroke_after_it_makes_it_stale():
    async with tiny_in_process_server({**QUIET, "cold_prompt_tokens": "off"}) as client:
        server = client.server
        engine = server.completer.engine
        complete = engine.complete  # runs on the engine's worker thread: a gate there leaves the loop serving
        doc, line, character = long_document()
        client.open(URI, doc.text)
        gate = Gate()
        engine.complete = gate.wrap(complete)
        _, answer = client.complete(URI, line, character)
        await gate.wait_entered()  # the request holds the engine
        rest_at(client, 3, 0)
        await asyncio.sleep(0.05)
        assert await count(client, "warmup_started") == 0 and server.background.resting_cursor is not None
        gate.opened.set()
        await asyncio.wait_for(answer, 30)

        async def started():
            return await count(client, "warmup_started") == 1
        await wait_for(started, "the rest to be taken up after the answer")

        async def idle():
            return server.scheduler.background is None
        await wait_for(idle, "the warm-up to end")

        # A rest, then typing before the engine is free: that keystroke's request prepares its own prompt.
        gate = Gate()
        engine.complete = gate.wrap(complete)
        server.typethrough.forget(URI)  # (it would answer the same cursor again without the engine)
        _, answer = client.complete(URI, line, character)
        await gate.wait_entered()
        rest_at(client, 5, 0)
        client.change(URI, 2, typed(doc.text, "r"))
        gate.opened.set()
        await asyncio.wait_for(answer, 30)
        engine.complete = complete
        await ask(client, line, character + 1)
        await asyncio.sleep(0.1)
        assert await count(client, "warmup_started") == 1 and server.background.resting_cursor is None


@pytest.mark.asyncio
async def test_a_malformed_or_misplaced_rest_is_ignored_and_the_server_keeps_serving():
    async with tiny_in_process_server(QUIET) as client:
        doc, line, character = long_document()
        client.open(URI, doc.text)
        client.notify(METHOD, {"textDocument": {"uri": URI}})
        client.notify(METHOD, "nonsense")
        rest_at(client, 10_000, 0)  # outside the document
        rest_at(client, 1, 0, uri="file:///w/not-open.py")
        await asyncio.sleep(0.1)
        stats = await client.stats()
        assert stats["warmup_started"] == 0 and stats["errors"] == 0
        response = await ask(client, line, character)
        assert "result" in response


@pytest.mark.asyncio
async def test_a_rest_replaces_a_growth_but_waits_for_the_same_documents_next_line():
    async with measured_server() as client:
        server = client.server
        gate = Gate()
        server.completer.prepare_growth = gate.wrap(server.completer.prepare_growth)
        doc, line, character = long_document()
        other = "file:///w/other.py"
        client.open(URI, doc.text)
        client.open(other, doc.text)
        rest_at(client, line, character)
        await gate.wait_entered()  # ready, and its growth holds the engine's background slot
        assert await count(client, "warmup_ready") == 1 and await count(client, "growth_started") == 1

        rest_at(client, 3, 0)  # the user moved: the growth gives way, even in the same document
        await asyncio.sleep(0.05)
        assert await count(client, "warmup_started") == 2 and server.background.resting_cursor is None
        gate.opened.set()

        async def idle():
            return server.scheduler.background is None and await count(client, "warmup_ready") == 2
        await wait_for(idle, "the second warm-up (and the growth after it) to end")

        # The same document's next line being written: a rest there waits for it; one elsewhere does not.
        writer = server.scheduler.begin_background(URI, 1, ("next_line", doc.text))
        rest_at(client, 5, 0)
        await asyncio.sleep(0.05)
        assert await count(client, "warmup_started") == 2 and server.background.resting_cursor.line == 5
        server.scheduler.finish(writer)
        server.background.start_idle()  # what the writer's end runs (next_line.start_next_line)
        assert await count(client, "warmup_started") == 3

        writer = server.scheduler.begin_background(URI, 1, ("next_line", doc.text + "x"))
        rest_at(client, line, character, uri=other)
        await asyncio.sleep(0.05)
        assert await count(client, "warmup_started") == 4 and not writer.live
