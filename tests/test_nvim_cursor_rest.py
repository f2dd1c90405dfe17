"""The Neovim plugin tells the server where the cursor rests after a move that is not typing (codecue/didMoveCursor).

In a real Neovim 0.11 against editor-clients/testing/fake_server.py, which records the notifications it gets: a
move sends once after the 400 ms rest (lua/codecue/cursor_rest.lua), with the document, its version and the
position; typing, a change before the rest ends, Visual mode, an unattached buffer, a toggle or
`init_options.prepareAtCursor = false` send nothing.

No test sleeps for a rest to pass: each waits for the plugin to have handled its keys (a spy on cursor_rest.moved)
and for the armed rest to end (`pending()` false); a notification sent by then reaches the server before the stats
request that follows it on the same pipe. Keys typed in one `nvim_input` all run before any timer does.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import Editor, fake_server_cmd  # noqa: E402

REST_S = 0.4
TEXT = "".join(f"value_{i} = {i}\n" for i in range(20))


def write(path: Path, text: str = TEXT) -> Path:
    path.write_text(text)
    return path


# codecue.stats from the server, also while the current buffer is not one it serves.
STATS = """
local client = vim.lsp.get_clients({ name = "codecue" })[1]
local response = client:request_sync("workspace/executeCommand", { command = "codecue.stats", arguments = {} }, 5000)
return response.result
"""


# Wraps cursor_rest.moved (its autocmds look it up per call) to log each cursor event the plugin handled: where
# the cursor was, the mode, and whether a rest was armed by it.
SPY = """
local rest = require("codecue.cursor_rest")
local moved = rest.moved
_G.codecue_cursor_events = {}
rest.moved = function(bufnr, focus)
  moved(bufnr, focus)
  local cursor = vim.api.nvim_win_get_cursor(0)
  table.insert(_G.codecue_cursor_events, { line = cursor[1] - 1, character = cursor[2],
    mode = vim.api.nvim_get_mode().mode, pending = rest.pending() })
end
"""


def spied(ed: Editor) -> Editor:
    ed.lua(SPY)
    return ed


def seen(ed: Editor, line: int, character: int, mode: str = "n") -> dict:
    """Wait until the plugin has handled the cursor event at (line, character) in `mode`; its record."""
    def last():
        events = ed.lua("return _G.codecue_cursor_events")
        return events and (e := events[-1])["line"] == line and e["character"] == character and e["mode"] == mode and e
    return ed.wait_for(last, f"the plugin to handle the cursor at {line}:{character} ({mode})", timeout=10)


def moves(ed: Editor) -> list[dict]:
    return ed.lua(STATS)["cursor_moves"]


def pending(ed: Editor) -> bool:
    return ed.lua("return require('codecue.cursor_rest').pending()")


def settle(ed: Editor) -> int:
    """Wait until nothing waits for its rest; the number of notifications the server got by then.

    A rest that fired sent its notification before `pending()` turned false, so the stats request comes after it.
    """
    ed.wait_for(lambda: not pending(ed), "the pending rest to end")
    return len(moves(ed))


def wait_moves(ed: Editor, count: int) -> list[dict]:
    return ed.wait_for(lambda: len(m := moves(ed)) >= count and m, f"{count} cursor notifications", timeout=10)


def expected(ed: Editor, line: int, character: int) -> dict:
    uri, version = ed.lua("return { vim.uri_from_bufnr(0), vim.lsp.util.buf_versions[vim.api.nvim_get_current_buf()] }")
    return {"uri": uri, "version": version, "line": line, "character": character}


@pytest.fixture
def editor(tmp_path):
    ed = spied(Editor(fake_server_cmd(), {}))
    ed.path = write(tmp_path / "example.py")
    ed.open(ed.path)
    yield ed
    ed.close()


def test_opening_a_file_sends_its_cursor_once_after_the_rest(editor):
    assert wait_moves(editor, 1) == [expected(editor, 0, 0)]
    assert settle(editor) == 1


def test_a_motion_sends_once_after_the_rest_with_the_position(editor):
    before = settle(editor)
    started = time.monotonic()
    editor.type("5G3l")
    assert seen(editor, 4, 3)["pending"], "the move did not wait for a rest"
    got = wait_moves(editor, before + 1)
    assert time.monotonic() - started >= REST_S, "sent before the cursor rested"  # a slow machine only adds to it
    assert got[before:] == [expected(editor, 4, 3)]
    assert settle(editor) == before + 1, "one notification per rest"


def test_moves_closer_than_the_rest_send_only_the_last(editor):
    before = settle(editor)
    editor.type("jjjjj")  # in one input: each j's CursorMoved runs before any timer, however slow the machine
    seen(editor, 5, 0)
    events = editor.lua("return _G.codecue_cursor_events")[-5:]
    assert [(e["line"], e["pending"]) for e in events] == [(line, True) for line in range(1, 6)], "each move restarts"
    got = wait_moves(editor, before + 1)
    assert settle(editor) == before + 1
    assert moves(editor)[before:] == got[before:] == [expected(editor, 5, 0)]


def test_typing_in_insert_mode_sends_nothing(editor):
    before = settle(editor)
    editor.type("Go")  # in one input, so G's rest cannot end before o; o is an edit: nothing is sent for the new line
    editor.type("z = 1", delay=0.05)
    editor.wait_for(lambda: editor.lines()[-1] == "z = 1", "the typed text")
    assert not seen(editor, 20, 5, "i")["pending"]
    assert settle(editor) == before
    # The fallback frontend asked for suggestions while typing: that request prepared the prompt.
    editor.wait_for(lambda: editor.server_stats()["requests"] > 0, "a completion request")


def test_a_change_before_the_rest_ends_cancels_it(editor):
    before = settle(editor)
    # The edit (no cursor move comes with it) is typed in the move's input: it runs within the rest on any machine.
    editor.type("8G:lua vim.api.nvim_buf_set_lines(0, 15, 15, false, { 'inserted = 1' })<CR>")
    editor.wait_for(lambda: editor.lines()[15] == "inserted = 1", "the edit")
    assert seen(editor, 7, 0)["pending"], "the move did not wait for a rest"
    assert settle(editor) == before


def test_a_move_after_saving_is_not_typing(editor):
    before = settle(editor)
    editor.type(":w<CR>")
    editor.wait_for(lambda: not editor.lua("return vim.bo.modified"), "the write")
    editor.type("3G")  # :w raised b:changedtick, not the document's version
    assert wait_moves(editor, before + 1)[before:] == [expected(editor, 2, 0)]


def test_visual_mode_sends_nothing(editor):
    before = settle(editor)
    editor.type("3Gvjj")
    assert not seen(editor, 4, 0, "v")["pending"]
    assert settle(editor) == before


def test_switching_buffers_sends_for_the_buffer_entered_and_not_for_others(editor, tmp_path):
    before = settle(editor)
    other = write(tmp_path / "other.py", "a = 1\nb = 2\n")
    editor.open(other)  # opened: a move in it
    assert wait_moves(editor, before + 1)[before:] == [expected(editor, 0, 0)]
    editor.type(f"j:buffer {editor.path}<CR>")  # back, within the rest: only the buffer entered counts
    got = wait_moves(editor, before + 2)
    settle(editor)
    assert moves(editor)[before + 1:] == got[before + 1:] == [expected(editor, 0, 0)]
    assert got[-1]["uri"].endswith("/example.py")
    editor.type(f"4G:edit {write(tmp_path / 'notes.txt', 'plain text')}<CR>")  # not a CodeCue buffer
    editor.wait_for(lambda: editor.lua("return vim.api.nvim_buf_get_name(0)").endswith("notes.txt"), "notes.txt")
    assert settle(editor) == before + 2  # 4G's rest ends in notes.txt, which it does not send for


def test_toggled_off_sends_nothing(editor):
    before = settle(editor)
    editor.nvim.command("CodeCueToggle")
    editor.type("6G")
    assert not seen(editor, 5, 0)["pending"]
    assert settle(editor) == before


def test_prepare_at_cursor_false_in_init_options_sends_nothing(tmp_path):
    ed = spied(Editor(fake_server_cmd(), {}, init_options={"prepareAtCursor": False}))
    try:
        ed.open(write(tmp_path / "example.py"))
        assert ed.lua("return require('codecue').client(0).config.init_options.prepareAtCursor") is False
        ed.type("5G")
        assert not seen(ed, 4, 0)["pending"]
        assert settle(ed) == 0 and moves(ed) == []
    finally:
        ed.close()
