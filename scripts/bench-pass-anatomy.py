"""Where a short pass's time goes: the whole pass of the pair's target and draft model (KV cache after `--context`
tokens, no head) against the same pass's weight kernels alone, called back to back on the same inputs' shapes (the
lean step's fused q/k/v and gate/up calls, every layer, weights streamed from memory as in a pass). The kernels' share
says how far the pass is from streaming its weights; the rest is the ops between them (attention, norms, RoPE,
SwiGLU, the calls' own fixed costs, Python). Medians of `--rounds` alternated rounds, on the torch thread
(engine/torch_thread.py: a second OpenMP pool would slow every call). docs/benchmarks.md, fortieth.

    .venv/bin/python scripts/bench-pass-anatomy.py [--pair default] [--widths 1,4] [--context 300]

Counting the idle thread needs a profiler: while this runs with `--seconds 30`, `perf record -F 1000 -p PID -- sleep
12` and `perf script -F tid,ip,dso` (samples in libgomp on the thread that is not the torch thread: its spin-waits).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import lean_step, torch_thread, vnni  # noqa: E402
from engine.kvcache import TrackedCache  # noqa: E402
from engine.models import load_pair  # noqa: E402


def kernel_calls(model) -> list:
    """The vnni layers one pass calls, in order (fused where the lean step fuses them)."""
    step = lean_step.lean_step_for(model)
    if step is None or step.native is None:
        raise SystemExit("this pass does not run the vnni kernel's native layers here (weights not vnni/vnni4)")
    calls = []
    for layer in step.layers:
        for module in (layer.qkv, layer.o, layer.gate_up, layer.down):
            calls += module.modules if isinstance(module, lean_step.Concatenated) else [module]
    return calls


def time_kernels(calls: list, width: int) -> float:
    kernel = vnni.kernel()
    inputs = {m.in_features: torch.randn(width, m.in_features) for m in calls}
    start = time.perf_counter()
    for m in calls:
        kernel.linear(inputs[m.in_features], m.packed, m.d, m.m, m.out_features, m.group, m.bits, m.per_channel,
                      m.use_simd)
    return time.perf_counter() - start


def time_pass(cache: TrackedCache, ids: list[int], context: int, width: int) -> float:
    start = time.perf_counter()
    cache.forward(ids[context:context + width], logits="none")
    elapsed = time.perf_counter() - start
    cache.truncate(context)
    return elapsed


def anatomy(model, name: str, widths: list[int], context: int, rounds: int, seconds: float) -> None:
    calls = kernel_calls(model)
    weight_bytes = sum(m.packed.numel() + 2 * (m.d.numel() + m.m.numel()) for m in calls)
    ids = torch.randint(100, 15000, (context + max(widths),), generator=torch.Generator().manual_seed(1)).tolist()
    cache = TrackedCache(model)
    with torch.inference_mode():
        cache.forward(ids[:context], logits="none")
        for width in widths:
            for _ in range(3):
                time_pass(cache, ids, context, width)
                time_kernels(calls, width)
            passes, kernels = [], []
            for _ in range(rounds):
                passes.append(time_pass(cache, ids, context, width))
                kernels.append(time_kernels(calls, width))
            whole, alone = statistics.median(passes) * 1e3, statistics.median(kernels) * 1e3
            print(f"{name} {width} token(s): pass {whole:.2f} ms, its {len(calls)} kernel calls alone {alone:.2f} ms "
                  f"({weight_bytes / alone / 1e6:.1f} GB/s of {weight_bytes / 1e6:.0f} MB), between them "
                  f"{whole - alone:.2f} ms ({(whole - alone) / whole:.0%})", flush=True)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:  # for a profiler to attach to
            time_pass(cache, ids, context, widths[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="default")
    parser.add_argument("--widths", default="1,4", help="tokens a pass, comma-separated")
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--seconds", type=float, default=0.0, help="then keep running draft steps this long")
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    pair = load_pair(args.pair)
    print(f"{torch_thread.run(vnni.kernel).simd()} kernel, {torch_thread.run(torch.get_num_threads)} threads, "
          f"context {args.context}")

    def run() -> None:
        for name, model in (("target", pair.target), ("draft", pair.draft)):
            if model is not None:
                anatomy(model, name, widths, args.context, args.rounds, args.seconds if name == "draft" else 0.0)
    torch_thread.run(run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
