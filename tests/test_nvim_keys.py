"""CodeCue's keys next to other Tab users, the public API and the completion menu, in a real Neovim 0.11.

Issue 10 items 1 and 4. A fixed-answer server (editor-clients/testing/fake_server.py) suggests SUGGESTION; with
FAKE_DELAY_MS set very high it never answers, which is "no suggestion shown" while snippets and other mappings
are exercised. Keys go in through nvim_input as typed keys, so mappings, expr mappings and autocommands all run.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import Editor, fake_server_cmd  # noqa: E402

SUGGESTION = "foo.bar(1)\\n    return 2"  # as the env var carries it: "\n" written as backslash-n
NEVER = "3600000"  # FAKE_DELAY_MS: the server never answers within a test


def start(tmp_path, before: str = "", delay_ms: str = "0", **options) -> Editor:
    """Neovim with the plugin set up, `before` (Lua) run, then example.py opened and attached."""
    ed = Editor(fake_server_cmd(), {"FAKE_COMPLETION": SUGGESTION, "FAKE_DELAY_MS": delay_ms}, **options)
    if before:
        ed.lua(before)
    ed.path = tmp_path / "example.py"
    ed.path.write_text("")
    ed.open(ed.path)
    return ed


@pytest.fixture
def editors():
    opened = []
    yield opened
    for ed in opened:
        ed.close()


@pytest.fixture
def editor(tmp_path, editors):
    editors.append(start(tmp_path))
    return editors[0]


@pytest.fixture
def quiet(tmp_path, editors):
    """No suggestion ever shows."""
    editors.append(start(tmp_path, delay_ms=NEVER))
    return editors[0]


def buffer_maps(ed: Editor, lhs: str) -> list[dict]:
    """The current buffer's insert-mode mappings of `lhs`, as {desc, rhs} (a Lua callback does not cross RPC)."""
    return ed.lua("local key, found = vim.keycode(...), {} "
                  "for _, m in ipairs(vim.api.nvim_buf_get_keymap(0, 'i')) do "
                  "  if vim.keycode(m.lhs) == key then table.insert(found, {desc = m.desc, rhs = m.rhs}) end "
                  "end return found", lhs)


# --- Tab with nothing shown does what Tab did before ------------------------------------------------------------

SNIPPET = "<Cmd>lua vim.snippet.expand('call($1, $2)')<CR>"


@pytest.mark.parametrize("default_tab", ["Neovim's default snippet <Tab>", "no global <Tab> mapping"])
def test_tab_jumps_to_the_next_snippet_tabstop(quiet, default_tab):
    if default_tab == "no global <Tab> mapping":
        quiet.lua("vim.keymap.del('i', '<Tab>')")  # then CodeCue itself must jump
    quiet.type("i" + SNIPPET)
    quiet.wait_for(lambda: quiet.lua("return vim.snippet.active({direction = 1})"), "the snippet session")
    quiet.type("<Tab>x")
    quiet.wait_for(lambda: quiet.lines() == ["call(, x)"], f"x at the second tabstop, got {quiet.lines()}")


def test_tab_runs_a_global_lua_callback_mapping(tmp_path, editors):
    ed = start(tmp_path, delay_ms=NEVER, before="""
      vim.keymap.set('i', '<Tab>', function() vim.api.nvim_put({'LUA'}, 'c', false, true) end)
    """)
    editors.append(ed)
    ed.type("i<Tab>x")
    ed.wait_for(lambda: ed.lines() == ["LUAx"], f"the user's callback, got {ed.lines()}")
    ed.type("<Tab><Tab>y")  # arriving together, as fast typing or a paste does: each Tab runs it
    ed.wait_for(lambda: ed.lines() == ["LUAxLUALUAy"], f"the user's callback twice, got {ed.lines()}")


def test_tab_runs_a_vimscript_expr_mapping_with_a_script_local_function(tmp_path, editors):
    ed = start(tmp_path, delay_ms=NEVER, before="""
      vim.api.nvim_exec2([[
        function! s:Tab() abort
          return "EXPR"
        endfunction
        inoremap <expr> <Tab> <SID>Tab()
      ]], {})
    """)
    editors.append(ed)
    ed.type("i<Tab>x")
    ed.wait_for(lambda: ed.lines() == ["EXPRx"], f"the user's expr mapping, got {ed.lines()}")


def test_tab_runs_the_buffer_local_mapping_it_replaced_and_restores_it_on_detach(tmp_path, editors):
    # Buffer-local, set before the server attaches (as a FileType plugin or nvim-cmp would).
    ed = start(tmp_path, delay_ms=NEVER, before="""
      vim.api.nvim_create_autocmd('FileType', { pattern = 'python', callback = function(ev)
        vim.keymap.set('i', '<Tab>', '<Plug>(user-tab)', { buffer = ev.buf, remap = true })
        vim.keymap.set('i', '<Plug>(user-tab)', 'PLUG', { buffer = ev.buf })
      end })
    """)
    editors.append(ed)
    assert [m.get("desc") for m in buffer_maps(ed, "<Tab>")] == ["CodeCue: accept suggestion"]
    ed.type("i<Tab>x")
    ed.wait_for(lambda: ed.lines() == ["PLUGx"], f"the replaced <Plug> mapping, got {ed.lines()}")
    ed.type("<Esc>")
    ed.lua("vim.lsp.buf_detach_client(0, require('codecue').client(0).id)")
    ed.wait_for(lambda: [m.get("rhs") for m in buffer_maps(ed, "<Tab>")] == ["<Plug>(user-tab)"],
                "the user's mapping back after detach")


def test_a_remapping_expr_that_sends_tab_again_inserts_one_tab(tmp_path, editors):
    ed = start(tmp_path, delay_ms=NEVER, before=r"""vim.cmd([[imap <expr> <Tab> "X\<Tab>"]])""")
    editors.append(ed)
    ed.type("i<Tab>y<Tab><Tab>z")
    ed.wait_for(lambda: ed.lines() == ["X\tyX\tX\tz"], f"X and one tab each time, got {ed.lines()}")


def test_tab_with_nothing_mapped_inserts_a_tab(quiet):
    quiet.lua("vim.keymap.del('i', '<Tab>')")
    quiet.type("i<Tab>x")
    quiet.wait_for(lambda: quiet.lines() == ["\tx"], "a literal tab")


# --- The completion menu ----------------------------------------------------------------------------------------

def test_completion_menu_hides_the_ghost_text_and_tab_does_not_accept_it(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type("<Cmd>lua vim.fn.complete(vim.fn.col('.'), {'alpha', 'beta'})<CR>")
    editor.wait_for(lambda: editor.lua("return vim.fn.pumvisible()") == 1, "the completion menu")
    editor.wait_for(lambda: editor.ghost() is None, "the ghost text to hide while the menu is open")
    assert editor.lines() == ["x = alpha"]
    assert editor.lua("return require('codecue.api').is_visible()") is False
    editor.type("<Tab>")
    editor.wait_for(lambda: editor.lines() == ["x = alpha\t"], f"Tab as without CodeCue, got {editor.lines()}")


# --- accept only into the buffer the suggestion was shown for --------------------------------------------------

def test_tab_after_an_edit_under_the_suggestion_inserts_no_suggestion(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    # The edit and the Tab arrive together, before TextChangedI can report the edit.
    editor.type("<Cmd>lua vim.api.nvim_buf_set_text(0, 0, 0, 0, 0, {'# '})<CR><Tab>")
    editor.wait_for(lambda: "\t" in editor.lines()[0], f"the Tab, got {editor.lines()}")
    assert "foo" not in "\n".join(editor.lines())


def test_tab_after_the_cursor_moved_inserts_at_the_cursor_not_at_the_old_column(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type("<Cmd>call cursor(1, 1)<CR><Tab>")
    editor.wait_for(lambda: editor.lines() == ["\tx = "], f"a plain tab at column 0, got {editor.lines()}")


def test_api_accept_on_a_changed_buffer_returns_false_and_inserts_nothing(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    accepted = editor.lua("vim.api.nvim_buf_set_text(0, 0, 0, 0, 0, {'# '}) return require('codecue.api').accept()")
    assert accepted is False
    assert editor.lines() == ["# x = "]
    assert editor.ghost() is None


def test_typing_the_suggestion_then_tab_at_once_accepts_the_rest_at_the_new_column(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type("f<Tab>")  # one input: TextChangedI for "f" has not run when Tab arrives
    editor.wait_for(lambda: editor.lines() == ["x = foo.bar(1)", "    return 2"], f"got {editor.lines()}")


# --- keymaps.accept = false and the public API --------------------------------------------------------------------

def test_accept_false_leaves_tab_unmapped_and_the_api_drives_a_users_expr_mapping(tmp_path, editors):
    # As blink.cmp / nvim-cmp users wire it: their own expr mapping asks CodeCue first (textlock applies there).
    ed = start(tmp_path, keymaps={"accept": False}, before="""
      vim.keymap.set('i', '<Tab>', function()
        if require('codecue.api').accept() then return '' end
        return 'T'
      end, { expr = true })
    """)
    editors.append(ed)
    assert buffer_maps(ed, "<Tab>") == []
    assert buffer_maps(ed, "<M-l>"), "the other keys are still mapped"
    ed.type("ix = ")
    ed.wait_ghost()
    ed.type("<Tab>")
    ed.wait_for(lambda: ed.lines() == ["x = foo.bar(1)", "    return 2"], f"accepted, got {ed.lines()}")
    ed.type("<C-]>")  # the next suggestion comes after the accept; dismiss it and Tab is the user's again
    ed.wait_for(lambda: ed.ghost() is None, "no ghost text")
    ed.type("<Tab>")
    ed.wait_for(lambda: ed.lines()[-1] == "    return 2T", f"the user's fallback, got {ed.lines()}")


def test_api_functions(editor):
    api = "return require('codecue.api')."
    editor.type("ix = ")
    editor.wait_ghost()
    assert editor.lua(api + "is_visible()") is True
    assert editor.lua(api + "accept_word()") is True
    assert editor.lines() == ["x = foo"]
    assert editor.lua(api + "accept_line()") is True
    assert editor.lines() == ["x = foo.bar(1)"]
    assert editor.ghost()["text"] == "\n    return 2"
    assert editor.lua(api + "dismiss()") is True
    assert editor.ghost() is None and editor.lua(api + "is_visible()") is False
    assert editor.lua(api + "dismiss()") is False
    assert editor.lua(api + "accept()") is False
    editor.type(" ")
    editor.wait_ghost()
    assert editor.lua(api + "accept()") is True
    assert editor.lines() == ["x = foo.bar(1) foo.bar(1)", "    return 2"]
