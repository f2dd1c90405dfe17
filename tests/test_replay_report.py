"""The runner's and the report's numbers, checked against a fake server with a known delay and known answers.

The timed replays run on a virtual clock (VirtualClockReplay), so their numbers are exact and do not depend on
how loaded the machine is; the real clock is checked with lower bounds only (an answer never comes before the
server's delay)."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from pathlib import Path

import pytest
from lsprotocol import types

from codecue_lsp.replay.__main__ import main as replay_main
from codecue_lsp.replay.html import render
from codecue_lsp.replay.report import (
    comparison_table,
    percentile,
    summarize,
    summarize_all,
)
from codecue_lsp.replay.runner import (
    Replay,
    RequestRecord,
    RunResult,
    ServerConfig,
    finish_record,
    run_trace,
    suggestion_from,
)
from codecue_lsp.replay.trace import write_trace

URI = "file:///replay/known.py"
DELAY_MS = 100
# What the fake server really waits before answering in the virtual-clock tests: far longer than the replay takes
# to cancel a request the trace cancels (it does not wait for anything in between), however busy the machine.
HOLD_MS = 1000
HANG_GUARD_S = 60.0  # only for a server that never answers


@pytest.fixture(autouse=True)
def importable_package(monkeypatch):
    """The servers started here import codecue_lsp from this checkout."""
    repo = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p))


def fake_server(*args: str) -> list[str]:
    return [sys.executable, "-m", "codecue_lsp.replay.fake_server", *args]


class VirtualClockReplay(Replay):
    """The replay on a virtual clock: time moves only when the replay sleeps until the trace's next event, and
    the server answers a request exactly `delay_s` after it was sent (a cancelled one at once). Before the clock
    passes the moment an answer is due, the replay waits for that answer to arrive, so keystrokes and answers
    come in the trace's order, at the trace's times."""

    def __init__(self, *args, delay_s: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.delay_s, self.virtual = delay_s, 0.0

    def clock(self) -> float:
        return self.virtual

    async def sleep(self, seconds: float) -> None:
        wake = self.virtual + seconds
        for record in self.records:
            future = self.futures[record.index]
            due = self.virtual if record.t_cancel is not None else record.t_sent + self.delay_s
            if not future.done() and due <= wake:
                done, _ = await asyncio.wait([future], timeout=HANG_GUARD_S)  # its outcome goes to the record
                if not done:
                    raise TimeoutError(f"no answer to request {record.index} within {HANG_GUARD_S} s")
        self.virtual = max(self.virtual, wake)

    def on_response(self, record, future, line_text) -> None:
        if not future.cancelled() and future.exception() is None:
            self.virtual = max(self.virtual, record.t_sent + self.delay_s)
        super().on_response(record, future, line_text)


def replay_on_virtual_clock(events: list[dict], delay_ms: float, speed: float, *server_args: str) -> RunResult:
    config = ServerConfig("fake", fake_server("--delay-ms", str(HOLD_MS), *server_args))
    return asyncio.run(VirtualClockReplay(events, config, speed, HANG_GUARD_S, delay_s=delay_ms / 1000).run())


def known_trace() -> list[dict]:
    """Four requests: the 2nd is superseded by a keystroke 50 ms later (< the 100 ms delay), the rest have time."""
    events = [{"t": 0.0, "type": "open", "uri": URI, "language": "python", "text": ""}]
    keystrokes = [(0.0, None), (0.4, "a"), (0.45, "b"), (0.9, "c")]
    for character, (t, key) in enumerate(keystrokes):
        if key:
            events.append({"t": t, "type": "change", "uri": URI, "range": [0, character - 1, 0, character - 1],
                           "text": key})
        position = {"uri": URI, "line": 0, "character": character}
        events.append({"t": t, "type": "truth", **position, "text": "abc = 1"[character:] + "\nprint(abc)"})
        events.append({"t": t, "type": "request", **position})
    return events


@pytest.fixture
def oracle(tmp_path):
    path = tmp_path / "known.py"
    path.write_text("abc = 1\nprint(abc)\n")
    return str(path)


def test_known_delays_give_known_numbers(oracle):
    result = replay_on_virtual_clock(known_trace(), DELAY_MS, 1.0, "--oracle", oracle)
    assert result.server_error is None
    outcomes = [r.outcome for r in result.records]
    assert outcomes == ["answered", "cancelled", "answered", "answered"]
    for record in (result.records[0], result.records[2], result.records[3]):
        assert record.latency_ms == pytest.approx(DELAY_MS)
        assert record.shown_in_time and record.exact_match
    cancelled = result.records[1]
    assert (cancelled.t_sent, cancelled.t_cancel) == (pytest.approx(0.4), pytest.approx(0.45))
    # The server's own answer to the cancel (-32800, no text), not a late result relabelled.
    assert cancelled.cancel_latency_ms is not None and cancelled.error is None
    assert [r.suggestion for r in result.records] == ["abc = 1", None, "c = 1", " = 1"]
    assert [r.chars_saved for r in result.records] == [7, 0, 5, 4]

    summary = summarize(result)
    assert summary["requests"] == 4 and summary["answered"] == 3 and summary["cancelled"] == 1
    assert summary["cancels_sent"] == 1 and summary["error"] == summary["timeout"] == 0
    assert summary["shown_in_time"] == 0.75
    assert summary["line_exact_match"] == 1.0 and summary["line_exact_match_shown"] == 0.75
    assert summary["accepted"] == 3 and summary["chars_saved_per_accepted"] == pytest.approx(16 / 3)
    assert [summary["latency_ms"]["p50"], summary["latency_ms"]["p99"]] == pytest.approx([DELAY_MS, DELAY_MS])
    assert summary["server_stats"] == {"requests": 4, "completed": 3, "cancelled": 1}
    assert summary["peak_rss_mb"] > 10


def test_slow_server_is_never_in_time_and_wrong_text_never_matches():
    result = replay_on_virtual_clock(known_trace(), 500, 1.0, "--text", "xyz = 2")
    summary = summarize(result)
    # Every keystroke comes before the 500 ms answer: all but the last request are cancelled.
    assert [r.outcome for r in result.records] == ["cancelled"] * 3 + ["answered"]
    assert summary["cancels_sent"] == 3 and summary["shown_in_time"] == 0.25
    assert summary["line_exact_match"] == 0.0 and summary["accepted"] == 0
    assert summary["chars_saved_per_accepted"] is None
    assert summary["latency_ms"]["p50"] == pytest.approx(500)
    assert summary["server_stats"] == {"requests": 4, "completed": 1, "cancelled": 3}


def test_speed_scales_the_clock(oracle):
    # At 2x the 2nd request gets 25 ms before the next keystroke: still cancelled; the others still have time.
    result = replay_on_virtual_clock(known_trace(), 60, 2.0, "--oracle", oracle)
    assert [r.outcome for r in result.records] == ["answered", "cancelled", "answered", "answered"]
    assert [r.t_sent for r in result.records] == pytest.approx([0.0, 0.2, 0.225, 0.45])


def test_as_fast_as_possible_awaits_every_answer(oracle, monkeypatch):
    async def never(seconds):
        raise AssertionError(f"as fast as possible waited {seconds} s for the trace's clock")

    monkeypatch.setattr(Replay, "sleep", staticmethod(never))
    result = run_trace(known_trace(), ServerConfig("afap", fake_server("--delay-ms", "30", "--oracle", oracle)),
                       speed=None)
    assert result.server_error is None
    summary = summarize(result)
    assert summary["answered"] == 4 and summary["cancels_sent"] == 0
    assert summary["shown_in_time"] is None and summary["line_exact_match"] == 1.0
    assert summary["accepted"] == 4
    # The real clock: an answer never comes before the server's 30 ms (an upper bound would depend on the load).
    assert all(r.latency_ms >= 30 for r in result.records)


def test_dead_or_missing_server_is_reported_not_hung(tmp_path):
    crash = run_trace(known_trace(), ServerConfig("crash", [sys.executable, "-c", "import sys; sys.exit(3)"]),
                      speed=None, tail_timeout=5)
    assert crash.server_error
    with pytest.raises(SystemExit, match="not found"):
        run_trace(known_trace(), ServerConfig("missing", ["/nonexistent/server"]), speed=None)


@pytest.mark.parametrize("values, q, expected", [
    ([], 50, None), ([5.0], 99, 5.0), ([1.0, 2.0, 3.0, 4.0], 50, 2.5), ([1.0, 2.0, 3.0, 4.0], 90, 3.7),
    ([10.0, 1.0, 5.0], 0, 1.0), ([10.0, 1.0, 5.0], 100, 10.0),
])
def test_percentile(values, q, expected):
    assert percentile(values, q) == (pytest.approx(expected) if expected is not None else None)


def item(text, rng=None):
    return types.InlineCompletionItem(insert_text=text, range=rng)


@pytest.mark.parametrize("result, line, character, expected", [
    (None, "x = ", 4, ""),
    (types.InlineCompletionList(items=[]), "x = ", 4, ""),
    (types.InlineCompletionList(items=[item("foo()"), item("bar")]), "x = ", 4, "foo()"),
    ([item("foo()")], "x = ", 4, "foo()"),
    # a range from the word start: the typed part is not suggested again
    ([item("foobar()", types.Range(types.Position(0, 4), types.Position(0, 7)))], "x = foo", 7, "bar()"),
    ([item("other", types.Range(types.Position(0, 4), types.Position(0, 7)))], "x = foo", 7, ""),
    ([item(types.StringValue(value="snip"))], "", 0, "snip"),
])
def test_suggestion_from(result, line, character, expected):
    assert suggestion_from(result, line, character) == expected


def record(**fields):
    base = dict(index=0, uri=URI, line=0, character=0, t_sent=1.0)
    return RequestRecord(**(base | fields))


def test_finish_record_rules():
    late = record(t_response=1.3, t_next_keystroke=1.2, outcome="answered", suggestion="ab", truth="ab\ncd")
    finish_record(late, measure_timing=True)
    assert late.shown_in_time is False and late.exact_match and late.chars_saved == 2
    assert late.latency_ms == pytest.approx(300)
    after_cancel = record(t_response=1.3, t_cancel=1.1, outcome="answered", suggestion="ab", truth="ab")
    finish_record(after_cancel, measure_timing=True)
    assert after_cancel.outcome == "cancelled" and after_cancel.latency_ms is None
    assert after_cancel.cancel_latency_ms == pytest.approx(200)
    end_of_line = record(t_response=1.1, outcome="answered", suggestion="\n    x", truth="\n    x")
    finish_record(end_of_line, measure_timing=True)
    assert not end_of_line.scored and end_of_line.exact_match is False and end_of_line.shown_in_time
    silent = record()
    finish_record(silent, measure_timing=False)
    assert silent.outcome == "timeout" and silent.shown_in_time is None


def fake_result(label, latencies):
    records = [record(index=i, t_response=1.0 + ms / 1000, outcome="answered", suggestion="x", truth="x")
               for i, ms in enumerate(latencies)]
    for r in records:
        finish_record(r, measure_timing=True)
    return RunResult(label, ["srv"], 1.0, records, peak_rss_mb=100.0)


def test_comparison_table_ratios():
    table = comparison_table([summarize(fake_result("base", [100, 100, 100])),
                              summarize(fake_result("fast", [50, 50, 50]))])
    p50 = next(line for line in table.splitlines() if line.startswith("latency p50"))
    assert "100.0" in p50 and "50.0 (0.50x)" in p50
    assert "100.0% (1.00x)" in next(l for l in table.splitlines() if l.startswith("line exact match"))



def answered_run(label, answers):
    """A run whose request i was answered with answers[i] (None: cancelled), every truth "x = 1"."""
    records = []
    for i, suggestion in enumerate(answers):
        records.append(record(index=i, t_response=1.05, truth="x = 1", suggestion=suggestion,
                              outcome="answered" if suggestion is not None else "cancelled",
                              t_cancel=None if suggestion is not None else 1.01))
    for r in records:
        finish_record(r, measure_timing=True)
    return RunResult(label, ["srv"], 1.0, records, peak_rss_mb=100.0)


@pytest.mark.parametrize("name,runs,over_own,where_all", [
    ("the same completions, the fast run answers a hard extra one",
     [["x = 1", None, "x = 1"], ["x = 1", "y", "x = 1"]], [1.0, 2 / 3], [1.0, 1.0]),
    ("each run answers one the other cancelled",
     [["x = 1", "x = 1", None], [None, "x = 1", "x = 2"]], [1.0, 0.5], [1.0, 1.0]),
    ("where both answered they differ",
     [["x = 1", "x = 1", "x = 1"], ["x = 1", "x = 2", "x = 1"]], [1.0, 2 / 3], [1.0, 2 / 3]),
    ("no request answered by both", [["x = 1", None], [None, "x = 1"]], [1.0, 1.0], [None, None]),
])
def test_exact_match_where_all_answered(name, runs, over_own, where_all):
    summaries = summarize_all([answered_run(f"run{i}", answers) for i, answers in enumerate(runs)])
    assert [s["line_exact_match"] for s in summaries] == pytest.approx(over_own)
    for summary, expected in zip(summaries, where_all):
        got = summary["line_exact_match_all_answered"]
        assert got is None if expected is None else got == pytest.approx(expected)


def test_comparison_table_shows_exact_match_where_all_answered():
    table = comparison_table(summarize_all([answered_run("slow", ["x = 1", None, "x = 1"]),
                                            answered_run("fast", ["x = 1", "y", "x = 1"])]))
    lines = table.splitlines()
    assert "66.7% (0.67x)" in next(line for line in lines if line.startswith("line exact match"))
    assert "100.0% (1.00x)" in next(line for line in lines if line.startswith("... where all answered"))

def test_html_is_self_contained():
    page = render([fake_result("base", [100, 120, 90]), fake_result("fast", [50, 60, 40])], "t.jsonl")
    images = page.split("data:image/png;base64,")[1:]
    assert len(images) == 3  # CDF + one timeline per run
    assert all(base64.b64decode(i.split("'", 1)[0])[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert "http" not in page.replace("http-equiv", "")


def test_cli_compare_writes_json_and_html(tmp_path, oracle, capsys):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, known_trace())
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    server = " ".join(fake_server("--oracle", oracle))
    rc = replay_main(["run", str(trace), "--server", server, "--as-fast-as-possible",
                      "--compare", "d10=--delay-ms 10", "--compare", "d60=--delay-ms 60",
                      "--json", str(out_json), "--html", str(out_html)])
    assert rc == 0
    table = capsys.readouterr().out
    assert "d10" in table and "d60" in table and "x)" in table
    report = json.loads(out_json.read_text())
    assert [run["label"] for run in report["runs"]] == ["d10", "d60"]
    assert report["runs"][1]["command"][-2:] == ["--delay-ms", "60"]
    # Each run had its own server: the 60 ms one never answered sooner (only lower bounds: the machine may be busy).
    assert report["runs"][0]["summary"]["latency_ms"]["p50"] >= 10
    assert min(r["latency_ms"] for r in report["runs"][1]["records"]) >= 60
    assert len(report["runs"][0]["records"]) == 4
    assert out_html.read_text().count("data:image/png;base64,") == 3
