import pytest

from codecue_lsp.typethrough import TypeThroughCache

U = "file:///a.py"


def test_typing_the_suggestion_returns_the_rest():
    c = TypeThroughCache()
    c.remember(U, "x = fo", "", "o(bar)")
    assert c.lookup(U, "x = foo", "") == "(bar)"
    assert c.lookup(U, "x = foo(", "") == "bar)"
    assert c.lookup(U, "x = foo(ba", "") == "r)"


@pytest.mark.parametrize("prefix, suggestion, typed", [
    ("x = fo", "o(bar)", "x = fox"),                   # typed something else than the suggestion
    ("x = ", "1", "x = 1"),                            # all of it typed: nothing left to show
    ("a = 1\nx = fo", "o()", "a = 2\nx = foo"),        # an edit before the cursor
])
def test_typing_off_the_suggestion_misses(prefix, suggestion, typed):
    c = TypeThroughCache()
    c.remember(U, prefix, "", suggestion)
    assert c.lookup(U, typed, "") is None


@pytest.mark.parametrize("typed, rest", [
    ("x = fo", None),          # the same cursor: a held-back suggestion is not shown there
    ("x = foo", "(bar)"),      # its first character typed: the rest, as for a shown one
    ("x = foo(ba", "r)"),
    ("x = fox", None),         # typed off it
])
def test_a_held_back_suggestion_shows_only_once_typed_into(typed, rest):
    c = TypeThroughCache()
    c.remember_held_back(U, "x = fo", "", "o(bar)")
    assert c.lookup(U, typed, "") == rest


def test_different_rest_of_line_misses():
    c = TypeThroughCache()
    c.remember(U, "f(", ")", "a, b")
    assert c.lookup(U, "f(a", ")") == ", b"
    assert c.lookup(U, "f(a", "") is None


def test_exact_prefix_hit_after_backspace():
    c = TypeThroughCache()
    c.remember(U, "def f", "", "(x):")
    c.remember(U, "def g", "", "(y):")  # the document's last suggestion moves on
    assert c.lookup(U, "def f", "") == "(x):"


def test_multiline_suggestion_typed_through_a_newline():
    c = TypeThroughCache()
    c.remember(U, "if x:", "", "\n    return 1")
    assert c.lookup(U, "if x:\n    ret", "") == "urn 1"


def test_documents_are_separate_and_forget():
    c = TypeThroughCache()
    c.remember(U, "abc", "", "def")
    assert c.lookup("file:///b.py", "abcd", "") is None
    c.remember("file:///b.py", "xyz", "", "w")
    c.forget(U)
    assert c.lookup(U, "abcd", "") is None
    assert c.lookup(U, "abc", "") is None  # the exact-prefix entry is gone too, not only the last suggestion
    assert len(c) == 1 and c.lookup("file:///b.py", "xyz", "") == "w"


def test_empty_suggestion_not_stored_and_lru_bounded():
    c = TypeThroughCache(max_entries=3)
    c.remember(U, "p", "", "")
    assert len(c) == 0
    for i in range(5):
        c.remember(U, f"p{i}", "", "x")
    assert len(c) == 3
    assert c.lookup(U, "p0", "") is None
    assert c.lookup(U, "p4", "") == "x"


def test_exact_hit_in_another_document_misses():
    c = TypeThroughCache()
    c.remember(U, "abc", "", "def")
    assert c.lookup("file:///b.py", "abc", "") is None


LINE_END = "def f(a):\n    x = a + 1"  # the suggestion "+ 1" taken: the cursor's line ends here


@pytest.mark.parametrize("case, prefix, line_suffix, rest", [
    ("right after the taken suggestion: the next line, line break first", LINE_END, "", "\n    return x"),
    ("after Enter", LINE_END + "\n", "", "    return x"),
    ("after Enter and the editor's indentation", LINE_END + "\n    ", "", "return x"),
    ("typing the next line on", LINE_END + "\n    ret", "", "urn x"),
    ("an indentation other than the model's", LINE_END + "\n        ", "", None),
    ("another line typed", LINE_END + "\n    y", "", None),
    ("the suggestion not taken", LINE_END[:-1], "", None),
    ("an edit above", "def g(a):\n    x = a + 1\n", "", None),
    ("text after the cursor", LINE_END + "\n", ")", None),
    ("all of it typed", LINE_END + "\n    return x", "", None),
])
def test_the_next_line_follows_the_taken_suggestion(case, prefix, line_suffix, rest):
    c = TypeThroughCache()
    c.remember_next(U, LINE_END, "\n    return x")
    assert c.lookup_next(U, prefix, line_suffix) == rest, case
    assert c.lookup(U, prefix, line_suffix) is None, case  # kept apart: the server counts these hits
    assert c.lookup_next("file:///other.py", prefix, line_suffix) is None, case


def test_the_next_line_is_forgotten_with_its_document():
    c = TypeThroughCache()
    c.remember_next(U, LINE_END, "\n    return x")
    c.remember(U, LINE_END, "", "\n    return x + 0")  # a suggestion shown later does not replace it
    assert c.lookup_next(U, LINE_END + "\n", "") == "    return x"
    c.forget(U)
    assert c.lookup_next(U, LINE_END + "\n", "") is None
