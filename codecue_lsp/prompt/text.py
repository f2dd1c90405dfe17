"""Positions and lines: LSP (line, UTF-16 character) to string offsets, indentation, identifiers."""
from __future__ import annotations

import re

_LSP_LINE_BREAK = re.compile(r"\r\n|\r|\n")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CALLED_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
OPENERS = "([{"
CLOSERS = ")]}"


def encode(text: str) -> bytes:
    """UTF-8 bytes of any str, including lone surrogates left by a bad decode (they become 3 bytes each)."""
    return text.encode("utf-8", "surrogatepass")


def line_start_offset(text: str, line: int) -> int:
    """Offset of the start of LSP line `line` (line breaks \\n, \\r\\n, \\r); past the end -> len(text)."""
    if line <= 0:
        return 0
    if "\r" not in text:
        index = -1
        for _ in range(line):
            index = text.find("\n", index + 1)
            if index < 0:
                return len(text)
        return index + 1
    for count, match in enumerate(_LSP_LINE_BREAK.finditer(text), start=1):
        if count == line:
            return match.end()
    return len(text)


def line_end_offset(text: str, start: int) -> int:
    """Offset of the line break (or end of text) of the line starting at `start`."""
    ends = [i for i in (text.find("\n", start), text.find("\r", start)) if i >= 0]
    return min(ends) if ends else len(text)


def utf16_to_index(line_text: str, character: int) -> int:
    """Index into `line_text` of an LSP character offset in UTF-16 code units, clamped to the line.

    A position inside a surrogate pair (one astral character) rounds down to before that character.
    """
    if character <= 0:
        return 0
    if line_text.isascii() or max(line_text, default="\0") <= "\uffff":
        return min(character, len(line_text))
    units = 0
    for index, char in enumerate(line_text):
        width = 2 if ord(char) > 0xFFFF else 1
        if units + width > character:
            return index
        units += width
    return len(line_text)


def index_to_utf16(line_text: str, index: int) -> int:
    return sum(2 if ord(c) > 0xFFFF else 1 for c in line_text[:index])


def offset_of_position(text: str, line: int, character: int) -> int:
    """String offset of an LSP position; out-of-range lines/characters clamp to the end of the doc/line."""
    start = line_start_offset(text, line)
    end = line_end_offset(text, start)
    return start + utf16_to_index(text[start:end], character)


def indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_width(line: str) -> int:
    return len(indentation(line).expandtabs(4))


def _code_chars(text: str):
    """(index, char) for characters outside simple one-line string literals."""
    quote = ""
    escaped = False
    for index, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote or char == "\n":
                quote = ""
        elif char in "\"'`":
            quote = char
        else:
            yield index, char


def bracket_depths(text: str) -> list[int]:
    """Bracket depth before each character (0 at the start; negative once outer brackets are closed)."""
    depths = [0] * len(text)
    depth, previous = 0, 0
    for index, char in _code_chars(text):
        for skipped in range(previous, index):
            depths[skipped] = depth
        depths[index] = depth
        previous = index + 1
        if char in OPENERS:
            depth += 1
        elif char in CLOSERS:
            depth -= 1
    for skipped in range(previous, len(text)):
        depths[skipped] = depth
    return depths


def first_unbalanced_closer(text: str, depth: int = 0) -> int | None:
    """Index of the first )]} in `text` that closes a bracket opened before it (starting at `depth` open)."""
    for index, char in _code_chars(text):
        if char in OPENERS:
            depth += 1
        elif char in CLOSERS:
            depth -= 1
            if depth < 0:
                return index
    return None


def open_brackets(text: str) -> int:
    """Brackets opened in `text` and not closed there (closers with nothing open are ignored)."""
    depth = 0
    for _, char in _code_chars(text):
        if char in OPENERS:
            depth += 1
        elif char in CLOSERS:
            depth = max(depth - 1, 0)
    return depth


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def sanitize(text: str) -> str:
    """Replace lone surrogates (left by decoding non-UTF-8 bytes) with U+FFFD, one character for one, so
    offsets and UTF-16 positions stay valid and tokenizers never see unencodable text."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)


CURSOR = "\u2588"  # █ marks the cursor in tests and examples


def split_cursor(marked: str) -> tuple[str, int, int]:
    """("text without the marker", LSP line, UTF-16 character) for a text with one █ at the cursor."""
    index = marked.index(CURSOR)
    before = marked[:index]
    line_start = before.rfind("\n") + 1
    character = index_to_utf16(before[line_start:], index - line_start)
    return marked[:index] + marked[index + 1:], before.count("\n"), character


def common_prefix_length(a: str | bytes, b: str | bytes) -> int:
    """Length of the common prefix, by binary search over C-level slice comparisons (fast on megabytes)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def common_suffix_length(a: str | bytes, b: str | bytes, limit: int) -> int:
    """Length of the common suffix, at most `limit` (so that it need not overlap a common prefix)."""
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            low = mid
        else:
            high = mid - 1
    return low


def comment_start(line: str, comment: str) -> int | None:
    """Where a line comment starts in `line`: `comment` outside string literals, at the start or after a blank."""
    quote, index = None, 0
    while index < len(line):
        char = line[index]
        if quote is not None:
            if char == "\\":
                index += 1  # the escaped character
            elif char == quote:
                quote = None
        elif char in "'\"`":
            quote = char
        elif line.startswith(comment, index) and (index == 0 or line[index - 1] in " \t"):
            return index
        index += 1
    return None
