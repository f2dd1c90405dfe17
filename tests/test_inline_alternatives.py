"""Several suggestions for a request the user made (triggerKind Invoked), the confidence in each item, and the
minConfidence gate: through the real server's protocol, on the tiny engine (server_harness.InProcessClient)."""
from __future__ import annotations

import asyncio
import threading

import pytest
from server_harness import HANG_GUARD_S, tiny_in_process_server

URI = "file:///alt.py"
TEXT = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    \n"
AUTOMATIC, INVOKED = 2, 1
# Positions whose prompts differ, so the tiny (random) model writes suggestions of several kinds.
CURSORS = [(5, 4), (1, 4), (1, 10), (4, 14)]


def request(client, line: int, character: int, kind: int):
    return client.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": URI}, "position": {"line": line, "character": character},
        "context": {"triggerKind": kind}})


async def items(client, line: int, character: int, kind: int) -> list[dict]:
    _, future = request(client, line, character, kind)
    response = await asyncio.wait_for(future, HANG_GUARD_S * 2)
    return response["result"]["items"]


def settings(**extra) -> dict:
    return {"debounce_ms": 0, "max_tokens": 12, "drafter": "none", "next_line": False, "prepare_at_cursor": False,
            **extra}


@pytest.mark.asyncio
async def test_invoked_returns_the_automatic_item_first_then_distinct_alternatives():
    async with tiny_in_process_server(settings()) as client:
        client.open(URI, TEXT)
        with_alternatives = 0
        for line, character in CURSORS:
            automatic = await items(client, line, character, AUTOMATIC)
            assert len(automatic) <= 1
            invoked = await items(client, line, character, INVOKED)
            if not automatic:
                assert invoked == []  # no first item: nothing to cycle through either
                continue
            assert invoked[0]["insertText"] == automatic[0]["insertText"]
            assert invoked[0]["range"] == automatic[0]["range"]
            assert len(invoked) <= 3
            texts = [item["insertText"] for item in invoked]
            assert len(set(texts)) == len(texts) and all(text.strip() for text in texts)
            # written by the engine: the automatic one and the alternatives (items[0] now comes from type-through)
            for item in automatic + invoked[1:]:
                assert 0.0 < item["codecue"]["confidence"] <= 1.0
            with_alternatives += len(invoked) > 1
        stats = await client.stats()
    assert with_alternatives > 0, "the tiny model gave no alternative anywhere"
    assert stats["invoked"] == len(CURSORS) and stats["alternatives"] >= with_alternatives


@pytest.mark.asyncio
async def test_automatic_requests_write_one_completion_only():
    async with tiny_in_process_server(settings()) as client:
        client.open(URI, TEXT)
        ranks: list[int] = []
        engine = client.server.completer.engine
        original = engine.complete

        def complete(req, *args, **kwargs):
            ranks.append(req.first_rank)
            return original(req, *args, **kwargs)
        engine.complete = complete
        for line, character in CURSORS:
            await items(client, line, character, AUTOMATIC)
        assert ranks == [0] * len(CURSORS)
        await items(client, *CURSORS[0], INVOKED)
    # The invoked request's first item comes from type-through (the same cursor): its prompt's greedy answer (rank 0)
    # is tried as an alternative too, then the next-best first tokens.
    later = ranks[len(CURSORS):]
    assert later[0] == 0 and later == sorted(later) and max(later) >= 1


@pytest.mark.asyncio
async def test_an_edit_while_alternatives_are_written_empties_the_answer():
    async with tiny_in_process_server(settings()) as client:
        client.open(URI, TEXT)
        line, character = next_cursor = CURSORS[0]
        assert await items(client, line, character, AUTOMATIC), "the tiny model wrote nothing here"
        engine = client.server.completer.engine
        original = engine.complete
        entered, release = threading.Event(), threading.Event()

        def complete(req, *args, **kwargs):
            if req.first_rank > 0:
                entered.set()
                release.wait(HANG_GUARD_S)
            return original(req, *args, **kwargs)
        engine.complete = complete
        _, future = request(client, *next_cursor, INVOKED)
        assert await asyncio.to_thread(entered.wait, HANG_GUARD_S * 2)
        client.change(URI, 2, TEXT + "x")
        release.set()
        response = await asyncio.wait_for(future, HANG_GUARD_S * 2)
    assert response["result"]["items"] == []


@pytest.mark.asyncio
async def test_min_confidence_holds_back_automatic_suggestions_only():
    async with tiny_in_process_server(settings(min_confidence=1.0)) as client:
        client.open(URI, TEXT)
        automatic = [await items(client, line, character, AUTOMATIC) for line, character in CURSORS]
        invoked = [await items(client, line, character, INVOKED) for line, character in CURSORS]
        stats = await client.stats()
    assert all(answer == [] for answer in automatic)
    assert stats["gated"] >= 1 and any(invoked)
    assert stats["gated"] == sum(1 for answer in invoked if answer)  # each of them was held back automatically


@pytest.mark.asyncio
async def test_min_confidence_zero_is_off():
    async with tiny_in_process_server(settings()) as client:
        client.open(URI, TEXT)
        answers = [await items(client, line, character, AUTOMATIC) for line, character in CURSORS]
        stats = await client.stats()
    assert any(answers) and stats["gated"] == 0


@pytest.mark.parametrize("value,expected", [(0.25, 0.25), ("0.5", 0.5), (0, 0.0), (1, 1.0), ("auto", None),
                                            (1.5, None), (-0.1, None), (True, None), ("high", None)])
def test_min_confidence_setting(value, expected):
    from codecue_lsp.config import Settings

    assert Settings().merged({"minConfidence": value}).min_confidence == expected


@pytest.mark.asyncio
async def test_auto_min_confidence_is_the_loaded_pairs_threshold():
    """minConfidence "auto" (the default): the gate uses what models.toml gives the loaded pair (loading.py)."""
    async with tiny_in_process_server(settings(min_confidence="auto")) as client:
        client.server.pair_min_confidence = 1.0  # as if the pair's models.toml entry said so
        client.open(URI, TEXT)
        automatic = [await items(client, line, character, AUTOMATIC) for line, character in CURSORS]
        stats = await client.stats()
    assert all(answer == [] for answer in automatic) and stats["gated"] >= 1 and stats["min_confidence"] == 1.0


def test_the_default_pair_has_a_measured_threshold_and_others_none():
    from codecue_lsp.loading import pair_min_confidence

    assert 0.0 < pair_min_confidence("default") < 1.0  # models.toml; docs/performance.md says how it was chosen
    assert pair_min_confidence("no-such-pair") == 0.0


@pytest.mark.asyncio
async def test_a_held_back_suggestion_typed_into_shows_its_rest_without_the_engine():
    """The gate hid it, the user typed its first character anyway: the rest is answered from the type-through cache
    (the start it was unsure of is now written), with no new engine call."""
    async with tiny_in_process_server(settings(min_confidence=1.0)) as client:
        server = client.server
        client.open(URI, TEXT)
        for line, character in CURSORS:
            before = await client.stats()
            assert await items(client, line, character, AUTOMATIC) == []
            after = await client.stats()
            if after["gated"] == before["gated"] + 1:
                break
        else:
            pytest.fail("no suggestion was held back")
        lines = TEXT.split("\n")
        text = server.typethrough._last[URI].text  # the suggestion the gate hid
        typed = text[0]
        new_lines = lines[:line] + [lines[line][:character] + typed + lines[line][character:]] + lines[line + 1:]
        client.change(URI, 2, "\n".join(new_lines))
        shown = await items(client, line, character + 1, AUTOMATIC)
        final = await client.stats()
    assert [item["insertText"] for item in shown] == [text[1:]]
    assert final["typethrough_hits"] == after["typethrough_hits"] + 1 and final["completed"] == after["completed"]
