"""`codecue-bench gpu --out DIR [--tiny]`: what the engine's loop costs on a GPU, with the real architectures.

For a lent GPU that reaches no registry and holds no weights: the Qwen2.5-Coder-1.5B target and 0.5B draft are
built from their configs with random weights (bf16, CUDA) and timed through the project's own TrackedCache and
speculative loop. With random weights acceptance means nothing, so the script measures costs, not acceptance:
  - per-pass costs of the target for 1/2/4/8/16 (and K+1) new tokens after a ~1,000-token prefill, the draft's
    one-token pass, and prefill tokens/s;
  - the decode loop's tokens/s: target alone, the draft model with K pinned (its acceptance is an artefact of the
    random weights, reported but not meaningful: read its cost) and an oracle drafter that proposes the target's
    own greedy output (acceptance ~1, c = 0: the best case of the loop itself);
  - the expected speedup for alpha in {0.5, 0.7, 0.8, 0.9}: (1 - a^(K+1)) / ((1 - a)(1 + K c)) with the measured
    c, and the same with the measured K+1-token verify cost in place of a one-token pass;
  - single-line completion latency p50/p99: a ~1,000-token prompt whose cache holds all but its last ~20 tokens,
    plus 16 new tokens, 30 trials;
  - all of the above again with the engine's own compiled static steps (engine/weights/compiled.py: StaticCache,
    torch.compile per pass width, CUDA graphs on a GPU), when compile works (--compile auto: on a GPU only).
Acceptance comes from CPU runs with the real weights (codecue-bench engine); combine the two for the GPU figure.
`--tiny` runs the same code on CPU with a tiny config in seconds (the CPU test does that). Writes gpu.json and
gpu.md under --out. Needs only torch and transformers.
"""
from __future__ import annotations

import argparse
import inspect
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

# The real shapes (Qwen2.5-Coder-1.5B / 0.5B config.json); a few hundred bytes travel instead of 1.6 GB of weights.
COMMON = dict(vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
              tie_word_embeddings=True, hidden_act="silu", bos_token_id=151643, eos_token_id=151643)
TARGET = dict(COMMON, hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
              intermediate_size=8960)
DRAFT = dict(COMMON, hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
             intermediate_size=4864)
TINY = dict(vocab_size=512, max_position_embeddings=2048, rope_theta=1e6, rms_norm_eps=1e-6,
            tie_word_embeddings=True, hidden_act="silu")
TINY_TARGET = dict(TINY, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=128)
TINY_DRAFT = dict(TINY, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                  intermediate_size=64)
ALPHAS = (0.5, 0.7, 0.8, 0.9)
WIDTHS = (1, 2, 4, 8, 16)


def take_cache_kwarg(model) -> None:
    """The engine passes the KV cache as `cache=` (transformers 5.24); older 5.x releases (the GPU image has 5.17)
    call it `past_key_values` and would silently ignore `cache=`. Renamed on the instance, so the model stays a
    Qwen2ForCausalLM and the engine's lean step (engine/weights/lean_step.py) still recognises it."""
    forward = model.forward

    def forward_with_cache(*args, cache=None, **kwargs):
        return forward(*args, past_key_values=cache, **kwargs)
    model.forward = forward_with_cache


def build(shape: dict, device: torch.device, dtype: torch.dtype, attn: str, seed: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(**shape)
    config._attn_implementation = attn
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    model = model.to(dtype).eval()
    if "cache" not in inspect.signature(model.forward).parameters:
        take_cache_kwarg(model)
    return model


def check_cache_is_used(model, device) -> None:
    """Fail loudly rather than time a model that silently ignores its KV cache. The first pass is longer than
    the lean step's (engine/weights/lean_step.py), so it goes through the model's own forward."""
    from engine.decode.kvcache import TrackedCache
    from engine.weights.lean_step import MAX_TOKENS

    cache = TrackedCache(model)
    with torch.inference_mode():
        cache.forward(list(range(1, MAX_TOKENS + 2)), logits="none")
        cache.forward([1], logits="last")
    held = int(cache.cache.get_seq_length())
    if held != MAX_TOKENS + 2:
        raise RuntimeError(f"the KV cache holds {held} tokens after {MAX_TOKENS + 2}: this transformers ignores the "
                           "engine's cache")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats: int) -> list[float]:
    """Seconds per call; the first call (allocations, kernel selection) is not counted."""
    fn()
    out = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t0)
    return out


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def pass_costs(target, draft, prompt: list[int], widths, device, repeats: int) -> dict:
    """ms (median) of one target pass over n new tokens after a prefill of the prompt, for each n, and of one
    draft pass; prefill tokens/s of both."""
    from engine.decode.kvcache import TrackedCache

    out = {}
    with torch.inference_mode():
        for name, model, ns, logits in (("target", target, widths, "all"), ("draft", draft, (1,), "last")):
            cache = TrackedCache(model)
            cache.extend_to(prompt)
            for n in ns:
                def step(n=n):
                    cache.forward(prompt[-n:], logits=logits)
                    cache.truncate(len(prompt))
                out[f"{name}_{n}_ms"] = 1000 * statistics.median(timed(step, device, repeats))

            def prefill():
                cache.truncate(0)
                cache.extend_to(prompt)
            out[f"{name}_prefill_tok_s"] = len(prompt) / statistics.median(timed(prefill, device, max(2, repeats // 5)))
    out["c"] = out["draft_1_ms"] / out["target_1_ms"]
    return out


class OracleDrafter:
    """Proposes the target's own greedy continuation: every draft is accepted and costs nothing, so the loop runs
    at its best case (acceptance ~1, c = 0). Random weights cannot give a real acceptance rate."""
    name = "oracle"

    def __init__(self, prompt_len: int, reference: list[int]):
        self.prompt_len, self.reference = prompt_len, reference

    def propose(self, tokens, k, cancelled, finishes=None):
        from engine.decode.drafters import Draft

        done = len(tokens) - self.prompt_len
        found = self.reference[done:done + k]
        return Draft(tokens=list(found), probs=[None] * len(found), source="oracle")


def run_loop(target, drafter, prompt: list[int], new_tokens: int, k: int, cache=None):
    """One completion through the project's own speculative loop with K pinned; returns the result."""
    from engine.decode.kvcache import TrackedCache
    from engine.decode.speculative import SpeculationController, generate
    from engine.types import CompletionRequest

    request = CompletionRequest(prompt, new_tokens, drafter="draft" if k else "none", max_draft_tokens=k,
                                adaptive_k=False)
    controller = SpeculationController(max_k=k, k=k, adaptive=False)
    with torch.inference_mode():
        # No stop tokens: random weights would stop at random places; every run writes exactly new_tokens.
        return generate(cache or TrackedCache(target), drafter, controller, request, lambda ids: "", set())


def decode_loops(target, draft, prompt, new_tokens: int, k: int, device, repeats: int) -> dict:
    """Decode tokens/s (after the target's prefill) and end-to-end ms of one completion, per drafter."""
    from engine.decode.drafters import ModelDrafter, NoDrafter
    from engine.decode.kvcache import TrackedCache

    reference = run_loop(target, NoDrafter(), prompt, new_tokens, 0).token_ids

    def drafter_for(mode):
        if mode == "draft_model":
            # Its prefill happens here, outside the loop's decode time (end-to-end still counts it).
            # min_confidence 0: a random draft is never confident, and K must stay pinned.
            cache = TrackedCache(draft)
            with torch.inference_mode():
                cache.extend_to(prompt[:-1])
            return ModelDrafter(draft, cache, min_confidence=0.0)
        return NoDrafter() if mode == "target_alone" else OracleDrafter(len(prompt), reference)

    out = {}
    for mode in ("target_alone", "draft_model", "oracle"):
        kk = 0 if mode == "target_alone" else k
        results = []
        seconds = timed(lambda: results.append(run_loop(target, drafter_for(mode), prompt, new_tokens, kk)),
                        device, repeats)
        decode = [r.stats.seconds_total - r.stats.seconds_prefill for r in results[1:]]
        last = results[-1]
        out[mode] = {"k": kk, "decode_tok_s": new_tokens / statistics.median(decode),
                     "end_to_end_ms": 1000 * statistics.median(seconds),
                     "mean_tokens_per_pass": last.stats.mean_accepted,
                     # Target alone is the reference run: nothing to compare it with (None, "n/c").
                     "identical_to_target": None if mode == "target_alone" else last.token_ids == reference}
    base = out["target_alone"]["decode_tok_s"]
    for m in out.values():
        m["speedup_vs_target_alone"] = m["decode_tok_s"] / base
    return out


def expected_speedups(costs: dict, ks) -> dict:
    """Tokens per target pass (1 - a^(K+1)) / (1 - a), divided by the pass's cost relative to target-alone: with
    the draft model (c per draft token), and with lookup drafts (prompt/workspace, c ~ 0: a few Python ops)."""
    out = {}
    for k in ks:
        verify = costs.get(f"target_{k + 1}_ms", costs["target_1_ms"]) / costs["target_1_ms"]
        for a in ALPHAS:
            gain = (1 - a ** (k + 1)) / (1 - a)
            out[f"K={k} alpha={a}"] = {"formula": gain / (1 + k * costs["c"]),
                                       "with_verify_cost": gain / (verify + k * costs["c"]),
                                       "lookup_with_verify_cost": gain / verify}
    return out


def completion_latency(target, prompt: list[int], new_tokens: int, keep_back: int, trials: int, device) -> dict:
    """Like a keystroke: the session cache holds all of the prompt but its last `keep_back` tokens (the line being
    typed), so each trial prefills those and writes new_tokens, target alone. Then the same with two sessions
    (documents) taking turns, as when the user switches files: with CUDA graphs each cache has its own recordings."""
    from engine.decode.drafters import NoDrafter
    from engine.decode.kvcache import TrackedCache

    def trials_over(caches) -> list[float]:
        times = []
        for trial in range(trials + 1):
            cache = caches[trial % len(caches)]
            cache.truncate(len(prompt) - keep_back)
            sync(device)
            t0 = time.perf_counter()
            run_loop(target, NoDrafter(), prompt, new_tokens, 0, cache=cache)
            sync(device)
            if trial:  # the first trial pays one-time costs
                times.append(1000 * (time.perf_counter() - t0))
        return times

    # All of it in inference mode, as the engine runs: the cache's tensors are inference tensors, which may not be
    # changed in place (a cut) outside it.
    with torch.inference_mode():
        caches = [TrackedCache(target) for _ in range(2)]
        for cache in caches:
            cache.extend_to(prompt[:-keep_back])
        one, two = trials_over(caches[:1]), trials_over(caches)
    return {"trials": trials, "prompt_tokens": len(prompt), "recomputed_tokens": keep_back,
            "new_tokens": new_tokens, "p50_ms": pct(one, 50), "p99_ms": pct(one, 99), "max_ms": max(one),
            "two_sessions_p50_ms": pct(two, 50), "two_sessions_p99_ms": pct(two, 99)}


def measure(target, draft, prompt, widths, ks, args, device, step) -> dict:
    """Every measurement of one configuration (eager, or the engine's compiled static steps)."""
    step("pass costs")
    costs = pass_costs(target, draft, prompt, widths, device, args.repeats)
    step("decode loops")
    decode = decode_loops(target, draft, prompt, args.new_tokens, args.k, device, max(2, args.repeats // 5))
    step("completion latency")
    latency = completion_latency(target, prompt, 4 if args.tiny else 16, min(20, len(prompt) // 2), args.trials,
                                 device)
    return {"widths": list(widths), "k": args.k, "pass_costs": costs, "decode": decode,
            "expected_speedup": expected_speedups(costs, ks), "completion_latency": latency}


def compile_engine_steps(target, draft, home: Path, widths) -> bool:
    """The engine's own compiled static steps (engine/weights/compiled.py: StaticCache + torch.compile per pass width,
    CUDA graphs on a GPU), attached the way load_pair attaches them. False when compile is unavailable."""
    from engine.weights.compiled import DRAFT_WIDTHS, attach

    return attach(target, widths, home=home, label="target", progress=True) and \
        attach(draft, DRAFT_WIDTHS, last_only=True, home=home, label="draft", progress=True)


def section(title: str, r: dict) -> list[str]:
    c = r["pass_costs"]
    lines = [f"## {title}", "", "| pass | ms |", "|---|---|"]
    lines += [f"| target, {n} new tokens | {c[f'target_{n}_ms']:.2f} |" for n in r["widths"]]
    lines += [f"| draft, 1 token | {c['draft_1_ms']:.2f} |", "",
              f"c = draft / target one-token pass = {c['c']:.3f}; prefill {c['target_prefill_tok_s']:.0f} tok/s "
              f"(target), {c['draft_prefill_tok_s']:.0f} tok/s (draft).", "",
              "| loop | K | decode tok/s | x target alone | tokens per pass | end-to-end ms | identical to target |",
              "|---|---|---|---|---|---|---|"]
    for name, m in r["decode"].items():
        identical = "n/c" if m["identical_to_target"] is None else str(m["identical_to_target"])
        lines.append(f"| {name} | {m['k']} | {m['decode_tok_s']:.1f} | {m['speedup_vs_target_alone']:.2f} | "
                     f"{m['mean_tokens_per_pass']:.2f} | {m['end_to_end_ms']:.0f} | {identical} |")
    if any(m["identical_to_target"] is False for m in r["decode"].values()):
        lines += ["", "Not identical in bf16: a pass over K+1 tokens rounds differently from K+1 one-token passes, "
                  "and random weights make near-ties common (lossless is defined and tested in fp32)."]
    lat = r["completion_latency"]
    lines += ["", f"Single-line completion ({lat['prompt_tokens']}-token prompt, last {lat['recomputed_tokens']} "
              f"recomputed, {lat['new_tokens']} new tokens, {lat['trials']} trials, target alone): "
              f"**p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms**; two sessions taking turns: p50 "
              f"{lat['two_sessions_p50_ms']:.1f} ms, p99 {lat['two_sessions_p99_ms']:.1f} ms.", "",
              "| expected speedup | draft model, formula (1+Kc) | draft model, measured K+1 verify cost | lookup drafts "
              "(c ~ 0), measured verify cost |", "|---|---|---|---|"]
    lines += [f"| {key} | {v['formula']:.2f} | {v['with_verify_cost']:.2f} | {v['lookup_with_verify_cost']:.2f} |"
              for key, v in r["expected_speedup"].items()]
    return lines + [""]


def markdown(report: dict) -> str:
    lines = [f"# codecue-bench gpu: {report['device_name']}", "",
             f"torch {report['torch']}, transformers {report['transformers']}, {report['dtype']}, attention "
             f"{report['attn']}, {'tiny config' if report['tiny'] else 'Qwen2.5-Coder-1.5B / 0.5B shapes'}, random "
             f"weights, prompt {report['prompt_tokens']} tokens, {report['seconds']} s in all.", ""]
    if "eager" in report:
        lines += section("Eager (DynamicCache)", report["eager"])
    compiled = report.get("compiled")
    if isinstance(compiled, dict) and "pass_costs" in compiled:
        lines += section(f"Compiled static steps (engine/weights/compiled.py; compiled in {report['compile_seconds']} s)",
                         compiled)
    elif compiled:
        lines += ["## Compiled static steps", "", f"not measured: {compiled}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="codecue-bench gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for gpu.json and gpu.md")
    parser.add_argument("--tiny", action="store_true", help="tiny config on CPU (a test runs this in seconds)")
    parser.add_argument("--device", help="default: cuda when available (cpu with --tiny)")
    parser.add_argument("--attn", default=None, help="attention implementation (default: sdpa on GPU, eager on CPU)")
    parser.add_argument("--k", type=int, default=4, help="pinned draft length of the decode loops")
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--compile", choices=["auto", "on", "off", "only"], default="auto",
                        help="also measure the engine's compiled static steps (auto: on a GPU only; only: skip the "
                             "eager measurements)")
    parser.add_argument("--compiled-widths", default=None, help="target pass widths to compile (default: the engine's, "
                        "engine/compiled.TARGET_WIDTHS)")
    args = parser.parse_args(argv)
    if args.tiny:
        args.prompt_tokens, args.new_tokens, args.trials, args.repeats = min(args.prompt_tokens, 64), 8, 3, 3
    device = torch.device(args.device or ("cpu" if args.tiny or not torch.cuda.is_available() else "cuda"))
    if device.type != "cuda" and not args.tiny:
        print("codecue-bench gpu: no CUDA device here; use --tiny for a CPU check", file=sys.stderr)
        return 1
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    attn = args.attn or ("sdpa" if device.type == "cuda" else "eager")
    started = time.perf_counter()

    def step(name):
        print(f"[{time.perf_counter() - started:6.1f}s] {name}", file=sys.stderr, flush=True)

    target = build(TINY_TARGET if args.tiny else TARGET, device, dtype, attn, seed=0)
    draft = build(TINY_DRAFT if args.tiny else DRAFT, device, dtype, attn, seed=1)
    check_cache_is_used(target, device)
    prompt = torch.randint(10, target.config.vocab_size, (args.prompt_tokens,),
                           generator=torch.Generator().manual_seed(2)).tolist()
    import transformers

    report = {"device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
              else platform.processor() or "cpu", "torch": torch.__version__, "transformers": transformers.__version__,
              "dtype": str(dtype).replace("torch.", ""), "attn": attn, "tiny": args.tiny,
              "prompt_tokens": len(prompt)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def write():
        report["seconds"] = round(time.perf_counter() - started, 1)
        (out / "gpu.json").write_text(json.dumps(report, indent=2))
        (out / "gpu.md").write_text(markdown(report))

    ks = sorted({2, 4, 8, args.k})
    if args.compile != "only":
        report["eager"] = measure(target, draft, prompt, sorted(set(WIDTHS) | {k + 1 for k in ks}), ks, args,
                                  device, step)
        write()  # the eager figures survive a compile that fails or runs out of time
    if args.compile in ("on", "only") or (args.compile == "auto" and device.type == "cuda"):
        step("compiling the engine's static steps")
        try:
            compile_started = time.perf_counter()
            # Compiled kernels stay out of --out: a lent machine sends back a few files, not inductor's cache.
            from engine.weights.compiled import TARGET_WIDTHS
            widths = tuple(map(int, args.compiled_widths.split(","))) if args.compiled_widths else TARGET_WIDTHS
            if compile_engine_steps(target, draft, Path(tempfile.gettempdir()) / "codecue-gpu-bench", widths):
                report["compile_seconds"] = round(time.perf_counter() - compile_started, 1)
                ks = [w - 1 for w in widths if w > 1] or [1]  # the verify widths it compiled
                report["compiled"] = measure(target, draft, prompt, widths, ks, args, device, step)
            else:
                report["compiled"] = "torch.compile unavailable here (see the log); the engine runs eagerly"
        except Exception as exc:  # never lose the eager figures to the optional part
            report["compiled"] = f"failed: {type(exc).__name__}: {exc}"[:500]
        write()
    print(markdown(report))
    print(f"wrote {out / 'gpu.json'} and {out / 'gpu.md'} in {report['seconds']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
