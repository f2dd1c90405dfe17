"""Measure what this machine can do, once, and choose formats from the measurements — never from CPU flags.

For each model of a pair and each weight format x activation dtype (engine/quant.py), time on *this* machine:
a pass over 1, 2, 4, 8 and 16 new tokens after a 256-token context (the K+1 widths of verification; the 1-token pass
is also the draft step) and prefill tokens/s. The models are the real architectures from their config.json with
random weights; only 4 distinct decoder layers are built and the real depth cycles through them, so a pass
streams as many bytes as the real model while building and quantizing every format of both models stays cheap.

Where llama-cpp-python is installed and the pair's GGUF files are on disk, llama.cpp times the real files first
(format "llamacpp", a few seconds each) and its one-token pass shortlists the torch formats of the same model: one
over twice as slow is recorded from its cheap screening pass alone (on an AVX2-only CPU that skips most of them).

The table is cached in $CODECUE_HOME/calibration.json keyed by the processor (CPU model name or GPU name), threads,
torch version and the model's shapes; `codecue-models calibrate` re-measures. From it the engine chooses:
- the target's format and activation dtype: the fastest single-line completion (prefill of 100 tokens + 16
  one-token steps) among the formats that keep the GGUF file's precision (gguf, int8, dense);
- the draft's: the fastest one-token step among all formats (its format changes proposals, never the output);
- whether the draft model can pay at all: its expected speed-up at 90 % acceptance with the measured costs.
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import platform
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .policy import expected_tokens, interpolate
from .quant import Int8Linear, apply_weight_format, dense_linear_weights, set_prefill_weights

log = logging.getLogger(__name__)

TARGET_FORMATS = ("gguf", "int8", "dense")  # keep the GGUF's precision: the target's format decides the output
DRAFT_FORMATS = ("int4", "int8", "dense")  # "gguf" only models a Q4_K_M file; the 0.5B file is mostly Q5_0 (int8 here)
ACTIVATIONS = ("bfloat16", "float32")
WIDTHS = (1, 2, 4, 8, 16)
CONTEXT_TOKENS = 256
PREFILL_TOKENS = 128
DISTINCT_LAYERS = 4  # 4 layers of the 1.5B in int4 (~100 MB) outgrow a 32 MB L3: no flattering cache hits
# The draft model is loaded when it could pay: this speed-up at 90 % acceptance (code completions often reach it).
# Whether it is used is then decided per document from the running acceptance (engine/policy.py).
DRAFT_PAYS_AT = 1.1
DRAFT_ALPHA = 0.9
VERSION = 3  # 3: llama.cpp rows time a torch prefill handing its keys/values over


@dataclass
class Measurement:
    role: str  # "target" or "draft"
    weights: str
    activations: str
    pass_ms: dict[int, float]  # new tokens in the pass -> ms for the whole model
    prefill_tok_s: float
    prefill_dense_tok_s: float = 0.0  # quantized formats: prefill through a dense copy of the weights (0: not measured)
    prefill_torch_tok_s: float = 0.0  # llamacpp: prefill in torch W8A8, keys/values handed over (engine/torch_prefill.py)
    prefill_torch_from: int = 0  # ... and the fewest new tokens from which that is faster (0: never)

    @property
    def prefill_dense(self) -> bool:
        """Prefill through the dense copy: only where measured clearly faster (it costs the dense weights' memory)."""
        return self.prefill_dense_tok_s > 1.15 * self.prefill_tok_s

    @property
    def prefill_torch(self) -> bool:
        """Prefill in torch for llama.cpp: only where measured clearly faster (it costs the int8 weights' memory)."""
        return self.prefill_torch_from > 0 and self.prefill_torch_tok_s > 1.15 * self.prefill_tok_s

    @property
    def prefill_used_tok_s(self) -> float:
        """The prefill rate the engine will run at: through the dense copy or torch only where it is chosen."""
        if self.prefill_torch:
            return self.prefill_torch_tok_s
        return self.prefill_dense_tok_s if self.prefill_dense else self.prefill_tok_s

    @property
    def complete(self) -> bool:
        """False when the combination was screened out after its one-token pass."""
        return self.prefill_tok_s > 0 and all(w in self.pass_ms for w in WIDTHS)

    def single_line_ms(self) -> float:
        """What one short completion costs: 100 new prompt tokens, then 16 one-token steps."""
        return 1000 * 100 / self.prefill_used_tok_s + 16 * self.pass_ms[1]


@dataclass
class Choice:
    target_weights: str
    target_activations: str
    draft_weights: str | None
    draft_activations: str | None
    draft_model: bool  # False: the draft model does not pay here; draft from lookup only
    expected_draft_speedup: float = 0.0
    target_prefill_dense: bool = False
    draft_prefill_dense: bool = False
    target_prefill_torch: bool = False  # a llamacpp target prefills long prompts in torch (engine/torch_prefill.py)
    target_prefill_torch_from: int = 0  # from this many new tokens on


@dataclass
class Calibration:
    key: dict
    measurements: list[Measurement] = field(default_factory=list)
    seconds: float = 0.0

    def get(self, role: str, weights: str, activations: str) -> Measurement | None:
        return next((m for m in self.measurements
                     if (m.role, m.weights, m.activations) == (role, weights, activations)), None)


def processor_name(device: str = "cpu") -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def config_digest(config) -> str:
    shape = {k: getattr(config, k, None) for k in ("model_type", "hidden_size", "intermediate_size",
                                                   "num_attention_heads", "num_key_value_heads", "vocab_size",
                                                   "num_hidden_layers")}
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:12]


def machine_key(device: str, target_config, draft_config) -> dict:
    return {"version": VERSION, "device": device, "processor": processor_name(device),
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "target": config_digest(target_config), "draft": config_digest(draft_config) if draft_config else None}


def key_string(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


# --- measuring ----------------------------------------------------------------------------------------------------
def best_ms(fn, reps: int = 3, budget_s: float = 0.4) -> float:
    """Minimum of up to `reps` timed calls, fewer when a call is slow (a slow format needs no precision)."""
    times: list[float] = []
    spent = time.perf_counter()
    while len(times) < reps and (not times or time.perf_counter() - spent < budget_s):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return 1000 * min(times)


def slice_model(config, layers: int, seed: int = 0):
    """The real architecture with `layers` decoder layers and random (seeded) weights, in fp32. The slice ties its
    embedding to the output head: the same shapes, half the random initialisation."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(config)
    config.num_hidden_layers = layers
    config.tie_word_embeddings = True
    if getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[0]] * layers
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager").eval()


def formatted(model, weights: str):
    """A bf16 copy of the slice in `weights`, with its dense weights kept aside (`calibration_dense`) to time
    prefill through them. For "gguf", odd layers keep v_proj and down_proj in int8, as a Q4_K_M file stores half
    of them in Q6_K."""
    model = copy.deepcopy(model).to(torch.bfloat16)
    dense = {k: v.clone() for k, v in dense_linear_weights(model).items()} if weights != "dense" else None
    if weights == "gguf":
        for i, layer in enumerate(model.model.layers):
            if i % 2:
                layer.self_attn.v_proj = Int8Linear(layer.self_attn.v_proj)
                layer.mlp.down_proj = Int8Linear(layer.mlp.down_proj)
    model = apply_weight_format(model, weights, "cpu")
    model.calibration_dense = dense
    return model


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
    from .kvcache import TrackedCache

    context = CONTEXT_TOKENS if context is None else context
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(100, vocab - 100, (max(context, PREFILL_TOKENS) + max(widths),), generator=gen).tolist()
    cache = TrackedCache(model)
    prefill_ms = 0.0
    with torch.inference_mode():
        cache.forward(ids[:8], logits="none")  # warm-up: first-call allocations stay out of the timings
        if prefill:
            def run_prefill():
                cache.truncate(0)
                cache.forward(ids[:PREFILL_TOKENS], logits="none")
            prefill_ms = best_ms(run_prefill, reps=2)
        cache.truncate(0)
        cache.forward(ids[:context], logits="none")
        out = {}
        for n in widths:
            def verify(n=n):
                cache.forward(ids[context:context + n], logits="all")
                cache.truncate(context)
            out[n] = best_ms(verify)
    return out, prefill_ms


def screen_ms(model) -> float:
    """One-token pass after a one-token context: cheap even for a slow kernel (no prefill to pay for)."""
    from .kvcache import TrackedCache

    cache = TrackedCache(model)
    with torch.inference_mode():
        cache.forward([100], logits="none")  # first-call allocations stay out of the timing

        def step():
            cache.forward([101], logits="all")
            cache.truncate(1)
        return best_ms(step, reps=2, budget_s=0.2)


def measure_role(role: str, config, formats, activations, progress=None, screen: float = 2.0,
                 best_one: float = float("inf")) -> list[Measurement]:
    """Time every format x activation dtype at the model's real depth. A combination whose one-token pass is over
    `screen` x the best so far (best_one: a one-token pass measured before, e.g. llama.cpp's) is recorded with that
    figure only: a measured shortlist (the slow kernels cost seconds a call on 2 cores)."""
    base = slice_model(config, min(DISTINCT_LAYERS, config.num_hidden_layers))
    models = {weights: full_depth(formatted(base, weights), config.num_hidden_layers) for weights in formats}
    del base
    results = []
    for act in activations:  # bf16 first: where its kernels are fast, fp32 is screened out cheaply
        for weights in formats:
            model = models[weights].to(getattr(torch, act))
            one_token = screen_ms(model)
            if one_token > screen * best_one:
                results.append(Measurement(role, weights, act, {1: round(one_token, 2)}, 0.0))
            else:
                best_one = min(best_one, one_token)
                passes, prefill_ms = time_passes(model, config.vocab_size)
                dense_tok_s = 0.0
                if model.calibration_dense:
                    set_prefill_weights(model, model.calibration_dense)
                    dense_tok_s = 1000 * PREFILL_TOKENS / time_passes(model, config.vocab_size, (1,))[1]
                    set_prefill_weights(model, None)
                results.append(Measurement(role, weights, act, {w: round(v, 2) for w, v in passes.items()},
                                           round(1000 * PREFILL_TOKENS / prefill_ms, 1), round(dense_tok_s, 1)))
            if progress is not None:
                progress.update(1)
    return results


def calibrate(target_config, draft_config=None, device: str = "cpu", formats: dict | None = None,
              progress: bool = True, measured_first: list[Measurement] = ()) -> Calibration:
    """measured_first: rows timed before (llama.cpp's, a few seconds): kept, and their one-token pass shortlists
    the torch formats of the same role, so a machine where llama.cpp is far faster skips timing the slow ones."""
    from tqdm import tqdm

    formats = formats or {"target": TARGET_FORMATS, "draft": DRAFT_FORMATS}
    started = time.perf_counter()
    cal = Calibration(key=machine_key(device, target_config, draft_config), measurements=list(measured_first))
    roles = [("target", target_config)] + ([("draft", draft_config)] if draft_config is not None else [])
    total = sum(len(formats[r]) * len(ACTIVATIONS) for r, _ in roles)
    with tqdm(total=total, desc="calibrating formats on this machine", disable=not progress, unit="format") as bar:
        for role, config in roles:
            best_one = min((m.pass_ms[1] for m in measured_first if m.role == role and 1 in m.pass_ms),
                           default=float("inf"))
            cal.measurements += measure_role(role, config, formats[role], ACTIVATIONS, bar, best_one=best_one)
    cal.seconds = round(time.perf_counter() - started, 1)
    return cal


# --- choosing -----------------------------------------------------------------------------------------------------
def expected_speedup(verify_ms: dict[int, float], draft_ms: float, alpha: float = 0.8, max_k: int = 8) -> float:
    """Best over K of tokens per ms with drafting, over tokens per ms of the target alone (the policy's own model:
    E[tokens per pass] = (1 - a^(K+1)) / (1 - a); a pass costs verify(K+1) + K x draft)."""
    alone = 1 / interpolate(verify_ms, 1)
    return max([1.0] + [expected_tokens(alpha, k) / (interpolate(verify_ms, k + 1) + k * draft_ms) / alone
                        for k in range(1, max_k + 1)])


def choose(cal: Calibration, target_formats=TARGET_FORMATS, draft_formats=DRAFT_FORMATS,
           activations=ACTIVATIONS) -> Choice:
    """The fastest target and draft among the candidates. A combination asked for by name that was screened out
    is still taken when it is the only candidate (the user's explicit choice)."""
    def best(role: str, formats, score) -> Measurement | None:
        # llama.cpp picks its own activation types ("ggml"): a llamacpp row competes whenever that format does.
        found = [m for m in cal.measurements if m.role == role and m.weights in formats
                 and (m.activations in activations or m.weights == "llamacpp")]
        complete = [m for m in found if m.complete]
        if complete:
            return min(complete, key=score)
        return min(found, key=lambda m: m.pass_ms[1]) if found else None

    target = best("target", target_formats, Measurement.single_line_ms)
    if target is None:
        raise ValueError(f"no calibration of the target in {target_formats} x {activations}")
    draft = best("draft", draft_formats, lambda m: m.pass_ms[1])
    if draft is None:
        return Choice(target.weights, target.activations, None, None, False,
                      target_prefill_dense=target.prefill_dense, target_prefill_torch=target.prefill_torch,
                      target_prefill_torch_from=target.prefill_torch_from)
    gain = expected_speedup(target.pass_ms, draft.pass_ms[1], DRAFT_ALPHA) if target.complete else 0.0
    return Choice(target.weights, target.activations, draft.weights, draft.activations, gain >= DRAFT_PAYS_AT,
                  round(gain, 2), target.prefill_dense, draft.prefill_dense, target.prefill_torch,
                  target.prefill_torch_from)


# --- the cache ----------------------------------------------------------------------------------------------------
def cache_path(home: Path) -> Path:
    return home / "calibration.json"


def load_cached(home: Path, key: dict) -> Calibration | None:
    try:
        table = json.loads(cache_path(home).read_text())
        entry = table[key_string(key)]
    except (OSError, ValueError, KeyError):
        return None
    measurements = [Measurement(m["role"], m["weights"], m["activations"],
                                {int(w): v for w, v in m["pass_ms"].items()}, m["prefill_tok_s"],
                                m.get("prefill_dense_tok_s", 0.0), m.get("prefill_torch_tok_s", 0.0),
                                m.get("prefill_torch_from", 0))
                    for m in entry["measurements"]]
    return Calibration(key=entry["key"], measurements=measurements, seconds=entry.get("seconds", 0.0))


def save(home: Path, cal: Calibration) -> None:
    path = cache_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    table[key_string(cal.key)] = asdict(cal)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(table, indent=1))
    tmp.replace(path)


def calibration_for(home: Path, target_config, draft_config=None, device: str = "cpu", force: bool = False,
                    progress: bool = True, gguf_files: dict | None = None) -> Calibration:
    """The cached table for this machine and pair, measuring it first when there is none (once per machine).
    gguf_files ({role: path}): also time those files in llama.cpp where it is installed (a few seconds each; added
    to a cached table that lacks them)."""
    key = machine_key(device, target_config, draft_config)
    cal = None if force else load_cached(home, key)
    if cal is None:
        log.info("calibrating weight formats on %s (once per machine)", key["processor"])
        started = time.perf_counter()
        first = llamacpp_rows(gguf_files or {}, device, configs={"target": target_config})
        cal = calibrate(target_config, draft_config, device, progress=progress, measured_first=first)
        cal.seconds = round(time.perf_counter() - started, 1)
        save(home, cal)
    elif add_llamacpp(cal, gguf_files or {}, device, {"target": target_config}):
        save(home, cal)
    return cal


def llamacpp_rows(gguf_files: dict, device: str, have: tuple[Measurement, ...] = (),
                  configs: dict | None = None) -> list[Measurement]:
    """The real GGUF files timed in llama.cpp (format "llamacpp"), for each role that `have` has no such row for.
    configs ({role: config}): also time a torch prefill of that architecture handing its keys/values over."""
    from . import llamacpp, torch_prefill

    if device != "cpu" or not gguf_files or not llamacpp.available():
        return []
    rows = []
    for role, path in gguf_files.items():
        if path is not None and not any(m.role == role and m.weights == "llamacpp" for m in have):
            log.info("timing %s in llama.cpp (%s)", role, path)
            config = (configs or {}).get(role)
            torch_config = config if config is not None and torch_prefill.supports(config) else None
            rows.append(llamacpp.measure(role, path, torch_config=torch_config))
    return rows


def add_llamacpp(cal: Calibration, gguf_files: dict, device: str, configs: dict | None = None) -> bool:
    """Add llama.cpp's rows to a cached table that lacks them (measured before llama-cpp-python was installed)."""
    rows = llamacpp_rows(gguf_files, device, tuple(cal.measurements), configs)
    cal.measurements += rows
    return bool(rows)


def format_table(cal: Calibration, choice: Choice | None = None) -> str:
    key = cal.key
    lines = [f"calibration on {key['processor']} ({key['cpu_capability']}, {key['threads']} threads, "
             f"torch {key['torch']}; measured in {cal.seconds:.0f} s)",
             f"{'model':7s} {'weights':8s} {'act':9s} " + " ".join(f"{f'{w} tok':>9s}" for w in WIDTHS)
             + f" {'prefill':>11s} {'1-line':>8s}"]
    for m in cal.measurements:
        cells = " ".join(f"{m.pass_ms[w]:7.1f}ms" if w in m.pass_ms else f"{'-':>9s}" for w in WIDTHS)
        dense = f" (dense {m.prefill_dense_tok_s:.0f})" if m.prefill_dense_tok_s else ""
        dense += (f" (torch w8a8 {m.prefill_torch_tok_s:.0f}, faster from "
                  f"{m.prefill_torch_from or 'no'} tokens)" if m.prefill_torch_tok_s else "")
        tail = (f" {m.prefill_tok_s:7.0f}t/s {m.single_line_ms():6.0f}ms{dense}" if m.complete
                else "  (screened out: slow)")
        lines.append(f"{m.role:7s} {m.weights:8s} {m.activations:9s} {cells}{tail}")
    if choice is not None:
        lines.append(f"chosen: target {choice.target_weights}/{choice.target_activations}"
                     + (f", draft {choice.draft_weights}/{choice.draft_activations}" if choice.draft_weights else "")
                     + (", prefill through dense weights" if choice.target_prefill_dense else "")
                     + (f", prefill in torch w8a8 from {choice.target_prefill_torch_from} new tokens"
                        if choice.target_prefill_torch else "")
                     + (f"; draft model {'on' if choice.draft_model else 'off'} (expected "
                        f"{choice.expected_draft_speedup:.2f}x at {DRAFT_ALPHA:.0%} acceptance)" if choice.draft_weights else ""))
    return "\n".join(lines)
