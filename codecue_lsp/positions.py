"""LSP positions <-> Python string offsets, and the range an inline completion item replaces.

LSP counts `character` in the negotiated encoding's code units (UTF-16 unless the client offered another), and lines
end at "\\n", "\\r\\n" or "\\r". Python indexes code points. Out-of-range positions are rejected (None), not clamped:
a completion for a position the client did not mean is worse than none.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def utf16_units(ch: str) -> int:
    return 2 if ord(ch) > 0xFFFF else 1


def utf8_units(ch: str) -> int:
    return len(ch.encode("utf-8", "surrogatepass"))


def utf32_units(ch: str) -> int:
    return 1


UNIT_COUNTERS: dict[str, Callable[[str], int]] = {"utf-16": utf16_units, "utf-8": utf8_units, "utf-32": utf32_units}


def count_units(text: str, units: Callable[[str], int] = utf16_units) -> int:
    if units is utf32_units:
        return len(text)
    return sum(units(ch) for ch in text)


@dataclass(frozen=True)
class Cursor:
    """A validated cursor in a document snapshot."""
    line: int
    character: int  # client units (as received; rounded down to a character boundary)
    offset: int  # Python index into the text
    line_start: int
    line_end: int  # index of the line break (or len(text))

    def prefix(self, text: str) -> str:
        return text[:self.offset]

    def line_prefix(self, text: str) -> str:
        return text[self.line_start:self.offset]

    def line_suffix(self, text: str) -> str:
        return text[self.offset:self.line_end]


def line_bounds(text: str, line: int) -> tuple[int, int] | None:
    """(start, end) indexes of a line's text without its line break, or None when the document has no such line."""
    if line < 0:
        return None
    start = 0
    breaks = 0
    for match in _LINE_BREAK.finditer(text):
        if breaks == line:
            return start, match.start()
        start = match.end()
        breaks += 1
    # The text after the last line break is the last line (possibly empty).
    return (start, len(text)) if line == breaks else None


def cursor_at(text: str, line: int, character: int,
              units: Callable[[str], int] = utf16_units) -> Cursor | None:
    """The cursor for an LSP position, or None when the position is not in the document."""
    if character < 0:
        return None
    bounds = line_bounds(text, line)
    if bounds is None:
        return None
    start, end = bounds
    seen = 0
    index = start
    while index < end and seen + units(text[index]) <= character:
        seen += units(text[index])
        index += 1
    if seen < character and index >= end:
        return None  # past the end of the line
    return Cursor(line=line, character=seen, offset=index, line_start=start, line_end=end)


def completion_covers_line_rest(completion: str, line_suffix: str) -> bool:
    """True when the completion also retypes the rest of the cursor's line, so the item must replace it.

    The model writes the middle that goes before the suffix, so normally the rest of the line is kept. But when
    the completion closes more brackets (or quotes) than it opens and ends with the text after the cursor, e.g.
    `print(█)` completed with `x)`, it has retyped the closers: replacing them avoids `print(x))`. A rest of only
    whitespace is replaced too, so no stray spaces are left behind.
    """
    rest = line_suffix.rstrip()
    if not completion:
        return False
    if not rest:
        return bool(line_suffix)
    if not completion.rstrip().endswith(rest):
        return False
    needed = _net_closers(rest)
    if needed > 0 and _net_closers(completion) >= needed:
        return True
    return any(q in rest and completion.count(q) % 2 == 1 for q in "\"'`")


def _net_closers(text: str) -> int:
    """Brackets closed minus brackets opened (ignoring the order)."""
    return sum(text.count(c) for c in ")]}") - sum(text.count(c) for c in "([{")


@dataclass(frozen=True)
class ItemEdit:
    """What an InlineCompletionItem carries: the text and the range [start, end) on the cursor's line."""
    insert_text: str
    line: int
    start_character: int
    end_character: int


def item_edit(completion: str, cursor: Cursor, text: str,
              units: Callable[[str], int] = utf16_units) -> ItemEdit | None:
    """The edit to send for `completion` at `cursor` (None for an empty completion)."""
    if not completion:
        return None
    line_suffix = cursor.line_suffix(text)
    end = cursor.character
    if completion_covers_line_rest(completion, line_suffix):
        end += count_units(line_suffix, units)
    return ItemEdit(insert_text=completion, line=cursor.line, start_character=cursor.character,
                    end_character=end)
