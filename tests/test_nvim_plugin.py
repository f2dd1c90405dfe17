"""The Neovim plugin end to end: a real Neovim 0.11 and the real `codecue-lsp` on the random tiny model pair.

The tiny pair writes random text, so every check compares the buffer (and the file on disk) with the ghost text
that was actually shown, never with fixed text.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pynvim  # a test dependency (pyproject [test]): if it is missing the editor suite fails, never skips
import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import PLUGIN, ROOT, Editor, nvim_binary, real_server_cmd  # noqa: E402

PREFIX = "def add(a, b):\n    total = a + b\n"
TYPED = "    return t"  # on a new third line; autoindent supplies the four spaces


@pytest.fixture(scope="module")
def editor(tiny_pair_env):
    ed = Editor(real_server_cmd(), tiny_pair_env)
    yield ed
    ed.close()


def new_file(tmp_path: Path, text: str = PREFIX) -> Path:
    path = tmp_path / "example.py"
    path.write_text(text)
    return path


def test_plugin_attaches_loads_the_model_and_reports_status(editor, tmp_path):
    editor.open(new_file(tmp_path))
    caps = editor.lua("return require('codecue').client(0).server_capabilities")
    assert "inlineCompletionProvider" in caps
    stats = editor.wait_ready(timeout=120)
    assert stats["pair"] == "tiny" and stats.get("load_error") is None
    progress = editor.lua("return vim.tbl_values(require('codecue').progress)")
    assert progress and progress[0]["kind"] == "end"  # the model load was reported with $/progress
    assert editor.lua("return require('codecue').statusline()").startswith("CodeCue: ready")
    # The server's counters run past one screen: without 'nomore' the "-- More --" prompt would wait for a key.
    editor.nvim.command("set nomore")
    editor.nvim.command("CodeCueStatus")
    status = editor.nvim.api.exec2("messages", {"output": True})["output"]
    assert "CodeCue: ready" in status and "frontend: extmarks" in status
    assert any("server counters" in line and "ready = true" in line for line in status.splitlines())
    # The project index in a line of its own (the file's folder is the root: a new file in tmp_path).
    assert any(line.startswith("project index: ") for line in status.splitlines())
    assert "last_prompt" not in status


def test_checkhealth(editor, tmp_path):
    editor.open(new_file(tmp_path))
    editor.wait_ready(timeout=120)
    editor.nvim.command("checkhealth codecue")
    report = "\n".join(editor.lines())
    editor.nvim.command("tabclose")
    assert "server attached" in report and "extmarks" in report
    assert "ERROR" not in report


def test_typed_prefix_shows_ghost_text_and_tab_accepts_it(editor, tmp_path):
    path = new_file(tmp_path)
    editor.open(path)
    editor.wait_ready(timeout=120)
    shown_before = editor.server_stats()["shown"]
    editor.type("Goreturn t", delay=0.05)
    ghost = editor.wait_ghost()
    suggestion = editor.suggestion()
    typed = editor.lines()[-1]
    assert typed == TYPED and ghost["row"] == 2 and ghost["col"] == len(typed)
    # What is drawn is what the suggestion inserts (its first line inline, the others as virtual lines), with tabs
    # expanded and control characters drawn the way Neovim draws them (^P).
    drawn = [editor.nvim.funcs.strtrans(line.replace("\t", " " * 8)) for line in suggestion["text"].split("\n")]
    assert suggestion["tail"] == "" and ghost["text"] == "\n".join(drawn)

    editor.type("<Tab>")
    expected = PREFIX + typed + suggestion["text"]
    editor.wait_for(lambda: "\n".join(editor.lines()) == expected, "the accepted text in the buffer")
    editor.type("<Esc>:w<CR>")
    editor.wait_for(lambda: path.read_text() == expected + "\n", "the saved file to hold the accepted text", 10)
    stats = editor.server_stats()
    assert stats["shown"] > shown_before and stats["accepted"] >= 1


def test_typing_cancels_the_in_flight_request(tiny_pair_env, tmp_path):
    # Each engine step takes 300 ms more, so a request is still running when the next key arrives.
    env = {**tiny_pair_env, "CODECUE_TEST_STEP_DELAY_MS": "300"}
    ed = Editor(real_server_cmd(), env, max_tokens=4)
    try:
        ed.open(new_file(tmp_path))
        ed.wait_ready(timeout=120)
        ed.type("Gox")
        in_flight = "local st = require('codecue.fallback').buffers[vim.api.nvim_get_current_buf()] " \
                    "return st.inflight ~= nil"
        ed.wait_for(lambda: ed.lua(in_flight) and ed.server_stats()["requests"] >= 1, "a request in flight")
        # Inside a slow engine step, not still on its way there (only this request decodes here: nothing was shown).
        ed.wait_for(lambda: ed.server_stats()["resources"]["engine_phase"] in ("draft", "verify"), "a decode step")
        ed.type("y")
        stats = ed.wait_for(lambda: (s := ed.server_stats())["cancelled"] >= 1 and s, "the server to count a cancel")
        assert ed.client_stats()["cancelled"] >= 1
        assert stats["errors"] == 0
        # The server keeps serving: the newest text gets its suggestion.
        ghost = ed.wait_ghost(timeout=60)
        assert (ghost["row"], ghost["col"]) == (2, len("    xy"))
    finally:
        ed.close()


# --- a real terminal: Neovim inside tmux, the screen read back with capture-pane --------------------------------

TMUX_INIT = """
local opts = vim.json.decode(io.open(vim.env.CODECUE_TEST_OPTS):read("*a"))
vim.cmd("filetype on")
vim.opt.runtimepath:prepend(opts.plugin)
vim.cmd("runtime plugin/codecue.lua")
require("codecue").setup(opts.setup)
"""


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def tmux_session(tmp_path, tiny_pair_env):
    if not shutil.which("tmux"):
        pytest.fail("tmux not found: apt-get install tmux (editor-clients/test.sh does)")
    name = f"codecue-test-{os.getpid()}"
    opts = tmp_path / "opts.json"
    opts.write_text(json.dumps({"plugin": str(PLUGIN), "setup": {
        "cmd": real_server_cmd(), "cmd_env": {"PYTHONPATH": str(ROOT), **tiny_pair_env}, "debounce_ms": 20}}))
    init = tmp_path / "init.lua"
    init.write_text(TMUX_INIT)
    socket = tmp_path / "nvim.sock"
    path = new_file(tmp_path)
    command = [nvim_binary(), "-u", str(init), "-i", "NONE", "-n", "--listen", str(socket), str(path)]
    tmux("-f", "/dev/null", "new-session", "-d", "-s", name, "-x", "90", "-y", "12", "-e",
         f"CODECUE_TEST_OPTS={opts}", "-e", "TERM=xterm-256color", subprocess.list2cmdline(command))
    try:
        deadline = time.monotonic() + 30
        while not socket.exists():
            assert time.monotonic() < deadline, "Neovim did not start in tmux"
            time.sleep(0.05)
        nvim = pynvim.attach("socket", path=str(socket))
        yield name, nvim, path
        nvim.close()
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


def test_ghost_text_is_on_the_terminal_screen(tmux_session):
    name, nvim, path = tmux_session
    waiter = Editor.__new__(Editor)  # reuse the polling helpers on the socket-attached Neovim
    waiter.nvim = nvim
    waiter.wait_for(lambda: waiter.lua("return require('codecue').client(0) ~= nil"), "the server to attach")
    waiter.wait_ready(timeout=120)
    tmux("send-keys", "-t", name, "G", "o")
    tmux("send-keys", "-t", name, "-l", "return t")
    ghost = waiter.wait_ghost()
    first_line = ghost["text"].split("\n")[0]
    # Neovim draws control characters as ^X and so on: compare with what it would draw.
    expected = nvim.funcs.strtrans(TYPED + first_line).rstrip()
    deadline = time.monotonic() + 10
    while True:
        # -J joins a long line that wrapped (and keeps trailing blanks, so strip them)
        screen = [line.rstrip() for line in tmux("capture-pane", "-p", "-J", "-t", name).splitlines()]
        if len(screen) > 2 and screen[2] == expected:
            break
        assert time.monotonic() < deadline, f"screen line 3 is {screen[2:3]!r}, expected {expected!r}"
        time.sleep(0.1)
    assert screen[:2] == PREFIX.splitlines()
    tmux("send-keys", "-t", name, "Tab", "Escape")
    # The ghost text is drawn as Neovim draws it (^[ for ESC: a random tiny model writes any byte); the buffer gets
    # the characters themselves.
    waiter.wait_for(lambda: nvim.funcs.strtrans(nvim.current.buffer[2]).rstrip() == expected, "the accepted line")
