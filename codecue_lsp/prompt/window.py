"""The part of a document around the cursor that a prompt can use: line offsets, rows and syntax."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .languages import spec_for
from .syntax import SyntaxCache, SyntaxView, parse_document, parse_window
from .text import encode, indentation

# Smaller documents are parsed whole when no SyntaxCache is given; larger ones only around the cursor.
FRESH_PARSE_CHARS = 256_000
_TOP_LEVEL_LINE = re.compile(r"^[^\s)\]}]", re.M)
_CLOSER_START = tuple(")]}")


@dataclass
class Window:
    text: str
    offset: int            # the cursor
    start: int             # first offset of the window (a line start)
    end: int               # end offset of the window (a line end, after its newline)
    first_row: int         # document row of `start`
    line_offsets: list[int]

    @classmethod
    def around(cls, text: str, offset: int, before_chars: int, after_chars: int) -> "Window":
        start = 0 if offset <= before_chars else text.rfind("\n", 0, offset - before_chars) + 1
        stop = min(len(text), offset + after_chars)
        newline = text.find("\n", stop)
        end = len(text) if newline < 0 else newline + 1
        line_offsets = [start] + [start + m.end() for m in re.finditer("\n", text[start:end])
                                  if start + m.end() < end or end == len(text)]
        return cls(text, offset, start, end, text.count("\n", 0, start), line_offsets)

    @property
    def cursor_row(self) -> int:
        return self.first_row + self.text.count("\n", self.start, self.offset)

    def row_start(self, row: int) -> int | None:
        """Offset of a document row's first character, None outside the window."""
        index = row - self.first_row
        if 0 <= index < len(self.line_offsets):
            return self.line_offsets[index]
        if index == len(self.line_offsets) and self.end == len(self.text):
            return len(self.text)
        return None

    def row_end(self, row: int) -> int | None:
        """Offset just after a row's line break (the end of the text for the last row)."""
        following = self.row_start(row + 1)
        if following is not None:
            return following
        return len(self.text) if self.row_start(row) is not None else None

    def bounds(self, first: int, last: int) -> tuple[int, int]:
        """Offsets that contain rows first..last: exact inside the window; outside it, its edge and the text's start
        or end (never narrower than the rows: an edit near the cursor must not seem to touch a row far below)."""
        start, end = self.row_start(first), self.row_end(last)
        if start is None:
            start = 0 if first < self.first_row else self.end
        if end is None:
            end = self.start if last < self.first_row else len(self.text)
        return start, end

    def line(self, row: int) -> str:
        start, end = self.row_start(row), self.row_end(row)
        return "" if start is None or end is None else self.text[start:end]

    def top_level_rows(self, first: int, last: int) -> list[int]:
        """Rows with code at column 0: the line-based guess at statement starts."""
        rows = []
        for row in range(max(first, self.first_row), last + 1):
            line = self.line(row)
            if line[:1] and not line[:1].isspace() and not line.startswith(_CLOSER_START):
                rows.append(row)
        return rows

    def byte_column(self, offset: int) -> int:
        return len(encode(self.text[self.text.rfind("\n", 0, offset) + 1: offset]))

    def previous_nonblank_row(self, row: int, limit: int = 50) -> int | None:
        for candidate in range(row - 1, max(row - 1 - limit, self.first_row - 1), -1):
            if self.line(candidate).strip():
                return candidate
        return None

    def indentation_of(self, row: int) -> str:
        return indentation(self.line(row))


def syntax_view(uri: str, language_id: str, window: Window, syntax: SyntaxCache | None) -> SyntaxView | None:
    """A parse covering the window: the cache's whole-document tree, a fresh whole parse of a small document,
    or a parse of the window alone (starting at a column-0 line) for a huge one. None: line-based logic."""
    if spec_for(language_id) is None:
        return None
    text = window.text
    try:
        if syntax is not None:
            view = syntax.view(uri, language_id, text)
            if view is not None:
                return view
        elif len(text) <= FRESH_PARSE_CHARS:
            return parse_document(language_id, text)
        match = _TOP_LEVEL_LINE.search(text, window.start, window.offset)
        start = match.start() if match else window.start
        return parse_window(language_id, text, start, window.end, text.count("\n", 0, start))
    except Exception:  # a grammar problem falls back to line-based logic, never to an error
        return None
