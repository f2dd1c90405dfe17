"""Close finalists of the calibration are timed again side by side (engine/calibration/finalists.py)."""
from __future__ import annotations

import time

import pytest

from engine.calibration import torch_timing as timing
from engine.calibration.finalists import rival_in_reach, time_side_by_side
from engine.calibration.measurements import WIDTHS, Measurement, no_dearer_than_wider
from engine.testing import tiny_config


def row(weights: str, one: float, complete: bool = True, role: str = "target") -> Measurement:
    passes = {w: one * (1 + 0.1 * (w - 1)) for w in WIDTHS} if complete else {1: one}
    return Measurement(role, weights, "ggml" if weights == "llamacpp" else "float32", passes,
                       100.0 if complete else 0.0)


# (why, llama.cpp's one-token ms, the torch rows, the row expected back or None)
REACH = [
    ("the cheapest complete torch row, within 2x either way", 46.0,
     [row("vnni", 60.0), row("gguf", 90.0)], "vnni"),
    ("a torch row cheaper than llama.cpp's is a close call too", 46.0, [row("vnni", 35.0)], "vnni"),
    ("1.6x behind after a slow minute (a ~30 ms pass timed 56.8) is still in reach", 35.2, [row("vnni", 56.8)],
     "vnni"),
    ("over 2x slower: not a close call", 46.0, [row("vnni", 95.0)], None),
    ("over 2x faster: not a close call either", 46.0, [row("vnni", 22.0)], None),
    ("a screened-out row is never a finalist", 46.0, [row("vnni", 40.0, complete=False), row("gguf", 66.0)], "gguf"),
    ("another role's rows do not count", 46.0, [row("vnni4", 45.0, role="draft")], None),
    ("no torch row at all", 46.0, [], None),
]


@pytest.mark.parametrize("why,rival_ms,rows,expected", REACH, ids=[r[0][:40] for r in REACH])
def test_the_torch_finalist_is_the_cheapest_row_within_reach(why, rival_ms, rows, expected):
    found = rival_in_reach(row("llamacpp", rival_ms), rows)
    assert (found.weights if found else None) == expected


class NoisyMachine:
    """Every pass costs its model's true cost times the machine's slowness at that moment: a slow minute (2x) for
    the first `slow_calls` calls, then a fast one. Records who ran in what order."""

    def __init__(self, slow_calls: int):
        self.calls: list[tuple[str, int]] = []
        self.slow_calls = slow_calls

    def timer(self, name: str, true_ms: float):
        machine = self

        class Timer:
            def pass_ms(self, width: int) -> float:
                machine.calls.append((name, width))
                slowness = 2.0 if len(machine.calls) <= machine.slow_calls else 1.0
                return true_ms * width * slowness
        return Timer()


def test_side_by_side_gives_both_finalists_and_every_width_the_same_minutes():
    """Timed one after the other, the row measured in the slow minute loses although it is faster; taken in turn,
    round by round over every width, both finalists and every width see the fast minute: the faster row wins and
    the widths keep their true shape (timed width by width, a slow minute inflated one width of one row)."""
    rounds = 4
    llama, vnni = row("llamacpp", 46.0), row("vnni", 61.0)  # what the sequential calibration saw
    machine = NoisyMachine(slow_calls=rounds * 2 * len(WIDTHS) // 2)  # slow for the first half of the calls
    time_side_by_side([(llama, machine.timer("llamacpp", 45.0)), (vnni, machine.timer("vnni", 40.0))],
                      rounds=rounds)
    assert llama.side_by_side and vnni.side_by_side
    assert vnni.pass_ms[1] < llama.pass_ms[1]  # the true order
    # Each round: every width, each finalist in turn (who goes first alternates by round).
    assert len(machine.calls) == rounds * 2 * len(WIDTHS)
    per_round = 2 * len(WIDTHS)
    for turn in range(rounds):
        calls = machine.calls[turn * per_round:(turn + 1) * per_round]
        assert [w for _, w in calls] == [w for w in WIDTHS for _ in range(2)]
        first = "llamacpp" if turn % 2 == 0 else "vnni"
        assert [name for name, _ in calls[::2]] == [first] * len(WIDTHS)
    # Each figure is the best of its calls: the fast minute's cost at every width.
    for width in WIDTHS:
        assert vnni.pass_ms[width] == 40.0 * width and llama.pass_ms[width] == 45.0 * width


class WidthCosts:
    """A pass costs a fixed figure per width; records the widths it was timed at."""

    def __init__(self, ms: dict[int, float]):
        self.ms, self.widths = ms, []

    def pass_ms(self, width: int) -> float:
        self.widths.append(width)
        return self.ms[width]


def test_a_width_where_one_finalist_is_clearly_ahead_stops_after_two_rounds():
    """Close at 1 and 2 tokens (every round), llama.cpp 2.5x the vnni kernel from 4 tokens on (as under the AVX2
    emulation): those widths need no five rounds to tell (over SETTLED_RATIO), and took most of the retiming's
    time."""
    llama_ms = {1: 42.0, 2: 76.0, 4: 160.0, 8: 375.0, 16: 650.0}
    vnni_ms = {1: 40.0, 2: 60.0, 4: 64.0, 8: 150.0, 16: 260.0}
    llama, vnni = WidthCosts(llama_ms), WidthCosts(vnni_ms)
    rows = [row("llamacpp", 46.0), row("vnni", 50.0)]
    time_side_by_side([(rows[0], llama), (rows[1], vnni)], rounds=5)
    assert [llama.widths.count(w) for w in WIDTHS] == [5, 5, 2, 2, 2]
    assert [vnni.widths.count(w) for w in WIDTHS] == [5] * len(WIDTHS)  # the one ahead: every round, every width
    assert rows[0].pass_ms == llama_ms and rows[1].pass_ms == vnni_ms


def test_the_finalist_ahead_at_a_settled_width_keeps_its_best_of_every_round():
    """Its figures price the verify passes the drafting policy weighs: with two calls, a slow stretch over both left
    a Zen 4's 4-token pass out of line with the widths beside it."""
    llama_ms = {1: 42.0, 2: 76.0, 4: 160.0, 8: 375.0, 16: 650.0}
    vnni_ms = {1: 40.0, 2: 44.0, 4: 52.0, 8: 66.0, 16: 125.0}
    llama, vnni = WidthCosts(llama_ms), WidthCosts(vnni_ms)
    calls = {w: 0 for w in WIDTHS}
    timed = vnni.pass_ms

    def slow_twice_at_4(width: int) -> float:  # the kernel's first two 4-token calls land in a slow stretch
        calls[width] += 1
        return timed(width) * (1.3 if width == 4 and calls[width] <= 2 else 1.0)
    vnni.pass_ms = slow_twice_at_4
    rows = [row("llamacpp", 46.0), row("vnni", 50.0)]
    time_side_by_side([(rows[0], llama), (rows[1], vnni)], rounds=5)
    assert rows[1].pass_ms[4] == pytest.approx(52.0)  # two calls only would have kept 67.6
    assert llama.widths.count(4) == 2


class RecordingRival:
    def __init__(self, ms: float):
        self.ms, self.widths = ms, []

    def pass_ms(self, width: int) -> float:
        self.widths.append(width)
        return self.ms


@pytest.mark.parametrize("ratio,retimed", [(1e9, True), (1.0 + 1e-9, False)])
def test_calibrate_times_a_close_rival_again_beside_torchs_best(monkeypatch, ratio, retimed):
    """With llama.cpp's row and its open model handed in, the torch formats are measured as before, then (where the
    call is close) the best torch row and llama.cpp's are timed again in turn, the torch passes for real."""
    monkeypatch.setattr(timing, "CONTEXT_TOKENS", 32)
    monkeypatch.setattr(timing, "PREFILL_TOKENS", 16)
    monkeypatch.setattr("engine.calibration.finalists.FINALIST_RATIO", ratio)
    monkeypatch.setattr("engine.calibration.finalists.ROUNDS", 2)
    target, draft = tiny_config(384, 2, hidden=64), tiny_config(384, 1, hidden=64)
    llama = Measurement("target", "llamacpp", "ggml", {w: 7.0 for w in WIDTHS}, 500.0)
    rival = RecordingRival(3.0)
    cal = timing.calibrate(target, draft, progress=False, measured_first=[llama], rivals={"target": rival})
    torch_targets = [m for m in cal.measurements if m.role == "target" and m.weights != "llamacpp"]
    again = [m for m in torch_targets if m.side_by_side]
    if not retimed:
        assert rival.widths == [] and not again and not llama.side_by_side
        return
    assert llama.side_by_side and llama.pass_ms == {w: 3.0 for w in WIDTHS}
    assert len(again) == 1 and again[0] is min((m for m in torch_targets if m.complete), key=lambda m: m.pass_ms[1])
    assert all(ms > 0 for ms in again[0].pass_ms.values()) and set(again[0].pass_ms) == set(WIDTHS)
    assert sorted(rival.widths) == sorted(list(WIDTHS) * 2)
    assert not any(m.side_by_side for m in cal.measurements if m.role == "draft")  # no draft rival handed in


def test_a_rival_that_fails_side_by_side_leaves_the_figures_timed_apart(monkeypatch, caplog):
    monkeypatch.setattr(timing, "CONTEXT_TOKENS", 32)
    monkeypatch.setattr(timing, "PREFILL_TOKENS", 16)
    monkeypatch.setattr("engine.calibration.finalists.FINALIST_RATIO", 1e9)

    class Broken:
        def pass_ms(self, width):
            raise RuntimeError("llama_decode failed")
    llama = Measurement("target", "llamacpp", "ggml", {w: 7.0 for w in WIDTHS}, 500.0)
    cal = timing.calibrate(tiny_config(384, 2, hidden=64), None, progress=False, measured_first=[llama],
                           rivals={"target": Broken()})
    assert llama.pass_ms == {w: 7.0 for w in WIDTHS} and not any(m.side_by_side for m in cal.measurements)
    assert any(m.complete for m in cal.measurements if m.weights != "llamacpp")
    assert "side by side with llama.cpp failed" in caplog.text


def test_side_by_side_is_saved_and_printed(tmp_path):
    from engine.calibration.measurements import Calibration, load_cached, save
    from engine.calibration.report import format_table

    key = {"processor": "test", "cpu_capability": "x", "threads": 2, "torch": "t"}
    retimed = row("vnni", 40.0)
    retimed.side_by_side = True
    save(tmp_path, Calibration(key=key, measurements=[retimed, row("gguf", 80.0)]))
    loaded = load_cached(tmp_path, key)
    assert [m.side_by_side for m in loaded.measurements] == [True, False]
    lines = format_table(loaded).splitlines()
    assert "side by side" in lines[2] and "side by side" not in lines[3]


# (why, timed pass_ms, what the table keeps)
ENVELOPES = [
    ("steps that grow with width are kept", {1: 30.0, 2: 33.0, 4: 40.0, 8: 60.0, 16: 110.0},
     {1: 30.0, 2: 33.0, 4: 40.0, 8: 60.0, 16: 110.0}),
    ("a one-token pass timed in a slow moment is bounded by the two-token pass", {1: 56.8, 2: 55.6, 4: 67.0},
     {1: 55.6, 2: 55.6, 4: 67.0}),
    ("the bound runs down from the widest step", {1: 45.0, 2: 47.2, 4: 44.3, 8: 71.4}, {1: 44.3, 2: 44.3, 4: 44.3,
                                                                                       8: 71.4}),
    ("prefill widths (other kernels) neither bound steps nor are bounded", {1: 40.0, 8: 90.0, 16: 60.0, 32: 50.0},
     {1: 40.0, 8: 90.0, 16: 60.0, 32: 50.0}),
    ("a probe's single figure", {1: 77.4}, {1: 77.4}),
]


@pytest.mark.parametrize("why,timed,kept", ENVELOPES, ids=[e[0][:40] for e in ENVELOPES])
def test_a_step_is_never_recorded_dearer_than_a_wider_one(why, timed, kept):
    assert no_dearer_than_wider(timed) == kept
    assert Measurement("target", "vnni", "float32", dict(timed), 100.0).pass_ms == kept  # as timed, or loaded


def test_side_by_side_figures_are_bounded_the_same_way():
    rows = [row("llamacpp", 46.0), row("vnni", 50.0)]
    slow_first = {1: 60.0, 2: 50.0, 4: 64.0, 8: 150.0, 16: 260.0}
    time_side_by_side([(rows[0], WidthCosts(dict(slow_first))), (rows[1], WidthCosts(dict(slow_first)))], rounds=2)
    assert rows[0].pass_ms[1] == rows[1].pass_ms[1] == 50.0


def test_a_rows_widths_are_timed_round_by_round():
    """torch_timing.time_passes' figures: every width in each round, so a slow first minute leaves the shape
    alone; a format whose round takes over the budget is timed once."""
    machine = NoisyMachine(slow_calls=len(WIDTHS))  # the whole first round is slow
    timer = machine.timer("vnni", 40.0)
    assert timing.best_ms_each(timer.pass_ms, WIDTHS, rounds=3) == {w: 40.0 * w for w in WIDTHS}
    assert [w for _, w in machine.calls] == list(WIDTHS) * 3
    slow = WidthCosts({w: 1.0 for w in WIDTHS})
    slow.pass_ms = lambda width, timer=slow.pass_ms: (time.sleep(0.01), timer(width))[1]
    timing.best_ms_each(slow.pass_ms, WIDTHS, rounds=3, budget_s=0.001)
    assert slow.widths == list(WIDTHS)
