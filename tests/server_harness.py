"""Two ways to drive the server in tests beyond tests/lsp_helpers.py:

- `InProcessClient`: JSON-RPC messages fed to a `CodeCueServer`'s protocol on the test's own event loop, exactly
  as pygls's stdin reader hands them over (`json.loads(body, object_hook=protocol.structure_message)`, then
  `handle_message`); everything the server writes comes back as parsed JSON. A test can then block one step of the
  server (with an event it controls) and see which messages are still answered meanwhile.
- helpers for the subprocess tests: waiting on a condition of `codecue.stats`, and a request whose every response
  is counted (a request must be answered exactly once).
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections import defaultdict

# Only a hang guard: how long a blocked step waits for the test before giving up (so that a server that blocks
# its event loop makes the test fail instead of hanging it).
HANG_GUARD_S = 15.0


class InProcessClient:
    def __init__(self, server) -> None:
        self.server = server
        self.protocol = server.protocol
        self.responses: dict = defaultdict(list)  # id -> every response the server wrote for it
        self.from_server: list[dict] = []  # notifications and requests the server sent (logs, progress, ...)
        self._waiters: dict = {}
        self._ids = itertools.count(1)
        self.protocol.set_writer(self, include_headers=False)

    # --- the writer pygls sends to ------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        message = json.loads(data)
        if "method" in message:
            self.from_server.append(message)
            return
        self.responses[message["id"]].append(message)
        waiter = self._waiters.get(message["id"])
        if waiter is not None and not waiter.done():
            waiter.set_result(message)

    def close(self) -> None:
        pass

    # --- client -> server ---------------------------------------------------------------------------------------
    def feed(self, message: dict) -> None:
        self.protocol.handle_message(json.loads(json.dumps(message), object_hook=self.protocol.structure_message))

    def request(self, method: str, params) -> tuple[int, asyncio.Future]:
        """Send a request; returns its id and a future of the (first) response message."""
        msg_id = next(self._ids)
        self._waiters[msg_id] = asyncio.get_running_loop().create_future()
        self.feed({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return msg_id, self._waiters[msg_id]

    def notify(self, method: str, params) -> None:
        self.feed({"jsonrpc": "2.0", "method": method, "params": params})

    async def call(self, method: str, params) -> dict:
        _, future = self.request(method, params)
        return await asyncio.wait_for(future, HANG_GUARD_S * 2)

    async def initialize(self) -> None:
        """`initialize` only: `initialized` would start loading the configured model pair; tests set
        `server.completer` themselves."""
        response = await self.call("initialize", {"processId": None, "capabilities": {}, "rootUri": None})
        assert "result" in response, response

    def open(self, uri: str, text: str, language: str = "python", version: int = 1) -> None:
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": language, "version": version, "text": text}})

    def change(self, uri: str, version: int, text: str) -> None:
        self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                               "contentChanges": [{"text": text}]})

    def complete(self, uri: str, line: int, character: int) -> tuple[int, asyncio.Future]:
        return self.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 2}})

    async def stats(self) -> dict:
        response = await self.call("workspace/executeCommand", {"command": "codecue.stats", "arguments": []})
        return response["result"]


@contextlib.asynccontextmanager
async def tiny_in_process_server(settings: dict):
    """An initialized in-process server with a completer on the tiny engine (no model loading); shut down after."""
    from engine_helpers import tiny_engine

    from codecue_lsp.completer import Completer
    from codecue_lsp.server import make_server

    server = make_server(settings)
    client = InProcessClient(server)
    await client.initialize()
    server.completer = Completer(tiny_engine("none"), syntax=server.syntax)
    try:
        yield client
    finally:
        if not server.protocol._shutdown:
            await client.call("shutdown", None)


class Gate:
    """Blocks a step of the server (on whatever thread runs it) until the test opens it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.finished = threading.Event()

    def wrap(self, fn, log: list | None = None, name: str = ""):
        def gated(*args, **kwargs):
            self.entered.set()
            self.opened.wait(HANG_GUARD_S)
            try:
                return fn(*args, **kwargs)
            finally:
                if log is not None:
                    log.append(name)
                self.finished.set()
        return gated

    async def wait_entered(self) -> None:
        # Off the loop: with the old code the gated step itself holds the loop until the hang guard runs out.
        assert await asyncio.to_thread(self.entered.wait, HANG_GUARD_S * 2), "the gated step never started"


# --- subprocess helpers -----------------------------------------------------------------------------------------
class ResponseCounter:
    """Counts every response message the client receives, per id (a duplicate answer would show up here)."""

    def __init__(self, client) -> None:
        self.counts: dict = defaultdict(int)
        protocol = client.protocol
        original = protocol.handle_message

        def counting(message):
            if not hasattr(message, "method") and getattr(message, "id", None) is not None:
                self.counts[message.id] += 1
            return original(message)
        protocol.handle_message = counting
