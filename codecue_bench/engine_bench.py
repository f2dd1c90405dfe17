"""`codecue-bench engine`: every decoding mode on the same prompts, side by side in one process.

Every mode runs on every prompt before the next prompt starts (interleaved), each on a fresh session so no mode
profits from another's cache. Times include prefill: that is what a user waits for on a prompt seen for the first
time. With --warm each prompt is first made ready untimed, as the server does where the cursor rests
(codecue_lsp/warmup.py, Engine.prefill: the target's cache and the draft model's view), and llama.cpp is asked the
same prompt once before (its prompt cache): what a keystroke at a prepared place waits for. llama.cpp (`llama_cpp`) is a
mode like the others when it is built (scripts/build-llama-cpp.sh) or reachable (--llama-server URL): a
llama-server on the same GGUF files, fed the same prompt token ids, greedy, with its prompt cache on.
"""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass

from engine import options
from engine.calibration.measurements import machine_here
from engine.decode.kvcache import cache_for
from engine.engine import Engine
from engine.loading.pair import load_pair
from engine.store.config import ModelsError
from engine.store.fetch import gguf_path
from engine.types import CompletionRequest
from engine.weights import torch_thread

from . import bandwidth, llama_cpp
from .engine_report import add_speedups, by_kind, mode_summary, x_target_by_round
from .prompts import default_prompts, load_prompts

# What a pass costs depends on how many tokens it attends to, not on what they say.
CONTEXT_TEXT = "def fibonacci(n):\n"

# "auto" is CodeCue's default configuration: the drafter chosen by expected gain (engine/decode/policy.py).
# "auto_llamacpp_prefill": the same with llama.cpp prefilling too, where the default prefills in torch
# (engine/weights/torch_prefill.py): the previous default, for the ratio.
MODES = ["target", "auto", "speculative", "lookup", "hybrid", "hf_assisted", "llama_cpp"]
DRAFTER_OF_MODE = {"target": "none", "auto": "auto", "speculative": "draft", "lookup": "lookup", "hybrid": "hybrid",
                   "auto_llamacpp_prefill": "auto", "target_transformers": "none", "auto_transformers": "auto",
                   "speculative_unextended": "draft", "auto_unextended": "auto",
                   "speculative_whole_prompt": "draft", "auto_whole_prompt": "auto"}
NO_TORCH_PREFILL = ("auto_llamacpp_prefill",)
# Short passes through transformers' forward instead of engine/weights/lean_step.py (EngineOptions.lean_step).
NO_LEAN = ("target_transformers", "auto_transformers")
# The draft model without its lookup extension (EngineOptions.draft_extension).
UNEXTENDED = ("speculative_unextended", "auto_unextended")
# The draft model fed the whole prompt, not the code around the cursor (EngineOptions.draft_window).
WHOLE_PROMPT = ("speculative_whole_prompt", "auto_whole_prompt")
NEED_DRAFT_MODEL = ("speculative", "hybrid", "hf_assisted", "speculative_unextended", "speculative_whole_prompt")
LLAMA_MODES = ("llama_cpp", "llama_cpp_draft")


@dataclass
class Run:
    """One mode on one prompt. decode_* exclude the prompt's prefill (None when the mode cannot split it)."""
    tokens: list[int]
    seconds: float
    prefill_s: float | None = None
    decode_s: float | None = None
    decode_tokens: int | None = None
    stats: object = None  # engine CompletionStats for CodeCue's own modes
    prompt_evaluated: int | None = None  # llama.cpp: prompt tokens not served from its prompt cache


def run_own_mode(engine, mode: str, prompt_ids: list[int], max_new_tokens: int, k: int, warm: bool = False,
                 kind: str = "", stop=None) -> Run:

    session = f"bench:{mode}" if warm else None
    if warm:
        engine.prefill(session, prompt_ids).result()
    started = time.perf_counter()
    result = engine.complete(CompletionRequest(prompt_ids, max_new_tokens, drafter=DRAFTER_OF_MODE[mode],
                                               max_draft_tokens=k, session=session, kind=kind, stop=stop))
    seconds = time.perf_counter() - started
    if warm:  # the next prompt starts cold again, its lookups without this completion in the session's history
        engine.forget_session(session).result()
    s = result.stats
    # Decode = the passes after the first token, counted as llama.cpp counts its own (see run_llama).
    return Run(result.token_ids, seconds, s.seconds_prefill, s.seconds_total - s.seconds_first_token,
               s.produced - s.first_pass_tokens, s)


def request_kind(prompt_kind: str) -> str:
    """The request kind the server would send (CompletionRequest.kind): line mode for a single-line hole, block mode
    for the multi-line and repetitive ones."""
    return "line" if prompt_kind == "line" else "block"


def run_hf_assisted(pair, prompt_ids: list[int], max_new_tokens: int, stop_ids: list[int]) -> Run:
    """The baseline to beat: transformers' own assisted generation with the same draft model."""
    import torch

    started = time.perf_counter()
    with torch.inference_mode():
        out = pair.target.generate(torch.tensor([prompt_ids], device=pair.device), assistant_model=pair.draft,
                                   do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=stop_ids,
                                   pad_token_id=stop_ids[0])
    seconds = time.perf_counter() - started
    ids = out[0, len(prompt_ids):].tolist()
    cut = next((n for n, token in enumerate(ids) if token in stop_ids), len(ids))
    return Run(ids[:cut], seconds)


def run_llama(client, prompt_ids: list[int], max_new_tokens: int, stop_ids: list[int], warm: bool = False) -> Run:
    if warm:  # its prompt cache (cache_prompt) then holds the prompt
        llama_cpp.complete(client, prompt_ids, 1, set(stop_ids))
    answer = llama_cpp.complete(client, prompt_ids, max_new_tokens, set(stop_ids))
    # Its own timings: prompt_ms is the prefill (cache misses only) up to the first token, which comes with the
    # prompt's last batch; predicted_ms times the predicted_n - 1 passes after it (a stop token included in n).
    return Run(answer.token_ids, answer.seconds, answer.prompt_ms / 1000, answer.predicted_ms / 1000,
               max(answer.predicted_n - 1, 0), prompt_evaluated=answer.prompt_n)


def pick_modes(args, pair) -> list[str]:
    """The requested modes, or every mode this machine can run. Without a loaded draft model (the calibration
    found it does not pay here; --with-draft loads it anyway) the draft-model modes would silently run something
    else, so they are left out or refused."""
    if args.modes:
        modes = args.modes.split(",")
        known = MODES + list(LLAMA_MODES) + [V1_MODE] + list(NO_TORCH_PREFILL) + list(NO_LEAN) + list(UNEXTENDED)
        known += list(WHOLE_PROMPT)
        unknown = [m for m in modes if m not in known]
        if unknown:
            raise ModelsError(f"unknown mode(s) {', '.join(unknown)}; known: {', '.join(known)}")
        if pair.draft is None and any(m in NEED_DRAFT_MODEL for m in modes):
            raise ModelsError(f"no draft model loaded (the calibration says it does not pay on this machine): "
                              f"pass --with-draft to run {', '.join(m for m in modes if m in NEED_DRAFT_MODEL)}")
        if not getattr(pair.target, "torch_prefill", None) and any(m in NO_TORCH_PREFILL for m in modes):
            raise ModelsError("the target already prefills in llama.cpp here: auto_llamacpp_prefill would be auto")
        return modes
    modes = [m for m in MODES if m not in LLAMA_MODES and (pair.draft is not None or m not in NEED_DRAFT_MODEL)
             and (m != "hf_assisted" or transformers_pair(pair))]
    if pair.draft is None:
        print(f"codecue-bench: no draft model loaded (the calibration says it does not pay here): leaving out "
              f"{', '.join(NEED_DRAFT_MODEL)}; --with-draft loads it", file=sys.stderr)
    if not getattr(args, "no_llama_cpp", False) and (getattr(args, "llama_server", None) or llama_ready(pair)):
        modes.append("llama_cpp")
    return modes


def transformers_pair(pair) -> bool:
    """hf_assisted runs transformers' generate: both models must be transformers models (not weight format
    llamacpp)."""
    import torch

    return isinstance(pair.target, torch.nn.Module) and isinstance(pair.draft, torch.nn.Module)


def llama_ready(pair) -> bool:
    """True when llama-server is built here and the pair's target GGUF is on disk (pairs without a GGUF, such as
    the tests' tiny pair, have no llama.cpp mode)."""

    spec = pair.spec
    return (llama_cpp.server_binary() is not None and spec.target.gguf_file is not None
            and gguf_path(spec.target).is_file())


def start_llama(stack: contextlib.ExitStack, mode: str, args, pair) -> object:
    """An httpx client to the llama-server of a llama mode; the server (when we start it) stops with the stack."""

    if mode == "llama_cpp" and getattr(args, "llama_server", None):
        return stack.enter_context(llama_cpp.http_client(args.llama_server))
    if llama_cpp.server_binary() is None:
        raise ModelsError("the llama_cpp modes need llama.cpp: run scripts/build-llama-cpp.sh "
                          "(or pass --llama-server URL)")
    target = gguf_path(pair.spec.target)
    if not target.is_file():
        raise ModelsError(f"no GGUF for {pair.spec.target.name} at {target}: run `codecue-models fetch`")
    extra: tuple[str, ...] = ()
    if mode == "llama_cpp_draft":
        if pair.spec.draft is None or not gguf_path(pair.spec.draft).is_file():
            raise ModelsError("llama_cpp_draft needs the pair's draft GGUF: run `codecue-models fetch`")
        # Draft flags of the llama.cpp scripts/build-llama-cpp.sh builds; K up to args.k, like CodeCue's adaptive K.
        extra = ("--spec-type", "draft-simple", "-md", str(gguf_path(pair.spec.draft)), "-td",
                 str(args.threads), "--spec-draft-n-max", str(args.k), "--spec-draft-n-min", "0",
                 "--spec-draft-p-min", "0.5")
    server = stack.enter_context(llama_cpp.LlamaServer(target, threads=args.threads, extra_args=extra))
    return stack.enter_context(llama_cpp.http_client(server.url))


V1_MODE = "v1_default"  # the first version's default configuration, loaded beside today's for the ratio


def v1_dtype() -> str:
    """The first version chose the dtype by CPU flags: bf16 with native bf16 instructions, else fp32."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        flags = ""
    return "bfloat16" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "float32"


_V1_ENGINE = {}


def v1_engine(args):
    """Dense target and int8 draft in the flag-chosen dtype, hybrid drafter: what `make demo` ran before."""
    if "engine" not in _V1_ENGINE:
        pair = load_pair(args.pair, device=args.device, dtype=getattr(args, "v1_dtype", None) or v1_dtype(),
                         target_weights="dense",
                         draft_weights="int8", with_draft=True, compile=False)
        _V1_ENGINE["engine"] = Engine(pair)
    return _V1_ENGINE["engine"]


def mode_setting(mode: str, pair):
    """The setting a mode variant runs under (the same drafter as its base mode otherwise)."""
    if mode in NO_TORCH_PREFILL:
        return without_torch_prefill(pair.target)
    if mode in NO_LEAN:
        return options.using(lean_step="off")
    if mode in UNEXTENDED:
        return options.using(draft_extension=False)
    if mode in WHOLE_PROMPT:
        return options.using(draft_window=False)
    return contextlib.nullcontext()


@contextlib.contextmanager
def without_torch_prefill(model):
    """llama.cpp prefills for the duration (engine/weights/torch_prefill.py is set on the model, not per request)."""
    helper = getattr(model, "torch_prefill", None)
    model.torch_prefill = None
    try:
        yield
    finally:
        model.torch_prefill = helper


def bench_engine(args) -> dict:
    # with_draft None: load the draft model only where the calibration says it pays (the default configuration).
    pair = load_pair(args.pair, device=args.device, dtype=args.dtype,
                     with_draft=True if getattr(args, "with_draft", False) else None,
                     target_weights=getattr(args, "target_weights", None),
                     draft_weights=getattr(args, "draft_weights", None))
    engine = Engine(pair)
    prompts = load_prompts(args.prompts) if args.prompts else default_prompts()
    if args.limit:
        prompts = prompts[: args.limit]
    modes = pick_modes(args, pair)
    warm = bool(getattr(args, "warm", False))
    if warm and ("hf_assisted" in modes or V1_MODE in modes):
        raise ModelsError("--warm: hf_assisted and v1_default keep no session to make ready; leave them out")
    stop_ids = sorted(engine.stop_token_ids)
    totals = {m: {"seconds": 0.0, "new_tokens": 0, "passes": 0, "accepted": 0, "drafted": 0, "identical": [],
                  "prefill": 0.0, "draft": 0.0, "decode_s": 0.0, "decode_tokens": 0, "split": True,
                  "extension": 0, "extension_kept": 0} for m in modes}
    rows = []
    with contextlib.ExitStack() as stack:  # llama-servers we start are always stopped, whatever happens
        clients = {m: start_llama(stack, m, args, pair) for m in modes if m in LLAMA_MODES}

        def run_mode(mode, ids, max_new_tokens, kind: str = "") -> Run:
            if mode in clients:
                return run_llama(clients[mode], ids, max_new_tokens, stop_ids, warm)
            if mode == "hf_assisted":
                return torch_thread.run(run_hf_assisted, pair, ids, max_new_tokens, stop_ids)
            if mode == V1_MODE:
                return run_own_mode(v1_engine(args), "hybrid", ids, max_new_tokens, args.k)
            with mode_setting(mode, pair):  # around the untimed prefill of --warm too: it feeds the draft's view
                return run_own_mode(engine, mode, ids, max_new_tokens, args.k, warm, kind)

        first_call = engine.encode_fim("def add(a, b):\n", "\n")
        for mode in modes:  # first calls pay one-time costs (allocations, kernel selection): keep them out
            run_mode(mode, first_call, 4)

        probe = bandwidth.BandwidthProbe()
        rounds = max(1, args.rounds)
        for round_number, n, prompt in ((r + 1, n, p) for r in range(rounds) for n, p in enumerate(prompts)):
            ids = engine.encode_fim(prompt.prefix, prompt.suffix)
            row = {"name": prompt.name, "kind": prompt.kind, "prompt_tokens": len(ids), "round": round_number,
                   "bandwidth_gbs": round(torch_thread.run(probe), 1)}
            runs = {mode: run_mode(mode, ids, args.max_new_tokens, request_kind(prompt.kind)) for mode in modes}
            # Only target alone on this very prompt is a reference: without that run nothing is compared (None),
            # and target alone is not compared with itself.
            reference = runs["target"].tokens if "target" in runs else None
            for mode, run in runs.items():
                t = totals[mode]
                t["seconds"] += run.seconds
                t["new_tokens"] += len(run.tokens)
                if run.decode_s is None:
                    t["split"] = False
                else:
                    t["prefill"] += run.prefill_s
                    t["decode_s"] += run.decode_s
                    t["decode_tokens"] += run.decode_tokens
                if run.stats is not None:
                    t["passes"] += run.stats.target_passes
                    t["accepted"] += run.stats.accepted
                    t["drafted"] += run.stats.drafted
                    t["draft"] += run.stats.seconds_draft
                    t["extension"] += run.stats.drafted_by_source.get("extension", 0)
                    t["extension_kept"] += run.stats.accepted_by_source.get("extension", 0)
                same = None if reference is None or mode == "target" else run.tokens == reference
                if same is not None:
                    t["identical"].append(same)
                row[mode] = {"seconds": round(run.seconds, 3), "tokens": len(run.tokens), "identical": same}
                if run.decode_s is not None:
                    row[mode].update(prefill_s=round(run.prefill_s, 3), decode_s=round(run.decode_s, 3),
                                     decode_tokens=run.decode_tokens)
                if run.prompt_evaluated is not None:
                    row[mode]["prompt_evaluated"] = run.prompt_evaluated
                elif run.stats is not None:  # prompt tokens the request computed (--warm: none; llama.cpp: 1)
                    row[mode]["prompt_evaluated"] = run.stats.new_prompt_tokens
                if same is False and (mode in clients or mode in (V1_MODE,) + NO_TORCH_PREFILL):
                    # Another weight format (Q4_K_M): differing is expected; where is enough, without a pass.
                    row[mode]["first_difference"] = first_difference(reference, run.tokens)
                elif same is False:
                    row[mode]["divergence"] = divergence(pair, ids, reference, run.tokens)
            rows.append(row)
            print(f"[{n + 1}/{len(prompts)}{f' round {round_number}' if rounds > 1 else ''}] {prompt.name:32s} "
                  + "  ".join(f"{m} {row[m]['seconds']:.2f}s" for m in modes), file=sys.stderr, flush=True)
            if n == 0 and round_number == 1:
                print(f"    target completion: {engine.decode(reference or [])!r}", file=sys.stderr)

    report = {"device": str(pair.device), "machine": machine_here(str(pair.device)),
              "dtype": pair.activations, "target_weights": pair.target_weights,
              "target_prefill": "torch-w8a8" if getattr(pair.target, "torch_prefill", None) else "same as decode",
              "pair": args.pair, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "k": args.k,
              "warm": warm, "rounds": rounds, "modes": {}, "per_prompt": rows, "by_kind": by_kind(rows, modes)}
    if rounds > 1:
        report["x_target_by_round"] = x_target_by_round(rows, modes)
        report["bandwidth_gbs_by_round"] = bandwidth.by_round(rows)
    if V1_MODE in modes:
        report["v1_dtype"] = str(v1_engine(args).pair.activations)
    for mode, t in totals.items():
        report["modes"][mode] = mode_summary(t, len(rows))
    add_speedups(report)
    report["pass_costs"] = torch_thread.run(pass_costs, pair, ids, args.k)  # where the engine's passes ran
    engine.close()
    return report


def first_difference(reference: list[int], tokens: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(reference, tokens)) if a != b), min(len(reference), len(tokens)))


def divergence(pair, prompt_ids: list[int], reference: list[int], tokens: list[int]) -> dict:
    """Where a mode's output first differs from target-alone, and how close the target's top two choices were
    there (one-token pass): a near-tie flipped by rounding in a wider pass, or a real disagreement."""
    import torch


    at = first_difference(reference, tokens)
    with torch.inference_mode():
        cache = cache_for(pair.target)
        cache.extend_to(prompt_ids + reference[:at - 1] if at else prompt_ids[:-1])
        logits = cache.forward([(prompt_ids + reference)[len(prompt_ids) + at - 1]], logits="last")[-1]
    top = torch.topk(logits.float(), 2)
    return {"position": at, "target_top2_logit_gap": round(float(top.values[0] - top.values[1]), 4)}


def pass_costs(pair, prompt_ids: list[int], k: int, repeats: int = 3, lean_ab: bool = False) -> dict:
    """Milliseconds of one target pass over 1, 2, ..., K+1 new tokens and of one draft pass, after a prefill.
    lean_ab: each pass also through transformers' forward (lean_step "off") and through the lean step's Python layers
    (lean_step "python"), the three alternating in this process, as `<name>_transformers` and `<name>_python`,
    with the ratios `<name>_lean_speedup` (transformers ÷ lean) and `<name>_layer_speedup` (Python ÷ native layers)."""
    import torch


    variants = ({"": "native", "_python": "python", "_transformers": "off"} if lean_ab
                else {"": options.current().lean_step})

    def best_ms(cache, name, n, logits):
        times = {suffix: [] for suffix in variants}
        for _ in range(repeats):
            for suffix, lean in variants.items():
                with options.using(lean_step=lean):
                    started = time.perf_counter()
                    cache.forward(prompt_ids[-n:], logits=logits)
                    times[suffix].append(time.perf_counter() - started)
                cache.truncate(len(prompt_ids) - n)
        for suffix in variants:
            out[name + suffix] = 1000 * min(times[suffix])
        if lean_ab:
            out[f"{name}_lean_speedup"] = out[name + "_transformers"] / out[name]
            out[f"{name}_layer_speedup"] = out[name + "_python"] / out[name]

    out = {"context": len(prompt_ids)}
    with torch.inference_mode():
        target = cache_for(pair.target)
        for n in sorted({1, 2, 4, k + 1}):
            target.extend_to(prompt_ids[:-n])
            best_ms(target, f"target_{n}", n, "all")
        if pair.draft is not None:
            draft = cache_for(pair.draft)
            draft.extend_to(prompt_ids[:-1])
            best_ms(draft, "draft_1", 1, "last")
            out["draft_cost_ratio"] = out["draft_1"] / out["target_1"]
    return out
