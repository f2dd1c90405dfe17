"""textDocument/inlineCompletion, from the request to the answer; then the next line, while the user reads.

An answer comes from the type-through cache (the user is typing the suggestion on screen) or from the engine (after
the debounce, with a prompt built on the prompt worker). After an answer that completes the cursor's line, the engine
goes on in the background to the line after it, in the document as it will be once the suggestion is taken and
Enter pressed: that is where a suggestion is wanted next, and on 2 CPU cores a line takes 1-2 s to write. It goes on
while the user types the suggestion (those keystrokes are answered by the type-through cache, not the engine) and
stops for any request that needs the engine (scheduler.stop_background). What it wrote waits in the type-through
cache, keyed by the text up to the suggestion's end: shown once the suggestion is accepted (as the next line), and
after Enter.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from lsprotocol import types as lsp

from .config import MAX_DOCUMENT_CHARS
from .growth import plan_growth
from .positions import count_units, cursor_at, item_edit, utf16_units
from .scheduler import await_engine, debounce, run_background
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


@dataclass(frozen=True)
class NextLine:
    """The document once a one-line suggestion is taken and Enter pressed, with the cursor on the new line."""
    uri: str
    version: int | None
    language_id: str
    text: str
    line: int     # the new line; its cursor is at character 0
    end: str      # the text up to the taken suggestion's end (the type-through cache's key)
    newline: str  # the document's line break

    def taken(self, line: str) -> str:
        """The document once `line` is also taken and Enter pressed after it."""
        start = len(self.end) + len(self.newline)
        return self.text[:start] + line + self.newline + self.text[start:]


def next_line(snap, cursor, suggestion: str) -> NextLine | None:
    """None unless the cursor is at its line's end and the suggestion is one line (what Enter would follow)."""
    if not suggestion or cursor.line_suffix(snap.text) or "\n" in suggestion or "\r" in suggestion:
        return None
    first_break = snap.text.find("\n")
    newline = "\r\n" if first_break > 0 and snap.text[first_break - 1] == "\r" else "\n"
    end = snap.text[:cursor.offset] + suggestion
    return NextLine(snap.uri, snap.version, snap.language_id, end + newline + snap.text[cursor.offset:],
                    cursor.line + 1, end, newline)


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
            rest = await _next_line_for(ls, snap.uri, prefix, line_suffix, ticket)
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
        _record_engine_totals(future, tel)
        result = await await_engine(future, ticket.token)
        if not ticket.live or ls.current_version(snap.uri) != snap.version:
            tel.count("stale")
            return empty()
        text = ls.completer.finish(prepared, result)
        ls.typethrough.remember(snap.uri, prefix, line_suffix, text)
        ls.pending_growth = plan_growth(snap, cursor.line, character_utf16, prepared)
        if _ends_its_line(prepared, result):
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
            start_next_line(ls, plan)
        if answered:  # not after a cancelled request: the keystroke that cancelled it is one request away
            start_idle_work(ls)  # when nothing else runs: the next line goes first


def _ends_its_line(prepared, result) -> bool:
    """A line-mode answer the model ended itself, not one cut at max_tokens: Enter would follow it."""
    return prepared.built.mode == "line" and result.finish_reason in ("stop", "eos")


async def _next_line_for(ls, uri: str, prefix: str, line_suffix: str, ticket) -> str | None:
    """The written next line for this cursor. The user who typed the suggestion out (or pressed Enter) before it
    was written waits for the writer: stopping it to ask the engine the same thing again would only cost more."""
    rest = ls.typethrough.lookup_next(uri, prefix, line_suffix)
    if rest is None and (writer := _writer_ahead(ls, uri, prefix, line_suffix)) is not None:
        await asyncio.wait({writer})  # a cancelled request leaves the writer running
        rest = ls.typethrough.lookup_next(uri, prefix, line_suffix) if ticket.live else None
    if rest is not None:
        ls.telemetry.count("next_line_hits")
    return rest


def _writer_ahead(ls, uri: str, prefix: str, line_suffix: str):
    """The running writer of the line this cursor waits for: at the taken suggestion's end, or on the new line
    with at most indentation typed."""
    if ls.next_line_writer is None or line_suffix:
        return None
    plan, task = ls.next_line_writer
    if task.done() or plan.uri != uri or not prefix.startswith(plan.end):
        return None
    typed = prefix[len(plan.end):]
    if typed and (not typed.startswith(plan.newline) or typed[len(plan.newline):].strip(" \t")):
        return None
    return task


def start_next_line(ls, plan: NextLine) -> None:
    """Write the line after `plan`'s suggestion in the background, unless it is known or turned off."""
    if not ls.settings.next_line or ls.settings.engine != "local" or not ls.ready:
        return
    if ls.typethrough.lookup_next(plan.uri, plan.end, "") is not None:
        return  # written already
    if (ticket := ls.scheduler.begin_background(plan.uri, plan.version, ("next_line", plan.text))) is None:
        return  # a request is in flight (it goes first), or this line is being written
    ls.telemetry.count("next_line_started")
    task = run_background(ls, ticket, _write_next_line(ls, plan, ticket), f"writing the next line of {plan.uri}",
                          then=lambda: start_idle_work(ls))
    ls.next_line_writer = (plan, task)


async def _write_next_line(ls, plan: NextLine, ticket) -> None:
    from .prompt import OpenDocument

    doc = OpenDocument(uri=plan.uri, language_id=plan.language_id, text=plan.text)
    prepared = await ls.prepare_prompt(ticket, doc, plan.line, 0)
    if prepared is None or not ticket.live:
        return
    future = ls.completer.submit(prepared, ticket.token)
    _record_engine_totals(future, ls.telemetry)
    result = await await_engine(future, ticket.token)
    if not ticket.live:
        return
    # Kept even if the document changed meanwhile: it is only answered where the text before it is plan.end.
    text = ls.completer.finish(prepared, result)
    if text:
        ls.typethrough.remember_next(plan.uri, plan.end, plan.newline + text)
        ls.telemetry.count("next_line_ready")
        if _ends_its_line(prepared, result) and "\n" not in text:
            ls.next_lines[plan.uri] = plan.taken(text)  # Enter after this line too: the next one follows


def _record_engine_totals(future, tel) -> None:
    """Count every engine result, also of requests whose handler was cancelled before the engine stopped."""
    loop = asyncio.get_running_loop()

    def done(f) -> None:
        if not f.cancelled() and f.exception() is None:
            try:
                loop.call_soon_threadsafe(tel.engine.add, f.result())
            except RuntimeError:  # the loop has closed: the server is exiting
                pass
    future.add_done_callback(done)
