"""How fast this host streams memory just now, recorded beside a benchmark's times.

On a shared VM the bandwidth a process gets moves from minute to minute (docs/performance.md), and it moves the
modes apart: a one-token pass streams its weights and follows the bandwidth, a verify pass is bound by its arithmetic
and does not. So target alone gets faster when the host has bandwidth to spare and the speculative modes' ratio to it
falls; a ratio is read with the bandwidth it was measured at."""
from __future__ import annotations

import statistics
import time

PROBE_BYTES = 128 << 20  # four times this machine's L3: every read comes from memory


class BandwidthProbe:
    """probe() -> GB/s: the best of `repeats` sums over a buffer of `nbytes` (torch's threads, as the passes use
    them). The buffer is made on the first call and kept, so a probe allocates nothing."""

    def __init__(self, nbytes: int = PROBE_BYTES, repeats: int = 3):
        self.nbytes, self.repeats = nbytes, repeats
        self.buffer = None

    def __call__(self) -> float:
        import torch

        if self.buffer is None:
            self.buffer = torch.ones(self.nbytes // 4, dtype=torch.float32)
        best = float("inf")
        for _ in range(self.repeats):
            started = time.perf_counter()
            self.buffer.sum()
            best = min(best, time.perf_counter() - started)
        return self.buffer.numel() * 4 / best / 1e9


def by_round(rows: list[dict]) -> list[float]:
    """The median of each round's `bandwidth_gbs` (rows without one left out), rounds in order."""
    probed: dict[int, list[float]] = {}
    for row in rows:
        if "bandwidth_gbs" in row:
            probed.setdefault(row["round"], []).append(row["bandwidth_gbs"])
    return [round(statistics.median(probed[number]), 1) for number in sorted(probed)]
