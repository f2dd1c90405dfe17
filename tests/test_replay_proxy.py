"""`codecue-replay record`: forwards bytes unchanged, records the editor's traffic, and the recording replays
to the same requests on the same documents."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types

from codecue_lsp.replay import client as lsp
from codecue_lsp.replay.proxy import Recorder, add_truths, minimal_change
from codecue_lsp.replay.runner import ServerConfig, run_trace
from codecue_lsp.replay.trace import (
    CURSOR_METHOD,
    Document,
    read_trace,
    replay_documents,
)

REPO = Path(__file__).resolve().parents[1]
URI = "file:///work/session.py"


@pytest.fixture(autouse=True)
def importable_package(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))


def frame(body: bytes, extra_header: bytes = b"") -> bytes:
    return b"Content-Length: " + str(len(body)).encode() + b"\r\n" + extra_header + b"\r\n" + body


def test_bytes_pass_unchanged_both_ways(tmp_path):
    """A scripted editor writes odd but valid frames in ragged chunks; a scripted server answers with fixed bytes."""
    answer = frame(b'{"jsonrpc":"2.0","id":1,"result":{"items":[{"insertText":"h\xc3\xa9"}]}}') + frame(b"{}")
    (tmp_path / "answer.bin").write_bytes(answer)
    server = ("import shutil, sys; sys.stdout.buffer.write(open('answer.bin', 'rb').read()); sys.stdout.flush(); "
              "shutil.copyfileobj(sys.stdin.buffer, open('got.bin', 'wb'))")
    sent = (frame(json.dumps({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": URI, "languageId": "python", "version": 1, "text": "x = 'é😀'\n"}}}).encode())
            + frame(b'{"jsonrpc": "2.0",  "id": 1, "method": "textDocument/inlineCompletion", "params": '
                    b'{"textDocument": {"uri": "' + URI.encode() + b'"}, "position": {"line": 1, "character": 0},'
                    b' "context": {"triggerKind": 2}}}', b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n")
            + frame(b'{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":1}}'))
    proxy = subprocess.Popen([sys.executable, "-m", "codecue_lsp.replay", "record", "--out", "trace.jsonl", "--",
                              sys.executable, "-c", server], cwd=tmp_path, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    for start in range(0, len(sent), 37):  # frames split at arbitrary points
        proxy.stdin.write(sent[start:start + 37])
        proxy.stdin.flush()
    proxy.stdin.close()
    received = proxy.stdout.read()
    assert proxy.wait(timeout=30) == 0
    assert received == answer
    assert (tmp_path / "got.bin").read_bytes() == sent
    events = read_trace(tmp_path / "trace.jsonl")
    assert [e["type"] for e in events] == ["meta", "open", "truth", "request", "cancel"]
    assert events[1]["text"] == "x = 'é😀'\n" and events[3]["id"] == 1 and events[4]["id"] == 1


async def scripted_session(proxy_command: list[str], stderr: Path) -> str:
    """An editor session: open, type with incremental and full-text changes, ask, cancel one request."""
    client, process = await lsp.start_server(proxy_command, stderr)
    await lsp.initialize(client, timeout=60)

    def change(version, text, rng=None):
        content = types.TextDocumentContentChangePartial(range=rng, text=text) if rng else \
            types.TextDocumentContentChangeWholeDocument(text=text)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=URI, version=version), [content]))

    def ask(line, character, msg_id):
        params = types.InlineCompletionParams(
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
            text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line, character))
        return asyncio.wrap_future(client.protocol.send_request("textDocument/inlineCompletion", params,
                                                                msg_id=msg_id))

    def at(line, character):
        return types.Range(types.Position(line, character), types.Position(line, character))

    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=URI, language_id="python", version=1, text="def f():\n    ")))
    client.protocol.notify(CURSOR_METHOD, {"textDocument": {"uri": URI, "version": 1},
                                           "position": {"line": 1, "character": 4}})  # it rests there
    change(2, "re", at(1, 4))
    first = ask(1, 6, "a")
    client.protocol.notify("$/cancelRequest", types.CancelParams(id="a"))  # a keystroke came
    change(3, "t", at(1, 6))
    await ask(1, 7, "b")
    change(4, "def f():\n    return 1\n")                                 # a full-text change
    await ask(2, 0, "c")
    with pytest.raises(Exception):
        await first
    await lsp.stop_server(client, process)
    return process.returncode


def requests_seen(log: Path) -> tuple[list, int]:
    """(uri, position, document text) for every inlineCompletion and resting cursor the server received, and how
    many cancels."""
    docs, seen, cancels = {}, [], 0
    for line in log.read_text().splitlines():
        message = json.loads(line)
        method, params = message.get("method"), message.get("params") or {}
        if method == "textDocument/didOpen":
            docs[params["textDocument"]["uri"]] = Document(params["textDocument"]["text"])
        elif method == "textDocument/didChange":
            for c in params["contentChanges"]:
                r = c.get("range")
                span = [r["start"]["line"], r["start"]["character"], r["end"]["line"], r["end"]["character"]] \
                    if r else None
                docs[params["textDocument"]["uri"]].apply(span, c["text"])
        elif method == "textDocument/inlineCompletion":
            uri = params["textDocument"]["uri"]
            seen.append((uri, params["position"]["line"], params["position"]["character"], docs[uri].text))
        elif method == CURSOR_METHOD:
            uri = params["textDocument"]["uri"]
            seen.append(("cursor", uri, params["position"]["line"], params["position"]["character"],
                         params["textDocument"]["version"]))
        elif method == "$/cancelRequest":
            cancels += 1
    return seen, cancels


def test_recorded_session_replays_to_the_same_requests(tmp_path):
    trace, live_log, replay_log = tmp_path / "trace.jsonl", tmp_path / "live.jsonl", tmp_path / "replay.jsonl"
    server = [sys.executable, "-m", "codecue_lsp.replay.fake_server", "--delay-ms", "300", "--text", "urn 1"]
    rc = asyncio.run(scripted_session(
        [sys.executable, "-m", "codecue_lsp.replay", "record", "--out", str(trace), "--", *server, "--log",
         str(live_log)], tmp_path / "proxy.stderr"))
    assert rc == 0

    events = read_trace(trace)
    assert events[0]["type"] == "meta" and events[0]["source"] == "record"
    assert [e["type"] for e in events if e["type"] != "truth"][1:] == \
        ["open", "cursor", "change", "request", "cancel", "change", "request", "change", "request"]
    assert replay_documents(events)[URI] == "def f():\n    return 1\n"
    full_change = [e for e in events if e["type"] == "change"][-1]
    assert full_change["range"] == [1, 7, 1, 7] and full_change["text"] == "urn 1\n"  # the edit it made
    truths = [e["text"] for e in events if e["type"] == "truth"]
    assert truths == ["turn 1\n", "urn 1\n", ""]  # what was typed after each request

    result = run_trace(events, ServerConfig("replay", [*server, "--log", str(replay_log)]), speed=1.0)
    live, replayed = requests_seen(live_log), requests_seen(replay_log)
    assert replayed == live
    assert live[1] == 1 and live[0][0] == ("cursor", URI, 1, 4, 1)
    assert [r.outcome for r in result.records] == ["cancelled", "answered", "answered"]
    assert result.records[1].exact_match and result.records[1].chars_saved == len("urn 1")


@pytest.mark.parametrize("old, new, expected_range, expected_text", [
    ("abc", "abXc", [0, 2, 0, 2], "X"),
    ("abc", "ac", [0, 1, 0, 2], ""),
    ("a\nb\n", "a\nb\nc\n", [2, 0, 2, 0], "c\n"),
    ("aaa", "aaaa", [0, 3, 0, 3], "a"),           # repeated text: the overlap is not counted twice
    ("x😀y", "x😀zy", [0, 3, 0, 3], "z"),          # UTF-16 columns
])
def test_full_text_changes_become_minimal_edits(old, new, expected_range, expected_text):
    doc = Document(old)
    span, text = minimal_change(old, new, doc)
    assert (span, text) == (expected_range, expected_text)
    doc.apply(span, text)
    assert doc.text == new


def test_truths_follow_later_edits():
    events = [
        {"t": 0, "type": "open", "uri": URI, "text": "x = \n"},
        {"t": 1, "type": "request", "uri": URI, "line": 0, "character": 4},
        {"t": 2, "type": "change", "uri": URI, "range": [0, 0, 0, 0], "text": "# c\n"},   # above: shifts it
        {"t": 3, "type": "change", "uri": URI, "range": [1, 4, 1, 4], "text": "foo(1)"},  # typed at it
        {"t": 4, "type": "request", "uri": URI, "line": 1, "character": 8},
        {"t": 5, "type": "change", "uri": URI, "range": [1, 8, 1, 9], "text": "2"},       # replaced after it
    ]
    truths = [e["text"] for e in add_truths(events) if e["type"] == "truth"]
    assert truths == ["foo(2)\n", "2)\n"]


def test_a_closed_document_is_recorded_and_settles_its_truths(tmp_path):
    recorder = Recorder(["server"], str(tmp_path / "trace.jsonl"))
    for method, params in [
        ("textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python", "version": 1,
                                                   "text": "x = 1\n"}}),
        ("textDocument/didClose", {"textDocument": {"uri": URI}}),
        ("textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python", "version": 1,
                                                   "text": "y = 2\n"}}),
    ]:
        recorder.observe(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode())
    events = recorder.close()
    assert [e["type"] for e in events] == ["meta", "open", "close", "open"]
    assert events[2]["uri"] == URI and replay_documents(events) == {URI: "y = 2\n"}
    with_truths = add_truths([
        {"t": 0, "type": "open", "uri": URI, "text": "x = \n"},
        {"t": 1, "type": "request", "uri": URI, "line": 0, "character": 4},
        {"t": 2, "type": "change", "uri": URI, "range": [0, 4, 0, 4], "text": "1"},
        {"t": 3, "type": "close", "uri": URI},
        {"t": 4, "type": "change", "uri": URI, "range": [0, 4, 0, 4], "text": "2"},  # not this document any more
    ])
    assert [e["text"] for e in with_truths if e["type"] == "truth"] == ["1\n"]
