"""`codecue-lsp --stdio --engine URL` (the real server process) against endpoints that fail: nothing listening, one
that answers 500, one that stalls mid-stream. Each request must end with an empty result (never a hang), the user
gets one message, and `codecue.stats` reports the backend's health. Real llama-server: tests/test_remote_llama.py."""
from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from lsp_helpers import complete, items_of, open_doc, running_server, wait_for_stats

pytestmark = pytest.mark.asyncio

DOC = "def fibonacci(n):\n    if n <= 1:\n        return n\n    "
URI = "file:///remote-endpoint.py"
HANG_GUARD_S = 60  # only a hang guard: every request here ends by a timeout of a few seconds at most


class FakeEndpoint:
    """An OpenAI-style endpoint on 127.0.0.1: GET /v1/models lists one model; POST /v1/completions does `mode`:
    "500" answers 500, "stall" sends the SSE headers and one event, then nothing until the test ends."""

    def __init__(self, mode: str) -> None:
        self.mode, self.posts, self.release = mode, 0, threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send(200, json.dumps({"data": [{"id": "fake"}]}).encode(), "application/json")

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                endpoint.posts += 1
                if endpoint.mode == "500":
                    self._send(500, b"boom", "text/plain")
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                event = {"choices": [{"text": "ret", "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                endpoint.release.wait(HANG_GUARD_S)

            def _send(self, code, body, kind):
                self.send_response(code)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def complete_twice_and_check(client, url: str, error_part: str) -> dict:
    open_doc(client, URI, DOC)
    await wait_for_stats(client, lambda s: s["ready"])
    for _ in range(2):  # two keystrokes: still one message
        result = await complete(client, URI, 3, 4, timeout=HANG_GUARD_S)
        assert items_of(result) == []
    current = await wait_for_stats(client, lambda s: s["backend"]["healthy"] is False)
    assert current["backend"]["kind"] == "remote" and current["backend"]["url"] == url
    assert error_part in current["backend"]["last_error"]
    await asyncio.sleep(0)  # let the message notification be read
    shown = [m.message for m in client.messages if url in m.message]
    assert len(shown) == 1, client.messages
    assert error_part in shown[0]
    return current


async def test_endpoint_down_empty_result_one_message():
    url = f"http://127.0.0.1:{free_port()}/v1"
    async with running_server({}, "--engine", url) as client:
        await complete_twice_and_check(client, url, "cannot connect")


async def test_500_is_retried_then_empty_and_reported():
    endpoint = FakeEndpoint("500")
    try:
        async with running_server({}, "--engine", endpoint.url) as client:
            current = await complete_twice_and_check(client, endpoint.url, "500")
            # Counted as failures, not as answers nor as cancels (issue 63, item 5).
            assert (current["failed"], current["completed"], current["cancelled"]) == (2, 0, 0)
            assert (current["engine"]["failed"], current["engine"]["cancelled"]) == (2, 0)
        assert endpoint.posts == 6  # two requests, each tried three times (the default retry policy)
    finally:
        endpoint.close()


async def test_stalled_stream_ends_by_read_timeout():
    endpoint = FakeEndpoint("stall")
    try:
        async with running_server({}, "--engine", endpoint.url, init_options={"remoteReadTimeoutS": 1}) as client:
            current = await complete_twice_and_check(client, endpoint.url, "timed out")
            assert current["backend"]["healthy"] is False
        assert endpoint.posts == 2  # a read timeout after a token is not retried
    finally:
        endpoint.close()

