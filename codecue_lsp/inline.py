"""textDocument/inlineCompletion, from the request to the answer; then the next line, while the user reads.

An answer comes from the type-through cache (the user is typing the suggestion on screen, or the next line written
in the background is wanted: next_line.py) or from the engine (after the debounce, with a prompt built on the prompt
worker). After an answer that completes the cursor's line, the next line is written in the background.
"""
from __future__ import annotations

import asyncio
import logging
import time

from lsprotocol import types as lsp

from .config import MAX_DOCUMENT_CHARS
from .growth import plan_growth
from .next_line import ends_its_line, next_line, start_next_line, written_line_for
from .positions import count_units, cursor_at, item_edit, utf16_units
from .scheduler import await_engine, debounce
from .telemetry import count_engine_results
from .warmup import start_idle_work

logger = logging.getLogger(__name__)


def empty() -> lsp.InlineCompletionList:
    return lsp.InlineCompletionList(items=[])


def completion_list(text: str, cursor, doc_text: str, units) -> lsp.InlineCompletionList:
    edit = item_edit(text, cursor, doc_text, units)
    if edit is None:
        return empty()
    rng = lsp.Range(start=lsp.Position(line=edit.line, character=edit.start_character),
                    end=lsp.Position(line=edit.line, character=edit.end_character))
    return lsp.InlineCompletionList(items=[lsp.InlineCompletionItem(insert_text=edit.insert_text, range=rng)])


async def inline_completion(ls, params: lsp.InlineCompletionParams) -> lsp.InlineCompletionList:
    started = time.perf_counter()
    tel = ls.telemetry
    tel.count("requests")
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
    try:
        rest = ls.typethrough.lookup(snap.uri, prefix, line_suffix)
        if rest is None:
            rest = await written_line_for(ls, snap.uri, prefix, line_suffix, ticket)
        if rest is not None:
            tel.count("typethrough_hits")
            ls.typethrough.remember(snap.uri, prefix, line_suffix, rest)  # typing on continues from here
            tel.latency(time.perf_counter() - started)
            plan = next_line(snap, cursor, rest)
            if plan is not None and ls.next_lines.get(snap.uri) != plan.text:
                plan = None  # only a line the engine finished (not one cut at max_tokens) is followed
            answered = True
            return completion_list(rest.replace("\r\n", "\n"), cursor, snap.text, units)
        ls.scheduler.stop_background()  # this request needs the engine
        if not ls.ready:
            tel.count("not_ready")
            return empty()
        if not await debounce(ticket, ls.settings.debounce_ms / 1000.0):
            return empty()
        from .prompt import OpenDocument

        doc = OpenDocument(uri=snap.uri, language_id=snap.language_id, text=snap.text)
        character_utf16 = count_units(cursor.line_prefix(snap.text), utf16_units)
        prepared = await ls.prepare_prompt(ticket, doc, cursor.line, character_utf16)
        # An edit, a newer request or a cancel that arrived while the prompt was built wins.
        if prepared is None or not ticket.live or ls.current_version(snap.uri) != snap.version:
            tel.count("stale")
            return empty()
        future = ls.completer.submit(prepared, ticket.token)
        count_engine_results(future, tel)
        result = await await_engine(future, ticket.token)
        if not ticket.live or ls.current_version(snap.uri) != snap.version:
            tel.count("stale")
            return empty()
        text = ls.completer.finish(prepared, result)
        ls.typethrough.remember(snap.uri, prefix, line_suffix, text)
        ls.pending_growth = plan_growth(snap, cursor.line, character_utf16, prepared)
        if ends_its_line(prepared, result):
            plan = next_line(snap, cursor, text)
            if plan is not None:
                ls.next_lines[snap.uri] = plan.text
        tel.count("completed")
        tel.latency(time.perf_counter() - started)
        answered = True
        return completion_list(text, cursor, snap.text, units)
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
            start_next_line(ls, plan, then=lambda: start_idle_work(ls))
        if answered:  # not after a cancelled request: the keystroke that cancelled it is one request away
            start_idle_work(ls)  # when nothing else runs: the next line goes first
