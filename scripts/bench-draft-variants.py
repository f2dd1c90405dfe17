"""Would a cheaper draft model pay? Each variant of the 0.5B (layers skipped, weights at fewer bits, the MLP's
weakest input groups skipped) is run teacher-forced over target alone's completions of the prompts: its pick and
confidence at every position, against the target's token. Its draft step is priced by the bytes it would stream (a
step is memory-bound: `scripts/bench-pass-anatomy.py`), optimistically -- the step's fixed costs scaled too, and the
fewer-bit layouts as if their kernels existed -- and each variant's best fixed K replayed with this machine's
calibrated pass costs (codecue_bench/draft_replay.py). A variant pays only if its speed-up beats the draft model as
it is. The variants run on the dense weights (the GGUF's Q4_K grid, float32), so the first row is the baseline.

    .venv/bin/python scripts/bench-draft-variants.py [PROMPTS]     # ~5 minutes on 2 cores
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codecue_bench.draft_replay import fixed_k, speedup  # noqa: E402
from codecue_bench.engine_bench import request_kind  # noqa: E402
from codecue_bench.side_by_side import first_line_done  # noqa: E402
from engine import draft_vocab  # noqa: E402
from engine.engine import Engine  # noqa: E402
from engine.models import load_config, load_pair  # noqa: E402
from engine.types import CompletionRequest  # noqa: E402

BITS_NOW = 5.0  # the vnni4 format: 4 bits, fp16 scale and min per 32 weights


def affine(weight: torch.Tensor, bits: int, group: int) -> torch.Tensor:
    """weight rounded to `bits` per group of inputs, scale and min from a small search for the least squared error
    (llama.cpp's make_qkx does the same)."""
    rows, cols = weight.shape
    x = weight.reshape(rows, cols // group, group)
    low, high = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
    levels = 2 ** bits - 1
    best, best_error = None, None
    for shrink_low in (0.0, 0.05, 0.1, 0.15, 0.2):
        for shrink_high in (0.0, 0.05, 0.1):
            lo, hi = low + (high - low) * shrink_low, high - (high - low) * shrink_high
            scale = (hi - lo).clamp_min(1e-12) / levels
            y = ((x - lo) / scale).round().clamp(0, levels) * scale + lo
            error = ((y - x) ** 2).sum(-1, keepdim=True)
            if best is None:
                best, best_error = y, error
            else:
                better = error < best_error
                best, best_error = torch.where(better, y, best), torch.minimum(error, best_error)
    return best.reshape(rows, cols)


class WeakGroupsSkipped:
    """A pre-hook zeroing the weakest `fraction` of a projection's input groups of 32 (by L2 norm), per token: the
    weights of a zero group need not be read."""

    def __init__(self, fraction: float):
        self.fraction = fraction

    def __call__(self, module, args):
        x = args[0]
        groups = x.reshape(*x.shape[:-1], x.shape[-1] // 32, 32)
        norms = groups.norm(dim=-1)
        dropped = int(norms.shape[-1] * self.fraction)
        threshold = norms.kthvalue(dropped, dim=-1, keepdim=True).values
        return (torch.where((norms > threshold)[..., None], groups, 0.0).reshape(x.shape),)


# name -> (layers skipped, (bits, group, bits a weight with its scales) by projection ("*": every one), the fraction
# of input groups skipped by projection)
VARIANTS = {
    "as loaded (Q4_K grid, 5 bits)": ([], {}, {}),
    "last layer skipped": ([23], {}, {}),
    "last two layers skipped": ([22, 23], {}, {}),
    "3 bits per 32, byte sub-scales (3.6 bits)": ([], {"*": (3, 32, 3.625)}, {}),
    "3 bits per 16, byte sub-scales (4.1 bits)": ([], {"*": (3, 16, 4.125)}, {}),
    "MLP 3 bits per 16, attention as is": ([], {"gate_proj": (3, 16, 4.125), "up_proj": (3, 16, 4.125),
                                                "down_proj": (3, 16, 4.125)}, {}),
    "down_proj: weakest 30 % of input groups skipped": ([], {}, {"down_proj": 0.3}),
}


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "bench-prompts.jsonl"
    prompts = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    engine = Engine(load_pair("default", device="cpu", dtype=None, with_draft=False))  # target alone writes
    costs = engine.costs
    written = []
    for prompt in prompts:
        ids = engine.encode_fim(prompt["prefix"], prompt["suffix"])
        stop = first_line_done if prompt["kind"] == "line" else None
        tokens = engine.complete(CompletionRequest(ids, 64, kind=request_kind(prompt["kind"]), stop=stop)).token_ids
        written.append((prompt["kind"], engine._draft_view()(ids), tokens))
    view_pair = load_pair("default", device="cpu", dtype="float32", with_draft=True, draft_weights="dense")
    model = view_pair.draft
    layers = list(model.model.layers)
    linears = {name: module for name, module in model.model.layers.named_modules()
               if isinstance(module, torch.nn.Linear)}
    dense = {name: module.weight.detach().clone() for name, module in linears.items()}
    head_rows = draft_vocab.wanted(load_config().pair("default").draft_vocab)
    head_bytes = head_rows * model.config.hidden_size * BITS_NOW / 8
    layer_params = {name: weight.numel() for name, weight in dense.items()}
    base_bytes = sum(layer_params.values()) * BITS_NOW / 8 + head_bytes
    print(f"pass costs: target {[round(costs.verify(w), 1) for w in (1, 2, 4, 9)]} ms at 1 / 2 / 4 / 9 tokens, "
          f"draft step {costs.draft():.1f} ms ({base_bytes / 1e6:.0f} MB)")
    for name, (skipped_layers, bits, skipped_groups) in VARIANTS.items():
        model.model.layers = torch.nn.ModuleList([layer for i, layer in enumerate(layers) if i not in skipped_layers])
        model.config.num_hidden_layers = len(model.model.layers)
        for index, layer in enumerate(model.model.layers):
            layer.self_attn.layer_idx = index
        hooks, step_bytes = [], head_bytes
        for lname, module in linears.items():
            if int(lname.split(".")[0]) in skipped_layers:
                continue
            kind = lname.split(".")[-1]
            rule = bits.get(kind, bits.get("*"))
            module.weight.data.copy_(affine(dense[lname], rule[0], rule[1]) if rule else dense[lname])
            weight_bits = rule[2] if rule else BITS_NOW
            if kind in skipped_groups:
                hooks.append(module.register_forward_pre_hook(WeakGroupsSkipped(skipped_groups[kind])))
                weight_bits *= 1 - skipped_groups[kind]
            step_bytes += layer_params[lname] * weight_bits / 8
        completions_by_kind: dict[str, list] = {}  # kind -> each completion's rows
        with torch.inference_mode():
            for kind, seen, tokens in written:
                draft_vocab.cover(model, seen + tokens)
                logits = model(input_ids=torch.tensor([seen + tokens[:-1]])).logits[0, len(seen) - 1:].float()
                probs = torch.softmax(logits, dim=-1)
                picks = logits.argmax(-1).tolist()
                completions_by_kind.setdefault(kind, []).append(
                    [(pick, float(probs[i, pick]), token) for i, (pick, token) in enumerate(zip(picks, tokens))])
        for hook in hooks:
            hook.remove()
        step_ms = costs.draft() * step_bytes / base_bytes
        every = [rows for completions in completions_by_kind.values() for rows in completions]
        right = sum(pick == token for rows in every for pick, _, token in rows)
        positions = sum(len(rows) for rows in every)
        ratios = []
        for kind, completions in sorted(completions_by_kind.items()) + [("all", every)]:
            best = max(range(1, 9), key=lambda k: speedup(completions, fixed_k(k), step_ms, costs.verify))
            ratios.append(f"{kind} {speedup(completions, fixed_k(best), step_ms, costs.verify):.2f}x (K={best})")
        print(f"{name:48s} right {right}/{positions} ({right / positions:.1%}), step {step_ms:.1f} ms: "
              + "  ".join(ratios), flush=True)
    model.model.layers = torch.nn.ModuleList(layers)
    model.config.num_hidden_layers = len(layers)


if __name__ == "__main__":
    main()
