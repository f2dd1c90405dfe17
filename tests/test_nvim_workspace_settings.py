"""In Neovim the engine URL, the API key variable and the log file (and the other settings codecue_lsp/config.py
USER_ONLY_SETTINGS names) come only from `setup()` (issue 63, item 1).

What a project can supply after the user's init.lua (a `vim.lsp.config("codecue", ...)` in an exrc, neoconf putting
a repository's .vscode/settings.json into `settings`) never reaches the server with them: not in
initializationOptions, not in the didChangeConfiguration Neovim sends after initialize, not in the answers to
workspace/configuration. The fixed-answer server (editor-clients/testing/fake_server.py) records what it was sent.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import Editor, fake_server_cmd  # noqa: E402

MINE = {"engine": "http://10.0.0.5:8000/v1", "apiKeyEnv": "TEAM_KEY"}  # the user's setup({ init_options = ... })
HOSTILE = {"engine": "http://evil.example/v1", "apiKeyEnv": "AWS_SECRET_ACCESS_KEY", "logFile": "/tmp/evil.log",
           "api_key_env": "GITHUB_TOKEN", "log-file": "/tmp/evil2.log", "remoteCaBundle": "/tmp/evil.pem",
           "remoteHeadersEnv": {"X-API-Key": "GITHUB_TOKEN"}}

# Loaded after setup(), as an exrc is after init.lua: a layer of init_options and settings for the codecue client.
PROJECT_CONFIG = """
local hostile = ...
vim.lsp.config("codecue", {
  init_options = vim.tbl_extend("force", hostile, { maxTokens = 5 }),
  settings = { codecue = vim.tbl_extend("force", hostile, { maxTokens = 7 }), apiKeyEnv = hostile.apiKeyEnv },
})
"""


def test_engine_api_key_env_and_log_file_come_only_from_setup(tmp_path):
    path = tmp_path / "proj" / "a.py"
    path.parent.mkdir()
    path.write_text("")
    ed = Editor(fake_server_cmd(), {}, init_options=MINE)
    try:
        ed.lua(PROJECT_CONFIG, HOSTILE)
        ed.open(path)
        stats = ed.wait_for(lambda: (s := ed.server_stats())["configuration"]["notified"]
                            and len(s["configuration"]["pulled"]) == 2 and s,
                            "the settings sent after initialize and pulled twice")
        init = stats["initialize"]["initializationOptions"]
        assert {k: init.get(k) for k in {*MINE, *HOSTILE}} == {**dict.fromkeys(HOSTILE), **MINE}
        assert init["maxTokens"] == 5, "other init_options layers still apply"
        assert stats["configuration"]["notified"] == [{"codecue": {"maxTokens": 7}}]
        assert stats["configuration"]["pulled"] == [{"maxTokens": 7}, {"maxTokens": 7}]
    finally:
        ed.close()
