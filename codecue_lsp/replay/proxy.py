"""`codecue-replay record`: a transparent stdio proxy between an editor and a language server.

Every byte is forwarded unchanged both ways (editor -> server frame by frame, server -> editor as it arrives).
The editor's didOpen / didChange / inlineCompletion / $/cancelRequest messages are written to the trace as they
pass (so a killed proxy still leaves a trace); at the end the file is rewritten with `truth` events derived from
what the user typed after each request (the text after the request's position, once all later edits are applied).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import BinaryIO

from .synth import truth_text
from .trace import CURSOR_METHOD, Document, common_prefix_length, write_trace


class FrameReader:
    """Reads LSP frames from a file descriptor with os.read (a daemon thread blocked in a buffered reader's
    lock aborts the interpreter at exit)."""

    def __init__(self, fd: int):
        self.fd, self.buffer, self.eof = fd, b"", False

    def fill(self) -> bool:
        chunk = os.read(self.fd, 65536)
        self.buffer += chunk
        self.eof = not chunk
        return bool(chunk)

    def readline(self) -> bytes:
        while b"\n" not in self.buffer and not self.eof:
            self.fill()
        end = self.buffer.find(b"\n") + 1 or len(self.buffer)
        line, self.buffer = self.buffer[:end], self.buffer[end:]
        return line

    def read(self, size: int) -> bytes:
        while len(self.buffer) < size and not self.eof:
            self.fill()
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data


def read_frame(stream: FrameReader) -> tuple[bytes, bytes | None]:
    """One LSP frame as (raw bytes exactly as read, body); (b"", None) at end of stream.
    Bytes that are not a well-formed frame come back with body None, to be forwarded anyway."""
    raw, length = b"", None
    while True:
        line = stream.readline()
        if not line:
            return raw, None
        raw += line
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            try:
                length = int(value.strip())
            except ValueError:
                return raw, None
    if length is None:
        return raw, None
    body = stream.read(length)
    return raw + body, body if len(body) == length else None


def minimal_change(old: str, new: str, doc: Document) -> tuple[list[int], str]:
    """A full-text change as the smallest range edit (common prefix and suffix kept)."""
    prefix = common_prefix_length(old, new)
    limit = min(len(old), len(new)) - prefix
    suffix = common_prefix_length(old[::-1][:limit], new[::-1][:limit])
    start, end = doc.position(prefix), doc.position(len(old) - suffix)
    return [*start, *end], new[prefix:len(new) - suffix]


class Recorder:
    """Turns the editor's messages into trace events."""

    def __init__(self, command: list[str], out_path: str):
        self.start = time.perf_counter()
        self.docs: dict[str, Document] = {}
        self.completion_ids: set = set()
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.out = open(out_path, "w", encoding="utf-8")
        self.emit({"t": 0.0, "type": "meta", "source": "record", "command": command})

    def emit(self, event: dict) -> None:
        with self.lock:
            self.events.append(event)
            self.out.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
            self.out.flush()

    def now(self) -> float:
        return round(time.perf_counter() - self.start, 4)

    def observe(self, body: bytes) -> None:
        try:
            message = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return
        if not isinstance(message, dict):
            return
        method, params = message.get("method"), message.get("params") or {}
        if method == "textDocument/didOpen":
            item = params["textDocument"]
            self.docs[item["uri"]] = Document(item["text"])
            self.emit({"t": self.now(), "type": "open", "uri": item["uri"], "language": item.get("languageId", ""),
                       "text": item["text"]})
        elif method == "textDocument/didChange":
            uri = params["textDocument"]["uri"]
            doc = self.docs.setdefault(uri, Document(""))
            for change in params.get("contentChanges", []):
                if "range" in change:
                    r = change["range"]
                    span = [r["start"]["line"], r["start"]["character"], r["end"]["line"], r["end"]["character"]]
                    text = change["text"]
                else:  # a full-text change (editors with full sync): recorded as the edit it made
                    span, text = minimal_change(doc.text, change["text"], doc)
                doc.apply(span, text)
                self.emit({"t": self.now(), "type": "change", "uri": uri, "range": span, "text": text})
        elif method == "textDocument/didClose":
            uri = params["textDocument"]["uri"]
            self.docs.pop(uri, None)
            self.emit({"t": self.now(), "type": "close", "uri": uri})
        elif method == "textDocument/inlineCompletion" and "id" in message:
            self.completion_ids.add(message["id"])
            position = params["position"]
            self.emit({"t": self.now(), "type": "request", "uri": params["textDocument"]["uri"],
                       "line": position["line"], "character": position["character"], "id": message["id"]})
        elif method == CURSOR_METHOD:
            position = params["position"]
            self.emit({"t": self.now(), "type": "cursor", "uri": params["textDocument"]["uri"],
                       "line": position["line"], "character": position["character"]})
        elif method == "$/cancelRequest" and params.get("id") in self.completion_ids:
            self.emit({"t": self.now(), "type": "cancel", "id": params["id"]})

    def close(self) -> list[dict]:
        with self.lock:
            self.out.close()
            return add_truths(self.events)


def add_truths(events: list[dict]) -> list[dict]:
    """A `truth` before every request: the text after its position once every later edit is applied."""
    docs: dict[str, Document] = {}
    anchors: dict[str, list[list]] = {}   # uri -> [[request event index, offset]]
    truths: dict[int, str] = {}

    def settle(uri: str) -> None:
        for index, offset in anchors.pop(uri, []):
            truths[index] = truth_text(docs[uri].text, offset, len(docs[uri].text))

    for index, event in enumerate(events):
        kind, uri = event["type"], event.get("uri")
        if kind == "open":
            if uri in docs:
                settle(uri)
            docs[uri] = Document(event["text"])
        elif kind == "change" and uri in docs:
            doc = docs[uri]
            start, end = doc.offset(*event["range"][:2]), doc.offset(*event["range"][2:])
            delta = len(event["text"]) - (end - start)
            for anchor in anchors.get(uri, []):
                if anchor[1] >= end and anchor[1] > start:
                    anchor[1] += delta
                elif anchor[1] > start:  # its position was deleted: it moves to the edit
                    anchor[1] = start
            doc.apply(event["range"], event["text"])
        elif kind == "close" and uri in docs:
            settle(uri)  # what was typed after a request ends when the document closes
            del docs[uri]
        elif kind == "request" and uri in docs:
            anchors.setdefault(uri, []).append([index, docs[uri].offset(event["line"], event["character"])])
    for uri in list(anchors):
        settle(uri)

    result = []
    for index, event in enumerate(events):
        if index in truths:
            result.append({"t": event["t"], "type": "truth", "uri": event["uri"], "line": event["line"],
                           "character": event["character"], "text": truths[index]})
        result.append(event)
    return result


def pump_editor_to_server(editor: FrameReader, server: BinaryIO, recorder: Recorder) -> None:
    try:
        while True:
            raw, body = read_frame(editor)
            if not raw:
                break
            server.write(raw)
            server.flush()
            if body is not None:
                recorder.observe(body)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            server.close()
        except OSError:
            pass


def pump_server_to_editor(server_fd: int, editor_fd: int) -> None:
    try:
        while chunk := os.read(server_fd, 65536):
            while chunk:
                chunk = chunk[os.write(editor_fd, chunk):]
    except OSError:
        pass


def record(command: list[str], out_path: str, editor_in_fd: int | None = None, editor_out_fd: int | None = None,
           ) -> int:
    """Run `command` as the server, proxy this process's stdio to it, and write the trace. Returns its exit code."""
    if not command:
        raise SystemExit("codecue-replay record: give the server command after --")
    editor_in = FrameReader(sys.stdin.fileno() if editor_in_fd is None else editor_in_fd)
    editor_out_fd = sys.stdout.fileno() if editor_out_fd is None else editor_out_fd
    try:
        server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    except FileNotFoundError:
        raise SystemExit(f"codecue-replay record: server command not found: {command[0]!r}") from None
    recorder = Recorder(command, out_path)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    up = threading.Thread(target=pump_editor_to_server, args=(editor_in, server.stdin, recorder), daemon=True)
    down = threading.Thread(target=pump_server_to_editor, args=(server.stdout.fileno(), editor_out_fd), daemon=True)
    up.start()
    down.start()
    try:
        editor_gone = None
        while down.is_alive():  # until the server closes its stdout
            down.join(0.2)
            if not up.is_alive():
                editor_gone = editor_gone or time.monotonic()
                if time.monotonic() - editor_gone > 10 and server.poll() is None:
                    server.terminate()  # the editor is gone and the server does not exit on EOF
    except KeyboardInterrupt:
        server.terminate()
    finally:
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        write_trace(out_path, recorder.close())
    return server.returncode
