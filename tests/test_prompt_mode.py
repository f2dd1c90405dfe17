"""Single line or block, decided from the code at the cursor (█), per language."""
import pytest

from codecue_lsp.prompt import OpenDocument, build_prompt
from codecue_lsp.prompt.text import split_cursor
from engine.models import FimTemplate

FIM = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")


def built(language, marked):
    text, line, character = split_cursor(marked)
    return build_prompt(OpenDocument("file:///w/x", language, text), line, character, FIM, lambda s: len(s) // 3 + 1)


@pytest.mark.parametrize("language, marked, mode, header_indent", [
    ("python", "def f(x):\n    █", "block", ""),
    ("python", "def f(x):\n█", "block", ""),
    ("python", "def f(x):█", "block", ""),
    ("python", "class A:\n    def m(self):  # comment\n        █\n", "block", "    "),
    ("python", "if x:\n    pass\nelse:\n    █", "block", ""),
    ("python", "d = {1:█", "line", ""),                    # a dict entry's ':' opens no block
    # An indented empty line inside a block: the block's next statements, up to the enclosing header.
    ("python", "def fib(n):\n    if n <= 1:\n        return n\n    █", "block", ""),
    ("python", "class A:\n    def m(self):\n        x = 1\n\n        █\n", "block", "    "),
    ("python", "x = 1\n█", "line", ""),                       # top level, nothing typed: one line
    ("python", "def f():\n    x = 1\n    y█", "line", "    "),  # typing on a line: finish it
    ("go", "func f() int {\n\tx := 1\n\t█\n}", "block", ""),
    ("python", "x = foo(a, █)", "line", ""),                 # mid-line
    ("python", "def f(x):\n    y = 1\n    █", "block", ""),     # after an ordinary statement: the next ones
    ("python", "def f(x):\n    return x█", "line", "    "),
    ("javascript", "function f(a) {\n  █\n}", "block", ""),
    ("typescriptreact", "const f = (a: number) => {\n  █\n}", "block", ""),
    ("go", "func f() int {\n\t█\n}", "block", ""),
    ("rust", "fn f() -> i32 {\n    █\n}", "block", ""),
    ("java", "class A {\n  int f() {\n    █\n  }\n}", "block", "  "),
    ("c", "int f(void) {  // note\n  █\n}", "block", ""),
    ("cpp", "int x = f(1, █);", "line", ""),
    ("plaintext", "foo {\n  █", "block", ""),               # unknown language: line-based rules
    ("plaintext", "hello █world", "line", ""),
])
def test_mode(language, marked, mode, header_indent):
    prompt = built(language, marked)
    assert (prompt.mode, prompt.header_indent) == (mode, header_indent)


@pytest.mark.parametrize("marked, withheld, line_suffix, indent", [
    ("def f():\n    █", "    ", "", "    "),
    ("def f():\n  █  ", "  ", "  ", "    "),
    ("x = f(█)  ", "", ")  ", ""),
    ("    x█", "", "", "    "),
])
def test_cursor_line_fields(marked, withheld, line_suffix, indent):
    prompt = built("python", marked)
    assert (prompt.withheld, prompt.line_suffix, prompt.indent) == (withheld, line_suffix, indent)
    # The typed indentation is withheld from the prompt: the prompt's prefix ends at the line start.
    assert prompt.display.split("<|fim_suffix|>")[0].endswith(prompt.prefix)
    assert not prompt.prefix.endswith(" ") or not withheld
