"""Issue 11's "done means", in Neovim: the plugin starts `codecue-lsp --stdio --engine http://127.0.0.1:PORT/v1` (its
`cmd` option) against a real llama-server serving the default pair (the 1.5B target with the 0.5B draft, the recipe
of docs/deploy.md; editor-clients/testing/llama_server.py). A real completion shows as ghost text on the terminal
screen (Neovim in tmux), Tab accepts it into the buffer and the saved file; typing while a request runs makes
llama-server stop that generation: its log says it cancelled the task and /slots shows the slot idle.

Needs scripts/build-llama-cpp.sh's build and `codecue-models fetch`: marked `remote` and `editor`, run by
editor-clients/test-remote.sh (never skipped: without the build these tests fail and say what to run).
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

pytestmark = [pytest.mark.remote, pytest.mark.editor]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from llama_server import LlamaServer  # noqa: E402
from nvim_editor import PLUGIN, ROOT, Editor, nvim_binary  # noqa: E402

HANG_GUARD_S = 180  # only a hang guard: the 1.5B and its draft share two CPU cores with everything else
FIB = "def fibonacci(n):\n    if n <= 1:\n        return n\n    \n"  # the cursor goes to the end of line 4
TYPED = "return fib"
# A long list to continue. On the new line under the first row (indentation only) the server asks for a block, which
# ends only at the closing bracket or a dedent: the model writes row after row of primes, so the generation runs until
# it is cancelled. A typed digit makes it a single line, which ends by itself at the end of the row.
PRIMES = "# the first 500 prime numbers\nPRIMES = [\n    2, 3, 5, 7, 11, 13, 17, 19, 23, 29,\n]\n"


@pytest.fixture
def llama(tmp_path):
    """A fresh llama-server per test: a prompt cache warmed by the test before changes llama.cpp's batching, and with
    it the greedy path (seen: the primes list closed after one row, so the "long" block ended before the keystroke)."""
    server = LlamaServer(tmp_path / "llama-server.log")
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


# On a loaded 2-core machine llama-server can take longer than the default 10 s to its first token (its prompt
# pass shares the cores): these tests check cancels and answers, not the remote timeouts (tests/test_remote_*.py).
PATIENT = {"remoteReadTimeoutS": HANG_GUARD_S, "remoteDeadlineS": HANG_GUARD_S}


def remote_cmd(llama: LlamaServer) -> list[str]:
    return [sys.executable, "-m", "codecue_lsp", "--stdio", "--engine", llama.url]


def wait_for(probe, what: str, timeout: float = HANG_GUARD_S):
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)
    return value


# --- ghost text and Tab, on a real terminal: Neovim inside tmux -------------------------------------------------

TMUX_INIT = """
local opts = vim.json.decode(io.open(vim.env.CODECUE_TEST_OPTS):read("*a"))
vim.cmd("filetype on")
vim.opt.runtimepath:prepend(opts.plugin)
vim.cmd("runtime plugin/codecue.lua")
require("codecue").setup(opts.setup)
"""


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def test_real_completion_shows_as_ghost_text_and_tab_accepts_it(llama, tmp_path):
    if not shutil.which("tmux"):
        pytest.fail("tmux not found: apt-get install tmux (editor-clients/test.sh does)")
    path = tmp_path / "fib.py"
    path.write_text(FIB)
    opts = tmp_path / "opts.json"
    opts.write_text(json.dumps({"plugin": str(PLUGIN), "setup": {
        "cmd": remote_cmd(llama), "cmd_env": {"PYTHONPATH": str(ROOT)}, "max_tokens": 48, "debounce_ms": 20,
        "init_options": PATIENT}}))
    (tmp_path / "init.lua").write_text(TMUX_INIT)
    socket = tmp_path / "nvim.sock"
    name = f"codecue-remote-{os.getpid()}"
    command = [nvim_binary(), "-u", str(tmp_path / "init.lua"), "-i", "NONE", "-n", "--listen", str(socket), str(path)]
    tmux("-f", "/dev/null", "new-session", "-d", "-s", name, "-x", "100", "-y", "12", "-e",
         f"CODECUE_TEST_OPTS={opts}", "-e", "TERM=xterm-256color", subprocess.list2cmdline(command))
    try:
        wait_for(socket.exists, "Neovim to start in tmux", 30)
        nvim = pynvim.attach("socket", path=str(socket))
        ed = Editor.__new__(Editor)  # the polling helpers, on the Neovim inside tmux
        ed.nvim = nvim
        ed.wait_for(lambda: ed.lua("return require('codecue').client(0) ~= nil"), "the server to attach")
        stats = ed.wait_ready(timeout=HANG_GUARD_S)
        assert stats["backend"]["kind"] == "remote", stats  # no weights in this process: the engine is llama-server
        assert ed.lua("return require('codecue').client(0).config.cmd")[-2:] == ["--engine", llama.url]
        task_before = llama.slot().get("id_task")  # absent until the first task

        tmux("send-keys", "-t", name, "G", "A")  # the end of the indented blank line 4
        tmux("send-keys", "-t", name, "-l", TYPED)
        ghost = ed.wait_ghost(timeout=HANG_GUARD_S)
        suggestion = ed.suggestion()
        typed = nvim.current.buffer[3]
        assert typed == "    " + TYPED and (ghost["row"], ghost["col"]) == (3, len(typed))
        # The real pair, through llama-server: the body of the recursion, not random text.
        assert "fibonacci(n" in TYPED + suggestion["text"], suggestion
        assert llama.slot().get("id_task") != task_before, "llama-server never ran a task for this completion"
        # What is on the terminal: the typed text and the ghost text's first line on screen line 4.
        first = nvim.funcs.strtrans(suggestion["text"].split("\n")[0])
        expected = typed + first
        deadline = time.monotonic() + 10
        while True:
            screen = [line.rstrip() for line in tmux("capture-pane", "-p", "-J", "-t", name).splitlines()]
            if len(screen) > 3 and screen[3] == expected.rstrip():
                break
            assert time.monotonic() < deadline, f"screen line 4 is {screen[3:4]!r}, expected {expected!r}"
            time.sleep(0.1)
        assert screen[:3] == FIB.splitlines()[:3]

        tmux("send-keys", "-t", name, "Tab")
        want = FIB.splitlines()[:3] + (typed + suggestion["text"]).split("\n")
        ed.wait_for(lambda: nvim.current.buffer[:] == want, "the accepted text in the buffer", 10)
        tmux("send-keys", "-t", name, "Escape", ":w", "Enter")
        ed.wait_for(lambda: path.read_text() == "\n".join(want) + "\n", "the saved file to hold the accepted text",
                    10)
        stats = ed.server_stats()
        assert stats["accepted"] >= 1 and stats["errors"] == 0, stats
        nvim.close()
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


# --- cancel on keystroke, seen by the engine ---------------------------------------------------------------------

def generating(llama: LlamaServer, ask) -> dict:
    """Ask for a long answer (`ask()`) and wait until llama-server's slot generates it (a few tokens out): its /slots
    entry. A task that ends first (the model closed the list, or the server gave up on it) fails at once, with the
    slot and the log, instead of waiting out the hang guard."""
    before = llama.slot().get("id_task")  # absent until the first task
    ask()

    def probe():
        s = llama.slot()
        if s["is_processing"]:
            return s["next_token"][0]["n_decoded"] >= 5 and s
        return s.get("id_task") != before and {"ended": s}
    seen = wait_for(probe, "llama-server's slot to take the editor's request")
    assert "ended" not in seen, f"the task ended within 5 tokens: {seen['ended']}\n{llama.log_tail()}"
    return seen


def cancelled_in_log(llama: LlamaServer, task: int) -> bool:
    return f"cancel task, id_task = {task}" in llama.log_text()


@pytest.fixture
def primes(tmp_path) -> Path:
    path = tmp_path / "primes.py"
    path.write_text(PRIMES)
    return path


def test_a_keystroke_stops_the_generation_in_llama_server(llama, primes):
    """Default set-up (auto_trigger): opening a line under the first row asks for a block (a long generation); the
    next key cancels that request (`$/cancelRequest`), the server closes the stream and llama-server cancels the task.
    The request for the new text is one line, which ends by itself: the slot ends idle."""
    ed = Editor(remote_cmd(llama), {}, max_tokens=1000, init_options=PATIENT)
    try:
        ed.open(primes)
        ed.wait_ready(timeout=HANG_GUARD_S)
        task = generating(llama, lambda: ed.type("3Go"))["id_task"]  # autoindent: the new line holds four spaces
        ed.type("3")
        wait_for(lambda: not ((s := llama.slot())["is_processing"] and s["id_task"] == task),
                 f"llama-server to stop task {task} after the keystroke")
        assert cancelled_in_log(llama, task), f"task {task} ended without a cancel:\n{llama.log_tail()}"
        # Stopped by the keystroke: the server counts it "cancelled" ($/cancelRequest arrived first) or "superseded"
        # (the next request for the document arrived first); on a busy machine either may win.
        stats = ed.wait_for(lambda: (s := ed.server_stats())["cancelled"] + s["superseded"] >= 1 and s,
                            "the server to count the stopped request")
        assert stats["errors"] == 0, stats
        assert ed.client_stats()["cancelled"] >= 1
        wait_for(lambda: not llama.slot()["is_processing"], "the slot to go idle")
        # The one-line request for "    3" is answered: the client sets last_latency_ms only for the answer it
        # still wants (the stopped request's never arrives). The model may end the row at once: an empty answer
        # shows nothing, which is right too; a non-empty one is shown at the cursor, as one line.
        ed.wait_for(lambda: ed.client_stats().get("last_latency_ms") is not None, "the answer for '    3'",
                    HANG_GUARD_S)
        stats = ed.server_stats()
        counts = {k: stats[k] for k in ("requests", "completed", "empty", "cancelled", "superseded", "stale",
                                         "failed", "not_ready", "typethrough_hits", "errors")}
        assert stats["completed"] >= 1 and ed.client_stats()["cancelled"] >= 1, json.dumps([counts, ed.client_stats()])
        ghost = ed.ghost()
        if ghost is not None:
            assert (ghost["row"], ghost["col"]) == (3, len("    3")) and "\n" not in ghost["text"], ghost
    finally:
        ed.close()


def test_typing_after_a_manual_trigger_leaves_the_slot_idle(llama, primes):
    """auto_trigger = false: the trigger key asks once (a block: a long generation); the next key cancels it and asks
    nothing more, so the slot goes idle on that very task, stopped with tokens still to produce, and nothing shows."""
    ed = Editor(remote_cmd(llama), {}, max_tokens=1000, init_options=PATIENT, auto_trigger=False)
    try:
        ed.open(primes)
        ed.wait_ready(timeout=HANG_GUARD_S)
        ed.type("3Go")
        ed.wait_for(lambda: ed.lines()[3] == "    ", "the new indented line")
        task = generating(llama, lambda: ed.type("<M-\\>"))["id_task"]  # the default trigger key
        ed.type("3")
        s = wait_for(lambda: not (s := llama.slot())["is_processing"] and s, "the slot to go idle")
        assert s["id_task"] == task, f"another task ran after the keystroke: {s}"
        assert s["next_token"][0]["has_next_token"] is True, s  # stopped, not finished
        assert cancelled_in_log(llama, task), llama.log_tail()
        # Stopped by the keystroke, not ended by the server's stop rule: the request was never answered. The server
        # counts it "cancelled" ($/cancelRequest first) or "superseded" (the keystroke's didChange first).
        stats = ed.wait_for(lambda: (s := ed.server_stats())["cancelled"] + s["superseded"] >= 1 and s,
                            "the server to count the stopped request", HANG_GUARD_S)
        assert stats["requests"] == 1 and stats["errors"] == 0, stats  # the trigger key's, none after "3"
        assert ed.client_stats()["requests"] == 1 and ed.client_stats()["cancelled"] == 1
        assert ed.ghost() is None and ed.lines()[3] == "    3"
    finally:
        ed.close()
