"""BackgroundWork (codecue_lsp/background.py) owns the background work's plans: a closed document's go, the rest stay;
a shutdown drops every plan. The work itself: tests/test_next_line.py, test_warmup.py, test_prompt_growth.py."""
from __future__ import annotations

from codecue_lsp.background import BackgroundWork
from codecue_lsp.growth import GrowthPlan
from codecue_lsp.next_line import NextLine
from codecue_lsp.warmup import RestingCursor

A, B = "file:///w/a.py", "file:///w/b.py"


def planned(uri: str) -> tuple[GrowthPlan, RestingCursor, NextLine]:
    return (GrowthPlan(uri, 1, "python", "x = 1\n", 0, 5), RestingCursor(uri, 0, 5, 1),
            NextLine(uri, 1, "python", "x = 1\n\n", 1, "x = 1", "\n"))


def test_a_closed_document_drops_only_its_own_plans():
    work = BackgroundWork(server=None)
    growth, rest, line = planned(A)
    work.pending_growth, work.resting_cursor, work.line_after_rest = growth, rest, line
    work.next_lines.update({A: "a", B: "b"})
    work.writing(line, task=None)
    work.forget(B)
    assert (work.pending_growth, work.resting_cursor, work.line_after_rest) == (growth, rest, line)
    assert work.next_lines == {A: "a"} and work.writer == (line, None)
    work.forget(A)
    assert (work.pending_growth, work.resting_cursor, work.line_after_rest, work.writer) == (None, None, None, None)
    assert work.next_lines == {}


def test_a_growth_is_done_only_for_the_plan_that_is_pending():
    work = BackgroundWork(server=None)
    older, newer = planned(A)[0], planned(B)[0]
    work.pending_growth = newer
    work.growth_done(older)  # a growth of an older plan ended: the newer one stays pending
    assert work.pending_growth is newer
    work.growth_done(newer)
    assert work.pending_growth is None


def test_shutting_down_drops_every_plan():
    work = BackgroundWork(server=None)
    work.pending_growth, work.resting_cursor, work.line_after_rest = planned(A)
    work.stop()
    assert (work.pending_growth, work.resting_cursor, work.line_after_rest) == (None, None, None)
