"""Where the prefix starts and the suffix ends, in a token budget, at syntactic boundaries.

The prefix start is chosen so that it does not move on every keystroke (the KV cache is reused up to the first
changed token): it snaps to "anchors", the first statement boundary in each fixed-size bucket of document
offsets, so it only moves when the budget forces it, and then by about a bucket at a time.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

_WORD_START = re.compile(r"(?<=\s)\S")  # never cut inside a word


def first_fitting(candidates: Sequence[int], fits: Callable[[int], bool]) -> int | None:
    """The first candidate (ascending, `fits` monotone False...True) that fits, by binary search."""
    low, high = 0, len(candidates)
    while low < high:
        mid = (low + high) // 2
        if fits(candidates[mid]):
            high = mid
        else:
            low = mid + 1
    return candidates[low] if low < len(candidates) else None


def last_fitting(candidates: Sequence[int], fits: Callable[[int], bool]) -> int | None:
    """The last candidate (ascending, `fits` monotone True...False) that fits."""
    low, high = 0, len(candidates)
    while low < high:
        mid = (low + high) // 2
        if fits(candidates[mid]):
            low = mid + 1
        else:
            high = mid
    return candidates[low - 1] if low > 0 else None


def anchors(boundaries: Sequence[int], bucket_chars: int, always: Sequence[int] = ()) -> list[int]:
    """The first boundary offset of each bucket of `bucket_chars` document offsets, plus `always`."""
    chosen = set(always)
    previous_bucket = None
    for offset in sorted(boundaries):
        bucket = offset // bucket_chars
        if bucket != previous_bucket:
            chosen.add(offset)
            previous_bucket = bucket
    return sorted(chosen)


# A prefix start that leaves more of the budget unused than this gives way to a finer one: an anchor to a statement
# boundary, a boundary to a line start. Statement boundaries are those of the cursor's enclosing blocks, so after a
# long unit (a function, a class) the only ones that fit can be the cursor's own statement: a cursor at the top of a
# new function below a long one got a prefix of its header alone (a small fraction of its budget), not the lines
# just above it.
MIN_PREFIX_FILL = 0.75


def choose_prefix_start(text: str, end: int, budget: int, count_tokens: Callable[[str], int],
                        anchor_offsets: Sequence[int], boundary_offsets: Sequence[int],
                        line_offsets: Sequence[int]) -> int:
    """Start offset of the prefix text[start:end] within `budget` tokens: the earliest anchor that fits, else
    the earliest statement boundary, else the earliest line start, else a word start on the last line; a coarser
    start that fills less than MIN_PREFIX_FILL of the budget gives way to the next, finer kind."""
    def fits(start: int) -> bool:
        return count_tokens(text[start:end]) <= budget

    best = None
    for candidates in (anchor_offsets, boundary_offsets, line_offsets):
        candidates = sorted(o for o in set(candidates) if 0 <= o <= end)
        start = first_fitting(candidates, fits)
        if start is not None and (best is None or start < best):
            best = start
        if best is not None and count_tokens(text[best:end]) >= MIN_PREFIX_FILL * budget:
            return best
    if best is not None:
        return best
    line_start = text.rfind("\n", 0, end) + 1
    words = [m.start() for m in _WORD_START.finditer(text, line_start, end)]
    start = first_fitting(words, fits)
    return start if start is not None else end


def choose_suffix_end(text: str, start: int, budget: int, count_tokens: Callable[[str], int],
                      boundary_offsets: Sequence[int], line_offsets: Sequence[int]) -> int:
    """End offset of the suffix text[start:end] within `budget` tokens: the last statement end that fits, else
    the last line end, else a word end on the cursor's line."""
    def fits(end: int) -> bool:
        return count_tokens(text[start:end]) <= budget

    for candidates in (boundary_offsets, line_offsets):
        candidates = sorted(o for o in set(candidates) if o > start)
        end = last_fitting(candidates, fits)
        if end is not None:
            return end
    line_end = text.find("\n", start)
    line_end = len(text) if line_end < 0 else line_end
    word_ends = [start + m.end() for m in re.finditer(r"\S+", text[start:line_end])]
    end = last_fitting(word_ends, fits)
    return end if end is not None else start

