"""Fewer, better suggestions, from Neovim (issue 64, item 6): with `min_confidence` set, codecue-lsp on the tiny pair
holds back what typing asks for when the model doubts its first line (codecue.stats `gated`), never what the user asks
for with the trigger key (triggerKind Invoked), and `set_settings` turns the gate off without a restart.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import Editor, real_server_cmd  # noqa: E402

DOC = "def add(a, b):\n    return a + b\n\n"


def test_the_gate_holds_back_typed_requests_not_asked_ones_and_turns_off_at_run_time(tiny_pair_env, tmp_path):
    # 1.0: no first line of the random tiny model is that certain, so every typed suggestion with code is held back.
    ed = Editor(real_server_cmd(), tiny_pair_env, min_confidence=1.0)
    try:
        path = tmp_path / "example.py"
        path.write_text(DOC)
        ed.open(path)
        ed.wait_ready(timeout=120)
        pid = ed.lua("return vim.api.nvim_get_proc_children(vim.fn.getpid())")
        ed.type("Gox = add(", delay=0.05)
        held = ed.wait_for(lambda: (s := ed.server_stats())["gated"] >= 1 and s, "a suggestion held back", 60)
        assert ed.ghost() is None and held["shown"] == 0, held

        ed.type("<M-\\>")  # the trigger key asks (Invoked): shown whatever its confidence
        ghost = ed.wait_ghost(timeout=60)
        assert ghost["text"].strip(), ghost
        asked = ed.server_stats()
        assert asked["invoked"] >= 1 and asked["shown"] >= 1, asked

        assert ed.lua("return require('codecue').set_settings({ min_confidence = 0 })") is True
        ed.type("<Esc>ox = add(", delay=0.05)
        ed.wait_ghost(timeout=60)
        after = ed.server_stats()
        assert after["gated"] == asked["gated"], "typed requests are shown once the gate is off"
        assert ed.lua("return vim.api.nvim_get_proc_children(vim.fn.getpid())") == pid, "no restart"
    finally:
        ed.close()
