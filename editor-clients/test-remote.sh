#!/usr/bin/env bash
# The editors against a real llama-server (issue 11): `codecue-lsp --engine http://127.0.0.1:PORT/v1` started by the
# Neovim plugin (tests/test_nvim_remote.py: ghost text in tmux, Tab, saved file, cancel on keystroke seen in
# llama-server's /slots and log) and by the VS Code extension in code-server + chromium
# (vscode/src/e2e/code-server-remote.ts: "codecue.server.args": ["--engine", URL], ghost text, Tab, saved file,
# cancel seen by llama-server). llama-server serves the default pair (1.5B target + 0.5B draft,
# editor-clients/testing/llama_server.py); each test starts its own on a free port.
#
#   editor-clients/test-remote.sh           check the llama.cpp build, install what is missing, run both
#   editor-clients/test-remote.sh install   only install (as editor-clients/test.sh install)
#   editor-clients/test-remote.sh test      only run (assumes installed)
#
# Needs scripts/build-llama-cpp.sh's build ($CODECUE_HOME/llama.cpp/build/bin/llama-server, CODECUE_HOME defaults
# to ~/.cache/codecue) and `codecue-models fetch` (the GGUF files and the tokenizer): without them it fails at once,
# saying which is missing. Env as editor-clients/test.sh (VENV, CODECUE_EDITOR_CACHE, SKIP_CODE_SERVER=1 to leave
# out code-server; not under CI=true).
set -euo pipefail

# shellcheck source=editor-clients/setup-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/setup-lib.sh"
MODE="${1:-all}"
SKIP_CODE_SERVER="${SKIP_CODE_SERVER:-0}"
if is_ci && [ "$SKIP_CODE_SERVER" = 1 ]; then
  echo "editor-clients/test-remote.sh: CI=$CI runs every editor test: SKIP_CODE_SERVER=1 is ignored" >&2
  SKIP_CODE_SERVER=0
fi
LLAMA_SERVER="${CODECUE_HOME:-$HOME/.cache/codecue}/llama.cpp/build/bin/llama-server"

require_llama_server() {
  if [ ! -x "$LLAMA_SERVER" ]; then
    echo "editor-clients/test-remote.sh: $LLAMA_SERVER missing: build it with scripts/build-llama-cpp.sh" \
      "(~5 min, once per machine; CODECUE_HOME moves it), then run this again" >&2
    exit 1
  fi
  if [ ! -x "$PY" ]; then
    echo "editor-clients/test-remote.sh: no Python at $PY: make venv (or set VENV)" >&2
    exit 1
  fi
  if ! PYTHONPATH="$ROOT" "$PY" "$ROOT/editor-clients/testing/llama_server.py" check >/dev/null; then
    echo "editor-clients/test-remote.sh: the default pair's GGUF files are missing (above)" >&2
    exit 1
  fi
}

run_tests() {
  cd "$ROOT"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
  step "Neovim + codecue-lsp --engine URL + llama-server (default pair): ghost text in tmux, Tab, saved file, cancel at the engine"
  timed "$PY" -m pytest -q -rs -p no:cacheprovider -m remote tests/test_nvim_remote.py
  if [ "$SKIP_CODE_SERVER" != 1 ]; then
    cd "$VSCODE_DIR"
    step "VS Code extension: build the .vsix offline"
    timed npm run --silent package >/dev/null
    check_vsix
    step "VS Code 1.100 (code-server $CODE_SERVER_VERSION) + chromium, codecue.server.args --engine URL + llama-server: ghost text, Tab, saved file, cancel at the engine"
    CODECUE_PYTHON="$PY" CODE_SERVER_DIR="$CODE_SERVER" timed node out/e2e/code-server-remote.js
    echo "   screenshots: $VSCODE_DIR/test-artifacts/vscode-remote-*.png"
  fi
  cd "$ROOT"
}

START=$SECONDS
if [ "$MODE" = all ] || [ "$MODE" = test ]; then
  require_llama_server  # before installing anything: say at once what is missing
fi
if [ "$MODE" = all ] || [ "$MODE" = install ]; then
  install_all
fi
if [ "$MODE" = all ] || [ "$MODE" = test ]; then
  run_tests
fi
echo
echo "editor-clients/test-remote.sh $MODE: done in $((SECONDS - START)) s"
