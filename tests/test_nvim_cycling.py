"""Several suggestions in Neovim (issue 64, item 2): <M-]> / <M-[> cycle, asking the server for alternatives
(an Invoked request, LSP triggerKind 1) when only one suggestion is at hand, and `n/m` shows which is on screen
(at the line's end and in the statusline). The manual trigger asks with triggerKind 1 too.

The fixed-answer server answers FAKE_COMPLETION to typing (triggerKind 2) and adds the FAKE_ALTERNATIVES items to
an Invoked request, as codecue-lsp answers up to three then.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import Editor, fake_server_cmd  # noqa: E402

ENV = {"FAKE_COMPLETION": "first()", "FAKE_ALTERNATIVES": "second()|third()"}


@pytest.fixture
def editor(tmp_path):
    ed = Editor(fake_server_cmd(), ENV)
    ed.path = tmp_path / "example.py"
    ed.path.write_text("")
    ed.open(ed.path)
    yield ed
    ed.close()


def shown(ed: Editor) -> tuple[str, str | None, str]:
    """The ghost text, its counter and the statusline."""
    ghost = ed.ghost()
    return (ghost and ghost["text"], ed.lua("return require('codecue.ghost').read_counter(0)"),
            ed.lua("return require('codecue').statusline()"))


def wait_shown(ed: Editor, text: str, counter: str | None):
    ed.wait_for(lambda: shown(ed)[:2] == (text, counter), f"{text} {counter}, got {shown(ed)}")
    assert shown(ed)[2].endswith(f" {counter}") if counter else "/" not in shown(ed)[2]


def test_cycling_asks_for_alternatives_once_then_goes_round(editor):
    editor.type("ix = ")
    wait_shown(editor, "first()", None)
    assert editor.server_stats()["trigger_kinds"] == [2]
    editor.type("<M-]>")
    wait_shown(editor, "second()", "2/3")
    assert editor.server_stats()["trigger_kinds"] == [2, 1]
    editor.type("<M-]>")
    wait_shown(editor, "third()", "3/3")
    editor.type("<M-]>")
    wait_shown(editor, "first()", "1/3")
    editor.type("<M-[>")
    wait_shown(editor, "third()", "3/3")
    assert editor.server_stats()["trigger_kinds"] == [2, 1], "the three are cycled without asking again"
    editor.type("<Tab>")
    editor.wait_for(lambda: editor.lines() == ["x = third()"], f"the one shown accepted, got {editor.lines()}")


def test_prev_first_shows_the_last_alternative(editor):
    editor.type("ix = ")
    wait_shown(editor, "first()", None)
    editor.type("<M-[>")
    wait_shown(editor, "third()", "3/3")


def test_typing_into_a_cycled_suggestion_leaves_one(editor):
    editor.type("ix = ")
    wait_shown(editor, "first()", None)
    editor.type("<M-]>")
    wait_shown(editor, "second()", "2/3")
    editor.type("s")
    wait_shown(editor, "econd()", None)  # the others do not start with "s"
    editor.type("<M-]>")  # one left: ask again at the new cursor
    editor.wait_for(lambda: editor.server_stats()["trigger_kinds"] == [2, 1, 1], "a second Invoked request")


def test_the_trigger_key_asks_with_triggerkind_invoked(editor):
    editor.type("ix = ")
    wait_shown(editor, "first()", None)
    editor.type("<C-]>")
    editor.wait_for(lambda: editor.ghost() is None, "the suggestion dismissed")
    editor.type("<M-\\>")
    wait_shown(editor, "first()", "1/3")
    assert editor.server_stats()["trigger_kinds"] == [2, 1]


def test_each_suggestion_cycled_to_is_shown_once_and_the_others_rejected(editor):
    editor.type("ix = ")
    wait_shown(editor, "first()", None)
    editor.type("<M-]>")
    wait_shown(editor, "second()", "2/3")
    editor.type("<Tab>")
    editor.wait_for(lambda: editor.lines() == ["x = second()"], "second() accepted")
    events = editor.wait_for(lambda: len(e := editor.server_stats()["events"]) >= 4 and e, "the notifications")
    kinds = [(e["method"].split("/")[1], e["params"]["id"], e["params"]["length"]) for e in events[:4]]
    first_id, second_id = kinds[0][1], kinds[2][1]
    assert first_id != second_id
    assert kinds == [("didShowCompletion", first_id, 7), ("didRejectCompletion", first_id, 7),
                     ("didShowCompletion", second_id, 8), ("didAcceptCompletion", second_id, 8)]
