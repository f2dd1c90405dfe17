"""The path rules of `should_attach`'s default (lua/codecue/attach_rules.lua), run inside a real Neovim 0.11:
secret-looking file names and gitignore-style `exclude_globs` relative to the project root."""
from __future__ import annotations

import sys
from pathlib import Path

import pynvim  # a test dependency (pyproject [test]): if it is missing the editor suite fails, never skips
import pytest

pytestmark = pytest.mark.editor  # run by editor-clients/test.sh, which installs Neovim
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "editor-clients" / "testing"))
from nvim_editor import PLUGIN, nvim_binary  # noqa: E402


@pytest.fixture(scope="module")
def nvim():
    vim = pynvim.attach("child", argv=[nvim_binary(), "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n"])
    vim.exec_lua("vim.opt.rtp:prepend(...)", str(PLUGIN))
    yield vim
    vim.close()


@pytest.mark.parametrize("name, secret", [
    (".env", True), (".env.local", True), ("server.pem", True), ("tls.KEY", True), ("id_rsa", True),
    ("id_ed25519.pub", True), ("aws_credentials.py", True), ("secrets.py", True), (".netrc", True),
    ("main.py", False), ("environment.py", False), ("keyboard.py", False), ("monkey.go", False),
])
def test_secret_names(nvim, name, secret):
    assert nvim.exec_lua("return require('codecue.attach_rules').is_secret_name(...)", name) is secret


@pytest.mark.parametrize("pattern, relpath, excluded", [
    ("vendor/", "vendor/lib.py", True),            # a folder at the root
    ("vendor/", "a/vendor/lib.py", True),          # ... or at any depth (no slash inside the pattern)
    ("vendor/", "src/vendor.py", False),           # a trailing slash: folders only
    ("vendor", "src/vendor", True),                # without it, files too
    ("*.gen.py", "api.gen.py", True),
    ("*.gen.py", "pkg/api.gen.py", True),
    ("*.gen.py", "api.py", False),
    ("src/*.py", "src/a.py", True),                # a slash inside: anchored at the root
    ("src/*.py", "lib/src/a.py", False),
    ("/build/", "build/out.py", True),
    ("/build/", "lib/build/out.py", False),
    ("docs/internal", "docs/internal/plan.py", True),  # a folder above the file
    ("**/fixtures/", "tests/unit/fixtures/data.py", True),
])
def test_exclude_globs(nvim, pattern, relpath, excluded):
    assert nvim.exec_lua("return require('codecue.attach_rules').glob_excludes(...)", pattern, relpath) is excluded
