"""CodeCue next to nvim-cmp and blink.cmp, the real plugins, in a real Neovim 0.11 (issue 64, item 1).

Their menus are floating windows (pumvisible() is 0 while they show). While one is open the ghost text hides
(`hide_during_completion`, on by default) and Tab does what the menu plugin maps; with the menu closed the ghost
text shows and Tab accepts it through the plugin's fallback. CodeCue never deletes a mapping that is not its own.
The plugins are pinned releases vendored under editor-clients/testing/vendor (VENDORED.md); blink.cmp runs its Lua
fuzzy matcher. Their menus list two fixed words from a small source of the test's own.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import VENDOR, Editor, fake_server_cmd  # noqa: E402

SUGGESTION = "foo.bar(1)"

NVIM_CMP = """
local vendor = ...
vim.opt.runtimepath:append(vendor .. "/nvim-cmp")
vim.cmd("runtime plugin/cmp.lua")
local cmp = require("cmp")
local words = {}
function words:complete(_, callback)
  callback({ { label = "alphabet" }, { label = "alpine" } })
end
cmp.register_source("words", setmetatable({}, { __index = words }))
cmp.setup({
  sources = { { name = "words" } },
  mapping = {
    ["<Tab>"] = cmp.mapping(function(fallback)
      if cmp.visible() then cmp.select_next_item() else fallback() end
    end, { "i" }),
  },
  completion = { autocomplete = false }, -- the menu opens when the test opens it
})
"""

BLINK_CMP = """
local vendor = ...
vim.opt.runtimepath:append(vendor .. "/blink.cmp")
vim.cmd("runtime plugin/blink-cmp.lua")
package.preload["codecue_test_words"] = function()
  local source = {}
  function source.new() return setmetatable({}, { __index = source }) end
  function source:get_completions(_, callback)
    callback({ items = { { label = "alphabet", kind = 1 }, { label = "alpine", kind = 1 } },
      is_incomplete_forward = false, is_incomplete_backward = false })
  end
  return source
end
require("blink.cmp").setup({
  fuzzy = { implementation = "lua" },
  keymap = { preset = "none", ["<Tab>"] = { "select_next", "fallback" } },
  sources = { default = { "words" }, providers = { words = { name = "words", module = "codecue_test_words" } } },
  completion = { menu = { auto_show = false }, list = { selection = { preselect = false, auto_insert = true } } },
  cmdline = { enabled = false },
})
"""

PLUGINS = {
    "nvim-cmp": (NVIM_CMP, "require('cmp').complete()", "return require('cmp').visible()"),
    "blink.cmp": (BLINK_CMP, "require('blink.cmp').show()", "return require('blink.cmp').is_menu_visible()"),
}


@pytest.fixture(params=list(PLUGINS))
def editor(request, tmp_path):
    setup, open_menu, visible = PLUGINS[request.param]
    ed = Editor(fake_server_cmd(), {"FAKE_COMPLETION": SUGGESTION})
    ed.lua(setup, str(VENDOR))
    ed.open_menu, ed.menu_visible = open_menu, lambda: ed.lua(visible)
    ed.path = tmp_path / "example.py"
    ed.path.write_text("")
    ed.open(ed.path)
    yield ed
    ed.close()


def tab_desc(ed: Editor) -> str:
    """The description of the current buffer's insert-mode <Tab> mapping ("" when none has one)."""
    return ed.lua("return vim.fn.maparg('<Tab>', 'i', false, true).desc or ''")


def menu_item_inserted(ed: Editor, before: str) -> bool:
    """Whether the line is `before` plus one of the menu's words (the plugins sort them differently)."""
    return ed.lines() in ([before + "alphabet"], [before + "alpine"])


def test_the_menu_hides_the_ghost_text_and_tab_is_the_menus(editor):
    editor.type("ix = ")
    assert editor.wait_ghost()["text"] == SUGGESTION
    editor.type(f"<Cmd>lua {editor.open_menu}<CR>")  # no keystroke in the buffer: only the menu can hide it
    editor.wait_for(editor.menu_visible, "the completion menu")
    editor.wait_for(lambda: editor.ghost() is None, "the ghost text to hide while the menu is open")
    assert editor.lua("return require('codecue.menus').visible()") is True
    assert editor.lua("return vim.fn.pumvisible()") == 0, "a floating menu, not Neovim's popup menu"
    editor.type("<Tab>")
    editor.wait_for(lambda: menu_item_inserted(editor, "x = "), "the menu's first item")
    assert editor.ghost() is None


def test_with_the_menu_closed_the_ghost_text_shows_and_tab_accepts_it(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    assert not editor.menu_visible()
    editor.type("<Tab>")
    editor.wait_for(lambda: editor.lines() == ["x = foo.bar(1)"], f"the suggestion accepted, got {editor.lines()}")


def test_a_reply_arriving_while_the_menu_is_open_is_not_drawn(editor):
    editor.type("ix = ")
    editor.wait_ghost()
    editor.type(f"<Cmd>lua {editor.open_menu}<CR>")
    editor.wait_for(editor.menu_visible, "the completion menu")
    editor.wait_for(lambda: editor.ghost() is None, "the ghost text to hide")
    asked = editor.server_stats()["requests"]
    editor.lua("require('codecue.fallback').request(vim.api.nvim_get_current_buf())")
    editor.wait_for(lambda: editor.server_stats()["requests"] > asked, "the request answered by the server")
    editor.wait_for(lambda: editor.lua("local st = require('codecue.fallback').buffers[vim.api.nvim_get_current_buf()]"
                                       " return st.inflight == nil"), "the answer handled")
    assert editor.ghost() is None


def test_detaching_never_deletes_the_menu_plugins_tab(editor):
    editor.type("ix")  # InsertEnter: the plugin maps its buffer-local <Tab> over CodeCue's (its fallback)
    editor.wait_for(lambda: tab_desc(editor).startswith(("cmp", "blink")), "the plugin's Tab")
    theirs = tab_desc(editor)
    editor.type("<Esc>")
    editor.lua("vim.lsp.buf_detach_client(0, require('codecue').client(0).id)")
    editor.wait_for(lambda: not editor.lua("return require('codecue.fallback').buffers[vim.api.nvim_get_current_buf()]"
                                           " ~= nil"), "CodeCue detached")
    assert tab_desc(editor) == theirs
    assert editor.lua("return vim.tbl_map(function(m) return m.desc end, vim.api.nvim_buf_get_keymap(0, 'i'))") \
        .count("CodeCue: accept suggestion") == 0, "CodeCue's own mapping is gone"
    editor.type(f"A <Cmd>lua {editor.open_menu}<CR>")
    editor.wait_for(editor.menu_visible, "the completion menu")
    editor.type("<Tab>")
    editor.wait_for(lambda: menu_item_inserted(editor, "x "), "the plugin's Tab still working")


def test_hide_during_completion_false_keeps_the_ghost_text(tmp_path):
    setup, open_menu, visible = PLUGINS["nvim-cmp"]
    ed = Editor(fake_server_cmd(), {"FAKE_COMPLETION": SUGGESTION}, hide_during_completion=False)
    try:
        ed.lua(setup, str(VENDOR))
        path = tmp_path / "example.py"
        path.write_text("")
        ed.open(path)
        ed.type("ix = ")
        ed.wait_ghost()
        ed.type(f"<Cmd>lua {open_menu}<CR>")
        ed.wait_for(lambda: ed.lua(visible), "the completion menu")
        ed.wait_for(lambda: ed.lua("return require('codecue.menus').visible()"), "the menu seen by CodeCue")
        assert ed.ghost()["text"] == SUGGESTION
    finally:
        ed.close()
