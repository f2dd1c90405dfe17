"""A prompt keeps the last one's prefix start and context while the user types in one place (prompt/layout.py):
the KV cache reuses a prompt only up to its first changed token, and those come first."""
from dataclasses import replace

import pytest

from codecue_lsp.prompt import Layouts, OpenDocument, PromptBudget, build_prompt
from codecue_lsp.prompt.layout import unchanged_ends
from codecue_lsp.prompt.text import split_cursor
from engine.store.config import FimTemplate

FIM = FimTemplate("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>")
URI = "file:///w/pkg/main.py"
OTHER = "file:///w/pkg/util.py"


def same_layout(a, b):
    """The same choice of prefix start and context (where the middle started may differ: layout.middle_start)."""
    return replace(a, middle=None) == replace(b, middle=None)


def count(text):
    return len(text) // 3 + 1


def bpe_like_count(text):
    """Like a BPE vocabulary, typing a character can lower the count: "costi" is 2 tokens, "costing" 2 too."""
    return len(text.replace("ing", "#")) // 3 + 1


def module(first=0, functions=40, middle="def current(value):\n    total = gcd(helper_3(value), 2)\n    █\n"):
    parts = ["import os\nfrom typing import List\n\n"]
    for i in range(first, first + functions):
        parts.append(f"def helper_{i}(value, scale={i}):\n    result = value * scale\n    return result + {i}\n\n")
        if i == first + functions // 2:
            parts.append(middle + "\n")
    return "".join(parts)


UTIL = "def fib_cache(n):\n    return n\n\ndef gcd(a, b):\n    return a\n"
BUDGET = PromptBudget(total=400, suffix=40, context=100)


def build(text, offset, previous=None, other=UTIL, budget=BUDGET, counter=count):
    line = text.count("\n", 0, offset)
    character = offset - (text.rfind("\n", 0, offset) + 1)
    others = [OpenDocument(OTHER, "python", other)] if other is not None else []
    return build_prompt(OpenDocument(URI, "python", text), line, character, FIM, counter, other_docs=others,
                        budget=budget, middle_from="line", previous=previous)


def first_prompt():
    text, line, character = split_cursor(module())
    offset = sum(len(row) + 1 for row in text.split("\n")[:line]) + character
    return text, offset, build(text, offset)


@pytest.mark.parametrize("old, new, ends", [
    ("abcdef", "abcdef", (6, 0)),
    ("abcdef", "abcXdef", (3, 3)),        # an insertion
    ("abcdef", "abdef", (2, 3)),          # a deletion
    ("abcdef", "abXYef", (2, 2)),         # a replacement
    ("aaa", "aaaa", (3, 0)),              # the ends never overlap
    ("", "abc", (0, 0)),
    ("abc", "", (0, 0)),
    ("xbc", "ybc", (0, 2)),
])
def test_unchanged_ends(old, new, ends):
    assert unchanged_ends(old, new) == ends


def _edit(text, offset, edit):
    """The edits a table row names, applied to the first prompt's text (cursor at `offset`)."""
    if edit == "type at the cursor":
        return text[:offset] + "total += 1" + text[offset:], offset + len("total += 1"), UTIL
    if edit == "a new line below the cursor":
        return text[:offset] + "x = 1\n    " + text[offset:], offset + len("x = 1\n    "), UTIL
    if edit == "an unclosed string at the cursor":
        return text[:offset] + '"""Sum' + text[offset:], offset + len('"""Sum'), UTIL
    if edit == "another file changed, its items kept":
        return text, offset, UTIL + "\ndef added(x):\n    return x\n"
    if edit == "a line added at the top":
        return "import sys\n" + text, offset + len("import sys\n"), UTIL
    if edit == "a comment added above the prefix":  # outside every item of the context
        at = text.index("def helper_5(")
        return text[:at] + "# note\n" + text[at:], offset + len("# note\n"), UTIL
    if edit == "an item of this file in the context renamed":
        return text.replace("def helper_22(", "def helper_twenty_two("), offset, UTIL
    if edit == "an item of another file removed":
        return text, offset, UTIL.replace("def gcd(a, b):\n    return a\n", "")
    if edit == "the other file closed":
        return text, offset, None
    if edit == "the cursor moved above the prefix":
        return text, text.index("def helper_2("), UTIL
    raise AssertionError(edit)


@pytest.mark.parametrize("edit, kept", [
    ("type at the cursor", True),
    ("a new line below the cursor", True),
    ("an unclosed string at the cursor", True),
    ("another file changed, its items kept", True),
    ("a line added at the top", False),
    ("a comment added above the prefix", False),
    ("an item of this file in the context renamed", False),
    ("an item of another file removed", False),
    ("the other file closed", False),
    ("the cursor moved above the prefix", False),
])
def test_layout_is_kept_while_it_holds(edit, kept):
    text, offset, first = first_prompt()
    assert ("util.py", "def gcd(a, b): ...") in first.context_items
    assert ("main.py", "def helper_22(value, scale=22): ...") in first.context_items
    new_text, new_offset, other = _edit(text, offset, edit)
    again = build(new_text, new_offset, previous=first.layout, other=other)
    assert same_layout(again.layout, first.layout) == kept
    if kept:
        assert again.context_items == first.context_items and again.prefix_start == first.prefix_start
        before_middle = first.display.split("<|fim_suffix|>")[0]
        assert again.display.startswith(before_middle[:before_middle.rindex("\n") + 1])
    assert again.display == build(new_text, new_offset, other=other).display or kept


ROWS = "".join(f"row {i}\n" for i in range(10))  # each row 6 characters: row i starts at 6 * i


@pytest.mark.parametrize("first, last, bounds", [
    (3, 4, (18, 30)),    # inside the window: exact
    (0, 1, (0, 18)),     # above it: from the text's start to the window's start
    (8, 9, (36, 60)),    # below it: from the window's end to the text's end
    (1, 8, (0, 60)),     # across it
])
def test_window_bounds_never_narrower_than_the_rows(first, last, bounds):
    from codecue_lsp.prompt.window import Window

    window = Window.around(ROWS, 27, 9, 3)  # rows 3..5
    assert (window.start, window.end) == (18, 36)
    assert window.bounds(first, last) == bounds
    start, end = bounds
    assert start <= 6 * first and end >= 6 * (last + 1)


def test_an_item_far_below_the_cursor_keeps_the_layout_until_it_changes():
    """Items of this file more than the window below the cursor (32 x the suffix budget) are in the context too;
    their rows have no offsets in the window, and a span of the whole file made every keystroke choose afresh."""
    far = module(functions=4, middle="def current(value):\n    total = helper_75(value)\n    █\n")
    far += "".join(f"def helper_{i}(value, scale={i}):\n    return value * scale + {i}\n\n" for i in range(4, 80))
    text, line, character = split_cursor(far)
    offset = sum(len(row) + 1 for row in text.split("\n")[:line]) + character
    first = build(text, offset, other=None)
    assert ("main.py", "def helper_75(value, scale=75): ...") in first.context_items
    assert text.index("def helper_75(") - offset > 32 * 64 + 1000  # well outside the window
    typed = text[:offset] + "total += 1" + text[offset:]
    assert same_layout(build(typed, offset + 10, previous=first.layout, other=None).layout, first.layout)
    renamed = text.replace("def helper_75(", "def helper_seventy_five(")
    assert not same_layout(build(renamed, offset, previous=first.layout, other=None).layout, first.layout)


def test_a_layout_belongs_to_its_document():
    text, offset, first = first_prompt()
    other_uri = OpenDocument("file:///w/pkg/copy.py", "python", text)
    again = build_prompt(other_uri, text.count("\n", 0, offset), 4, FIM, count, budget=BUDGET,
                         middle_from="line", previous=first.layout)
    assert not same_layout(again.layout, first.layout)


def test_a_prefix_that_outgrows_the_budget_gets_a_fresh_layout():
    text, offset, first = first_prompt()
    typed = "".join(f"step_{i} = compute({i})\n    " for i in range(40))
    again = build(text[:offset] + typed + text[offset:], offset + len(typed), previous=first.layout)
    assert not same_layout(again.layout, first.layout) and again.prefix_start > first.prefix_start
    assert sum(again.sections.values()) <= BUDGET.total


def test_a_kept_layout_grows_past_the_budget_by_half_before_it_is_chosen_afresh():
    """Typed tokens are computed either way; a fresh layout costs a whole prompt. So a kept one may outgrow the
    budget by KEPT_GROWTH of it, and a fresh one fits the budget again."""
    from codecue_lsp.prompt.sizing import KEPT_GROWTH

    text, offset, built = first_prompt()
    assert sum(built.sections.values()) <= BUDGET.total
    layouts, sizes, fresh_at = Layouts(), [], None
    layouts.remember(built.layout)
    typed = ""
    for i in range(60):
        typed += f"step_{i} = compute({i})\n    "
        built = build(text[:offset] + typed + text[offset:], offset + len(typed), previous=layouts.get(URI))
        kept = same_layout(built.layout, layouts.get(URI))
        layouts.remember(built.layout)
        sizes.append(sum(built.sections.values()))
        if not kept:
            fresh_at = i
            break
    assert fresh_at is not None, sizes
    over = [size for size in sizes[:-1] if size > BUDGET.total]
    assert over, sizes  # kept past the budget ...
    assert max(sizes[:-1]) <= BUDGET.total * (1 + KEPT_GROWTH)  # ... up to the growth allowed
    assert sizes[-1] <= BUDGET.total  # chosen afresh: within the budget again


def _typing_layouts(total, sticky):
    """(prefix start, context) of every keystroke typing a docstring line, at one budget."""
    text, line, character = split_cursor(module(middle='class Totals:\n    """█\n    total: int = 0\n'))
    offset = sum(len(row) + 1 for row in text.split("\n")[:line]) + character
    typed = "the sums of the helpers, costing nothing, pooling everything, counting things: growing "
    layouts, seen = Layouts(), []
    budget = PromptBudget(total=total, suffix=40, context=100)
    for n in range(len(typed) + 1):
        built = build(text[:offset] + typed[:n] + text[offset:], offset + n, budget=budget, counter=bpe_like_count,
                      previous=layouts.get(URI) if sticky else None)
        layouts.remember(built.layout)
        seen.append((built.prefix_start, tuple(built.context_items)))
    return seen


def test_typing_does_not_make_the_layout_flicker():
    """With a count that can drop as a word is typed (as BPE's does), a fresh choice per keystroke moves the prefix
    start back and forth at a budget's edge, and every move re-runs the prompt; kept layouts only ever move on."""
    flickers_fresh = 0
    for total in range(330, 420, 3):
        fresh, kept = _typing_layouts(total, sticky=False), _typing_layouts(total, sticky=True)
        flickers_fresh += sum(1 for a, b, c in zip(fresh, fresh[1:], fresh[2:]) if a == c != b)
        changes = [b for a, b in zip(kept, kept[1:]) if a != b]
        starts = [start for start, _ in kept]
        assert starts == sorted(starts), total                  # never back to an earlier start
        assert len(changes) <= 1, (total, changes)              # a keystroke line of ~90 characters: one move at most
    assert flickers_fresh > 0                                   # the rule is needed: fresh choices do flicker


def _both_completers():
    from engine_helpers import tiny_engine

    from codecue_lsp.completer import Completer
    from codecue_lsp.remote import RemoteCompleter

    engine = tiny_engine("none")
    return engine, [Completer(engine), RemoteCompleter(None, FIM, count)]


def test_completers_keep_each_documents_layout_between_keystrokes():
    from codecue_lsp.config import Settings

    engine, completers = _both_completers()
    text, offset, _ = first_prompt()
    line = text.count("\n", 0, offset)
    try:
        for completer in completers:
            def prepare(uri, typed):
                doc = OpenDocument(uri, "python", text[:offset] + typed + text[offset:])
                return completer.prepare(doc, line, 4 + len(typed), Settings()).built

            first = prepare(URI, "")
            elsewhere = prepare("file:///w/pkg/copy.py", "")
            again = prepare(URI, '"""Sum')
            assert same_layout(again.layout, first.layout), completer
            assert not same_layout(elsewhere.layout, first.layout), completer
            assert same_layout(prepare(URI, '"""Sums').layout, first.layout)
    finally:
        engine.close()


def test_layouts_remember_the_most_recently_completed_documents():
    layouts = Layouts(size=3)
    made = {}
    for uri in ["a", "b", "c", "a", "d"]:  # "a" again: the most recent now; "b" is the oldest when "d" comes
        made[uri] = build_prompt(OpenDocument(uri, "python", "x = 1\n"), 1, 0, FIM, count).layout
        layouts.remember(made[uri])
    assert [layouts.get(uri) is made[uri] for uri in "abcd"] == [True, False, True, True]


BODY = "def current(value):\n    total = gcd(helper_3(value), 2)\n"


def _built_steps(steps, middle_lines):
    """Each step is the function being typed, with the cursor marker; each prompt gets the last one's layout."""
    layouts, built = Layouts(), []
    for step in steps:
        text, line, character = split_cursor(module(middle=step))
        built.append(build_prompt(OpenDocument(URI, "python", text), line, character, FIM, count,
                                  other_docs=[OpenDocument(OTHER, "python", UTIL)], budget=BUDGET,
                                  middle_from="line", previous=layouts.get(URI), middle_lines=middle_lines))
        layouts.remember(built[-1].layout)
    return built


ENTER = [BODY + "    total += 1█\n", BODY + "    total += 1\n    █\n", BODY + "    total += 1\n    y█\n"]


@pytest.mark.parametrize("case, middle_lines, steps, middle", [
    ("typing on the cursor's line", 8, [BODY + "    █\n", BODY + "    total█\n"], "    total"),
    ("Enter keeps where the middle starts", 8, ENTER, "    total += 1\n    y"),
    ("one line allowed: Enter starts it on the new line", 1, ENTER, "    y"),
    ("more lines than allowed: it starts again on the cursor's line", 2,
     [BODY + "    a = 1█\n", BODY + "    a = 1\n    b = 2█\n", BODY + "    a = 1\n    b = 2\n    c█\n"], "    c"),
    ("an edit above it: it starts on the cursor's line", 8,
     [BODY + "    a = 1█\n", BODY.replace("), 2)", "), 3)") + "    a = 1\n    █\n"], ""),
    ("the suffix changed: it starts on the cursor's line", 8,
     [BODY + "    a = 1█\n    return a\n", BODY + "    a = 1\n    █\n    return total\n"], ""),
    ("the cursor moved above it", 8, [BODY + "    a = 1\n    b = 2█\n", BODY + "    a = 1█\n    b = 2\n"],
     "    a = 1"),
])
def test_where_the_middle_starts(case, middle_lines, steps, middle):
    built = _built_steps(steps, middle_lines)
    assert all(same_layout(b.layout, built[0].layout) for b in built), case  # the rule under test is the middle's
    assert built[-1].middle == middle, case
    assert built[-1].display.endswith("<|fim_middle|>" + middle), case


def _before_middle(built):
    return built.pieces[:built.pieces.index(("special", FIM.middle)) + 1]


def test_enter_leaves_the_prompt_before_the_middle_as_it_was():
    """What the KV cache reuses: after Enter (and typing on the new line) everything up to the middle marker is the
    same prompt; with the middle held to the cursor's line, the line typed before Enter moves in front of the suffix."""
    kept = _built_steps(ENTER, middle_lines=8)
    assert _before_middle(kept[1]) == _before_middle(kept[2]) == _before_middle(kept[0])
    one_line = _built_steps(ENTER, middle_lines=1)
    assert _before_middle(one_line[1]) != _before_middle(one_line[0])
    assert "    total += 1\n" in one_line[2].pieces[_before_middle(one_line[2]).index(("special", FIM.suffix)) - 1][1]


def test_after_enter_the_engine_prefills_only_the_new_line():
    from engine_helpers import tiny_engine

    from codecue_lsp.completer import Completer
    from codecue_lsp.config import Settings

    engine = tiny_engine("none")
    try:
        computed = {}
        for middle_lines in (8, 1):
            completer, settings = Completer(engine), Settings(max_tokens=2, middle_lines=middle_lines)
            for n, step in enumerate(ENTER):
                text, line, character = split_cursor(module(middle=step))
                doc = OpenDocument(f"file:///w/enter_{middle_lines}.py", "python", text)
                _, result = completer.complete(completer.prepare(doc, line, character, settings))
                computed[middle_lines, n] = result.stats.new_prompt_tokens
        suffix_tokens = len(engine.encode_prompt([("text", "\n" + module(middle=BODY).split(BODY)[1][:120])]))
        assert computed[8, 1] < 4 and computed[8, 2] < 4, computed  # Enter, then a letter on the new line
        assert computed[1, 1] > suffix_tokens // 2, computed      # Enter re-ran the suffix
    finally:
        engine.close()
