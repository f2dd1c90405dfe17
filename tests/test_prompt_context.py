"""Context pieces: imports and signatures per language, and their ranking."""
import pytest

from codecue_lsp.prompt.context import OutlineItem, rank_items, select_items
from codecue_lsp.prompt.syntax import parse_document


@pytest.mark.parametrize("language, source, expected", [
    ("python", "import os\nclass A(B):\n    def m(self, x):\n        return x\n@dec\ndef g(x,\n      y) -> int:\n"
               "    '''doc'''\n    return 1\n",
     [("import", "", "import os"), ("signature", "A", "class A(B):\n    def m(self, x): ..."),
      ("signature", "g", "def g(x,\n      y) -> int: ...")]),
    ("javascript", "import x from 'y';\nfunction f(a, b) {\n  return a + b;\n}\nclass C { m() { return 1; } }\n",
     [("import", "", "import x from 'y';"), ("signature", "f", "function f(a, b) { ... }"),
      ("signature", "C", "class C {\n    m() { ... }\n}")]),
    ("typescript", "interface I { a: number }\nexport function f(a: number): string {\n  return '';\n}\n",
     [("signature", "I", "interface I { a: number }"), ("signature", "f", "function f(a: number): string { ... }")]),
    ("go", "package main\nimport \"fmt\"\nfunc (s *S) M(x int) error {\n\treturn nil\n}\n",
     [("import", "", 'import "fmt"'), ("signature", "M", "func (s *S) M(x int) error { ... }")]),
    ("rust", "use std::io;\nimpl S {\n    pub fn m(&self) -> u8 { 1 }\n}\n",
     [("import", "", "use std::io;"), ("signature", "S", "impl S {\n    pub fn m(&self) -> u8 { ... }\n}")]),
    ("java", "import java.util.List;\nclass A {\n  int f(int a) { return a; }\n}\n",
     [("import", "", "import java.util.List;"), ("signature", "A", "class A {\n  int f(int a) { ... }\n}")]),
    ("c", "#include <stdio.h>\nstatic int *f(int a) {\n  return 0;\n}\n",
     [("import", "", "#include <stdio.h>"), ("signature", "f", "static int *f(int a) { ... }")]),
    ("cpp", "class A {\n public:\n  int m(int x) { return x; }\n};\n",
     [("signature", "A", "class A {\n  int m(int x) { ... }\n}")]),
])
def test_outline_per_language(language, source, expected):
    items = parse_document(language, source).outline()
    assert [(i.kind, i.name, i.text) for i in items] == expected


def item(name, kind="signature", row=0, text=None):
    text = text or f"def {name}(a): ..."
    return OutlineItem(kind, name, text, row, row, frozenset({name, "a"}))


def test_ranking_called_then_imports_then_same_file_then_other_files():
    current = [item("local", row=1), item("", "import", 0, "import numpy"), item("visible", row=50)]
    others = [[item("remote")], [item("target")]]
    ranked = rank_items(current, others, "x = target(1)\n", cursor_row=50, visible_rows=(40, 60))
    assert [c.item.name or c.item.text for c in ranked] == ["target", "import numpy", "local", "remote"]


def test_selection_fills_the_budget_in_rank_order_and_lays_out_in_document_order():
    current = [item(f"f{i}", row=i) for i in range(10)]
    ranked = rank_items(current, [], "f7(f3())", cursor_row=100, visible_rows=(100, 100))
    chosen = select_items(ranked, budget=12, count_tokens=lambda s: 5, header_tokens=lambda source: 0)
    assert [i.name for i in chosen[0]] == ["f3", "f7"]
