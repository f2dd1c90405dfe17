"""Suggestion ids (each suggestion counted once), accepted and retained characters (retention.py), and the
confidence of a suggestion's first line (confidence.py)."""
from __future__ import annotations

import math

import pytest
from server_harness import tiny_in_process_server

from codecue_lsp.confidence import first_line_confidence, from_logprobs
from codecue_lsp.retention import MAX_CHECKED_CHARS, RETENTION_DELAY_S, RetentionChecks, retained_chars
from codecue_lsp.telemetry import Telemetry


def test_one_shown_and_one_accepted_per_id_with_every_partial_accepts_characters():
    tel = Telemetry()
    tel.on_shown({"id": "s1", "length": 12})
    tel.on_shown({"id": "s1", "length": 12})  # shown again (cycled back to): the same suggestion
    tel.on_accepted({"id": "s1", "acceptedLength": 4, "text": "retu"})
    tel.on_accepted({"id": "s1", "text": "rn a"})  # a second partial accept: characters, not a suggestion
    tel.on_shown({"id": "s2", "length": 5})
    tel.on_rejected({"id": "s2"})
    tel.on_rejected({"id": "s2"})
    snap = tel.snapshot()
    assert (snap["shown"], snap["accepted"], snap["rejected"]) == (2, 1, 1)
    assert snap["accepted_chars"] == 8 and snap["shown_chars"] == 17
    assert snap["accepted"] <= snap["shown"]


def test_notifications_without_an_id_count_one_each_as_before():
    tel = Telemetry()
    for _ in range(2):
        tel.on_shown({"length": 3})
        tel.on_accepted({"length": 3, "acceptedLength": 2})
    snap = tel.snapshot()
    assert (snap["shown"], snap["accepted"], snap["accepted_chars"]) == (2, 2, 4)


# (document 30 s later, accepted text, line it went in at, retained characters)
RETAINED = [
    ("def f():\n    return a + b\n", "return a + b", 1, 12),              # still there: all of it
    ("x = 1\n" * 3 + "    return a + b\n", "return a + b", 0, 12),        # a few lines below: near enough
    ("x = 1\n" * 9 + "    return a + b\n", "return a + b", 0, 0),         # ten lines away: not the same text
    ("def f():\n    return a - b\n", "return a + b", 1, 9),               # edited: the longest unedited run
    ("def f():\n    pass\n", "return a + b", 1, 0),                       # deleted
    ("a = [\n    1,\n    2,\n]\r\n", "[\n    1,\n    2,\n]", 0, 17),      # several lines, CRLF in the document
    ("def f():\n    \n", "    ", 1, 0),                                   # whitespace counts nothing
]


@pytest.mark.parametrize("document,accepted,line,expected", RETAINED)
def test_retained_chars(document, accepted, line, expected):
    assert retained_chars(document, accepted, line) == expected


class Later:
    """The injected timer: records (delay, fn, args); the test runs them when it chooses."""

    def __init__(self) -> None:
        self.calls: list = []

    def __call__(self, delay, fn, *args) -> None:
        self.calls.append((delay, fn, args))

    def run_all(self) -> None:
        calls, self.calls = self.calls, []
        for _, fn, args in calls:
            fn(*args)


def test_retention_checks_run_after_the_delay_against_the_text_then():
    tel, later, documents = Telemetry(), Later(), {"file:///a.py": "x = compute(1)\n"}
    checks = RetentionChecks(tel, documents.get, later=later)
    checks.accepted({"uri": "file:///a.py", "text": "compute(1)", "position": {"line": 0, "character": 4}})
    checks.accepted({"uri": "file:///gone.py", "text": "abc", "position": {"line": 0, "character": 0}})
    checks.accepted({"uri": "file:///a.py", "text": "compute(1)"})  # an old client: no position, no check
    checks.accepted({"uri": "file:///a.py", "text": "x", "position": {"line": -1, "character": 0}})
    too_long = "y" * (MAX_CHECKED_CHARS + 1)  # no suggestion is this long: not compared on the event loop
    checks.accepted({"uri": "file:///a.py", "text": too_long, "position": {"line": 0, "character": 0}})
    assert [call[0] for call in later.calls] == [RETENTION_DELAY_S] * 2
    assert tel.snapshot()["retention_pending"] == 2
    documents["file:///a.py"] = "x = compute(2)\n"  # edited within the 30 s
    later.run_all()
    snap = tel.snapshot()
    assert (snap["retained_chars"], snap["retention_checked_chars"], snap["retention_pending"]) == (8, 10, 0)


@pytest.mark.asyncio
async def test_the_server_counts_ids_and_checks_retention_of_accepted_text():
    async with tiny_in_process_server({"debounce_ms": 0}) as client:
        later = Later()
        client.server.retention.later = later
        uri = "file:///r.py"
        client.open(uri, "def f(a, b):\n    return a + b\n")
        client.notify("codecue/didShowCompletion", {"uri": uri, "length": 12, "id": "k1"})
        client.notify("codecue/didAcceptCompletion", {"uri": uri, "length": 12, "acceptedLength": 6, "id": "k1",
                                                      "text": "return", "position": {"line": 1, "character": 4}})
        client.notify("codecue/didAcceptCompletion", {"uri": uri, "length": 12, "acceptedLength": 6, "id": "k1",
                                                      "text": " a * c", "position": {"line": 1, "character": 10}})
        client.change(uri, 2, "def f(a, b):\n    return a * b  # product\n")
        later.run_all()
        stats = await client.stats()
    assert (stats["shown"], stats["accepted"], stats["accepted_chars"]) == (1, 1, 12)
    assert stats["retained_chars"] == len("return") + len(" a * ")  # the first all, the second in part
    assert stats["retention_checked_chars"] == 12


# (token texts and probabilities, the first line's probability)
CONFIDENCE = [
    ([("return", 0.5), (" a", 0.8), ("\n", 0.5), ("x", 0.1)], 0.5 * 0.8 * 0.5),  # stops after the line's end
    ([("\n", 0.9), ("    ", 1.0), ("pass", 0.5), ("\n", 1.0)], 0.9 * 0.5),       # a block: its first line with code
    ([("foo", 0.25), ("(", 0.5)], 0.125),                                          # no line end: all of it
    ([("ab\ncd", 0.5), ("e", 0.1)], 0.5),                                          # a token across the line end
    ([], None),
    ([("x", 0.0)], 0.0),
]


@pytest.mark.parametrize("tokens,expected", CONFIDENCE)
def test_first_line_confidence(tokens, expected):
    got = first_line_confidence(tokens)
    assert got == (None if expected is None else pytest.approx(expected))


def test_confidence_from_logprobs():
    assert from_logprobs(["a", "\n"], [math.log(0.5), math.log(0.5)]) == pytest.approx(0.25)
    assert from_logprobs(["a", "b"], [math.log(0.5), None]) is None
    assert from_logprobs([], []) is None
