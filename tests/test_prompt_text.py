"""Positions: LSP (line, UTF-16 character) to offsets, clamping, odd text."""
import pytest

from codecue_lsp.prompt.text import (
    first_unbalanced_closer,
    offset_of_position,
    open_brackets,
    sanitize,
    split_cursor,
    utf16_to_index,
)


@pytest.mark.parametrize("marked", [
    "ab█c",
    "█",
    "x = 1\ny = 2█\n",
    "s = '😀😀█'",              # astral characters are two UTF-16 units each
    "a\r\nb😀█c\r\n",          # CRLF line breaks
    "é\n🙂 = '█'",
])
def test_offset_of_position_round_trips_the_marker(marked):
    text, line, character = split_cursor(marked)
    assert offset_of_position(text, line, character) == marked.index("█")


@pytest.mark.parametrize("text, line, character, expected", [
    ("abc\ndef", 0, 99, 3),         # past the end of the line -> end of line
    ("abc\ndef", 7, 2, 7),          # past the last line -> end of the document
    ("abc\ndef", -1, -5, 0),        # negative -> start
    ("", 3, 3, 0),                  # empty document
    ("a\rb\rcd", 2, 1, 5),        # lone CR is a line break in LSP
    ("😀x", 0, 1, 0),               # inside a surrogate pair -> before the astral character
    ("😀x", 0, 2, 1),
    ("😀x", 0, 3, 2),
])
def test_offset_of_position_clamps(text, line, character, expected):
    assert offset_of_position(text, line, character) == expected


def test_utf16_to_index_counts_astral_as_two():
    assert utf16_to_index("a😀b😀c", 6) == 4


def test_sanitize_replaces_lone_surrogates_one_for_one():
    bad = b"x = '\xff\xfe'\n".decode("utf-8", "surrogateescape")
    clean = sanitize(bad)
    assert len(clean) == len(bad) and clean.encode("utf-8") and "\ufffd" in clean
    assert sanitize("😀 ok") == "😀 ok"


@pytest.mark.parametrize("text, depth, expected", [
    ("a, b)", 0, 4),
    ("f(a))", 0, 4),
    ("f(a)", 0, None),
    ("')' + x)", 0, 7),   # brackets inside string literals do not count
    ("a)", 1, None),      # one bracket was open before the cursor
    ("a))", 1, 2),
])
def test_first_unbalanced_closer(text, depth, expected):
    assert first_unbalanced_closer(text, depth) == expected


@pytest.mark.parametrize("text, expected", [("foo(a, [b", 2), ("x)(", 1), ("'(' + (", 1), ("", 0)])
def test_open_brackets(text, expected):
    assert open_brackets(text) == expected
