"""The Neovim plugin's project context options and project roots, in a real Neovim 0.11.

setup()'s context options reach the server as its camelCase settings (a bad value is reported and left to the
server's default), and the one server gets each project's root: rootUri / workspaceFolders in initialize for the
first buffer, workspace/didChangeWorkspaceFolders for a buffer of another project. What the client sent is read back
from editor-clients/testing/fake_server.py's `codecue.stats` (`initialize`, `folders`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pynvim  # a test dependency (pyproject [test]): if it is missing the editor suite fails, never skips
import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import PLUGIN, Editor, fake_server_cmd, nvim_binary  # noqa: E402

CONTEXT_KEYS = ["context", "contextTokens", "excludeGlobs", "maxIndexedFiles", "indexCache"]


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def uri(path: Path) -> str:
    return path.resolve().as_uri()


@pytest.fixture(scope="module")
def nvim():
    """One bare Neovim with the plugin on its runtimepath, for the option table (no server started)."""
    nvim = pynvim.attach("child", argv=[nvim_binary(), "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n"])
    nvim.exec_lua("vim.opt.runtimepath:prepend(...)", str(PLUGIN))
    yield nvim
    nvim.close()


SENT = """
local config = require("codecue.config")
local warnings = {}
local notify = vim.notify
vim.notify = function(msg) table.insert(warnings, msg) end
local ok, cfg = pcall(config.merge, ...)
vim.notify = notify
if not ok then error(cfg) end
local sent = config.init_options(cfg)
local out = {}
for _, key in ipairs({ "context", "contextTokens", "excludeGlobs", "maxIndexedFiles", "indexCache" }) do
  out[key] = sent[key] == nil and vim.NIL or sent[key]
end
return { sent = out, warnings = warnings, root_markers = cfg.root_markers }
"""

# setup() options -> the context settings the server is sent (None: not sent, the server's default applies) and
# the option a warning names.
OPTION_CASES = [
    ({}, {}, None),
    ({"context": False, "context_tokens": 900, "exclude_globs": ["vendor/", "**/*.min.js"],
      "max_indexed_files": 20000, "index_cache": False},
     {"context": False, "contextTokens": 900, "excludeGlobs": ["vendor/", "**/*.min.js"], "maxIndexedFiles": 20000,
      "indexCache": False}, None),
    ({"context_tokens": "auto", "max_indexed_files": 0, "exclude_globs": []},
     {"contextTokens": "auto", "maxIndexedFiles": 0, "excludeGlobs": []}, None),
    ({"context_tokens": 0}, {"contextTokens": 0}, None),  # no tokens for context: only this file's own
    ({"context_tokens": 16385}, {}, "context_tokens"),
    ({"context_tokens": "half"}, {}, "context_tokens"),
    ({"max_indexed_files": 1.5}, {}, "max_indexed_files"),
    ({"max_indexed_files": -1}, {}, "max_indexed_files"),
    ({"exclude_globs": "vendor/"}, {}, "exclude_globs"),  # a list, not a string
    ({"exclude_globs": ["ok/", 3]}, {}, "exclude_globs"),
    ({"context": "yes"}, {}, "context"),
    ({"index_cache": 1}, {}, "index_cache"),
    # init_options still wins over the named options, as for every server setting.
    ({"context": True, "init_options": {"context": False}}, {"context": False}, None),
]


@pytest.mark.parametrize("options, sent, warned", OPTION_CASES)
def test_context_options_are_sent_as_server_settings(nvim, options, sent, warned):
    result = nvim.exec_lua(SENT, options)
    expected = {key: sent.get(key) for key in CONTEXT_KEYS}
    assert result["sent"] == expected
    if warned:
        assert len(result["warnings"]) == 1 and f"ignoring {warned} = " in result["warnings"][0], result["warnings"]
    else:
        assert result["warnings"] == []


def test_root_markers_replace_the_default_list(nvim):
    assert nvim.exec_lua(SENT, {})["root_markers"][:2] == [".git", "pyproject.toml"]
    assert nvim.exec_lua(SENT, {"root_markers": ["WORKSPACE"]})["root_markers"] == ["WORKSPACE"]
    bad = nvim.exec_lua(SENT, {"root_markers": "WORKSPACE"})
    assert bad["root_markers"][0] == ".git" and "root_markers" in bad["warnings"][0]


def test_setup_options_reach_the_server_in_initialize(tmp_path):
    ed = Editor(fake_server_cmd(), {}, context_tokens=700, exclude_globs=["fixtures/"], index_cache=False)
    try:
        ed.open(write(tmp_path / "x.py"))
        options = ed.server_stats()["initialize"]["initializationOptions"]
        assert (options["contextTokens"], options["excludeGlobs"], options["indexCache"]) == (700, ["fixtures/"], False)
        assert "context" not in options and "maxIndexedFiles" not in options  # unset: the server's defaults
    finally:
        ed.close()


def test_the_server_gets_each_projects_root(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write(repo / "pkg" / "package.json", "{}")  # nearer, but .git comes first in root_markers
    other = tmp_path / "other"
    write(other / "pyproject.toml", "[project]\nname = 'other'\n")
    ed = Editor(fake_server_cmd(), {})
    try:
        ed.open(write(repo / "pkg" / "src" / "a.py"))
        init = ed.server_stats()["initialize"]
        assert init["rootUri"] == uri(repo)
        assert init["workspaceFolders"] == [{"uri": uri(repo), "name": str(repo.resolve())}]

        ed.open(write(repo / "lib" / "b.py"))  # the same project: no new folder
        ed.open(write(other / "c.py"))  # another project: the same server, one folder more
        ed.open(write(tmp_path / "loose" / "d.py"))  # in no project: its own folder
        want = sorted([uri(repo), uri(other), uri(tmp_path / "loose")])
        ed.wait_for(lambda: ed.server_stats()["folders"] == want, f"the folders {want}")
        assert ed.lua("return #vim.lsp.get_clients({ name = 'codecue' })") == 1

        old_id = ed.lua("return require('codecue').client(0).id")
        ed.nvim.command("CodeCueRestart")  # the fresh server starts with one buffer's root and is told the others
        ed.wait_for(lambda: ed.lua("local c = require('codecue').client(0) return c and c.id ~= ... "
                                   "and c.initialized or false", old_id), "the new server")
        ed.wait_for(lambda: ed.server_stats()["folders"] == want, f"the new server's folders {want}")
        assert ed.server_stats()["initialize"]["rootUri"] in want
        messages = ed.nvim.api.exec2("messages", {"output": True})["output"]
        assert "already part" not in messages and "Error" not in messages, messages
    finally:
        ed.close()


def test_root_markers_option_and_no_root_at_home(tmp_path):
    ed = Editor(fake_server_cmd(), {}, root_markers=["WORKSPACE"])
    try:
        project = tmp_path / "mono"
        (project / ".git").mkdir(parents=True)
        write(project / "svc" / "WORKSPACE")
        ed.open(write(project / "svc" / "api" / "x.py"))
        assert ed.server_stats()["initialize"]["rootUri"] == uri(project / "svc")
        # A file right in the home directory, or at "/", in no project: no root rather than the whole home.
        for name in [ed.lua("return vim.uv.os_homedir()") + "/notes.py", "/notes.py"]:
            root = ed.lua("local b = vim.api.nvim_create_buf(true, false) vim.api.nvim_buf_set_name(b, ...) "
                          "return require('codecue').root_dir(b, {}) or vim.NIL", name)
            assert root is None, name
    finally:
        ed.close()
