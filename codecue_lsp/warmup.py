"""The prompt where the cursor rests, made ready before the first keystroke there asks for it.

Editors ask for inline completions only as the user types, so the first keystroke after opening a file or moving
elsewhere in it finds nothing cached: on 2 AVX2-only Zen 3 cores its prompt (512 tokens at the cold size, growth.py)
costs ~10 s of prefill before the first token. But a user who opens a file or clicks somewhere usually reads first.
The editor clients send `codecue/didMoveCursor` (TextDocumentPositionParams) once the cursor has rested after a move
that was not typing (a click, the arrow keys, a jump, another editor). This module builds the prompt a keystroke
there would get (its layout is then the document's, kept for that keystroke) and prefills it into the document's
engine session, as background work: a request stops it (scheduler.stop_background) and the chunks done stay. It
replaces other background work (a growth, a warm-up elsewhere: the user has moved), except the same document's next
line, which it waits for. Once the prompt is ready, a cursor at the end of a line that is not blank (a click or End,
then usually Enter) gets the line after it written (next_line.py); then, if its layout is a cold start's, the growth
follows. Local engine only; `prepareAtCursor` off turns it off.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from .completer import ready_tokens
from .config import MAX_DOCUMENT_CHARS
from .growth import plan_growth, start_growth
from .next_line import enter_at, start_next_line
from .positions import count_units, cursor_at, utf16_units
from .scheduler import await_engine, run_background
from .telemetry import event_params

logger = logging.getLogger(__name__)

METHOD = "codecue/didMoveCursor"


@dataclass(frozen=True)
class RestingCursor:
    """Where the cursor rests, as the client said: character in the client's position encoding."""
    uri: str
    line: int
    character: int
    version: int | None = None  # the document's version when it arrived: a later edit makes it stale


def resting_cursor(params) -> RestingCursor | None:
    """The notification's document and position; None unless both are there and well-typed."""
    data = event_params(params)
    document, position = data.get("textDocument"), data.get("position")
    if not isinstance(document, dict) or not isinstance(position, dict):
        return None
    uri, line, character = document.get("uri"), position.get("line"), position.get("character")
    if not isinstance(uri, str) or not uri or not _index(line) or not _index(character):
        return None
    return RestingCursor(uri, line, character)


def _index(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2 ** 31


def cursor_moved(ls, params) -> None:
    """codecue/didMoveCursor: remember where the cursor rests and make its prompt ready when the engine is free."""
    where = resting_cursor(params)
    if where is None:
        logger.info("%s without a textDocument.uri and a position: ignored", METHOD)
        return
    if not ls.settings.prepare_at_cursor or ls.settings.engine != "local":
        return
    ls.resting_cursor = RestingCursor(where.uri, where.line, where.character, ls.current_version(where.uri))
    start_idle_work(ls)


def start_idle_work(ls) -> None:
    """What the engine does while nobody waits for it: the prompt at the resting cursor (the user's latest move),
    else the line after it (when it rests at a line's end), else the pending growth."""
    if start_warmup(ls) or start_line_after_rest(ls):
        return
    start_growth(ls)


def start_line_after_rest(ls) -> bool:
    """Write the line Enter at the resting cursor would open, once its own prompt is ready; True if it started."""
    plan, ls.line_after_rest = ls.line_after_rest, None
    if plan is None or ls.current_version(plan.uri) != plan.version:
        return False  # typed in since: the keystroke's request took over
    if not start_next_line(ls, plan, then=lambda: start_idle_work(ls)):
        return False
    ls.telemetry.count("next_line_at_rest")
    return True


def start_warmup(ls) -> bool:
    """Start preparing the prompt at the resting cursor; True if it started. It stays pending while a request is
    in flight or the same document's next line is being written, and goes once its document changed."""
    where = ls.resting_cursor
    if where is None or not ls.ready or ls.settings.engine != "local":
        return False
    snap = ls.snapshot(where.uri)
    if snap is None or snap.version != where.version:
        ls.resting_cursor = None  # closed, or typed in since: that keystroke's request prepared its prompt
        return False
    if not ls.settings.language_enabled(snap.language_id) or len(snap.text) > MAX_DOCUMENT_CHARS:
        ls.resting_cursor = None
        return False
    cursor = cursor_at(snap.text, where.line, where.character, ls.position_units())
    if cursor is None:
        logger.info("%s: position %d:%d is outside %s", METHOD, where.line, where.character, snap.uri)
        ls.resting_cursor = None
        return False
    work = ls.scheduler.background
    if work is not None and work.uri == snap.uri and ls.scheduler.background_kind == "next_line":
        return False  # the line after the user's: it ends within a line's time, and is likely wanted first
    character_utf16 = count_units(cursor.line_prefix(snap.text), utf16_units)
    key = ("warmup", snap.uri, snap.version, cursor.line, character_utf16)
    if (ticket := ls.scheduler.begin_background(snap.uri, snap.version, key)) is None:
        return False  # a request goes first (its answer starts this again), or this very warm-up runs
    ls.resting_cursor = None
    ls.telemetry.count("warmup_started")
    run_background(ls, ticket, _warm_up(ls, snap, cursor, character_utf16, ticket),
                   f"preparing the prompt at the cursor in {snap.uri}", then=lambda: start_idle_work(ls))
    return True


async def _warm_up(ls, snap, cursor, character_utf16: int, ticket) -> None:
    from .prompt import OpenDocument

    line = cursor.line
    doc = OpenDocument(uri=snap.uri, language_id=snap.language_id, text=snap.text)
    prepared = await ls.prepare_prompt(ticket, doc, line, character_utf16)
    if prepared is None or not ticket.live:
        return
    held = await await_engine(ls.completer.prefill(prepared, ticket.token), ticket.token)
    if not ticket.live or held < ready_tokens(prepared):
        return
    ls.telemetry.count("warmup_ready")
    ls.pending_growth = plan_growth(snap, line, character_utf16, prepared)  # the user is here now
    ls.line_after_rest = enter_at(snap, cursor)
    logger.info("%s: the prompt at %d:%d is ready (%d tokens)", snap.uri, line, character_utf16,
                len(prepared.request.prompt_ids))
