"""Server settings changed at run time from Neovim, and buffers that are never attached (issue 64, item 4).

`require("codecue").set_settings({...})` sends workspace/didChangeConfiguration and answers the server's
workspace/configuration ("codecue" section) with the new values, so max tokens, the drafter, the context settings
or minConfidence change without a restart; a server started later (a restart) gets them too. The user-only
settings (engine, apiKeyEnv, logFile, ...) are refused: they come only from setup(). `should_attach` (default:
no special buffers, none over max_file_bytes, no secret-looking names, no exclude_globs) keeps a buffer from ever
being attached. The fixed-answer server records what it was sent; the real server shows a setting take effect.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import Editor, fake_server_cmd, real_server_cmd  # noqa: E402


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def pulled(ed: Editor) -> list:
    """What the server pulled so far ([] while no server is attached, during a restart)."""
    stats = ed.lua("return require('codecue').server_stats(0, 5000)")
    return stats["configuration"]["pulled"] if stats else []


def test_set_settings_reaches_the_running_server_and_a_restarted_one(tmp_path):
    ed = Editor(fake_server_cmd(), {}, min_confidence=0.25)
    try:
        ed.open(write(tmp_path / "a.py"))
        assert ed.lua("return vim.lsp.config.codecue.init_options.minConfidence") == 0.25
        ed.wait_for(lambda: len(pulled(ed)) == 1, "the first pull after initialized")
        wanted = {"maxTokens": 5, "drafter": "none", "contextTokens": 512, "minConfidence": 0.5, "pair": "tiny"}
        ok = ed.lua("return require('codecue').set_settings({ max_tokens = 5, drafter = 'none', "
                    "context_tokens = 512, min_confidence = 0.5, pair = 'tiny' })")
        assert ok is True
        stats = ed.wait_for(lambda: len((s := ed.server_stats())["configuration"]["pulled"]) == 2 and s,
                            "the server to pull the new settings")
        assert stats["configuration"]["notified"] == [{"codecue": wanted}]
        assert stats["configuration"]["pulled"][1] == wanted
        ed.lua("require('codecue').set_settings({ max_tokens = 9 })")  # later calls add to the earlier ones
        ed.wait_for(lambda: len(pulled(ed)) == 3, "the third pull")
        assert pulled(ed)[2] == {**wanted, "maxTokens": 9}
        ed.nvim.command("CodeCueRestart")
        ed.wait_for(lambda: (p := pulled(ed)) and p[-1] == {**wanted, "maxTokens": 9}, "the restarted server's pull")
    finally:
        ed.close()


@pytest.mark.parametrize("settings, error", [
    ({"engine": "http://evil.example/v1"}, "engine is set only in setup()"),
    ({"apiKeyEnv": "AWS_SECRET_ACCESS_KEY"}, "apiKeyEnv is set only in setup()"),
    ({"min_confidence": 2}, "min_confidence = 2: expected a number 0..1"),
    ({"context_tokens": -1}, "context_tokens = -1: expected"),
])
def test_set_settings_refuses_user_only_and_invalid_values(tmp_path, settings, error):
    ed = Editor(fake_server_cmd(), {})
    try:
        ed.open(write(tmp_path / "a.py"))
        ed.wait_for(lambda: len(pulled(ed)) == 1, "the first pull after initialized")
        ok, message = ed.lua("return { require('codecue').set_settings(...) }", settings)
        assert ok is False and message.startswith(error)
        ed.lua("require('codecue').set_settings({ max_tokens = 3 })")  # a valid change after it: the only one sent
        stats = ed.wait_for(lambda: len((s := ed.server_stats())["configuration"]["pulled"]) == 2 and s, "a pull")
        assert stats["configuration"]["notified"] == [{"codecue": {"maxTokens": 3}}]
        assert stats["configuration"]["pulled"][1] == {"maxTokens": 3}
    finally:
        ed.close()


def test_the_real_server_applies_a_setting_without_a_restart(tiny_pair_env, tmp_path):
    ed = Editor(real_server_cmd(), tiny_pair_env, init_options={"promptTokens": 256})
    try:
        ed.open(write(tmp_path / "a.py", "x = 1\n"))
        stats = ed.wait_ready(timeout=120)
        assert stats["prompt_tokens"] == 256
        pid = ed.lua("return vim.api.nvim_get_proc_children(vim.fn.getpid())")
        ed.lua("require('codecue').set_settings({ promptTokens = 320 })")
        ed.wait_for(lambda: ed.server_stats()["prompt_tokens"] == 320, "the new prompt budget in use")
        assert ed.lua("return vim.api.nvim_get_proc_children(vim.fn.getpid())") == pid, "the same server process"
    finally:
        ed.close()


# --- should_attach --------------------------------------------------------------------------------------------

def attached(ed: Editor, path: Path) -> bool:
    """Opens `path` and says whether CodeCue attached it. With the server already running, :edit attaches a buffer
    before it returns (FileType -> root_dir -> vim.lsp.start reusing the client); the final check of the test lists
    every attached buffer once the allowed ones have attached."""
    ed.nvim.command(f"edit {path}")
    return ed.lua("return require('codecue').client(0) ~= nil")


def test_secret_names_big_files_excluded_paths_and_special_buffers_are_never_attached(tmp_path):
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    ed = Editor(fake_server_cmd(), {}, exclude_globs=["vendor/", "*.gen.py"], max_file_bytes=1000,
                filetypes={"sh": True})
    try:
        ed.open(write(root / "ok.py", "x = 1\n"))  # the server is up: a refused buffer is refused by the rule
        never = [write(root / ".env", "KEY=1\n"), write(root / "deploy" / "secrets.py"),
                 write(root / "vendor" / "lib.py"), write(root / "api.gen.py"), write(root / "big.py", "#" * 1001)]
        for path in never:
            assert not attached(ed, path), path.name
        assert ed.lua("vim.cmd('enew') vim.bo.buftype = 'nofile' vim.bo.filetype = 'python' "
                      "return require('codecue').client(0) == nil")
        for path in [write(root / "src" / "vendor.py"), write(root / "run.sh", "echo\n")]:
            ed.nvim.command(f"edit {path}")
            ed.wait_for(lambda: ed.lua("return require('codecue').client(0) ~= nil"), f"{path.name} attached")
        uris = {Path(u.removeprefix("file://")).name for u in ed.lua(
            "local names = {} for _, c in ipairs(vim.lsp.get_clients({ name = 'codecue' })) do "
            "for b in pairs(c.attached_buffers) do table.insert(names, vim.uri_from_bufnr(b)) end end return names")}
        assert uris == {"ok.py", "vendor.py", "run.sh"}
    finally:
        ed.close()


def test_a_should_attach_function_decides(tmp_path):
    ed = Editor(fake_server_cmd(), {})
    try:
        ed.lua("require('codecue').setup(vim.tbl_extend('force', require('codecue').config, { should_attach = "
               "function(bufnr, path) return not path:match('private') end }))")
        ed.open(write(tmp_path / "public.py"))
        assert not attached(ed, write(tmp_path / "private.py"))
    finally:
        ed.close()
