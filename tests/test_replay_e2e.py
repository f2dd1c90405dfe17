"""The runner against the REAL server (`python -m codecue_lsp --stdio`) on the tiny random pair, end to end."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from codecue_lsp.replay import synth
from codecue_lsp.replay.report import summarize
from codecue_lsp.replay.runner import ServerConfig, run_trace

REPO = Path(__file__).resolve().parents[1]
SERVER = [sys.executable, "-m", "codecue_lsp", "--stdio", "--pair", "tiny", "--max-tokens", "6"]

pytestmark = pytest.mark.slow


@pytest.fixture
def tiny_server_env(tiny_pair_env, monkeypatch):
    for name, value in tiny_pair_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))


def small_trace(keystrokes: int) -> list[dict]:
    return synth.synth_typing(synth.humaneval_sources([2]), seed=11, wpm="100", max_keystrokes=keystrokes)


def test_real_server_answers_every_request_and_drafting_is_lossless(tiny_server_env):
    events = small_trace(8)
    runs = [run_trace(events, ServerConfig(drafter, SERVER + ["--drafter", drafter]), speed=None, tail_timeout=60)
            for drafter in ("none", "draft")]
    for result in runs:
        summary = summarize(result)
        assert result.server_error is None, result.extra
        assert summary["requests"] == 9 and summary["error"] == summary["timeout"] == 0
        assert summary["answered"] + summary["empty"] == 9 and summary["cancels_sent"] == 0
        assert summary["latency_ms"]["n"] == 9 and summary["latency_ms"]["p50"] > 0
        assert summary["server_stats"]["requests"] == 9 and summary["server_stats"]["pair"] == "tiny"
        assert summary["peak_rss_mb"] > 50
    # Speculative decoding must not change a single suggestion (greedy, same target model).
    assert [r.suggestion for r in runs[0].records] == [r.suggestion for r in runs[1].records]
    assert summarize(runs[0])["line_exact_match"] == summarize(runs[1])["line_exact_match"]


def test_real_server_with_the_trace_clock_cancels_superseded_requests(tiny_server_env):
    """Typed through at 4x the trace's 100 wpm (a keystroke every 16-50 ms) against a server that waits out a 300 ms
    debounce: every request a keystroke follows within that wait is superseded before it can be answered, so the
    editor cancels it, and the server stops it."""
    events = small_trace(10)
    debounce_s = 0.3
    command = SERVER + ["--debounce-ms", str(int(debounce_s * 1000))]
    result = run_trace(events, ServerConfig("timed", command), speed=4.0, tail_timeout=60)
    summary = summarize(result)
    assert result.server_error is None, result.extra
    assert summary["requests"] == 11 and summary["error"] == summary["timeout"] == 0
    for record in result.records:
        assert record.outcome in ("answered", "empty", "cancelled")
        if record.t_cancel is not None:
            assert record.outcome == "cancelled" and record.cancel_latency_ms is not None
        else:
            assert record.latency_ms is not None
    # The next keystroke came while the server still waited out its debounce (2/3 of it: room for a slow client's
    # clock): nothing can have answered it, so it must have been cancelled.
    typed_through = [r for r in result.records
                     if r.t_next_keystroke is not None and r.t_next_keystroke - r.t_sent < debounce_s * 2 / 3]
    assert len(typed_through) > 0, [(r.t_sent, r.t_next_keystroke) for r in result.records]
    assert all(r.t_cancel is not None and r.outcome == "cancelled" for r in typed_through)
    assert summary["cancels_sent"] == summary["cancelled"] >= len(typed_through) > 0
    assert summary["server_stats"]["cancelled"] > 0  # the server stopped them, not only the editor gave up
    # The last request is never superseded, so it is answered and counted in time.
    assert result.records[-1].outcome in ("answered", "empty") and result.records[-1].t_cancel is None
    assert summary["server_stats"]["requests"] == 11
