"""Screenshot of CodeCue in a real Neovim, for docs/nvim.png.

Runs Neovim with the plugin inside tmux (a real terminal), types the start of a line, waits for the ghost text,
captures the screen with its colours (`tmux capture-pane -e`), renders it with rich to SVG and with headless
chromium to PNG.

    python editor-clients/testing/nvim_screenshot.py --out docs/nvim.png               # real models (default pair)
    python editor-clients/testing/nvim_screenshot.py --pair tiny --out /tmp/nvim.png   # needs CODECUE_HOME etc.
"""
from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pynvim
from rich.console import Console
from rich.terminal_theme import MONOKAI, TerminalTheme
from rich.text import Text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nvim_editor import PLUGIN, ROOT, nvim_binary  # noqa: E402

DOCUMENT = "def fibonacci(n):\n    if n <= 1:\n        return n\n"
COLUMNS, ROWS = 84, 12
INIT = """
local opts = vim.json.decode(io.open(vim.env.CODECUE_SHOT_OPTS):read("*a"))
vim.cmd("filetype plugin indent on")
vim.cmd("syntax on")
vim.o.number = true
vim.o.laststatus = 2
vim.o.statusline = " %f %= %{v:lua.require'codecue'.statusline()} "
vim.opt.runtimepath:prepend(opts.plugin)
vim.cmd("runtime plugin/codecue.lua")
require("codecue").setup(opts.setup)
"""


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def wait_for(probe, what: str, timeout: float):
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


def to_png(ansi: str, out: Path, work: Path) -> None:
    console = Console(record=True, width=COLUMNS, file=io.StringIO(), color_system="truecolor")
    console.print(Text.from_ansi(ansi), end="")
    svg = work / "screen.svg"
    # Neovim's default colour scheme background, so cells Neovim did not paint match the ones it did.
    palette = [tuple(c) for c in MONOKAI.ansi_colors._colors]
    theme = TerminalTheme((20, 22, 27), (224, 226, 234), palette[:8], palette[8:])
    console.save_svg(str(svg), title="nvim + CodeCue", theme=theme)
    width, height = (float(v) for v in re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg.read_text()).groups())
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={int(width)},{int(height)}", f"--screenshot={out.resolve()}", svg.as_uri()],
                   check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="default")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "nvim.png")
    parser.add_argument("--typed", default="return fib")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        path = work / "fib.py"
        path.write_text(DOCUMENT)
        opts = work / "opts.json"
        opts.write_text(json.dumps({"plugin": str(PLUGIN), "setup": {
            "cmd": [sys.executable, "-m", "codecue_lsp", "--stdio"], "cmd_env": {"PYTHONPATH": str(ROOT)},
            "pair": args.pair, "max_tokens": 48}}))
        init = work / "init.lua"
        init.write_text(INIT)
        socket = work / "nvim.sock"
        name = f"codecue-shot-{int(time.time())}"
        command = [nvim_binary(), "-u", str(init), "-i", "NONE", "-n", "--listen", str(socket), path.name]
        tmux("-f", "/dev/null", "new-session", "-d", "-s", name, "-x", str(COLUMNS), "-y", str(ROWS), "-c", tmp,
             "-e", f"CODECUE_SHOT_OPTS={opts}", "-e", "TERM=xterm-256color", "-e", "COLORTERM=truecolor",
             subprocess.list2cmdline(command))
        try:
            wait_for(socket.exists, "Neovim", 30)
            nvim = pynvim.attach("socket", path=str(socket))
            stats = "return (require('codecue').server_stats(0, 5000) or {}).ready"
            wait_for(lambda: nvim.exec_lua(stats), "the model to load", 900)  # a first load may calibrate
            tmux("send-keys", "-t", name, "G", "o")
            tmux("send-keys", "-t", name, "-l", args.typed)
            ghost = wait_for(lambda: nvim.exec_lua("return require('codecue.ghost').read(0)"), "ghost text", 60)
            time.sleep(0.3)  # let the terminal catch up with the last redraw
            print(f"ghost text: {ghost['text']!r}")
            to_png(tmux("capture-pane", "-e", "-p", "-t", name), args.out, work)
            print(f"wrote {args.out}")
            nvim.close()
        finally:
            subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


if __name__ == "__main__":
    main()
