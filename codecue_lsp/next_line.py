"""The line after the user's, written in the background before Enter asks for it.

Two moments make the next line the likely next wish: an answer that completes the cursor's line (line mode, the
model stopped at the line's end: inline.py plans it), and a cursor that came to rest at the end of a line that is
not blank (a click or End, then usually Enter: warmup.py plans it once that line's prompt is ready). The writer
works in the document as it will be once the suggestion (if any) is taken and Enter pressed, as background work
(background.py). It goes on while the user types the suggestion (those keystrokes are answered by the type-through
cache, not the engine) and stops for any request that needs the engine (scheduler.stop_background). What it wrote
waits in the type-through cache, keyed by the text up to the suggestion's end: shown once the suggestion is accepted
(as the next line), and after Enter with the editor's indentation. Only a backend that supports_next_line writes
ahead; `nextLine` off turns it off.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from .prompt import OpenDocument
from .scheduler import await_engine
from .telemetry import count_engine_results


@dataclass(frozen=True)
class NextLine:
    """The document once a one-line suggestion (or none) is taken and Enter pressed, with the cursor on the new
    line."""
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
    if not suggestion or "\n" in suggestion or "\r" in suggestion:
        return None
    return _after_enter(snap, cursor, suggestion)


def enter_at(snap, cursor) -> NextLine | None:
    """Enter where the cursor rests: None unless it is at the end of a line that is not blank (on a blank line the
    user is about to type, not to open another one)."""
    if not cursor.line_prefix(snap.text).strip():
        return None
    return _after_enter(snap, cursor, "")


def _after_enter(snap, cursor, suggestion: str) -> NextLine | None:
    if cursor.line_suffix(snap.text):
        return None  # mid-line: Enter would split the line
    first_break = snap.text.find("\n")
    newline = "\r\n" if first_break > 0 and snap.text[first_break - 1] == "\r" else "\n"
    end = snap.text[:cursor.offset] + suggestion
    return NextLine(snap.uri, snap.version, snap.language_id, end + newline + snap.text[cursor.offset:],
                    cursor.line + 1, end, newline)


def ends_its_line(prepared, completion) -> bool:
    """A line-mode answer the model ended itself, not one cut at max_tokens: Enter would follow it."""
    return prepared.built.mode == "line" and completion.finish_reason in ("stop", "eos")


async def written_line_for(ls, uri: str, prefix: str, line_suffix: str, ticket) -> str | None:
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
    if ls.background.writer is None or line_suffix:
        return None
    plan, task = ls.background.writer
    if task.done() or plan.uri != uri or not prefix.startswith(plan.end):
        return None
    typed = prefix[len(plan.end):]
    if typed and (not typed.startswith(plan.newline) or typed[len(plan.newline):].strip(" \t")):
        return None
    return task


def start_next_line(ls, plan: NextLine, then=None) -> bool:
    """Write the line after `plan`'s suggestion in the background, unless it is known or turned off; `then()` runs
    when the writer ends (what may start next). True if it started."""
    if not ls.settings.next_line or not ls.ready or not ls.completer.supports_next_line:
        return False
    if ls.typethrough.lookup_next(plan.uri, plan.end, "") is not None:
        return False  # written already
    if (ticket := ls.scheduler.begin_background(plan.uri, plan.version, ("next_line", plan.text))) is None:
        return False  # a request is in flight (it goes first), or this line is being written
    ls.telemetry.count("next_line_started")
    task = ls.background.run(ticket, _write_next_line(ls, plan, ticket), f"writing the next line of {plan.uri}",
                             then=then)
    ls.background.writing(plan, task)
    return True


async def _write_next_line(ls, plan: NextLine, ticket) -> None:
    doc = OpenDocument(uri=plan.uri, language_id=plan.language_id, text=plan.text)
    prepared = await ls.prepare_prompt(ticket, doc, plan.line, 0)
    if prepared is None or not ticket.live:
        return
    future = ls.completer.submit(prepared, ticket.token)
    count_engine_results(future, ls.telemetry)
    completion = await await_engine(future, ticket.token)
    if not ticket.live:
        return
    # Kept even if the document changed meanwhile: it is only answered where the text before it is plan.end.
    text = ls.completer.finish(prepared, completion)
    if text:
        ls.typethrough.remember_next(plan.uri, plan.end, plan.newline + text)
        ls.telemetry.count("next_line_ready")
        if ends_its_line(prepared, completion) and "\n" not in text:
            ls.background.line_written(plan, text)  # Enter after this line too: the next one follows
