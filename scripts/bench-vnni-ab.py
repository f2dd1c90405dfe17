"""The vnni kernel of a git revision against the working tree's, side by side in one process: per layer shape and
rows per call, both builds alternate 15 times (the ratio of each pair, so a noisy minute hits both alike), and
every call's numbers must be bitwise equal (a kernel change that alters them is not a speed change).

    .venv/bin/python scripts/bench-vnni-ab.py --rev HEAD~1 [--march x86-64-v3]   # x86-64-v3: the AVX2 build
                                                   # (avx-vnni-on-avx512: the AVX-VNNI path, engine/vnni.py)
    [--rows 1,2,4,9]: rows per call (default: 1,9,64,512)
    [--timing-only]: no equality check, for timing-only builds (e.g. one that leaves the float epilogue out)

The revision's engine/kernels/*.cpp are built as a second extension under another name ($CODECUE_HOME/extensions,
~1 minute the first time). Prints old and new best ms and the best and median of old ÷ new (> 1: faster now).
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine import vnni  # noqa: E402
from engine.models import codecue_home  # noqa: E402

# (out, in, bits): the 1.5B's MLP up/gate, its Q6_K down_proj (int8), attention's q/o, k/v.
LAYERS = [(8960, 1536, 4), (1536, 8960, 8), (1536, 1536, 4), (256, 1536, 4)]
ROWS = (1, 9, 64, 512)  # a decode step, a verify pass, prefill chunks


def build_at(rev: str, march: str):
    from torch.utils import cpp_extension

    sources = [source.name for source in vnni.SOURCES]
    texts = [subprocess.run(["git", "show", f"{rev}:engine/kernels/{name}"], cwd=ROOT, check=True,
                            capture_output=True).stdout for name in sources]
    digest = hashlib.sha256(b"".join(texts)).hexdigest()[:12]
    folder = codecue_home() / "extensions" / f"ab-{digest}-{march.replace('-', '_')}"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in zip(sources, texts):
        if not (folder / name).is_file() or (folder / name).read_bytes() != text:
            (folder / name).write_bytes(text)
    return cpp_extension.load(name=f"codecue_vnni_ab_{digest}_{march.replace('-', '_')}",
                              sources=[str(folder / name) for name in sources], build_directory=str(folder),
                              extra_cflags=["-O3", *vnni.march_flags(march), "-fopenmp"], extra_ldflags=["-fopenmp"])


def layer(n: int, k: int, bits: int) -> vnni.VnniLinear:
    weight = torch.randn(n, k, generator=torch.Generator().manual_seed(0)) * 0.02
    if bits == 4:
        return vnni.VnniLinear.from_dense_int4(weight, None, torch.float32)
    return vnni.VnniLinear.from_dense_int8(weight, None, torch.float32)


def seconds(call, repeats: int) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - started) / repeats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD~1")
    parser.add_argument("--march", default="native")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rows", type=lambda text: [int(r) for r in text.split(",")], default=list(ROWS),
                        help="rows per call, comma-separated")
    parser.add_argument("--timing-only", action="store_true",
                        help="time a build whose numbers differ (an experiment that leaves work out)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    old, new = build_at(args.rev, args.march), vnni.kernel(args.march)
    print(f"{args.rev} vs working tree, {new.simd()} build, {args.threads} threads")
    for n, k, bits in LAYERS:
        lin = layer(n, k, bits)
        call_args = (lin.packed, lin.d, lin.m, n, lin.group, bits, lin.per_channel, True)
        for rows in args.rows:
            x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows)) * 3
            if not args.timing_only and not torch.equal(old.linear(x, *call_args), new.linear(x, *call_args)):
                print(f"{n}x{k} {bits}-bit, {rows} rows: the numbers differ")
                return 1
            repeats = max(2, 40 // rows)
            pairs = [(seconds(lambda: old.linear(x, *call_args), repeats),
                      seconds(lambda: new.linear(x, *call_args), repeats)) for _ in range(15)]
            best_old, best_new = min(p[0] for p in pairs), min(p[1] for p in pairs)
            median = statistics.median(p[0] / p[1] for p in pairs)
            print(f"{n:6d}x{k:<5d} {bits}-bit {rows:4d} rows: old {1000 * best_old:8.3f} ms, new {1000 * best_new:8.3f}"
                  f" ms, old/new best {best_old / best_new:4.2f}, median {median:4.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
