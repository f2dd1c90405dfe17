"""textDocument/inlineCompletion, from the request to the answer; then the next line, while the user reads.

An answer comes from the type-through cache (the user is typing the suggestion on screen, or the next line written
in the background is wanted: next_line.py) or from the engine (after the debounce, with a prompt built on the prompt
worker). After an answer that completes the cursor's line, the next line is written in the background; after any
answer, the idle work goes on (background.py).
"""
from __future__ import annotations

import asyncio
import logging
import time

from lsprotocol import types as lsp

from .alternatives import Suggestion, distinct, write_alternatives
from .config import MAX_DOCUMENT_CHARS
from .next_line import written_line_for
from .positions import count_units, cursor_at, item_edit, utf16_units
from .prompt import OpenDocument
from .scheduler import await_engine, debounce
from .telemetry import count_engine_results

logger = logging.getLogger(__name__)


def empty() -> lsp.InlineCompletionList:
    return lsp.InlineCompletionList(items=[])


def completion_list(suggestions: list[Suggestion], cursor, doc_text: str, units) -> dict | lsp.InlineCompletionList:
    """The InlineCompletionList as JSON: lsprotocol's item has no place for the confidence, which goes in each item's
    own `codecue` object ({"confidence": p}, where known) for the replay harness (replay/runner.py) to read; editors
    ignore fields they do not know."""
    items = []
    for suggestion in suggestions:
        edit = item_edit(suggestion.text, cursor, doc_text, units)
        if edit is None:
            continue
        item: dict = {"insertText": edit.insert_text,
                      "range": {"start": {"line": edit.line, "character": edit.start_character},
                                "end": {"line": edit.line, "character": edit.end_character}}}
        if suggestion.confidence is not None:
            item["codecue"] = {"confidence": suggestion.confidence}
        items.append(item)
    return {"items": items} if items else empty()


def invoked(params: lsp.InlineCompletionParams) -> bool:
    """The user asked (a manual trigger, or the editor wants more suggestions to cycle), not typing."""
    context = params.context
    return context is not None and context.trigger_kind == lsp.InlineCompletionTriggerKind.Invoked


async def inline_completion(ls, params: lsp.InlineCompletionParams) -> dict | lsp.InlineCompletionList:
    started = time.perf_counter()
    tel = ls.telemetry
    tel.count("requests")
    asked = invoked(params)
    if asked:
        tel.count("invoked")
    snap = ls.snapshot(params.text_document.uri)
    if snap is None:
        logger.info("inlineCompletion for a document that is not open: %s", params.text_document.uri)
        tel.count("empty")
        return empty()
    if not ls.settings.language_enabled(snap.language_id) or len(snap.text) > MAX_DOCUMENT_CHARS:
        tel.count("empty")
        return empty()
    units = ls.position_units()
    cursor = cursor_at(snap.text, params.position.line, params.position.character, units)
    if cursor is None:
        logger.info("position %s is outside %s", params.position, snap.uri)
        tel.count("empty")
        return empty()
    prefix, line_suffix = cursor.prefix(snap.text), cursor.line_suffix(snap.text)

    ticket, older = ls.scheduler.begin(snap.uri, snap.version)
    if older is not None:
        tel.count("superseded")
    plan, answered = None, False
    character_utf16 = count_units(cursor.line_prefix(snap.text), utf16_units)

    def stale() -> bool:  # an edit, a newer request or a cancel arrived: the answer is empty
        return not ticket.live or ls.current_version(snap.uri) != snap.version
    try:
        prepared = None
        rest = ls.typethrough.lookup(snap.uri, prefix, line_suffix)
        if rest is None:
            rest = await written_line_for(ls, snap.uri, prefix, line_suffix, ticket)
        if rest is not None:
            tel.count("typethrough_hits")
            ls.typethrough.remember(snap.uri, prefix, line_suffix, rest)  # typing on continues from here
            tel.latency(time.perf_counter() - started)
            plan = ls.background.typethrough_answered(snap, cursor, rest)
            answered = True
            first = Suggestion(rest.replace("\r\n", "\n"))
        else:
            ls.scheduler.stop_background()  # this request needs the engine
            if not ls.ready:
                tel.count("not_ready")
                return empty()
            if not await debounce(ticket, ls.settings.debounce_ms / 1000.0):
                return empty()
            doc = OpenDocument(uri=snap.uri, language_id=snap.language_id, text=snap.text)
            prepared = await ls.prepare_prompt(ticket, doc, cursor.line, character_utf16)
            # An edit, a newer request or a cancel that arrived while the prompt was built wins.
            if prepared is None or stale():
                tel.count("stale")
                return empty()
            future = ls.completer.submit(prepared, ticket.token)
            count_engine_results(future, tel)
            completion = await await_engine(future, ticket.token)
            if stale():
                tel.count("stale")
                return empty()
            if completion.outcome == "failed":  # nothing to show, nor to remember for type-through
                tel.count("failed")
                return empty()
            text = ls.completer.finish(prepared, completion)
            tel.count("completed")
            tel.latency(time.perf_counter() - started)
            answered = True
            if not asked and held_back(completion.confidence, ls.min_confidence(), text):
                tel.count("gated")
                ls.typethrough.remember_held_back(snap.uri, prefix, line_suffix, text)
                return empty()
            ls.typethrough.remember(snap.uri, prefix, line_suffix, text)
            plan = ls.background.engine_answered(snap, cursor, character_utf16, prepared, completion, text)
            first = Suggestion(text, completion.confidence)
        if not asked or not distinct([first]):
            return completion_list([first], cursor, snap.text, units)
        more = await write_alternatives(ls, ticket, snap, cursor, character_utf16, prepared, first, stale)
        if more is None:
            tel.count("stale")
            return empty()
        tel.count("alternatives", len(more))
        return completion_list([first, *more], cursor, snap.text, units)
    except asyncio.CancelledError:
        tel.count("cancelled")
        raise
    except Exception:
        tel.count("errors")
        logger.exception("inlineCompletion failed for %s", snap.uri)
        raise
    finally:
        ls.scheduler.finish(ticket)
        if plan is not None:
            ls.background.write_next_line(plan)
        if answered:  # not after a cancelled request: the keystroke that cancelled it is one request away
            ls.background.start_idle()  # when nothing else runs: the next line goes first


def held_back(confidence: float | None, min_confidence: float, text: str) -> bool:
    """The confidence gate (setting minConfidence): a suggestion with code whose confidence is known and below it."""
    return bool(text.strip()) and confidence is not None and confidence < min_confidence
