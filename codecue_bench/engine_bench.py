"""codecue-bench: speed measured side by side in one process, so ratios hold on a noisy machine.

    codecue-bench engine --pair default [--prompts FILE] [--max-new-tokens 64] [--limit N] --json OUT
    codecue-bench passes --pair default          # per-pass costs: target for 1..K+1 tokens, draft, ratio c
    codecue-bench server FILE ...                # LSP keystroke latency (codecue_lsp.bench_server)
    codecue-bench prompt [--suffix-budgets 0,32,128,512]   # line exact match vs suffix budget

Every mode runs on every prompt before the next prompt starts (interleaved), each on a fresh session so no mode
profits from another's cache. Times include prefill: that is what a user waits for.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

MODES = ["target", "speculative", "lookup", "hybrid", "hf_assisted"]
DRAFTER_OF_MODE = {"target": "none", "speculative": "draft", "lookup": "lookup", "hybrid": "hybrid"}


def run_own_mode(engine, mode: str, prompt_ids: list[int], max_new_tokens: int, k: int):
    from .types import CompletionRequest

    result = engine.complete(CompletionRequest(prompt_ids, max_new_tokens, drafter=DRAFTER_OF_MODE[mode],
                                               max_draft_tokens=k))
    return result.token_ids, result.stats


def run_hf_assisted(pair, prompt_ids: list[int], max_new_tokens: int, stop_ids: list[int]):
    """The baseline to beat: transformers' own assisted generation with the same draft model."""
    import torch

    with torch.inference_mode():
        out = pair.target.generate(torch.tensor([prompt_ids], device=pair.device), assistant_model=pair.draft,
                                   do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stop_ids,
                                   pad_token_id=stop_ids[0])
    ids = out[0, len(prompt_ids):].tolist()
    for n, token in enumerate(ids):
        if token in stop_ids:
            return ids[:n], None
    return ids, None


def bench_engine(args) -> dict:
    from .bench_prompts import default_prompts, load_prompts
    from .engine import Engine
    from .models import load_pair

    pair = load_pair(args.pair, device=args.device, dtype=args.dtype)
    engine = Engine(pair)
    prompts = load_prompts(args.prompts) if args.prompts else default_prompts()
    if args.limit:
        prompts = prompts[: args.limit]
    modes = args.modes.split(",") if args.modes else MODES
    stop_ids = sorted(engine.stop_token_ids)
    totals = {m: {"seconds": 0.0, "new_tokens": 0, "passes": 0, "accepted": 0, "drafted": 0, "identical": True,
                  "prefill": 0.0, "draft": 0.0} for m in modes}
    rows = []
    warm = engine.encode(engine.fim.format("def add(a, b):\n", "\n"))
    for mode in modes:  # first calls pay one-time costs (allocations, kernel selection): keep them out of timing
        run_mode(engine, pair, mode, warm, 4, args.k, stop_ids)

    for n, prompt in enumerate(prompts):
        ids = engine.encode(engine.fim.format(prompt.prefix, prompt.suffix))
        reference = None
        row = {"name": prompt.name, "kind": prompt.kind, "prompt_tokens": len(ids)}
        for mode in modes:
            started = time.perf_counter()
            tokens, stats = run_mode(engine, pair, mode, ids, args.max_new_tokens, args.k, stop_ids)
            seconds = time.perf_counter() - started
            reference = tokens if mode == "target" else reference
            t = totals[mode]
            t["seconds"] += seconds
            t["new_tokens"] += len(tokens)
            if stats is not None:
                t["passes"] += stats.target_passes
                t["accepted"] += stats.accepted
                t["drafted"] += stats.drafted
                t["prefill"] += stats.seconds_prefill
                t["draft"] += stats.seconds_draft
            same = reference is None or tokens == reference
            t["identical"] &= same
            row[mode] = {"seconds": round(seconds, 3), "tokens": len(tokens), "identical": same}
            if not same:
                row[mode]["divergence"] = divergence(pair, ids, reference, tokens)
        rows.append(row)
        print(f"[{n + 1}/{len(prompts)}] {prompt.name:32s} " + "  ".join(
            f"{m} {row[m]['seconds']:.2f}s" for m in modes), file=sys.stderr, flush=True)
        if n == 0:
            print(f"    target completion: {engine.decode(reference or [])!r}", file=sys.stderr)

    report = {"device": str(pair.device), "dtype": str(pair.dtype).replace("torch.", ""), "pair": args.pair,
              "prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "k": args.k, "modes": {},
              "per_prompt": rows}
    for mode, t in totals.items():
        report["modes"][mode] = {
            "tokens_per_s": t["new_tokens"] / t["seconds"] if t["seconds"] else 0.0,
            "seconds": t["seconds"], "new_tokens": t["new_tokens"],
            "mean_accepted": (t["accepted"] + t["passes"]) / t["passes"] if t["passes"] else None,
            # Without the target's prompt prefill (the same work in every mode): the decoding itself.
            "decode_tokens_per_s": (t["new_tokens"] / (t["seconds"] - t["prefill"])
                                    if mode != "hf_assisted" and t["seconds"] > t["prefill"] else None),
            "seconds_prefill": t["prefill"], "seconds_drafting": t["draft"],
            "acceptance_rate": t["accepted"] / t["drafted"] if t["drafted"] else None,
            "identical_to_target": t["identical"]}
    # Same tokens in every mode (checked above), so a ratio of rates is a ratio of times.
    for base in ("target", "hf_assisted"):
        if base in report["modes"]:
            report[f"speedup_vs_{base}"] = {m: report["modes"][m]["tokens_per_s"] / report["modes"][base]["tokens_per_s"]
                                            for m in modes if report["modes"][base]["tokens_per_s"]}
    report["pass_costs"] = pass_costs(pair, ids, args.k)
    engine.close()
    return report


def divergence(pair, prompt_ids: list[int], reference: list[int], tokens: list[int]) -> dict:
    """Where a mode's output first differs from target-alone, and how close the target's top two choices were
    there (one-token pass): a near-tie flipped by bf16 rounding in a wider pass, or a real disagreement."""
    import torch

    at = next((i for i, (a, b) in enumerate(zip(reference, tokens)) if a != b), min(len(reference), len(tokens)))
    with torch.inference_mode():
        logits = pair.target(input_ids=torch.tensor([prompt_ids + reference[:at]], device=pair.device)).logits[0, -1]
    top = torch.topk(logits.float(), 2)
    return {"position": at, "target_top2_logit_gap": round(float(top.values[0] - top.values[1]), 4)}


def run_mode(engine, pair, mode, ids, max_new_tokens, k, stop_ids):
    if mode == "hf_assisted":
        return run_hf_assisted(pair, ids, max_new_tokens, stop_ids)
    return run_own_mode(engine, mode, ids, max_new_tokens, k)


def pass_costs(pair, prompt_ids: list[int], k: int, repeats: int = 3) -> dict:
    """Milliseconds of one target pass over 1, 2, ..., K+1 new tokens and of one draft pass, after a prefill."""
    import torch

    from .kvcache import TrackedCache

    def best_ms(cache, n, logits):
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            cache.forward(prompt_ids[-n:], logits=logits)
            times.append(time.perf_counter() - started)
            cache.truncate(len(prompt_ids) - n)
        return 1000 * min(times)

    out = {}
    with torch.inference_mode():
        target = TrackedCache(pair.target)
        for n in sorted({1, 2, 4, k + 1}):
            target.extend_to(prompt_ids[:-n])
            out[f"target_{n}"] = best_ms(target, n, "all")
        if pair.draft is not None:
            draft = TrackedCache(pair.draft)
            draft.extend_to(prompt_ids[:-1])
            out["draft_1"] = best_ms(draft, 1, "last")
            out["draft_cost_ratio"] = out["draft_1"] / out["target_1"]
    return out


def print_table(report: dict) -> None:
    print(f"\n{report['prompts']} prompts, {report['device']} {report['dtype']}, max {report['max_new_tokens']} "
          f"new tokens, K<={report['k']}")
    print(f"{'mode':14s} {'tok/s':>7s} {'x target':>9s} {'x hf_assisted':>14s} {'decode tok/s':>13s} "
          f"{'mean acc':>9s} {'identical':>10s}")
    nan = float("nan")
    for mode, m in report["modes"].items():
        vs_t = report.get("speedup_vs_target", {}).get(mode)
        vs_h = report.get("speedup_vs_hf_assisted", {}).get(mode)
        acc, dec = m["mean_accepted"], m.get("decode_tokens_per_s")
        print(f"{mode:14s} {m['tokens_per_s']:7.2f} {vs_t or 0:9.2f} {vs_h or 0:14.2f} "
              f"{dec if dec is not None else nan:13.2f} {acc if acc is not None else nan:9.2f} "
              f"{str(m['identical_to_target']):>10s}")
    for row in report.get("per_prompt", []):
        for mode in report["modes"]:
            if "divergence" in row.get(mode, {}):
                print(f"  {mode} differs from target on {row['name']}: {row[mode]['divergence']}")
    costs = report.get("pass_costs", {})
    if costs:
        print("pass costs (ms): " + ", ".join(f"{k} {v:.1f}" if k != "draft_cost_ratio" else f"c = {v:.2f}"
                                              for k, v in costs.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="codecue-bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    eng = sub.add_parser("engine", help="decode speed of every mode on the same prompts")
    eng.add_argument("--pair", default="default")
    eng.add_argument("--prompts", help="JSON lines {name, prefix, suffix}; default: HumanEval holes + repetitive code")
    eng.add_argument("--max-new-tokens", type=int, default=64)
    eng.add_argument("--k", type=int, default=8, help="upper bound of the adaptive draft length")
    eng.add_argument("--limit", type=int, default=0, help="use only the first N prompts")
    eng.add_argument("--modes", help=f"comma-separated subset of {','.join(MODES)}")
    eng.add_argument("--device")
    eng.add_argument("--dtype")
    eng.add_argument("--json", help="write the report here")
    passes = sub.add_parser("passes", help="per-pass costs of the target and the draft")
    passes.add_argument("--pair", default="default")
    passes.add_argument("--k", type=int, default=8)
    passes.add_argument("--device")
    passes.add_argument("--dtype")
    sub.add_parser("server", help="LSP latency per keystroke (see codecue_lsp.bench_server)", add_help=False)
    sub.add_parser("prompt", help="line exact match against the suffix budget (codecue_lsp.bench_prompt)",
                   add_help=False)
    args, rest = parser.parse_known_args(argv)

    from .models import ModelsError
    try:
        if args.command == "server":
            from codecue_lsp.bench_server import main as server_main
            return server_main(rest)
        if args.command == "prompt":
            from codecue_lsp.bench_prompt import main as prompt_main
            return prompt_main(rest)
        if rest:
            parser.error(f"unrecognized arguments: {' '.join(rest)}")
        if args.command == "passes":
            from .engine import Engine
            from .models import load_pair
            pair = load_pair(args.pair, device=args.device, dtype=args.dtype)
            ids = Engine(pair).encode("def fibonacci(n):\n" * 40)
            print(json.dumps(pass_costs(pair, ids, args.k), indent=2))
            return 0
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
