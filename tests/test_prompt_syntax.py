"""Incremental tree-sitter parsing per document, and the syntax facts the prompt rules use."""
import random

import pytest

from codecue_lsp.prompt.syntax import (
    MAX_PARSE_BYTES,
    SyntaxCache,
    parse_bytes,
    parse_document,
    text_edit,
)
from codecue_lsp.prompt.text import encode, sanitize, split_cursor

SOURCES = {
    "python": ("import os\n\nclass A(B):\n    def m(self, x):\n        return [x, 'é😀']\n\n"
               "def f(a):\n    if a:\n        return a\n"),
    "javascript": "import x from 'y';\nfunction f(a, b) {\n  return a + b;\n}\nclass C { m() { return 1; } }\n",
    "typescriptreact": "export function F(p: P) {\n  return <div>{p.x}</div>;\n}\n",
    "go": "package main\n\nimport \"fmt\"\n\nfunc f(a int) int {\n\treturn a\n}\n",
    "rust": "use std::io;\nfn f(a: i32) -> i32 {\n    a + 1\n}\nimpl S { fn m(&self) {} }\n",
    "java": "import java.util.List;\nclass A {\n  int f(int a) { return a; }\n}\n",
    "c": "#include <stdio.h>\nint f(int a) {\n  return a;\n}\n",
    "cpp": "#include <vector>\nclass A {\n public:\n  int m(int x) { return x; }\n};\n",
}
ALPHABET = ["(", ")", "{", "}", ":", "\n", "    ", "x", "def ", "return ", "'", "é", "😀", ";", "\ud800"]


def random_edit(rng, text):
    start = rng.randrange(len(text) + 1)
    end = min(len(text), start + rng.randrange(6))
    return text[:start] + "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(4))) + text[end:]


@pytest.mark.parametrize("language_id", sorted(SOURCES))
def test_incremental_parse_matches_a_fresh_parse(language_id):
    rng = random.Random(language_id)
    cache = SyntaxCache()
    text = SOURCES[language_id]
    cache.update("file:///a", language_id, text)
    for _ in range(40):
        text = random_edit(rng, text)
        cache.update("file:///a", language_id, text)
        fresh = parse_document(language_id, sanitize(text))  # the cache keeps lone surrogates as U+FFFD
        assert str(cache.tree("file:///a").root_node) == str(fresh.tree.root_node)


@pytest.mark.parametrize("old, new", [("abc", "abXc"), ("abc", "ac"), ("", "x\ny"), ("x\ny", ""), ("aaa", "aaaa"),
                                      ("é\nb", "é\nbc"), ("same", "same")])
def test_text_edit_describes_the_change(old, new):
    edit = text_edit(encode(old), encode(new))
    if old == new:
        assert edit is None
        return
    o, n = encode(old), encode(new)
    assert o[:edit["start_byte"]] + n[edit["start_byte"]:edit["new_end_byte"]] + o[edit["old_end_byte"]:] == n
    row, column = edit["new_end_point"]
    assert row == n[:edit["new_end_byte"]].count(b"\n")
    assert column == edit["new_end_byte"] - (n.rfind(b"\n", 0, edit["new_end_byte"]) + 1)


def test_cache_never_raises_on_odd_input_and_closes():
    cache = SyntaxCache()
    for text in ["", "\ud800\udfff bad", "def f(:\n\x00\x01", "é" * 10]:
        cache.update("file:///odd", "python", text)
        assert cache.tree("file:///odd") is not None
    cache.update("file:///odd", "cobol", "IDENTIFICATION DIVISION.")
    assert cache.tree("file:///odd") is None            # no grammar: line-based logic
    cache.update("file:///big", "python", "x = 1\n" * (MAX_PARSE_BYTES // 6 + 1))
    assert cache.tree("file:///big") is None            # too large to parse whole; prompts parse a window
    cache.close("file:///odd")
    assert cache.tree("file:///odd") is None and cache.text("file:///odd") is None
    assert parse_bytes("python", b"\xff\xfe def") is not None


def test_view_reparses_when_the_text_is_newer_than_the_cache():
    cache = SyntaxCache()
    cache.update("file:///a", "python", "def f():\n    pass\n")
    view = cache.view("file:///a", "python", "def g():\n    return 1\n")
    assert "return_statement" in str(view.tree.root_node)


@pytest.mark.parametrize("marked, prefix_rows, suffix_rows", [
    ("import os\n\ndef f():\n    a = 1\n    █\n    b = 2\n\nx = 3\n", [0, 2, 3], [5, 7, 8]),
    ("class A:\n    def m(self):\n        █pass\n    def n(self):\n        pass\n", [0, 1, 2], [2, 4, 5]),
])
def test_boundaries_follow_the_enclosing_blocks(marked, prefix_rows, suffix_rows):
    text, line, character = split_cursor(marked)
    view = parse_document("python", text)
    ancestors = view.ancestors(line, character)
    assert view.prefix_boundaries(ancestors, line) == prefix_rows
    assert view.suffix_boundaries(ancestors, line) == suffix_rows
