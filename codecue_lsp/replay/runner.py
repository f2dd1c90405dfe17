"""Drive a real server over stdio with a trace, at the trace's timing, and measure every request.

Editor behaviour modelled (VS Code's): a keystroke cancels the inline-completion request still in flight
(`$/cancelRequest`), then sends `didChange` (incremental), then a new request at the cursor. A recorded trace
(meta source "record") replays the editor's own cancels instead. With `as_fast_as_possible` there is no clock:
each request is awaited before the next event, nothing is cancelled, and "shown in time" is not measured.

While it runs, the server is sampled every `sample_every` requests (and once after the last): its resident memory
and the sizes `codecue.stats` reports under "resources", for the soak verdict (soak.py) and the HTML curve.
"""
from __future__ import annotations

import asyncio
import shlex
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import default_converter

from . import client as lsp
from .trace import (
    CURSOR_METHOD,
    Document,
    common_prefix_length,
    first_line,
    utf16_to_index,
)

lsp_converter = default_converter()
CANCELLED_CODES = {-32800, -32801, -32802}  # RequestCancelled, ContentModified, ServerCancelled


def default_server_command() -> list[str]:
    return [sys.executable, "-m", "codecue_lsp", "--stdio"]


@dataclass
class ServerConfig:
    label: str
    command: list[str]

    @classmethod
    def parse(cls, spec: str, base: list[str]) -> "ServerConfig":
        """`label=extra server args` appended to the base command, e.g. `draft=--drafter draft`."""
        label, sep, extra = spec.partition("=")
        if not sep or not label.strip():
            raise ValueError(f"--compare wants LABEL=SERVER_ARGS, got {spec!r}")
        return cls(label.strip(), base + shlex.split(extra))


@dataclass
class RequestRecord:
    index: int
    uri: str
    line: int
    character: int
    t_sent: float
    truth: str | None = None
    t_response: float | None = None
    t_cancel: float | None = None
    t_next_keystroke: float | None = None
    outcome: str = "pending"       # answered | empty | cancelled | error | timeout
    error: str | None = None
    suggestion: str | None = None
    shown_in_time: bool | None = None
    scored: bool = False           # the truth's first line has code to match
    exact_match: bool | None = None
    chars_saved: int = 0
    latency_ms: float | None = None
    cancel_latency_ms: float | None = None
    confidence: float | None = None  # the server's for the suggestion (item codecue.confidence); None: not given


@dataclass
class RunResult:
    label: str
    command: list[str]
    speed: float | None            # None: as fast as possible
    records: list[RequestRecord]
    server_stats: dict | None = None
    peak_rss_mb: float | None = None
    wall_s: float = 0.0
    server_error: str | None = None
    keystrokes: int = 0
    samples: list[dict] = field(default_factory=list)  # {"request", "t", "rss_mb", "resources"}
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def confidence_from(result) -> float | None:
    """The first item's `codecue.confidence` in a response kept as JSON (client.RawInlineCompletionResponse)."""
    items = result.get("items") if isinstance(result, dict) else result
    first = items[0] if isinstance(items, list) and items else None
    extra = first.get("codecue") if isinstance(first, dict) else None
    value = extra.get("confidence") if isinstance(extra, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def structured(result):
    """A response kept as JSON, as lsprotocol's types (what the server's extra fields are dropped from)."""
    if isinstance(result, dict):
        return lsp_converter.structure(result, types.InlineCompletionList)
    if isinstance(result, list):
        return [lsp_converter.structure(item, types.InlineCompletionItem) if isinstance(item, dict) else item
                for item in result]
    return result


def suggestion_from(result, line_text: str, character: int) -> str:
    """Text a VS Code-like editor would show after the cursor for the first inline-completion item."""
    result = structured(result)
    items = result.items if isinstance(result, types.InlineCompletionList) else (result or [])
    if not items:
        return ""
    item = items[0]
    text = item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value
    if item.range is not None and item.range.start.line == item.range.end.line:
        start = utf16_to_index(line_text, item.range.start.character)
        cursor = utf16_to_index(line_text, character)
        already = line_text[start:cursor]
        if not text.startswith(already):
            return ""  # the editor filters out items that do not extend what was typed
        text = text[len(already):]
    return text


def finish_record(record: RequestRecord, measure_timing: bool) -> None:
    """Outcome, timeliness and accuracy once the request is over."""
    if record.outcome == "pending":
        record.outcome = "timeout"
    if record.t_cancel is not None and record.t_response is not None and record.t_response >= record.t_cancel:
        record.cancel_latency_ms = (record.t_response - record.t_cancel) * 1000.0
        if record.outcome in ("answered", "empty"):
            record.outcome = "cancelled"  # answered after the editor gave up on it: never shown
    if record.outcome in ("answered", "empty"):
        record.latency_ms = (record.t_response - record.t_sent) * 1000.0
    if measure_timing:
        record.shown_in_time = record.outcome == "answered" and (
            record.t_next_keystroke is None or record.t_response < record.t_next_keystroke)
    truth_line = first_line(record.truth or "")
    record.scored = bool(truth_line.strip())
    if record.outcome in ("answered", "empty") and record.truth is not None:
        suggestion = record.suggestion or ""
        record.exact_match = record.scored and first_line(suggestion).rstrip() == truth_line.rstrip()
        record.chars_saved = common_prefix_length(suggestion, record.truth)


class Replay:
    # The trace's clock. Tests substitute a virtual one (time that moves only when the replay sleeps), so what
    # they check does not depend on how busy the machine is.
    clock = staticmethod(time.perf_counter)
    sleep = staticmethod(asyncio.sleep)

    def __init__(self, events: list[dict], config: ServerConfig, speed: float | None, tail_timeout: float,
                 progress=None, load_timeout: float = 300.0, sample_every: int = 50, before_play=None):
        self.events, self.config, self.speed, self.load_timeout = events, config, speed, load_timeout
        # An async callable awaited once the server is ready, before the first event (clients.py: a start line).
        self.before_play = before_play
        self.sample_every = sample_every
        self.samples: list[dict] = []
        self.tail_timeout, self.progress = tail_timeout, progress
        self.recorded_cancels = any(e["type"] == "meta" and e.get("source") == "record" for e in events)
        self.docs: dict[str, Document] = {}
        self.versions: dict[str, int] = {}
        self.truths: dict[tuple, str] = {}
        self.records: list[RequestRecord] = []
        self.by_recorded_id: dict = {}
        self.futures: dict[int, asyncio.Future] = {}
        self.in_flight: RequestRecord | None = None
        self.awaiting_keystroke: list[RequestRecord] = []
        self.t0 = 0.0

    def now(self) -> float:
        return self.clock() - self.t0

    async def run(self) -> RunResult:
        result = RunResult(self.config.label, self.config.command, self.speed, self.records, samples=self.samples)
        with tempfile.TemporaryDirectory(prefix="codecue-replay-") as tmp:
            stderr_path = Path(tmp) / "server.stderr"
            self.client, self.process = await lsp.start_server(self.config.command, stderr_path)
            try:
                init = await lsp.initialize(self.client, timeout=120.0)
                self.incremental = lsp.incremental_sync(init)
                ready = await lsp.wait_until_ready(self.client, timeout=self.load_timeout)
                if isinstance(ready, dict) and ready.get("load_error"):
                    raise RuntimeError(f"the server could not load its models: {ready['load_error']}")
                if self.before_play is not None:
                    await self.before_play()
                started = time.perf_counter()
                await self.play()
                await self.drain()
                result.wall_s = time.perf_counter() - started
                result.extra["clock_s"] = self.now()  # the same span on the replay's clock (virtual in tests)
                if self.sample_every > 0:
                    await self.sample()
                result.server_stats = await lsp.server_stats(self.client)
                result.peak_rss_mb = lsp.peak_rss_mb(self.process.pid)
            except Exception as exc:
                result.server_error = f"{type(exc).__name__}: {exc}"
            finally:
                if self.process.returncode is not None and result.server_error is None:
                    result.server_error = f"server exited with code {self.process.returncode}"
                await lsp.stop_server(self.client, self.process)
                if result.server_error:
                    tail = stderr_path.read_text(errors="replace").strip().splitlines()[-15:]
                    result.extra["server_stderr_tail"] = tail
        measure_timing = self.speed is not None
        for record in self.records:
            finish_record(record, measure_timing)
        result.keystrokes = sum(1 for e in self.events if e["type"] == "change")
        return result

    async def play(self) -> None:
        self.t0 = self.clock()
        start = min((e["t"] for e in self.events if e["type"] != "meta"), default=0.0)  # a recording starts late
        for event in self.events:
            if self.process.returncode is not None:
                raise RuntimeError(f"server exited with code {self.process.returncode} during the replay")
            if self.speed is not None:
                delay = (event["t"] - start) / self.speed - self.now()
                if delay > 0:
                    await self.sleep(delay)
            handler = getattr(self, "on_" + event["type"])
            await handler(event)
            if self.progress:
                self.progress()

    def mark_keystroke(self) -> None:
        now = self.now()
        for record in self.awaiting_keystroke:
            record.t_next_keystroke = now
        self.awaiting_keystroke = []

    async def on_meta(self, event: dict) -> None:
        pass

    async def on_open(self, event: dict) -> None:
        self.mark_keystroke()
        uri = event["uri"]
        self.docs[uri], self.versions[uri] = Document(event["text"]), 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri=uri, language_id=event.get("language", "plaintext"), version=1, text=event["text"])))

    async def on_change(self, event: dict) -> None:
        self.mark_keystroke()
        if not self.recorded_cancels:
            self.cancel(self.in_flight)
        uri = event["uri"]
        doc = self.docs[uri]
        doc.apply(event.get("range"), event["text"])
        self.versions[uri] += 1
        if self.incremental and event.get("range") is not None:
            l0, c0, l1, c1 = event["range"]
            change = types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(l0, c0), types.Position(l1, c1)), text=event["text"])
        else:
            change = types.TextDocumentContentChangeWholeDocument(text=doc.text)
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]), [change]))

    async def on_close(self, event: dict) -> None:
        self.mark_keystroke()
        uri = event["uri"]
        self.docs.pop(uri, None)
        self.versions.pop(uri, None)
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))

    async def on_cursor(self, event: dict) -> None:
        self.mark_keystroke()  # a move hides a suggestion shown, as a keystroke does
        uri = event["uri"]
        self.client.protocol.notify(CURSOR_METHOD, {
            "textDocument": {"uri": uri, "version": self.versions.get(uri)},
            "position": {"line": event["line"], "character": event["character"]}})

    async def on_truth(self, event: dict) -> None:
        self.truths[(event["uri"], event["line"], event["character"])] = event["text"]

    async def on_cancel(self, event: dict) -> None:
        if self.recorded_cancels:
            self.cancel(self.by_recorded_id.get(event.get("id")))

    async def on_request(self, event: dict) -> None:
        self.mark_keystroke()
        if not self.recorded_cancels:
            self.cancel(self.in_flight)
        uri, line, character = event["uri"], event["line"], event["character"]
        record = RequestRecord(len(self.records), uri, line, character, self.now(),
                               truth=self.truths.get((uri, line, character)))
        line_text = self.docs[uri].text.split("\n")[line] if uri in self.docs else ""
        params = types.InlineCompletionParams(
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, character))
        future = self.client.protocol.send_request("textDocument/inlineCompletion", params, msg_id=record.index)
        future.add_done_callback(lambda f: self.on_response(record, f, line_text))
        self.records.append(record)
        self.futures[record.index] = asyncio.wrap_future(future)
        self.by_recorded_id[event.get("id", record.index)] = record
        self.in_flight = record
        self.awaiting_keystroke.append(record)
        if self.speed is None:
            try:
                await asyncio.wait_for(asyncio.shield(self.futures[record.index]), self.tail_timeout)
            except Exception:
                pass  # the outcome is in the record
        if self.sample_every > 0 and record.index % self.sample_every == 0:
            await self.sample()

    async def sample(self) -> None:
        """Server RSS and resource sizes now; without a clock this is between requests, with none running."""
        stats = await lsp.server_stats(self.client)
        resources = stats.get("resources") if isinstance(stats, dict) else None
        self.samples.append({"request": len(self.records), "t": round(self.now(), 3),
                             "rss_mb": lsp.rss_mb(self.process.pid), "resources": dict(resources or {})})

    def on_response(self, record: RequestRecord, future, line_text: str) -> None:
        if future.cancelled():  # we gave up waiting at the end: stays a timeout
            return
        record.t_response = self.now()
        if self.in_flight is record:
            self.in_flight = None
        exc = future.exception()
        if exc is None:
            record.suggestion = suggestion_from(future.result(), line_text, record.character)
            record.confidence = confidence_from(future.result())
            record.outcome = "answered" if record.suggestion else "empty"
        elif isinstance(exc, JsonRpcException) and exc.code in CANCELLED_CODES:
            record.outcome = "cancelled"
        else:
            record.outcome, record.error = "error", f"{type(exc).__name__}: {exc}"

    def cancel(self, record: RequestRecord | None) -> None:
        if record is None or record.t_response is not None or record.t_cancel is not None:
            return
        record.t_cancel = self.now()
        self.client.protocol.notify("$/cancelRequest", types.CancelParams(id=record.index))
        if self.in_flight is record:
            self.in_flight = None

    async def drain(self) -> None:
        pending = [f for f in self.futures.values() if not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=self.tail_timeout)
        for future in self.futures.values():
            if not future.done():
                future.cancel()
            elif not future.cancelled():
                future.exception()  # retrieved: no "exception never retrieved" noise


def run_trace(events: list[dict], config: ServerConfig, speed: float | None = 1.0, tail_timeout: float = 30.0,
              progress=None, sample_every: int = 50) -> RunResult:
    return asyncio.run(Replay(events, config, speed, tail_timeout, progress, sample_every=sample_every).run())
