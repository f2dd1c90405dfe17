"""Post-processing rules, table-driven: document with the cursor (█), raw model output, what is shown."""
import pytest

from codecue_lsp.postprocess import (
    drop_trailing_comment,
    make_stop_predicate,
    postprocess,
    replacement_text,
)
from codecue_lsp.prompt import OpenDocument, build_prompt
from codecue_lsp.prompt.text import split_cursor
from engine.store.config import FimTemplate

FIM = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")


def built(language, marked):
    text, line, character = split_cursor(marked)
    return build_prompt(OpenDocument("file:///w/x", language, text), line, character, FIM, lambda s: len(s) // 3 + 1)


CASES = [
    # line mode: first line only, trailing whitespace gone
    ("python", "x = █", "compute(1)  \ny = 2\n", "compute(1)"),
    ("python", "x = 1█", "\n\n    y = 2\nz = 3", "\n    y = 2"),       # a next-line suggestion keeps one break
    # the closing bracket already after the cursor is not repeated
    ("python", "print(█)", "a, b)", "a, b"),
    ("python", "print(█)", "foo(x)", "foo(x)"),                        # this ')' closes foo(, keep it
    ("python", "if x█:\n    pass", " > 0:", " > 0"),
    ("python", "s = 'hel█'", "lo'", "lo"),
    ("python", "f(a, █)", "b))\nmore", "b"),                         # closing more than was open stops there
    # block mode: stop when a line dedents out of the block
    ("python", "def f(x):\n    █", "    y = x * 2\n    return y\n\ndef g():\n    pass", "y = x * 2\n    return y"),
    ("python", "def f(x):\n█", "    return x\nprint(f(1))", "    return x"),
    ("python", "def f(x):█", "\n    return x\n\nclass A:", "\n    return x"),
    ("python", "if a:\n    █\nelse:\n    pass", "    b()\nelse:\n    c()", "b()"),
    # the completion repeats the lines that follow the cursor
    ("python", "def f(x):\n    █\n    return y\n", "    y = x + 1\n    return y", "y = x + 1"),
    ("python", "def f(x):\n    y = 1\n    █\n    return y\n", "    return y", ""),
    # brace languages: the closing brace already in the document ends the block
    ("javascript", "function f(a) {\n  █\n}\n", "  return a;\n}\n\nfunction g() {}", "return a;"),
    ("c", "int f(int a) {\n█", "  return a;\n}\nint g;", "  return a;\n}"),   # no '}' yet: keep it
    ("go", "func f() int {\n\t█\n}\n", "\treturn 1\n}", "return 1"),
    # cursor after partial indentation: the user's typed indentation wins
    ("python", "def f(x):\n  █", "    return x", "return x"),
    # nothing but whitespace shows nothing
    ("python", "x = █", "   \n  ", ""),
    ("python", "x = f(█)", "\nfoo", ""),                              # no line break inside the user's line
    ("plaintext", "hello █", "world\nagain", "world"),
    # a comment the model appends to its code is dropped; comment lines and the user's own comment stay
    ("python", "def f(s):\n    █", "return len(s)  # the length\n", "return len(s)"),
    ("python", "x = █", "f('#')  # why\n", "f('#')"),
    ("python", "x = 1  █", "# the default\n", "# the default"),
    ("python", "def f(s):\n    █", "    # check first\n    if s:  # not empty\n        pass\n\ndef g",
     "# check first\n    if s:\n        pass"),
    ("typescript", "const n = █", "a.length; // count\n", "a.length;"),
    ("plaintext", "hello █", "world  # not a comment here", "world  # not a comment here"),
]


@pytest.mark.parametrize("language, marked, completion, shown", CASES)
def test_postprocess(language, marked, completion, shown):
    assert postprocess(completion, built(language, marked)) == shown


@pytest.mark.parametrize("language, marked, completion, stop_after", [
    ("python", "x = █", "compute(1)\ny", len("compute(1)\n")),
    ("python", "x = 1█", "\n    y", None),                               # no content line finished yet
    ("python", "def f(x):\n    █", "    y = 1\n    return y\ndef", len("    y = 1\n    return y\nd")),
    ("javascript", "function f(a) {\n  █\n}\n", "  a();\n}", len("  a();\n}")),
    ("python", "print(█)", "a, b))", len("a, b))")),
    ("python", "x = █", "compute(1)  # co", len("compute(1)  #")),        # the line's code is done
    ("python", "x = █", "'a #", None),                                    # inside a string
])
def test_stop_predicate_stops_at_the_first_finished_prefix(language, marked, completion, stop_after):
    stop = make_stop_predicate(built(language, marked))
    first = next((n for n in range(1, len(completion) + 1) if stop(completion[:n])), None)
    assert first == stop_after


def test_replacement_text_keeps_the_rest_of_the_line():
    prompt = built("python", "print(█)")
    inserted = postprocess("a, b)", prompt)
    assert replacement_text(inserted, prompt) == "a, b)"
    assert replacement_text("", prompt) == ""


@pytest.mark.parametrize("case, line_prefix, text, shown", [
    ("a comment after the model's code", "    ", "return len(s)  # the length", "return len(s)"),
    ("on every line of a block", "", "a = 1  # one\nb = 2  # two", "a = 1\nb = 2"),
    ("a comment line stays", "    ", "# TODO: handle the empty case", "# TODO: handle the empty case"),
    ("after the user's own code: the user's comment", "x = 1", "  # the default", "  # the default"),
    ("the user's code, then the model's code and comment", "x = ", "1  # the default", "1"),
    ("a marker inside a string", "", "url = 'a#b'  # anchor", "url = 'a#b'"),
    ("an escaped quote in a string", "", 'f("it\\"s #1")  # quoted', 'f("it\\"s #1")'),
    ("inside a string the user opened", "s = 'a ", "# b'", "# b'"),
    ("no blank before the marker: not a comment", "", "x = a#b", "x = a#b"),
    ("nothing to drop", "", "total += value", "total += value"),
])
def test_a_trailing_comment_the_model_appended_is_dropped(case, line_prefix, text, shown):
    assert drop_trailing_comment(text, "#", line_prefix) == shown, case


@pytest.mark.parametrize("language, text, shown", [
    ("javascript", "return a + b;  // sum", "return a + b;"),
    ("javascript", "const url = 'http://x';", "const url = 'http://x';"),
    ("python", "return a // b  # floor", "return a // b"),
    ("go", "x := y // why", "x := y"),
])
def test_the_languages_own_comment_marker(language, text, shown):
    from codecue_lsp.prompt.languages import comment_prefix

    assert drop_trailing_comment(text, comment_prefix(language)) == shown
