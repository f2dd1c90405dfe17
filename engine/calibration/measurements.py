"""Measure what this machine can do, once, and choose formats from the measurements — never from CPU flags.

For each model of a pair and each weight format x activation dtype (engine/weights/formats.py), time on *this* machine:
a pass over 1, 2, 4, 8 and 16 new tokens after a 1,024-token context (the K+1 widths of verification; the 1-token pass
is also the draft step) and prefill tokens/s. The models are the real architectures from their config.json with
random weights (engine/calibration/torch_timing.py). The measuring runs once, in a child process (`python -m
engine.calibration.run`), so that no torch or llama.cpp thread pool is left behind in the process that serves.

Where llama-cpp-python is installed and the pair's GGUF files are on disk, llama.cpp times the real files first
(format "llamacpp", a few seconds each) and its one-token pass shortlists the torch formats of the same model: one
over twice as slow is recorded from its cheap screening pass alone (on an AVX2-only CPU that skips most of them).

The table is cached in $CODECUE_HOME/calibration.json keyed by the processor (CPU model name or GPU name), threads,
torch version and the model's shapes; `codecue-models calibrate` re-measures. From it the engine chooses:
- the draft's format: the cheapest cycle of proposals (one-token steps, the first one also feeding it the committed
  tokens) among all formats (its format changes proposals, never the output);
- the target's format and activation dtype: the cheapest single-line completion (prefill of 100 tokens + 16 tokens)
  among the formats that keep the GGUF file's precision (gguf, vnni, int8, dense), drafted by that draft where
  that is cheaper at a typical acceptance: a format with cheap verify passes (vnni) gets the credit for them;
- whether the draft model can pay at all: its expected speed-up at 90 % acceptance with the measured costs.
The vnni formats (engine/weights/vnni.py) are timed where the CPU has AVX-512 VNNI and their kernel builds
(formats_here).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from engine.decode.pass_costs import interpolate
from engine.decode.policy import expected_tokens
from engine.machine import processor_name
from engine.weights import vnni

log = logging.getLogger(__name__)

TARGET_FORMATS = ("gguf", "int8", "dense")  # keep the GGUF's precision: the target's format decides the output
DRAFT_FORMATS = ("int4", "int8", "dense")  # "gguf" only models a Q4_K_M file; the 0.5B file is mostly Q5_0 (int8 here)
VNNI_FORMATS = {"target": ("vnni",), "draft": ("vnni4",)}  # where engine/weights/vnni.py's kernel is offered
ACTIVATIONS = ("bfloat16", "float32")
WIDTHS = (1, 2, 4, 8, 16)
# Passes are timed after this many tokens of context: what the server's prompts hold (promptTokens auto: 1,024-1,536).
# Timed after a short context the vnni target looked cheaper than llama.cpp's, yet at the prompts' length its attention
# cost more and llama.cpp's answered more keystrokes in time (docs/performance.md, "Weight formats").
CONTEXT_TOKENS = 1024
# The draft model is loaded when it could pay: this speed-up at 90 % acceptance (code completions often reach it).
# Whether it is used is then decided per document from the running acceptance (engine/decode/policy.py).
DRAFT_PAYS_AT = 1.1
DRAFT_ALPHA = 0.9
# The target is chosen by what a completion costs with the draft model where it pays, at the acceptance the draft
# model reaches over the bench prompts: cheap verify passes count.
TYPICAL_ALPHA = 0.8
COMPLETION_PROMPT, COMPLETION_TOKENS = 100, 16  # a short completion: new prompt tokens, then tokens generated
# The prompt lookup's drafts, which `auto` takes wherever they pay, as measured over the bench prompts (lookup alone,
# K = 2): the share of passes a draft was found for, and of drafted tokens accepted. They make a cheap verify pass
# worth something even where the draft model does not pay.
LOOKUP_HIT, LOOKUP_ALPHA = 0.35, 0.5
VERSION = 9  # 3: llama.cpp rows time a torch prefill handing its keys/values over; 4: grouped attention; 5: vnni;
# 6: passes after 1,024 tokens of context; 7: short torch passes through engine/weights/lean_step.py; 8: its C++ layers;
# 9: close finalists (llama.cpp vs torch) timed again side by side; formats screened by one-layer probes first


@dataclass
class Measurement:
    role: str  # "target" or "draft"
    weights: str
    activations: str
    pass_ms: dict[int, float]  # new tokens in the pass -> ms for the whole model
    prefill_tok_s: float
    prefill_dense_tok_s: float = 0.0  # quantized formats: prefill through a copy of the weights, dense or int8 W8A8
    # for the vnni formats (engine/weights/formats.py; 0: not measured)
    prefill_torch_tok_s: float = 0.0  # llamacpp: prefill in torch W8A8, keys/values handed over (engine/weights/torch_prefill.py)
    prefill_torch_from: int = 0  # ... and the fewest new tokens from which that is faster (0: never)
    side_by_side: bool = False  # pass_ms timed again alternating with its rival's (engine/calibration/finalists.py)
    probe_only: bool = False  # screened out by its one-layer probe (calibrate_torch.probe_formats): pass_ms[1] is
    # the probe's figure, comparable only with other probes

    def __post_init__(self):
        self.pass_ms = no_dearer_than_wider(self.pass_ms)

    @property
    def prefill_dense(self) -> bool:
        """Prefill through the copy: only where measured clearly faster (it costs the copy's memory)."""
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
        """What one short completion costs: 100 new prompt tokens, then 16 tokens; a target's steps with the free
        drafts of the prompt lookup where its verify passes are cheap enough for them to pay (lookup_speedup)."""
        lookup = lookup_speedup(self.pass_ms) if self.role == "target" and self.complete else 1.0
        return 1000 * COMPLETION_PROMPT / self.prefill_used_tok_s + COMPLETION_TOKENS * self.pass_ms[1] / lookup

    def draft_cycle_ms(self, k: int = 4) -> float:
        """What a draft model costs for k proposals: the first pass of a cycle also feeds it the tokens committed
        since its last one (engine/decode/drafters.py), 2 when its drafts were all accepted, so that pass is a
        2-token one. On 2 cores llama.cpp's 2-token pass costs about twice its one-token pass, the vnni kernel's little
        more than one."""
        return (k - 1) * self.pass_ms[1] + interpolate(self.pass_ms, 2)

    def drafted_line_ms(self, draft: "Measurement | None", alpha: float = TYPICAL_ALPHA) -> float:
        """The same completion, drafted by `draft` where that is cheaper: the draft model prefills the prompt too,
        and each token costs a pass at the best K (expected_speedup) over the tokens it yields."""
        alone = self.single_line_ms()
        if draft is None or not (self.complete and draft.complete):
            return alone
        speedup = expected_speedup(self.pass_ms, draft.pass_ms[1], alpha)
        drafted = (1000 * COMPLETION_PROMPT * (1 / self.prefill_used_tok_s + 1 / draft.prefill_used_tok_s)
                   + COMPLETION_TOKENS * self.pass_ms[1] / speedup)
        return min(alone, drafted)


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
    target_prefill_torch: bool = False  # a llamacpp target prefills long prompts in torch (engine/weights/torch_prefill.py)
    target_prefill_torch_from: int = 0  # from this many new tokens on


@dataclass
class Calibration:
    key: dict
    measurements: list[Measurement] = field(default_factory=list)
    seconds: float = 0.0

    def get(self, role: str, weights: str, activations: str) -> Measurement | None:
        return next((m for m in self.measurements
                     if (m.role, m.weights, m.activations) == (role, weights, activations)), None)


STEP_WIDTHS = 16  # passes under this many tokens are decode and verify steps: one kernel, the same weights read


def no_dearer_than_wider(pass_ms: dict[int, float]) -> dict[int, float]:
    """A step over fewer tokens reads the same weights through the same kernel and does less: where it timed dearer
    than a wider step, a slow moment of the machine was timed, and the wider step's figure bounds it (seen on a
    Zen 4 VM: one- and two-token passes timed dearer than the 4-token pass of the same run). Prefill widths go
    through other kernels and are left alone."""
    bounded, cheapest = dict(pass_ms), float("inf")
    for width in sorted((w for w in pass_ms if w < STEP_WIDTHS), reverse=True):
        cheapest = bounded[width] = min(bounded[width], cheapest)
    return bounded


def formats_here(device: str = "cpu") -> dict[str, tuple[str, ...]]:
    """The torch formats each role is timed in on this machine: the vnni formats where the CPU has AVX-512 VNNI or
    AVX2 and their kernel builds (flags shortlist, the build decides; the timing then decides whether they are
    used)."""

    with_vnni = not device.startswith("cuda") and vnni.offered()
    return {role: formats + (VNNI_FORMATS[role] if with_vnni else ())
            for role, formats in (("target", TARGET_FORMATS), ("draft", DRAFT_FORMATS))}


def vnni_path(formats: dict[str, tuple[str, ...]]) -> str | None:
    """The vector path of the vnni kernel the vnni formats (formats_here) run through ("avx512-vnni", "avx-vnni",
    "avx2"), None without them."""

    return vnni.kernel().simd() if "vnni" in formats["target"] else None


def config_digest(config) -> str:
    shape = {k: getattr(config, k, None) for k in ("model_type", "hidden_size", "intermediate_size",
                                                   "num_attention_heads", "num_key_value_heads", "vocab_size",
                                                   "num_hidden_layers")}
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:12]


def machine_key(device: str, target_config, draft_config) -> dict:
    formats = formats_here(device)
    return {"version": VERSION, "device": device, **machine_here(device, formats),
            "formats": formats,  # a compiler installed later (vnni) is a new table, not a gap in one
            "kernel_source": _kernel_source(formats),  # an edited vnni kernel is timed again
            "target": config_digest(target_config), "draft": config_digest(draft_config) if draft_config else None}


def _kernel_source(formats: dict[str, tuple[str, ...]]) -> str | None:
    return vnni.source_digest() if "vnni" in formats["target"] else None


def machine_here(device: str = "cpu", formats: dict[str, tuple[str, ...]] | None = None) -> dict:
    """The parts of machine_key that say which machine a figure came from (benchmarks record them beside their
    numbers: machines of one kind differ, an AVX2-only Zen 3 from an AVX-512 Zen 4). formats: formats_here's, where
    the caller has them."""
    return {"processor": processor_name(device), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            # the vnni kernel's AVX-512 or AVX2 build ($CODECUE_KERNEL_MARCH) times differently
            "vnni_kernel": vnni_path(formats or formats_here(device)), "threads": torch.get_num_threads(),
            "torch": torch.__version__}


def describe_machine(key: dict, note: str = "") -> str:
    """'AMD EPYC (family 25 model 1) (AVX2, vnni kernel avx2, 2 threads, torch 2.13.0+cpu)' from machine_key's or
    machine_here's fields; note goes inside the brackets, last."""
    kernel = f", vnni kernel {key['vnni_kernel']}" if key.get("vnni_kernel") else ""
    return (f"{key['processor']} ({key['cpu_capability']}{kernel}, {key['threads']} threads, "
            f"torch {key['torch']}{note})")


def key_string(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


# --- choosing -----------------------------------------------------------------------------------------------------
def expected_speedup(verify_ms: dict[int, float], draft_ms: float, alpha: float = 0.8, max_k: int = 8) -> float:
    """Best over K of tokens per ms with drafting, over tokens per ms of the target alone (the policy's own model:
    E[tokens per pass] = (1 - a^(K+1)) / (1 - a); a pass costs verify(K+1) + K x draft)."""
    alone = 1 / interpolate(verify_ms, 1)
    return max([1.0] + [expected_tokens(alpha, k) / (interpolate(verify_ms, k + 1) + k * draft_ms) / alone
                        for k in range(1, max_k + 1)])


def lookup_speedup(verify_ms: dict[int, float], hit: float = LOOKUP_HIT, alpha: float = LOOKUP_ALPHA,
                   max_k: int = 8) -> float:
    """Tokens per ms of decoding with the prompt lookup's drafts (free: no model runs), over plain decoding, at the
    best K: a pass that finds a draft (a `hit` of them) verifies K + 1 tokens and yields 1 + the accepted ones. Where a
    K + 1-token pass costs nearly K + 1 one-token passes (llama.cpp's kernels on 2 cores) this stays 1."""
    plain = interpolate(verify_ms, 1)
    return max([1.0] + [(1 + hit * (expected_tokens(alpha, k) - 1)) * plain
                        / (hit * interpolate(verify_ms, k + 1) + (1 - hit) * plain) for k in range(1, max_k + 1)])


def choose(cal: Calibration, target_formats=TARGET_FORMATS, draft_formats=DRAFT_FORMATS,
           activations=ACTIVATIONS) -> Choice:
    """The cheapest draft (Measurement.draft_cycle_ms), then the target with the cheapest short completion, drafted
    by it where that pays (Measurement.drafted_line_ms). A combination asked for by name that was screened out is
    still taken when it is the only candidate (the user's explicit choice)."""
    def best(role: str, formats, score) -> Measurement | None:
        # llama.cpp picks its own activation types ("ggml"): a llamacpp row competes whenever that format does.
        found = [m for m in cal.measurements if m.role == role and m.weights in formats
                 and (m.activations in activations or m.weights == "llamacpp")]
        complete = [m for m in found if m.complete]
        if complete:
            return min(complete, key=score)
        # Only screened rows: the cheapest full pass, then the cheapest probe (a probe is not a pass).
        return min(found, key=lambda m: (m.probe_only, m.pass_ms[1])) if found else None

    draft = best("draft", draft_formats, Measurement.draft_cycle_ms)
    target = best("target", target_formats, lambda m: m.drafted_line_ms(draft))
    if target is None:
        raise ValueError(f"no calibration of the target in {target_formats} x {activations}")
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
                                m.get("prefill_torch_from", 0), m.get("side_by_side", False),
                                m.get("probe_only", False))
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
