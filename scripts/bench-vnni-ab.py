"""The vnni kernel of a git revision against the working tree's, side by side in one process: per layer shape and
rows per call, both builds alternate 15 times (the ratio of each pair, so a noisy minute hits both alike), and
every call's numbers must be bitwise equal (a kernel change that alters them is not a speed change).

    .venv/bin/python scripts/bench-vnni-ab.py --rev HEAD~1 [--march x86-64-v3]   # x86-64-v3: the AVX2 build
                                                   # (avx-vnni-on-avx512: the AVX-VNNI path, engine/vnni.py)
    [--rows 1,2,4,9]: rows per call (default: 1,9,64,512)
    [--timing-only]: no equality check, for timing-only builds (e.g. one that leaves the float epilogue out)
    [--passes [--context 300] [--rounds 30]]: whole short passes of the real pair instead of single layers: the
        target's 1 / 2 / 4 / 9 tokens and the draft model's steps of 1 and 2 (6 each, heads included) after
        --context tokens, each model's native pass and head through the build under test, the builds alternating
        round by round, every round's logits equal (docs/benchmarks.md, forty-sixth). Prints medians.

The revision's engine/kernels/*.cpp are built as a second extension under another name ($CODECUE_HOME/extensions,
~1 minute the first time). Prints old and new best ms and the best and median of old ÷ new (> 1: faster now).
"""
from __future__ import annotations

import argparse
import contextlib
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


@contextlib.contextmanager
def through(build, steps: list):
    """Both models' native passes (their lean steps) and their heads' kernel calls (vnni.kernel) on `build`."""
    kernel, natives = vnni.kernel, [step.native for step, _ in steps]
    vnni.kernel = lambda march=None: build
    for step, by_build in steps:
        step.native = by_build[id(build)]
    try:
        yield
    finally:
        vnni.kernel = kernel
        for (step, _), native in zip(steps, natives):
            step.native = native


def passes(old, new, context: int, rounds: int) -> int:
    from engine import draft_vocab, lean_step
    from engine.kvcache import TrackedCache
    from engine.models import load_pair

    pair = load_pair("default", with_draft=True)
    steps = []
    for model in (pair.target, pair.draft):
        step = lean_step.lean_step_for(model)
        steps.append((step, {id(build): lean_step.native_model(build, step.layers, model.config,
                                                               step.torch_ops.scaling, step.embed, step.final_norm)
                             for build in (old, new)}))
    ids = torch.randint(100, 15000, (context + 16,), generator=torch.Generator().manual_seed(1)).tolist()
    target, draft = TrackedCache(pair.target), TrackedCache(pair.draft)
    widths = {"T1": 1, "T2": 2, "T4": 4, "T9": 9, "D1": 1, "D2": 2}
    times = {build: {name: [] for name in widths} for build in ("old", "new")}
    reference = None
    with torch.inference_mode():
        target.forward(ids[:context], logits="none")
        draft.forward(ids[:context], logits="none")
        draft_vocab.cover(pair.draft, ids)
        for number in range(rounds + 2):  # the first two rounds warm up, untimed
            for name, build in (("old", old), ("new", new)) if number % 2 else (("new", new), ("old", old)):
                timed = times[name] if number >= 2 else {key: [] for key in widths}
                logits = []
                with through(build, steps):
                    for key in ("T9", "T4", "T2", "T1"):
                        started = time.perf_counter()
                        logits.append(target.forward(ids[context:context + widths[key]]))
                        timed[key].append(time.perf_counter() - started)
                        target.truncate(context)
                    for key in ("D1", "D2"):
                        width = widths[key]
                        for i in range(6):
                            started = time.perf_counter()
                            with draft_vocab.reached_logits(pair.draft):
                                logits.append(draft.forward(ids[context + i * width:context + (i + 1) * width],
                                                            logits="last"))
                            timed[key].append(time.perf_counter() - started)
                        draft.truncate(context)
                reference = reference or logits
                if not all(torch.equal(a, b) for a, b in zip(logits, reference)):
                    print(f"round {number}: the {name} build's logits differ")
                    return 1
    for key in widths:
        old_ms, new_ms = (1000 * statistics.median(times[name][key]) for name in ("old", "new"))
        label = f"{'target' if key[0] == 'T' else 'draft'} {widths[key]} token(s)"
        print(f"{label:18s} old {old_ms:7.3f} ms, new {new_ms:7.3f} ms ({(new_ms - old_ms) / old_ms:+.1%})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="HEAD~1")
    parser.add_argument("--march", default="native")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rows", type=lambda text: [int(r) for r in text.split(",")], default=list(ROWS),
                        help="rows per call, comma-separated")
    parser.add_argument("--timing-only", action="store_true",
                        help="time a build whose numbers differ (an experiment that leaves work out)")
    parser.add_argument("--passes", action="store_true", help="whole passes of the real pair (see above)")
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    old, new = build_at(args.rev, args.march), vnni.kernel(args.march)
    print(f"{args.rev} vs working tree, {new.simd()} build, {args.threads} threads")
    if args.passes:
        from engine import torch_thread

        return torch_thread.run(passes, old, new, args.context, args.rounds)
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
