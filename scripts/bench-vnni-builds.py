"""The vnni kernel's arithmetic alone, per build: one layer's call (weights cache-resident, best of 30) through this
CPU's build and, where the CPU has AVX-512 VNNI, the AVX2 build (x86-64-v3) a CPU without it runs and the AVX-VNNI
path of Intel's client CPUs (tests/engine_helpers.py: kernel_marches).

    .venv/bin/python scripts/bench-vnni-builds.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

THREADS = torch.get_num_threads()
from engine import vnni  # noqa: E402
from engine_helpers import kernel_marches  # noqa: E402  (it sets one thread for the tests: set back in main)

LAYERS = [(4, 8960, 1536), (4, 1536, 8960), (8, 1536, 8960)]  # (bits, out, in): the 1.5B's MLP shapes
ROWS = (1, 4, 9)


def best_ms(call, repeats: int = 30) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return 1000 * best


def layer(bits: int, n: int, k: int) -> vnni.VnniLinear:
    g = torch.Generator().manual_seed(0)
    if bits == 4:
        return vnni.VnniLinear.from_int4(torch.randint(0, 16, (n, k), generator=g), torch.rand(n, k // 32) * 0.01,
                                         torch.rand(n, k // 32) * 0.05, 32, None, torch.float32)
    return vnni.VnniLinear.from_dense_int8(torch.randn(n, k, generator=g), None, torch.float32)


def main() -> None:
    torch.set_num_threads(THREADS)
    builds = {march: vnni.kernel(march) for march in kernel_marches()}
    print("ms per call, rows " + " / ".join(map(str, ROWS)))
    for bits, n, k in LAYERS:
        w = layer(bits, n, k)
        args = (w.packed, w.d, w.m, n, w.group, w.bits, w.per_channel, True)
        cells = []
        for march, build in builds.items():
            times = [best_ms(lambda x=torch.randn(m, k): build.linear(x, *args)) for m in ROWS]
            cells.append(f"{build.simd()}: " + " / ".join(f"{t:.2f}" for t in times))
        print(f"{bits}-bit {n} x {k}: " + "   ".join(cells))


if __name__ == "__main__":
    main()
