"""A raw byte-level client for the real `codecue-lsp --stdio` process (shared by tests/test_protocol_*.py).

pytest-lsp cannot send a broken frame; this one writes any bytes to the server's stdin and reads its stdout (always
well-formed) in a thread, so the tests can wait on responses by id. Timeouts here are hang guards only.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from lsp_helpers import REPO, server_env

HANG_GUARD_S = 60.0


def frame(body: bytes | dict) -> bytes:
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def request(msg_id, method: str, params=None) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}


def notification(method: str, params=None) -> dict:
    return {"jsonrpc": "2.0", "method": method, "params": params}


INITIALIZE_PARAMS = {"processId": None, "rootUri": None, "capabilities": {}}

DOC_URI = "file:///work/protocol/doc.py"
DOC = "def add(a, b):\n    return a + b\n\n\ndef main():\n    total = add(1, 2)\n    return "


def did_open(uri: str, text: str) -> dict:
    return notification("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": text}})


def completion(msg_id, uri: str = DOC_URI, line: int = 6, character: int = 11) -> dict:
    return request(msg_id, "textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
        "context": {"triggerKind": 2}})


class RawServer:
    def __init__(self, env: dict[str, str], *args: str, stderr_path) -> None:
        self._stderr = open(stderr_path, "wb")
        self.stderr_path = stderr_path
        self.proc = subprocess.Popen([sys.executable, "-m", "codecue_lsp", "--stdio", *args], cwd=REPO,
                                     env=server_env(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr)
        self.messages: list[tuple[float, dict]] = []  # (monotonic time received, message), in order
        self._cond = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()

    def _read_stdout(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return self._set_eof()
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                elif line in (b"\r\n", b"\n"):
                    break
            message = json.loads(out.read(length))
            with self._cond:
                self.messages.append((time.monotonic(), message))
                self._cond.notify_all()

    def _set_eof(self) -> None:
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, *messages: dict | bytes) -> None:
        self.write(b"".join(frame(m) for m in messages))

    def responses(self, msg_id) -> list[dict]:
        with self._cond:
            return [m for _, m in self.messages if "method" not in m and m.get("id") == msg_id]

    def wait_for(self, predicate, timeout: float = HANG_GUARD_S) -> dict:
        """The first message received (so far or later) that matches; AssertionError after the hang guard."""
        return self._wait(lambda: next((m for _, m in self.messages if predicate(m)), None), timeout)

    def response(self, msg_id, nth: int = 0, timeout: float = HANG_GUARD_S) -> dict:
        """The nth response (from 0) with this id: ids may be reused once answered."""
        return self._wait(lambda: (self.responses(msg_id)[nth:] or [None])[0], timeout)

    def _wait(self, find, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        with self._cond:  # an RLock: `find` may take it again
            while (found := find()) is None:
                left = deadline - time.monotonic()
                assert left > 0 and not self._eof, f"no matching message (eof={self._eof}); log: {self.log_tail()}"
                self._cond.wait(left)
            return found

    def call(self, msg_id, method: str, params=None) -> dict:
        nth = len(self.responses(msg_id))
        self.send(request(msg_id, method, params))
        return self.response(msg_id, nth)

    def initialize(self, options: dict | None = None) -> None:
        reply = self.call("init", "initialize", dict(INITIALIZE_PARAMS, initializationOptions=options))
        assert "result" in reply, reply
        self.send(notification("initialized", {}))

    def stats(self, msg_id) -> dict:
        reply = self.call(msg_id, "workspace/executeCommand", {"command": "codecue.stats"})
        assert "result" in reply, reply
        return reply["result"]

    def wait_until_loaded(self, prefix: str = "load") -> dict:
        deadline = time.monotonic() + 120
        for n in range(1_000_000):
            current = self.stats(f"{prefix}-{n}")
            if current["ready"] or current["load_error"]:
                return current
            assert time.monotonic() < deadline, current
            time.sleep(0.05)  # polling a counter, not asserting on time
        raise AssertionError("unreachable")

    def close_stdin(self) -> None:
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass

    def wait_exit(self, timeout: float = HANG_GUARD_S) -> int:
        """The exit code, once the process has exited and all it wrote has been read."""
        code = self.proc.wait(timeout)
        self._reader.join(timeout)
        return code

    def log_tail(self, chars: int = 3000) -> str:
        self._stderr.flush()
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-chars:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._stderr.close()
