"""The memory bandwidth probe recorded beside the engine bench's times (codecue_bench/bandwidth.py)."""
import itertools

import pytest

from codecue_bench import bandwidth


def test_probe_reports_the_fastest_of_its_reads_in_gb_per_s(monkeypatch):
    # each read takes 4, 2, then 8 ms by a fake clock: the best (2 ms) is the probe's
    ticks = itertools.chain.from_iterable((0.0, d) for d in (0.004, 0.002, 0.008))
    monkeypatch.setattr(bandwidth.time, "perf_counter", lambda: next(ticks))
    probe = bandwidth.BandwidthProbe(nbytes=4 << 20, repeats=3)
    assert probe() == pytest.approx((4 << 20) / 0.002 / 1e9)


def test_probe_keeps_its_buffer_and_measures_something():
    probe = bandwidth.BandwidthProbe(nbytes=1 << 20, repeats=2)
    first = probe()
    buffer = probe.buffer
    assert first > 0 and probe() > 0
    assert probe.buffer is buffer and buffer.numel() * 4 == 1 << 20


ROUND_CASES = [
    # (each row's round and bandwidth, expected medians by round)
    ([(1, 30.0), (1, 50.0), (1, 40.0), (2, 20.0)], [40.0, 20.0]),
    ([(1, 30.0), (1, 50.0), (2, 52.0), (2, 54.0)], [40.0, 53.0]),  # an even count: the middle two's mean
    ([(2, 33.3), (1, 51.26)], [51.3, 33.3]),  # rounds in order, one decimal
    ([(1, None), (1, 10.0), (2, None)], [10.0]),  # rows without a probe left out; a round without any too
]


@pytest.mark.parametrize("rows, expected", ROUND_CASES)
def test_bandwidth_by_round_is_each_rounds_median(rows, expected):
    table = [{"round": r} | ({"bandwidth_gbs": gbs} if gbs is not None else {}) for r, gbs in rows]
    assert bandwidth.by_round(table) == expected
