"""A crashed CodeCue server recovers in Neovim (issue 64, item 3): the plugin sees the exit, shows `crashed` in the
statusline and :CodeCueStatus, starts the server again after growing waits (restart_delays_ms, short here) and
attaches every buffer the old one served; after the last try it stays crashed until :CodeCueRestart.

The server is killed for real (SIGKILL on its process id); a server that exits at once stands for one that keeps
crashing.
"""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import Editor, fake_server_cmd  # noqa: E402

FAKE = "foo()"


def server_pid(ed: Editor) -> int:
    """The fixed-answer server's process id: Neovim's child running fake_server.py."""
    for pid in ed.lua("return vim.api.nvim_get_proc_children(vim.fn.getpid())"):
        try:
            if b"fake_server.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except FileNotFoundError:  # exited between the two reads
            continue
    raise AssertionError("no fake_server.py child of Neovim")


def attached(ed: Editor, path: Path, client_id: int) -> bool:
    return ed.lua(f"return vim.lsp.buf_is_attached(vim.fn.bufnr('{path}'), {client_id})")


def client_id(ed: Editor) -> int | None:
    return ed.lua("local c = require('codecue').client(0) return c and c.id")


@pytest.fixture
def two_files(tmp_path):
    paths = [tmp_path / "a.py", tmp_path / "b.py"]
    for path in paths:
        path.write_text("")
    return paths


def test_a_killed_server_is_restarted_and_every_buffer_attached_again(two_files):
    ed = Editor(fake_server_cmd(), {"FAKE_COMPLETION": FAKE}, restart_delays_ms=[50, 50, 50])
    try:
        for path in two_files:
            ed.open(path)
        old_id, old_pid = client_id(ed), server_pid(ed)
        os.kill(old_pid, signal.SIGKILL)
        new_id = ed.wait_for(lambda: (c := client_id(ed)) and c != old_id and c, "a new client")
        for path in two_files:
            ed.wait_for(lambda: attached(ed, path, new_id), f"{path.name} attached to the new client")
        assert server_pid(ed) != old_pid
        ed.wait_for(lambda: ed.lua("return require('codecue').statusline()") == "CodeCue: ready", "ready again")
        ed.type("ix = ")  # b.py, the current buffer, suggests again
        assert ed.wait_ghost()["text"] == FAKE
        ed.type("<Esc>")
        ed.nvim.command(f"buffer {two_files[0]}")  # and so does the other one
        ed.type("oy = ")
        assert ed.wait_ghost()["text"] == FAKE
    finally:
        ed.close()


def test_the_crash_shows_in_the_statusline_and_status_until_restart(two_files):
    ed = Editor(fake_server_cmd(), {"FAKE_COMPLETION": FAKE}, restart_delays_ms=[])  # no automatic restart
    try:
        ed.open(two_files[0])
        os.kill(server_pid(ed), signal.SIGKILL)
        crashed = "CodeCue: crashed (killed by signal 9): :CodeCueRestart"
        ed.wait_for(lambda: ed.lua("return require('codecue').statusline()") == crashed, "the crash shown")
        assert crashed in ed.lua("return require('codecue').status_lines()")
        ed.nvim.command("CodeCueRestart")
        ed.wait_for(lambda: ed.lua("return require('codecue').statusline()") == "CodeCue: ready", "ready again")
        ed.type("ix = ")
        assert ed.wait_ghost()["text"] == FAKE
    finally:
        ed.close()


def test_a_server_that_keeps_crashing_is_tried_three_more_times_then_left_crashed(tmp_path, two_files):
    starts = tmp_path / "starts.log"
    cmd = ["sh", "-c", f"echo start >> '{starts}'; exit 3"]
    ed = Editor(cmd, {}, restart_delays_ms=[10, 20, 40])
    try:
        ed.nvim.command(f"edit {two_files[0]}")
        gave_up = "CodeCue: crashed (exit code 3), gave up after 3 restarts: :CodeCueRestart"
        ed.wait_for(lambda: ed.lua("return require('codecue').statusline()") == gave_up, "the last try to fail")
        # Given up at the fourth exit: no restart is pending any more, so the count is final.
        assert starts.read_text().splitlines() == ["start"] * 4
    finally:
        ed.close()


def test_quitting_is_not_a_crash(two_files):
    ed = Editor(fake_server_cmd(), {"FAKE_COMPLETION": FAKE}, restart_delays_ms=[10, 10, 10])
    try:
        ed.open(two_files[0])
        old_id = client_id(ed)
        ed.lua("vim.lsp.get_client_by_id(...):stop()", old_id)
        ed.wait_for(lambda: ed.lua("return vim.lsp.get_client_by_id(...) == nil", old_id), "the client gone")
        assert ed.lua("return require('codecue.recovery').crash") is None
        assert ed.lua("return require('codecue').statusline()") == "CodeCue: not attached"
    finally:
        ed.close()
