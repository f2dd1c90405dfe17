"""Trace events, reading and writing them, and a document model that applies LSP changes (UTF-16 positions)."""
from __future__ import annotations

import json
from pathlib import Path

# cursor: the editor said the cursor rests there after a move that was not typing (codecue/didMoveCursor)
CURSOR_METHOD = "codecue/didMoveCursor"  # the notification a cursor event stands for (codecue_lsp/warmup.py)
EVENT_TYPES = {"meta", "open", "change", "close", "request", "truth", "cancel", "cursor"}


class TraceError(ValueError):
    pass


def read_trace(path: str | Path) -> list[dict]:
    events = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(event, dict) or event.get("type") not in EVENT_TYPES or "t" not in event:
                raise TraceError(f"{path}:{number}: not a trace event (needs 't' and a type in {sorted(EVENT_TYPES)})")
            events.append(event)
    if not any(e["type"] == "request" for e in events):
        raise TraceError(f"{path}: the trace has no request events")
    return events


def write_trace(path: str | Path, events: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for event in events:
            f.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def utf16_to_index(line_text: str, character: int) -> int:
    """Python index of the UTF-16 column `character` in `line_text` (clamped to the line's end, as LSP says)."""
    units = 0
    for index, ch in enumerate(line_text):
        if units >= character:
            return index
        units += 2 if ord(ch) > 0xFFFF else 1
    return len(line_text)


class Document:
    """Text of one open document; positions are (line, UTF-16 character) as in LSP."""

    def __init__(self, text: str):
        self.text = text

    def offset(self, line: int, character: int) -> int:
        lines = self.text.split("\n")
        if line >= len(lines):
            return len(self.text)
        start = sum(len(l) + 1 for l in lines[:line])
        return start + utf16_to_index(lines[line], character)

    def position(self, offset: int) -> tuple[int, int]:
        before = self.text[:offset]
        line = before.count("\n")
        return line, utf16_len(before[before.rfind("\n") + 1:])

    def end_position(self) -> tuple[int, int]:
        return self.position(len(self.text))

    def apply(self, change_range: list[int] | None, new_text: str) -> None:
        """Apply one LSP content change; `change_range` None replaces the whole text."""
        if change_range is None:
            self.text = new_text
            return
        line0, char0, line1, char1 = change_range
        start, end = self.offset(line0, char0), self.offset(line1, char1)
        if end < start:
            raise TraceError(f"change range {change_range} ends before it starts")
        self.text = self.text[:start] + new_text + self.text[end:]


def replay_documents(events: list[dict]) -> dict[str, str]:
    """Final text of every document still open after applying all open/change/close events in order."""
    docs: dict[str, Document] = {}
    for event in events:
        if event["type"] == "open":
            docs[event["uri"]] = Document(event["text"])
        elif event["type"] == "change":
            docs[event["uri"]].apply(event.get("range"), event["text"])
        elif event["type"] == "close":
            docs.pop(event["uri"], None)
    return {uri: doc.text for uri, doc in docs.items()}


def first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def common_prefix_length(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
