"""The Neovim plugin's set-up and control surface, in a real Neovim 0.11 (issue 10, Neovim items 2, 3, 5, 6, 10).

One server per Neovim, the language list the server is told, manual trigger and `auto_trigger = false`, run-time
toggles, the lazy.nvim spec from the README, `:help codecue`, the highlight group, commands before `setup()`,
non-ASCII columns, the 0.12 native switch scoped to CodeCue's client, and `:CodeCueRestart`. Exact-text checks use
editor-clients/testing/fake_server.py; the Lua buffer is checked against the real server on the tiny pair.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pynvim  # a test dependency (pyproject [test]): if it is missing the editor suite fails, never skips
import pytest

from codecue_lsp.config import DEFAULT_LANGUAGES

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import (  # noqa: E402
    PLUGIN,
    ROOT,
    Editor,
    fake_server_cmd,
    nvim_binary,
    real_server_cmd,
)

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
    # Not in the default list (the server's DEFAULT_LANGUAGES): added as users add a language.
    ed = Editor(real_server_cmd(), tiny_pair_env, filetypes={"lua": True, "sh": True})
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


def test_the_default_filetypes_are_the_servers_default_languages():
    ed = fake_editor()
    try:
        assert ed.lua("return vim.lsp.config.codecue.filetypes") == sorted(DEFAULT_LANGUAGES)
        assert ed.lua("return vim.lsp.config.codecue.init_options.enabledLanguages") == sorted(DEFAULT_LANGUAGES)
    finally:
        ed.close()


def test_filetypes_overrides_in_setup():
    ed = fake_editor(filetypes={"python": False, "yaml": True})
    try:
        cfg = ed.lua("local c = vim.lsp.config.codecue "
                     "return { filetypes = c.filetypes, init_options = c.init_options }")
        assert "python" not in cfg["filetypes"] and {"yaml", "go"} <= set(cfg["filetypes"])
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
                      "codecue-api", "CodeCueSuggestion", "codecue-lazy", "codecue-context"]:
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


# --- the README's packer and plain set-ups, in a Neovim started the way a user starts it ---------------------------
# No `-u NONE`: Neovim reads $XDG_CONFIG_HOME/nvim/init.lua, loads start packages from $XDG_DATA_HOME/nvim/site/pack
# and sources plugin/ files, as for a user. The README's snippets keep the default `cmd` ("codecue-lsp" on PATH):
# a `codecue-lsp` first on PATH runs the fixed-answer server.

def user_dirs(tmp_path: Path) -> dict[str, str]:
    """XDG directories of a fresh user (so stdpath("config") / stdpath("data") are in tmp_path), and PATH with a
    codecue-lsp that runs fake_server.py."""
    bin_dir = tmp_path / "bin"
    shim = write(bin_dir / "codecue-lsp", f"#!/bin/sh\nexport FAKE_COMPLETION='{FAKE}'\n"
                                         f"exec '{sys.executable}' '{ROOT / 'editor-clients' / 'testing' / 'fake_server.py'}' \"$@\"\n")
    shim.chmod(0o755)
    env = {name: str(tmp_path / name.lower()) for name in
           ["XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_DIRS"]}
    for path in env.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    env["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    return env


def user_nvim(env: dict[str, str], args: tuple[str, ...] = ()) -> pynvim.Nvim:
    """Neovim as the user starts it (their init.lua, their packages), embedded for RPC."""
    argv = ["env", *(f"{k}={v}" for k, v in env.items()), nvim_binary(), "--embed", "--headless", "-i", "NONE", "-n",
            *args]
    return pynvim.attach("child", argv=argv)


def quit_nvim(nvim: pynvim.Nvim) -> None:
    try:
        nvim.command("qa!")
    except Exception:  # Neovim exits while answering; the pipe closing is the expected outcome
        pass
    nvim.close()


def assert_suggests_and_accepts(nvim: pynvim.Nvim, tmp_path: Path) -> None:
    ed = Editor.__new__(Editor)  # the polling helpers on this Neovim
    ed.nvim = nvim
    path = write(tmp_path / "project" / "x.py")
    ed.open(path)
    cmd = ed.lua("return require('codecue').client(0).config.cmd")
    assert cmd == ["codecue-lsp", "--stdio"], cmd  # the default cmd, found on PATH
    ed.type("ix = ")
    assert ed.wait_ghost() == {"row": 0, "col": 4, "text": FAKE}
    ed.type("<Tab><Esc>:w<CR>")
    ed.wait_for(lambda: path.read_text() == "x = " + FAKE + "\n", "the accepted text in the saved file")
    messages = nvim.api.exec2("messages", {"output": True})["output"]
    assert "Error" not in messages, messages


def packer_spec_from_readme() -> str:
    readme = (ROOT / "editor-clients" / "README.md").read_text()
    match = re.search(r"```lua\n(-- packer\.nvim.*?)```", readme, re.S)
    assert match, "editor-clients/README.md has no ```lua block starting with '-- packer.nvim'"
    return match.group(1)


# What packer.nvim does with a spec, from its source (wbthomason/packer.nvim, lua/packer.lua, lua/packer/util.lua,
# lua/packer/plugin_types/local.lua, lua/packer/compile.lua):
# - the name is `as`, else the last part of the path (util.get_plugin_short_name);
# - a start plugin's install_path is <package_root>/packer/start/<name>, package_root = stdpath("data")/site/pack;
# - a local directory is installed as a symlink to its real path (plugin_types/local.lua);
# - `:PackerCompile` writes stdpath("config")/plugin/packer_compiled.lua, where each `config` function is
#   string.dump(config, true) bytecode run at start-up by try_loadstring(bytecode, "config", name), which calls it
#   as f(name, packer_plugins[name]) inside pcall and reports errors with vim.api.nvim_notify.
PACKER_SYNC_AND_COMPILE = r"""
local snippet, plugin = ...
local specs = {}
local use = function(spec) table.insert(specs, spec) end
assert(load(snippet, "README packer snippet", "t", setmetatable({ use = use }, { __index = _G })))()
assert(#specs == 1, "one use{} in the snippet")
local spec = specs[1]
spec[1] = spec[1]:gsub("^/path/to/codecue/editor%-clients/nvim", plugin)
local segments = vim.split(vim.fn.expand(spec[1]), "/")
local name = spec.as or segments[#segments]
local install_path = vim.fs.joinpath(vim.fn.stdpath("data"), "site", "pack", "packer", "start", name)
vim.fn.mkdir(vim.fs.dirname(install_path), "p")
assert(vim.uv.fs_symlink(vim.uv.fs_realpath(spec[1]), install_path, { dir = true }))
local lines = {
  "_G.packer_plugins = " .. vim.inspect({ [name] = { loaded = true, path = install_path, url = spec[1] } }),
  [[
local function try_loadstring(s, component, name)
  local success, result = pcall(loadstring(s), name, _G.packer_plugins[name])
  if not success then
    vim.schedule(function()
      vim.api.nvim_notify('packer.nvim: Error running ' .. component .. ' for ' .. name .. ': ' .. result, vim.log.levels.ERROR, {})
    end)
  end
  return result
end
]],
  "-- Config for: " .. name,
  "try_loadstring(" .. vim.inspect(string.dump(spec.config, true)) .. ', "config", "' .. name .. '")',
}
local compiled = vim.fs.joinpath(vim.fn.stdpath("config"), "plugin", "packer_compiled.lua")
vim.fn.mkdir(vim.fs.dirname(compiled), "p")
local file = assert(io.open(compiled, "w"))
file:write(table.concat(lines, "\n"), "\n")
file:close()
return { name = name, install_path = install_path, compiled = compiled }
"""


def test_the_readme_packer_spec_installs_as_a_start_plugin_and_its_config_sets_up(tmp_path):
    env = user_dirs(tmp_path)
    sync = user_nvim(env, ("-u", "NONE"))  # :PackerSync + :PackerCompile, done as packer does them
    try:
        packer = sync.exec_lua(PACKER_SYNC_AND_COMPILE, packer_spec_from_readme(), str(PLUGIN))
    finally:
        quit_nvim(sync)
    assert packer["name"] == "codecue"
    assert packer["install_path"] == f"{env['XDG_DATA_HOME']}/nvim/site/pack/packer/start/codecue"
    assert Path(packer["install_path"]).resolve() == PLUGIN.resolve()
    # The user's init.lua holds require("packer").startup(...), which only records the specs at start-up (packer
    # itself is not installed here); what runs the config is plugin/packer_compiled.lua.
    write(Path(env["XDG_CONFIG_HOME"]) / "nvim" / "init.lua", "-- require('packer').startup(function(use) ... end)\n")
    nvim = user_nvim(env)
    try:
        found = nvim.exec_lua("return vim.api.nvim_get_runtime_file('lua/codecue/init.lua', true)")
        assert found == [f"{packer['install_path']}/lua/codecue/init.lua"], found
        assert nvim.exec_lua("return vim.g.loaded_codecue and require('codecue').config ~= nil")  # config() ran
        assert nvim.exec_lua("return vim.fn.exists(':CodeCueStatus') == 2")
        assert_suggests_and_accepts(nvim, tmp_path)
    finally:
        quit_nvim(nvim)


def readme_plain_setup() -> tuple[str, str]:
    readme = (ROOT / "editor-clients" / "README.md").read_text()
    match = re.search(r"Without a plugin manager: `(vim\.opt\.runtimepath:append\([^`]*\))`.*?then `([^`]*setup[^`]*)`"
                      r" in `init\.lua`", readme, re.S)
    assert match, "editor-clients/README.md: the 'Without a plugin manager' sentence changed"
    return match.group(1).replace("/path/to/codecue/editor-clients/nvim", str(PLUGIN)), match.group(2)


@pytest.mark.parametrize("how", ["runtimepath", "pack-symlink"])
def test_the_readme_plain_setup_without_a_plugin_manager(tmp_path, how):
    env = user_dirs(tmp_path)
    append, setup = readme_plain_setup()
    assert setup == 'require("codecue").setup({})'
    init = [setup]
    if how == "runtimepath":
        init.insert(0, append)
    else:  # "or symlink it into ~/.local/share/nvim/site/pack/codecue/start/codecue"
        link = Path(env["XDG_DATA_HOME"]) / "nvim" / "site" / "pack" / "codecue" / "start" / "codecue"
        link.parent.mkdir(parents=True)
        link.symlink_to(PLUGIN, target_is_directory=True)
    write(Path(env["XDG_CONFIG_HOME"]) / "nvim" / "init.lua", "\n".join(init) + "\n")
    nvim = user_nvim(env)
    try:
        assert nvim.exec_lua("return vim.g.loaded_codecue") is True  # plugin/codecue.lua sourced at start-up
        assert_suggests_and_accepts(nvim, tmp_path)
    finally:
        quit_nvim(nvim)
