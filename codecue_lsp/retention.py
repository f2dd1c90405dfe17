"""Accepted-and-retained characters: RETENTION_DELAY_S after an accept that says what was accepted and where
(codecue/didAcceptCompletion `text` and `position`), how much of that text is still in the document near there.

The rule: the longest part of the accepted text (line ends normalised to \\n) found unchanged within NEAR_LINES
lines above the line it was inserted at and NEAR_LINES below its last line. All of it still there is an exact
match, full credit; an edited suggestion gets the longest unedited run of at least MIN_RUN characters (shorter
ones match by chance: a letter of a deleted line); a run of whitespace alone counts nothing.
A document closed by then is not checked (nothing retained, nothing checked). Local counters only.
"""
from __future__ import annotations

import asyncio
import logging
import re
from difflib import SequenceMatcher
from typing import Callable

logger = logging.getLogger(__name__)

RETENTION_DELAY_S = 30.0  # as Copilot and Cody measure retention
NEAR_LINES = 5
MIN_RUN = 4
# Longer accepted texts are not checked: the comparison runs on the event loop, and no suggestion is this long
# (maxTokens caps them far below), so only a broken or hostile client sends one.
MAX_CHECKED_CHARS = 20_000
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # LSP's line ends


def retained_chars(document: str, accepted: str, line: int) -> int:
    """Characters of `accepted` (inserted at `line`) still in `document` near there, by the rule above."""
    text = _LINE_BREAK.sub("\n", accepted)
    if not text.strip():
        return 0
    lines = _LINE_BREAK.split(document)
    first, last = max(0, line - NEAR_LINES), line + text.count("\n") + NEAR_LINES + 1
    window = "\n".join(lines[first:last])
    if text in window:
        return len(text)
    match = SequenceMatcher(None, window, text, autojunk=False).find_longest_match(0, len(window), 0, len(text))
    part = text[match.b:match.b + match.size]
    return match.size if match.size >= MIN_RUN and part.strip() else 0


def loop_later(delay_s: float, fn: Callable, *args) -> None:
    asyncio.get_running_loop().call_later(delay_s, fn, *args)


class RetentionChecks:
    """Schedules one check per accept with text and position. `later(delay_s, fn, *args)` runs fn after the delay
    (the event loop's call_later; tests pass their own and run the checks when they choose); `document_text(uri)`
    is the open document's text or None."""

    def __init__(self, telemetry, document_text: Callable[[str], str | None],
                 later: Callable[..., None] = loop_later, delay_s: float = RETENTION_DELAY_S) -> None:
        self.telemetry, self.document_text, self.later, self.delay_s = telemetry, document_text, later, delay_s

    def accepted(self, event: dict) -> None:
        uri, text, position = event.get("uri"), event.get("text"), event.get("position")
        line = position.get("line") if isinstance(position, dict) else None
        if not (isinstance(uri, str) and isinstance(text, str) and 0 < len(text) <= MAX_CHECKED_CHARS
                and isinstance(line, int) and not isinstance(line, bool) and line >= 0):
            return  # an old client, or a malformed accept: counted as accepted, not checked
        self.telemetry.retention_pending += 1
        self.later(self.delay_s, self.check, uri, text, line)

    def check(self, uri: str, text: str, line: int) -> None:
        tel = self.telemetry
        tel.retention_pending -= 1
        document = self.document_text(uri)
        if document is None:
            return
        kept = retained_chars(document, text, line)
        tel.retention_checked_chars += len(_LINE_BREAK.sub("\n", text))
        tel.retained_chars += kept
        logger.info("accepted text retained after %g s: %d of %d characters", self.delay_s, kept, len(text))
