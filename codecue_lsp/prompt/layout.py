"""Keeping a prompt's stable part while the user types in one place.

The KV cache reuses a prompt only up to its first changed token, and the context (imports, signatures) and the
prefix start come first. Chosen afresh on every keystroke they flicker: an unclosed string or bracket hides the rest
of the file from the parser while it is typed, the prefix boundaries and the ranked items follow, and each flicker
costs a whole prefill (about 1,300 tokens: tens of seconds on a slow 2-core CPU). So a prompt keeps the last
layout of its document while it still holds: the text before the prefix start is unchanged, no edit since touched a
context item of this file, the other files' items are still in their outlines, and it has not outgrown the budget
by more than half of it (sizing.KEPT_GROWTH: a layout chosen afresh fits the budget and costs a whole prompt).

The same holds inside the prompt's end. With the typed line after the FIM middle marker (middle_from "line"), a
newline moved that line in front of the marker, and the suffix after it ran again: ~100 tokens, seconds on that CPU, at
the pause after Enter where a suggestion for the next line is most wanted. So the middle keeps starting where the
last prompt's did while nothing before the marker changed, for up to `middle_lines` lines (middle_start).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Mapping

from .context import PROJECT, OutlineItem
from .text import common_prefix_length, common_suffix_length

# Each layout holds its document's text; the engine keeps KV caches for 4 documents (Engine.max_sessions), so a few
# more than that is plenty.
REMEMBERED_DOCUMENTS = 16


@dataclass(frozen=True)
class Layout:
    uri: str
    text: str                 # the document when the layout was chosen (edits are measured against it)
    prefix_start: int         # offset in `text` where the current file's prefix starts
    items: tuple              # (document uri, (OutlineItem, ...)) in prompt order; this document last
    spans: tuple              # (start, end) offsets in `text` of this document's items
    context_tokens: int       # what the prefix was chosen to leave for the items and the other files' headers
    middle: "MiddleStart | None" = None  # where the last prompt's FIM middle started (line split only)
    total: int = 0            # the total token budget it was chosen for (a cold start's is smaller: growth.py)


@dataclass(frozen=True)
class MiddleStart:
    offset: int    # document offset where the last prompt's FIM middle started
    before: str    # that prompt's current-file text from the prefix start to there
    suffix: str    # that prompt's suffix


def middle_start(last: MiddleStart | None, text: str, prefix_start: int, line_start: int, suffix: str,
                 middle_lines: int) -> int:
    """Where the FIM middle starts for a cursor on the line starting at `line_start`: where the last prompt's
    started, while the prompt before the middle marker would be the same (prefix text and suffix unchanged) and
    the middle spans at most `middle_lines` lines; else at the cursor line's start. `last` must come from a kept
    layout (same prefix start and context)."""
    if last is None or not prefix_start <= last.offset <= line_start or last.suffix != suffix:
        return line_start
    if text.count("\n", last.offset, line_start) >= middle_lines:
        return line_start
    if last.offset - prefix_start != len(last.before) or not text.startswith(last.before, prefix_start):
        return line_start
    return last.offset


def with_middle(layout: Layout, text: str, split: int, suffix: str) -> Layout:
    """The layout to remember after a prompt whose middle started at `split`."""
    return replace(layout, middle=MiddleStart(split, text[layout.prefix_start:split], suffix))


def unchanged_ends(old: str, new: str) -> tuple[int, int]:
    """Lengths of the longest common start and end of two texts (not overlapping): what an edit left alone."""
    head = common_prefix_length(old, new)
    return head, common_suffix_length(old, new, min(len(old), len(new)) - head)


def still_holds(layout: Layout | None, uri: str, text: str, line_start: int,
                outlines: Mapping[str, list[OutlineItem]]) -> bool:
    """Whether the last layout of `uri` can be kept for `text` with the cursor line starting at `line_start`.
    outlines: the other open documents' current outlines by uri."""
    if layout is None or layout.uri != uri or layout.prefix_start > line_start:
        return False
    head, tail = unchanged_ends(layout.text, text)
    if layout.prefix_start > head:
        return False
    changed_end = len(layout.text) - tail  # the edits replaced layout.text[head:changed_end]
    if any(start < changed_end and end > head for start, end in layout.spans):
        return False
    for other, items in layout.items:
        if other == uri:
            continue
        if other not in outlines:
            if all(item.kind == PROJECT for item in items):
                continue  # the project's snippets stay until the context is re-ranked (growth.py)
            return False
        present = {item.text for item in outlines[other]}
        if any(item.kind != PROJECT and item.text not in present for item in items):
            return False
    return True


class Layouts:
    """The last layout of each recently completed document (a bounded LRU). Used from one thread: the prompt
    thread, or the caller of a blocking completion."""

    def __init__(self, size: int = REMEMBERED_DOCUMENTS) -> None:
        self.size = size
        self.last: OrderedDict[str, Layout] = OrderedDict()

    def get(self, uri: str) -> Layout | None:
        return self.last.get(uri)

    def forget(self, uri: str) -> None:
        self.last.pop(uri, None)

    def remember(self, layout: Layout | None) -> None:
        if layout is None:
            return
        self.last[layout.uri] = layout
        self.last.move_to_end(layout.uri)
        while len(self.last) > self.size:
            self.last.popitem(last=False)
