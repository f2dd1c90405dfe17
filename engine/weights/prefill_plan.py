"""How a prompt is prefilled: the prefix a cache already holds, and the chunks (cut where a shared prefix ends)."""
from __future__ import annotations


def common_prefix_length(a: list[int], b: list[int]) -> int:
    m = min(len(a), len(b))
    if a[:m] == b[:m]:  # the usual case: one extends the other; list equality runs at C speed
        return m
    lo, hi = 0, m  # binary search for the first mismatch; a[:lo] == b[:lo] holds throughout
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prefill_pieces(start: int, end: int, chunk: int, shared: int = 0, cancelled=None, finishing=None):
    """(first, last, stop_when) for each prefill pass over positions start..end, `chunk` tokens each, cut where the
    `shared` prefix ends. stop_when is what may stop the pass within (engine/interrupt.py): `cancelled`, except for
    a pass inside the shared prefix, which the next keystroke's request will likely reuse
    (CompletionRequest.shared_prefix): a cancel lets it end instead of throwing its work away, and only
    `finishing(last)` may stop it (the engine's test that a later request still wants these tokens; None: nothing).
    The caller still stops before the next pass. Without this, a slow CPU that aborts every pass on the next
    keystroke never gets through a long prompt while the user types."""
    while start < end:
        stop = min(start + chunk, end)
        if start < shared < stop:
            stop = shared
        if stop <= shared:
            yield start, stop, finishing(stop) if finishing is not None else None
        else:
            yield start, stop, cancelled
        start = stop
