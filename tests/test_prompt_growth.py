"""A prompt nothing is cached for starts at the cold size; the full one is prefilled in the background and taken
over (prompt/sizing.py, completer.py, growth.py)."""
import asyncio
import contextlib

import pytest
from engine_helpers import tiny_engine
from server_harness import Gate, tiny_in_process_server
from test_prompt_sizing import Measured, long_document

from codecue_lsp.completer import Completer
from codecue_lsp.config import Settings
from codecue_lsp.prompt import OpenDocument
from codecue_lsp.prompt.sizing import (
    SMALLEST_COLD_TOTAL,
    cold_total,
    cold_total_for_prefill_rate,
)
from engine import CancelToken, CompletionRequest


@pytest.mark.parametrize("tokens_per_s, cold", [
    (None, None),                 # not measured (GPU, formats given by name): no smaller start
    (0.0, None),
    (5.0, SMALLEST_COLD_TOTAL),   # a very slow machine still gets a useful prompt
    (49.0, 512),                  # llama.cpp on 2 Zen 3 cores: 588 tokens in 12 s, in steps of 128
    (90.0, 1024),
    (5000.0, 59_904),             # 60,000 in steps of 128; capped by the total (cold_total)
])
def test_the_cold_size_is_what_the_machine_prefills_in_a_few_seconds(tokens_per_s, cold):
    assert cold_total_for_prefill_rate(tokens_per_s) == cold


@pytest.mark.parametrize("setting, total, auto_cold, expected", [
    ("auto", 1024, 512, 512),
    ("auto", 1024, None, 1024),    # rate not measured
    ("auto", 1536, 60_000, 1536),  # a fast machine: never above the total, so nothing grows
    ("off", 1024, 512, 1024),
    (384, 1024, 512, 384),
    (2048, 1024, 512, 1024),
])
def test_the_cold_size_under_each_setting(setting, total, auto_cold, expected):
    assert cold_total(setting, total, auto_cold) == expected


def test_cold_prompt_tokens_setting_and_flag(capsys):
    from codecue_lsp.__main__ import cli_settings, main, parse_args

    assert Settings().cold_prompt_tokens == "auto"
    assert Settings().merged({"coldPromptTokens": "OFF"}).cold_prompt_tokens == "off"
    assert Settings().merged({"coldPromptTokens": 384}).cold_prompt_tokens == 384
    assert Settings().merged({"cold_prompt_tokens": "640"}).cold_prompt_tokens == 640
    for bad in (64, "lots", True, 10 ** 6, [512]):
        assert Settings().merged({"coldPromptTokens": bad}).cold_prompt_tokens == "auto", bad
    assert Settings().merged(cli_settings(parse_args(["--cold-prompt-tokens", "off"]))).cold_prompt_tokens == "off"
    assert main(["--check", "--cold-prompt-tokens", "lots"]) == 2
    assert "--cold-prompt-tokens" in capsys.readouterr().err


def measured_engine(rate):
    engine = tiny_engine("none")
    if rate is not None:
        measured = Measured(rate)
        engine.pair.calibration, engine.pair.choice = measured.calibration, measured.choice
    return engine


def prompt_tokens(prepared) -> int:
    return len(prepared.request.prompt_ids) + bool(prepared.request.heal)  # healing held one token back


@pytest.mark.parametrize("rate, cold, grows", [
    (50.0, "auto", True),   # measured slow: 512 first, then 1,024
    (50.0, "off", False),   # told not to: the full size at once
    (None, "auto", False),  # not measured: the full size (1,536) at once
])
def test_a_fresh_layout_starts_at_the_cold_size(rate, cold, grows):
    engine = measured_engine(rate)
    try:
        completer, settings = Completer(engine), Settings(cold_prompt_tokens=cold)
        doc, line, character = long_document()
        first = completer.prepare(doc, line, character, settings)
        size = completer.cold_prompt_tokens(settings) if grows else completer.prompt_tokens(settings)
        assert 0.75 * size < prompt_tokens(first) <= size
        assert first.grows is grows and not first.built.kept
        # The next keystroke keeps the layout, small or not: only a layout chosen afresh is a cold start.
        doc.text = doc.text.replace("def last(value):\n    ", "def last(value):\n    r", 1)
        second = completer.prepare(doc, line, character + 1, settings)
        assert second.built.kept and second.grows is grows
        assert (completer.prepare_growth(doc, line, character + 1, settings) is None) is not grows
    finally:
        engine.close()


def test_a_document_whose_whole_prompt_fits_the_cold_size_has_nothing_to_grow():
    engine = measured_engine(50.0)
    try:
        completer, settings = Completer(engine), Settings()
        doc = OpenDocument("file:///short.py", "python", "import os\n\n\ndef f(value):\n    return value\n\n\nx = ")
        prepared = completer.prepare(doc, 7, 4, settings)
        assert not prepared.grows and prepared.built.layout.total == completer.prompt_tokens(settings) == 1024
        assert completer.prepare_growth(doc, 7, 4, settings) is None
    finally:
        engine.close()


def test_the_grown_prompt_is_taken_over_computed_and_answers_as_a_fresh_engine_would():
    engine = measured_engine(50.0)
    try:
        completer, settings = Completer(engine), Settings(max_tokens=8)
        doc, line, character = long_document()
        small = completer.prepare(doc, line, character, settings)
        completer.complete(small)
        full = completer.prepare_growth(doc, line, character, settings)
        assert 0.75 * 1024 < prompt_tokens(full) <= 1024
        # Kept while it grows: a second try after a pause shares what the first one computed.
        again = completer.prepare_growth(doc, line, character, settings)
        assert again.built.kept and list(again.request.prompt_ids) == list(full.request.prompt_ids)
        assert completer.grow(full, CancelToken()).result() == full.ready_tokens
        # Until taken, keystrokes still get the small layout, computed.
        still = completer.prepare(doc, line, character, settings)
        assert still.grows and still.built.kept and result_reuses_all(completer, still)

        completer.take_growth(full)
        taken = completer.prepare(doc, line, character, settings)
        assert taken.built.kept and not taken.grows
        assert list(taken.request.prompt_ids) == list(full.request.prompt_ids)
        text, result = completer.complete(taken)
        assert result.stats.reused_prompt_tokens == full.ready_tokens and result.stats.new_prompt_tokens == 0
        fresh = tiny_engine("none")
        try:
            alone = fresh.complete(CompletionRequest(list(taken.request.prompt_ids), 8, heal=taken.request.heal,
                                                     stop=taken.request.stop))
        finally:
            fresh.close()
        assert result.token_ids == alone.token_ids
        assert completer.prepare_growth(doc, line, character, settings) is None  # nothing left to grow
    finally:
        engine.close()


def result_reuses_all(completer, prepared) -> bool:
    _, result = completer.complete(prepared)
    return result.stats.new_prompt_tokens == 0


# --- in the server: after the first answer, while nothing else runs ---------------------------------------------
URI = "file:///w/long.py"


async def wait_for(condition, what: str) -> None:
    for _ in range(400):
        if await condition():
            return
        await asyncio.sleep(0.02)
    pytest.fail(f"timed out waiting for {what}")


def recording(completer):
    """Record each prepared request the completer submits and its result."""
    submitted = []
    submit = completer.submit

    def recorded(prepared, token):
        future = submit(prepared, token)
        submitted.append((prepared, future))
        return future
    completer.submit = recorded
    return submitted


QUIET = {"debounce_ms": 0, "max_tokens": 4, "drafter": "none", "next_line": False}  # no next line: growth alone


@contextlib.asynccontextmanager
async def measured_server(**settings):
    """An in-process server whose engine's calibration says 50 tok/s of prefill: a fresh layout starts cold."""
    async with tiny_in_process_server({**QUIET, **settings}) as client:
        client.server.completer = Completer(measured_engine(50.0), syntax=client.server.syntax)
        yield client


async def ask(client, line: int, character: int, uri: str = URI) -> dict:
    return await client.call("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
        "context": {"triggerKind": 2}})


@pytest.mark.asyncio
async def test_the_server_grows_a_cold_prompt_after_its_answer_and_a_keystroke_stops_it():
    async with measured_server() as client:
        server = client.server
        submitted = recording(server.completer)
        gate = Gate()
        server.completer.prepare_growth = gate.wrap(server.completer.prepare_growth)
        doc, line, character = long_document()
        client.open(URI, doc.text)

        await ask(client, line, character)
        first = submitted[0][0]
        assert first.grows and prompt_tokens(first) <= 512
        await gate.wait_entered()  # the growth started after the answer, and is held in its prompt step
        assert (await client.stats())["growth_started"] == 1

        # A keystroke that needs the engine stops it: nothing is taken over, the small layout answers.
        typed = doc.text.replace("def last(value):\n    ", "def last(value):\n    r", 1)
        client.change(URI, 2, typed)
        _, answer = client.complete(URI, line, character + 1)
        await asyncio.sleep(0.05)
        gate.opened.set()
        await asyncio.wait_for(answer, 30)
        assert submitted[1][0].grows and submitted[1][1].result().stats.new_prompt_tokens < 40

        # That answer restarts the growth; this time it runs to the end and is taken over.
        async def taken():
            return (await client.stats())["growth_taken"] == 1
        await wait_for(taken, "the grown prompt to be taken over")
        assert (await client.stats())["growth_started"] == 2
        server.typethrough.forget(URI)  # a keystroke that follows the suggestion would be answered from there
        client.change(URI, 3, typed.replace("def last(value):\n    r", "def last(value):\n    re", 1))
        await ask(client, line, character + 2)
        grown, future = submitted[-1]
        stats = future.result().stats
        assert not grown.grows and 768 < prompt_tokens(grown) <= 1024
        assert stats.reused_prompt_tokens > 700 and stats.new_prompt_tokens < 40
        assert (await client.stats())["growth_started"] == 2  # nothing more to grow
