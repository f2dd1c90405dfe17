from codecue_lsp.typethrough import TypeThroughCache

U = "file:///a.py"


def test_typing_the_suggestion_returns_the_rest():
    c = TypeThroughCache()
    c.remember(U, "x = fo", "", "o(bar)")
    assert c.lookup(U, "x = foo", "") == "(bar)"
    assert c.lookup(U, "x = foo(", "") == "bar)"
    assert c.lookup(U, "x = foo(ba", "") == "r)"


def test_mismatched_typing_misses():
    c = TypeThroughCache()
    c.remember(U, "x = fo", "", "o(bar)")
    assert c.lookup(U, "x = fox", "") is None


def test_fully_typed_suggestion_misses():
    c = TypeThroughCache()
    c.remember(U, "x = ", "", "1")
    assert c.lookup(U, "x = 1", "") is None


def test_edit_before_the_cursor_misses():
    c = TypeThroughCache()
    c.remember(U, "a = 1\nx = fo", "", "o()")
    assert c.lookup(U, "a = 2\nx = foo", "") is None


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
    c.forget(U)
    assert c.lookup(U, "abcd", "") is None


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
