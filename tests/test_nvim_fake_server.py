"""The Neovim plugin's editing behaviour in a real Neovim 0.11, against a server with a fixed answer.

editor-clients/testing/fake_server.py speaks CodeCue's protocol but always suggests FAKE_COMPLETION, so these
tests can check exact buffer text for partial accepts, type-through, dismissal and the Tab fallback. The same
plugin against the real server on the tiny model pair is tested in test_nvim_plugin.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import editor_on_fake_server  # noqa: E402

SUGGESTION = "foo.bar(1)\\n    return 2"  # as the env var carries it: "\n" written as backslash-n


@pytest.fixture
def editor(tmp_path):
    ed = editor_on_fake_server(tmp_path, SUGGESTION)
    yield ed
    ed.close()


def test_ghost_text_shows_the_items_text_at_the_cursor(editor):
    editor.type("ix = ")
    ghost = editor.wait_ghost()
    assert ghost == {"row": 0, "col": 4, "text": "foo.bar(1)\n    return 2"}
    assert editor.lines() == ["x = "]  # ghost text is not in the buffer


def test_tab_accepts_and_the_saved_file_has_the_text(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type("<Tab><Esc>:w<CR>")
    editor.wait_for(lambda: editor.path.read_text(), "the file to be written")
    assert editor.path.read_text() == "x = foo.bar(1)\n    return 2\n"
    stats = editor.server_stats()
    assert (stats["shown"], stats["accepted"], stats["accepted_chars"]) == (1, 1, len("foo.bar(1)\n    return 2"))


def test_accept_word_then_line_then_rest(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type("<M-Right>")
    editor.wait_for(lambda: editor.lines() == ["x = foo"], "the first word")
    assert editor.ghost()["text"] == ".bar(1)\n    return 2"
    editor.type("<M-l>")
    editor.wait_for(lambda: editor.lines() == ["x = foo.bar(1)"], "the rest of the line")
    assert editor.ghost()["text"] == "\n    return 2"
    editor.type("<M-l>")
    editor.wait_for(lambda: editor.lines() == ["x = foo.bar(1)", "    return 2"], "the next line")
    assert editor.ghost() is None
    stats = editor.server_stats()
    assert (stats["accepted"], stats["accepted_chars"], stats["rejected"]) == (3, 23, 0)


def test_tab_without_a_suggestion_inserts_a_tab(editor):
    editor.type("i<Tab>x")
    editor.wait_for(lambda: editor.lines() == ["\tx"], "a literal tab")


def test_escape_dismisses_and_reports_a_rejection(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type("<Esc>")
    editor.wait_for(lambda: editor.ghost() is None, "the ghost text to go")
    assert editor.lines() == ["x = "]
    editor.wait_for(lambda: editor.server_stats()["rejected"] == 1, "the rejection notification")


def test_moving_the_cursor_dismisses(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type("<Left>")
    editor.wait_for(lambda: editor.ghost() is None, "the ghost text to go")
    assert editor.mode() == "i"


def test_typing_the_suggestion_keeps_the_rest_without_a_new_request(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    requests = editor.server_stats()["requests"]
    editor.type("foo.", delay=0.05)
    editor.wait_for(lambda: editor.lines() == ["x = foo."], "the typed text")
    assert editor.ghost() == {"row": 0, "col": 8, "text": "bar(1)\n    return 2"}
    assert editor.server_stats()["requests"] == requests


def test_typing_something_else_replaces_the_suggestion(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type("z")
    editor.wait_for(lambda: (g := editor.ghost()) and g["col"] == 5, "a suggestion after the new text")
    assert editor.server_stats()["rejected"] == 1


def test_toggle_stops_and_restarts_suggestions(editor):
    editor.nvim.command("CodeCueToggle")
    editor.type("ix = ")
    editor.wait_for(lambda: editor.lines() == ["x = "], "the typed text")
    before = editor.server_stats()["requests"]
    editor.type("y")
    editor.wait_for(lambda: editor.lines() == ["x = y"], "the typed text")
    assert editor.server_stats()["requests"] == before and editor.ghost() is None
    assert "off" in editor.lua("return require('codecue').statusline()")
    editor.nvim.command("CodeCueToggle")
    editor.type(" ")
    editor.wait_ghost()
