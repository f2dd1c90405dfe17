"""How engine/calibration/measurements.py times the torch formats: the real architectures from their config.json
with random weights.

Only DISTINCT_LAYERS decoder layers are built and the real depth cycles through them, so a pass streams as many bytes
as the real model while building and quantizing every format of both models stays cheap. A format whose one-token
pass is far slower than the best so far (llama.cpp's, timed first) is recorded from that pass alone. Passes are
timed after CONTEXT_TOKENS tokens of context, written straight into the cache (fill_context), not prefilled.
"""
from __future__ import annotations

import copy
import logging
import time

import torch

from engine.calibration import measurements as calibrate
from engine.calibration.finalists import PassTimer, rival_in_reach, time_side_by_side
from engine.calibration import llamacpp_timing
from engine.calibration.measurements import (
    ACTIVATIONS,
    WIDTHS,
    Calibration,
    Measurement,
    formats_here,
    machine_key,
)
from engine.decode.kvcache import TrackedCache
from engine.weights.attention import register
from engine.weights.formats import VNNI_FORMATS, apply_weight_format
from engine.weights.quantized import (
    Int8Linear,
    dense_linear_weights,
    set_prefill_weights,
)
from engine.weights.vnni import VnniLinear

log = logging.getLogger(__name__)

CONTEXT_TOKENS = calibrate.CONTEXT_TOKENS
PREFILL_TOKENS = 128
DISTINCT_LAYERS = 4  # 4 layers of the 1.5B in int4 (~100 MB) outgrow a 32 MB L3: no flattering cache hits
# A prefill gets a second call unless its first took longer than this: the first call at the prefill's width is a
# warm-up (it runs measurably slower than the calls after it), as llama.cpp's rows get one (llamacpp_timing.measure);
# only a format this slow needs no precision.
PREFILL_SECOND_CALL_S = 6.0
PROBE_VOCAB = 1024  # the probes' output head: small, so that building a probe costs no head quantization
clock = time.perf_counter  # what the pass and prefill timings read: tests put a simulated clock in its place


def best_ms(fn, reps: int = 3, budget_s: float = 0.4) -> float:
    """Minimum of up to `reps` timed calls, fewer when a call is slow (a slow format needs no precision)."""
    times: list[float] = []
    spent = clock()
    while len(times) < reps and (not times or clock() - spent < budget_s):
        started = clock()
        fn()
        times.append(clock() - started)
    return 1000 * min(times)


def slice_model(config, layers: int, seed: int = 0):
    """The real architecture with `layers` decoder layers and random (seeded) weights, in fp32. The slice ties its
    embedding to the output head: the same shapes, half the random weights."""
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    config = copy.deepcopy(config)
    config.num_hidden_layers = layers
    config.tie_word_embeddings = True
    if getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[0]] * layers

    with no_init_weights():  # torch's and transformers' initialisations: 8-10 s of the 1.5B's slice on 2 cores
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=register()).eval()
    model.tie_weights()
    fill_random(model, seed)
    return model


RANDOM_BLOCK = 1_000_003  # prime: no row of a weight matrix repeats the one above it


def fill_random(model, seed: int) -> None:
    """Norm weights 1, every other parameter N(0, 0.02) as transformers initialises them, from one block of random
    values repeated: drawing ~400 M values one by one is what took those seconds, and a pass costs what it reads
    and computes, whatever the values."""
    gen = torch.Generator().manual_seed(seed)
    block = 0.02 * torch.randn(RANDOM_BLOCK, generator=gen)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
                continue
            flat = param.view(-1)
            for start in range(0, flat.numel(), RANDOM_BLOCK):
                piece = flat[start:start + RANDOM_BLOCK]
                piece.copy_(block[:piece.numel()])


def formatted(model, weights: str):
    """A bf16 copy of the slice in `weights`, with its dense weights kept aside (`calibration_dense`) to time
    prefill through a copy of them (engine/weights/formats.py: set_prefill_weights). For "gguf" and "vnni", odd layers
    keep v_proj and down_proj in int8, as a Q4_K_M file stores half of them in Q6_K."""
    model = copy.deepcopy(model).to(torch.bfloat16)
    dense = {k: v.clone() for k, v in dense_linear_weights(model).items()} if weights != "dense" else None
    if weights in ("gguf", "vnni"):
        int8 = Int8Linear if weights == "gguf" else vnni_int8
        for i, layer in enumerate(model.model.layers):
            if i % 2:
                layer.self_attn.v_proj = int8(layer.self_attn.v_proj)
                layer.mlp.down_proj = int8(layer.mlp.down_proj)
    model = apply_weight_format(model, weights, "cpu")
    model.calibration_dense = dense
    return model


def vnni_int8(linear):
    return VnniLinear.from_dense_int8(linear.weight, linear.bias, linear.weight.dtype)


def full_depth(model, depth: int):
    """The slice run as a model of the real depth: `depth` decoder layers that cycle through the slice's distinct
    layers (shared weights, each with its own cache slot). Per token it streams as many bytes as the real model,
    as long as the distinct layers together outgrow the last-level cache."""
    distinct = list(model.model.layers)
    layers = []
    for i in range(depth):
        layer = copy.copy(distinct[i % len(distinct)])
        layer._modules = dict(layer._modules)
        layer.self_attn = copy.copy(layer.self_attn)
        layer.self_attn.layer_idx = i
        layers.append(layer)
    model.model.layers = torch.nn.ModuleList(layers)
    model.config.num_hidden_layers = depth
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [model.config.layer_types[0]] * depth
    return model


def time_passes(model, vocab: int, widths=WIDTHS, prefill: bool = True,
                context: int | None = None) -> tuple[dict[int, float], float]:
    """ms of a pass over each width after `context` tokens (CONTEXT_TOKENS), and ms to prefill PREFILL_TOKENS."""

    context = CONTEXT_TOKENS if context is None else context
    cache, ids = warm_cache(model, vocab, max(context, PREFILL_TOKENS) + max(widths))
    prefill_ms = best_prefill_ms(cache, ids) if prefill else 0.0
    with torch.inference_mode():
        fill_context(cache, ids[:context])
    timer = PassTimer(cache, ids, context, clock=clock)
    return best_ms_each(timer.pass_ms, widths), prefill_ms


def best_ms_each(pass_ms, widths, rounds: int = 3, budget_s: float = 0.4) -> dict[int, float]:
    """pass_ms(width) at each width, the minimum of up to `rounds` rounds, a round timing every width in turn (a
    slow minute then lands on one round of every width, not on all calls of one: calibrate_finalists'
    time_side_by_side); fewer rounds when a round took over budget_s per width (a slow format needs no precision)."""
    best = dict.fromkeys(widths, float("inf"))
    started = clock()
    for _ in range(rounds):
        for width in widths:
            best[width] = min(best[width], pass_ms(width))
        if clock() - started > budget_s * len(widths):
            break
    return best


def best_prefill_ms(cache, ids: list[int]) -> float:
    """ms to prefill PREFILL_TOKENS of ids from an empty cache: best of 2 unless the first took over
    PREFILL_SECOND_CALL_S. The first prefill at a new width pays first-call costs (oneDNN's and the vnni kernel's
    alike), and with one call the torch rows lost prefill speed that llama.cpp's, timed after a warm-up, kept:
    enough to flip the target's choice under the AVX2 emulation."""
    def run_prefill():
        cache.truncate(0)
        cache.forward(ids[:PREFILL_TOKENS], logits="none")
    with torch.inference_mode():
        return best_ms(run_prefill, reps=2, budget_s=PREFILL_SECOND_CALL_S)


def pass_timer(model, vocab: int):
    """The model's passes after the calibration's context, to time again beside llama.cpp's (calibrate_finalists)."""

    cache, ids = warm_cache(model, vocab, CONTEXT_TOKENS + max(WIDTHS))
    with torch.inference_mode():
        fill_context(cache, ids[:CONTEXT_TOKENS])
    return PassTimer(cache, ids, CONTEXT_TOKENS, clock=clock)


def warm_cache(model, vocab: int, count: int):
    """A cache of the model after one warm-up pass (first-call allocations stay out of the timings), and `count`
    random token ids (seeded) to time with."""

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(100, vocab - 100, (count,), generator=gen).tolist()
    cache = TrackedCache(model)
    with torch.inference_mode():
        cache.forward(ids[:8], logits="none")
    return cache, ids


def fill_context(cache, ids: list[int]) -> None:
    """The cache as if it held ids, with random keys and values: a pass costs what it attends to, whatever the
    values, and prefilling 1,024 tokens in every format would cost the calibration minutes."""
    config = cache.model.config
    heads = config.num_key_value_heads
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dtype = cache.model.get_input_embeddings().weight.dtype
    cache.truncate(0)
    gen = torch.Generator().manual_seed(2)
    for layer in range(config.num_hidden_layers):
        keys = torch.randn(1, heads, len(ids), dim, generator=gen).to(dtype)
        cache.cache.update(keys, torch.randn(keys.shape, generator=gen).to(dtype), layer)
    cache.ids = list(ids)


def screen_ms(model, slow_s: float | None = None) -> float:
    """One-token pass after a one-token context: cheap even for a slow kernel (no prefill to pay for). slow_s: a
    first call slower than this is the answer itself (a slow format needs no precision, nor a second slow call)."""

    cache = TrackedCache(model)
    with torch.inference_mode():
        started = clock()
        cache.forward([100], logits="none")  # first-call allocations stay out of the timing...
        first_ms = 1000 * (clock() - started)
        if slow_s is not None and first_ms > 1000 * slow_s:
            return first_ms  # ... unless the call is so slow that they do not matter

        def step():
            cache.forward([101], logits="all")
            cache.truncate(1)
        return best_ms(step, reps=2, budget_s=0.2)


def context_one_token_ms(model, vocab: int) -> float:
    """A one-token pass after the calibration's context (random keys and values, no prefill): the screen before a
    whole row is timed, comparable with llama.cpp's one-token pass, timed after the same context. After a
    one-token context (screen_ms) the attention over the context is missing, and that is where activation dtypes
    part: under the AVX2 emulation vnni in bf16 screened close to fp32 after one token, ran at twice its cost after
    1,024, and its whole row was timed for nothing."""
    return time_passes(model, vocab, widths=(1,), prefill=False)[0][1]


def probe_formats(config, formats, activations) -> dict[tuple[str, str], float]:
    """{(weights, activations): ms} of a one-token pass through one decoder layer of the real shape, run at the real
    depth, in each format: a ranking of the formats' kernels for about a second a format, where building the real
    slice costs several times that on 2 cores (most of it quantizing the 151,936-row output head). Not a real pass (a
    1,024-token head, one layer that may stay in the cache): its figures only compare formats with one another."""
    small = copy.deepcopy(config)
    small.vocab_size, small.pad_token_id = PROBE_VOCAB, None
    base = slice_model(small, 1)
    probes = {}
    for weights in formats:
        model = full_depth(formatted(base, weights), config.num_hidden_layers)
        for act in activations:
            probes[(weights, act)] = screen_ms(model.to(getattr(torch, act)), slow_s=0.2)
    return probes


def measure_role(role: str, config, formats, activations, progress=None, screen: float = 2.0,
                 best_one: float = float("inf"), rival: tuple[Measurement, object] | None = None,
                 same_weights_screen: float = 1.5) -> list[Measurement]:
    """Time every format x activation dtype at the model's real depth. A combination whose one-layer probe
    (probe_formats) is over `screen` x the best probe is recorded from its probe alone, without building it; one
    whose one-token pass is over `screen` x the best so far (best_one: a one-token pass measured before, e.g.
    llama.cpp's) is recorded with that figure only: a measured shortlist (the slow kernels cost seconds a call on 2
    cores). The same weights in another activation dtype are screened tighter (same_weights_screen x that
    format's best one-token pass): the kernel and the bytes read are the same, only the ops around them differ,
    and in the tables recorded on the Zen 4 (native and AVX2-emulated) every dtype 1.5x behind at one token was
    still behind at 16 tokens; with the looser screen alone, vnni in bf16 was timed in full under the AVX2
    emulation for nothing.
    rival: (llama.cpp's row of this role, its open PassTimer): where the best torch row is a close call, both are
    timed again side by side."""
    probes = probe_formats(config, formats, activations) if len(formats) * len(activations) > 1 else {}
    best_probe = min(probes.values(), default=float("inf"))
    base = slice_model(config, min(DISTINCT_LAYERS, config.num_hidden_layers))
    models = {}  # built when first timed: a format screened by its probe is never built
    results = []
    best_of_weights: dict[str, float] = {}  # the best one-token pass timed in full, per weight format
    # The best probe first: once its one-token pass is timed, a real pass over twice it is screened out before its
    # whole row is timed (a probe can miss what only the full depth shows: under the AVX2 emulation vnni4 in bf16
    # passed its probe yet ran far behind fp32 at full depth). Without probes: bf16 first, fp32 then screened out.
    combos = sorted(((w, a) for a in activations for w in formats), key=lambda c: probes.get(c, 0.0))
    for weights, act in combos:
        probe = probes.get((weights, act))
        if probe is not None and probe > screen * best_probe:
            results.append(Measurement(role, weights, act, {1: round(probe, 2)}, 0.0, probe_only=True))
            if progress is not None:
                progress.update(1)
            continue
        if weights not in models:
            models[weights] = full_depth(formatted(base, weights), config.num_hidden_layers)
        model = models[weights].to(getattr(torch, act))
        one_token = context_one_token_ms(model, config.vocab_size)
        same_weights_best = best_of_weights.get(weights, float("inf"))
        if one_token > screen * best_one or one_token > same_weights_screen * same_weights_best:
            results.append(Measurement(role, weights, act, {1: round(one_token, 2)}, 0.0))
        else:
            best_one = min(best_one, one_token)
            best_of_weights[weights] = min(best_of_weights.get(weights, float("inf")), one_token)
            passes, prefill_ms = time_passes(model, config.vocab_size)
            dense_tok_s = copy_prefill_tok_s(model, weights, config, prefill_ms)
            results.append(Measurement(role, weights, act, {w: round(v, 2) for w, v in passes.items()},
                                       round(1000 * PREFILL_TOKENS / prefill_ms, 1), round(dense_tok_s, 1)))
        if progress is not None:
            progress.update(1)
    del base
    if rival is not None:
        retime_close_finalists(rival, results, models, config)
    return results


def copy_prefill_tok_s(model, weights: str, config, own_prefill_ms: float) -> float:
    """Prefill tokens/s through the format's copy of its weights (engine/weights/formats.py: dense, or int8 W8A8 for
    the vnni formats); 0 without one. A W8A8 copy is screened first, as llama.cpp's torch prefill is: where the CPU
    has no fast int8 matmul (`torch._int_mm` an order of magnitude slower than fp32 on an AVX2-only Zen 3) timing
    it would take minutes, and the calibration only needs to know that it loses to the format's own prefill."""

    if not model.calibration_dense:
        return 0.0
    if weights in VNNI_FORMATS:
        screen_s = llamacpp_timing.estimated_prefill_s(config, PREFILL_TOKENS)
        if screen_s > 2 * own_prefill_ms / 1000:
            log.info("%s: w8a8 prefill copy screened out (~%.1f s for %d tokens, its own prefill %.1f s)",
                     weights, screen_s, PREFILL_TOKENS, own_prefill_ms / 1000)
            return PREFILL_TOKENS / screen_s
    set_prefill_weights(model, model.calibration_dense)
    try:
        return 1000 * PREFILL_TOKENS / best_prefill_ms(*warm_cache(model, config.vocab_size, PREFILL_TOKENS))
    finally:
        set_prefill_weights(model, None)


def retime_close_finalists(rival: tuple[Measurement, object], results: list[Measurement], models: dict,
                           config) -> None:

    rival_row, rival_timer = rival
    finalist = rival_in_reach(rival_row, results)
    if finalist is None:
        return
    timer = pass_timer(models[finalist.weights].to(getattr(torch, finalist.activations)), config.vocab_size)
    try:
        time_side_by_side([(rival_row, rival_timer), (finalist, timer)])
    except Exception as exc:  # the rows keep their own timings (they change only once all is timed)
        log.warning("timing %s side by side with llama.cpp failed (%s): kept the figures timed apart",
                    finalist.weights, exc)
    finally:
        timer.close()


def calibrate(target_config, draft_config=None, device: str = "cpu", formats: dict | None = None,
              progress: bool = True, measured_first: list[Measurement] = (), rivals: dict | None = None) -> Calibration:
    """measured_first: rows timed before (llama.cpp's, a few seconds): kept, and their one-token pass shortlists
    the torch formats of the same role, so a machine where llama.cpp is far faster skips timing the slow ones.
    rivals ({role: PassTimer}): those rows' models, still open: a close call is timed again side by side."""
    from tqdm import tqdm

    formats = formats or formats_here(device)
    started = time.perf_counter()
    cal = Calibration(key=machine_key(device, target_config, draft_config), measurements=list(measured_first))
    roles = [("target", target_config)] + ([("draft", draft_config)] if draft_config is not None else [])
    total = sum(len(formats[r]) * len(ACTIVATIONS) for r, _ in roles)
    with tqdm(total=total, desc="calibrating formats on this machine", disable=not progress, unit="format") as bar:
        for role, config in roles:
            best_one = min((m.pass_ms[1] for m in measured_first if m.role == role and 1 in m.pass_ms),
                           default=float("inf"))
            first = next((m for m in measured_first if m.role == role and m.weights == "llamacpp"), None)
            timer = (rivals or {}).get(role)
            cal.measurements += measure_role(role, config, formats[role], ACTIVATIONS, bar, best_one=best_one,
                                             rival=(first, timer) if first is not None and timer is not None else None)
    cal.seconds = round(time.perf_counter() - started, 1)
    return cal
