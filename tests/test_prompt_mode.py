"""Single line or block, decided from the code at the cursor (█), per language."""
import pytest

from codecue_lsp.prompt import OpenDocument, build_prompt
from codecue_lsp.prompt.text import split_cursor
from engine.store.config import FimTemplate

FIM = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")


def built(language, marked, middle_from="cursor"):
    text, line, character = split_cursor(marked)
    return build_prompt(OpenDocument("file:///w/x", language, text), line, character, FIM, lambda s: len(s) // 3 + 1,
                        middle_from=middle_from)


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
    assert (prompt.display.split("<|fim_suffix|>")[0] + prompt.middle).endswith(prompt.prefix)
    assert not prompt.prefix.endswith(" ") or not withheld


# (marked document, what the middle starts with: the cursor line's typed part, after the middle marker)
MIDDLE_CASES = [
    ("def f(x):\n    return x█\n", "    return x"),
    ("def f():\n    █", ""),                 # only indentation typed: withheld, the model writes the indent
    ("x = f(█)  ", "x = f("),                 # mid-line: the line's rest stays in the suffix
    ("█", ""),
    ("a = 1\nb█ = 2\nc = 3\n", "b"),
    ("a = 1\r\nb = █\r\n", "b = "),
]


@pytest.mark.parametrize("marked, middle", MIDDLE_CASES)
def test_the_middle_starts_at_the_cursor_line(marked, middle):
    prompt = built("python", marked, middle_from="line")
    assert prompt.middle == middle
    assert prompt.display.endswith("<|fim_middle|>" + middle)
    before_suffix = prompt.display.split("<|fim_suffix|>")[0]
    assert (before_suffix + middle).endswith(prompt.prefix) and not before_suffix.endswith(middle or "\0")
    # The plain PSM split (the default) keeps the whole prefix before the suffix, nothing after the middle marker.
    plain = built("python", marked)
    assert plain.middle == "" and plain.display.endswith("<|fim_middle|>")
    assert plain.display.split("<|fim_suffix|>")[0].endswith(plain.prefix)


def test_typing_on_a_line_changes_only_what_follows_the_middle_marker():
    """What makes a keystroke cheap: the prompt before the middle marker (context, prefix, suffix) stays the same,
    so the KV cache keeps it; with the cursor split every keystroke changes the prefix and the suffix after it."""
    document = "import os\n\n\ndef area(r):\n    return 3.1█\n\n\nprint(area(2))\n"
    typed = [document.replace("█", piece + "█") for piece in ("", "4", "41", "415")]
    for middle_from, stable in (("line", True), ("cursor", False)):
        heads = []
        for marked in typed:
            text, line, character = split_cursor(marked)
            prompt = build_prompt(OpenDocument("file:///w/geo.py", "python", text), line, character, FIM,
                                  lambda s: len(s) // 3 + 1, middle_from=middle_from)
            heads.append(prompt.display.rsplit("<|fim_middle|>", 1)[0])
        assert (len(set(heads)) == 1) == stable, middle_from


def test_middle_from_must_be_line_or_cursor():
    with pytest.raises(ValueError, match="middle_from"):
        build_prompt(OpenDocument("file:///w/x", "python", "x"), 0, 1, FIM, len, middle_from="word")


@pytest.mark.parametrize("line, comment, code", [
    ("x = 1  # one", "#", "x = 1  "),
    ('x = " #"  # a marker in a string is not a comment', "#", 'x = " #"  '),
    ("a = b // 2  # floor", "#", "a = b // 2  "),
    ("f(); // done", "//", "f(); "),
    ("no comment", "#", "no comment"),
])
def test_strip_line_comment(line, comment, code):
    from codecue_lsp.prompt.mode import strip_line_comment

    assert strip_line_comment(line, comment) == code
