"""Loading a pair: both models in the formats this machine runs fastest (engine/loading/choice.py), the tokenizer,
the calibrated pass costs, and the per-format caches kept beside each model."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from engine import options
from engine.loading.choice import pass_costs_from, resolve_formats, size_prefill_chunks
from engine.paths import codecue_home
from engine.store.config import (
    ModelsConfig,
    ModelsError,
    ModelSpec,
    PairSpec,
    cache_dir,
    gguf_file,
    load_config,
    missing_gguf_message,
    model_dir,
)
from engine.store.local import check_pair, is_ready, model_config, not_ready_message
from engine.weights import draft_vocab, llamacpp, llamacpp_probe, torch_prefill
from engine.weights.attention import register as register_attention
from engine.weights.compiled import DRAFT_WIDTHS, TARGET_WIDTHS, attach
from engine.weights.formats import (
    GGUF_FORMATS,
    VNNI_FORMATS,
    apply_weight_format,
    canonical_format,
    format_cache_file,
    load_formatted,
    save_formatted,
)
from engine.weights.lean_step import lean_step_for
from engine.weights.quantized import dense_linear_weights, set_prefill_weights
from engine.weights.torch_thread import runs_on_torch_thread

log = logging.getLogger(__name__)


def pick_device(device: str | None = None):
    """device, else CODECUE_DEVICE (EngineOptions.device), else cuda where available, else cpu."""
    import torch

    return torch.device(device or options.current().device or ("cuda" if torch.cuda.is_available() else "cpu"))


@dataclass
class LoadedPair:
    spec: PairSpec
    target: object  # a transformers causal LM
    draft: object | None
    tokenizer: object  # a transformers tokenizer
    device: object
    dtype: object  # the target's activation dtype
    target_weights: str = "dense"
    draft_weights: str | None = None
    draft_dtype: object = None
    costs: object | None = None  # engine.decode.pass_costs.PassCosts from the calibration, when there is one
    calibration: object | None = None  # engine.calibration.measurements.Calibration
    choice: object | None = None  # engine.calibration.measurements.Choice
    compiled: bool = False  # the target runs compiled static steps

    @property
    def activations(self) -> str:
        """What the target computes in: a torch dtype's name, or "ggml" (llama.cpp picks per weight type)."""
        if self.target_weights == "llamacpp":
            return "ggml"
        return str(self.dtype).replace("torch.", "")


def load_model(spec: ModelSpec, device, dtype, home: Path | None = None, weight_format: str = "dense",
               prefill_dense: bool = False):
    """prefill_dense: quantized layers keep a dense copy of their weights for prefill chunks
    (engine/weights/formats.py)."""
    import torch
    from transformers import AutoModelForCausalLM


    path = model_dir(spec, home)
    if not is_ready(spec, home):
        raise ModelsError(not_ready_message(spec, home))
    weight_format = canonical_format(weight_format)
    gguf = gguf_file(spec, home) if weight_format in GGUF_FORMATS + ("llamacpp",) else None
    if weight_format == "llamacpp":
        return load_llamacpp(spec, gguf, home)
    if weight_format in GGUF_FORMATS and spec.gguf_file and gguf is None:
        raise ModelsError(missing_gguf_message(spec, weight_format, home))
    # A vnni model in fp32 whose format cache exists takes every float tensor from that cache (fp32): the model
    # from the bf16 files is only its skeleton and the source of the int8 prefill copy (bf16 widens to fp32
    # exactly), so it is loaded in bf16 — ~3 GB less at the peak of a start for the 1.5B.
    skeleton = (weight_format in VNNI_FORMATS and dtype == torch.float32 and torch.device(device).type == "cpu"
                and str(model_config(spec, home).dtype).endswith("bfloat16")
                and format_cache_file(cache_dir(spec, home), weight_format, dtype).is_file())
    try:
        # Eager attention's arithmetic (measured faster than sdpa for the short passes of decoding on CPU),
        # without its copy of keys and values per query head (engine/weights/attention.py).
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16 if skeleton else dtype,
                                                     attn_implementation=register_attention())
    except Exception as exc:  # corrupt or half-written files
        raise ModelsError(
            f"model files for {spec.name} in {path} could not be loaded ({exc}). "
            f"Run `codecue-models verify`, then `codecue-models fetch` to repair them.") from exc
    model.to(device).eval()
    with torch.no_grad():
        if weight_format != "dense" and torch.device(device).type == "cpu":
            # Not the output head: prefill asks it for one row only (its dense copy would be 0.3-0.5 GB unused).
            # The vnni formats quantize their copy to int8 (engine/weights/formats.py): no aligned float copy to keep.
            copy = (lambda v: v) if weight_format in VNNI_FORMATS else torch.Tensor.clone
            dense = ({k: copy(v) for k, v in dense_linear_weights(model).items() if k != "lm_head"}
                     if prefill_dense else None)
            if not apply_cached_format(model, spec, weight_format, dtype, device, gguf, home, rebuild=not skeleton):
                del model, dense  # the cache was unusable (and is gone): start again from the weights in `dtype`
                return load_model(spec, device, dtype, home, weight_format, prefill_dense)
            set_prefill_weights(model, dense)
            model.config.dtype = dtype
        for p in model.parameters():
            # Weights loaded from a memory-mapped file can sit misaligned; a copy measured faster to read.
            p.data = p.data.clone()
    return model


def load_llamacpp(spec: ModelSpec, gguf: Path | None, home: Path | None):
    """The GGUF in llama.cpp (engine/weights/llamacpp.py): its kernels behind CodeCue's decode loop."""

    if not llamacpp.available():
        raise ModelsError(f"weight format llamacpp needs llama-cpp-python: `pip install {llamacpp.PIP_REQUIREMENT}` "
                          f"(it builds llama.cpp for this CPU, ~4 minutes), or choose another format")
    if gguf is None:
        raise ModelsError(missing_gguf_message(spec, "llamacpp", home))
    try:
        return llamacpp_probe.load_checked(gguf, home, label=spec.name)
    except ValueError as exc:
        raise ModelsError(f"{exc}. Run `codecue-models verify`, then `codecue-models fetch` to repair it.") from exc


def apply_cached_format(model, spec: ModelSpec, weight_format: str, dtype, device, gguf, home: Path | None,
                        rebuild: bool = True) -> bool:
    """Quantizing (and reading the GGUF) takes tens of seconds on 2 cores: do it once, keep the result under the
    model's folder, and load that on later starts. rebuild=False: a model that is only a skeleton for the cache
    (not in `dtype`) is not formatted from its own weights; False comes back when the cache was unusable."""

    cached = format_cache_file(cache_dir(spec, home), weight_format, dtype)
    if cached.is_file():
        try:
            load_formatted(model, cached)
            return True
        except Exception as exc:  # a half-written or outdated cache: rebuild it
            log.warning("format cache %s unusable (%s); rebuilding it", cached, exc)
            cached.unlink(missing_ok=True)
    if not rebuild:
        return False
    try:
        apply_weight_format(model, weight_format, device, gguf)
    except ValueError as exc:
        raise ModelsError(f"{spec.name}: {exc}. Run `codecue-models verify`.") from exc
    try:
        save_formatted(model, cached)
    except OSError as exc:
        log.warning("could not cache the %s weights of %s (%s)", weight_format, spec.name, exc)
    return True


@runs_on_torch_thread  # where the engine will run its passes: one OpenMP pool for the process
def load_pair(name: str = "default", *, device: str | None = None, dtype: str | None = None,
              with_draft: bool | None = None, config: ModelsConfig | None = None, home: Path | None = None,
              target_weights: str | None = None, draft_weights: str | None = None,
              compile: bool | None = None, progress: bool = False) -> LoadedPair:
    """Load a pair in the formats this machine runs fastest (see engine/loading/choice.resolve_formats). Explicit
    arguments, then the engine's options (CODECUE_TARGET_WEIGHTS, CODECUE_DRAFT_WEIGHTS, CODECUE_DTYPE: engine/
    options.py), then models.toml decide; "auto" asks the calibration. with_draft: True loads the draft model, False
    never, None as the calibration says it pays. compile: compiled static steps for both models (None:
    `compile_wanted`)."""
    import torch
    from transformers import AutoTokenizer


    config = config or load_config()
    spec = config.pair(name)
    check_pair(spec, home, with_draft=with_draft is not False)  # missing files, or a draft of another vocabulary
    opts = options.current()
    dev = pick_device(device)
    choice, cal = resolve_formats(spec, dev, home, target_weights or opts.target_weights,
                                  draft_weights or opts.draft_weights, dtype or opts.dtype, progress)
    target_dtype = torch_dtype(choice.target_activations)
    target = load_model(spec.target, dev, target_dtype, home, choice.target_weights, choice.target_prefill_dense)
    load_draft = spec.draft is not None and (with_draft if with_draft is not None else choice.draft_model)
    draft_dtype = torch_dtype(choice.draft_activations) if load_draft else None
    draft = (load_model(spec.draft, dev, draft_dtype, home, choice.draft_weights, choice.draft_prefill_dense)
             if load_draft else None)
    size_prefill_chunks(cal, choice, target, draft if load_draft else None, opts.prefill_chunk)
    if choice.target_weights == "llamacpp":
        if torch_prefill.wanted(choice.target_prefill_torch, opts.torch_prefill):
            cached = format_cache_file(cache_dir(spec.target, home), "prefill-w8a8-v2", torch.float32)
            torch_prefill.attach(target, model_dir(spec.target, home), cached,
                                 from_tokens=choice.target_prefill_torch_from)
    tokenizer = AutoTokenizer.from_pretrained(model_dir(spec.target, home))
    costs = pass_costs_from(cal, choice) if cal is not None else None
    if compile is None:
        compile = compile_wanted(spec.compile, opts.compile, dev.type)
    compiled = False
    if compile and choice.target_weights != "llamacpp":
        compiled = attach(target, TARGET_WIDTHS, home=home or codecue_home(), progress=progress, label="target")
        if draft is not None and compiled:
            attach(draft, DRAFT_WIDTHS, last_only=True, home=home or codecue_home(), progress=progress, label="draft")
    if draft is not None and not compiled and hasattr(draft, "lm_head"):
        rows = draft_vocab.wanted(spec.draft_vocab)  # a compiled step keeps the head it captured
        order = (draft_vocab.frequency_order(tokenizer, home or codecue_home())
                 if rows and spec.draft_vocab_order == "frequency" else None)
        draft_vocab.trim(draft, rows, order)
    if not compiled:
        for model in (target, draft):  # built now: its weights move into one arena while loading, not in a request
            if model is not None:
                lean_step_for(model)
    return LoadedPair(spec=spec, target=target, draft=draft, tokenizer=tokenizer, device=dev, dtype=target_dtype,
                      target_weights=choice.target_weights, draft_weights=choice.draft_weights if load_draft else None,
                      draft_dtype=draft_dtype, costs=costs, calibration=cal, choice=choice, compiled=compiled)


def compile_wanted(pair_setting: bool | None, setting: bool | None, device_type: str) -> bool:
    """setting (CODECUE_COMPILE: EngineOptions.compile), else the pair's `compile`, else on a GPU only: there CUDA
    graphs take a pass from launch-bound to weight-bound (docs/performance.md); on CPU the calibrated kernels and
    the lean step beat it."""
    if setting is not None:
        return setting
    return pair_setting if pair_setting is not None else device_type == "cuda"


def torch_dtype(activations: str):
    """The dtype of what a model hands back: llama.cpp's logits are fp32."""
    import torch

    return torch.float32 if activations == "ggml" else getattr(torch, activations)


