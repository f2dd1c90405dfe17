"""What a load takes from this machine's calibration (engine/calibration/measurements.py): the formats and
activation dtypes of both models, the pass costs the drafting policy plans with, the prefill chunk of a llama.cpp
model, and the target's prefill rate (which sizes the server's prompts)."""
from __future__ import annotations

import logging
from pathlib import Path

from engine.calibration.measurements import ACTIVATIONS, Choice, choose, formats_here
from engine.calibration.run import CalibrationCrashed, calibration_for
from engine.decode.pass_costs import PassCosts
from engine.paths import codecue_home
from engine.store.config import ModelsError, PairSpec, gguf_file
from engine.store.local import model_config
from engine.weights import llamacpp, vnni
from engine.weights.formats import VNNI_FORMATS, canonical_format
from engine.weights.llamacpp import LlamaCppModel, prefill_chunk_for

log = logging.getLogger(__name__)


def resolve_formats(spec: PairSpec, device, home: Path | None, target_weights: str | None, draft_weights: str | None,
                    dtype: str | None, progress: bool = False, force: bool = False):
    """Formats and dtypes to load, from explicit settings (None: models.toml's) or this machine's calibration:
    returns (choice, calibration or None). A GPU takes dense bf16 (its int kernels are not wired here). force:
    measure again even where a table is cached (`codecue-models calibrate`)."""
    target_weights = canonical_format(target_weights or spec.target_weights)
    draft_weights = canonical_format(draft_weights or spec.draft_weights)
    dtype = dtype or spec.activations
    if {target_weights, draft_weights} & set(VNNI_FORMATS) and device.type == "cpu":
        if not vnni.offered():
            raise ModelsError("weight formats vnni and vnni4 need a CPU with AVX-512 VNNI or AVX2 where their kernel "
                              "builds (a C++ compiler; engine/weights/vnni.py): not here. Choose another format with "
                              "CODECUE_TARGET_WEIGHTS / CODECUE_DRAFT_WEIGHTS, or `auto`")
    if device.type == "cuda":
        act = "bfloat16" if dtype == "auto" else dtype
        return Choice("dense", act, "dense" if spec.draft else None, act if spec.draft else None, spec.draft is not None), None
    if "auto" not in (target_weights, draft_weights, dtype):
        return Choice(target_weights, activations_of(target_weights, dtype), draft_weights if spec.draft else None,
                      activations_of(draft_weights, dtype) if spec.draft else None, spec.draft is not None), None
    draft_config = model_config(spec.draft, home) if spec.draft else None
    # llama.cpp's kernels compete where llama-cpp-python is installed and the GGUF is on disk, when the format
    # is left to the calibration; they are timed on the real file.
    with_llamacpp = dtype == "auto" and llamacpp_available()
    ggufs = {role: gguf_file(model, home) for role, model in (("target", spec.target), ("draft", spec.draft))
             if model is not None and with_llamacpp}
    try:
        cal = calibration_for(home or codecue_home(), model_config(spec.target, home), draft_config, str(device),
                              force=force, progress=progress,
                              gguf_files={r: p for r, p in ggufs.items() if p is not None})
    except CalibrationCrashed as exc:
        raise ModelsError(str(exc)) from exc
    here = formats_here(str(device))

    def candidates(asked: str, role: str) -> tuple:
        if asked != "auto":
            return (asked,)
        return here[role] + (("llamacpp",) if ggufs.get(role) is not None else ())
    choice = choose(cal, candidates(target_weights, "target"), candidates(draft_weights, "draft"),
                    ACTIVATIONS if dtype == "auto" else (dtype,))
    if draft_weights != "auto" and spec.draft:
        choice.draft_model = True  # asked for by name: load it even where it does not pay
    return choice, cal


def activations_of(weights: str, dtype: str) -> str:
    """llama.cpp chooses its own activation types; torch formats run in the asked dtype."""
    return "ggml" if weights == "llamacpp" else dtype


def llamacpp_available() -> bool:
    return llamacpp.available()


def size_prefill_chunks(cal, choice, target, draft, pinned: int | None = None) -> None:
    """A llama.cpp model prefills in chunks that take at most a few seconds at its calibrated prefill rate
    (engine/weights/llamacpp.prefill_chunk_for), or of `pinned` tokens: what a cancelled pass the next request does
    not share can waste."""

    for role, model, weights in (("target", target, choice.target_weights), ("draft", draft, choice.draft_weights)):
        if isinstance(model, LlamaCppModel):
            row = cal.get(role, weights, "ggml") if cal is not None else None
            model.prefill_chunk = prefill_chunk_for(row.prefill_tok_s if row is not None else 0.0, pinned)
            log.info("%s prefills in chunks of %d tokens (%s)", role, model.prefill_chunk,
                     f"measured {row.prefill_tok_s:.0f} tok/s" if row is not None else "not calibrated")


def pass_costs_from(cal, choice):
    """The calibrated pass costs of the chosen formats, for the drafting policy (engine/decode/policy.py)."""

    target = cal.get("target", choice.target_weights, choice.target_activations)
    draft = cal.get("draft", choice.draft_weights, choice.draft_activations) if choice.draft_weights else None
    if target is None:
        return None
    if draft is None:
        return PassCosts(verify_ms=dict(target.pass_ms))
    return PassCosts(verify_ms=dict(target.pass_ms), draft_ms=draft.pass_ms[1],
                     draft_pass_ms=dict(draft.pass_ms) if draft.complete else None,
                     draft_prefill_ms=1000 / draft.prefill_used_tok_s if draft.complete else None)


def target_prefill_tok_s(cal, choice) -> float | None:
    """The chosen target's calibrated prefill rate (tokens/s, through whichever path the calibration chose);
    None where nothing was measured (formats given by name, a GPU)."""
    row = cal.get("target", choice.target_weights, choice.target_activations) if cal is not None else None
    return row.prefill_used_tok_s if row is not None and row.prefill_tok_s > 0 else None
