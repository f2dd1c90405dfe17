"""The calibration table as `codecue-models list/calibrate` and `codecue-lsp --check` print it
(engine/calibration/measurements.py)."""
from __future__ import annotations

from engine.calibration.measurements import (
    DRAFT_ALPHA,
    WIDTHS,
    Calibration,
    Choice,
    describe_machine,
)
from engine.decode.step_guesses import PRIOR_ALPHA, first_count
from engine.weights.formats import VNNI_FORMATS


def copy_kind(weights: str) -> str:
    """What a format's copy of the weights for prefill is (engine/weights/formats.py: set_prefill_weights)."""

    return "w8a8" if weights in VNNI_FORMATS else "dense"


def format_table(cal: Calibration, choice: Choice | None = None) -> str:
    lines = [f"calibration on {describe_machine(cal.key, f'; measured in {cal.seconds:.0f} s')}",
             f"{'model':7s} {'weights':8s} {'act':9s} " + " ".join(f"{f'{w} tok':>9s}" for w in WIDTHS)
             + f" {'prefill':>11s} {'1-line':>8s}"]
    for m in cal.measurements:
        cells = " ".join(f"{m.pass_ms[w]:7.1f}ms" if w in m.pass_ms else f"{'-':>9s}" for w in WIDTHS)
        dense = f" ({copy_kind(m.weights)} {m.prefill_dense_tok_s:.0f})" if m.prefill_dense_tok_s else ""
        dense += (f" (torch w8a8 {m.prefill_torch_tok_s:.3g}, faster from "
                  f"{m.prefill_torch_from or 'no'} tokens)" if m.prefill_torch_tok_s else "")
        dense += " (passes timed side by side)" if m.side_by_side else ""
        tail = (f" {m.prefill_tok_s:7.0f}t/s {m.single_line_ms():6.0f}ms{dense}" if m.complete
                else "  (screened out by a one-layer probe: slow; 1 tok is the probe's)" if m.probe_only
                else "  (screened out: slow)")
        lines.append(f"{m.role:7s} {m.weights:8s} {m.activations:9s} {cells}{tail}")
    if choice is not None:
        lines.append(chosen_line(cal, choice))
    return "\n".join(lines)


def chosen_line(cal: Calibration, choice: Choice) -> str:
    target = cal.get("target", choice.target_weights, choice.target_activations)
    draft = cal.get("draft", choice.draft_weights, choice.draft_activations) if choice.draft_weights else None
    cost = (f"; a short completion {target.drafted_line_ms(draft):.0f} ms (drafting where it pays)"
            if target is not None and target.complete else "")
    return (f"chosen: target {choice.target_weights}/{choice.target_activations}"
            + (f", draft {choice.draft_weights}/{choice.draft_activations}" if choice.draft_weights else "")
            + (f", prefill through {copy_kind(choice.target_weights)} weights" if choice.target_prefill_dense else "")
            + (f", prefill in torch w8a8 from {choice.target_prefill_torch_from} new tokens"
               if choice.target_prefill_torch else "")
            + (f"; draft model {'on' if choice.draft_model else 'off'} (expected "
               f"{choice.expected_draft_speedup:.2f}x at {DRAFT_ALPHA:.0%} acceptance)" if choice.draft_weights else "")
            + (guesses_note(draft) if choice.draft_model and draft is not None and draft.complete else "")
            + cost)


def guesses_note(draft) -> str:
    """How many lookup guesses the draft model's steps check at first (engine/decode/step_guesses.py), by its widths."""
    count = first_count(draft.pass_ms)
    return (f", its steps checking {count or 'no'} lookup guess{'es' if count != 1 else ''} at first "
            f"(its passes by width at a {PRIOR_ALPHA:.0%} guess rate)")
