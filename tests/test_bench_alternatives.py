"""`codecue-bench alternatives` on the real server with the tiny pair: Invoked and Automatic requests timed at the
same cursors, and the Invoked ones answered with the automatic suggestion and alternatives."""
from __future__ import annotations

from pathlib import Path

from codecue_bench.alternatives_bench import cursor_positions, run_alternatives_bench

FILE = Path(__file__).resolve().parents[1] / "engine" / "decode" / "speculative.py"


def test_cursor_positions_are_ends_of_lines_with_code_from_the_middle():
    text = "a\n\nb = 1\nc\n\nd = 'é'\n"
    assert cursor_positions(text, 3) == [(3, 1), (5, 7)]


def test_the_bench_times_invoked_against_automatic_requests(tiny_pair_env):
    result = run_alternatives_bench(FILE, pair="tiny", cursors=3, env=dict(tiny_pair_env, OMP_NUM_THREADS="1"))
    rows = result["cursors"]
    assert len(rows) == 3 and all(r["automatic_ms"] > 0 and r["invoked_ms"] > 0 for r in rows)
    for r in rows:
        assert r["automatic_items"] <= 1 and r["invoked_items"] <= 3
        assert bool(r["invoked_items"]) == bool(r["automatic_items"])
    assert result["alternatives"] == sum(r["invoked_items"] - 1 for r in rows if r["invoked_items"])
