"""The finalists of a role timed again side by side: llama.cpp's row and the best torch row, pass by pass in turn.

Why: the calibration times llama.cpp's formats first and the torch formats a minute later. On a shared VM the same
pass costs more in one minute than in the next, so a row measured in a slow minute loses to one measured in a fast
one (seen on a Zen 4: the vnni target lost to llama.cpp's, then the two timed level within the hour). Where
the two are within FINALIST_RATIO of each other, their passes are timed again alternately — width by width, one call
of each in turn — so both see the same minutes, and both rows take those figures (`Measurement.side_by_side`).
"""
from __future__ import annotations

import logging
import time

import torch

from engine.calibration.measurements import WIDTHS, Measurement, no_dearer_than_wider

log = logging.getLogger(__name__)

# One-token passes further apart than this are not close calls: no re-timing. 2x, not 1.5x: a slow minute has nearly
# doubled the vnni target's one-token pass, and the calibration then chose llama.cpp and left the draft model off.
FINALIST_RATIO = 2.0
ROUNDS = 5  # each width of each finalist: the best of this many calls, interleaved with the rival's...
SETTLED_RATIO = 1.5  # ... or, for the one behind, of MIN_ROUNDS where, by then, the other is this much ahead at that
# width: not a close call, and timing llama.cpp's slow verify widths in full was most of what the retiming cost.
# The one ahead is timed every round still: its figures price the drafting policy's verify passes, and two calls
# alone have left a 4-token pass out of line with the widths beside it.
MIN_ROUNDS = 2


class PassTimer:
    """A cache holding the calibration's context (`ids[:context]`): times one pass over the next `width` ids and
    cuts the cache back, for llama.cpp's models (llamacpp_timing.measure, keep=) and torch's
    (torch_timing.time_passes, pass_timer) alike. owner: what close() closes too (llama.cpp's model). clock: seconds
    now (tests pass a simulated one, so their figures do not depend on the machine's speed)."""

    def __init__(self, cache, ids: list[int], context: int, owner=None, clock=time.perf_counter):
        self.cache, self.ids, self.context, self.owner, self.clock = cache, ids, context, owner, clock

    def pass_ms(self, width: int) -> float:
        with torch.inference_mode():
            started = self.clock()
            self.cache.forward(self.ids[self.context:self.context + width], logits="all")
            self.cache.truncate(self.context)
            return 1000 * (self.clock() - started)

    def close(self) -> None:
        self.cache = None
        if self.owner is not None:
            self.owner.close()


def rival_in_reach(rival: Measurement, rows: list[Measurement], ratio: float | None = None) -> Measurement | None:
    """The torch row to time again beside `rival` (llama.cpp's): the complete row with the cheapest one-token pass,
    when that is within `ratio` of the rival's either way; None when one side is clearly faster."""
    complete = [m for m in rows if m.complete and m.role == rival.role]
    if not complete or not rival.complete:
        return None
    best = min(complete, key=lambda m: m.pass_ms[1])
    ratio = FINALIST_RATIO if ratio is None else ratio
    slower, faster = sorted((best.pass_ms[1], rival.pass_ms[1]), reverse=True)
    return best if slower <= ratio * faster else None


def time_side_by_side(finalists: list[tuple[Measurement, object]], widths=WIDTHS, rounds: int | None = None) -> None:
    """Each finalist's pass over each width, the best of `rounds` calls (for the ones behind, MIN_ROUNDS where one is
    clearly ahead at that width), taken in turn with the others' calls of the same width; the rows' pass_ms are
    replaced by these figures and marked side_by_side. A round times every width (a settled one for the finalist
    ahead only), so a slow minute lands on one round of every width, not on every call of one: timed width by
    width, a calibration once recorded the 1.5B's 4-token pass far dearer than it was, and the auto policy, pricing
    verify passes by that shape, drafted 2 tokens where 3 paid (docs/performance.md, "Weight formats")."""
    rounds = ROUNDS if rounds is None else rounds
    best = [dict.fromkeys(widths, float("inf")) for _ in finalists]
    ahead: dict[int, int] = {}  # settled widths: the finalist clearly ahead there, the only one still timed
    for turn in range(rounds):
        # Who goes first alternates: a pass right after another model's may pay for the other's caches.
        order = list(range(len(finalists)))[::1 if turn % 2 == 0 else -1]
        for width in widths:
            for i in order:
                if ahead.get(width, i) == i:
                    best[i][width] = min(best[i][width], finalists[i][1].pass_ms(width))
        if turn + 1 >= MIN_ROUNDS:
            for w in [w for w in widths if w not in ahead]:
                fastest = min(range(len(finalists)), key=lambda i: best[i][w])
                if max(times[w] for times in best) > SETTLED_RATIO * best[fastest][w]:
                    ahead[w] = fastest
    for (row, _), times in zip(finalists, best):
        log.info("side by side: %s %s/%s one-token pass %.1f -> %.1f ms", row.role, row.weights, row.activations,
                 row.pass_ms[1], times[widths[0]])
        row.pass_ms = no_dearer_than_wider({w: round(ms, 2) for w, ms in times.items()})
        row.side_by_side = True
