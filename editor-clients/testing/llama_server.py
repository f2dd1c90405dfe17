"""A real llama-server serving CodeCue's default pair (the 1.5B target, the 0.5B as its draft model), for the editor
tests of `codecue-lsp --engine http://127.0.0.1:PORT/v1` (tests/test_nvim_remote.py and
editor-clients/vscode/src/e2e/code-server-remote.ts; editor-clients/test-remote.sh runs both).

Needs the build of scripts/build-llama-cpp.sh ($CODECUE_HOME/llama.cpp/build/bin/llama-server) and the GGUF files of
`codecue-models fetch`. The command is docs/deploy.md's llama-server recipe with one slot.

    python editor-clients/testing/llama_server.py check              # exit 1 naming what is missing
    python editor-clients/testing/llama_server.py serve --port PORT  # exec llama-server (the e2e spawns this)
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HANG_GUARD_S = 300  # only a hang guard: two models load on a shared 2-core machine


def codecue_home() -> Path:
    return Path(os.environ.get("CODECUE_HOME") or Path.home() / ".cache" / "codecue")


def binary() -> Path:
    return codecue_home() / "llama.cpp" / "build" / "bin" / "llama-server"


def pair_ggufs() -> tuple[Path, Path]:
    """The default pair's target and draft GGUF files, as models.toml names them."""
    from engine.store.fetch import gguf_path
    from engine.store.config import load_config

    pair = load_config().pair("default")
    return gguf_path(pair.target, codecue_home()), gguf_path(pair.draft, codecue_home())


def missing() -> list[str]:
    """What this machine lacks to run the tests, each with the command that provides it."""
    problems = []
    if not os.access(binary(), os.X_OK):
        problems.append(f"{binary()} missing: build it with scripts/build-llama-cpp.sh (~5 min, once per machine)")
    for path in pair_ggufs():
        if not path.is_file():
            problems.append(f"{path} missing: run `codecue-models fetch`")
    return problems


def command(port: int, threads: int | None = None) -> list[str]:
    """docs/deploy.md's llama-server recipe, one slot: the 1.5B target with the 0.5B as its draft model."""
    from engine.weights.llamacpp_probe import peer_arguments

    target, draft = pair_ggufs()
    t = str(threads or os.cpu_count() or 2)
    return [str(binary()), "-m", str(target), "--spec-type", "draft-simple", "-md", str(draft),
            "--spec-draft-n-max", "8", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0.5",
            "-t", t, "-tb", t, "-td", t, "--parallel", "1", "-c", "4096", "--cache-prompt", "--metrics", "--slots",
            "--host", "127.0.0.1", "--port", str(port), *peer_arguments(target, draft)]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama-server in its own process group; `base` is http://127.0.0.1:PORT, `log` its output."""

    def __init__(self, log: Path, port: int | None = None) -> None:
        problems = missing()
        if problems:
            raise AssertionError("cannot start llama-server:\n  " + "\n  ".join(problems))
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/v1"
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(command(self.port), stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def wait_healthy(self, timeout: float = HANG_GUARD_S) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while True:  # /health answers 503 while the models load, 200 once a request can be served
            if self.proc.poll() is not None:
                raise AssertionError(f"llama-server exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.base}/health", timeout=5, trust_env=False).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"llama-server not healthy after {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.25)

    def slot(self) -> dict:
        """The one slot's state (/slots): is_processing, id_task, next_token[0].n_decoded / has_next_token."""
        import httpx

        return httpx.get(f"{self.base}/slots", timeout=10, trust_env=False).json()[0]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_text()[-chars:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("check", help="exit 1 naming what is missing")
    serve = sub.add_parser("serve", help="exec llama-server on the default pair")
    serve.add_argument("--port", type=int, required=True)
    serve.add_argument("--threads", type=int)
    args = parser.parse_args()
    problems = missing()
    if problems:
        sys.exit("\n".join(problems))
    if args.what == "check":
        print(f"llama-server: {binary()}\ndefault pair: {' + '.join(str(p) for p in pair_ggufs())}")
        return
    argv = command(args.port, args.threads)
    print(" ".join(argv), flush=True)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
