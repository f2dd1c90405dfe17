"""How fast the vnni kernel multiplies on this CPU: one layer (cache-resident), 1 and 2 threads, 1-16 rows a call,
best of 7 runs of 10 calls, in GMAC/s. Where GMAC/s stops rising with rows, the pass is compute-bound and a verify
row costs what a decode token's arithmetic costs (docs/benchmarks.md, thirty-fifth).

    .venv/bin/python scripts/bench-vnni-rows.py [--march native|x86-64-v3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import vnni  # noqa: E402

# (out, in, bits): the 1.5B's MLP up/gate (Q4_K) and its down_proj as int8 (Q6_K).
LAYERS = [(8960, 1536, 4), (1536, 8960, 8)]
ROWS = (1, 2, 4, 8, 16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--march", default="native")
    args = parser.parse_args()
    kernel = vnni.kernel(args.march)
    print(f"vnni kernel: {kernel.simd()} build")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for n, k, bits in LAYERS:
            weight = torch.randn(n, k, generator=torch.Generator().manual_seed(0)) * 0.02
            lin = (vnni.VnniLinear.from_dense_int4 if bits == 4 else vnni.VnniLinear.from_dense_int8)(
                weight, None, torch.float32)
            call_args = (lin.packed, lin.d, lin.m, n, lin.group, bits, lin.per_channel, True)
            cells = []
            for rows in ROWS:
                x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 3
                best = float("inf")
                for _ in range(7):
                    started = time.perf_counter()
                    for _ in range(10):
                        kernel.linear(x, *call_args)
                    best = min(best, (time.perf_counter() - started) / 10)
                cells.append(f"{rows} rows {rows * n * k / best / 1e9:6.1f}")
            print(f"{threads} thread{'s' if threads > 1 else ' '} {n:5d}x{k:<5d} {bits}-bit GMAC/s: " + "  ".join(cells),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
