"""The Neovim plugin's set-up and control surface, in a real Neovim 0.11 (issue 10, Neovim items 2, 3, 5, 6, 10).

One server per Neovim, the language list the server is told, manual trigger and `auto_trigger = false`, run-time
toggles, the lazy.nvim spec from the README, `:help codecue`, the highlight group, commands before `setup()`,
non-ASCII columns, the 0.12 native switch scoped to CodeCue's client, and `:CodeCueRestart`. Exact-text checks use
editor-clients/testing/fake_server.py; the Lua buffer is checked against the real server on the tiny pair.
"""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pynvim  # a test dependency (pyproject [test]): if it is missing the editor suite fails, never skips
import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import PLUGIN, ROOT, Editor, fake_server_cmd, nvim_binary, real_server_cmd  # noqa: E402

FAKE = 'print("hello")'
BUF_STATE = "local st = require('codecue.fallback').buffers[vim.api.nvim_get_current_buf()] "
# True while no request was sent and none is waiting on the debounce timer (checked in one RPC call).
NOTHING_ASKED = BUF_STATE + "return require('codecue.telemetry').stats.requests == ... " \
    "and (st.timer == nil or not st.timer:is_active()) and st.inflight == nil"


def fake_editor(**options) -> Editor:
    return Editor(fake_server_cmd(), {"FAKE_COMPLETION": FAKE}, **options)


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def server_pids(ed: Editor, script: str) -> list[int]:
    """Neovim's child processes whose command line runs `script` (the language server)."""
    pids = ed.lua("return vim.api.nvim_get_proc_children(vim.fn.getpid())")
    found = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except FileNotFoundError:  # exited between the two reads
            continue
        if script in cmdline:
            found.append(pid)
    return found


def client_id(ed: Editor) -> int:
    return ed.lua("return require('codecue').client(0).id")


# --- item 2: one server per Neovim --------------------------------------------------------------------------------

def test_files_from_different_roots_share_one_server(tmp_path):
    files = [write(tmp_path / "repo_a" / "a.py"), write(tmp_path / "repo_b" / "b.py"),
             write(tmp_path / "loose" / "c.py")]  # the last in no project at all
    (tmp_path / "repo_a" / ".git").mkdir()
    write(tmp_path / "repo_b" / "pyproject.toml", "[project]\nname = 'b'\n")
    ed = fake_editor()
    try:
        ids = set()
        for path in files:
            ed.open(path)
            ids.add(client_id(ed))
        assert len(ids) == 1, f"one client for every root, got {ids}"
        assert ed.lua("return #vim.lsp.get_clients({ name = 'codecue' })") == 1
        assert len(server_pids(ed, "fake_server.py")) == 1
    finally:
        ed.close()


# --- item 3: the server is told the client's languages ------------------------------------------------------------

def test_lua_buffer_gets_a_suggestion_from_the_real_server(tiny_pair_env, tmp_path):
    ed = Editor(real_server_cmd(), tiny_pair_env)
    try:
        sent = ed.lua("return vim.lsp.config.codecue.init_options")
        assert {"lua", "shellscript", "python"} <= set(sent["enabledLanguages"])
        assert "sh" not in sent["enabledLanguages"]  # Neovim's filetype, not the LSP languageId
        ed.open(write(tmp_path / "util.lua", "local M = {}\n\nfunction M.add(a, b)\n  return a + b\nend\n"))
        ed.wait_ready(timeout=120)
        ed.type("Golocal total = M.add(", delay=0.05)
        ghost = ed.wait_ghost(timeout=60)
        assert ghost["row"] == 5 and ghost["text"]
        # The shell buffer goes to the server as "shellscript", the id it was told to complete.
        ed.type("<Esc>")
        ed.open(write(tmp_path / "run.sh", "#!/bin/sh\nset -e\n"))
        assert ed.lua("return vim.lsp.config.codecue.get_language_id(0, vim.bo.filetype)") == "shellscript"
        ed.type("Goecho ", delay=0.05)
        assert ed.wait_ghost(timeout=60)["row"] == 2
    finally:
        ed.close()


# --- item 5: manual trigger, auto_trigger = false, toggles, lazy.nvim, help, highlight, status, non-ASCII --------

def test_auto_trigger_off_asks_only_on_the_trigger_key(tmp_path):
    ed = fake_editor(auto_trigger=False)
    try:
        ed.open(write(tmp_path / "x.py"))
        ed.type("ix = ")
        ed.wait_for(lambda: ed.lines() == ["x = "], "the typed text")
        assert ed.lua(NOTHING_ASKED, 0), "typing must not ask the server when auto_trigger = false"
        ed.type("<M-\\>")  # the default trigger key, as in copilot.lua
        assert ed.wait_ghost() == {"row": 0, "col": 4, "text": FAKE}
        ed.type("<Tab>")
        ed.wait_for(lambda: ed.lines() == ["x = " + FAKE], "the accepted text")
        ed.type("<CR>y = ")
        ed.wait_for(lambda: ed.lines()[-1] == "y = ", "the typed text")
        assert ed.lua(NOTHING_ASKED, 1) and ed.ghost() is None
        ed.type("<Cmd>CodeCueTrigger<CR>")
        assert ed.wait_ghost() == {"row": 1, "col": 4, "text": FAKE}
        assert ed.client_stats()["requests"] == 2
    finally:
        ed.close()


def test_toggles_per_buffer_and_per_filetype_at_run_time(tmp_path):
    ed = fake_editor()
    try:
        ed.open(write(tmp_path / "a.py"))
        ed.nvim.command("CodeCueToggle buffer")
        assert ed.lua("return vim.b.codecue_enabled") is False
        asked = ed.client_stats()["requests"]
        ed.type("ix = ")
        ed.wait_for(lambda: ed.lines() == ["x = "], "the typed text")
        assert ed.lua(NOTHING_ASKED, asked) and ed.ghost() is None
        assert ed.lua("return require('codecue').statusline()") == "CodeCue: off"
        ed.type("<Esc>")
        ed.lua("vim.b.codecue_enabled = true")  # the variable itself is the switch, not only the command
        ed.type("ay")
        assert ed.wait_ghost()["col"] == 5
        ed.type("<Esc>")
        ed.nvim.command("CodeCueToggle filetype")
        ed.open(write(tmp_path / "b.py"))  # another buffer of the same filetype is off too
        asked = ed.client_stats()["requests"]
        ed.type("iz = ")
        ed.wait_for(lambda: ed.lines() == ["z = "], "the typed text")
        assert ed.lua(NOTHING_ASKED, asked) and ed.ghost() is None
        ed.type("<Esc>")
        ed.nvim.command("CodeCueToggle filetype")
        ed.type("a1")
        assert ed.wait_ghost()["col"] == 5
        # A per-filetype function decides per buffer (copilot.lua's `filetypes` style).
        ed.lua("require('codecue').filetype_enabled.python = function(b) return vim.b[b].allowed == true end")
        assert ed.lua("return require('codecue').buffer_enabled(0)") is False
        ed.lua("vim.b.allowed = true")
        assert ed.lua("return require('codecue').buffer_enabled(0)") is True
    finally:
        ed.close()


def test_filetypes_overrides_in_setup():
    ed = fake_editor(filetypes={"python": False, "yaml": True})
    try:
        cfg = ed.lua("local c = vim.lsp.config.codecue "
                     "return { filetypes = c.filetypes, init_options = c.init_options }")
        assert "python" not in cfg["filetypes"] and {"yaml", "lua", "go"} <= set(cfg["filetypes"])
        langs = cfg["init_options"]["enabledLanguages"]
        assert "python" not in langs and "yaml" in langs
    finally:
        ed.close()


LAZY_LOADER = """
-- What lazy.nvim does for a spec with `event`, `main` and `opts` (lazy.nvim's loader: add the plugin to the
-- runtimepath, source its plugin/ files, then require(main).setup(opts)), on the spec's own event.
local spec = ...
vim.api.nvim_create_autocmd(spec.event, { once = true, callback = function()
  vim.opt.runtimepath:append(spec.dir)
  for _, file in ipairs(vim.fn.glob(spec.dir .. "/plugin/**/*.lua", false, true)) do vim.cmd.source(file) end
  require(spec.main).setup(spec.opts)
end })
"""


def lazy_spec_from_readme() -> str:
    readme = (ROOT / "editor-clients" / "README.md").read_text()
    match = re.search(r"```lua\n(-- lazy\.nvim.*?)```", readme, re.S)
    assert match, "editor-clients/README.md has no ```lua block starting with '-- lazy.nvim'"
    return match.group(1)


def test_the_readme_lazy_spec_loads_on_insert_and_calls_setup_with_opts(tmp_path):
    nvim = pynvim.attach("child", argv=[nvim_binary(), "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n"])
    try:
        spec = nvim.exec_lua(lazy_spec_from_readme().replace("/path/to/codecue/editor-clients/nvim", str(PLUGIN)))
        assert spec["main"] == "codecue" and spec["event"] == "InsertEnter" and "opts" in spec
        spec["opts"].update(cmd=fake_server_cmd(), cmd_env={"PYTHONPATH": str(ROOT), "FAKE_COMPLETION": FAKE})
        nvim.exec_lua("vim.cmd('filetype on')")
        nvim.exec_lua(LAZY_LOADER, spec)
        nvim.command(f"edit {write(tmp_path / 'x.py')}")
        assert nvim.exec_lua("return package.loaded.codecue == nil")  # nothing loaded before InsertEnter
        waiter = Editor.__new__(Editor)
        waiter.nvim = nvim
        waiter.type("ix = ")
        waiter.wait_for(lambda: nvim.exec_lua("return package.loaded.codecue ~= nil "
                                              "and require('codecue').client(0) ~= nil"), "setup() and attach")
        assert nvim.exec_lua("return require('codecue').config.debounce_ms") == spec["opts"]["debounce_ms"]
        waiter.type("y")
        assert waiter.wait_ghost()["text"] == FAKE
    finally:
        nvim.close()


def test_help_codecue_after_helptags(tmp_path):
    plugin = tmp_path / "codecue"
    shutil.copytree(PLUGIN, plugin)  # :helptags writes doc/tags: not into the repository
    nvim = pynvim.attach("child", argv=[nvim_binary(), "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n"])
    try:
        nvim.exec_lua("vim.opt.runtimepath:prepend(...)", str(plugin))
        nvim.command(f"helptags {plugin / 'doc'}")
        for topic in ["codecue", "codecue-setup", ":CodeCueTrigger", ":CodeCueRestart", ":CodeCueToggle",
                      "codecue-api", "CodeCueSuggestion", "codecue-lazy"]:
            nvim.command(f"help {topic}")
            assert nvim.current.buffer.name.endswith("codecue.txt"), topic
            nvim.command("helpclose")
    finally:
        nvim.close()


def test_ghost_text_uses_a_highlight_group_colourschemes_can_set(tmp_path):
    ed = fake_editor()
    try:
        assert ed.lua("return vim.api.nvim_get_hl(0, { name = 'CodeCueSuggestion' }).link") == "Comment"
        ed.open(write(tmp_path / "x.py"))
        ed.type("ix = ")
        ed.wait_ghost()
        hl = ed.lua("local m = vim.api.nvim_buf_get_extmarks(0, require('codecue.ghost').ns, 0, -1, "
                    "{ details = true })[1] return m[4].virt_text[1][2]")
        assert hl == "CodeCueSuggestion"
        colors = write(tmp_path / "rtp" / "colors" / "mine.lua",
                       "vim.cmd('hi clear') vim.g.colors_name = 'mine' "
                       "vim.api.nvim_set_hl(0, 'CodeCueSuggestion', { fg = '#ff0000' })")
        ed.lua("vim.opt.runtimepath:append(...)", str(colors.parent.parent))
        ed.nvim.command("colorscheme mine")
        assert ed.lua("return vim.api.nvim_get_hl(0, { name = 'CodeCueSuggestion' }).fg") == 0xFF0000
        ed.nvim.command("colorscheme default")  # a scheme that does not mention it: linked to Comment again
        assert ed.lua("return vim.api.nvim_get_hl(0, { name = 'CodeCueSuggestion' }).link") == "Comment"
    finally:
        ed.close()


def test_commands_are_safe_before_setup():
    nvim = pynvim.attach("child", argv=[nvim_binary(), "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n"])
    try:
        nvim.exec_lua("vim.opt.runtimepath:prepend(...) vim.cmd('runtime plugin/codecue.lua')", str(PLUGIN))
        for command in ["CodeCueStatus", "CodeCueTrigger", "CodeCueRestart", "CodeCueToggle buffer"]:
            nvim.command(command)  # an error in a command raises pynvim.NvimError here
        messages = nvim.api.exec2("messages", {"output": True})["output"]
        assert "setup() has not been called" in messages and "CodeCue: setup() not called" in messages
        assert nvim.exec_lua("return require('codecue').statusline()") == "CodeCue: setup() not called"
    finally:
        nvim.close()


@pytest.mark.parametrize("before", ["s = 'é'", "s = '日本語'", "s = '😀'", "s = 'e\u0301😀日' + "])
def test_non_ascii_before_the_cursor(tmp_path, before):
    ed = fake_editor()
    try:
        path = ed.path = write(tmp_path / "x.py")
        ed.open(path)
        ed.type("i" + before)
        ed.wait_for(lambda: ed.lines() == [before], "the typed text")
        ghost = ed.wait_for(lambda: (g := ed.ghost()) and g["col"] == len(before.encode()) and g,
                            "ghost text at the cursor's byte column")
        assert ghost == {"row": 0, "col": len(before.encode()), "text": FAKE}
        ed.type("<M-Right>")  # a word, then the rest: each lands after the multi-byte text
        ed.wait_for(lambda: ed.lines() == [before + "print"], "the first word")
        ed.type("<Tab><Esc>:w<CR>")
        ed.wait_for(lambda: path.read_text(encoding="utf-8") == before + FAKE + "\n", "the saved line")
    finally:
        ed.close()


# --- item 6: the 0.12 native path is off by default and scoped to CodeCue's client --------------------------------

STUB_INLINE_COMPLETION = """
_G.inline_calls = {}
vim.lsp.inline_completion = {
  enable = function(on, filter) table.insert(_G.inline_calls, { on = on, filter = filter or vim.NIL }) end,
  get = function() return false end,
}
"""


def test_native_is_off_by_default_and_scoped_to_our_client(tmp_path):
    ed = fake_editor()
    try:
        ed.lua(STUB_INLINE_COMPLETION)  # as if on Neovim 0.12
        assert ed.lua("return require('codecue').use_native()") is False
        ed.lua("local cfg = vim.deepcopy(require('codecue').config) cfg.native = true "
               "cfg.filetype_overrides = nil require('codecue').setup(cfg)")
        assert ed.lua("return require('codecue').use_native()") is True
        ed.open(write(tmp_path / "x.py"))
        cid = client_id(ed)
        ed.wait_for(lambda: ed.lua("return #_G.inline_calls") >= 1, "inline_completion.enable on attach")
        ed.nvim.command("CodeCueToggle")
        ed.nvim.command("CodeCueToggle buffer")
        calls = ed.lua("return _G.inline_calls")
        assert [c["on"] for c in calls] == [True, False, False]
        for call in calls:
            assert call["filter"] != {} and call["filter"]["client_id"] == cid, call  # never every server's
    finally:
        ed.close()


# --- item 10: :CodeCueRestart ------------------------------------------------------------------------------------

def test_restart_starts_a_fresh_server_and_reattaches_the_buffers(tmp_path):
    ed = fake_editor()
    try:
        ed.open(write(tmp_path / "a.py"))
        first = write(tmp_path / "b.py")
        ed.open(first)
        old_id, old_pids = client_id(ed), server_pids(ed, "fake_server.py")
        assert len(old_pids) == 1
        ed.nvim.command("CodeCueRestart")
        new_id = ed.wait_for(lambda: (c := ed.lua("local c = require('codecue').client(0) return c and c.id"))
                             and c != old_id and c, "a new client")
        for name in ["a.py", "b.py"]:
            attached = f"return vim.lsp.buf_is_attached(vim.fn.bufnr('{tmp_path / name}'), {new_id})"
            ed.wait_for(lambda: ed.lua(attached), f"{name} attached to the new client")
        ed.wait_for(lambda: (p := server_pids(ed, "fake_server.py")) and old_pids[0] not in p and len(p) == 1,
                    "the old server gone and one new server running")
        ed.type("ix = ")
        assert ed.wait_ghost()["text"] == FAKE
    finally:
        ed.close()
