"""The prompt where the cursor rests, made ready before the first keystroke there asks for it.

Editors ask for inline completions only as the user types, so the first keystroke after opening a file or moving
elsewhere in it finds nothing cached: on a slow CPU its prompt (at the cold size, growth.py) costs seconds of
prefill before the first token (docs/performance.md). But a user who opens a file or clicks somewhere usually reads
first.
The editor clients send `codecue/didMoveCursor` (TextDocumentPositionParams) once the cursor has rested after a move
that was not typing (a click, the arrow keys, a jump, another editor). This module builds the prompt a keystroke
there would get (its layout is then the document's, kept for that keystroke) and prefills it into the document's
engine session, as background work (background.py): a request stops it (scheduler.stop_background) and the chunks
done stay. It replaces other background work (a growth, a warm-up elsewhere: the user has moved), except the same
document's next line, which it waits for. Once the prompt is ready, a cursor at the end of a line that is not blank
(a click or End, then usually Enter) gets the line after it written (next_line.py); then, if its layout is a cold
start's, the growth follows. Only a backend that supports_prefill warms up; `prepareAtCursor` off turns it off.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from .config import MAX_DOCUMENT_CHARS
from .growth import plan_growth
from .next_line import enter_at
from .positions import count_units, cursor_at, utf16_units
from .prompt import OpenDocument
from .scheduler import await_engine
from .telemetry import event_params

logger = logging.getLogger(__name__)

METHOD = "codecue/didMoveCursor"

# What start_warmup did with a resting cursor: started its warm-up; left it planned (the engine is not free, or the
# pair is still loading); or found it stale (typed in since, closed, not to be prepared).
STARTED, WAITING, STALE = "started", "waiting", "stale"


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
    if not ls.settings.prepare_at_cursor or (ls.ready and not ls.completer.supports_prefill):
        return
    ls.background.cursor_rested(RestingCursor(where.uri, where.line, where.character, ls.current_version(where.uri)))


def start_warmup(ls, where: RestingCursor, then=None) -> str:
    """Start preparing the prompt at `where` (STARTED), `then()` once it ends. WAITING while a request is in flight
    or the same document's next line is being written; STALE once its document changed."""
    if not ls.ready:
        return WAITING  # loading.py starts the idle work once the pair is loaded
    if not ls.completer.supports_prefill:
        return STALE
    snap = ls.snapshot(where.uri)
    if snap is None or snap.version != where.version:
        return STALE  # closed, or typed in since: that keystroke's request prepared its prompt
    if not ls.settings.language_enabled(snap.language_id) or len(snap.text) > MAX_DOCUMENT_CHARS:
        return STALE
    cursor = cursor_at(snap.text, where.line, where.character, ls.position_units())
    if cursor is None:
        logger.info("%s: position %d:%d is outside %s", METHOD, where.line, where.character, snap.uri)
        return STALE
    work = ls.scheduler.background
    if work is not None and work.uri == snap.uri and ls.scheduler.background_kind == "next_line":
        return WAITING  # the line after the user's: it ends within a line's time, and is likely wanted first
    character_utf16 = count_units(cursor.line_prefix(snap.text), utf16_units)
    key = ("warmup", snap.uri, snap.version, cursor.line, character_utf16)
    if (ticket := ls.scheduler.begin_background(snap.uri, snap.version, key)) is None:
        return WAITING  # a request goes first (its answer starts this again), or this very warm-up runs
    ls.telemetry.count("warmup_started")
    ls.background.run(ticket, _warm_up(ls, snap, cursor, character_utf16, ticket),
                      f"preparing the prompt at the cursor in {snap.uri}", then=then)
    return STARTED


async def _warm_up(ls, snap, cursor, character_utf16: int, ticket) -> None:
    line = cursor.line
    doc = OpenDocument(uri=snap.uri, language_id=snap.language_id, text=snap.text)
    prepared = await ls.prepare_prompt(ticket, doc, line, character_utf16)
    if prepared is None or not ticket.live:
        return
    held = await await_engine(ls.completer.prefill(prepared, ticket.token), ticket.token)
    if not ticket.live or held < prepared.ready_tokens:
        return
    ls.telemetry.count("warmup_ready")
    ls.background.ready_at_rest(plan_growth(snap, line, character_utf16, prepared), enter_at(snap, cursor))
    logger.info("%s: the prompt at %d:%d is ready (%d tokens)", snap.uri, line, character_utf16,
                prepared.ready_tokens + 1)
