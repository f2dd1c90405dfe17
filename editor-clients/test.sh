#!/usr/bin/env bash
# Install what the editor tests need (idempotent) and run them all: Neovim plugin tests (real Neovim 0.11.4,
# headless and under tmux), VS Code extension unit + protocol tests, the .vsix build, and the real-editor test in
# code-server 4.100.3 driven by headless chromium.
#
#   editor-clients/test.sh            install what is missing, then run every editor test
#   editor-clients/test.sh install    only install
#   editor-clients/test.sh test       only run (assumes installed)
#
# Env: VENV (default <repo>/.venv), CODECUE_EDITOR_CACHE (default ~/.cache/codecue-editor-tests: code-server
# lives there, ~320 MB), SKIP_CODE_SERVER=1 to leave out the code-server test (not under CI=true: CI skips nothing).
# The tests against a real llama-server (marked `remote`) are editor-clients/test-remote.sh's, not run here.
set -euo pipefail

# shellcheck source=editor-clients/setup-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup-lib.sh"
MODE="${1:-all}"
SKIP_CODE_SERVER="${SKIP_CODE_SERVER:-0}"
if is_ci && [ "$SKIP_CODE_SERVER" = 1 ]; then
  echo "editor-clients/test.sh: CI=$CI runs every editor test: SKIP_CODE_SERVER=1 is ignored" >&2
  SKIP_CODE_SERVER=0
fi

run_tests() {
  cd "$ROOT"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  step "Neovim plugin: rules, behaviour (fixed-answer server), real server on the tiny pair, tmux screen"
  timed "$PY" -m pytest -q -rs -p no:cacheprovider -m "not remote" tests/test_nvim_*.py
  cd "$VSCODE_DIR"
  step "VS Code extension: unit tests (mocked vscode API) + protocol e2e against codecue-lsp"
  CODECUE_PYTHON="$PY" timed npm test --silent
  step "VS Code extension: build the .vsix offline (esbuild bundle: no node_modules inside)"
  timed npm run --silent package >/dev/null
  check_vsix
  if [ "$SKIP_CODE_SERVER" != 1 ]; then
    step "VS Code 1.100 (code-server $CODE_SERVER_VERSION) + chromium: ~ server path, ghost text, trigger, Tab, saved file, crash + restart"
    CODECUE_PYTHON="$PY" CODE_SERVER_DIR="$CODE_SERVER" timed node out/e2e/code-server.js
    echo "   screenshots: $VSCODE_DIR/test-artifacts/"
  fi
  cd "$ROOT"
}

START=$SECONDS
if [ "$MODE" = all ] || [ "$MODE" = install ]; then
  install_all
fi
if [ "$MODE" = all ] || [ "$MODE" = test ]; then
  run_tests
fi
echo
echo "editor-clients/test.sh $MODE: done in $((SECONDS - START)) s"
