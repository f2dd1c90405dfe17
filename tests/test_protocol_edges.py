"""Protocol edge cases against the real `codecue-lsp --stdio` process on the tiny pair, byte by byte.

The rules under test are stated in codecue_lsp/protocol.py (what each message gets) and codecue_lsp/transport.py
(how frames are cut). Every wait is a hang guard (protocol_raw.HANG_GUARD_S), never a timing assertion.
"""
from __future__ import annotations

import pytest
from protocol_raw import (
    DOC,
    DOC_URI,
    RawServer,
    completion,
    did_open,
    frame,
    notification,
    request,
)


def error_code(reply: dict) -> int | None:
    return reply.get("error", {}).get("code")


@pytest.fixture
def start(tiny_pair_env, tmp_path):
    servers = []

    def make(*args: str, **env: str) -> RawServer:
        server = RawServer(dict(tiny_pair_env, OMP_NUM_THREADS="1", **env), "--pair", "tiny", "--max-tokens", "16",
                           *args, stderr_path=tmp_path / f"server{len(servers)}.log")
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def test_requests_before_initialize_get_server_not_initialized(start):
    server = start()
    server.send(completion(1), request(2, "workspace/executeCommand", {"command": "codecue.stats"}),
                request(3, "codecue/noSuchMethod"), did_open(DOC_URI, DOC))
    for msg_id in (1, 2, 3):
        assert error_code(server.response(msg_id)) == -32002
    server.initialize()
    assert server.stats(4)["resources"]["open_documents"] == 0  # the didOpen before initialize was dropped
    assert error_code(server.call(5, "initialize", {"processId": None, "rootUri": None, "capabilities": {}})) \
        == -32600
    assert server.call(6, "shutdown") == {"jsonrpc": "2.0", "id": 6, "result": None}
    assert error_code(server.call(7, "workspace/executeCommand", {"command": "codecue.stats"})) == -32600
    server.send(notification("exit"))
    assert server.wait_exit() == 0
    assert [m.get("id") for _, m in server.messages] == [1, 2, 3, "init", 4, 5, 6, 7]  # one reply each


def test_ten_megabyte_bodies_are_answered_and_lying_lengths_refused(start):
    server = start()
    server.initialize()
    baseline_kb = peak_rss_kb(server)
    big_uri = "file:///work/protocol/big.py"
    server.send(did_open(big_uri, "x = 1  # padding padding padding padding\n" * 250_000))  # 10 MB
    assert server.call(1, "workspace/executeCommand", {
        "command": "codecue.stats", "arguments": ["y" * 10_000_000]})["result"]["resources"]["open_documents"] == 1
    assert server.call(2, "textDocument/inlineCompletion", completion(0, big_uri, 1000, 5)["params"])["result"] \
        == {"items": []}  # too large to complete, still answered
    # Lengths the server must refuse: it skips to the next header instead of allocating or waiting for the bytes.
    for declared in (10**13, 2**31, 64 * 1024 * 1024 + 1):
        server.write(b"Content-Length: %d\r\n\r\n" % declared + b'{"jsonrpc": "2.0", "id": 99, "method": "x"}' * 50)
        server.send(request(f"after-{declared}", "workspace/executeCommand", {"command": "codecue.stats"}))
        assert "result" in server.response(f"after-{declared}")
    assert server.responses(99) == []  # the refused frame's bytes are not requests
    assert server.proc.poll() is None
    # Two 10 MB copies (bytes and str) and the document: far below what a 10**13 allocation would have taken.
    assert peak_rss_kb(server) - baseline_kb < 400_000


def peak_rss_kb(server: RawServer) -> int:
    with open(f"/proc/{server.proc.pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


@pytest.mark.parametrize("cut", ["between_frames", "inside_header", "inside_body"])
def test_server_exits_when_the_client_closes_stdin_mid_request(start, cut):
    server = start(CODECUE_TEST_STEP_DELAY_MS="200")  # the completion is still running when the pipe closes
    server.initialize({"debounceMs": 0})
    assert server.wait_until_loaded()["ready"]
    server.send(did_open(DOC_URI, DOC), completion(1))
    last = frame(completion(2))
    server.write({"between_frames": b"", "inside_header": last[:10], "inside_body": last[:-10]}[cut])
    server.close_stdin()
    assert server.wait_exit() == 1  # no shutdown was sent: exit code 1, as the LSP spec asks
    assert server.responses(2) == []


def test_duplicate_in_flight_id_is_refused_and_the_first_request_stays_cancellable(start):
    server = start(CODECUE_TEST_STEP_DELAY_MS="200")
    server.initialize({"debounceMs": 0})
    assert server.wait_until_loaded()["ready"]
    server.send(did_open(DOC_URI, DOC), completion("dup"),
                request("dup", "workspace/executeCommand", {"command": "codecue.stats"}))
    refused = server.response("dup")
    assert error_code(refused) == -32600 and "already in use" in refused["error"]["message"], refused
    server.send(notification("$/cancelRequest", {"id": "dup"}))
    server.response("dup", 1)
    replies = server.responses("dup")
    assert [error_code(r) for r in replies] == [-32600, -32800], replies
    # Once answered, the id may be used again.
    assert "result" in server.call("dup", "workspace/executeCommand", {"command": "codecue.stats"})


def test_unknown_methods(start):
    server = start("--log-level", "INFO")
    server.initialize()
    assert error_code(server.call(1, "codecue/noSuchMethod", {})) == -32601
    assert error_code(server.call(2, "$/noSuchRequest", {})) == -32601
    server.send(notification("codecue/noSuchNotification", {}), notification("$/noSuchNotification", {}),
                notification("$/cancelRequest", {"id": 12345}), notification("$/setTrace", {"value": "off"}))
    server.stats(3)
    ids = [m.get("id") for _, m in server.messages]
    assert ids == ["init", 1, 2, 3], server.messages  # notifications get no reply of any kind
    log = server.log_tail(1_000_000)
    assert "codecue/noSuchNotification" in log  # an unknown notification is logged ...
    assert "$/noSuchNotification" not in log  # ... but an optional `$/` one is ignored silently


def test_frame_reader_finds_a_header_split_across_the_pieces_of_an_over_long_line():
    import io

    from codecue_lsp.transport import MAX_LINE_BYTES, FrameReader

    # A refused frame whose body has no newline, then a real frame whose header straddles a MAX_LINE_BYTES piece.
    junk = b"Content-Length: %d\r\n\r\n" % 10**13 + b"x" * (3 * MAX_LINE_BYTES - 5)
    stream = io.BytesIO(junk + b'Content-Length: 2\r\n\r\n{}content-length:\t7 \n\n{"a":1}'
                        + b"Content-Length: 9\r\n\r\nabc")  # the last body is cut short by the end of input
    reader = FrameReader(stream.readline, stream.read)
    assert [reader.next_body(), reader.next_body(), reader.next_body()] == [b"{}", b'{"a":1}', None]
