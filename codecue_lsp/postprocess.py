"""Turning what the model generated into what the editor shows: stop at the end of the line or block, drop
text that repeats what is already after the cursor and comments the model appended to its code, trim whitespace,
and never show whitespace alone.

`postprocess` returns text to insert AT the cursor. An inline item whose range covers the rest of the line
(built.line_suffix) gets `replacement_text(...)`: the insertion followed by that rest of the line.
"""
from __future__ import annotations

from typing import Callable

from codecue_lsp.prompt import BuiltPrompt
from codecue_lsp.prompt.languages import line_comment
from codecue_lsp.prompt.text import (
    CLOSERS,
    bracket_depths,
    comment_start,
    first_unbalanced_closer,
    indent_width,
)


def _lines_with_starts(text: str) -> list[tuple[int, str]]:
    starts, position = [], 0
    for line in text.split("\n"):
        starts.append((position, line))
        position += len(line) + 1
    return starts


def _next_document_line(built: BuiltPrompt) -> str:
    """The first non-blank line after the cursor's line, as the prompt's suffix shows it ("" if none)."""
    after_line = built.suffix[len(built.line_suffix):]
    for line in after_line.split("\n")[1:]:
        if line.strip():
            return line.rstrip("\r")
    return ""


def _visible_line_prefix(built: BuiltPrompt) -> str:
    """What precedes the generated text on the cursor's line, as the model saw it."""
    return "" if built.withheld else built.line_prefix


def _cut_at_closer(text: str, index: int, built: BuiltPrompt) -> int:
    """Where to end a completion whose character at `index` closes the block. If the document already has that
    closer right after the cursor, drop it (and its line when it stands alone); else keep it and `;`/`,`/`)`."""
    closer = text[index]
    following = built.suffix[len(built.line_suffix):].lstrip() if not built.line_suffix.strip() else ""
    line_start = text.rfind("\n", 0, index) + 1
    if following.startswith(closer) or built.line_suffix.strip().startswith(closer):
        if not text[line_start:index].strip() and line_start > 0:
            return line_start - 1
        return index
    end = index + 1
    while end < len(text) and text[end] in ";,)" and text[end] != "\n":
        end += 1
    return end


def cut_point(text: str, built: BuiltPrompt, final: bool = False) -> int | None:
    """Index where the completion ends (the rest is dropped), or None while it may still go on.
    `final`: generation is over, so the last line counts as complete."""
    lines = _lines_with_starts(text)
    visible = _visible_line_prefix(built)
    seen_content = False
    header_width = indent_width(built.header_indent + "x")  # the header's own indentation width
    next_line = _next_document_line(built)
    base_depth = built.open_brackets if built.mode == "line" else 0
    closer_index = first_unbalanced_closer(text, base_depth)
    marker = line_comment(built.language_id) if built.mode == "line" else None
    comment = appended_comment(lines[0][1], marker, built.line_prefix) if marker is not None else None
    if comment is not None and (closer_index is None or comment < closer_index):
        return comment  # the line's code is done: what follows is dropped anyway (drop_trailing_comment)
    for number, (start, line) in enumerate(lines):
        complete = number < len(lines) - 1 or final
        full_line = visible + line if number == 0 else line
        if closer_index is not None and start <= closer_index <= start + len(line):
            return _cut_at_closer(text, closer_index, built)
        if number > 0 and built.mode == "line" and seen_content:
            return start - 1
        if line.strip():
            seen_content = True
        if number == 0 and built.line_suffix.strip():
            continue
        if complete and next_line.strip() and full_line.rstrip() == next_line.rstrip() and full_line.strip():
            return max(start - 1, 0)
        if built.mode == "block" and number > 0 and line.strip():
            starts_with_closer = built.braces and line.lstrip()[:1] in CLOSERS
            if not starts_with_closer and indent_width(line) <= header_width:
                return start - 1
    return None


def appended_comment(line: str, comment: str, before: str = "") -> int | None:
    """Where in `line` a line comment starts that the model began after code it wrote on that line, if any;
    `before`: what precedes `line` on its document line (the user's own text)."""
    start = comment_start(before + line, comment)
    if start is None or start < len(before):
        return None
    start -= len(before)
    return start if line[:start].strip() else None


def make_stop_predicate(built: BuiltPrompt) -> Callable[[str], bool]:
    """For the engine: True once the text generated so far is a finished completion (stop decoding early)."""
    return lambda generated: cut_point(generated, built) is not None


def drop_line_suffix_overlap(text: str, line_suffix: str) -> str:
    """Drop a tail of the completion that the rest of the line already has: `a, b)` before `)` -> `a, b`.
    A tail starting with a closer counts only when the closer closes a bracket opened before the cursor."""
    target = line_suffix.strip()
    if not target or not text.strip():
        return text
    text = text.rstrip()
    depths = bracket_depths(text)
    for length in range(min(len(text), len(target)), 0, -1):
        start = len(text) - length
        tail = text[start:]
        if not target.startswith(tail):
            continue
        opens_before = tail[0] in CLOSERS and depths[start] <= 0
        if tail[0] in CLOSERS and not opens_before:
            continue
        if length < len(target) and not opens_before:
            continue  # a partial overlap is trusted only when it starts by closing an outer bracket
        return text[:start]
    return text


def drop_trailing_comment(text: str, comment: str, line_prefix: str = "") -> str:
    """`text` without the line comments the model appended after code it wrote on the same line (its guess at the
    user's explanation, rarely theirs word for word). Comment lines stay, and so does a comment after the user's
    own code (`line_prefix`, what precedes the text on its first line)."""
    lines = text.split("\n")
    for number, line in enumerate(lines):
        start = appended_comment(line, comment, line_prefix if number == 0 else "")
        if start is not None:
            lines[number] = line[:start].rstrip()
    return "\n".join(lines)


def strip_withheld_indent(text: str, built: BuiltPrompt) -> str:
    """The user already typed `built.withheld` (left out of the prompt); the completion's own indentation of
    the first line is replaced by it."""
    if not built.withheld or text.startswith("\n"):
        return text
    first, newline, rest = text.partition("\n")
    return first.lstrip(" \t") + newline + rest


def postprocess(completion: str, built: BuiltPrompt) -> str:
    """The text to insert at the cursor; "" means show nothing."""
    text = completion.replace("\r\n", "\n")
    cut = cut_point(text, built, final=True)
    if cut is not None:
        text = text[:cut]
    text = strip_withheld_indent(text, built)
    text = "\n".join(line.rstrip() for line in text.split("\n")).rstrip()
    if built.mode == "line" and "\n" in text.lstrip("\n"):
        text = text[: text.index("\n", len(text) - len(text.lstrip("\n")))]
    if text.startswith("\n"):
        if built.line_suffix.strip():
            return ""  # a line break in mid-line would split the user's line
        text = "\n" + text.lstrip("\n")
    if (marker := line_comment(built.language_id)) is not None:
        text = drop_trailing_comment(text, marker, built.line_prefix)
    text = drop_line_suffix_overlap(text, built.line_suffix)
    return text if text.strip() else ""


def replacement_text(inserted: str, built: BuiltPrompt) -> str:
    """The inline item's text when its range covers the rest of the cursor's line."""
    return inserted + built.line_suffix if inserted else ""

