"""Pure pieces of the server: positions and item ranges, settings, telemetry. Cursor marker: █."""
import re

import pytest

from codecue_lsp.prompt.sizing import budget_for, context_total
from codecue_lsp.config import Settings, restart_needed
from codecue_lsp.positions import (
    completion_covers_line_rest,
    cursor_at,
    item_edit,
    utf8_units,
    utf32_units,
)
from codecue_lsp.telemetry import Telemetry, percentile


def split_marker(marked: str):
    """Text without the █ and the LSP (line, UTF-16 character) where it was."""
    offset = marked.index("█")
    text = marked.replace("█", "")
    lines = re.split(r"\r\n|\r|\n", text[:offset])
    line, line_text = len(lines) - 1, lines[-1]
    return text, line, sum(2 if ord(c) > 0xFFFF else 1 for c in line_text), offset


@pytest.mark.parametrize("marked", [
    "█", "a█", "█abc", "ab█c", "x\n█", "x\ny█z", "😀█x", "a😀b█", "é█\n", "l1\r\nl2█\r\n", "a\rb█", "a\n\n█\n",
])
def test_cursor_round_trips_utf16_positions(marked):
    text, line, character, offset = split_marker(marked)
    cursor = cursor_at(text, line, character)
    assert cursor is not None and cursor.offset == offset and cursor.character == character


@pytest.mark.parametrize("text,line,character", [
    ("abc", 0, 4),        # past the end of the line
    ("abc", 1, 0),        # no such line
    ("abc\n", 2, 0),
    ("", 0, 1),
    ("abc", -1, 0),
    ("abc", 0, -1),
    ("a\nb", 0, 2),       # the line break is not a character of the line
])
def test_out_of_range_positions_are_rejected(text, line, character):
    assert cursor_at(text, line, character) is None


def test_inside_a_surrogate_pair_rounds_down():
    cursor = cursor_at("😀x", 0, 1)
    assert cursor.offset == 0 and cursor.character == 0


def test_other_position_encodings():
    assert cursor_at("é😀x", 0, 6, utf8_units).offset == 2
    assert cursor_at("é😀x", 0, 2, utf32_units).offset == 2


@pytest.mark.parametrize("completion,line_suffix,covers", [
    ("x)", ")", True),                   # retyped the closer
    ("a, b)", ")", True),
    ("print(x)", ")", False),            # balanced: the model wrote a nested call, keep the ")"
    ("x", ")", False),
    ("x):", "):", True),
    ('hello"', '"', True),
    ('"a"', '"', False),
    ("x", "", False),
    ("x", "   ", True),                  # only whitespace after the cursor: replace it
    ("y + 1", " + 1", False),            # an expression after the cursor is kept (fill-in-the-middle)
    ("\n    a,\n    b,\n)", ")", True),  # multi-line ending with the closer
])
def test_completion_covers_line_rest(completion, line_suffix, covers):
    assert completion_covers_line_rest(completion, line_suffix) is covers


def test_item_edit_ranges_in_utf16_units():
    text, line, character, _ = split_marker("s = '😀'\nprint(█)\n")
    cursor = cursor_at(text, line, character)
    edit = item_edit("x)", cursor, text)
    assert (edit.line, edit.start_character, edit.end_character) == (1, 6, 7)
    edit = item_edit("x", cursor, text)
    assert (edit.start_character, edit.end_character) == (6, 6)
    assert item_edit("", cursor, text) is None
    text, line, character, _ = split_marker("f('😀█😀')")
    edit = item_edit("a😀')", cursor_at(text, line, character), text)
    assert (edit.start_character, edit.end_character) == (5, 9)


def test_settings_merge_camel_and_snake_case_and_ignore_bad_values():
    s = Settings().merged({"maxTokens": 12, "debounce_ms": "5", "drafter": "lookup",
                           "enabledLanguages": ["python"], "logLevel": "debug"})
    assert (s.max_tokens, s.debounce_ms, s.drafter, s.enabled_languages, s.log_level) == \
        (12, 5, "lookup", ("python",), "DEBUG")
    bad = s.merged({"maxTokens": -3, "drafter": "magic", "nonsense": 1, "debounceMs": True, "pair": ""})
    assert (bad.max_tokens, bad.drafter, bad.debounce_ms, bad.pair) == (12, "lookup", 5, "default")
    assert Settings().merged({"codecue": {"pair": "tiny"}}).pair == "tiny"
    assert Settings().merged("not an object") == Settings()
    assert Settings().middle_from == "line"
    assert Settings().merged({"middleFrom": "cursor"}).middle_from == "cursor"
    assert Settings().merged({"middleFrom": "word"}).middle_from == "line"
    assert (Settings().middle_lines, Settings().merged({"middleLines": 1}).middle_lines) == (8, 1)
    assert Settings().merged({"middleLines": 0}).middle_lines == 8  # at least the cursor's line


@pytest.mark.parametrize("given, field, expected", [
    ({}, "context", True),
    ({"context": False}, "context", False),
    ({"context": "off"}, "context", False),
    ({}, "context_tokens", "auto"),
    ({"contextTokens": 300}, "context_tokens", 300),
    ({"contextTokens": "auto"}, "context_tokens", "auto"),
    ({"contextTokens": -1}, "context_tokens", "auto"),  # out of range: ignored
    ({"contextTokens": "lots"}, "context_tokens", "auto"),
    ({"excludeGlobs": ["gen/**", " ", "*.sql"]}, "exclude_globs", ("gen/**", "*.sql")),
    ({"excludeGlobs": "gen/**,docs/"}, "exclude_globs", ("gen/**", "docs/")),
    ({"excludeGlobs": [1, 2]}, "exclude_globs", ()),
    ({"maxIndexedFiles": 200}, "max_indexed_files", 200),
    ({"maxIndexedFiles": 10**7}, "max_indexed_files", 5000),
    ({"indexCache": False}, "index_cache", False),
])
def test_project_context_settings(given, field, expected):
    assert getattr(Settings().merged(given), field) == expected


def test_context_tokens_come_out_of_the_prompt_budget():
    assert context_total(Settings(), 1536) == 512
    assert context_total(Settings(context_tokens=300), 1536) == 300
    assert budget_for(1536, context=300).context == 300
    assert budget_for(1024, context=5000).context == 512  # never more than half the prompt



def test_command_line_flags_become_settings_only_when_given():
    from codecue_lsp.__main__ import cli_settings, parse_args

    given = cli_settings(parse_args(["--stdio", "--middle-lines", "3", "--drafter", "none"]))
    assert given == {"middle_lines": 3, "drafter": "none"}
    assert Settings().merged(given).middle_lines == 3

def test_language_filter_and_restart_needed():
    s = Settings().merged({"enabledLanguages": "python, rust"})
    assert s.language_enabled("rust") and not s.language_enabled("markdown")
    assert Settings().merged({"enabledLanguages": ["*"]}).language_enabled("markdown")
    assert restart_needed(Settings(), Settings().merged({"pair": "tiny", "maxTokens": 3})) == ["pair"]


def test_telemetry_snapshot():
    t = Telemetry()
    for ms in (10, 20, 30, 40):
        t.latency(ms / 1000)
    t.on_shown({"length": 10})
    t.on_accepted({"length": 10, "acceptedLength": 4})
    t.on_rejected({})
    snap = t.snapshot()
    assert snap["shown"] == snap["accepted"] == snap["rejected"] == 1
    assert snap["accepted_chars"] == 4 and snap["shown_chars"] == 10
    assert snap["latency_ms"]["mean"] == pytest.approx(25) and snap["latency_ms"]["p50"] == pytest.approx(20)
    assert percentile([], 90) == 0.0 and percentile([1.0, 2.0], 90) == 2.0


def test_event_params_from_pygls_objects():
    from collections import namedtuple

    from codecue_lsp.telemetry import event_params

    Object = namedtuple("Object", ["uri", "acceptedLength"])
    assert event_params(Object("file:///a.py", 3)) == {"uri": "file:///a.py", "acceptedLength": 3}
    assert event_params({"length": 1}) == {"length": 1}
    assert event_params("junk") == {} and event_params(None) == {}


class MarkerEngine:
    """What shared_prefix_length asks of an engine: the FIM middle marker and its id."""
    fim = type("Fim", (), {"middle": "<|fim_middle|>"})()

    def special_token_id(self, marker: str) -> int:
        assert marker == "<|fim_middle|>"
        return 99


@pytest.mark.parametrize("ids,middle_from,shared", [
    ([1, 2, 3, 99, 7, 8], "line", 6),       # the typed line follows the marker: a keystroke changes its healed tail
    ([1, 2, 3, 99], "line", 4),             # nothing typed on the line yet
    ([1, 99, 2, 99, 5], "line", 5),
    ([1, 2, 3, 99], "cursor", 0),           # PSM: a keystroke changes the prefix's end
    ([1, 2, 3], "line", 0),                 # no marker: nothing is known to be shared
])
def test_the_next_keystroke_shares_a_line_layout_prompt(ids, middle_from, shared):
    from codecue_lsp.completer import shared_prefix_length

    assert shared_prefix_length(MarkerEngine(), ids, middle_from) == shared
