"""codecue-bench: speed measured side by side in one process, so ratios hold on a noisy machine.

    codecue-bench engine --pair default [--prompts FILE] [--max-new-tokens 64] [--limit N] --json OUT
                         [--llama-server URL | --no-llama-cpp]   # llama.cpp as a mode when it is built
    codecue-bench passes --pair default [--lean-ab]   # per-pass costs: target for 1..K+1 tokens, draft, ratio c
    codecue-bench server FILE ...                # LSP keystroke latency, next to llama-server's /infill
    codecue-bench prompt [--suffix-budgets 0,32,128,512]   # line exact match vs suffix budget
    codecue-bench context [--projects mcp] [--limit N] [--in-file]   # cross-file holes through the real server
    codecue-bench layout FILE ...                # how often typing makes the prompt start over, per budget
    codecue-bench gpu --out DIR [--tiny]         # GPU per-pass costs and latency with random weights
    codecue-bench bound [--prompts FILE]         # the fastest any drafting policy could be here (a clairvoyant plan)
    codecue-bench index [--files 5000] [--json F]   # workspace index: cold build, RSS, warm restart, saved file
    codecue-bench retrieval [--out F]            # cross-file retrieval recall: the index's Jaccard vs bm25s
    codecue-bench ab --before DIR --after DIR [--rounds 3] [--warm] [-- engine args]   # two checkouts interleaved

llama.cpp is built by scripts/build-llama-cpp.sh into $CODECUE_HOME/llama.cpp/build (never in CI).
"""
from __future__ import annotations

import argparse
import json
import signal
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # A SIGTERM (timeout, CI cancel) unwinds like Ctrl+C, so the llama-servers we started are stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if argv[:1] == ["gpu"]:  # a lent GPU has torch and transformers only: import nothing else on the way
        from .gpu import main as gpu_main
        return gpu_main(argv[1:])
    if argv[:1] == ["index"]:  # the workspace index needs neither torch nor a model
        from .index_bench import main as index_main
        return index_main(argv[1:])
    if argv[:1] == ["retrieval"]:  # lexical retrieval only: no torch, no model
        from .retrieval_bench import main as retrieval_main
        return retrieval_main(argv[1:])
    if argv[:1] == ["ab"]:  # runs the engine bench of two checkouts in child processes: needs nothing loaded here
        from .ab_bench import main as ab_main
        return ab_main(argv[1:])
    from .engine_bench import MODES

    parser = argparse.ArgumentParser(prog="codecue-bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    eng = sub.add_parser("engine", help="decode speed of every mode on the same prompts")
    eng.add_argument("--pair", default="default")
    eng.add_argument("--prompts", help="JSON lines {name, prefix, suffix}; default: HumanEval holes + repetitive code")
    eng.add_argument("--max-new-tokens", type=int, default=64)
    eng.add_argument("--k", type=int, default=8, help="upper bound of the adaptive draft length")
    eng.add_argument("--limit", type=int, default=0, help="use only the first N prompts")
    eng.add_argument("--rounds", type=int, default=1,
                     help="run every prompt N times (modes interleaved each time); print each round's ratios")
    eng.add_argument("--modes", help=f"comma-separated subset of {','.join(MODES)} (llama_cpp_draft on request)")
    eng.add_argument("--llama-server", metavar="URL", help="a running llama-server to use as the llama_cpp mode")
    eng.add_argument("--warm", action="store_true",
                     help="make each prompt ready untimed first, as the server does where the cursor rests")
    eng.add_argument("--no-llama-cpp", action="store_true", help="leave llama.cpp out even when it is built")
    eng.add_argument("--threads", type=int, default=2, help="llama-server threads (-t)")
    eng.add_argument("--with-draft", action="store_true",
                     help="load the draft model even where the calibration says it does not pay")
    eng.add_argument("--target-weights", help="weight format of the target (default: the calibrated choice)")
    eng.add_argument("--draft-weights", help="weight format of the draft (default: the calibrated choice)")
    eng.add_argument("--device")
    eng.add_argument("--dtype")
    eng.add_argument("--v1-dtype", choices=("float32", "bfloat16"),
                     help="the v1_default mode's dtype (default: as the first version chose it, by this CPU's flags); "
                          "float32 reproduces an AVX2-only machine's v1 default on another CPU")
    eng.add_argument("--json", help="write the report here")
    passes = sub.add_parser("passes", help="per-pass costs of the target and the draft")
    passes.add_argument("--pair", default="default")
    passes.add_argument("--k", type=int, default=8)
    passes.add_argument("--device")
    passes.add_argument("--dtype")
    passes.add_argument("--context", type=int, default=1024, help="tokens in the cache before each pass")
    passes.add_argument("--repeats", type=int, default=3)
    passes.add_argument("--lean-ab", action="store_true",
                        help="each pass also through transformers' forward and the lean step's Python layers "
                             "(EngineOptions.lean_step off / python), alternating")
    # These parse their own arguments.
    sub.add_parser("server", help="LSP latency per keystroke (codecue_bench.server_bench)", add_help=False)
    sub.add_parser("prompt", help="line exact match against the suffix budget (codecue_bench.prompt_bench)",
                   add_help=False)
    sub.add_parser("context", help="cross-file completion through the real server (codecue_bench.context_bench)",
                   add_help=False)
    sub.add_parser("layout", help="prompts started over while typing, per budget (codecue_bench.layout_bench)",
                   add_help=False)
    sub.add_parser("gpu", help="GPU pass costs and latency with random weights (codecue_bench.gpu)", add_help=False)
    sub.add_parser("bound", help="the fastest any drafting policy could be here (codecue_bench.bound_bench)",
                   add_help=False)
    sub.add_parser("alternatives", help="what several suggestions cost: Invoked vs Automatic requests "
                   "(codecue_bench.alternatives_bench)", add_help=False)
    sub.add_parser("ab", help="the engine bench of two checkouts, interleaved in one run (codecue_bench.ab_bench)",
                   add_help=False)
    args, rest = parser.parse_known_args(argv)

    from engine.store.config import ModelsError
    try:
        if args.command == "server":
            from .server_bench import main as server_main
            return server_main(rest)
        if args.command == "alternatives":
            from .alternatives_bench import main as alternatives_main
            return alternatives_main(rest)
        if args.command == "prompt":
            from .prompt_bench import main as prompt_main
            return prompt_main(rest)
        if args.command == "context":
            from .context_bench import main as context_main
            return context_main(rest)
        if args.command == "layout":
            from .layout_bench import main as layout_main
            return layout_main(rest)
        if args.command == "bound":
            from .bound_bench import main as bound_main
            return bound_main(rest)
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        if args.command == "passes":
            from engine.engine import Engine
            from engine.loading.pair import load_pair

            from .engine_bench import CONTEXT_TEXT, pass_costs
            pair = load_pair(args.pair, device=args.device, dtype=args.dtype, with_draft=True)
            ids = Engine(pair).encode(CONTEXT_TEXT * (args.context // 2 + 1))[:args.context]
            from engine.weights import (
                torch_thread,  # where load_pair loaded it and the engine would run it
            )
            costs = torch_thread.run(pass_costs, pair, ids, args.k, args.repeats, args.lean_ab)
            print(json.dumps(costs, indent=2))
            return 0
        from .engine_bench import bench_engine
        from .engine_report import print_table
        report = bench_engine(args)
    except ModelsError as exc:
        print(f"codecue-bench: {exc}", file=sys.stderr)
        return 1
    print_table(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
