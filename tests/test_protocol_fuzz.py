"""Seeded framing and protocol fuzz of the real `codecue-lsp --stdio` process on the tiny pair.

What a correct server must answer (the rules of codecue_lsp/transport.py and codecue_lsp/protocol.py):

Framing. The input is cut into header blocks and bodies. A header block is a run of lines ended by an empty line.
A line that ends in `Content-Length: N` (any case, up to 16 spaces or tabs around N, CRLF or LF) sets the length of
the next body; other lines (Content-Type, garbage, the tail of a truncated body) are ignored. At the empty line
exactly N bytes are the body, whatever they hold: a length that overshoots swallows the start of what follows, and
bytes swallowed that way are not messages. The reader resynchronises at the next line that ends in a header. An
empty line with no length before it is ignored. A length above 64 MiB is ignored like a garbage line (its body is
skipped line by line, in bounded pieces).

Messages. A body that is not JSON, or JSON that is not an object, gets no answer. A request is an object with
"method" and an "id" that is an integer or a string; other ids get no answer. Each request gets exactly one
response, checked in this order: -32600 if "jsonrpc" is not "2.0" or "method" is not a string; -32600 for a second
`initialize`; -32002 before `initialize`; -32602 if params do not fit the method; -32601 for an unknown method;
else the handler's result (-32800 allowed once the client sent `$/cancelRequest` for it). Notifications and
responses get no answer.

`model_bodies` below restates the framing rule over the whole byte stream, and `expected_reply` the message rule;
the test then demands that the server's responses are exactly those the model predicts (no more, none missing,
each within the hang guard), that the server is alive throughout, and that completions still work afterwards.
Counts are printed, and written as JSON to $CODECUE_FUZZ_REPORT when it is set.
"""
from __future__ import annotations

import collections
import json
import os
import random
import re
import threading
import time

from protocol_raw import (
    DOC,
    DOC_URI,
    HANG_GUARD_S,
    INITIALIZE_PARAMS,
    RawServer,
    completion,
    did_open,
    frame,
    notification,
    request,
)

SEED = 20261130
MESSAGES = 10_500
MAX_BODY = 64 * 1024 * 1024
HEADER = re.compile(rb"content-length:[ \t]{0,16}(\d{1,15})[ \t]{0,16}\r?\n\Z", re.IGNORECASE)
CURSORS = [(6, 11), (5, 11), (1, 10), (5, 17)]


def model_bodies(stream: bytes) -> tuple[list[bytes], bool]:
    """The bodies the framing rule cuts out of `stream`, and whether it ends between frames (nothing pending)."""
    pos, length, bodies = 0, None, []
    while (end := stream.find(b"\n", pos)) >= 0:
        line, pos = stream[pos:end + 1], end + 1
        if match := HEADER.search(line):
            length = int(match.group(1)) if int(match.group(1)) <= MAX_BODY else None
        elif line.strip() == b"" and length is not None:
            if pos + length > len(stream):
                return bodies, False
            bodies.append(stream[pos:pos + length])
            pos, length = pos + length, None
    return bodies, pos == len(stream) and length is None


class Fuzz:
    """Generates the byte stream: every piece is one message attempt, counted by kind."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.pieces: list[bytes] = []
        self.kinds = collections.Counter()  # message attempts (pieces of the stream) by kind
        self.request_kinds = collections.Counter()
        self.allow_initialize = False
        self.sent: dict = {}  # id -> (message as sent, reply if it arrives intact after initialize)
        self.piece_of: dict = {}  # id -> index of the piece that carries it
        self.completion_ids: list = []
        self.next_id = 0

    def new_id(self):
        self.next_id += 1
        return self.next_id if self.rng.random() < 0.5 else f"r{self.next_id}"

    def add(self, kind: str, data: bytes) -> None:
        self.kinds[kind] += 1
        self.pieces.append(data)

    def a_request(self) -> dict:
        """A request with a fresh id; remembers what a correct server answers if it arrives intact."""
        rng, msg_id = self.rng, self.new_id()
        kind = rng.choices(["completion", "stats", "unknown", "dollar", "bad_params", "bad_command", "bad_version",
                            "no_version", "bad_method", "initialize"],
                           [2, 5, 6, 2, 4, 2, 2, 2, 2, 1 if self.allow_initialize else 0])[0]
        if kind == "completion":
            message, reply = completion(msg_id, DOC_URI, *rng.choice(CURSORS)), "result"
            self.completion_ids.append(msg_id)
        elif kind == "stats":
            message, reply = request(msg_id, "workspace/executeCommand", {"command": "codecue.stats"}), "result"
        elif kind in ("unknown", "dollar"):
            method = f"codecue/fuzz{msg_id}" if kind == "unknown" else "$/fuzz"
            message, reply = request(msg_id, method, {"x": [1, 2]}), -32601
        elif kind == "bad_params":
            message, reply = request(msg_id, "textDocument/inlineCompletion",
                                     rng.choice([{"position": "nowhere"}, {"textDocument": 5}, [1, 2], "x"])), -32602
        elif kind == "bad_command":
            message, reply = request(msg_id, "workspace/executeCommand", {"command": "codecue.nope"}), -32602
        elif kind == "initialize":
            message, reply = request(msg_id, "initialize", INITIALIZE_PARAMS), -32600
        else:
            message, reply = request(msg_id, "workspace/executeCommand", {"command": "codecue.stats"}), -32600
            if kind == "bad_version":
                message["jsonrpc"] = rng.choice(["1.0", 2, None])
            elif kind == "no_version":
                del message["jsonrpc"]
            else:
                message["method"] = rng.choice([42, ["x"], None, {"m": 1}])
        self.sent[msg_id] = (message, reply)
        self.piece_of[msg_id] = len(self.pieces)
        self.request_kinds[kind] += 1
        return message

    def a_notification(self) -> dict:
        rng = self.rng
        uri = f"file:///work/fuzz/scratch{rng.randrange(4)}.py"
        return rng.choice([
            lambda: did_open(uri, "x = 1\n" * rng.randrange(1, 20)),
            lambda: notification("textDocument/didChange", {"textDocument": {"uri": uri, "version": rng.randrange(9)},
                                                             "contentChanges": [{"text": "y = 2\n"}]}),
            lambda: notification("textDocument/didClose", {"textDocument": {"uri": uri}}),
            lambda: notification("textDocument/didOpen", {"textDocument": "garbage"}),
            lambda: notification("codecue/fuzzNotification", {}),
            lambda: notification("$/fuzzNotification", {"a": 1}),
            lambda: notification("$/setTrace", {"value": "off"}),
            lambda: notification("$/cancelRequest", {"id": rng.choice(self.completion_ids or [0])}),
        ])()

    def garbage_body(self) -> bytes:
        rng = self.rng
        return rng.choice([
            lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80))),
            lambda: json.dumps(self.a_request()).encode()[:rng.randrange(1, 30)],  # truncated JSON
            lambda: b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", "text": "caf\xe9"}',  # not UTF-8
            lambda: b"[" * 20_000,  # nested too deep
            lambda: b"",
            lambda: rng.choice([b"42", b'"a string"', b"null", b"true", b"1" * 5000]),
            lambda: json.dumps([self.a_request(), self.a_request()]).encode(),  # a batch: not LSP
            lambda: json.dumps({"jsonrpc": "2.0", "id": self.new_id(), "result": None}).encode(),  # a response
            lambda: json.dumps(dict(self.a_request(), id=rng.choice([1.5, True, None, {"a": 1}, [1]]))).encode(),
        ])()

    def a_message(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.45:
            self.add("valid_request", frame(self.a_request()))
        elif roll < 0.65:
            self.add("notification", frame(self.a_notification()))
        elif roll < 0.78:
            self.add("garbage_body", frame(self.garbage_body()))
        else:
            self.a_framing_fault(json.dumps(self.a_request()).encode())

    def a_framing_fault(self, body: bytes) -> None:
        rng, n = self.rng, len(body)
        fault = rng.choice(["overshoot", "undershoot", "lowercase", "variant_header", "garbage_line", "bad_length",
                            "over_limit", "no_blank_line", "truncated", "blank_lines"])
        data = {
            "overshoot": lambda: b"Content-Length: %d\r\n\r\n" % (n + rng.randrange(1, 64)) + body,
            "undershoot": lambda: b"Content-Length: %d\r\n\r\n" % rng.randrange(0, n) + body,
            "lowercase": lambda: b"content-length: %d\r\n\r\n" % n + body,
            "variant_header": lambda: rng.choice([b"Content-Length:%d\n\n", b"Content-Length: %d \r\nContent-Type: "
                                                  b"application/vscode-jsonrpc; charset=utf-8\r\n\r\n"]) % n + body,
            "garbage_line": lambda: bytes(rng.randrange(32, 127) for _ in range(rng.randrange(120))) + b"\r\n"
                                    + frame(body),
            "bad_length": lambda: rng.choice([b"Content-Length: -%d\r\n\r\n", b"Content-Length: x%d\r\n\r\n"]) % n
                                  + body,
            "over_limit": lambda: b"Content-Length: %d\r\n\r\n" % rng.choice([MAX_BODY + 1, 2**31, 10**14]) + body,
            "no_blank_line": lambda: b"Content-Length: %d\r\n" % n + body,
            "truncated": lambda: b"Content-Length: %d\r\n\r\n" % n + body[:rng.randrange(n)],
            "blank_lines": lambda: b"\r\n\n\r\n" + frame(body),
        }[fault]()
        self.add("framing:" + fault, data)


def expected_reply(body: bytes, state: dict, sent: dict):
    """What the server answers to one body: None, or (id, "result" | error code | "result_or_cancel")."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or "method" not in data:
        return None
    if "id" not in data:
        if data["method"] == "$/cancelRequest" and state["initialized"]:
            state["cancelled"].add(data["params"]["id"])
        return None
    msg_id = data["id"]
    if type(msg_id) not in (int, str):
        return None
    message, reply = sent[msg_id]
    assert data == message, f"a body the model cannot place: {body[:200]!r}"
    if reply == -32600 and message["method"] != "initialize":
        return msg_id, reply  # a broken envelope is refused first
    if message["method"] == "initialize":
        if state["initialized"]:
            return msg_id, -32600
        state["initialized"] = True
        return msg_id, "result"
    if not state["initialized"]:
        return msg_id, -32002
    return msg_id, reply


def build_stream(fuzz: Fuzz) -> bytes:
    # Before initialize: clean frames only, so that the initialize that follows cannot be swallowed.
    for _ in range(40):
        fuzz.add("before_initialize", frame(fuzz.a_request() if fuzz.rng.random() < 0.6 else fuzz.a_notification()))
    init_id = fuzz.new_id()
    fuzz.sent[init_id] = (request(init_id, "initialize", dict(INITIALIZE_PARAMS, initializationOptions={
        "debounceMs": 0})), "result")
    fuzz.piece_of[init_id] = len(fuzz.pieces)
    fuzz.add("initialize", frame(fuzz.sent[init_id][0]) + frame(notification("initialized", {})))
    fuzz.add("did_open", frame(did_open(DOC_URI, DOC)))
    fuzz.allow_initialize = True
    while len(fuzz.pieces) < MESSAGES:
        fuzz.a_message()
    # The last frame may still wait for bytes (an overshoot): fill it, then end any partial line.
    stream = b"".join(fuzz.pieces)
    _, clean = model_bodies(stream)
    while not clean:
        stream += b" " * 64 + b"\n"
        _, clean = model_bodies(stream)
    return stream


def test_fuzz_every_request_answered_once_and_server_survives(tiny_pair_env, tmp_path):
    fuzz = Fuzz(SEED)
    stream = build_stream(fuzz)
    bodies, _ = model_bodies(stream)
    state = {"initialized": False, "cancelled": set()}
    expected = dict(filter(None, (expected_reply(body, state, fuzz.sent) for body in bodies)))
    for msg_id in state["cancelled"] & {k for k, v in expected.items() if v == "result"}:
        expected[msg_id] = "result_or_cancel"  # the cancel came after the request: it may have caught it

    server = RawServer(dict(tiny_pair_env, OMP_NUM_THREADS="1"), "--pair", "tiny", "--max-tokens", "8",
                       "--log-level", "WARNING", stderr_path=tmp_path / "server.log")
    try:
        started = time.monotonic()
        sent_at = send_in_chunks(server, stream, fuzz)
        deadline = time.monotonic() + HANG_GUARD_S
        for msg_id in expected:
            try:
                server.response(msg_id, timeout=max(0.01, deadline - time.monotonic()))
            except AssertionError:
                break
        missing = [msg_id for msg_id in expected if not server.responses(msg_id)]
        assert not missing, (f"{len(missing)} of {len(expected)} requests unanswered (server alive: "
                             f"{server.proc.poll() is None}), e.g. {missing[:5]}; log: {server.log_tail()}")
        assert server.proc.poll() is None, server.log_tail()
        seconds = time.monotonic() - started

        # Still serving: the model loads, and completions run through the engine.
        assert server.wait_until_loaded("final-load")["ready"]
        before = server.stats("final-before")
        items = [server.call(f"final-{n}", "textDocument/inlineCompletion", completion(0, DOC_URI, *cursor)["params"])
                 ["result"]["items"] for n, cursor in enumerate(CURSORS)]
        after = server.stats("final-after")
        assert after["completed"] + after["typethrough_hits"] - before["completed"] - before["typethrough_hits"] \
            == len(CURSORS)
        assert any(items), "no completion after the fuzz"
        assert server.call("final-bye", "shutdown")["result"] is None
        server.send(notification("exit"))
        assert server.wait_exit() == 0
    finally:
        server.stop()

    codes, latencies = compare_with_model(server.messages, expected, sent_at)
    report(fuzz, bodies, expected, codes, latencies, seconds)


def compare_with_model(messages: list, expected: dict, sent_at: dict) -> tuple[collections.Counter, list]:
    """Once the server has exited (its output is complete): exactly the predicted responses, each once."""
    replies = collections.defaultdict(list)
    for received_at, message in messages:
        if "method" not in message and not str(message.get("id")).startswith("final-"):
            replies[message.get("id")].append((received_at, message))
    unexpected = {k: v for k, v in replies.items() if k not in expected}
    assert not unexpected, f"responses the model did not predict: {list(unexpected.items())[:5]}"
    wrong, latencies, codes = [], [], collections.Counter()
    for msg_id, want in expected.items():
        (received_at, reply), *more = replies[msg_id]
        got = "result" if "result" in reply else reply["error"]["code"]
        codes[got] += 1
        latencies.append(received_at - sent_at[msg_id])
        if more or not (got == want or (want == "result_or_cancel" and got in ("result", -32800))):
            wrong.append((msg_id, want, reply, len(more)))
    assert not wrong, wrong[:10]
    assert max(latencies) < HANG_GUARD_S
    return codes, latencies


def send_in_chunks(server: RawServer, stream: bytes, fuzz: Fuzz) -> dict:
    """Write the stream in 32 KiB chunks from a thread (a hung server must fail the test, not block it); returns
    when the chunk holding the start of each request was written."""
    chunk = 32 * 1024
    starts, at = [], 0
    for piece in fuzz.pieces:
        starts.append(at)
        at += len(piece)
    sent_at: dict = {}

    def write() -> None:
        pending = sorted(fuzz.piece_of.items(), key=lambda item: starts[item[1]], reverse=True)
        for begin in range(0, len(stream), chunk):
            server.write(stream[begin:begin + chunk])
            now = time.monotonic()
            while pending and starts[pending[-1][1]] < begin + chunk:
                sent_at[pending.pop()[0]] = now

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    writer.join(HANG_GUARD_S)
    assert not writer.is_alive(), f"the server stopped reading; log: {server.log_tail()}"
    return sent_at


def report(fuzz: Fuzz, bodies: list, expected: dict, codes: collections.Counter, latencies: list,
           seconds: float) -> None:
    latencies = sorted(latencies)
    counts = {
        "seed": SEED, "messages": len(fuzz.pieces), "bytes": sum(map(len, fuzz.pieces)), "bodies_framed": len(bodies),
        "seconds_to_last_answer": round(seconds, 1),
        # Requests generated include those inside garbage, batches and frames broken or swallowed by a neighbour.
        "requests_generated": len(fuzz.sent), "requests_reaching_the_server": len(expected),
        "responses": sum(codes.values()),
        "responses_by_code": {str(k): v for k, v in sorted(codes.items(), key=str)},
        "latency_ms": {"p50": round(latencies[len(latencies) // 2] * 1000, 1),
                       "p99": round(latencies[int(len(latencies) * 0.99)] * 1000, 1),
                       "max": round(latencies[-1] * 1000, 1)},
        "messages_by_kind": dict(sorted(fuzz.kinds.items())),
        "requests_by_kind": dict(sorted(fuzz.request_kinds.items())),
    }
    print(json.dumps(counts, indent=1))
    if path := os.environ.get("CODECUE_FUZZ_REPORT"):
        with open(path, "w") as f:
            json.dump(counts, f, indent=1)
