"""`codecue-bench bound`: how fast speculation could be, at best, on these prompts with these drafters on this machine.

Target alone writes each prompt's completion (greedy; a single line stops at its end). The draft model then reads
prompt and completion in one pass: while its drafts are right, what it would draft is what it predicts from the true
text, so that one pass says how far a draft started at any position would be accepted. The prompt lookup proposes
from every position as the engine's LookupDrafter does (latest match of the last 2-4 tokens). With this machine's
pass costs timed in the same run, the fastest plan that knows every outcome in advance (a dynamic programme over
positions: each pass plain, a lookup draft cut anywhere, or K tokens of the draft model) is a bound no policy
choosing one of these two drafters per pass at these costs can beat. Auto mixes them inside a pass (the draft
model's lookup extension, its steps checking lookup guesses): the second bound lets a pass's drafts be any mix of
the draft model's tokens (a step each) and lookup tokens (free: the draft model's catch-up over them is not
charged), which no policy over these two drafters can beat. Not modelled: the workspace index's lookups. Next to
the bounds: the best fixed plans, and the mixed bound with the draft model's step at half its cost or with verify
rows free (as on a bandwidth-bound GPU): which cost would have to fall for a target to come within reach; and the
draft model's ceiling, its best K with every draft right. `--costs-from` prices the same outcomes again at the pass
costs an engine bench JSON recorded (`codecue-bench engine --json`): on a shared VM the host's memory bandwidth moves
target alone's one-token pass from minute to minute and not the verify rows, so a bound read at one minute's costs
says little of another's.

    codecue-bench bound [--pair default] [--prompts FILE] [--max-new-tokens 64] [--limit N] [--rounds 2]
                        [--costs-from ENGINE_BENCH.json ...] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from engine.calibration.measurements import describe_machine, machine_here
from engine.decode.drafters import LookupDrafter
from engine.decode.pass_costs import interpolate
from engine.engine import Engine
from engine.loading.pair import load_pair
from engine.types import CompletionRequest
from engine.weights import draft_vocab, torch_thread
from engine.weights.prefill_plan import common_prefix_length

from .engine_bench import CONTEXT_TEXT, pass_costs
from .side_by_side import first_line_done, time_side_by_side

MAX_K = 8
DEFAULT_PROMPTS = Path(__file__).resolve().parent.parent / "docs" / "bench-prompts.jsonl"


@dataclass
class Trace:
    """One completion as the drafters would have met it, position by position."""
    kind: str
    tokens: int  # the completion's length
    model_right: list[int]  # from each position: how many draft model tokens in a row would be accepted (<= MAX_K)
    lookup: list[tuple[int, int]]  # from each position: (tokens the lookup offers, how many would be accepted)


@dataclass
class Costs:
    verify_ms: dict[int, float]  # the target's pass by width (1 = plain decoding)
    draft_ms: float  # the draft model's one-token step

    def verify(self, width: int) -> float:
        return interpolate(self.verify_ms, width)


def runs_of_right(right: list[bool], cap: int = MAX_K) -> list[int]:
    """For each position, how many of the flags from there on are True in a row (at most cap)."""
    out, run = [0] * len(right), 0
    for i in range(len(right) - 1, -1, -1):
        run = run + 1 if right[i] else 0
        out[i] = min(run, cap)
    return out


def lookup_outcomes(prompt: list[int], completion: list[int], cap: int = MAX_K) -> list[tuple[int, int]]:
    """For each position of the completion: (tokens the engine's prompt lookup offers there, how many are right)."""
    lookup, text, out = LookupDrafter(), prompt + completion, []
    for i in range(len(completion)):
        here = len(prompt) + i
        offered = lookup.propose(text[:here], cap, lambda: False).tokens
        out.append((len(offered), common_prefix_length(offered, text[here:])))
    return out


def pass_options(trace: Trace, i: int, costs: Costs, max_k: int = MAX_K):
    """(ms, tokens gained) of every pass that could start at position i."""
    yield costs.verify(1), 1
    offered, right = trace.lookup[i]
    for cut in range(1, offered + 1):
        yield costs.verify(cut + 1), min(right, cut) + 1
    for k in range(1, max_k + 1):
        yield k * costs.draft_ms + costs.verify(k + 1), min(trace.model_right[i], k) + 1


def fastest_ms(trace: Trace, costs: Costs, max_k: int = MAX_K) -> float:
    """The clairvoyant plan's milliseconds for the whole completion."""
    n = trace.tokens
    best = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        best[i] = min(ms + best[min(n, i + gained)] for ms, gained in pass_options(trace, i, costs, max_k))
    return best[0]


def mixed_fastest_ms(trace: Trace, costs: Costs, max_drafts: int = MAX_K) -> float:
    """The clairvoyant plan when a pass's drafts may mix the drafters: a draft model token costs a step, lookup tokens
    (any part of the offer from where the text has got to) cost nothing, and a pass verifies up to max_drafts."""
    n = trace.tokens
    # best[i][w]: the fastest rest of the completion from position i with w right drafts waiting for a verify; at the
    # end, those drafts' verify
    best = [[0.0] * (max_drafts + 1) for _ in range(n)] + [[costs.verify(w + 1) if w else 0.0
                                                           for w in range(max_drafts + 1)]]
    for i in range(n - 1, -1, -1):
        for w in range(max_drafts + 1):
            ms = costs.verify(w + 1) + best[i + 1][0]  # the target verifies the drafts and writes position i itself
            room = max_drafts - w
            if room and trace.model_right[i]:
                ms = min(ms, costs.draft_ms + best[i + 1][w + 1])
            right = min(trace.lookup[i][1], room, n - i)
            for taken in range(1, right + 1):
                ms = min(ms, best[i + taken][w + taken])
            best[i][w] = ms
    return best[0][0]


def fixed_plan_ms(trace: Trace, costs: Costs, k: int, lookup_first: bool) -> float:
    """A plan that does the same everywhere: the draft model's K tokens each pass (K = 0: target alone); with
    lookup_first, the lookup's whole offer wherever it has one."""
    i, ms = 0, 0.0
    while i < trace.tokens:
        offered, right = trace.lookup[i]
        if lookup_first and offered:
            ms, i = ms + costs.verify(offered + 1), i + right + 1
        elif k:
            ms, i = ms + k * costs.draft_ms + costs.verify(k + 1), i + min(trace.model_right[i], k) + 1
        else:
            ms, i = ms + costs.verify(1), i + 1
    return ms


def every_draft_right_ms(trace: Trace, costs: Costs, k: int) -> float:
    """The draft model's K tokens each pass as if every one were accepted: its ceiling at these costs, whatever its
    acceptance."""
    return fixed_plan_ms(Trace(trace.kind, trace.tokens, [MAX_K] * trace.tokens, [(0, 0)] * trace.tokens), costs, k,
                         False)


def costs_of(named: dict) -> Costs | None:
    """Costs from pass times named as codecue_bench.engine_bench.pass_costs names them (target_N for N tokens,
    draft_1; ms); None without target_1 and draft_1."""
    widths = {int(name.removeprefix("target_")): ms for name, ms in named.items()
              if name.removeprefix("target_").isdigit() and isinstance(ms, (int, float))}
    if 1 not in widths or not isinstance(named.get("draft_1"), (int, float)):
        return None
    return Costs(widths, float(named["draft_1"]))


def costs_from_bench(path: Path) -> Costs:
    """The pass costs an engine bench JSON recorded (its `pass_costs`)."""
    how_to = "write one with `codecue-bench engine --json FILE`"
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(f"codecue-bench bound: cannot read {path} as an engine bench JSON ({error}); {how_to}")
    costs = costs_of((report.get("pass_costs") if isinstance(report, dict) else None) or {})
    if costs is None:
        raise SystemExit(f"codecue-bench bound: {path} has no pass costs (target_1 and draft_1 under \"pass_costs\"); "
                         f"{how_to}")
    return costs


def speedups(traces: list[Trace], costs: Costs) -> dict[str, dict[str, float | int]]:
    """Per prompt kind (and "all"): each plan's speed over target alone."""
    # Target alone's passes cost the same in every what-if: only the draft step or the verify rows change.
    what_ifs = {"bound, drafts mixed in a pass": costs,
                "mixed bound, draft step x0.5": Costs(costs.verify_ms, costs.draft_ms / 2),
                "mixed bound, verify rows free": Costs({1: costs.verify(1), 2: costs.verify(1)}, costs.draft_ms)}
    table: dict[str, dict[str, float | int]] = {}
    for kind in sorted({t.kind for t in traces}) + ["all"]:
        chosen = [t for t in traces if kind in ("all", t.kind)]
        alone = sum(fixed_plan_ms(t, costs, 0, False) for t in chosen)
        row = {}
        by_k = {k: alone / sum(fixed_plan_ms(t, costs, k, False) for t in chosen) for k in range(1, MAX_K + 1)}
        best_k = max(by_k, key=by_k.get)
        row["draft model, its best fixed K"] = by_k[best_k]
        row["  (that K)"] = best_k
        row["draft model, every draft right, its best K"] = max(
            alone / sum(every_draft_right_ms(t, costs, k) for t in chosen) for k in range(1, MAX_K + 1))
        row["lookup wherever it offers, else target"] = alone / sum(fixed_plan_ms(t, costs, 0, True) for t in chosen)
        row["lookup, else the draft model at that K"] = alone / sum(fixed_plan_ms(t, costs, best_k, True)
                                                                    for t in chosen)
        row["bound"] = alone / sum(fastest_ms(t, costs) for t in chosen)
        for name, what_if in what_ifs.items():
            row[name] = alone / sum(mixed_fastest_ms(t, what_if) for t in chosen)
        table[kind] = row
    return table


def record(engine, prompts: list[dict], max_new_tokens: int) -> list[Trace]:
    """Target alone's completion of each prompt (single lines stopped at their end), and what each drafter would have
    done at every position."""
    import torch



    draft = engine.pair.draft
    traces = []
    for prompt in prompts:
        ids = engine.encode_fim(prompt["prefix"], prompt["suffix"])
        stop = first_line_done if prompt["kind"] == "line" else None  # as the server asks for a single line
        completion = engine.complete(CompletionRequest(ids, max_new_tokens, drafter="none", stop=stop)).token_ids
        draft_vocab.cover(draft, ids)  # a trimmed head reaches the prompt's ids, as the drafter's does
        with torch.inference_mode():  # the head over the completion's rows only: all 150k logits per row add up
            hidden = draft.model(input_ids=torch.tensor([ids + completion])).last_hidden_state[0]
            predicted = draft.lm_head(hidden[len(ids) - 1:len(ids) + len(completion) - 1]).argmax(-1).tolist()
        right = [p == t for p, t in zip(predicted, completion)]
        traces.append(Trace(prompt["kind"], len(completion), runs_of_right(right),
                            lookup_outcomes(ids, completion)))
    return traces


def measured_costs(pair, engine, rounds: int = 3) -> Costs:
    """Each pass's best time over a few rounds of all of them: on a noisy machine one slow second would otherwise
    price one width alone (a one-token pass timed at 36 ms next to a 9-token one at 59 made drafting look cheap)."""

    ids = engine.encode(CONTEXT_TEXT * 400)[:512]  # passes after 512 tokens of context, as a hole's are
    widths = (1, 2, 4, MAX_K + 1)
    best = {name: float("inf") for name in [f"target_{n}" for n in widths] + ["draft_1"]}
    for _ in range(rounds):
        timed = torch_thread.run(pass_costs, pair, ids, MAX_K, 2, False)
        best = {name: min(ms, timed[name]) for name, ms in best.items()}
    return costs_of(best)


def measured_auto(engine, prompts: list[dict], max_new_tokens: int, rounds: int = 2) -> dict[str, float]:
    """The engine's default (auto) over target alone per prompt kind, timed as the side-by-side benches time them
    (each prompt made ready untimed first, single lines stopped at their end, the order reversed every other round;
    auto's output must equal target alone's)."""

    modes = (("target", "target", "engine", True), ("auto", "auto", "engine", True))
    seconds = time_side_by_side({"engine": engine}, modes, rounds, lines_end=True, prompts=prompts,
                                max_new_tokens=max_new_tokens)
    kinds = {kind for kind, _ in seconds}
    ratios = {kind: seconds[kind, "target"] / seconds[kind, "auto"] for kind in kinds}
    ratios["all"] = (sum(seconds[kind, "target"] for kind in kinds) / sum(seconds[kind, "auto"] for kind in kinds))
    return ratios


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="codecue-bench bound", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="default")
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS, help="JSON lines {name, kind, prefix, suffix}")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--limit", type=int, default=0, help="use only the first N prompts")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of auto and target alone timed side by side")
    parser.add_argument("--costs-from", type=Path, action="append", default=[],
                        help="an engine bench JSON: price the same outcomes at its pass costs too (repeatable)")
    parser.add_argument("--json", help="write the table and the costs here")
    args = parser.parse_args(argv)
    priced_at = {str(path): costs_from_bench(path) for path in args.costs_from}  # a bad file fails before loading


    pair = load_pair(args.pair, device="cpu", dtype=None, with_draft=True)
    machine = machine_here("cpu")
    print(f"machine: {describe_machine(machine)}", flush=True)
    if pair.draft is None or not hasattr(pair.draft, "model"):
        raise SystemExit("codecue-bench bound: needs the pair's draft model as a torch model")
    engine = Engine(pair)
    prompts = [json.loads(line) for line in args.prompts.read_text().splitlines() if line.strip()]
    prompts = prompts[:args.limit] if args.limit else prompts
    costs = measured_costs(pair, engine)
    traces = record(engine, prompts, args.max_new_tokens)
    table = speedups(traces, costs)
    for kind, ratio in measured_auto(engine, prompts, args.max_new_tokens, args.rounds).items():
        table[kind]["auto (the default), measured"] = ratio
    print(f"pass costs, ms: target {', '.join(f'{w}: {ms:.1f}' for w, ms in costs.verify_ms.items())}; "
          f"draft model step {costs.draft_ms:.1f}")
    print_table(table)
    elsewhere = {}
    for path, other in priced_at.items():
        print(f"\nthe same outcomes priced at {path}'s pass costs, ms: target "
              f"{', '.join(f'{w}: {ms:.1f}' for w, ms in sorted(other.verify_ms.items()))}; draft model step "
              f"{other.draft_ms:.1f}")
        elsewhere[path] = {"verify_ms": other.verify_ms, "draft_ms": other.draft_ms,
                           "speedups": speedups(traces, other)}
        print_table(elsewhere[path]["speedups"])
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "verify_ms": costs.verify_ms,
                                               "draft_ms": costs.draft_ms, "speedups": table,
                                               "priced_at": elsewhere}, indent=2))
    return 0


def print_table(table: dict[str, dict[str, float | int]]) -> None:
    names = list(next(iter(table.values())))
    width = max(len(name) for name in names)
    print("x target alone".ljust(width) + "".join(kind.rjust(12) for kind in table))
    for name in names:
        print(name.ljust(width) + "".join(f"{table[kind][name]:12.3f}" if isinstance(table[kind][name], float)
                                          else f"{table[kind][name]:12d}" for kind in table))
