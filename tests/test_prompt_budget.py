"""Token-budget cuts: anchors for a stable prefix start, statement-aligned suffix ends."""
import pytest

from codecue_lsp.prompt.budget import anchors, choose_prefix_start, choose_suffix_end


def count(text):
    return len(text)  # one token a character keeps the expected cuts easy to read


@pytest.mark.parametrize("boundaries, bucket, always, expected", [
    ([0, 10, 30, 120, 130, 250], 100, [], [0, 120, 250]),
    ([5, 10, 30], 100, [30], [5, 30]),
    ([], 100, [7], [7]),
])
def test_anchors_are_the_first_boundary_of_each_bucket(boundaries, bucket, always, expected):
    assert anchors(boundaries, bucket, always) == expected


TEXT = "aaaa\nbbbb\ncccc\ndddd\n"  # line starts 0, 5, 10, 15


@pytest.mark.parametrize("budget, anchor_offsets, boundary_offsets, expected", [
    (100, [0, 10], [0, 5, 10], 0),     # everything fits: from the top
    (12, [0, 10], [0, 5, 10], 10),     # the earliest anchor that fits, not the earliest boundary
    (8, [0, 10], [0, 5, 10], 15),      # no anchor or boundary fits: fall back to line starts
    (2, [0], [0], 19),                 # not even the cursor's line: nothing (never a cut inside a word)
    (16, [10], [0, 5, 10], 5),         # the anchor fills 9 of 16: a boundary that fills more
    (30, [15], [15], 0),               # the only boundary fills 4 of 30 (a long unit above): lines, up to the top
])
def test_choose_prefix_start(budget, anchor_offsets, boundary_offsets, expected):
    end = len(TEXT) - 1  # the cursor at the end of "dddd"
    assert choose_prefix_start(TEXT, end, budget, count, anchor_offsets, boundary_offsets, [0, 5, 10, 15]) == expected


def test_an_anchor_that_fills_most_of_the_budget_stays_though_a_line_would_fill_more():
    text = "x\n" * 10 + "y" * 8  # line starts every 2 characters; the cursor at the end
    lines = list(range(0, 20, 2))
    assert choose_prefix_start(text, len(text), 18, count, [14], [14], lines) == 14  # 14 of 18: it does not move
    assert choose_prefix_start(text, len(text), 24, count, [14], [14], lines) == 4   # 14 of 24: lines fill it


def test_prefix_never_cuts_inside_a_word():
    text = "first second third"
    assert choose_prefix_start(text, len(text), 12, count, [], [], [0]) == text.index("second")


@pytest.mark.parametrize("budget, boundary_offsets, expected", [
    (100, [11, 21], 21),
    (12, [11, 21], 11),     # the last statement end that fits
    (17, [21], 16),         # no statement end fits: the last line end that does
    (2, [21], 2),           # not even the rest of the line: a word end
])
def test_choose_suffix_end(budget, boundary_offsets, expected):
    text = "xx yy\nbbbb\ncccc\ndddd\n"
    assert choose_suffix_end(text, 0, budget, count, boundary_offsets, [6, 11, 16, 21]) == expected
