"""How fast the vnni kernel multiplies on this CPU: one layer, 1 and 2 threads, 1-16 rows a call, best of 7 runs of
10 calls, in GMAC/s. Where GMAC/s stops rising with rows, the pass is compute-bound and a verify row costs what a
decode token's arithmetic costs (docs/benchmarks.md, thirty-fifth).

With --cold each cell also times the layer streamed from memory, as a pass meets it (copies of it rotated, their bytes
4x the last-level cache), and prints hot / cold: where the two meet, the kernel's arithmetic hides the memory's time;
where cold is slower, the layer waits on memory (one row) or the two do not overlap (docs/benchmarks.md,
forty-second).

    .venv/bin/python scripts/bench-vnni-rows.py [--march native|x86-64-v3] [--cold]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import vnni  # noqa: E402

# (out, in, bits): the 1.5B's MLP up/gate (Q4_K) and its down_proj as int8 (Q6_K).
LAYERS = [(8960, 1536, 4), (1536, 8960, 8)]
ROWS = (1, 2, 4, 8, 16)
FALLBACK_CACHE_BYTES = 32 << 20  # where the OS does not say how large the last-level cache is


def last_level_cache_bytes() -> int:
    try:
        size = os.sysconf("SC_LEVEL3_CACHE_SIZE")
    except (ValueError, OSError):
        size = 0
    return size if size > 0 else FALLBACK_CACHE_BYTES


def layer_copies(n: int, k: int, bits: int, seeds: range) -> list:
    make = vnni.VnniLinear.from_dense_int4 if bits == 4 else vnni.VnniLinear.from_dense_int8
    return [make(torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.02, None, torch.float32)
            for seed in seeds]


def best_seconds(kernel, x, layers, n: int, bits: int) -> float:
    """Best of 7 runs of 10 calls, the calls rotating over `layers` (one layer: it stays in cache)."""
    best = float("inf")
    for _ in range(7):
        started = time.perf_counter()
        for call in range(10):
            lin = layers[call % len(layers)]
            kernel.linear(x, lin.packed, lin.d, lin.m, n, lin.group, bits, lin.per_channel, True)
        best = min(best, (time.perf_counter() - started) / 10)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--march", default="native")
    parser.add_argument("--cold", action="store_true", help="also time each layer streamed from memory")
    args = parser.parse_args()
    kernel = vnni.kernel(args.march)
    print(f"vnni kernel: {kernel.simd()} build" + (f"; cold: copies over 4x {last_level_cache_bytes() >> 20} MB of "
                                                    "last-level cache" if args.cold else ""))
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for n, k, bits in LAYERS:
            first = layer_copies(n, k, bits, range(1))
            layer_bytes = sum(t.numel() * t.element_size() for t in (first[0].packed, first[0].d, first[0].m))
            copies = (first + layer_copies(n, k, bits, range(1, 1 + 4 * last_level_cache_bytes() // layer_bytes))
                      if args.cold else first)
            cells = []
            for rows in ROWS:
                x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 3
                hot = best_seconds(kernel, x, first, n, bits)
                cell = f"{rows} rows {rows * n * k / hot / 1e9:6.1f}"
                if args.cold:
                    cold = best_seconds(kernel, x, copies, n, bits)
                    cell += f" / {rows * n * k / cold / 1e9:5.1f}"
                cells.append(cell)
            label = "GMAC/s hot / cold" if args.cold else "GMAC/s"
            print(f"{threads} thread{'s' if threads > 1 else ' '} {n:5d}x{k:<5d} {bits}-bit {label}: " + "  ".join(cells),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
